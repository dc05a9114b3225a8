//! DATA frames (RFC 9113 §6.1): body octets of a stream, flow-controlled.

use super::{encode_split, unpad, Frame, FrameHeader, Kind, FLAG_END_STREAM, FLAG_PADDED};
use crate::http2::error::H2Error;

/// Decodes a DATA payload (§6.1). Padding is stripped from `data` but stays
/// in `flow_len`, because flow control counts the whole payload (§6.1).
pub(super) fn decode_data(h: FrameHeader, p: &[u8]) -> Result<Frame<'_>, H2Error> {
    Ok(Frame::Data {
        stream_id: h.stream_id,
        end_stream: h.has(FLAG_END_STREAM),
        data: unpad(p, h.has(FLAG_PADDED), 0)?,
        flow_len: h.length,
    })
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
    encode_split(dst, stream_id, data, max_frame_size, [Kind::Data; 2], flags);
}
