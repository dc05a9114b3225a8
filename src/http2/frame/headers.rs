//! The frames that carry a field block (RFC 9113 §4.3): HEADERS (§6.2),
//! PUSH_PROMISE (§6.6) and the CONTINUATION frames that extend either (§6.10).
//!
//! Each yields one HPACK fragment, borrowed from the input; the connection
//! joins the fragments and decodes the block once END_HEADERS arrives.

use super::{
    encode_split, proto_err, size_err, unpad, Frame, FrameHeader, Kind, Priority, FLAG_END_HEADERS,
    FLAG_END_STREAM, FLAG_PADDED, FLAG_PRIORITY, U31,
};
use crate::http2::error::H2Error;

/// Decodes a HEADERS payload (§6.2): optional padding, then the priority
/// fields if the PRIORITY flag is set, then the fragment.
pub(super) fn decode_headers(h: FrameHeader, p: &[u8]) -> Result<Frame<'_>, H2Error> {
    let prio = h.has(FLAG_PRIORITY);
    let body = unpad(p, h.has(FLAG_PADDED), if prio { 5 } else { 0 })?;
    let (priority, fragment) = match body.split_first_chunk::<5>() {
        Some((fields, rest)) if prio => (Some(Priority::parse(fields)), rest),
        _ => (None, body),
    };
    // §5.3.1 makes this a stream error, but returning one would drop
    // the field block and desynchronise HPACK state (§4.3), so it is
    // escalated to a connection error (§5.4.1 permits closing).
    if priority.is_some_and(|p| p.dependency == h.stream_id) {
        return Err(proto_err("HEADERS depends on itself"));
    }
    Ok(Frame::Headers {
        stream_id: h.stream_id,
        end_stream: h.has(FLAG_END_STREAM),
        end_headers: h.has(FLAG_END_HEADERS),
        priority,
        fragment,
    })
}

/// Decodes a PUSH_PROMISE payload (§6.6): optional padding, the 31-bit
/// promised stream, then the fragment. Too short for the promised stream is
/// a connection FRAME_SIZE_ERROR (§4.2).
pub(super) fn decode_push_promise(h: FrameHeader, p: &[u8]) -> Result<Frame<'_>, H2Error> {
    let body = unpad(p, h.has(FLAG_PADDED), 4)?;
    let (id, fragment) = body
        .split_first_chunk::<4>()
        .ok_or_else(|| size_err("PUSH_PROMISE too short"))?;
    Ok(Frame::PushPromise {
        stream_id: h.stream_id,
        promised_id: u32::from_be_bytes(*id) & U31,
        end_headers: h.has(FLAG_END_HEADERS),
        fragment,
    })
}

/// Decodes a CONTINUATION payload (§6.10): all of it is fragment. Whether
/// one may arrive at all is the connection's sequencing check.
pub(super) fn decode_continuation(h: FrameHeader, p: &[u8]) -> Result<Frame<'_>, H2Error> {
    Ok(Frame::Continuation {
        stream_id: h.stream_id,
        end_headers: h.has(FLAG_END_HEADERS),
        fragment: p,
    })
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
    let kinds = [Kind::Headers, Kind::Continuation];
    let flags = [es, FLAG_END_HEADERS];
    encode_split(dst, stream_id, block, max_frame_size, kinds, flags);
}
