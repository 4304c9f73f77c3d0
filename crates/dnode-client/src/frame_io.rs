//! Blocking frame I/O on std sockets, shared by the client and the d.node: read one frame (header
//! first, then the payload straight into its own buffer: no copy, nothing allocated before the
//! header is verified) and write a frame's parts with vectored writes (chunk bytes are never
//! copied into a frame buffer).
//!
//! This is the proto's header-then-payload decoding path ([`FrameHeader::decode`] +
//! [`FrameHeader::into_frame`]); the checks and limits are the proto's, the I/O is ours.

use std::io::{self, BufRead, IoSlice, Read, Write};

use weft_proto::{Frame, FrameHeader, ProtoError, FRAME_HEADER_LEN_BYTES};

/// Why no frame could be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FrameReadError {
    /// The read timed out (or would block) between frames, before any byte of the next one:
    /// nothing was lost, the caller may read again.
    #[error("no frame within the read timeout")]
    Idle,
    /// The peer closed the connection in the middle of a frame.
    #[error("connection closed after {got_bytes} bytes of a frame")]
    Truncated { got_bytes: u64 },
    #[error("socket: {0}")]
    Io(#[source] io::Error),
    /// The bytes are not a valid frame: close the connection.
    #[error("bad frame: {0}")]
    Proto(#[source] ProtoError),
}

/// Reads the next frame. `Ok(None)`: the peer closed the connection cleanly between frames.
pub fn read_frame(reader: &mut impl BufRead) -> Result<Option<Frame>, FrameReadError> {
    match reader.fill_buf() {
        Ok([]) => return Ok(None),
        Ok(_) => {}
        Err(e) if is_timeout(&e) => return Err(FrameReadError::Idle),
        Err(e) => return Err(FrameReadError::Io(e)),
    }
    let mut head = [0u8; FRAME_HEADER_LEN_BYTES];
    read_exact(reader, &mut head, 0)?;
    let header = FrameHeader::decode(&head).map_err(FrameReadError::Proto)?;
    let len = header.payload_len();
    // Verified above: at most PAYLOAD_MAX_BYTES.
    let mut payload = Vec::with_capacity(len);
    reader
        .take(len as u64)
        .read_to_end(&mut payload)
        .map_err(FrameReadError::Io)?;
    if payload.len() < len {
        return Err(FrameReadError::Truncated {
            got_bytes: (FRAME_HEADER_LEN_BYTES + payload.len()) as u64,
        });
    }
    header
        .into_frame(payload)
        .map(Some)
        .map_err(FrameReadError::Proto)
}

/// Writes `parts` in order, all of them, with vectored writes.
pub fn write_all_parts(writer: &mut impl Write, parts: &[&[u8]]) -> io::Result<()> {
    let mut slices: Vec<IoSlice<'_>> = parts
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| IoSlice::new(p))
        .collect();
    let mut rest = &mut slices[..];
    while !rest.is_empty() {
        match writer.write_vectored(rest) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut rest, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    writer.flush()
}

fn read_exact(reader: &mut impl Read, buf: &mut [u8], before: u64) -> Result<(), FrameReadError> {
    let mut got = 0;
    while got < buf.len() {
        match reader.read(&mut buf[got..]) {
            Ok(0) => {
                return Err(FrameReadError::Truncated {
                    got_bytes: before + got as u64,
                })
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(FrameReadError::Io(e)),
        }
    }
    Ok(())
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_proto::{Request, Response};

    #[test]
    fn frames_read_back_one_by_one_then_eof() {
        let mut bytes = Vec::new();
        Request::Ping.encode(1, &mut bytes).expect("encode");
        Response::Data {
            bytes: vec![7u8; 100_000],
        }
        .encode(2, &mut bytes)
        .expect("encode");
        let mut r = io::BufReader::with_capacity(4096, &bytes[..]);
        let a = read_frame(&mut r).expect("read").expect("frame");
        assert_eq!(Request::decode(a).expect("ping"), Request::Ping);
        let b = read_frame(&mut r).expect("read").expect("frame");
        assert_eq!(b.request_id, 2);
        assert!(read_frame(&mut r).expect("eof").is_none());
    }

    #[test]
    fn truncated_and_garbage_streams_are_errors() {
        let mut bytes = Vec::new();
        Request::Ping.encode(1, &mut bytes).expect("encode");
        let mut r = io::BufReader::new(&bytes[..10]);
        assert!(matches!(
            read_frame(&mut r),
            Err(FrameReadError::Truncated { got_bytes: 10 })
        ));
        let garbage = [0xabu8; 64];
        let mut r = io::BufReader::new(&garbage[..]);
        assert!(matches!(read_frame(&mut r), Err(FrameReadError::Proto(_))));
    }

    #[test]
    fn vectored_writes_write_everything() {
        let mut out = Vec::new();
        write_all_parts(&mut out, &[b"abc", b"", b"defg"]).expect("write");
        assert_eq!(out, b"abcdefg");
    }
}
