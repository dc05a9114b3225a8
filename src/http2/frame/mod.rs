//! HTTP/2 frame codec (RFC 9113 §4, §6): zero-copy decoding of one frame at a
//! time from a receive buffer, and encoders that append to a caller's `Vec<u8>`.
//!
//! This module holds what every frame shares: the 9-octet [`FrameHeader`]
//! (§4.1), the frame [`Kind`], the decoded [`Frame`], the size limits (§4.2)
//! and padding (§6.1). Each frame type's own decode and encode rules live in
//! one file per type or family (`data.rs`, `headers.rs`, `priority.rs`,
//! `rst_stream.rs`, `settings.rs`, `ping.rs`, `goaway.rs`, `window_update.rs`),
//! after hyperium/h2's `src/frame/`.
//!
//! Only single-frame rules live here. The connection owns the stateful ones:
//! CONTINUATION sequencing (§6.10), stream states (§5.1), flow control (§6.9),
//! role rules (a server receiving PUSH_PROMISE, §8.4; a client receiving
//! ENABLE_PUSH=1, §6.5.2) and HPACK.

mod data;
mod goaway;
mod headers;
mod ping;
mod priority;
mod rst_stream;
mod settings;
mod window_update;

#[cfg(test)]
mod tests;

use super::error::{ErrorCode, H2Error};

pub use data::encode_data;
pub use goaway::encode_goaway;
pub use headers::encode_headers;
pub use ping::encode_ping;
pub use priority::Priority;
pub use rst_stream::encode_rst_stream;
pub use settings::{
    encode_settings, encode_settings_ack, SettingsIter, SETTINGS_ENABLE_PUSH,
    SETTINGS_HEADER_TABLE_SIZE, SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_CONCURRENT_STREAMS,
    SETTINGS_MAX_FRAME_SIZE, SETTINGS_MAX_HEADER_LIST_SIZE,
};
pub use window_update::encode_window_update;

/// Client connection preface (§3.4); the server expects it before any frame.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Every frame starts with a fixed 9-octet header (§4.1).
pub const FRAME_HEADER_LEN: usize = 9;
/// Initial SETTINGS_MAX_FRAME_SIZE, which every endpoint must accept (§4.2).
pub const DEFAULT_MAX_FRAME_SIZE: u32 = 16_384;
/// Largest SETTINGS_MAX_FRAME_SIZE that may be advertised, 2^24-1 (§6.5.2).
pub const MAX_ALLOWED_FRAME_SIZE: u32 = (1 << 24) - 1;
/// Largest flow-control window, 2^31-1 (§6.9.1).
pub const MAX_WINDOW_SIZE: u32 = (1 << 31) - 1;

// Frame type octets (§6), for building raw frames; decoded headers carry a `Kind`.

/// DATA: request or response body octets, flow-controlled (§6.1).
pub const TYPE_DATA: u8 = 0x0;
/// HEADERS: opens a stream and carries a field block fragment (§6.2).
pub const TYPE_HEADERS: u8 = 0x1;
/// PRIORITY: deprecated stream dependency; parsed and ignored (§6.3).
pub const TYPE_PRIORITY: u8 = 0x2;
/// RST_STREAM: terminates one stream with an error code (§6.4).
pub const TYPE_RST_STREAM: u8 = 0x3;
/// SETTINGS: connection parameters, acknowledged by the peer (§6.5).
pub const TYPE_SETTINGS: u8 = 0x4;
/// PUSH_PROMISE: server push of a reserved stream (§6.6).
pub const TYPE_PUSH_PROMISE: u8 = 0x5;
/// PING: round-trip probe, echoed with ACK (§6.7).
pub const TYPE_PING: u8 = 0x6;
/// GOAWAY: graceful or error shutdown of the connection (§6.8).
pub const TYPE_GOAWAY: u8 = 0x7;
/// WINDOW_UPDATE: flow-control credit for a stream or the connection (§6.9).
pub const TYPE_WINDOW_UPDATE: u8 = 0x8;
/// CONTINUATION: further field block fragment after HEADERS or PUSH_PROMISE (§6.10).
pub const TYPE_CONTINUATION: u8 = 0x9;

