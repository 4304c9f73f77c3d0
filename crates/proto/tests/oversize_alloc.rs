//! An oversize length field is refused before any payload memory is allocated: a counting
//! global allocator records the largest allocation made while the decoders see such a header.
//! Its own test binary (one test, one thread decoding) so other tests' allocations don't count.
//! No I/O.

// The allocator shim is the only unsafe code: it forwards to the system allocator unchanged.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use weft_proto::{
    decode_frame, FrameDecoder, FrameHeader, MessageKind, ProtoError, FRAME_HEADER_LEN_BYTES,
    PAYLOAD_MAX_BYTES,
};

struct Counting;

static LARGEST_BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments, upholding its contract.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST_BYTES.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: same layout the caller passed us.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST_BYTES.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: `ptr` came from `System` with `layout`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Far below any payload a decoder might wrongly reserve.
const ALLOWED_BYTES: usize = 64 * 1024;

fn oversize_header(len: u32) -> [u8; FRAME_HEADER_LEN_BYTES] {
    let mut b = [0u8; FRAME_HEADER_LEN_BYTES];
    b[0..4].copy_from_slice(b"WFTP");
    b[4..6].copy_from_slice(&weft_proto::PROTOCOL_VERSION.to_le_bytes());
    b[6..8].copy_from_slice(&MessageKind::PutChunk.code().to_le_bytes());
    b[8..16].copy_from_slice(&1u64.to_le_bytes());
    b[16..20].copy_from_slice(&len.to_le_bytes());
    let crc = crc32c::crc32c(&b[..24]);
    b[24..28].copy_from_slice(&crc.to_le_bytes());
    b
}

#[test]
fn oversize_length_is_refused_without_allocating_the_payload() {
    let lens = [
        u32::try_from(PAYLOAD_MAX_BYTES + 1).expect("fits"),
        u32::MAX,
    ];
    let headers: Vec<_> = lens.iter().map(|len| oversize_header(*len)).collect();
    let mut decoder = FrameDecoder::new();
    LARGEST_BYTES.store(0, Ordering::Relaxed);
    for header in &headers {
        let too_long =
            |r: &Result<_, ProtoError>| matches!(r, Err(ProtoError::PayloadTooLong { .. }));
        assert!(too_long(&decode_frame(header).map(|_| ())));
        assert!(too_long(&FrameHeader::decode(header).map(|_| ())));
        assert!(too_long(&decoder.decode(header).map(|_| ())));
        decoder = FrameDecoder::new();
    }
    let largest = LARGEST_BYTES.load(Ordering::Relaxed);
    assert!(
        largest < ALLOWED_BYTES,
        "largest allocation while refusing was {largest} bytes"
    );

    // The counter does see a payload-sized allocation: the check above is not vacuous.
    let payload: Vec<u8> = std::hint::black_box(Vec::with_capacity(ALLOWED_BYTES));
    assert!(LARGEST_BYTES.load(Ordering::Relaxed) >= ALLOWED_BYTES);
    drop(payload);
}
