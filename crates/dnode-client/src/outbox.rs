//! [`Outbox`]: many threads sending frames on one socket, combined into few system calls.
//! Shared by the client (requests) and the d.node (responses).
//!
//! A sender appends its small frame to a shared buffer; if no one is writing, it becomes the
//! writer and writes everything gathered (its own frame and whatever other senders appended
//! meanwhile) in one `write`, repeating until the buffer is empty. A sender that finds a
//! writer at work returns at once: its frame goes out with the writer's next batch. Under
//! load (32 reads in flight) that is one system call for several frames instead of one each,
//! and the peer reads several frames per `recv`. A large frame (a chunk put or a big read's
//! answer) is not copied: it is written with vectored writes under the same socket lock, so
//! frames never interleave.
//!
//! Invariant: while `writing` is set exactly one thread owns the gathered bytes and will
//! either write them or report the failure; a failure is returned to that thread, which
//! must close the connection (every frame queued behind it is lost with the connection, and
//! the connection's close tells their waiters).

use std::io::{self, Write};

use parking_lot::Mutex;

use crate::frame_io::write_all_parts;

/// Frames up to this size are copied into the shared buffer and combined; larger ones are
/// written in place. A 4 KiB read's answer (4 KiB + 40 bytes of framing) is combined; a
/// copy of this size costs a few hundred nanoseconds, a system call several microseconds.
pub const COMBINE_MAX_BYTES: usize = 64 * 1024;
/// Capacity the gathered buffer keeps between batches (it is reused, not reallocated).
const BATCH_KEEP_BYTES: usize = 256 * 1024;

/// A socket (or any writer) shared by many senders. See the module doc.
#[derive(Debug)]
pub struct Outbox<W> {
    gathered: Mutex<Gathered>,
    /// The socket; held for one batch or one large frame at a time.
    writer: Mutex<W>,
}

#[derive(Debug, Default)]
struct Gathered {
    bytes: Vec<u8>,
    /// A thread is writing batches (see the invariant).
    writing: bool,
    /// The spare buffer the writer swaps in, so gathering goes on while it writes.
    spare: Vec<u8>,
}

/// What [`Outbox::send`] did with a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// Written by this thread (with any frames gathered meanwhile).
    Written,
    /// Queued behind another thread's write; that thread writes it or closes the connection.
    Queued,
}

impl<W: Write> Outbox<W> {
    pub fn new(writer: W) -> Outbox<W> {
        Outbox {
            gathered: Mutex::new(Gathered::default()),
            writer: Mutex::new(writer),
        }
    }

    /// Send one frame made of `parts` (written in order). `Err`: the socket failed; the caller
    /// must close the connection (frames may have been lost or half written).
    pub fn send(&self, parts: &[&[u8]]) -> io::Result<Sent> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > COMBINE_MAX_BYTES {
            // Large: write it in place, between two batches (frames may go out in any
            // order: answers and requests are matched by id).
            let mut w = self.writer.lock();
            write_all_parts(&mut *w, parts)?;
            return Ok(Sent::Written);
        }
        {
            let mut g = self.gathered.lock();
            for p in parts {
                g.bytes.extend_from_slice(p);
            }
            if g.writing {
                return Ok(Sent::Queued);
            }
            g.writing = true;
        }
        self.write_batches().map(|()| Sent::Written)
    }

    /// As the writer: write gathered bytes until none are left, then give up the role.
    fn write_batches(&self) -> io::Result<()> {
        let mut batch = Vec::new();
        loop {
            {
                let mut g = self.gathered.lock();
                if g.bytes.is_empty() {
                    g.writing = false;
                    if g.spare.capacity() == 0 && batch.capacity() <= BATCH_KEEP_BYTES {
                        batch.clear();
                        g.spare = batch;
                    }
                    return Ok(());
                }
                let spare = std::mem::take(&mut g.spare);
                batch.clear();
                let full = std::mem::replace(&mut g.bytes, spare);
                g.spare = std::mem::replace(&mut batch, full);
            }
            let result = {
                let mut w = self.writer.lock();
                write_all_parts(&mut *w, &[&batch])
            };
            if let Err(e) = result {
                // Keep the role: nobody else writes on a broken socket; the caller closes it.
                let mut g = self.gathered.lock();
                g.bytes.clear();
                return Err(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A writer that records every write call and can be told to fail.
    #[derive(Debug, Default)]
    struct Recorder {
        calls: Vec<Vec<u8>>,
        fail: bool,
    }

    impl Write for Recorder {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.fail {
                return Err(io::ErrorKind::BrokenPipe.into());
            }
            self.calls.push(buf.to_vec());
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn small_frames_from_many_threads_arrive_whole_and_in_fewer_writes() {
        let outbox = Arc::new(Outbox::new(Recorder::default()));
        let threads: Vec<_> = (0..8u8)
            .map(|t| {
                let outbox = outbox.clone();
                std::thread::spawn(move || {
                    for i in 0..200u8 {
                        // A frame: its length, then that many copies of one byte.
                        let body = vec![t.wrapping_mul(31).wrapping_add(i); usize::from(i) + 1];
                        let len = [i + 1];
                        outbox.send(&[&len, &body]).expect("send");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("sender");
        }
        let w = outbox.writer.lock();
        let all: Vec<u8> = w.calls.concat();
        let mut at = 0;
        let mut frames = 0;
        while at < all.len() {
            let n = usize::from(all[at]);
            let body = &all[at + 1..at + 1 + n];
            assert!(body.iter().all(|&b| b == body[0]), "frame {frames} torn");
            at += 1 + n;
            frames += 1;
        }
        assert_eq!(frames, 8 * 200);
        assert!(w.calls.len() <= frames);
    }

    #[test]
    fn large_frames_are_written_in_place_between_batches() {
        let outbox = Outbox::new(Recorder::default());
        let big = vec![9u8; COMBINE_MAX_BYTES + 1];
        assert_eq!(outbox.send(&[b"ab"]).expect("small"), Sent::Written);
        assert_eq!(outbox.send(&[b"h", &big]).expect("big"), Sent::Written);
        assert_eq!(outbox.send(&[b"cd"]).expect("small"), Sent::Written);
        let w = outbox.writer.lock();
        let all = w.calls.concat();
        assert_eq!(&all[..3], b"abh");
        assert_eq!(all.len(), 2 + 1 + big.len() + 2);
        assert_eq!(&all[all.len() - 2..], b"cd");
    }

    #[test]
    fn a_failed_write_is_reported_to_the_writer() {
        let outbox = Outbox::new(Recorder {
            fail: true,
            ..Recorder::default()
        });
        assert!(outbox.send(&[b"x"]).is_err());
        assert!(outbox.send(&[&vec![1u8; COMBINE_MAX_BYTES + 1]]).is_err());
    }
}
