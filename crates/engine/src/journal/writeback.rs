//! The journal's writeback thread: it starts the device write of appended records with
//! `sync_file_range`, in batches, so a FLUSH's `fdatasync` finds most of them written.

use std::fs::File;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

/// Starts the device write of appended records in the background (`sync_file_range`), so a
/// FLUSH that follows finds most of them already written; appending just notes the range
/// (issuing the write in the append itself measured 40 µs per record). Small ranges wait up
/// to [`WRITEBACK_LINGER`] for more: one `sync_file_range` per 4 KiB record was a quarter of
/// a mirrored c.node pair's CPU at QD32 (a context switch and a virtio doorbell each, on both
/// journals), and a FLUSH writes what is left itself. While records keep coming the thread
/// keeps lingering (it looks every [`WRITEBACK_LINGER`]) and an append does not wake it: at
/// queue depth 1 with a FLUSH after each write (which writes the range itself) waking it for
/// every record was two context switches per write on each journal, for nothing.
#[derive(Debug, Default)]
pub(super) struct Writeback {
    state: Mutex<WritebackState>,
    wake: Condvar,
}

/// A noted range this long is written out at once.
const WRITEBACK_BATCH_BYTES: u64 = 256 << 10;
/// A shorter one waits this long for more records.
const WRITEBACK_LINGER: std::time::Duration = std::time::Duration::from_millis(2);

#[derive(Debug, Default)]
struct WritebackState {
    /// File and byte range appended since the last write-out was started.
    pending: Option<(Arc<File>, u64, u64)>,
    /// A range was noted since the thread last looked.
    noted: bool,
    /// The thread is in a timed wait: it will look without being woken.
    lingering: bool,
    stop: bool,
}

impl Writeback {
    /// Ask the thread to end (it does once it wakes).
    pub(super) fn stop(&self) {
        self.state.lock().stop = true;
        self.wake.notify_all();
    }

    pub(super) fn note(&self, file: &Arc<File>, offset: u64, len: u64) {
        let mut st = self.state.lock();
        st.noted = true;
        let lingering = st.lingering;
        // Wake the thread only when it has something to write, or something new to wait on
        // and is not going to look anyway: not for every record it is lingering over.
        let wake = match &mut st.pending {
            Some((f, start, end)) if Arc::ptr_eq(f, file) => {
                let before = *end - *start;
                *end = (*end).max(offset + len);
                before < WRITEBACK_BATCH_BYTES && *end - *start >= WRITEBACK_BATCH_BYTES
            }
            pending => {
                *pending = Some((file.clone(), offset, offset + len));
                !lingering
            }
        };
        drop(st);
        if wake {
            self.wake.notify_one();
        }
    }

    /// `file` is synced up to `offset`: nothing below it needs writing out any more.
    pub(super) fn synced(&self, file: &Arc<File>, offset: u64) {
        let mut st = self.state.lock();
        if let Some((f, start, end)) = &mut st.pending {
            if Arc::ptr_eq(f, file) {
                if *end <= offset {
                    st.pending = None;
                } else {
                    *start = (*start).max(offset);
                }
            }
        }
    }

    /// The writeback thread's loop, until [`Writeback::stop`].
    pub(super) fn run(&self) {
        loop {
            let (file, start, end) = {
                let mut st = self.state.lock();
                // A whole linger went by since the range (or the last write-out) began.
                let mut lingered = false;
                loop {
                    if st.stop {
                        return;
                    }
                    match &st.pending {
                        Some((_, start, end))
                            if lingered || end - start >= WRITEBACK_BATCH_BYTES =>
                        {
                            break st.pending.take().expect("just matched");
                        }
                        // Nothing noted since the last look (a FLUSH wrote what was): sleep
                        // until a note wakes the thread.
                        None if !st.noted => {
                            st.lingering = false;
                            self.wake.wait(&mut st);
                            lingered = false;
                        }
                        _ => {
                            st.noted = false;
                            st.lingering = true;
                            lingered = self.wake.wait_for(&mut st, WRITEBACK_LINGER).timed_out();
                        }
                    }
                }
            };
            // SAFETY: a plain syscall on a descriptor kept open by `file`; no memory shared.
            #[allow(unsafe_code)]
            unsafe {
                libc::sync_file_range(
                    std::os::fd::AsRawFd::as_raw_fd(&*file),
                    start as libc::off64_t,
                    (end - start) as libc::off64_t,
                    libc::SYNC_FILE_RANGE_WRITE,
                );
            }
        }
    }
}
