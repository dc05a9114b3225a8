//! SETTINGS frames (RFC 9113 §6.5): connection parameters, each frame
//! acknowledged by an empty SETTINGS with ACK (§6.5.3).

use super::{
    proto_err, put_header, size_err, Frame, FrameHeader, Kind, DEFAULT_MAX_FRAME_SIZE, FLAG_ACK,
    MAX_ALLOWED_FRAME_SIZE, MAX_WINDOW_SIZE,
};
use crate::http2::error::{ErrorCode, H2Error};

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

/// The `(identifier, value)` pairs of a SETTINGS frame in wire order (§6.5.1),
/// borrowed from the input. Unknown identifiers are yielded too; the
/// connection MUST ignore them (§6.5.2). Known values were validated by
/// [`decode`](super::decode).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettingsIter<'a> {
    /// The pairs not yet yielded; a multiple of 6 octets.
    pub(super) rest: &'a [u8],
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

/// Decodes a SETTINGS payload (§6.5): an ACK must be empty and the pairs
/// must fill whole 6-octet slots, both connection FRAME_SIZE_ERRORs; every
/// known value is range-checked before the frame is returned.
pub(super) fn decode_settings(h: FrameHeader, p: &[u8]) -> Result<Frame<'_>, H2Error> {
    let ack = h.has(FLAG_ACK);
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
    Ok(Frame::Settings { ack, params })
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

/// Appends one SETTINGS frame (§6.5). It is never split, since each frame is
/// acknowledged separately; keep it within 2730 pairs (16384 octets), the
/// size every peer accepts (§4.2).
pub fn encode_settings(dst: &mut Vec<u8>, params: &[(u16, u32)]) {
    put_header(dst, params.len().saturating_mul(6), Kind::Settings, 0, 0);
    for &(id, value) in params {
        dst.extend_from_slice(&id.to_be_bytes());
        dst.extend_from_slice(&value.to_be_bytes());
    }
}

/// Appends the empty SETTINGS ACK owed for every peer SETTINGS (§6.5.3).
pub fn encode_settings_ack(dst: &mut Vec<u8>) {
    put_header(dst, 0, Kind::Settings, FLAG_ACK, 0);
}
