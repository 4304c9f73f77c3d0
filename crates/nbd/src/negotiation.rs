//! Fixed-newstyle handshake and option haggling as a state machine.
//!
//! The driver sends [`Negotiation::greeting`], then feeds client bytes to
//! [`Negotiation::advance`] and writes whatever it appended to `out`, until the outcome is
//! [`Step::Go`] (enter transmission), [`Step::Abort`] (client soft-disconnected) or an error
//! (hard disconnect). No I/O here and no clock: the driver owns timeouts.
//!
//! TLS (NBD_OPT_STARTTLS): a negotiation made with [`TlsMode::Optional`] or
//! [`TlsMode::Required`] answers STARTTLS with an ACK and returns [`Step::StartTls`]; the
//! driver sends the ACK, runs the TLS handshake on the socket, calls
//! [`Negotiation::tls_started`] and goes on feeding the bytes it decrypts. What was agreed in
//! clear (structured replies, meta contexts) is forgotten, as the spec asks. Under
//! `Required`, every option but STARTTLS and ABORT is answered NBD_REP_ERR_TLS_REQD until TLS
//! is up (EXPORT_NAME, which has no error reply, is a hard disconnect).
//!
//! States:
//! - `ClientFlags`: waiting for the 32-bit client flags after our greeting.
//! - `Options`: waiting for the next option header and its payload.
//! - `Discarding`: skipping the payload of an over-long option without buffering it; then we
//!   answer NBD_REP_ERR_TOO_BIG and go back to `Options`.
//! - `Finished`: Go or Abort was returned; further input is an error.

use crate::wire::{
    BASE_ALLOCATION_CONTEXT, BASE_ALLOCATION_CONTEXT_ID, BLOCK_SIZE_MIN_BYTES,
    BLOCK_SIZE_PREFERRED_BYTES, CLIENT_FLAGS_LEN_BYTES, CLIENT_FLAG_FIXED_NEWSTYLE,
    CLIENT_FLAG_NO_ZEROES, EXPORT_NAME_REPLY_ZEROES_LEN_BYTES, FLAG_CAN_MULTI_CONN, FLAG_HAS_FLAGS,
    FLAG_READ_ONLY, FLAG_SEND_DF, FLAG_SEND_FLUSH, FLAG_SEND_FUA, FLAG_SEND_TRIM,
    FLAG_SEND_WRITE_ZEROES, HANDSHAKE_FLAG_FIXED_NEWSTYLE, HANDSHAKE_FLAG_NO_ZEROES,
    IHAVEOPT_MAGIC, INFO_BLOCK_SIZE, INFO_DESCRIPTION, INFO_EXPORT, INFO_NAME, NBD_MAGIC,
    OPTIONS_PER_CONNECTION_MAX, OPTION_HEADER_LEN_BYTES, OPTION_PAYLOAD_MAX_BYTES,
    OPTION_REPLY_MAGIC, OPT_ABORT, OPT_EXPORT_NAME, OPT_GO, OPT_INFO, OPT_LIST,
    OPT_LIST_META_CONTEXT, OPT_SET_META_CONTEXT, OPT_STARTTLS, OPT_STRUCTURED_REPLY,
    PAYLOAD_MAX_BYTES, REP_ACK, REP_ERR_INVALID, REP_ERR_TLS_REQD, REP_ERR_TOO_BIG,
    REP_ERR_UNKNOWN, REP_ERR_UNSUP, REP_INFO, REP_META_CONTEXT, REP_SERVER, STRING_MAX_BYTES,
};
use crate::{Cursor, Parse};

/// What the handshake needs to know about an export. The driver builds the list from its
/// backend; the first entry is the default export (the one the empty name selects).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportSummary {
    pub name: String,
    pub description: String,
    pub size_bytes: u64,
    pub read_only: bool,
    /// The export's minimum block size (NBD_INFO_BLOCK_SIZE): its logical block size, 512 or
    /// 4096. A value that is not a power of two from [`BLOCK_SIZE_MIN_BYTES`] to
    /// [`BLOCK_SIZE_PREFERRED_BYTES`] is served as the preferred size.
    pub block_size_min_bytes: u32,
}

