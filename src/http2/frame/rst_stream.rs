//! RST_STREAM frames (RFC 9113 §6.4): one stream abandoned with an error code.

use super::{be32, put_header, size_err, Frame, FrameHeader, Kind};
use crate::http2::error::{ErrorCode, H2Error};

/// Decodes an RST_STREAM payload (§6.4). Unlike PRIORITY, a bad length is a
/// connection error: answering it with RST_STREAM could loop (§5.4.2).
pub(super) fn decode_rst_stream(h: FrameHeader, p: &[u8]) -> Result<Frame<'_>, H2Error> {
    let code = be32(p).ok_or_else(|| size_err("RST_STREAM length not 4"))?;
    Ok(Frame::RstStream {
        stream_id: h.stream_id,
        code: ErrorCode(code),
    })
}

/// Appends an RST_STREAM (§6.4).
pub fn encode_rst_stream(dst: &mut Vec<u8>, stream_id: u32, code: ErrorCode) {
    put_header(dst, 4, Kind::RstStream, 0, stream_id);
    dst.extend_from_slice(&code.0.to_be_bytes());
}
