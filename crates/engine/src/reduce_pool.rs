//! The reduction pool: the threads that reduce destage's blocks (zero check, BLAKE3, the lz4
//! probe and lz4, the block CRC). The destager is one of them: it cuts a batch into parts,
//! queues all but the first for the pool's helper threads, reduces the first itself, then takes
//! back any part no helper has started yet, and waits for the rest. Results come back in block
//! order whatever thread computed them.
//!
//! `EngineConfig::reduction_threads` sizes it (the destager plus `reduction_threads - 1`
//! helpers; default: the machine's cores). The queue's lock is held only to push and pop
//! parts, never across reduction; blocks travel as `Bytes` slices of the write buffer's data
//! (a reference count, no copy). No I/O here.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};

use crate::reduce::{self, Reduced};

/// Below this many blocks (512 KiB) a batch is reduced on the calling thread alone: handing
/// parts to other threads costs wake-ups that a small batch does not repay. Over NBD a
/// destage batch is often one or two 1 MiB writes (QD8 written through): at 512 blocks, as
/// before, those were reduced by the destager alone while the helpers slept.
pub(crate) const PARALLEL_REDUCE_BLOCKS_MIN: usize = 128;
/// A part handed to a thread holds at least this many blocks (256 KiB of data, ~0.1 ms of
/// hashing): small enough that threads finishing at different times even out, big enough
/// to amortise a wake-up (tens of µs here).
const PART_BLOCKS_MIN: usize = 64;
/// Parts per thread of a big batch: more parts than threads, so a helper that is descheduled
/// (the machine is shared) leaves parts for the others to take.
const PARTS_PER_THREAD: usize = 4;
/// The most threads a pool starts, whatever the configuration asks.
pub(crate) const REDUCTION_THREADS_MAX: usize = 256;

/// One part of a batch: blocks `first..first + blocks.len()` of it.
struct Part {
    /// Which call of [`ReducePool::reduce`] it belongs to.
    batch: u64,
    first: usize,
    blocks: Vec<Bytes>,
    reply: mpsc::Sender<(usize, Vec<Reduced>)>,
}

#[derive(Default)]
struct Queue {
    parts: VecDeque<Part>,
}

#[derive(Default)]
struct Inner {
    queue: Mutex<Queue>,
    ready: Condvar,
    stop: AtomicBool,
    next_batch: AtomicU64,
}

/// The destager's reduction threads.
pub(crate) struct ReducePool {
    /// Threads that reduce, the caller included.
    threads: usize,
    inner: Arc<Inner>,
    helpers: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for ReducePool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReducePool")
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

impl ReducePool {
    /// A pool of `threads` reducing threads: the caller of [`ReducePool::reduce`] and
    /// `threads - 1` helpers named `weft-reduce`. 0 means one per core of the machine.
    pub fn new(threads: usize) -> std::io::Result<ReducePool> {
        let threads = match threads {
            0 => std::thread::available_parallelism().map_or(1, usize::from),
            n => n,
        }
        .min(REDUCTION_THREADS_MAX);
        let inner = Arc::new(Inner::default());
        let mut helpers = Vec::with_capacity(threads - 1);
        for _ in 1..threads {
            let inner = inner.clone();
            helpers.push(
                std::thread::Builder::new()
                    .name("weft-reduce".into())
                    .spawn(move || helper(&inner))?,
            );
        }
        Ok(ReducePool {
            threads,
            inner,
            helpers,
        })
    }

    /// Threads that reduce, the caller included.
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// Reduce every block (each exactly one block of data), in order.
    pub fn reduce(&self, blocks: &[Bytes]) -> Vec<Reduced> {
        let reduce_all =
            |part: &[Bytes]| -> Vec<Reduced> { part.iter().map(|b| reduce::reduce(b)).collect() };
        if self.threads == 1 || blocks.len() < PARALLEL_REDUCE_BLOCKS_MIN {
            return reduce_all(blocks);
        }
        let parts = (self.threads * PARTS_PER_THREAD)
            .min(blocks.len() / PART_BLOCKS_MIN)
            .max(2);
        let per_part = blocks.len().div_ceil(parts);
        let (tx, rx) = mpsc::channel();
        let batch = self.inner.next_batch.fetch_add(1, Ordering::Relaxed);
        let mut queued = 0;
        {
            let mut q = self.inner.queue.lock();
            for (i, chunk) in blocks.chunks(per_part).enumerate().skip(1) {
                q.parts.push_back(Part {
                    batch,
                    first: i * per_part,
                    blocks: chunk.to_vec(),
                    reply: tx.clone(),
                });
                queued += 1;
            }
        }
        self.inner.ready.notify_all();
        let mut out: Vec<Option<Vec<Reduced>>> = vec![None; queued + 1];
        out[0] = Some(reduce_all(&blocks[..per_part.min(blocks.len())]));
        // Parts of this batch no helper took yet: reduce them here rather than wait.
        loop {
            let part = {
                let mut q = self.inner.queue.lock();
                let at = q.parts.iter().position(|p| p.batch == batch);
                at.and_then(|at| q.parts.remove(at))
            };
            let Some(part) = part else { break };
            out[part.first / per_part] = Some(reduce_all(&part.blocks));
            queued -= 1;
        }
        drop(tx);
        for _ in 0..queued {
            let (first, reduced) = rx.recv().expect("a helper answers every part it took");
            out[first / per_part] = Some(reduced);
        }
        out.into_iter()
            .flat_map(|part| part.expect("every part reduced"))
            .collect()
    }
}

impl Drop for ReducePool {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::Release);
        {
            // Under the lock, so no helper misses the wake-up between its check and its wait.
            let _q = self.inner.queue.lock();
            self.inner.ready.notify_all();
        }
        for h in self.helpers.drain(..) {
            let _ = h.join();
        }
    }
}

