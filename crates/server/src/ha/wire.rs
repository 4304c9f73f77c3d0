//! The mirror protocol between an owner c.node and its partner, over TCP. Frames are a type
//! byte, a little-endian u32 body length and the body.
//!
//! | frame | direction | body |
//! | --- | --- | --- |
//! | `HELLO` | both ways | the sender's c.node id (UTF-8); the partner answers the owner's |
//! | `RECORD` | owner → partner | seq u64, kind u8, layer u64, lba u64, count u64, payload |
//! | `CAUGHT_UP` | owner → partner | seq u64: every unreleased record up to it was sent |
//! | `SYNC` | owner → partner | seq u64: make records up to it durable |
//! | `RELEASE` | owner → partner | seq u64: records up to it are in durable stripes |
//! | `RECEIVED` | partner → owner | seq u64: records up to it are in the partner's journal |
//! | `SYNCED` | partner → owner | seq u64: and synced |
//! | `REFUSED` | partner → owner | why (UTF-8): it no longer mirrors (it took over) |
//!
//! A partner answers records in order; `RECEIVED` covers every record of the connection up to
//! its seq. A new connection starts a new mirror (the owner sends every unreleased record
//! again, then `CAUGHT_UP`).

use std::io::{Read, Write};

use weft_engine::journal::{JournalRecord, RecordHeader, RecordKind};
use weft_engine::units::LayerId;

pub const HELLO: u8 = 1;
pub const RECORD: u8 = 2;
pub const CAUGHT_UP: u8 = 3;
pub const SYNC: u8 = 4;
pub const RELEASE: u8 = 5;
pub const RECEIVED: u8 = 10;
pub const SYNCED: u8 = 11;
pub const REFUSED: u8 = 12;

/// Largest frame body: a record of the largest write plus its header.
const BODY_MAX_BYTES: u32 = (64 << 20) + 64;
const RECORD_HEAD_BYTES: usize = 8 + 1 + 8 + 8 + 8;

pub fn write_frame(w: &mut impl Write, kind: u8, body: &[u8]) -> std::io::Result<()> {
    let mut head = [0u8; 5];
    head[0] = kind;
    head[1..].copy_from_slice(&(body.len() as u32).to_le_bytes());
    w.write_all(&head)?;
    w.write_all(body)
}

pub fn write_seq(w: &mut impl Write, kind: u8, seq: u64) -> std::io::Result<()> {
    write_frame(w, kind, &seq.to_le_bytes())
}

pub fn write_record(w: &mut impl Write, r: &JournalRecord) -> std::io::Result<()> {
    write_record_parts(w, r.seq, r.header, &r.payload)
}

/// A `RECORD` frame from its parts (no copy of the payload into a [`JournalRecord`]).
pub fn write_record_parts(
    w: &mut impl Write,
    seq: u64,
    header: RecordHeader,
    payload: &[u8],
) -> std::io::Result<()> {
    let mut head = [0u8; 5 + RECORD_HEAD_BYTES];
    head[0] = RECORD;
    let len = (RECORD_HEAD_BYTES + payload.len()) as u32;
    head[1..5].copy_from_slice(&len.to_le_bytes());
    head[5..13].copy_from_slice(&seq.to_le_bytes());
    head[13] = header.kind.code();
    head[14..22].copy_from_slice(&header.layer.0.to_le_bytes());
    head[22..30].copy_from_slice(&header.lba.to_le_bytes());
    head[30..38].copy_from_slice(&header.count.to_le_bytes());
    w.write_all(&head)?;
    w.write_all(payload)
}

/// The bytes read from a mirror connection, handed out as complete frames in place: one
/// `read` takes in every frame that has arrived, with no allocation or copy per frame, and a
/// read that stops mid-frame (or times out) loses nothing: the rest comes with a later one.
#[derive(Debug)]
pub struct FrameReader {
    bytes: Vec<u8>,
    /// The bytes not handed out yet are `bytes[start..end]`.
    start: usize,
    end: usize,
    /// The buffer's size when it holds no large frame.
    usual_bytes: usize,
}

