//! HTTP/2 error codes (RFC 9113 §7) and the connection/stream error split (§5.4).

use std::fmt;

/// An HTTP/2 error code (RFC 9113 §7).
///
/// A newtype rather than an enum: unknown codes MUST NOT trigger special
/// behaviour and MAY be treated as `INTERNAL_ERROR` (§7), so they have to be
/// representable and round-trip unchanged through RST_STREAM and GOAWAY.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ErrorCode(pub u32);

impl ErrorCode {
    /// Not an error; used in a graceful GOAWAY (§7).
    pub const NO_ERROR: ErrorCode = ErrorCode(0x0);
    /// An unspecific protocol violation (§7).
    pub const PROTOCOL_ERROR: ErrorCode = ErrorCode(0x1);
    /// The endpoint hit an unexpected internal error (§7).
    pub const INTERNAL_ERROR: ErrorCode = ErrorCode(0x2);
    /// The peer violated the flow-control protocol (§7, §5.2).
    pub const FLOW_CONTROL_ERROR: ErrorCode = ErrorCode(0x3);
    /// SETTINGS were not acknowledged in time (§7, §6.5.3).
    pub const SETTINGS_TIMEOUT: ErrorCode = ErrorCode(0x4);
    /// A frame arrived after the stream was half-closed (§7, §5.1).
    pub const STREAM_CLOSED: ErrorCode = ErrorCode(0x5);
    /// A frame had an invalid size (§7, §4.2).
    pub const FRAME_SIZE_ERROR: ErrorCode = ErrorCode(0x6);
    /// The stream was refused before any processing, so it is safe to retry (§7, §8.7).
    pub const REFUSED_STREAM: ErrorCode = ErrorCode(0x7);
    /// The stream is no longer needed (§7).
    pub const CANCEL: ErrorCode = ErrorCode(0x8);
    /// The HPACK compression context could not be maintained (§7, §4.3).
    pub const COMPRESSION_ERROR: ErrorCode = ErrorCode(0x9);
    /// The connection of a CONNECT request was reset or abnormally closed (§7, §8.5).
    pub const CONNECT_ERROR: ErrorCode = ErrorCode(0xa);
    /// The peer is generating excessive load (§7, §10.5).
    pub const ENHANCE_YOUR_CALM: ErrorCode = ErrorCode(0xb);
    /// The TLS connection does not meet the minimum requirements (§7, §9.2).
    pub const INADEQUATE_SECURITY: ErrorCode = ErrorCode(0xc);
    /// The endpoint requires HTTP/1.1 for this request (§7).
    pub const HTTP_1_1_REQUIRED: ErrorCode = ErrorCode(0xd);

    /// The RFC 9113 §7 name, or `None` for codes this implementation does not know.
    pub fn name(self) -> Option<&'static str> {
        const NAMES: [&str; 14] = [
            "NO_ERROR",
            "PROTOCOL_ERROR",
            "INTERNAL_ERROR",
            "FLOW_CONTROL_ERROR",
            "SETTINGS_TIMEOUT",
            "STREAM_CLOSED",
            "FRAME_SIZE_ERROR",
            "REFUSED_STREAM",
            "CANCEL",
            "COMPRESSION_ERROR",
            "CONNECT_ERROR",
            "ENHANCE_YOUR_CALM",
            "INADEQUATE_SECURITY",
            "HTTP_1_1_REQUIRED",
        ];
        usize::try_from(self.0)
            .ok()
            .and_then(|i| NAMES.get(i).copied())
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "UNKNOWN_ERROR(0x{:x})", self.0),
        }
    }
}

/// A protocol violation detected while processing peer input.
///
/// The variant tells the connection how to react (RFC 9113 §5.4): a
/// connection error is answered with GOAWAY and a close (§5.4.1); a stream
/// error only with RST_STREAM on that stream, and the connection lives on
/// (§5.4.2). `reason` is static text for logs and GOAWAY debug data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum H2Error {
    /// Fatal to the whole connection (§5.4.1).
    Connection {
        /// The code for the GOAWAY frame.
        code: ErrorCode,
        /// What went wrong, for logs and GOAWAY debug data.
        reason: &'static str,
    },
    /// Fatal only to `stream_id` (§5.4.2); never 0.
    Stream {
        /// The stream to reset.
        stream_id: u32,
        /// The code for the RST_STREAM frame.
        code: ErrorCode,
        /// What went wrong, for logs.
        reason: &'static str,
    },
}

impl H2Error {
    /// A connection error (§5.4.1).
    pub fn connection(code: ErrorCode, reason: &'static str) -> Self {
        H2Error::Connection { code, reason }
    }

    /// A stream error on `stream_id` (§5.4.2).
    pub fn stream(stream_id: u32, code: ErrorCode, reason: &'static str) -> Self {
        H2Error::Stream {
            stream_id,
            code,
            reason,
        }
    }

    /// The code to put in the GOAWAY or RST_STREAM frame.
    pub fn code(&self) -> ErrorCode {
        match *self {
            H2Error::Connection { code, .. } | H2Error::Stream { code, .. } => code,
        }
    }

    /// The static description, for logs and GOAWAY debug data.
    pub fn reason(&self) -> &'static str {
        match *self {
            H2Error::Connection { reason, .. } | H2Error::Stream { reason, .. } => reason,
        }
    }
}

impl fmt::Display for H2Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            H2Error::Connection { code, reason } => write!(f, "connection error {code}: {reason}"),
            H2Error::Stream {
                stream_id,
                code,
                reason,
            } => write!(f, "stream {stream_id} error {code}: {reason}"),
        }
    }
}

impl std::error::Error for H2Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_code_display_uses_rfc_names() {
        assert_eq!(ErrorCode::NO_ERROR.to_string(), "NO_ERROR");
        assert_eq!(
            ErrorCode::HTTP_1_1_REQUIRED.to_string(),
            "HTTP_1_1_REQUIRED"
        );
        assert_eq!(ErrorCode::FRAME_SIZE_ERROR.to_string(), "FRAME_SIZE_ERROR");
    }

    #[test]
    fn unknown_error_code_displays_hex_value() {
        assert_eq!(ErrorCode(0xe).name(), None);
        assert_eq!(ErrorCode(0xdead).to_string(), "UNKNOWN_ERROR(0xdead)");
    }

    #[test]
    fn h2error_display_names_scope_code_and_reason() {
        let c = H2Error::connection(ErrorCode::PROTOCOL_ERROR, "bad");
        let s = H2Error::stream(3, ErrorCode::CANCEL, "gone");
        assert_eq!(c.to_string(), "connection error PROTOCOL_ERROR: bad");
        assert_eq!(s.to_string(), "stream 3 error CANCEL: gone");
        assert_eq!((s.code(), s.reason()), (ErrorCode::CANCEL, "gone"));
    }
}
