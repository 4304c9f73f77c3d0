//! The few raw system calls std does not offer: a non-blocking send on a blocking socket
//! (MSG_DONTWAIT), poll(2), and page-aligned buffers for O_DIRECT. Each unsafe block is here.

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
    fn aligned_buffer_is_page_aligned_and_rounded_up() {
        let mut b = AlignedBuf::new(5000);
        assert_eq!(b.as_slice().as_ptr() as usize % DIRECT_ALIGN_BYTES, 0);
        assert_eq!(b.as_slice().len(), 8192);
        b.as_mut_slice()[8191] = 1;
    }
}
