//! GOAWAY frames (RFC 9113 §6.8): graceful or error shutdown of the connection.

use super::{put_header, size_err, Frame, FrameHeader, Kind, DEFAULT_MAX_FRAME_SIZE, U31};
use crate::http2::error::{ErrorCode, H2Error};

/// Decodes a GOAWAY payload (§6.8): last stream (31 bits), error code, then
/// opaque debug data borrowed from the input. Under 8 octets is a connection
/// FRAME_SIZE_ERROR.
pub(super) fn decode_goaway(_: FrameHeader, p: &[u8]) -> Result<Frame<'_>, H2Error> {
    let (fixed, debug) = p
        .split_first_chunk::<8>()
        .ok_or_else(|| size_err("GOAWAY shorter than 8"))?;
    let [a, b, c, d, e, f, g, h] = *fixed;
    Ok(Frame::GoAway {
        last_stream_id: u32::from_be_bytes([a, b, c, d]) & U31,
        code: ErrorCode(u32::from_be_bytes([e, f, g, h])),
        debug,
    })
}

/// Appends a GOAWAY (§6.8). `debug` is truncated so the frame fits the
/// 16384-octet size every peer accepts (§4.2) whatever it advertised.
pub fn encode_goaway(dst: &mut Vec<u8>, last_stream_id: u32, code: ErrorCode, debug: &[u8]) {
    let room = DEFAULT_MAX_FRAME_SIZE as usize - 8;
    let debug = debug.get(..room).unwrap_or(debug);
    put_header(dst, 8 + debug.len(), Kind::GoAway, 0, 0);
    dst.extend_from_slice(&(last_stream_id & U31).to_be_bytes());
    dst.extend_from_slice(&code.0.to_be_bytes());
    dst.extend_from_slice(debug);
}