// Frame flags (§6). END_STREAM and ACK share a bit on different frame types.

/// END_STREAM on DATA and HEADERS: the sender's last frame on the stream (§6.1, §6.2).
pub const FLAG_END_STREAM: u8 = 0x1;
/// ACK on SETTINGS and PING: this frame acknowledges the peer's (§6.5, §6.7).
pub const FLAG_ACK: u8 = 0x1;
/// END_HEADERS on HEADERS, PUSH_PROMISE and CONTINUATION: the field block is complete (§6.2).
pub const FLAG_END_HEADERS: u8 = 0x4;
/// PADDED on DATA, HEADERS and PUSH_PROMISE: a Pad Length octet and padding are present (§6.1).
pub const FLAG_PADDED: u8 = 0x8;
/// PRIORITY on HEADERS: stream dependency fields precede the fragment (§6.2).
pub const FLAG_PRIORITY: u8 = 0x20;

/// Stream identifiers, window increments and GOAWAY's last stream are 31 bits
/// behind a reserved bit that is ignored on receipt and unset on send (§4.1).
const U31: u32 = 0x7fff_ffff;

/// The frame type octet of the header (§4.1), one variant per type of §6.
///
/// `Kind::from(u8)` and `u8::from(Kind)` round-trip every octet. Extension
/// types stay representable as [`Kind::Unknown`] because they MUST be ignored,
/// not rejected (§5.5); `Kind::from` never puts a §6 type there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// DATA (§6.1).
    Data,
    /// HEADERS (§6.2).
    Headers,
    /// PRIORITY (§6.3).
    Priority,
    /// RST_STREAM (§6.4).
    RstStream,
    /// SETTINGS (§6.5).
    Settings,
    /// PUSH_PROMISE (§6.6).
    PushPromise,
    /// PING (§6.7).
    Ping,
    /// GOAWAY (§6.8).
    GoAway,
    /// WINDOW_UPDATE (§6.9).
    WindowUpdate,
    /// CONTINUATION (§6.10).
    Continuation,
    /// A type this codec does not define, e.g. an extension (§5.5).
    Unknown(u8),
}

impl From<u8> for Kind {
    fn from(octet: u8) -> Kind {
        match octet {
            TYPE_DATA => Kind::Data,
            TYPE_HEADERS => Kind::Headers,
            TYPE_PRIORITY => Kind::Priority,
            TYPE_RST_STREAM => Kind::RstStream,
            TYPE_SETTINGS => Kind::Settings,
            TYPE_PUSH_PROMISE => Kind::PushPromise,
            TYPE_PING => Kind::Ping,
            TYPE_GOAWAY => Kind::GoAway,
            TYPE_WINDOW_UPDATE => Kind::WindowUpdate,
            TYPE_CONTINUATION => Kind::Continuation,
            other => Kind::Unknown(other),
        }
    }
}

impl From<Kind> for u8 {
    fn from(kind: Kind) -> u8 {
        match kind {
            Kind::Data => TYPE_DATA,
            Kind::Headers => TYPE_HEADERS,
            Kind::Priority => TYPE_PRIORITY,
            Kind::RstStream => TYPE_RST_STREAM,
            Kind::Settings => TYPE_SETTINGS,
            Kind::PushPromise => TYPE_PUSH_PROMISE,
            Kind::Ping => TYPE_PING,
            Kind::GoAway => TYPE_GOAWAY,
            Kind::WindowUpdate => TYPE_WINDOW_UPDATE,
            Kind::Continuation => TYPE_CONTINUATION,
            Kind::Unknown(other) => other,
        }
    }
}

/// Which stream identifiers a frame type may carry.
enum Scope {
    /// Must name a stream, never 0 (§6.1-§6.4, §6.6, §6.10).
    Stream,
    /// Must be on stream 0 (§6.5, §6.7, §6.8).
    Connection,
    /// WINDOW_UPDATE targets either (§6.9); unknown types are not checked (§5.5).
    Either,
}