/// A helper thread: take parts and reduce them until the pool is dropped.
fn helper(inner: &Inner) {
    loop {
        let part = {
            let mut q = inner.queue.lock();
            loop {
                if let Some(p) = q.parts.pop_front() {
                    break p;
                }
                if inner.stop.load(Ordering::Acquire) {
                    return;
                }
                inner.ready.wait(&mut q);
            }
        };
        let reduced: Vec<Reduced> = part.blocks.iter().map(|b| reduce::reduce(b)).collect();
        // The destager waits for it; it is gone only when the engine is.
        let _ = part.reply.send((part.first, reduced));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::BLOCK_SIZE_BYTES;

    /// Blocks of every kind: zero, compressible, random; each different.
    fn blocks(n: usize) -> Vec<Bytes> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        (0..n)
            .map(|i| {
                let mut b = vec![0u8; BLOCK_SIZE_BYTES];
                match i % 3 {
                    0 => {}
                    1 => {
                        b[..8].copy_from_slice(&(i as u64).to_le_bytes());
                        b[100..200].fill(7);
                    }
                    _ => {
                        for w in b.chunks_mut(8) {
                            x ^= x << 13;
                            x ^= x >> 7;
                            x ^= x << 17;
                            w.copy_from_slice(&x.to_le_bytes());
                        }
                    }
                }
                Bytes::from(b)
            })
            .collect()
    }

    #[test]
    fn every_pool_size_gives_the_serial_results_in_order() {
        for n in [1, 5, 511, 512, 513, 2048, 4099] {
            let input = blocks(n);
            let serial: Vec<Reduced> = input.iter().map(|b| reduce::reduce(b)).collect();
            for threads in [1, 2, 3, 8] {
                let pool = ReducePool::new(threads).unwrap();
                assert_eq!(pool.threads(), threads);
                assert_eq!(
                    pool.reduce(&input),
                    serial,
                    "{n} blocks on {threads} threads"
                );
                // Used again: the helpers are still there.
                assert_eq!(pool.reduce(&input), serial);
            }
        }
    }

    #[test]
    fn helpers_take_parts_and_stop_when_the_pool_is_dropped() {
        let pool = ReducePool::new(4).unwrap();
        let input = blocks(8192);
        let serial: Vec<Reduced> = input.iter().map(|b| reduce::reduce(b)).collect();
        for _ in 0..20 {
            assert_eq!(pool.reduce(&input), serial);
        }
        let inner = pool.inner.clone();
        drop(pool);
        assert!(inner.queue.lock().parts.is_empty());
        // Every helper has returned: only this test holds the shared state now.
        assert_eq!(Arc::strong_count(&inner), 1);
    }

    #[test]
    fn callers_at_once_each_get_their_own_results() {
        let pool = ReducePool::new(2).unwrap();
        let a = blocks(3000);
        let b: Vec<Bytes> = blocks(4000).into_iter().rev().collect();
        let serial =
            |input: &[Bytes]| -> Vec<Reduced> { input.iter().map(|x| reduce::reduce(x)).collect() };
        let (sa, sb) = (serial(&a), serial(&b));
        std::thread::scope(|s| {
            let ta = s.spawn(|| (0..10).all(|_| pool.reduce(&a) == sa));
            let tb = s.spawn(|| (0..10).all(|_| pool.reduce(&b) == sb));
            assert!(ta.join().unwrap());
            assert!(tb.join().unwrap());
        });
    }

    #[test]
    fn zero_threads_means_one_per_core() {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        assert_eq!(ReducePool::new(0).unwrap().threads(), cores);
    }
}