impl ExportSummary {
    /// The minimum block size advertised and enforced for this export.
    pub fn block_size_min(&self) -> u32 {
        let b = self.block_size_min_bytes;
        if b.is_power_of_two() && (BLOCK_SIZE_MIN_BYTES..=BLOCK_SIZE_PREFERRED_BYTES).contains(&b) {
            b
        } else {
            BLOCK_SIZE_PREFERRED_BYTES
        }
    }
}

/// The result of a successful negotiation: what transmission runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agreement {
    pub export: ExportSummary,
    pub transmission_flags: u16,
    pub structured_replies: bool,
    /// `base:allocation` was selected for this export: BLOCK_STATUS is allowed.
    pub base_allocation: bool,
}

/// What one call to [`Negotiation::advance`] achieved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Not a whole message yet: read more bytes and call again with the same (grown) input.
    Incomplete,
    /// A message (or part of a skipped one) was consumed; send `out` and call again.
    Continue { consumed: usize },
    /// The client sent NBD_OPT_ABORT; send `out` (the ACK) and close.
    Abort { consumed: usize },
    /// Negotiation is over; send `out` and enter transmission.
    Go {
        consumed: usize,
        agreement: Agreement,
    },
    /// The client asked for TLS and we agreed: send `out` (the ACK), run the TLS handshake,
    /// call [`Negotiation::tls_started`], and continue with the decrypted stream. Bytes the
    /// client sent in clear after STARTTLS are a protocol violation (drop the connection).
    StartTls { consumed: usize },
}

/// Whether this connection may, or must, switch to TLS before choosing an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsMode {
    /// STARTTLS is not supported (NBD_REP_ERR_UNSUP).
    #[default]
    Off,
    /// STARTTLS is offered; clients may also go on in clear.
    Optional,
    /// Nothing but STARTTLS (and ABORT) before TLS is up.
    Required,
}

/// Why the server hangs up during negotiation (a hard disconnect, as the spec permits).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NegotiationError {
    #[error("client flags {flags:#x} include bits we did not offer")]
    UnknownClientFlags { flags: u32 },
    #[error("option header has magic {magic:#x}, not IHAVEOPT")]
    BadOptionMagic { magic: u64 },
    #[error("NBD_OPT_EXPORT_NAME names an unknown export ({name_len_bytes} bytes)")]
    UnknownExportName { name_len_bytes: usize },
    #[error("NBD_OPT_EXPORT_NAME payload of {length_bytes} bytes is over the limit")]
    ExportNameTooLong { length_bytes: u32 },
    #[error("more than {max} options on one connection")]
    TooManyOptions { max: u32 },
    #[error("input after negotiation finished")]
    AlreadyFinished,
    #[error("NBD_OPT_EXPORT_NAME before STARTTLS on a server that requires TLS")]
    TlsRequired,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    ClientFlags,
    Options,
    Discarding { option: u32, remaining_bytes: u64 },
    Finished,
}

/// Meta contexts chosen by the last NBD_OPT_SET_META_CONTEXT, bound to the export it named.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MetaSelection {
    export_name: String,
    base_allocation: bool,
}

/// One client option header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionHeader {
    pub option: u32,
    pub length_bytes: u32,
}

/// The option-haggling state machine of one connection.
#[derive(Debug)]
pub struct Negotiation {
    state: State,
    tls: TlsMode,
    tls_active: bool,
    no_zeroes: bool,
    structured_replies: bool,
    meta: Option<MetaSelection>,
    options_seen: u32,
    /// The last export asked for by INFO or GO that the client may not open (unknown, or
    /// hidden from it), until the listener takes it to log.
    refused_export: Option<String>,
}