/// A complete frame in a [`FrameReader`]: its type and where its body is
/// ([`FrameReader::body`]), valid until the next [`FrameReader::fill`].
#[derive(Debug, Clone)]
pub struct Frame {
    pub kind: u8,
    body: std::ops::Range<usize>,
}

/// A read asks for at least this much room (a smaller tail is made room for first).
const READ_MIN_BYTES: usize = 64 << 10;
const FRAME_HEAD_BYTES: usize = 5;

impl FrameReader {
    /// A reader whose buffer holds `usual_bytes` (it grows for a larger frame, and goes
    /// back to this size once that frame is consumed).
    pub fn new(usual_bytes: usize) -> FrameReader {
        FrameReader {
            bytes: vec![0; usual_bytes.max(READ_MIN_BYTES)],
            start: 0,
            end: 0,
            usual_bytes: usual_bytes.max(READ_MIN_BYTES),
        }
    }

    /// One `read` from `r` into the free space: the bytes read, 0 at the end of the stream.
    /// Frames handed out before are moved: their bodies must not be used after it.
    pub fn fill(&mut self, r: &mut impl Read) -> std::io::Result<usize> {
        let buffered = self.end - self.start;
        if buffered == 0 {
            self.start = 0;
            self.end = 0;
            if self.bytes.len() > self.usual_bytes {
                self.bytes = vec![0; self.usual_bytes];
            }
        }
        // Room for the rest of the frame begun at `start`, and for a useful read.
        let frame_bytes = self.frame_len()?.unwrap_or(FRAME_HEAD_BYTES);
        let room = frame_bytes.saturating_sub(buffered).max(READ_MIN_BYTES);
        if self.bytes.len() - self.end < room {
            // Move the partial frame to the front: at most one frame is copied.
            self.bytes.copy_within(self.start..self.end, 0);
            self.start = 0;
            self.end = buffered;
            if self.bytes.len() - self.end < room {
                self.bytes.resize(self.end + room, 0);
            }
        }
        let n = r.read(&mut self.bytes[self.end..])?;
        self.end += n;
        Ok(n)
    }

    /// The next complete frame, consumed; `None` while only part of one is buffered; an
    /// error for a frame longer than any the protocol sends.
    pub fn next_frame(&mut self) -> std::io::Result<Option<Frame>> {
        let Some(total) = self.frame_len()? else {
            return Ok(None);
        };
        if self.end - self.start < total {
            return Ok(None);
        }
        let frame = Frame {
            kind: self.bytes[self.start],
            body: self.start + FRAME_HEAD_BYTES..self.start + total,
        };
        self.start += total;
        Ok(Some(frame))
    }

    pub fn body(&self, frame: &Frame) -> &[u8] {
        &self.bytes[frame.body.clone()]
    }

    /// Whether every byte read was handed out as a frame.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// The length (head and body) of the frame at `start`, once its head is buffered; an
    /// error for a frame longer than any the protocol sends (checked before any buffer grows
    /// for it).
    fn frame_len(&self) -> std::io::Result<Option<usize>> {
        if self.end - self.start < FRAME_HEAD_BYTES {
            return Ok(None);
        }
        let head = &self.bytes[self.start..self.start + FRAME_HEAD_BYTES];
        let len = u32::from_le_bytes(head[1..].try_into().expect("4 bytes"));
        if len > BODY_MAX_BYTES {
            return Err(invalid(format!("mirror frame of {len} bytes")));
        }
        Ok(Some(FRAME_HEAD_BYTES + len as usize))
    }
}

