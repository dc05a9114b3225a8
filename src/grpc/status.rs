//! gRPC status codes (doc/statuscodes.md) and the percent-encoding of `grpc-message`
//! (doc/PROTOCOL-HTTP2.md, "Responses").

use std::fmt;

/// A gRPC status code. The numeric values are part of the wire protocol (`grpc-status`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Code {
    /// Not an error: the call succeeded.
    Ok = 0,
    /// The call was cancelled, typically by the caller.
    Cancelled = 1,
    /// An unknown error, e.g. a status from another error space or a malformed `grpc-status`.
    Unknown = 2,
    /// The client sent an invalid argument, whatever the system state.
    InvalidArgument = 3,
    /// The deadline passed before the call completed (`grpc-timeout`).
    DeadlineExceeded = 4,
    /// A requested entity was not found.
    NotFound = 5,
    /// The entity the client tried to create already exists.
    AlreadyExists = 6,
    /// The caller may not perform this operation.
    PermissionDenied = 7,
    /// A resource ran out, e.g. a quota or a message size limit.
    ResourceExhausted = 8,
    /// The system is not in the state the operation requires.
    FailedPrecondition = 9,
    /// The operation was aborted, typically by a concurrency conflict.
    Aborted = 10,
    /// The operation went past the valid range.
    OutOfRange = 11,
    /// The method is not implemented or not supported by this server.
    Unimplemented = 12,
    /// An internal invariant was broken.
    Internal = 13,
    /// The service is currently unavailable; transient, so the call may be retried.
    Unavailable = 14,
    /// Unrecoverable data loss or corruption.
    DataLoss = 15,
    /// The request lacks valid authentication credentials.
    Unauthenticated = 16,
}

impl Code {
    /// Every code, indexed by its value.
    pub const ALL: [Code; 17] = [
        Code::Ok,
        Code::Cancelled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
        Code::Unauthenticated,
    ];

    /// The numeric value sent in `grpc-status`.
    pub const fn value(self) -> u32 {
        self as u32
    }

    /// The code for a numeric value; values outside 0..=16 are `Unknown`, as gRPC clients treat them.
    pub fn from_value(value: u32) -> Code {
        usize::try_from(value)
            .ok()
            .and_then(|i| Code::ALL.get(i).copied())
            .unwrap_or(Code::Unknown)
    }

    /// Parses a `grpc-status` header value (ASCII decimal). `None` if it is not a number, so the
    /// caller can report a malformed trailer rather than a made-up code.
    pub fn from_header(value: &[u8]) -> Option<Code> {
        if value.is_empty() || value.len() > 9 || !value.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let n = value.iter().fold(0u32, |n, d| n * 10 + u32::from(d - b'0'));
        Some(Code::from_value(n))
    }

    /// The canonical upper-case name, e.g. `DEADLINE_EXCEEDED`.
    pub const fn name(self) -> &'static str {
        match self {
            Code::Ok => "OK",
            Code::Cancelled => "CANCELLED",
            Code::Unknown => "UNKNOWN",
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
            Code::NotFound => "NOT_FOUND",
            Code::AlreadyExists => "ALREADY_EXISTS",
            Code::PermissionDenied => "PERMISSION_DENIED",
            Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
            Code::FailedPrecondition => "FAILED_PRECONDITION",
            Code::Aborted => "ABORTED",
            Code::OutOfRange => "OUT_OF_RANGE",
            Code::Unimplemented => "UNIMPLEMENTED",
            Code::Internal => "INTERNAL",
            Code::Unavailable => "UNAVAILABLE",
            Code::DataLoss => "DATA_LOSS",
            Code::Unauthenticated => "UNAUTHENTICATED",
        }
    }

    /// The code a client reports for a non-200 HTTP `:status` (doc/http-grpc-status-mapping.md).
    pub fn from_http_status(status: u16) -> Code {
        match status {
            400 => Code::Internal,
            401 => Code::Unauthenticated,
            403 => Code::PermissionDenied,
            404 => Code::Unimplemented,
            429 | 502..=504 => Code::Unavailable,
            _ => Code::Unknown,
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The outcome of a call: a code and a human-readable message (may be empty).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    /// The status code, sent as `grpc-status`.
    pub code: Code,
    /// Human-readable detail, sent percent-encoded as `grpc-message`.
    pub message: String,
}

impl Status {
    /// A status with the given code and message.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Status {
            code,
            message: message.into(),
        }
    }

    /// `OK` with an empty message.
    pub fn ok() -> Self {
        Status::new(Code::Ok, "")
    }

    /// Whether the code is [`Code::Ok`].
    pub fn is_ok(&self) -> bool {
        self.code == Code::Ok
    }

    /// The status a client builds from received `grpc-status` and `grpc-message` values; a
    /// missing or malformed `grpc-status` is UNKNOWN.
    pub fn from_trailers(grpc_status: Option<&[u8]>, grpc_message: Option<&[u8]>) -> Self {
        let code = grpc_status
            .and_then(Code::from_header)
            .unwrap_or(Code::Unknown);
        let message = grpc_message.map(decode_message).unwrap_or_default();
        Status::new(code, message)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{}", self.code)
        } else {
            write!(f, "{}: {}", self.code, self.message)
        }
    }
}

