//! WINDOW_UPDATE frames (RFC 9113 §6.9): flow-control credit for one stream,
//! or for the whole connection on stream 0.

use super::{be32, proto_err, put_header, size_err, Frame, FrameHeader, Kind, U31};
use crate::http2::error::{ErrorCode, H2Error};

/// Decodes a WINDOW_UPDATE payload (§6.9): a 31-bit increment, reserved bit
/// ignored. A wrong length is a connection FRAME_SIZE_ERROR; a zero
/// increment is an error of the window it targets: a stream error on a
/// stream, a connection error on stream 0.
pub(super) fn decode_window_update(h: FrameHeader, p: &[u8]) -> Result<Frame<'_>, H2Error> {
    let increment = be32(p).ok_or_else(|| size_err("WINDOW_UPDATE length not 4"))? & U31;
    if increment == 0 {
        return Err(match h.stream_id {
            0 => proto_err("WINDOW_UPDATE increment 0"),
            sid => H2Error::stream(sid, ErrorCode::PROTOCOL_ERROR, "WINDOW_UPDATE increment 0"),
        });
    }
    Ok(Frame::WindowUpdate {
        stream_id: h.stream_id,
        increment,
    })
}

/// Appends a WINDOW_UPDATE (§6.9); `stream_id` 0 targets the connection.
/// The increment must be 1..=2^31-1; the reserved bit is masked off.
pub fn encode_window_update(dst: &mut Vec<u8>, stream_id: u32, increment: u32) {
    put_header(dst, 4, Kind::WindowUpdate, 0, stream_id);
    dst.extend_from_slice(&(increment & U31).to_be_bytes());
}