/// Read one frame: (type, body), with a blocking reader (the forwarder's client uses it).
pub fn read_frame(r: &mut impl Read) -> std::io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; FRAME_HEAD_BYTES];
    r.read_exact(&mut head)?;
    let len = u32::from_le_bytes(head[1..].try_into().expect("4 bytes"));
    if len > BODY_MAX_BYTES {
        return Err(invalid(format!("mirror frame of {len} bytes")));
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body)?;
    Ok((head[0], body))
}

pub fn seq_of(body: &[u8]) -> std::io::Result<u64> {
    let b: [u8; 8] = body
        .try_into()
        .map_err(|_| invalid("a seq frame is 8 bytes".into()))?;
    Ok(u64::from_le_bytes(b))
}

/// A `RECORD` body's parts: seq, header and payload (borrowed, not copied).
pub fn record_parts(body: &[u8]) -> std::io::Result<(u64, RecordHeader, &[u8])> {
    if body.len() < RECORD_HEAD_BYTES {
        return Err(invalid("short record frame".into()));
    }
    let u = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"));
    let kind = RecordKind::from_code(body[8])
        .ok_or_else(|| invalid(format!("unknown record kind {}", body[8])))?;
    let header = RecordHeader {
        kind,
        layer: LayerId(u(9)),
        lba: u(17),
        count: u(25),
    };
    Ok((u(0), header, &body[RECORD_HEAD_BYTES..]))
}

fn invalid(why: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: u64, bytes: usize) -> JournalRecord {
        JournalRecord {
            seq,
            header: RecordHeader {
                kind: RecordKind::Write,
                layer: LayerId(7),
                lba: 9,
                count: 2,
            },
            payload: vec![(seq % 251) as u8; bytes],
        }
    }

    /// Every frame of `stream`, read `step` bytes at a time.
    fn frames_of(stream: &[u8], step: usize, usual_bytes: usize) -> Vec<(u8, Vec<u8>)> {
        struct Trickle<'a>(&'a [u8], usize);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                let n = self.1.min(buf.len()).min(self.0.len());
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut input = Trickle(stream, step);
        let mut frames = FrameReader::new(usual_bytes);
        let mut out = Vec::new();
        while frames.fill(&mut input).unwrap() > 0 {
            while let Some(f) = frames.next_frame().unwrap() {
                out.push((f.kind, frames.body(&f).to_vec()));
            }
        }
        assert!(frames.is_empty(), "no partial frame left");
        out
    }

    #[test]
    fn records_round_trip_whatever_the_reads_cut() {
        let records = [record(42, 8192), record(43, 0), record(44, 300 << 10)];
        let mut buf = Vec::new();
        for r in &records {
            write_record(&mut buf, r).unwrap();
        }
        write_seq(&mut buf, SYNC, 44).unwrap();
        for step in [1, 7, 4096, 70_000, usize::MAX] {
            let frames = frames_of(&buf, step, 0);
            assert_eq!(frames.len(), 4, "step {step}");
            for (r, (kind, body)) in records.iter().zip(&frames) {
                assert_eq!(*kind, RECORD);
                let (seq, header, payload) = record_parts(body).unwrap();
                assert_eq!((seq, header, payload), (r.seq, r.header, &r.payload[..]));
            }
            assert_eq!(frames[3].0, SYNC);
            assert_eq!(seq_of(&frames[3].1).unwrap(), 44);
        }
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let frames = frames_of(&[RECORD, 3, 0, 0, 0, 1, 2, 3], 100, 0);
        assert!(record_parts(&frames[0].1).is_err());
        let mut bad_kind = Vec::new();
        write_record(&mut bad_kind, &record(1, 10)).unwrap();
        bad_kind[5 + 8] = 99;
        assert!(record_parts(&frames_of(&bad_kind, 100, 0)[0].1).is_err());
        let mut huge = &[RECORD, 0xff, 0xff, 0xff, 0xff][..];
        let mut frames = FrameReader::new(0);
        assert!(frames
            .fill(&mut huge)
            .and_then(|_| frames.next_frame())
            .is_err());
        assert!(seq_of(&[1, 2]).is_err());
    }
}
