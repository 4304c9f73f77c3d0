//! A byte buffer whose start is aligned to a page ([`ALIGN_BYTES`]), so O_DIRECT can write
//! it as it is. The engine builds its segments in one ([`crate::disk::FileDisk`] then writes
//! a segment's chunk without copying it into an aligned bounce buffer); it behaves like the
//! few `Vec<u8>` operations a segment uses: append, zero-fill, clear, and reading it as a
//! slice.

// The one place in the chunk crate that manages memory by hand: an aligned allocation, its
// length and its release. Each block says why it is sound.
#![allow(unsafe_code)]

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// The alignment of the start of every [`AlignedBuf`]; O_DIRECT's on every file system here.
pub const ALIGN_BYTES: usize = 4096;

/// A growable byte buffer starting on an [`ALIGN_BYTES`] boundary.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    capacity: usize,
}

// SAFETY: it owns its allocation, like `Vec<u8>`; shared references only read it.
unsafe impl Send for AlignedBuf {}
// SAFETY: as above: `&AlignedBuf` gives only `&[u8]`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    /// An empty buffer with room for `capacity` bytes (rounded up to a whole page).
    pub fn with_capacity(capacity: usize) -> AlignedBuf {
        let capacity = capacity.max(1).div_ceil(ALIGN_BYTES) * ALIGN_BYTES;
        let layout = Layout::from_size_align(capacity, ALIGN_BYTES).expect("a sane capacity");
        // SAFETY: the layout's size is not zero.
        let raw = unsafe { alloc(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            handle_alloc_error(layout)
        };
        AlignedBuf {
            ptr,
            len: 0,
            capacity,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Room for `additional` more bytes, moving the contents to a larger allocation if needed.
    fn reserve(&mut self, additional: usize) {
        let needed = self
            .len
            .checked_add(additional)
            .expect("buffer size overflow");
        if needed <= self.capacity {
            return;
        }
        let mut bigger = AlignedBuf::with_capacity(needed.max(self.capacity * 2));
        bigger.extend_from_slice(self);
        *self = bigger;
    }

    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        self.reserve(bytes.len());
        // SAFETY: `reserve` made room for `bytes.len()` bytes after `len`; `bytes` cannot
        // overlap memory this buffer owns exclusively (`&mut self`).
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.ptr.as_ptr().add(self.len),
                bytes.len(),
            );
        }
        self.len += bytes.len();
    }

    /// Cut to `new_len`, or grow to it with `value`.
    pub fn resize(&mut self, new_len: usize, value: u8) {
        if new_len > self.len {
            self.reserve(new_len - self.len);
            // SAFETY: room reserved above.
            unsafe {
                std::ptr::write_bytes(self.ptr.as_ptr().add(self.len), value, new_len - self.len);
            }
        }
        self.len = new_len;
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.capacity, ALIGN_BYTES)
            .expect("the layout it was made with");
        // SAFETY: allocated in `with_capacity` with this layout, and not freed before.
        unsafe { dealloc(self.ptr.as_ptr(), layout) }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: the first `len` bytes were written (appended or filled).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`, and `&mut self` is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Clone for AlignedBuf {
    fn clone(&self) -> AlignedBuf {
        let mut copy = AlignedBuf::with_capacity(self.capacity);
        copy.extend_from_slice(self);
        copy
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .field("capacity", &self.capacity)
            .finish()
    }
}

impl PartialEq for AlignedBuf {
    fn eq(&self, other: &AlignedBuf) -> bool {
        self[..] == other[..]
    }
}

impl Eq for AlignedBuf {}

/// Whether O_DIRECT can write `bytes` where they are: page-aligned start and length.
pub fn is_direct_ready(bytes: &[u8]) -> bool {
    (bytes.as_ptr() as usize).is_multiple_of(ALIGN_BYTES) && bytes.len().is_multiple_of(ALIGN_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn behaves_like_a_vec_and_stays_aligned_through_growth() {
        let mut b = AlignedBuf::with_capacity(10);
        assert_eq!(b.capacity(), ALIGN_BYTES);
        let mut model = Vec::new();
        for i in 0..3000u32 {
            let piece = i.to_le_bytes();
            b.extend_from_slice(&piece);
            model.extend_from_slice(&piece);
            assert_eq!(b.as_ptr() as usize % ALIGN_BYTES, 0);
        }
        assert_eq!(&b[..], &model[..]);
        b.resize(20_000, 7);
        model.resize(20_000, 7);
        assert_eq!(&b[..], &model[..]);
        b.resize(5, 0);
        model.truncate(5);
        assert_eq!(&b[..], &model[..]);
        assert_eq!(b.clone(), b);
        b.clear();
        assert!(b.is_empty());
        assert!(b.capacity() >= 20_000);
    }

    #[test]
    fn direct_ready_needs_an_aligned_start_and_length() {
        let mut b = AlignedBuf::with_capacity(3 * ALIGN_BYTES);
        b.resize(2 * ALIGN_BYTES, 1);
        assert!(is_direct_ready(&b));
        assert!(!is_direct_ready(&b[1..ALIGN_BYTES + 1]));
        assert!(!is_direct_ready(&b[..ALIGN_BYTES - 1]));
        assert!(is_direct_ready(&b[ALIGN_BYTES..]));
    }
}