impl Default for Negotiation {
    fn default() -> Self {
        Self::new()
    }
}

impl Negotiation {
    pub fn new() -> Self {
        Self::with_tls(TlsMode::Off)
    }

    /// The export the client last asked for and was told does not exist (it is unknown, or
    /// hidden from this client), once: for the listener's log.
    pub fn take_refused_export(&mut self) -> Option<String> {
        self.refused_export.take()
    }

    /// A negotiation that offers (or requires) STARTTLS.
    pub fn with_tls(tls: TlsMode) -> Self {
        Negotiation {
            state: State::ClientFlags,
            tls,
            tls_active: false,
            no_zeroes: false,
            structured_replies: false,
            meta: None,
            options_seen: 0,
            refused_export: None,
        }
    }

    /// The TLS handshake after [`Step::StartTls`] succeeded: negotiation starts over (what
    /// was agreed in clear no longer holds) on the encrypted stream.
    pub fn tls_started(&mut self) {
        self.tls_active = true;
        self.structured_replies = false;
        self.meta = None;
    }

    /// Whether TLS is up on this connection.
    pub fn tls_active(&self) -> bool {
        self.tls_active
    }

    /// The first bytes the server sends.
    pub fn greeting(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&NBD_MAGIC.to_be_bytes());
        out.extend_from_slice(&IHAVEOPT_MAGIC.to_be_bytes());
        let flags = HANDSHAKE_FLAG_FIXED_NEWSTYLE | HANDSHAKE_FLAG_NO_ZEROES;
        out.extend_from_slice(&flags.to_be_bytes());
    }

    /// Consume at most one client message from the front of `input`, appending replies to
    /// `out`. `exports` is the export list as of now; its first entry is the default export.
    pub fn advance(
        &mut self,
        input: &[u8],
        exports: &[ExportSummary],
        out: &mut Vec<u8>,
    ) -> Result<Step, NegotiationError> {
        match self.state.clone() {
            State::ClientFlags => self.advance_client_flags(input),
            State::Options => self.advance_option(input, exports, out),
            State::Discarding {
                option,
                remaining_bytes,
            } => Ok(self.advance_discard(input, option, remaining_bytes, out)),
            State::Finished => Err(NegotiationError::AlreadyFinished),
        }
    }

    fn advance_client_flags(&mut self, input: &[u8]) -> Result<Step, NegotiationError> {
        let flags = match parse_client_flags(input) {
            Parse::Complete(flags, _) => flags,
            Parse::Incomplete => return Ok(Step::Incomplete),
            Parse::Invalid(e) => return Err(e),
        };
        // Clients that omit FIXED_NEWSTYLE still get fixed-newstyle replies: every client in
        // use today sets it, and the spec allows honouring it regardless.
        self.no_zeroes = flags & CLIENT_FLAG_NO_ZEROES != 0;
        self.state = State::Options;
        Ok(Step::Continue {
            consumed: CLIENT_FLAGS_LEN_BYTES,
        })
    }

    fn advance_option(
        &mut self,
        input: &[u8],
        exports: &[ExportSummary],
        out: &mut Vec<u8>,
    ) -> Result<Step, NegotiationError> {
        let header = match parse_option_header(input) {
            Parse::Complete(header, _) => header,
            Parse::Incomplete => return Ok(Step::Incomplete),
            Parse::Invalid(e) => return Err(e),
        };
        if header.length_bytes > OPTION_PAYLOAD_MAX_BYTES {
            if header.option == OPT_EXPORT_NAME {
                // There is no error reply to EXPORT_NAME; hang up.
                return Err(NegotiationError::ExportNameTooLong {
                    length_bytes: header.length_bytes,
                });
            }
            self.count_option()?;
            self.state = State::Discarding {
                option: header.option,
                remaining_bytes: u64::from(header.length_bytes),
            };
            return Ok(Step::Continue {
                consumed: OPTION_HEADER_LEN_BYTES,
            });
        }
        // Bounded by OPTION_PAYLOAD_MAX_BYTES above, so this fits any usize.
        let payload_len = header.length_bytes as usize;
        let total = OPTION_HEADER_LEN_BYTES + payload_len;
        if input.len() < total {
            return Ok(Step::Incomplete);
        }
        self.count_option()?;
        let payload = &input[OPTION_HEADER_LEN_BYTES..total];
        let step = self.apply_option(header.option, payload, exports, out)?;
        Ok(match step {
            Applied::Continue => Step::Continue { consumed: total },
            Applied::Abort => {
                self.state = State::Finished;
                Step::Abort { consumed: total }
            }
            Applied::Go(agreement) => {
                self.state = State::Finished;
                Step::Go {
                    consumed: total,
                    agreement,
                }
            }
            Applied::StartTls => Step::StartTls { consumed: total },
        })
    }

    fn advance_discard(
        &mut self,
        input: &[u8],
        option: u32,
        remaining_bytes: u64,
        out: &mut Vec<u8>,
    ) -> Step {
        if input.is_empty() {
            return Step::Incomplete;
        }
        let take = u64::try_from(input.len())
            .unwrap_or(u64::MAX)
            .min(remaining_bytes);
        let left = remaining_bytes - take;
        if left == 0 {
            write_option_reply(out, option, REP_ERR_TOO_BIG, b"option payload too long");
            self.state = State::Options;
        } else {
            self.state = State::Discarding {
                option,
                remaining_bytes: left,
            };
        }
        // `take` is at most input.len().
        Step::Continue {
            consumed: usize::try_from(take).expect("take <= input.len()"),
        }
    }

    fn count_option(&mut self) -> Result<(), NegotiationError> {
        self.options_seen += 1;
        if self.options_seen > OPTIONS_PER_CONNECTION_MAX {
            return Err(NegotiationError::TooManyOptions {
                max: OPTIONS_PER_CONNECTION_MAX,
            });
        }
        Ok(())
    }

    fn apply_option(
        &mut self,
        option: u32,
        payload: &[u8],
        exports: &[ExportSummary],
        out: &mut Vec<u8>,
    ) -> Result<Applied, NegotiationError> {
        if self.tls == TlsMode::Required
            && !self.tls_active
            && !matches!(option, OPT_STARTTLS | OPT_ABORT)
        {
            if option == OPT_EXPORT_NAME {
                return Err(NegotiationError::TlsRequired);
            }
            write_option_reply(
                out,
                option,
                REP_ERR_TLS_REQD,
                b"TLS is required: STARTTLS first",
            );
            return Ok(Applied::Continue);
        }
        match option {
            OPT_STARTTLS if self.tls != TlsMode::Off => {
                if self.tls_active {
                    write_option_reply(out, option, REP_ERR_INVALID, b"TLS is already up");
                } else if !payload.is_empty() {
                    write_option_reply(out, option, REP_ERR_INVALID, b"STARTTLS takes no data");
                } else {
                    write_option_reply(out, option, REP_ACK, &[]);
                    return Ok(Applied::StartTls);
                }
                Ok(Applied::Continue)
            }
            OPT_EXPORT_NAME => {
                let Some(export) = resolve_export(exports, payload) else {
                    return Err(NegotiationError::UnknownExportName {
                        name_len_bytes: payload.len(),
                    });
                };
                let agreement = self.agree(export);
                out.extend_from_slice(&export.size_bytes.to_be_bytes());
                out.extend_from_slice(&agreement.transmission_flags.to_be_bytes());
                if !self.no_zeroes {
                    out.extend_from_slice(&[0u8; EXPORT_NAME_REPLY_ZEROES_LEN_BYTES]);
                }
                Ok(Applied::Go(agreement))
            }
            OPT_ABORT => {
                write_option_reply(out, option, REP_ACK, &[]);
                Ok(Applied::Abort)
            }
            OPT_LIST => {
                if !payload.is_empty() {
                    write_option_reply(out, option, REP_ERR_INVALID, b"NBD_OPT_LIST takes no data");
                    return Ok(Applied::Continue);
                }
                for export in exports {
                    let mut data =
                        Vec::with_capacity(4 + export.name.len() + export.description.len());
                    put_string(&mut data, &export.name);
                    data.extend_from_slice(export.description.as_bytes());
                    write_option_reply(out, option, REP_SERVER, &data);
                }
                write_option_reply(out, option, REP_ACK, &[]);
                Ok(Applied::Continue)
            }
            OPT_STRUCTURED_REPLY => {
                if payload.is_empty() {
                    self.structured_replies = true;
                    write_option_reply(out, option, REP_ACK, &[]);
                } else {
                    write_option_reply(out, option, REP_ERR_INVALID, b"takes no data");
                }
                Ok(Applied::Continue)
            }
            OPT_INFO | OPT_GO => Ok(self.apply_info_or_go(option, payload, exports, out)),
            OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => {
                self.apply_meta_context(option, payload, exports, out);
                Ok(Applied::Continue)
            }
            _ => {
                write_option_reply(out, option, REP_ERR_UNSUP, b"option not supported");
                Ok(Applied::Continue)
            }
        }
    }

    fn apply_info_or_go(
        &mut self,
        option: u32,
        payload: &[u8],
        exports: &[ExportSummary],
        out: &mut Vec<u8>,
    ) -> Applied {
        let Some(request) = parse_info_request(payload) else {
            write_option_reply(out, option, REP_ERR_INVALID, b"malformed info request");
            return Applied::Continue;
        };
        let Some(export) = resolve_export(exports, request.name) else {
            write_option_reply(out, option, REP_ERR_UNKNOWN, b"no such export");
            self.refused_export = Some(String::from_utf8_lossy(request.name).into_owned());
            return Applied::Continue;
        };
        let agreement = self.agree(export);

        let mut info = Vec::with_capacity(16);
        info.extend_from_slice(&INFO_EXPORT.to_be_bytes());
        info.extend_from_slice(&export.size_bytes.to_be_bytes());
        info.extend_from_slice(&agreement.transmission_flags.to_be_bytes());
        write_option_reply(out, option, REP_INFO, &info);

        if request.wants(INFO_NAME) {
            let mut info = INFO_NAME.to_be_bytes().to_vec();
            info.extend_from_slice(export.name.as_bytes());
            write_option_reply(out, option, REP_INFO, &info);
        }
        if request.wants(INFO_DESCRIPTION) && !export.description.is_empty() {
            let mut info = INFO_DESCRIPTION.to_be_bytes().to_vec();
            info.extend_from_slice(export.description.as_bytes());
            write_option_reply(out, option, REP_INFO, &info);
        }
        // Always sent, asked or not (the spec allows it): clients that honour it never send
        // requests we would reject for alignment.
        let mut info = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
        info.extend_from_slice(&export.block_size_min().to_be_bytes());
        info.extend_from_slice(&BLOCK_SIZE_PREFERRED_BYTES.to_be_bytes());
        info.extend_from_slice(&PAYLOAD_MAX_BYTES.to_be_bytes());
        write_option_reply(out, option, REP_INFO, &info);

        write_option_reply(out, option, REP_ACK, &[]);
        if option == OPT_GO {
            Applied::Go(agreement)
        } else {
            Applied::Continue
        }
    }

    fn apply_meta_context(
        &mut self,
        option: u32,
        payload: &[u8],
        exports: &[ExportSummary],
        out: &mut Vec<u8>,
    ) {
        let set = option == OPT_SET_META_CONTEXT;
        if !self.structured_replies {
            write_option_reply(
                out,
                option,
                REP_ERR_INVALID,
                b"negotiate structured replies first",
            );
            return;
        }
        let Some(request) = parse_meta_context_request(payload) else {
            write_option_reply(
                out,
                option,
                REP_ERR_INVALID,
                b"malformed meta context request",
            );
            return;
        };
        let Some(export) = resolve_export(exports, request.name) else {
            write_option_reply(out, option, REP_ERR_UNKNOWN, b"no such export");
            return;
        };
        let matches_base_allocation = |query: &[u8]| {
            query == BASE_ALLOCATION_CONTEXT.as_bytes() || (!set && query == b"base:")
        };
        // LIST with no queries lists everything; SET with no queries selects nothing.
        let selected = if request.queries.is_empty() {
            !set
        } else {
            request.queries.iter().any(|q| matches_base_allocation(q))
        };
        if selected {
            let id = if set { BASE_ALLOCATION_CONTEXT_ID } else { 0 };
            let mut data = id.to_be_bytes().to_vec();
            data.extend_from_slice(BASE_ALLOCATION_CONTEXT.as_bytes());
            write_option_reply(out, option, REP_META_CONTEXT, &data);
        }
        if set {
            self.meta = Some(MetaSelection {
                export_name: export.name.clone(),
                base_allocation: selected,
            });
        }
        write_option_reply(out, option, REP_ACK, &[]);
    }

    fn agree(&self, export: &ExportSummary) -> Agreement {
        let base_allocation = self.structured_replies
            && self
                .meta
                .as_ref()
                .is_some_and(|m| m.base_allocation && m.export_name == export.name);
        Agreement {
            export: export.clone(),
            transmission_flags: transmission_flags(export.read_only, self.structured_replies),
            structured_replies: self.structured_replies,
            base_allocation,
        }
    }
}

