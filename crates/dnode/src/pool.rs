//! [`WorkerPool`]: a fixed set of threads executing requests from every connection, fed through
//! a bounded queue. A full queue blocks the connection reader that submits (backpressure: it
//! stops reading its socket), so the queue, not the d.node's memory, absorbs bursts.
//!
//! The queue is a lock and two condition variables, not a channel: a worker that finds it
//! empty sleeps at once (a channel's receiver spins and yields first, which on a 2-core machine
//! takes the core from the reader and the workers that have work), and a submit wakes a worker
//! only when one is asleep.

use std::collections::VecDeque;
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use crate::error::DnodeError;

/// Jobs queued per worker beyond the ones running: a little slack so a worker never idles
/// while a reader is between two submits.
const QUEUE_PER_WORKER_MAX: usize = 4;

pub(crate) type Job = Box<dyn FnOnce() + Send + 'static>;

#[derive(Debug)]
pub(crate) struct WorkerPool {
    shared: Arc<Shared>,
    workers: Mutex<Vec<JoinHandle<()>>>,
}

#[derive(Debug)]
struct Shared {
    queue: Mutex<Queue>,
    /// Signalled when a job is queued and a worker sleeps, or at shutdown.
    job_ready: Condvar,
    /// Signalled when a job leaves a full queue, or at shutdown.
    room: Condvar,
    queue_max: usize,
}

struct Queue {
    jobs: VecDeque<Job>,
    /// Workers waiting for a job.
    idle: usize,
    /// No more jobs are taken; workers finish the queued ones and end.
    closed: bool,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("jobs", &self.jobs.len())
            .field("idle", &self.idle)
            .field("closed", &self.closed)
            .finish()
    }
}

impl WorkerPool {
    pub(crate) fn start(workers: usize) -> Result<WorkerPool, DnodeError> {
        let queue_max = workers * QUEUE_PER_WORKER_MAX;
        let pool = WorkerPool {
            shared: Arc::new(Shared {
                queue: Mutex::new(Queue {
                    jobs: VecDeque::with_capacity(queue_max),
                    idle: 0,
                    closed: false,
                }),
                job_ready: Condvar::new(),
                room: Condvar::new(),
                queue_max,
            }),
            workers: Mutex::new(Vec::with_capacity(workers)),
        };
        for i in 0..workers {
            let shared = pool.shared.clone();
            let handle = std::thread::Builder::new()
                .name(format!("weft-dnode-w{i}"))
                .spawn(move || shared.work())
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
        let s = &*self.shared;
        let mut q = s.queue.lock();
        while !q.closed && q.jobs.len() >= s.queue_max {
            s.room.wait(&mut q);
        }
        if q.closed {
            return Err(job);
        }
        q.jobs.push_back(job);
        if q.idle > 0 {
            s.job_ready.notify_one();
        }
        Ok(())
    }

    /// Stop taking jobs, let the workers finish the queued ones, and join them.
    pub(crate) fn shutdown(&self) {
        {
            let mut q = self.shared.queue.lock();
            q.closed = true;
            self.shared.job_ready.notify_all();
            self.shared.room.notify_all();
        }
        let me = std::thread::current().id();
        for handle in std::mem::take(&mut *self.workers.lock()) {
            // A job never owns the pool, but never join ourselves if one did.
            if handle.thread().id() != me {
                let _ = handle.join();
            }
        }
    }
}

impl Shared {
    fn work(&self) {
        loop {
            let job = {
                let mut q = self.queue.lock();
                loop {
                    if let Some(job) = q.jobs.pop_front() {
                        if q.jobs.len() + 1 == self.queue_max {
                            self.room.notify_one();
                        }
                        break job;
                    }
                    if q.closed {
                        return;
                    }
                    q.idle += 1;
                    self.job_ready.wait(&mut q);
                    q.idle -= 1;
                }
            };
            job();
        }
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn every_job_runs_once_and_shutdown_drains_the_queue() {
        let pool = WorkerPool::start(3).expect("start");
        let done = Arc::new(AtomicU64::new(0));
        for i in 0..1000u64 {
            let done = done.clone();
            pool.submit(Box::new(move || {
                done.fetch_add(i, Ordering::Relaxed);
            }))
            .map_err(|_| "refused")
            .expect("submit");
        }
        pool.shutdown();
        assert_eq!(done.load(Ordering::Relaxed), (0..1000u64).sum::<u64>());
        assert!(
            pool.submit(Box::new(|| {})).is_err(),
            "closed after shutdown"
        );
    }
}