impl Kind {
    fn scope(self) -> Scope {
        match self {
            Kind::Data
            | Kind::Headers
            | Kind::Priority
            | Kind::RstStream
            | Kind::PushPromise
            | Kind::Continuation => Scope::Stream,
            Kind::Settings | Kind::Ping | Kind::GoAway => Scope::Connection,
            Kind::WindowUpdate | Kind::Unknown(_) => Scope::Either,
        }
    }
}

/// The fixed frame header (§4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Payload length in octets (24 bits), not counting the 9-octet header.
    pub length: u32,
    /// Frame type; [`Kind::Unknown`] for extension types.
    pub kind: Kind,
    /// Type-specific flag bits (`FLAG_*`).
    pub flags: u8,
    /// Stream the frame belongs to, reserved bit cleared; 0 for the connection.
    pub stream_id: u32,
}

impl FrameHeader {
    /// Parses the first 9 octets of `buf`, or `None` if it is shorter.
    /// The reserved bit is masked off because receivers MUST ignore it (§4.1).
    pub fn parse(buf: &[u8]) -> Option<FrameHeader> {
        let h = buf.first_chunk::<FRAME_HEADER_LEN>()?;
        Some(FrameHeader {
            length: u32::from_be_bytes([0, h[0], h[1], h[2]]),
            kind: Kind::from(h[3]),
            flags: h[4],
            stream_id: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & U31,
        })
    }

    /// Appends the 9 header octets, with the reserved bit unset (§4.1).
    /// `length` must fit in 24 bits; the encoders guarantee that.
    pub fn encode(&self, dst: &mut Vec<u8>) {
        put_header(
            dst,
            self.length as usize,
            self.kind,
            self.flags,
            self.stream_id,
        );
    }

    /// Header plus payload: how far to advance past this frame.
    pub fn frame_len(&self) -> usize {
        FRAME_HEADER_LEN.saturating_add(self.length as usize)
    }

    /// Whether the `FLAG_*` bit `flag` is set; its meaning depends on the type (§6).
    fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// One decoded frame, borrowing its payload from the input buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame<'a> {
    /// DATA (§6.1). `data` has padding removed; `flow_len` is the whole payload length,
    /// padding included, because that is what flow control counts (§6.1).
    Data {
        /// The stream the octets belong to.
        stream_id: u32,
        /// END_STREAM: no more DATA or HEADERS from the sender on this stream.
        end_stream: bool,
        /// Body octets, padding stripped.
        data: &'a [u8],
        /// Octets charged against the flow-control windows.
        flow_len: u32,
    },
    /// HEADERS (§6.2): opens a stream or carries trailers.
    Headers {
        /// The stream being opened or finished.
        stream_id: u32,
        /// END_STREAM: the field block is the last thing sent on this stream.
        end_stream: bool,
        /// END_HEADERS: no CONTINUATION follows.
        end_headers: bool,
        /// Dependency fields if the PRIORITY flag was set; validated, then ignored.
        priority: Option<Priority>,
        /// HPACK-encoded field block fragment, padding and priority fields stripped.
        fragment: &'a [u8],
    },
    /// PRIORITY (§6.3): deprecated, validated and ignored.
    Priority {
        /// The stream whose priority is being set.
        stream_id: u32,
        /// The dependency fields.
        priority: Priority,
    },
    /// RST_STREAM (§6.4): the peer abandoned a stream.
    RstStream {
        /// The stream being reset.
        stream_id: u32,
        /// Why (§7).
        code: ErrorCode,
    },
    /// SETTINGS (§6.5), or the acknowledgement of ours.
    Settings {
        /// ACK flag: this acknowledges our SETTINGS and carries no parameters.
        ack: bool,
        /// The parameters, already range-checked.
        params: SettingsIter<'a>,
    },
    /// PUSH_PROMISE (§6.6). The connection never accepts one: servers may not receive it and
    /// our client disables push (§8.4).
    PushPromise {
        /// The associated stream the promise was sent on.
        stream_id: u32,
        /// The stream the server reserves for the pushed response.
        promised_id: u32,
        /// END_HEADERS: no CONTINUATION follows.
        end_headers: bool,
        /// HPACK-encoded field block fragment of the promised request.
        fragment: &'a [u8],
    },
    /// PING (§6.7).
    Ping {
        /// ACK flag: this is the echo of a PING we sent.
        ack: bool,
        /// Opaque data, echoed back unchanged.
        data: [u8; 8],
    },
    /// GOAWAY (§6.8): the peer is closing the connection.
    GoAway {
        /// Highest stream the sender may have processed; later streams can be retried.
        last_stream_id: u32,
        /// Why the connection is closing (§7).
        code: ErrorCode,
        /// Opaque diagnostic data.
        debug: &'a [u8],
    },
    /// WINDOW_UPDATE (§6.9).
    WindowUpdate {
        /// The stream whose window grows, or 0 for the connection window.
        stream_id: u32,
        /// Credit to add, 1..=2^31-1.
        increment: u32,
    },
    /// CONTINUATION (§6.10): the next fragment of a field block.
    Continuation {
        /// Must be the stream of the HEADERS or PUSH_PROMISE it continues.
        stream_id: u32,
        /// END_HEADERS: the field block is complete.
        end_headers: bool,
        /// HPACK-encoded field block fragment.
        fragment: &'a [u8],
    },
    /// Unknown types MUST be ignored and discarded (§4.1, §5.5), except that
    /// one inside a header block is a sequencing error the connection checks.
    Unknown {
        /// The unrecognised frame type.
        kind: u8,
        /// The stream it was sent on.
        stream_id: u32,
    },
}