enum Applied {
    Continue,
    Abort,
    Go(Agreement),
    StartTls,
}

/// The transmission flags we advertise for an export.
pub fn transmission_flags(read_only: bool, structured_replies: bool) -> u16 {
    let mut flags = FLAG_HAS_FLAGS
        | FLAG_SEND_FLUSH
        | FLAG_SEND_FUA
        | FLAG_SEND_TRIM
        | FLAG_SEND_WRITE_ZEROES
        | FLAG_CAN_MULTI_CONN;
    if read_only {
        flags |= FLAG_READ_ONLY;
    }
    if structured_replies {
        // We always answer a read with one OFFSET_DATA chunk, so "do not fragment" holds.
        flags |= FLAG_SEND_DF;
    }
    flags
}

/// Parse the client flags that follow the greeting.
pub fn parse_client_flags(input: &[u8]) -> Parse<u32, NegotiationError> {
    let Some(flags) = Cursor::new(input).u32() else {
        return Parse::Incomplete;
    };
    if flags & !(CLIENT_FLAG_FIXED_NEWSTYLE | CLIENT_FLAG_NO_ZEROES) != 0 {
        return Parse::Invalid(NegotiationError::UnknownClientFlags { flags });
    }
    Parse::Complete(flags, CLIENT_FLAGS_LEN_BYTES)
}

