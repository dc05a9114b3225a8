//! Encoding a response head (and body) into the connection's output buffer.

use std::io::Write as _;

use super::reason_phrase;

/// One answer, as the application gave it.
pub(super) struct Answer<'a> {
    pub status: u16,
    /// Extra fields, e.g. `Allow` on a 405 (RFC 9110 §15.5.6).
    pub fields: &'a [(&'a str, &'a str)],
    pub content_type: &'a str,
    pub body: &'a [u8],
}

/// How the connection treats this answer.
#[derive(Clone, Copy, Debug)]
pub(super) struct Framing {
    /// A HEAD request: same fields, no content (RFC 9110 §9.3.2).
    pub head_only: bool,
    /// The connection closes after this answer: say so (RFC 9112 §9.6).
    pub close: bool,
    /// An HTTP/1.0 client that asked for keep-alive: confirm it (RFC 9112 §C.2.2).
    pub confirm_keep_alive: bool,
}

/// Appends the answer to `out`. Always `HTTP/1.1`, the highest minor version we speak
/// (RFC 9110 §6.2); always Content-Length, so the peer knows where the answer ends (RFC 9112
/// §6.3). Status codes outside 200..=599 become 500: 1xx are not final and this API sends
/// only final answers.
pub(super) fn encode(out: &mut Vec<u8>, answer: &Answer<'_>, framing: Framing) {
    let status = match answer.status {
        s @ 200..=599 => s,
        _ => 500,
    };
    let _ = write!(out, "HTTP/1.1 {status} {}\r\n", reason_phrase(status));
    field(out, "Content-Type", answer.content_type);
    field(out, "Content-Length", &answer.body.len().to_string());
    for (name, value) in answer.fields {
        field(out, name, value);
    }
    if framing.close {
        field(out, "Connection", "close");
    } else if framing.confirm_keep_alive {
        field(out, "Connection", "keep-alive");
    }
    out.extend_from_slice(b"\r\n");
    if !framing.head_only {
        out.extend_from_slice(answer.body);
    }
}

/// One field line; CR and LF are dropped so no value can start a field or end the head.
fn field(out: &mut Vec<u8>, name: &str, value: &str) {
    let clean = |s: &str| {
        s.bytes()
            .filter(|b| !matches!(b, b'\r' | b'\n'))
            .collect::<Vec<_>>()
    };
    out.extend_from_slice(&clean(name));
    out.extend_from_slice(b": ");
    out.extend_from_slice(&clean(value));
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encoded(answer: &Answer<'_>, framing: Framing) -> String {
        let mut out = Vec::new();
        encode(&mut out, answer, framing);
        String::from_utf8(out).unwrap()
    }

    const PLAIN: Framing = Framing {
        head_only: false,
        close: false,
        confirm_keep_alive: false,
    };

    #[test]
    fn writes_status_line_length_and_body() {
        let a = Answer {
            status: 200,
            fields: &[],
            content_type: "text/plain",
            body: b"ok\n",
        };
        assert_eq!(
            encoded(&a, PLAIN),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\n\r\nok\n"
        );
    }

    #[test]
    fn head_keeps_the_length_and_drops_the_body() {
        let a = Answer {
            status: 200,
            fields: &[],
            content_type: "text/plain",
            body: b"ok\n",
        };
        let framing = Framing {
            head_only: true,
            close: true,
            ..PLAIN
        };
        assert_eq!(
            encoded(&a, framing),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 3\r\nConnection: close\r\n\r\n"
        );
    }

    #[test]
    fn field_values_cannot_inject_lines_and_statuses_are_final() {
        let a = Answer {
            status: 101,
            fields: &[("X-A", "1\r\nX-B: 2")],
            content_type: "t",
            body: b"",
        };
        let text = encoded(&a, PLAIN);
        assert!(text.starts_with("HTTP/1.1 500 "), "{text}");
        assert!(text.contains("X-A: 1X-B: 2\r\n"), "{text}");
    }
}