impl std::error::Error for Status {}

/// Percent-encodes a status message for `grpc-message`: every byte of its UTF-8 form outside
/// 0x20..=0x7E, and `%` itself, becomes `%XX` (upper-case hex), so any text fits in a header.
pub fn encode_message(message: &str) -> Vec<u8> {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = Vec::with_capacity(message.len());
    for &b in message.as_bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]]);
        }
    }
    out
}

/// Decodes a received `grpc-message`. Lenient as the spec asks: a `%` not followed by two hex
/// digits passes through as-is, and bytes that are not UTF-8 become U+FFFD; never an error.
pub fn decode_message(value: &[u8]) -> String {
    let mut out = Vec::with_capacity(value.len());
    let mut i = 0;
    while i < value.len() {
        let escaped = match value.get(i..i + 3) {
            Some([b'%', hi, lo]) => hex_value(*hi).zip(hex_value(*lo)),
            _ => None,
        };
        match escaped {
            Some((hi, lo)) => {
                out.push(hi << 4 | lo);
                i += 3;
            }
            None => {
                out.push(value[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex_value(digit: u8) -> Option<u8> {
    char::from(digit)
        .to_digit(16)
        .and_then(|d| u8::try_from(d).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_have_their_wire_values_and_names() {
        for (i, code) in Code::ALL.iter().enumerate() {
            assert_eq!(code.value() as usize, i);
            assert_eq!(Code::from_value(i as u32), *code);
        }
        assert_eq!(Code::Unimplemented.value(), 12);
        assert_eq!(Code::Unavailable.name(), "UNAVAILABLE");
        assert_eq!(Code::Unauthenticated.value(), 16);
        assert_eq!(Code::DeadlineExceeded.to_string(), "DEADLINE_EXCEEDED");
    }

    #[test]
    fn unknown_numeric_codes_map_to_unknown() {
        assert_eq!(Code::from_value(17), Code::Unknown);
        assert_eq!(Code::from_value(u32::MAX), Code::Unknown);
    }

    #[test]
    fn grpc_status_header_parses_digits_only() {
        assert_eq!(Code::from_header(b"0"), Some(Code::Ok));
        assert_eq!(Code::from_header(b"14"), Some(Code::Unavailable));
        assert_eq!(Code::from_header(b"99"), Some(Code::Unknown));
        assert_eq!(Code::from_header(b"999999999"), Some(Code::Unknown));
        for bad in [&b""[..], b"-1", b" 0", b"1a", b"9999999999", b"\xff"] {
            assert_eq!(Code::from_header(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn http_status_maps_per_the_spec() {
        assert_eq!(Code::from_http_status(400), Code::Internal);
        assert_eq!(Code::from_http_status(404), Code::Unimplemented);
        assert_eq!(Code::from_http_status(503), Code::Unavailable);
        assert_eq!(Code::from_http_status(415), Code::Unknown);
    }

    #[test]
    fn printable_ascii_is_not_encoded() {
        assert_eq!(encode_message("shutting down"), b"shutting down");
        assert_eq!(encode_message(" ~"), b" ~");
    }

    #[test]
    fn percent_controls_and_non_ascii_are_encoded() {
        assert_eq!(encode_message("100%"), b"100%25");
        assert_eq!(encode_message("a\nb\x7f"), b"a%0Ab%7F");
        assert_eq!(encode_message("é"), b"%C3%A9");
    }

    #[test]
    fn decoding_inverts_encoding() {
        for text in ["", "plain", "50% off\r\n", "日本語 ✓", "%%%", "\0\x01"] {
            assert_eq!(decode_message(&encode_message(text)), text);
        }
    }

    #[test]
    fn decoding_accepts_lower_case_hex() {
        assert_eq!(decode_message(b"%c3%a9%0a"), "é\n");
    }

    #[test]
    fn invalid_percent_sequences_pass_through() {
        assert_eq!(decode_message(b"100%"), "100%");
        assert_eq!(decode_message(b"%zz%4"), "%zz%4");
        assert_eq!(decode_message(b"%%41"), "%A");
        assert_eq!(decode_message(b"%"), "%");
    }

    #[test]
    fn invalid_utf8_becomes_replacement_characters() {
        assert_eq!(decode_message(b"a%FFb"), "a\u{fffd}b");
        assert_eq!(decode_message(b"\xc3"), "\u{fffd}");
    }

    #[test]
    fn status_from_trailers_defaults_to_unknown() {
        let s = Status::from_trailers(Some(b"14"), Some(b"shutting%20down"));
        assert_eq!(s, Status::new(Code::Unavailable, "shutting down"));
        assert_eq!(Status::from_trailers(None, None).code, Code::Unknown);
        assert_eq!(Status::from_trailers(Some(b"x"), None).code, Code::Unknown);
        assert!(Status::from_trailers(Some(b"0"), None).is_ok());
    }

    #[test]
    fn status_displays_code_and_message() {
        assert_eq!(Status::ok().to_string(), "OK");
        assert_eq!(
            Status::new(Code::Internal, "boom").to_string(),
            "INTERNAL: boom"
        );
    }
}