/// Parse an option header (not its payload).
pub fn parse_option_header(input: &[u8]) -> Parse<OptionHeader, NegotiationError> {
    let mut c = Cursor::new(input);
    let (Some(magic), Some(option), Some(length_bytes)) = (c.u64(), c.u32(), c.u32()) else {
        return Parse::Incomplete;
    };
    if magic != IHAVEOPT_MAGIC {
        return Parse::Invalid(NegotiationError::BadOptionMagic { magic });
    }
    Parse::Complete(
        OptionHeader {
            option,
            length_bytes,
        },
        OPTION_HEADER_LEN_BYTES,
    )
}

/// Encode an option (client side; tests, fuzz seeds and our own tools).
pub fn encode_option(option: u32, payload: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&IHAVEOPT_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(
        &u32::try_from(payload.len())
            .expect("option payload fits u32")
            .to_be_bytes(),
    );
    out.extend_from_slice(payload);
}

/// The payload of NBD_OPT_INFO / NBD_OPT_GO.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InfoRequest<'a> {
    pub name: &'a [u8],
    pub info_types: Vec<u16>,
}

impl InfoRequest<'_> {
    fn wants(&self, info: u16) -> bool {
        self.info_types.contains(&info)
    }
}

/// Decode a complete NBD_OPT_INFO / NBD_OPT_GO payload; `None` if malformed.
pub fn parse_info_request(payload: &[u8]) -> Option<InfoRequest<'_>> {
    let mut c = Cursor::new(payload);
    let name = take_string(&mut c)?;
    let count = c.u16()?;
    let mut info_types = Vec::with_capacity(usize::from(count).min(c.remaining() / 2));
    for _ in 0..count {
        info_types.push(c.u16()?);
    }
    (c.remaining() == 0).then_some(InfoRequest { name, info_types })
}

