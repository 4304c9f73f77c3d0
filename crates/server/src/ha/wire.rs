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

/// Read one frame: (type, body).
pub fn read_frame(r: &mut impl Read) -> std::io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 5];
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

pub fn record_of(mut body: Vec<u8>) -> std::io::Result<JournalRecord> {
    if body.len() < RECORD_HEAD_BYTES {
        return Err(invalid("short record frame".into()));
    }
    let u = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"));
    let kind = RecordKind::from_code(body[8])
        .ok_or_else(|| invalid(format!("unknown record kind {}", body[8])))?;
    let (seq, layer, lba, count) = (u(0), u(9), u(17), u(25));
    // Moves the payload to the front of the frame's buffer: no second allocation.
    body.drain(..RECORD_HEAD_BYTES);
    let payload = body;
    Ok(JournalRecord {
        seq,
        header: RecordHeader {
            kind,
            layer: LayerId(layer),
            lba,
            count,
        },
        payload,
    })
}

fn invalid(why: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let r = JournalRecord {
            seq: 42,
            header: RecordHeader {
                kind: RecordKind::Write,
                layer: LayerId(7),
                lba: 9,
                count: 2,
            },
            payload: vec![5u8; 8192],
        };
        let mut buf = Vec::new();
        write_record(&mut buf, &r).unwrap();
        write_seq(&mut buf, SYNC, 42).unwrap();
        let mut rd = &buf[..];
        let (kind, body) = read_frame(&mut rd).unwrap();
        assert_eq!(kind, RECORD);
        assert_eq!(record_of(body).unwrap(), r);
        let (kind, body) = read_frame(&mut rd).unwrap();
        assert_eq!((kind, seq_of(&body).unwrap()), (SYNC, 42));
        assert!(read_frame(&mut rd).is_err(), "nothing more");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        let mut rd = &[RECORD, 3, 0, 0, 0, 1, 2, 3][..];
        let (_, body) = read_frame(&mut rd).unwrap();
        assert!(record_of(body).is_err());
        let mut huge = &[RECORD, 0xff, 0xff, 0xff, 0xff][..];
        assert!(read_frame(&mut huge).is_err());
        assert!(seq_of(&[1, 2]).is_err());
    }
}
