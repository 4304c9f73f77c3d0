//! The few raw system calls std does not offer: a non-blocking send on a blocking socket
//! (MSG_DONTWAIT), poll(2), page-aligned buffers for O_DIRECT, this process's CPU time
//! (getrusage), the clock tick of /proc and whether a file holds data (SEEK_DATA). Each unsafe
//! block is here.

#![allow(unsafe_code)]

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::io;
use std::os::fd::RawFd;

/// Alignment of O_DIRECT buffers: a page satisfies every logical block size we meet.
pub(crate) const DIRECT_ALIGN_BYTES: usize = 4096;

/// Sends as much of `buf` as the socket takes now; `Ok(0)` means it would block.
pub(crate) fn send_nowait(fd: RawFd, buf: &[u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is a valid readable slice for its length; `fd` is an open socket owned by
        // the caller for the duration of the call.
        let n = unsafe {
            libc::send(
                fd,
                buf.as_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n >= 0 {
            return Ok(n.unsigned_abs());
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => return Ok(0),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(e),
        }
    }
}

/// Receives what is available now without blocking; `Ok(None)` means nothing yet.
pub(crate) fn recv_nowait(fd: RawFd, buf: &mut [u8]) -> io::Result<Option<usize>> {
    loop {
        // SAFETY: `buf` is a valid writable slice for its length; `fd` is an open socket.
        let n = unsafe { libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT) };
        if n >= 0 {
            return Ok(Some(n.unsigned_abs()));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => return Ok(None),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(e),
        }
    }
}

/// Blocks until `fd` is readable, or also writable when `want_write`.
pub(crate) fn poll_socket(fd: RawFd, want_write: bool) -> io::Result<()> {
    let mut events = libc::POLLIN;
    if want_write {
        events |= libc::POLLOUT;
    }
    let mut pfd = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    loop {
        // SAFETY: `pfd` is one valid pollfd on our stack; nfds is 1.
        let n = unsafe { libc::poll(&mut pfd, 1, -1) };
        if n >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// CPU time this process has used so far, user and system, in microseconds.
pub(crate) fn self_cpu_us() -> (u64, u64) {
    // SAFETY: rusage is plain data; all-zero bytes are a valid value of it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage on our stack; RUSAGE_SELF is always accepted.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    assert_eq!(
        rc, 0,
        "getrusage(RUSAGE_SELF) cannot fail with a valid pointer"
    );
    let us = |tv: libc::timeval| {
        u64::try_from(tv.tv_sec).unwrap_or(0) * 1_000_000 + u64::try_from(tv.tv_usec).unwrap_or(0)
    };
    (us(ru.ru_utime), us(ru.ru_stime))
}

/// Clock ticks per second, the unit of the CPU times in /proc/PID/stat (100 on Linux).
pub(crate) fn clock_ticks_per_s() -> u64 {
    // SAFETY: sysconf takes no pointers and only reads system configuration.
    let n = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(n).ok().filter(|&n| n > 0).unwrap_or(100)
}

/// Whether `fd` (a regular file) has any data, not only holes: `lseek(SEEK_DATA)` from offset
/// 0 finds some (a file made by `truncate -s` or `fallocate` on ext4 or XFS has none). Moves
/// the file offset, which positional reads and writes do not use.
pub(crate) fn file_has_data(fd: RawFd) -> io::Result<bool> {
    // SAFETY: lseek takes no pointer; `fd` is an open file owned by the caller for the call.
    let at = unsafe { libc::lseek(fd, 0, libc::SEEK_DATA) };
    if at >= 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        // No data at or after offset 0.
        Some(libc::ENXIO) => Ok(false),
        _ => Err(e),
    }
}

/// A zeroed heap buffer aligned to [`DIRECT_ALIGN_BYTES`], for O_DIRECT reads and writes.
#[derive(Debug)]
pub(crate) struct AlignedBuf {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively, like a Box<[u8]>.
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    pub(crate) fn new(len: usize) -> Self {
        let len = len
            .max(DIRECT_ALIGN_BYTES)
            .next_multiple_of(DIRECT_ALIGN_BYTES);
        let layout = Layout::from_size_align(len, DIRECT_ALIGN_BYTES).expect("valid layout");
        // SAFETY: layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        AlignedBuf { ptr, len }
    }

    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is a live allocation of len initialised (zeroed) bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.len, DIRECT_ALIGN_BYTES).expect("valid layout");
        // SAFETY: ptr was allocated in `new` with exactly this layout and is freed once.
        unsafe { dealloc(self.ptr, layout) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_grows_while_we_compute() {
        let (u0, s0) = self_cpu_us();
        let mut x = 1u64;
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_millis(30) {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let (u1, s1) = self_cpu_us();
        assert!(u1 + s1 > u0 + s0);
        assert!(clock_ticks_per_s() >= 1);
    }

    #[test]
    fn aligned_buffer_is_page_aligned_and_rounded_up() {
        let mut b = AlignedBuf::new(5000);
        assert_eq!(b.as_slice().as_ptr() as usize % DIRECT_ALIGN_BYTES, 0);
        assert_eq!(b.as_slice().len(), 8192);
        b.as_mut_slice()[8191] = 1;
    }
}
