//! Message kind numbers: the u16 in every frame header that says which message the payload
//! holds. No parsing beyond number <-> kind, no I/O.
//!
//! Requests use `0x0001..=0x7fff`, responses set the top bit. A response kind shares the low
//! bits of the request it usually answers (`Data` 0x8003 answers `ReadChunk` 0x0003); `Ok`
//! answers `PutChunk`, `DeleteChunk`, `Fence` and `SyncChunks`, and `Error` (0x80ff) answers anything.
//! The numbers are fixed: [`MESSAGE_KINDS`] is the table `docs/design/protocol.md` mirrors and
//! the protocol fingerprint hashes.

/// Whether a kind travels c.node -> d.node (request) or back (response).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    Request,
    Response,
}

/// Every message of protocol version [`crate::PROTOCOL_VERSION`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u16)]
pub enum MessageKind {
    Hello = 0x0001,
    PutChunk = 0x0002,
    ReadChunk = 0x0003,
    DeleteChunk = 0x0004,
    ListChunks = 0x0005,
    ListFamilies = 0x0006,
    Fence = 0x0007,
    Stat = 0x0008,
    Scrub = 0x0009,
    Ping = 0x000a,
    SyncChunks = 0x000b,
    HelloOk = 0x8001,
    Ok = 0x8002,
    Data = 0x8003,
    ChunkList = 0x8005,
    Families = 0x8006,
    NodeStat = 0x8008,
    ScrubReport = 0x8009,
    Pong = 0x800a,
    Error = 0x80ff,
}

/// Top bit of a kind number: set on responses.
const RESPONSE_BIT: u16 = 0x8000;

/// (kind number, name) of every message, in number order. Adding, removing, renumbering or
/// renaming an entry changes the protocol fingerprint and needs a version bump.
pub const MESSAGE_KINDS: [(u16, &str); 20] = [
    (0x0001, "Hello"),
    (0x0002, "PutChunk"),
    (0x0003, "ReadChunk"),
    (0x0004, "DeleteChunk"),
    (0x0005, "ListChunks"),
    (0x0006, "ListFamilies"),
    (0x0007, "Fence"),
    (0x0008, "Stat"),
    (0x0009, "Scrub"),
    (0x000a, "Ping"),
    (0x000b, "SyncChunks"),
    (0x8001, "HelloOk"),
    (0x8002, "Ok"),
    (0x8003, "Data"),
    (0x8005, "ChunkList"),
    (0x8006, "Families"),
    (0x8008, "NodeStat"),
    (0x8009, "ScrubReport"),
    (0x800a, "Pong"),
    (0x80ff, "Error"),
];

impl MessageKind {
    /// The number in the frame header.
    pub fn code(self) -> u16 {
        self as u16
    }

    /// The kind with this number, if it is one of ours.
    pub fn from_code(code: u16) -> Option<Self> {
        use MessageKind::{
            ChunkList, Data, DeleteChunk, Error, Families, Fence, Hello, HelloOk, ListChunks,
            ListFamilies, NodeStat, Ok, Ping, Pong, PutChunk, ReadChunk, Scrub, ScrubReport, Stat,
            SyncChunks,
        };
        Some(match code {
            0x0001 => Hello,
            0x0002 => PutChunk,
            0x0003 => ReadChunk,
            0x0004 => DeleteChunk,
            0x0005 => ListChunks,
            0x0006 => ListFamilies,
            0x0007 => Fence,
            0x0008 => Stat,
            0x0009 => Scrub,
            0x000a => Ping,
            0x000b => SyncChunks,
            0x8001 => HelloOk,
            0x8002 => Ok,
            0x8003 => Data,
            0x8005 => ChunkList,
            0x8006 => Families,
            0x8008 => NodeStat,
            0x8009 => ScrubReport,
            0x800a => Pong,
            0x80ff => Error,
            _ => return None,
        })
    }

    /// The message's name, as in [`MESSAGE_KINDS`] and the protocol document.
    pub fn name(self) -> &'static str {
        match self {
            MessageKind::Hello => "Hello",
            MessageKind::PutChunk => "PutChunk",
            MessageKind::ReadChunk => "ReadChunk",
            MessageKind::DeleteChunk => "DeleteChunk",
            MessageKind::ListChunks => "ListChunks",
            MessageKind::ListFamilies => "ListFamilies",
            MessageKind::Fence => "Fence",
            MessageKind::Stat => "Stat",
            MessageKind::Scrub => "Scrub",
            MessageKind::Ping => "Ping",
            MessageKind::SyncChunks => "SyncChunks",
            MessageKind::HelloOk => "HelloOk",
            MessageKind::Ok => "Ok",
            MessageKind::Data => "Data",
            MessageKind::ChunkList => "ChunkList",
            MessageKind::Families => "Families",
            MessageKind::NodeStat => "NodeStat",
            MessageKind::ScrubReport => "ScrubReport",
            MessageKind::Pong => "Pong",
            MessageKind::Error => "Error",
        }
    }

    pub fn direction(self) -> Direction {
        if self.code() & RESPONSE_BIT == 0 {
            Direction::Request
        } else {
            Direction::Response
        }
    }

    /// Whether the payload is `bulk ‖ postcard(fixed part) ‖ fixed-part length u32`, the layout
    /// that lets a decoder hand out the bulk bytes without copying them (see `message.rs`).
    pub fn has_bulk(self) -> bool {
        matches!(self, MessageKind::PutChunk | MessageKind::Data)
    }
}

impl std::fmt::Display for MessageKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({:#06x})", self.name(), self.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_and_enum_agree_on_every_number() {
        for (code, name) in MESSAGE_KINDS {
            let kind = MessageKind::from_code(code).expect("table entry is a kind");
            assert_eq!(kind.code(), code);
            assert_eq!(kind.name(), name);
        }
        let known = (0..=u16::MAX)
            .filter(|c| MessageKind::from_code(*c).is_some())
            .count();
        assert_eq!(known, MESSAGE_KINDS.len(), "from_code knows only the table");
        assert!(
            MESSAGE_KINDS.windows(2).all(|w| w[0].0 < w[1].0),
            "sorted, unique"
        );
    }

    #[test]
    fn response_kinds_have_the_top_bit() {
        for (code, _) in MESSAGE_KINDS {
            let kind = MessageKind::from_code(code).expect("kind");
            assert_eq!(
                kind.direction() == Direction::Response,
                code & RESPONSE_BIT != 0
            );
        }
    }
}