/// Encode an NBD_OPT_INFO / NBD_OPT_GO payload (client side).
pub fn encode_info_request(name: &str, info_types: &[u16]) -> Vec<u8> {
    let mut out = Vec::new();
    put_string(&mut out, name);
    out.extend_from_slice(
        &u16::try_from(info_types.len())
            .expect("few info types")
            .to_be_bytes(),
    );
    for t in info_types {
        out.extend_from_slice(&t.to_be_bytes());
    }
    out
}

/// The payload of NBD_OPT_LIST_META_CONTEXT / NBD_OPT_SET_META_CONTEXT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaContextRequest<'a> {
    pub name: &'a [u8],
    pub queries: Vec<&'a [u8]>,
}

/// Decode a complete meta-context payload; `None` if malformed.
pub fn parse_meta_context_request(payload: &[u8]) -> Option<MetaContextRequest<'_>> {
    let mut c = Cursor::new(payload);
    let name = take_string(&mut c)?;
    let count = c.u32()?;
    // Each query takes at least 4 bytes, so this bounds the allocation by the payload.
    let mut queries = Vec::with_capacity(usize::try_from(count).ok()?.min(c.remaining() / 4));
    for _ in 0..count {
        queries.push(take_string(&mut c)?);
    }
    (c.remaining() == 0).then_some(MetaContextRequest { name, queries })
}

