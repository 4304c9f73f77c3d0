//! A fixed pool of threads that run backend calls for every connection of one listener (NBD
//! or iSCSI).
//!
//! Why not `spawn_blocking` per request: at QD32 tokio's blocking pool grows to hundreds of
//! threads and hands consecutive requests to cold threads; a small fixed pool keeps the same
//! few threads warm and measured faster with fio (see the commit message). The queue needs no
//! bound of its own: every job holds an in-flight permit of its connection.

use std::collections::VecDeque;
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

/// One unit of blocking work.
pub(crate) type Job = Box<dyn FnOnce() + Send + 'static>;

#[derive(Default)]
struct Queue {
    jobs: VecDeque<Job>,
    closed: bool,
}

#[derive(Default)]
struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
}

/// Threads are joined on drop, after the queue has run dry.
pub(crate) struct WorkerPool {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for WorkerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerPool")
            .field("threads", &self.threads.len())
            .finish()
    }
}

impl WorkerPool {
    pub(crate) fn new(name: &str, threads: usize) -> std::io::Result<Self> {
        let shared = Arc::new(Shared::default());
        let mut handles = Vec::with_capacity(threads);
        for i in 0..threads {
            let shared = Arc::clone(&shared);
            let handle = std::thread::Builder::new()
                .name(format!("{name}-worker-{i}"))
                .spawn(move || work(&shared))?;
            handles.push(handle);
        }
        Ok(WorkerPool {
            shared,
            threads: handles,
        })
    }

    pub(crate) fn submit(&self, job: Job) {
        let mut queue = self.shared.queue.lock();
        assert!(!queue.closed, "submit after the pool was closed");
        queue.jobs.push_back(job);
        drop(queue);
        self.shared.ready.notify_one();
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        self.shared.queue.lock().closed = true;
        self.shared.ready.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn work(shared: &Shared) {
    loop {
        let job = {
            let mut queue = shared.queue.lock();
            loop {
                if let Some(job) = queue.jobs.pop_front() {
                    break job;
                }
                if queue.closed {
                    return;
                }
                shared.ready.wait(&mut queue);
            }
        };
        job();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[test]
    fn runs_every_job_before_drop_returns() {
        let count = Arc::new(AtomicUsize::new(0));
        let pool = WorkerPool::new("test", 3).expect("threads");
        for _ in 0..1000 {
            let count = Arc::clone(&count);
            pool.submit(Box::new(move || {
                count.fetch_add(1, Ordering::Relaxed);
            }));
        }
        drop(pool);
        assert_eq!(count.load(Ordering::Relaxed), 1000);
    }
}
