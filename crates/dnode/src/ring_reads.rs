//! [`RingReads`]: a burst of planned chunk reads performed together through one io_uring, on
//! the thread that asks (a connection's reader). One `io_uring_enter` submits them all and
//! waits: no worker thread woken per read, no thread asleep in `pread` per read, and the
//! block layer sees the burst at once (one device notification for several reads).
//!
//! Safety contract: a buffer handed to the kernel stays allocated and unmoved until its
//! completion is reaped. [`RingReads::read_all`] returns only after every submitted read
//! completed; if the ring fails in a way that leaves reads in flight, their buffers are
//! leaked (never freed under the kernel) and the ring is retired.

use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;

use io_uring::{opcode, types, IoUring};
use weft_chunk::{ReadPlan, READ_ALIGN_BYTES};

/// Submission queue entries: the most reads in one burst.
pub(crate) const RING_ENTRIES: u32 = 64;

/// One read's outcome: the bytes read from the start of its span (fewer at the end of a short
/// file), or the error.
pub(crate) type ReadOutcome = io::Result<Vec<u8>>;

/// See the module doc.
pub(crate) struct RingReads {
    /// `None` once retired after a failure it cannot account for.
    ring: Option<IoUring>,
}

impl std::fmt::Debug for RingReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingReads")
            .field("usable", &self.ring.is_some())
            .finish()
    }
}

/// A 4 KiB-aligned buffer inside an over-allocated `Vec`.
struct Aligned {
    backing: Vec<u8>,
    shift: usize,
    len: usize,
}

impl Aligned {
    fn new(len: usize) -> Aligned {
        let align = READ_ALIGN_BYTES as usize;
        let backing = vec![0u8; len + align];
        let shift = backing.as_ptr().align_offset(align);
        Aligned {
            backing,
            shift,
            len,
        }
    }

    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.backing[self.shift..self.shift + self.len]
    }

    fn into_first(mut self, got: usize) -> Vec<u8> {
        self.backing.truncate(self.shift + got);
        self.backing.drain(..self.shift);
        self.backing
    }
}

impl RingReads {
    /// A ring, or the reason there is none (old kernel, seccomp): callers then read the usual
    /// way.
    pub(crate) fn new() -> io::Result<RingReads> {
        Ok(RingReads {
            ring: Some(IoUring::new(RING_ENTRIES)?),
        })
    }

    pub(crate) fn is_usable(&self) -> bool {
        self.ring.is_some()
    }

    /// Perform every plan's read (at most [`RING_ENTRIES`]); one outcome per plan, in order.
    pub(crate) fn read_all(&mut self, plans: &[&ReadPlan]) -> Vec<ReadOutcome> {
        assert!(
            plans.len() <= RING_ENTRIES as usize,
            "a burst fits the ring"
        );
        let Some(ring) = self.ring.as_mut() else {
            return plans.iter().map(|_| Err(retired())).collect();
        };
        let mut buffers: Vec<Aligned> = plans.iter().map(|p| Aligned::new(p.span_bytes)).collect();
        let mut results: Vec<Option<io::Result<usize>>> = plans.iter().map(|_| None).collect();
        {
            let mut sq = ring.submission();
            for (i, (plan, buf)) in plans.iter().zip(buffers.iter_mut()).enumerate() {
                let len = u32::try_from(plan.span_bytes).expect("chunk reads are below 4 GiB");
                let entry = opcode::Read::new(
                    types::Fd(plan.file.as_raw_fd()),
                    buf.as_mut().as_mut_ptr(),
                    len,
                )
                .offset(plan.file_offset_bytes)
                .build()
                .user_data(i as u64);
                #[allow(unsafe_code)]
                // SAFETY: the buffer is owned by `buffers`, which is neither moved nor dropped
                // until this entry's completion is reaped below (or it is leaked), and the file
                // stays open: the plan holds its `Arc<File>`.
                unsafe { sq.push(&entry) }.expect("the queue has room for a burst");
            }
        }
        let mut pending = plans.len();
        while pending > 0 {
            match ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                    ) => {}
                Err(e) => {
                    // Reads may still be in flight into these buffers: never free them.
                    tracing::warn!(error = %e, "io_uring failed; reading without it from now on");
                    std::mem::forget(buffers);
                    self.ring = None;
                    return plans
                        .iter()
                        .map(|_| Err(io::Error::new(e.kind(), e.to_string())))
                        .collect();
                }
            }
            for cqe in ring.completion() {
                let i = usize::try_from(cqe.user_data()).expect("an index");
                let res = cqe.result();
                results[i] = Some(if res < 0 {
                    Err(io::Error::from_raw_os_error(-res))
                } else {
                    Ok(usize::try_from(res).expect("non-negative"))
                });
                pending -= 1;
            }
        }
        plans
            .iter()
            .zip(buffers)
            .zip(results)
            .map(|((plan, mut buf), result)| {
                let mut got = result.expect("every read completed")?;
                // A short read that is not the end of the file: read the rest the usual way.
                while got < plan.span_bytes {
                    let span = buf.as_mut();
                    match plan
                        .file
                        .read_at(&mut span[got..], plan.file_offset_bytes + got as u64)
                    {
                        Ok(0) => break,
                        Ok(n) => got += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(buf.into_first(got))
            })
            .collect()
    }
}

fn retired() -> io::Error {
    io::Error::other("io_uring retired after a failure")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use weft_chunk::{ChunkKey, ChunkMeta, ChunkStore, FileDisk, LocalChunkStore};

    #[test]
    fn a_burst_of_reads_returns_what_plain_reads_return() {
        let Ok(mut ring) = RingReads::new() else {
            eprintln!("no io_uring here: nothing to test");
            return;
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let disk = Arc::new(FileDisk::open(dir.path(), true).expect("disk"));
        let store = LocalChunkStore::open(disk, None).expect("open");
        for segment in 0..8u64 {
            let data: Vec<u8> = (0..100_000u64)
                .map(|i| (i * (segment + 3) % 253) as u8)
                .collect();
            let meta = ChunkMeta {
                key: ChunkKey::new(1, segment, 0),
                epoch: 0,
                codec_id: 0,
                data_chunks: 1,
                parity_chunks: 0,
                stripe_len_bytes: data.len() as u64,
            };
            store.put(&meta, &data).expect("put");
        }
        let asks: Vec<(ChunkKey, u64, usize)> = (0..40u64)
            .map(|i| {
                (
                    ChunkKey::new(1, i % 8, 0),
                    (i * 7919) % 90_000,
                    4096 + (i as usize % 5) * 700,
                )
            })
            .collect();
        let plans: Vec<ReadPlan> = asks
            .iter()
            .map(|(k, o, l)| store.plan_read(k, *o, *l).expect("plan").expect("a file"))
            .collect();
        let refs: Vec<&ReadPlan> = plans.iter().collect();
        let outcomes = ring.read_all(&refs);
        for ((plan, outcome), (k, o, l)) in plans.iter().zip(outcomes).zip(&asks) {
            let mut want = vec![0u8; *l];
            store.read(k, *o, &mut want).expect("read");
            assert_eq!(
                plan.finish(&outcome.expect("read")).expect("verified"),
                want
            );
        }
        assert!(ring.is_usable());
    }
}