/// Decodes the frame at the start of `buf`: `Ok(None)` until it is fully
/// buffered, then the frame and how many octets to consume. `max_frame_size`
/// is the SETTINGS_MAX_FRAME_SIZE we currently accept (§4.2).
///
/// The size limit is checked on the header alone, so an oversized frame is
/// refused before its payload is buffered, always as a connection error
/// (§4.2 requires that for most types and allows it for all; the alternative
/// is draining up to 16 MiB). An [`H2Error::Stream`] comes only with the
/// whole frame buffered: send RST_STREAM, skip `FrameHeader::frame_len()`
/// octets and carry on (§5.4.2).
///
/// Sequencing is NOT checked: the connection must ensure CONTINUATION, and
/// nothing else, follows HEADERS/PUSH_PROMISE without END_HEADERS on the same
/// stream, and that no stray CONTINUATION arrives (§6.10).
pub fn decode(buf: &[u8], max_frame_size: u32) -> Result<Option<(Frame<'_>, usize)>, H2Error> {
    let Some(h) = FrameHeader::parse(buf) else {
        return Ok(None);
    };
    if h.length > max_frame_size {
        return Err(size_err("frame exceeds SETTINGS_MAX_FRAME_SIZE"));
    }
    let Some(payload) = buf.get(FRAME_HEADER_LEN..h.frame_len()) else {
        return Ok(None);
    };
    decode_payload(h, payload).map(|f| Some((f, h.frame_len())))
}

/// Checks the stream identifier against the type, then hands the payload to
/// that type's decoder.
fn decode_payload(h: FrameHeader, p: &[u8]) -> Result<Frame<'_>, H2Error> {
    check_scope(&h)?;
    match h.kind {
        Kind::Data => data::decode_data(h, p),
        Kind::Headers => headers::decode_headers(h, p),
        Kind::Priority => priority::decode_priority(h, p),
        Kind::RstStream => rst_stream::decode_rst_stream(h, p),
        Kind::Settings => settings::decode_settings(h, p),
        Kind::PushPromise => headers::decode_push_promise(h, p),
        Kind::Ping => ping::decode_ping(h, p),
        Kind::GoAway => goaway::decode_goaway(h, p),
        Kind::WindowUpdate => window_update::decode_window_update(h, p),
        Kind::Continuation => headers::decode_continuation(h, p),
        Kind::Unknown(kind) => Ok(Frame::Unknown {
            kind,
            stream_id: h.stream_id,
        }),
    }
}

