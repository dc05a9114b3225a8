//! Stream dependency fields (RFC 9113 §5.3.2) and the PRIORITY frame (§6.3),
//! both deprecated: decoded only to be validated, then ignored.

use super::{Frame, FrameHeader, U31};
use crate::http2::error::{ErrorCode, H2Error};

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
    /// The 5 octets of §6.2/§6.3: E bit, 31-bit dependency, weight.
    pub(super) fn parse(b: &[u8; 5]) -> Priority {
        let dep = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        Priority {
            dependency: dep & U31,
            exclusive: dep & !U31 != 0,
            weight: b[4],
        }
    }
}

/// Decodes a PRIORITY payload (§6.3). Unlike most frames, both of its
/// errors are *stream* errors: a wrong length is FRAME_SIZE_ERROR (§6.3),
/// a self-dependency PROTOCOL_ERROR (§5.3.1).
pub(super) fn decode_priority(h: FrameHeader, p: &[u8]) -> Result<Frame<'_>, H2Error> {
    let sid = h.stream_id;
    let fields = <&[u8; 5]>::try_from(p)
        .map_err(|_| H2Error::stream(sid, ErrorCode::FRAME_SIZE_ERROR, "PRIORITY length not 5"))?;
    let priority = Priority::parse(fields);
    if priority.dependency == sid {
        return Err(H2Error::stream(
            sid,
            ErrorCode::PROTOCOL_ERROR,
            "self-dependency",
        ));
    }
    Ok(Frame::Priority {
        stream_id: sid,
        priority,
    })
}
