//! PING frames (RFC 9113 §6.7): a round-trip probe, echoed with ACK.

use super::{put_header, size_err, Frame, FrameHeader, Kind, FLAG_ACK};
use crate::http2::error::H2Error;

/// Decodes a PING payload (§6.7): exactly 8 opaque octets, anything else is
/// a connection FRAME_SIZE_ERROR.
pub(super) fn decode_ping(h: FrameHeader, p: &[u8]) -> Result<Frame<'_>, H2Error> {
    Ok(Frame::Ping {
        ack: h.has(FLAG_ACK),
        data: p.try_into().map_err(|_| size_err("PING length not 8"))?,
    })
}

/// Appends a PING (§6.7); a response carries `ack` and echoes `data`.
pub fn encode_ping(dst: &mut Vec<u8>, ack: bool, data: [u8; 8]) {
    put_header(dst, 8, Kind::Ping, if ack { FLAG_ACK } else { 0 }, 0);
    dst.extend_from_slice(&data);
}