/// Encode a meta-context payload (client side).
pub fn encode_meta_context_request(name: &str, queries: &[&str]) -> Vec<u8> {
    let mut out = Vec::new();
    put_string(&mut out, name);
    out.extend_from_slice(
        &u32::try_from(queries.len())
            .expect("few queries")
            .to_be_bytes(),
    );
    for q in queries {
        put_string(&mut out, q);
    }
    out
}

/// Append one option reply.
fn write_option_reply(out: &mut Vec<u8>, option: u32, reply_type: u32, data: &[u8]) {
    out.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&reply_type.to_be_bytes());
    // Replies are built from bounded names and fixed structures.
    let len = u32::try_from(data.len()).expect("option reply is small");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(data);
}

/// The empty name selects the default (first) export; otherwise names match exactly.
fn resolve_export<'a>(exports: &'a [ExportSummary], name: &[u8]) -> Option<&'a ExportSummary> {
    if name.is_empty() {
        exports.first()
    } else {
        exports.iter().find(|e| e.name.as_bytes() == name)
    }
}

fn take_string<'a>(c: &mut Cursor<'a>) -> Option<&'a [u8]> {
    let len = c.u32()?;
    if len > STRING_MAX_BYTES {
        return None;
    }
    c.take(usize::try_from(len).ok()?)
}

fn put_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(
        &u32::try_from(s.len())
            .expect("string fits u32")
            .to_be_bytes(),
    );
    out.extend_from_slice(s.as_bytes());
}

#[cfg(test)]
mod tests;