/// Stream frames on stream 0 and connection frames on a stream are
/// connection PROTOCOL_ERRORs (§6.1-§6.10). Checked before any per-type rule
/// so that size errors on stream 0 never turn into meaningless stream errors.
fn check_scope(h: &FrameHeader) -> Result<(), H2Error> {
    match (h.kind.scope(), h.stream_id) {
        (Scope::Stream, 0) => Err(proto_err("stream frame on stream 0")),
        (Scope::Connection, 1..) => Err(proto_err("connection frame on a stream")),
        _ => Ok(()),
    }
}

fn size_err(reason: &'static str) -> H2Error {
    H2Error::connection(ErrorCode::FRAME_SIZE_ERROR, reason)
}

fn proto_err(reason: &'static str) -> H2Error {
    H2Error::connection(ErrorCode::PROTOCOL_ERROR, reason)
}

/// A 4-octet field, or `None` if `p` is any other length.
fn be32(p: &[u8]) -> Option<u32> {
    p.try_into().ok().map(u32::from_be_bytes)
}

/// Removes the Pad Length octet and trailing padding (§6.1, §6.2, §6.6),
/// leaving at least `fixed` octets of mandatory fields. Padding that would eat
/// into them is PROTOCOL_ERROR; a payload too short for the mandatory fields
/// (Pad Length included) is FRAME_SIZE_ERROR (§4.2). Both are connection
/// errors, as §6.1 and §4.2 require for DATA and header-carrying frames.
fn unpad(p: &[u8], padded: bool, fixed: usize) -> Result<&[u8], H2Error> {
    let short = || size_err("payload too short for its fields");
    let (pad, body) = match (padded, p.split_first()) {
        (false, _) => (0, p),
        (true, Some((&pad, body))) => (usize::from(pad), body),
        (true, None) => return Err(short()),
    };
    let room = body.len().checked_sub(fixed).ok_or_else(short)?;
    if pad > room {
        return Err(proto_err("padding exceeds payload"));
    }
    body.get(..body.len() - pad).ok_or_else(short)
}

/// Appends a frame header (§4.1) with the reserved bit unset.
fn put_header(dst: &mut Vec<u8>, len: usize, kind: Kind, flags: u8, stream_id: u32) {
    let length = u32::try_from(len).unwrap_or(u32::MAX);
    debug_assert!(length <= MAX_ALLOWED_FRAME_SIZE, "frame too long");
    dst.extend_from_slice(&length.to_be_bytes()[1..]);
    dst.extend_from_slice(&[u8::from(kind), flags]);
    dst.extend_from_slice(&(stream_id & U31).to_be_bytes());
}

/// Writes `body` in chunks of at most `max`, clamped to the legal
/// 16384..=2^24-1 (no peer may advertise less, §6.5.2; it also guarantees
/// progress). Types are `kinds[0]` then `kinds[1]`; `flags[0]` goes on the
/// first frame, `flags[1]` on the last. An empty body still makes a frame.
fn encode_split(
    dst: &mut Vec<u8>,
    stream_id: u32,
    body: &[u8],
    max: u32,
    kinds: [Kind; 2],
    flags: [u8; 2],
) {
    let max = max.clamp(DEFAULT_MAX_FRAME_SIZE, MAX_ALLOWED_FRAME_SIZE) as usize;
    dst.reserve(body.len() + FRAME_HEADER_LEN * (body.len() / max + 1));
    let (mut kind, mut first, mut left) = (kinds[0], flags[0], body);
    loop {
        let (chunk, tail) = left.split_at(left.len().min(max));
        let last = if tail.is_empty() { flags[1] } else { 0 };
        put_header(dst, chunk.len(), kind, first | last, stream_id);
        dst.extend_from_slice(chunk);
        if tail.is_empty() {
            return;
        }
        (kind, first, left) = (kinds[1], 0, tail);
    }
}
