//! [`WorkerPool`]: a fixed set of threads executing requests from every connection, fed through
//! a bounded queue. A full queue blocks the connection reader that submits (backpressure: it
//! stops reading its socket), so the queue, not the d.node's memory, absorbs bursts.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Mutex;

use crate::error::DnodeError;

/// Jobs queued per worker beyond the ones running: a little slack so a worker never idles
/// while a reader is between two submits.
const QUEUE_PER_WORKER_MAX: usize = 4;

pub(crate) type Job = Box<dyn FnOnce() + Send + 'static>;

#[derive(Debug)]
pub(crate) struct WorkerPool {
    /// `None` after shutdown.
    queue: Mutex<Option<SyncSender<Job>>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

impl WorkerPool {
    pub(crate) fn start(workers: usize) -> Result<WorkerPool, DnodeError> {
        let (tx, rx) = sync_channel::<Job>(workers * QUEUE_PER_WORKER_MAX);
        let rx = Arc::new(Mutex::new(rx));
        let pool = WorkerPool {
            queue: Mutex::new(Some(tx)),
            workers: Mutex::new(Vec::with_capacity(workers)),
        };
        for i in 0..workers {
            let rx = rx.clone();
            let handle = std::thread::Builder::new()
                .name(format!("weft-dnode-w{i}"))
                .spawn(move || work(&rx))
                .map_err(|e| DnodeError::Thread {
                    name: "worker",
                    source: e,
                })?;
            pool.workers.lock().push(handle);
        }
        Ok(pool)
    }

    /// Queue `job`, waiting while the queue is full. `Err(job)` after shutdown.
    pub(crate) fn submit(&self, job: Job) -> Result<(), Job> {
        let Some(tx) = self.queue.lock().clone() else {
            return Err(job);
        };
        tx.send(job).map_err(|e| e.0)
    }

    /// Stop taking jobs, let the workers finish the queued ones, and join them. Submitters must
    /// be gone (or about to give up) first: a submit blocked on a full queue holds the queue open.
    pub(crate) fn shutdown(&self) {
        drop(self.queue.lock().take());
        let me = std::thread::current().id();
        for handle in std::mem::take(&mut *self.workers.lock()) {
            // A job never owns the pool, but never join ourselves if one did.
            if handle.thread().id() != me {
                let _ = handle.join();
            }
        }
    }
}

fn work(rx: &Mutex<Receiver<Job>>) {
    loop {
        // The lock is held only while waiting for a job, not while running it.
        let job = rx.lock().recv();
        match job {
            Ok(job) => job(),
            Err(_) => return,
        }
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        self.shutdown();
    }
}
