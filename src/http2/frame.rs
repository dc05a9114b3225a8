//! HTTP/2 frame codec (RFC 9113 §4, §6): zero-copy decoding of one frame at a
//! time from a receive buffer, and encoders that append to a caller's `Vec<u8>`.
//!
//! Only single-frame rules live here. The connection owns the stateful ones:
//! CONTINUATION sequencing (§6.10), stream states (§5.1), flow control (§6.9),
//! role rules (a server receiving PUSH_PROMISE, §8.4; a client receiving
//! ENABLE_PUSH=1, §6.5.2) and HPACK.

use super::error::{ErrorCode, H2Error};

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

// Frame types (§6).

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

// SETTINGS identifiers (§6.5.2).

/// SETTINGS_HEADER_TABLE_SIZE: largest HPACK dynamic table the sender's decoder allows (§6.5.2).
pub const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;
/// SETTINGS_ENABLE_PUSH: 0 or 1; a server must never send 1 (§6.5.2).
pub const SETTINGS_ENABLE_PUSH: u16 = 0x2;
/// SETTINGS_MAX_CONCURRENT_STREAMS: streams the sender lets its peer have open at once (§6.5.2).
pub const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
/// SETTINGS_INITIAL_WINDOW_SIZE: each stream's initial flow-control window, <= 2^31-1 (§6.5.2).
pub const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
/// SETTINGS_MAX_FRAME_SIZE: largest frame payload the sender accepts, 2^14..=2^24-1 (§6.5.2).
pub const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;
/// SETTINGS_MAX_HEADER_LIST_SIZE: advisory limit on a decoded field section (§6.5.2).
pub const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;

/// Stream identifiers, window increments and GOAWAY's last stream are 31 bits
/// behind a reserved bit that is ignored on receipt and unset on send (§4.1).
const U31: u32 = 0x7fff_ffff;

/// The fixed frame header (§4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Payload length in octets (24 bits), not counting the 9-octet header.
    pub length: u32,
    /// Frame type, one of the `TYPE_*` constants or an unknown extension type.
    pub kind: u8,
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
            kind: h[3],
            flags: h[4],
            stream_id: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & U31,
        })
    }

    /// Appends the 9 header octets, with the reserved bit unset (§4.1).
    /// `length` must fit in 24 bits; the encoders below guarantee that.
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
}

/// Stream dependency fields of HEADERS (PRIORITY flag) and PRIORITY frames.
/// RFC 9113 §5.3.2 deprecates this scheme; it is decoded only to be
/// validated and then ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Priority {
    /// The stream this one depends on (31 bits).
    pub dependency: u32,
    /// The E bit: the dependency is exclusive.
    pub exclusive: bool,
    /// Wire value; the effective weight is `weight + 1` (§5.3.2 of RFC 7540).
    pub weight: u8,
}

impl Priority {
    fn parse(b: &[u8; 5]) -> Priority {
        let dep = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        Priority {
            dependency: dep & U31,
            exclusive: dep & !U31 != 0,
            weight: b[4],
        }
    }
}

/// The `(identifier, value)` pairs of a SETTINGS frame in wire order (§6.5.1),
/// borrowed from the input. Unknown identifiers are yielded too; the
/// connection MUST ignore them (§6.5.2). Known values were validated by
/// [`decode`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingsIter<'a> {
    rest: &'a [u8],
}

