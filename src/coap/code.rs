//! Message codes: requests, responses and the Empty code (RFC 7252 §3, §12.1).

use std::fmt;

/// An 8-bit code: 3-bit class and 5-bit detail, written "c.dd" (RFC 7252 §3).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct Code(pub u8);

/// Defines the code constants from their "c.dd" spelling, which also becomes their doc.
macro_rules! codes {
    ($($name:ident = $dotted:literal,)*) => {
        impl Code {
            $(#[doc = $dotted] pub const $name: Code = Code::dotted($dotted);)*
        }
    };
}

codes! {
    EMPTY = "0.00",
    // Methods (RFC 7252 §12.1.1; FETCH, PATCH, IPATCH: RFC 8132 §6).
    GET = "0.01", POST = "0.02", PUT = "0.03", DELETE = "0.04", FETCH = "0.05", PATCH = "0.06",
    IPATCH = "0.07",
    // Responses (RFC 7252 §12.1.2).
    CREATED = "2.01", DELETED = "2.02", VALID = "2.03", CHANGED = "2.04", CONTENT = "2.05",
    BAD_REQUEST = "4.00", UNAUTHORIZED = "4.01", BAD_OPTION = "4.02", FORBIDDEN = "4.03",
    NOT_FOUND = "4.04", METHOD_NOT_ALLOWED = "4.05", NOT_ACCEPTABLE = "4.06",
    PRECONDITION_FAILED = "4.12", REQUEST_ENTITY_TOO_LARGE = "4.13",
    UNSUPPORTED_CONTENT_FORMAT = "4.15", INTERNAL_SERVER_ERROR = "5.00", NOT_IMPLEMENTED = "5.01",
    BAD_GATEWAY = "5.02", SERVICE_UNAVAILABLE = "5.03", GATEWAY_TIMEOUT = "5.04",
    PROXYING_NOT_SUPPORTED = "5.05",
    // Block-wise transfer (RFC 7959 §2.9).
    CONTINUE = "2.31", REQUEST_ENTITY_INCOMPLETE = "4.08",
    CONFLICT = "4.09", UNPROCESSABLE_ENTITY = "4.22", // RFC 8132 §3.4
    TOO_MANY_REQUESTS = "4.29",                       // RFC 8516 §3
    HOP_LIMIT_REACHED = "5.08",                       // RFC 8768 §3
}

impl Code {
    /// Builds "class.detail"; bits outside the 3/5-bit fields are masked off.
    pub const fn new(class: u8, detail: u8) -> Code {
        Code(((class & 0x07) << 5) | (detail & 0x1f))
    }

    /// Parses "c.dd" at compile time for the constants above.
    const fn dotted(s: &str) -> Code {
        let [c, b'.', d1, d0] = *s.as_bytes() else {
            panic!("code must be spelled c.dd");
        };
        Code::new(c - b'0', (d1 - b'0') * 10 + (d0 - b'0'))
    }

    /// 0 request, 2 success, 4 client error, 5 server error; others reserved (RFC 7252 §3).
    pub const fn class(self) -> u8 {
        self.0 >> 5
    }

    /// The 5-bit detail: the `dd` of `c.dd` (RFC 7252 §3).
    pub const fn detail(self) -> u8 {
        self.0 & 0x1f
    }

    /// 0.00 marks an Empty message: a bare ACK, RST or ping (RFC 7252 §4.1).
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Class 0 except 0.00 is a request method (RFC 7252 §12.1.1).
    pub const fn is_request(self) -> bool {
        self.class() == 0 && self.0 != 0
    }

    /// Classes 2, 4 and 5 are responses (RFC 7252 §3).
    pub const fn is_response(self) -> bool {
        matches!(self.class(), 2 | 4 | 5)
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:02}", self.class(), self.detail())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_class_dot_two_digit_detail() {
        let codes = [Code::GET, Code::CONTINUE, Code::HOP_LIMIT_REACHED];
        assert_eq!(codes.map(|c| c.to_string()), ["0.01", "2.31", "5.08"]);
        let c = Code::NOT_FOUND;
        assert_eq!((c.0, c.class(), c.detail()), (0x84, 4, 4));
    }

    #[test]
    fn classifies_request_response_empty_and_reserved() {
        let e = Code::EMPTY;
        assert!(e.is_empty() && !e.is_request() && !e.is_response());
        assert!(Code::IPATCH.is_request() && !Code::IPATCH.is_response());
        assert!(Code::GATEWAY_TIMEOUT.is_response() && !Code::GATEWAY_TIMEOUT.is_request());
        for c in [1, 3, 6, 7].map(|class| Code::new(class, 1)) {
            assert!(!c.is_request() && !c.is_response() && !c.is_empty());
        }
    }
}