impl Iterator for SettingsIter<'_> {
    type Item = (u16, u32);

    fn next(&mut self) -> Option<(u16, u32)> {
        let (p, rest) = self.rest.split_first_chunk::<6>()?;
        self.rest = rest;
        let id = u16::from_be_bytes([p[0], p[1]]);
        Some((id, u32::from_be_bytes([p[2], p[3], p[4], p[5]])))
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

fn size_err(reason: &'static str) -> H2Error {
    H2Error::connection(ErrorCode::FRAME_SIZE_ERROR, reason)
}

fn proto_err(reason: &'static str) -> H2Error {
    H2Error::connection(ErrorCode::PROTOCOL_ERROR, reason)
}

fn be32(p: &[u8]) -> Option<u32> {
    p.try_into().ok().map(u32::from_be_bytes)
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

fn decode_payload(h: FrameHeader, p: &[u8]) -> Result<Frame<'_>, H2Error> {
    use ErrorCode as E;
    let sid = h.stream_id;
    let flag = |f: u8| h.flags & f != 0;
    // §6.1-§6.4, §6.6, §6.10: these frames belong to a stream; §6.5, §6.7,
    // §6.8: these to the connection. Checked first so that size errors on
    // stream 0 never turn into meaningless stream errors.
    let on_stream =
        h.kind <= TYPE_RST_STREAM || [TYPE_PUSH_PROMISE, TYPE_CONTINUATION].contains(&h.kind);
    if on_stream && sid == 0 {
        return Err(proto_err("stream frame on stream 0"));
    }
    if matches!(h.kind, TYPE_SETTINGS | TYPE_PING | TYPE_GOAWAY) && sid != 0 {
        return Err(proto_err("connection frame on a stream"));
    }
    Ok(match h.kind {
        TYPE_DATA => Frame::Data {
            stream_id: sid,
            end_stream: flag(FLAG_END_STREAM),
            data: unpad(p, flag(FLAG_PADDED), 0)?,
            flow_len: h.length,
        },
        TYPE_HEADERS => {
            let prio = flag(FLAG_PRIORITY);
            let body = unpad(p, flag(FLAG_PADDED), if prio { 5 } else { 0 })?;
            let (priority, fragment) = match body.split_first_chunk::<5>() {
                Some((fields, rest)) if prio => (Some(Priority::parse(fields)), rest),
                _ => (None, body),
            };
            // §5.3.1 makes this a stream error, but returning one would drop
            // the field block and desynchronise HPACK state (§4.3), so it is
            // escalated to a connection error (§5.4.1 permits closing).
            if priority.is_some_and(|p| p.dependency == sid) {
                return Err(proto_err("HEADERS depends on itself"));
            }
            Frame::Headers {
                stream_id: sid,
                end_stream: flag(FLAG_END_STREAM),
                end_headers: flag(FLAG_END_HEADERS),
                priority,
                fragment,
            }
        }
        TYPE_PRIORITY => {
            // §6.3: wrong length is a *stream* FRAME_SIZE_ERROR; §5.3.1:
            // self-dependency is a stream PROTOCOL_ERROR.
            let fields = <&[u8; 5]>::try_from(p)
                .map_err(|_| H2Error::stream(sid, E::FRAME_SIZE_ERROR, "PRIORITY length not 5"))?;
            let priority = Priority::parse(fields);
            if priority.dependency == sid {
                return Err(H2Error::stream(sid, E::PROTOCOL_ERROR, "self-dependency"));
            }
            Frame::Priority {
                stream_id: sid,
                priority,
            }
        }
        // §6.4: unlike PRIORITY, a bad RST_STREAM length is a connection
        // error (answering it with RST_STREAM could loop, §5.4.2).
        TYPE_RST_STREAM => Frame::RstStream {
            stream_id: sid,
            code: ErrorCode(be32(p).ok_or_else(|| size_err("RST_STREAM length not 4"))?),
        },
        TYPE_SETTINGS => {
            let ack = flag(FLAG_ACK);
            if ack && !p.is_empty() {
                return Err(size_err("SETTINGS ACK with payload"));
            }
            if p.len() % 6 != 0 {
                return Err(size_err("SETTINGS length not a multiple of 6"));
            }
            let params = SettingsIter { rest: p };
            params
                .clone()
                .try_for_each(|(id, v)| validate_setting(id, v))?;
            Frame::Settings { ack, params }
        }
        TYPE_PUSH_PROMISE => {
            let body = unpad(p, flag(FLAG_PADDED), 4)?;
            let (id, fragment) = body
                .split_first_chunk::<4>()
                .ok_or_else(|| size_err("PUSH_PROMISE too short"))?;
            Frame::PushPromise {
                stream_id: sid,
                promised_id: u32::from_be_bytes(*id) & U31,
                end_headers: flag(FLAG_END_HEADERS),
                fragment,
            }
        }
        TYPE_PING => Frame::Ping {
            ack: flag(FLAG_ACK),
            data: p.try_into().map_err(|_| size_err("PING length not 8"))?,
        },
        TYPE_GOAWAY => {
            let (fixed, debug) = p
                .split_first_chunk::<8>()
                .ok_or_else(|| size_err("GOAWAY shorter than 8"))?;
            let [a, b, c, d, e, f, g, h] = *fixed;
            Frame::GoAway {
                last_stream_id: u32::from_be_bytes([a, b, c, d]) & U31,
                code: ErrorCode(u32::from_be_bytes([e, f, g, h])),
                debug,
            }
        }
        TYPE_WINDOW_UPDATE => {
            let increment = be32(p).ok_or_else(|| size_err("WINDOW_UPDATE length not 4"))? & U31;
            // §6.9: a zero increment is an error of the window it targets.
            if increment == 0 {
                return Err(match sid {
                    0 => proto_err("WINDOW_UPDATE increment 0"),
                    _ => H2Error::stream(sid, E::PROTOCOL_ERROR, "WINDOW_UPDATE increment 0"),
                });
            }
            Frame::WindowUpdate {
                stream_id: sid,
                increment,
            }
        }
        TYPE_CONTINUATION => Frame::Continuation {
            stream_id: sid,
            end_headers: flag(FLAG_END_HEADERS),
            fragment: p,
        },
        kind => Frame::Unknown {
            kind,
            stream_id: sid,
        },
    })
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

/// §6.5.2 value ranges; unknown identifiers are ignored.
fn validate_setting(id: u16, value: u32) -> Result<(), H2Error> {
    match id {
        SETTINGS_ENABLE_PUSH if value > 1 => Err(proto_err("ENABLE_PUSH not 0 or 1")),
        SETTINGS_INITIAL_WINDOW_SIZE if value > MAX_WINDOW_SIZE => Err(H2Error::connection(
            ErrorCode::FLOW_CONTROL_ERROR,
            "INITIAL_WINDOW_SIZE above 2^31-1",
        )),
        SETTINGS_MAX_FRAME_SIZE
            if !(DEFAULT_MAX_FRAME_SIZE..=MAX_ALLOWED_FRAME_SIZE).contains(&value) =>
        {
            Err(proto_err("MAX_FRAME_SIZE out of range"))
        }
        _ => Ok(()),
    }
}

fn put_header(dst: &mut Vec<u8>, len: usize, kind: u8, flags: u8, stream_id: u32) {
    let length = u32::try_from(len).unwrap_or(u32::MAX);
    debug_assert!(length <= MAX_ALLOWED_FRAME_SIZE, "frame too long");
    dst.extend_from_slice(&length.to_be_bytes()[1..]);
    dst.extend_from_slice(&[kind, flags]);
    dst.extend_from_slice(&(stream_id & U31).to_be_bytes());
}

/// Appends one SETTINGS frame (§6.5). It is never split, since each frame is
/// acknowledged separately; keep it within 2730 pairs (16384 octets), the
/// size every peer accepts (§4.2).
pub fn encode_settings(dst: &mut Vec<u8>, params: &[(u16, u32)]) {
    put_header(dst, params.len().saturating_mul(6), TYPE_SETTINGS, 0, 0);
    for &(id, value) in params {
        dst.extend_from_slice(&id.to_be_bytes());
        dst.extend_from_slice(&value.to_be_bytes());
    }
}

/// Appends the empty SETTINGS ACK owed for every peer SETTINGS (§6.5.3).
pub fn encode_settings_ack(dst: &mut Vec<u8>) {
    put_header(dst, 0, TYPE_SETTINGS, FLAG_ACK, 0);
}

/// Appends a PING (§6.7); a response carries `ack` and echoes `data`.
pub fn encode_ping(dst: &mut Vec<u8>, ack: bool, data: [u8; 8]) {
    put_header(dst, 8, TYPE_PING, if ack { FLAG_ACK } else { 0 }, 0);
    dst.extend_from_slice(&data);
}

/// Appends a GOAWAY (§6.8). `debug` is truncated so the frame fits the
/// 16384-octet size every peer accepts (§4.2) whatever it advertised.
pub fn encode_goaway(dst: &mut Vec<u8>, last_stream_id: u32, code: ErrorCode, debug: &[u8]) {
    let room = DEFAULT_MAX_FRAME_SIZE as usize - 8;
    let debug = debug.get(..room).unwrap_or(debug);
    put_header(dst, 8 + debug.len(), TYPE_GOAWAY, 0, 0);
    dst.extend_from_slice(&(last_stream_id & U31).to_be_bytes());
    dst.extend_from_slice(&code.0.to_be_bytes());
    dst.extend_from_slice(debug);
}

/// Appends an RST_STREAM (§6.4).
pub fn encode_rst_stream(dst: &mut Vec<u8>, stream_id: u32, code: ErrorCode) {
    put_header(dst, 4, TYPE_RST_STREAM, 0, stream_id);
    dst.extend_from_slice(&code.0.to_be_bytes());
}

/// Appends a WINDOW_UPDATE (§6.9); `stream_id` 0 targets the connection.
/// The increment must be 1..=2^31-1; the reserved bit is masked off.
pub fn encode_window_update(dst: &mut Vec<u8>, stream_id: u32, increment: u32) {
    put_header(dst, 4, TYPE_WINDOW_UPDATE, 0, stream_id);
    dst.extend_from_slice(&(increment & U31).to_be_bytes());
}

/// Appends `data` as unpadded DATA frames of at most `max_frame_size` (the
/// peer's setting) octets, END_STREAM on the last only (§6.1). Flow control
/// is the caller's: `data` must already fit the stream and connection windows.
pub fn encode_data(
    dst: &mut Vec<u8>,
    stream_id: u32,
    data: &[u8],
    end_stream: bool,
    max_frame_size: u32,
) {
    let flags = [0, if end_stream { FLAG_END_STREAM } else { 0 }];
    encode_split(dst, stream_id, data, max_frame_size, [TYPE_DATA; 2], flags);
}

/// Appends a header block as one HEADERS frame followed by as many
/// CONTINUATION frames as `max_frame_size` requires (§4.3, §6.10).
/// END_STREAM goes on the HEADERS frame, END_HEADERS on the last frame.
pub fn encode_headers(
    dst: &mut Vec<u8>,
    stream_id: u32,
    block: &[u8],
    end_stream: bool,
    max_frame_size: u32,
) {
    let es = if end_stream { FLAG_END_STREAM } else { 0 };
    let kinds = [TYPE_HEADERS, TYPE_CONTINUATION];
    let flags = [es, FLAG_END_HEADERS];
    encode_split(dst, stream_id, block, max_frame_size, kinds, flags);
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
    kinds: [u8; 2],
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

#[cfg(test)]
mod tests {
    use super::*;
    use ErrorCode as E;

    const MAX: u32 = DEFAULT_MAX_FRAME_SIZE;

    fn raw(kind: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        put_header(&mut v, payload.len(), kind, flags, stream_id);
        v.extend_from_slice(payload);
        v
    }

    fn enc(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut v = Vec::new();
        f(&mut v);
        v
    }

    /// Decodes exactly one frame that must fill `buf`.
    fn one(buf: &[u8]) -> Frame<'_> {
        let (frame, n) = decode(buf, MAX).unwrap().unwrap();
        assert_eq!(n, buf.len());
        frame
    }

    /// Decodes back-to-back frames: `(kind, flags, length)` of each, plus
    /// the concatenated DATA/HEADERS/CONTINUATION bodies.
    fn frames(mut buf: &[u8]) -> (Vec<(u8, u8, u32)>, Vec<u8>) {
        let (mut shape, mut joined) = (Vec::new(), Vec::new());
        while let Some(h) = FrameHeader::parse(buf) {
            shape.push((h.kind, h.flags, h.length));
            match decode(buf, MAX).unwrap().unwrap().0 {
                Frame::Data { data: b, .. }
                | Frame::Headers { fragment: b, .. }
                | Frame::Continuation { fragment: b, .. } => joined.extend_from_slice(b),
                _ => {}
            }
            buf = &buf[h.frame_len()..];
        }
        (shape, joined)
    }

    /// Collapses a decode error to `(stream, code)`; stream 0 means a
    /// connection error, since stream errors never name stream 0.
    fn rejection(buf: &[u8]) -> (u32, ErrorCode) {
        match decode(buf, MAX) {
            Err(H2Error::Connection { code, .. }) => (0, code),
            Err(H2Error::Stream {
                stream_id, code, ..
            }) => (stream_id, code),
            other => panic!("expected an error, got {other:?}"),
        }
    }

    /// One test per case: `name: wire bytes => (stream or 0, code)`.
    macro_rules! rejects {
        ($($name:ident: $buf:expr => $want:expr;)*) => {$(
            #[test]
            fn $name() {
                assert_eq!(rejection(&$buf), $want);
            }
        )*};
    }

    /// One test per case: `name: wire bytes => the single decoded frame`.
    macro_rules! decodes {
        ($($name:ident: $buf:expr => $want:expr;)*) => {$(
            #[test]
            fn $name() {
                assert_eq!(one(&$buf), $want);
            }
        )*};
    }

    rejects! {
        pad_length_equal_to_payload_length_is_protocol_error:
            raw(TYPE_DATA, FLAG_PADDED, 1, b"\x03ab") => (0, E::PROTOCOL_ERROR);
        padded_frame_without_pad_length_octet_is_frame_size_error:
            raw(TYPE_DATA, FLAG_PADDED, 1, b"") => (0, E::FRAME_SIZE_ERROR);
        headers_padding_reaching_into_priority_fields_is_protocol_error:
            raw(TYPE_HEADERS, FLAG_PADDED | FLAG_PRIORITY, 5, b"\x01\0\0\0\x03\x0f")
            => (0, E::PROTOCOL_ERROR);
        headers_priority_flag_without_five_octets_is_frame_size_error:
            raw(TYPE_HEADERS, FLAG_PRIORITY, 5, b"\0\0\0") => (0, E::FRAME_SIZE_ERROR);
        headers_self_dependency_is_connection_error_to_keep_hpack_in_sync:
            raw(TYPE_HEADERS, FLAG_PRIORITY, 5, b"\0\0\0\x05\x0fblock") => (0, E::PROTOCOL_ERROR);
        priority_wrong_length_is_stream_frame_size_error:
            raw(TYPE_PRIORITY, 0, 7, b"\0\0\0\x01") => (7, E::FRAME_SIZE_ERROR);
        priority_self_dependency_is_stream_protocol_error:
            raw(TYPE_PRIORITY, 0, 7, b"\x80\0\0\x07\0") => (7, E::PROTOCOL_ERROR);
        rst_stream_wrong_length_is_connection_frame_size_error:
            raw(TYPE_RST_STREAM, 0, 1, &[0; 5]) => (0, E::FRAME_SIZE_ERROR);
        data_on_stream_zero_is_protocol_error:
            raw(TYPE_DATA, 0, 0, b"x") => (0, E::PROTOCOL_ERROR);
        headers_on_stream_zero_is_protocol_error:
            raw(TYPE_HEADERS, FLAG_END_HEADERS, 0, b"x") => (0, E::PROTOCOL_ERROR);
        priority_on_stream_zero_is_protocol_error:
            raw(TYPE_PRIORITY, 0, 0, b"\0\0\0\x01\0") => (0, E::PROTOCOL_ERROR);
        rst_stream_on_stream_zero_is_protocol_error:
            raw(TYPE_RST_STREAM, 0, 0, &[0; 4]) => (0, E::PROTOCOL_ERROR);
        push_promise_on_stream_zero_is_protocol_error:
            raw(TYPE_PUSH_PROMISE, 0, 0, b"\0\0\0\x02") => (0, E::PROTOCOL_ERROR);
        continuation_on_stream_zero_is_protocol_error:
            raw(TYPE_CONTINUATION, 0, 0, b"x") => (0, E::PROTOCOL_ERROR);
        settings_on_a_stream_is_protocol_error:
            raw(TYPE_SETTINGS, 0, 1, b"") => (0, E::PROTOCOL_ERROR);
        ping_on_a_stream_is_protocol_error:
            raw(TYPE_PING, 0, 1, &[0; 8]) => (0, E::PROTOCOL_ERROR);
        goaway_on_a_stream_is_protocol_error:
            raw(TYPE_GOAWAY, 0, 1, &[0; 8]) => (0, E::PROTOCOL_ERROR);
        settings_length_not_multiple_of_six_is_frame_size_error:
            raw(TYPE_SETTINGS, 0, 0, &[0; 7]) => (0, E::FRAME_SIZE_ERROR);
        settings_ack_with_payload_is_frame_size_error:
            raw(TYPE_SETTINGS, FLAG_ACK, 0, &[0; 6]) => (0, E::FRAME_SIZE_ERROR);
        settings_enable_push_above_one_is_protocol_error:
            enc(|b| encode_settings(b, &[(SETTINGS_ENABLE_PUSH, 2)])) => (0, E::PROTOCOL_ERROR);
        settings_initial_window_size_above_max_is_flow_control_error:
            enc(|b| encode_settings(b, &[(SETTINGS_INITIAL_WINDOW_SIZE, MAX_WINDOW_SIZE + 1)]))
            => (0, E::FLOW_CONTROL_ERROR);
        settings_max_frame_size_below_16384_is_protocol_error:
            enc(|b| encode_settings(b, &[(SETTINGS_MAX_FRAME_SIZE, MAX - 1)]))
            => (0, E::PROTOCOL_ERROR);
        settings_max_frame_size_above_2_pow_24_minus_1_is_protocol_error:
            enc(|b| encode_settings(b, &[(SETTINGS_MAX_FRAME_SIZE, MAX_ALLOWED_FRAME_SIZE + 1)]))
            => (0, E::PROTOCOL_ERROR);
        ping_wrong_length_is_frame_size_error:
            raw(TYPE_PING, 0, 0, &[0; 9]) => (0, E::FRAME_SIZE_ERROR);
        goaway_shorter_than_eight_is_frame_size_error:
            raw(TYPE_GOAWAY, 0, 0, &[0; 7]) => (0, E::FRAME_SIZE_ERROR);
        push_promise_without_promised_id_is_frame_size_error:
            raw(TYPE_PUSH_PROMISE, 0, 1, b"\0\0\0") => (0, E::FRAME_SIZE_ERROR);
        window_update_zero_increment_on_stream_is_stream_error:
            raw(TYPE_WINDOW_UPDATE, 0, 3, b"\x80\0\0\0") => (3, E::PROTOCOL_ERROR);
        window_update_zero_increment_on_connection_is_connection_error:
            raw(TYPE_WINDOW_UPDATE, 0, 0, &[0; 4]) => (0, E::PROTOCOL_ERROR);
        window_update_wrong_length_is_frame_size_error:
            raw(TYPE_WINDOW_UPDATE, 0, 1, &[0, 0, 1]) => (0, E::FRAME_SIZE_ERROR);
    }

    decodes! {
        padded_data_strips_padding_and_counts_it_in_flow_len:
            raw(TYPE_DATA, FLAG_PADDED | FLAG_END_STREAM, 3, b"\x02abc\0\0")
            => Frame::Data { stream_id: 3, end_stream: true, data: b"abc", flow_len: 6 };
        padded_headers_with_priority_strip_padding:
            raw(TYPE_HEADERS, FLAG_PADDED | FLAG_PRIORITY | FLAG_END_HEADERS, 5,
                b"\x01\x80\0\0\x03\x0fhpack\0")
            => Frame::Headers { stream_id: 5, end_stream: false, end_headers: true,
                priority: Some(Priority { dependency: 3, exclusive: true, weight: 15 }),
                fragment: b"hpack" };
        priority_frame_decodes_dependency_and_weight:
            raw(TYPE_PRIORITY, 0, 7, b"\0\0\0\x01\xff") => Frame::Priority { stream_id: 7,
                priority: Priority { dependency: 1, exclusive: false, weight: 255 } };
        padded_push_promise_decodes_promised_id_and_fragment:
            raw(TYPE_PUSH_PROMISE, FLAG_PADDED, 1, b"\x02\x80\0\0\x04blk\0\0")
            => Frame::PushPromise { stream_id: 1, promised_id: 4, end_headers: false,
                fragment: b"blk" };
        continuation_decodes_fragment_and_end_headers:
            raw(TYPE_CONTINUATION, FLAG_END_HEADERS, 1, b"rest")
            => Frame::Continuation { stream_id: 1, end_headers: true, fragment: b"rest" };
        window_update_ignores_reserved_bit_of_increment:
            raw(TYPE_WINDOW_UPDATE, 0, 3, b"\x80\0\0\x05")
            => Frame::WindowUpdate { stream_id: 3, increment: 5 };
        unknown_frame_type_is_consumed_whole:
            raw(0xfa, 0xff, 0, b"whatever") => Frame::Unknown { kind: 0xfa, stream_id: 0 };
        settings_ack_round_trip:
            enc(encode_settings_ack) => Frame::Settings { ack: true, params: SettingsIter { rest: b"" } };
        ping_round_trip:
            enc(|b| encode_ping(b, true, *b"01234567")) => Frame::Ping { ack: true, data: *b"01234567" };
        goaway_round_trip:
            enc(|b| encode_goaway(b, 41, E::ENHANCE_YOUR_CALM, b"calm"))
            => Frame::GoAway { last_stream_id: 41, code: E::ENHANCE_YOUR_CALM, debug: b"calm" };
        rst_stream_round_trip:
            enc(|b| encode_rst_stream(b, 9, ErrorCode(0xbeef)))
            => Frame::RstStream { stream_id: 9, code: ErrorCode(0xbeef) };
        window_update_round_trip:
            enc(|b| encode_window_update(b, 0, MAX_WINDOW_SIZE))
            => Frame::WindowUpdate { stream_id: 0, increment: MAX_WINDOW_SIZE };
        encode_data_empty_with_end_stream_is_one_empty_frame:
            enc(|b| encode_data(b, 5, b"", true, MAX))
            => Frame::Data { stream_id: 5, end_stream: true, data: b"", flow_len: 0 };
        encode_headers_small_block_is_one_frame_with_end_headers:
            enc(|b| encode_headers(b, 3, b"block", true, MAX)) => Frame::Headers { stream_id: 3,
                end_stream: true, end_headers: true, priority: None, fragment: b"block" };
    }

    #[test]
    fn frame_header_parse_masks_reserved_bit() {
        let h = FrameHeader::parse(&[0, 1, 2, 7, 5, 0x80, 0, 0, 3]).unwrap();
        assert_eq!((h.length, h.kind, h.flags, h.stream_id), (258, 7, 5, 3));
    }

    #[test]
    fn frame_header_encode_round_trips() {
        let wire = [0xff, 0xff, 0xff, 0xfe, 0xff, 0x7f, 0xff, 0xff, 0xff];
        let h = FrameHeader::parse(&wire).unwrap();
        assert_eq!(
            (enc(|b| h.encode(b)), h.frame_len()),
            (wire.to_vec(), 9 + (1 << 24) - 1)
        );
    }

    #[test]
    fn every_proper_prefix_of_a_frame_is_incomplete() {
        let buf = raw(TYPE_DATA, 0, 1, b"hello");
        for end in 0..buf.len() {
            assert_eq!(decode(&buf[..end], MAX), Ok(None), "prefix {end}");
        }
    }

    #[test]
    fn oversized_frame_is_connection_frame_size_error_before_payload_arrives() {
        let header_only = &raw(TYPE_DATA, 0, 1, &[0; MAX as usize + 1])[..FRAME_HEADER_LEN];
        assert_eq!(rejection(header_only), (0, E::FRAME_SIZE_ERROR));
        assert_eq!(decode(header_only, MAX + 1), Ok(None));
    }

    #[test]
    fn decode_consumes_exactly_one_frame_from_a_batch() {
        let mut buf = enc(|b| encode_ping(b, false, [7; 8]));
        encode_settings_ack(&mut buf);
        let (frame, n) = decode(&buf, MAX).unwrap().unwrap();
        assert_eq!((frame, n), (one(&buf[..17]), 17));
    }

    #[test]
    fn stream_error_frame_is_skippable_by_header_length() {
        let mut buf = raw(TYPE_PRIORITY, 0, 7, b"\0\0\0");
        encode_settings_ack(&mut buf);
        assert_eq!(rejection(&buf), (7, E::FRAME_SIZE_ERROR));
        let skip = FrameHeader::parse(&buf).unwrap().frame_len();
        assert_eq!(buf[skip..], enc(encode_settings_ack));
    }

    /// The pairs of the single SETTINGS frame in `buf`.
    fn settings_params(buf: &[u8]) -> Vec<(u16, u32)> {
        match one(buf) {
            Frame::Settings { ack: false, params } => params.collect(),
            other => panic!("not SETTINGS: {other:?}"),
        }
    }

    #[test]
    fn settings_round_trip() {
        let params = [
            (1, 0),
            (2, 1),
            (3, 100),
            (4, MAX_WINDOW_SIZE),
            (5, 1 << 20),
            (6, 8192),
        ];
        assert_eq!(
            settings_params(&enc(|b| encode_settings(b, &params))),
            params
        );
    }

    #[test]
    fn settings_unknown_id_is_passed_through_unvalidated() {
        let buf = enc(|b| encode_settings(b, &[(0xabcd, u32::MAX)]));
        assert_eq!(settings_params(&buf), [(0xabcd, u32::MAX)]);
    }

    #[test]
    fn goaway_debug_is_truncated_to_fit_minimum_max_frame_size() {
        let buf = enc(|b| encode_goaway(b, 1, E::NO_ERROR, &[b'x'; 20_000]));
        assert_eq!(frames(&buf).0, [(TYPE_GOAWAY, 0, MAX)]);
    }

    #[test]
    fn encode_data_splits_by_max_frame_size_with_end_stream_on_last() {
        let data: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
        let (shape, joined) = frames(&enc(|b| encode_data(b, 1, &data, true, MAX)));
        let want = [(0, 0, MAX), (0, 0, MAX), (0, FLAG_END_STREAM, 7232)];
        assert_eq!((shape, joined), (want.to_vec(), data));
    }

    #[test]
    fn encode_headers_splits_large_block_into_continuations() {
        let block: Vec<u8> = (0..40_000u32).map(|i| (i * 7) as u8).collect();
        let (shape, joined) = frames(&enc(|b| encode_headers(b, 3, &block, true, MAX)));
        let want = [
            (TYPE_HEADERS, FLAG_END_STREAM, MAX),
            (TYPE_CONTINUATION, 0, MAX),
            (TYPE_CONTINUATION, FLAG_END_HEADERS, 7232),
        ];
        assert_eq!((shape, joined), (want.to_vec(), block));
    }

    #[test]
    fn encoders_clamp_max_frame_size_below_protocol_minimum() {
        let buf = enc(|b| encode_data(b, 1, &[0; 20_000], false, 0));
        assert_eq!(frames(&buf).0, [(TYPE_DATA, 0, MAX), (TYPE_DATA, 0, 3616)]);
    }

    use crate::test_support::Rng;

    /// Checks the decode contract beyond "no panic"; returns the outcome
    /// (0 = contract broken).
    fn check_contract(buf: &[u8], max: u32) -> usize {
        let header = FrameHeader::parse(buf);
        let complete = header.is_some_and(|h| h.frame_len() <= buf.len());
        match decode(buf, max) {
            Ok(Some((_, n))) => usize::from(Some(n) == header.map(|h| h.frame_len())) * 4,
            Ok(None) => usize::from(!complete),
            Err(H2Error::Stream { stream_id, .. }) => usize::from(stream_id != 0 && complete) * 2,
            Err(H2Error::Connection { .. }) => usize::from(header.is_some()) * 3,
        }
    }

    #[test]
    fn decode_never_panics_on_one_and_two_byte_inputs() {
        for a in 0..=255u8 {
            assert_eq!(decode(&[a], MAX), Ok(None));
            for b in 0..=255u8 {
                assert_eq!(decode(&[a, b], MAX), Ok(None));
            }
        }
    }

    #[test]
    fn decode_never_panics_on_random_and_mutated_input() {
        let seeds = [
            enc(|b| encode_settings(b, &[(SETTINGS_MAX_FRAME_SIZE, 20_000), (9, 1)])),
            raw(TYPE_HEADERS, 0x2d, 5, b"\x01\0\0\0\x03\x0fhpack\0"),
            raw(TYPE_PUSH_PROMISE, FLAG_PADDED, 1, b"\x02\0\0\0\x04blk\0\0"),
            raw(TYPE_PRIORITY, 0, 7, b"\0\0\0\x01\xff"),
            raw(TYPE_DATA, FLAG_PADDED, 3, b"\x02abc\0\0"),
            enc(|b| {
                encode_ping(b, false, [1; 8]);
                encode_goaway(b, 3, E::CANCEL, b"dbg");
                encode_rst_stream(b, 3, E::CANCEL);
                encode_window_update(b, 3, 10);
                encode_headers(b, 3, &[9; 40], false, MAX);
            }),
        ];
        let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
        let mut outcomes = [0u32; 5];
        for i in 0..300_000 {
            let mut buf = if i % 2 == 0 {
                // A valid frame with a few bytes overwritten, then cut or not.
                let mut s = seeds[rng.below(seeds.len())].clone();
                for _ in 0..=rng.below(4) {
                    let at = rng.below(s.len());
                    s[at] = rng.next() as u8;
                }
                s.truncate(rng.below(s.len() + 8));
                s
            } else {
                // A plausible header (small length, low type, stream 0..=3)
                // over random payload bytes, give or take a few.
                let len = rng.below(40);
                let kind = rng.below(12) as u8;
                let mut s = raw(kind, rng.next() as u8, rng.below(4) as u32, &[]);
                s[..3].copy_from_slice(&(len as u32).to_be_bytes()[1..]);
                s.extend((0..len + rng.below(4)).map(|_| rng.next() as u8));
                s
            };
            let max = [MAX, 8, rng.next() as u32][rng.below(3)];
            outcomes[check_contract(&buf, max)] += 1;
            // Also drain it frame by frame, as the connection would.
            while let Ok(Some((_, n))) = decode(&buf, max) {
                buf.drain(..n);
            }
        }
        assert_eq!(outcomes[0], 0, "decode contract broken");
        assert!(outcomes[1..].iter().all(|&n| n > 1000), "{outcomes:?}");
    }
}
