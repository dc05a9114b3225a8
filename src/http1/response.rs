//! Encoding a response head (and body) into the connection's output buffer.

use std::io::Write as _;

use super::reason_phrase;

/// One answer, as the application gave it.
pub(super) struct Answer<'a> {
    pub status: u16,
    /// Extra fields, e.g. `Allow` on a 405 (RFC 9110 §15.5.6).
    pub fields: &'a [(&'a str, &'a str)],
    /// The Content-Type; empty writes none (e.g. a 204, or a 304 that has no content).
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

/// How the content of a streamed answer is delimited (RFC 9112 §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Delimiting {
    /// `Transfer-Encoding: chunked`, ended by the last chunk (HTTP/1.1 clients).
    Chunked,
    /// Unframed, ended by closing the connection (HTTP/1.0 clients, RFC 9112 §6.3 item 8).
    Close,
    /// No content at all: HEAD, 204 or 304; the head is the whole answer.
    Nothing,
}

/// Appends the answer to `out`. Always `HTTP/1.1`, the highest minor version we speak
/// (RFC 9110 §6.2); Content-Length, so the peer knows where the answer ends (RFC 9112 §6.3),
/// except on 204, which has none and no content (RFC 9110 §8.6, §15.3.5), and on 304, which
/// has no content and whose length would have to be the 200's (RFC 9110 §8.6, §15.4.5): any
/// body given with those is dropped. Status codes outside 200..=599 become 500: 1xx are not
/// final and this API sends only final answers.
pub(super) fn encode(out: &mut Vec<u8>, answer: &Answer<'_>, framing: Framing) {
    let status = final_status(answer.status);
    let has_content = !matches!(status, 204 | 304);
    let length = answer.body.len().to_string();
    let length = has_content.then_some(("Content-Length", length.as_str()));
    head(out, status, answer, length, framing);
    if has_content && !framing.head_only {
        out.extend_from_slice(answer.body);
    }
}

/// Appends the head of a streamed answer (its `body` is ignored); the content follows in
/// [`chunk`]s, or raw when it is delimited by the close. `delimiting` is the one a GET would
/// get, also for HEAD, whose answer has the same fields (RFC 9110 §9.3.2).
pub(super) fn encode_stream_head(
    out: &mut Vec<u8>,
    answer: &Answer<'_>,
    delimiting: Delimiting,
    framing: Framing,
) {
    let status = final_status(answer.status);
    let coding = (delimiting == Delimiting::Chunked).then_some(("Transfer-Encoding", "chunked"));
    head(out, status, answer, coding, framing);
}

/// One chunk of a streamed answer (RFC 9112 §7.1); empty data writes nothing, since an empty
/// chunk is the last one.
pub(super) fn chunk(out: &mut Vec<u8>, data: &[u8]) {
    if !data.is_empty() {
        let _ = write!(out, "{:x}\r\n", data.len());
        out.extend_from_slice(data);
        out.extend_from_slice(b"\r\n");
    }
}

/// The last chunk, with no trailers: the end of a chunked answer (RFC 9112 §7.1).
pub(super) const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// The interim answer a client waiting on `Expect: 100-continue` needs (RFC 9110 §15.2.1).
pub(super) const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

fn final_status(status: u16) -> u16 {
    match status {
        s @ 200..=599 => s,
        _ => 500,
    }
}

/// Status line, Content-Type, the framing field, the application's fields, Connection.
fn head(
    out: &mut Vec<u8>,
    status: u16,
    answer: &Answer<'_>,
    framing_field: Option<(&str, &str)>,
    framing: Framing,
) {
    let _ = write!(out, "HTTP/1.1 {status} {}\r\n", reason_phrase(status));
    if !answer.content_type.is_empty() {
        field(out, "Content-Type", answer.content_type);
    }
    if let Some((name, value)) = framing_field {
        field(out, name, value);
    }
    for (name, value) in answer.fields {
        field(out, name, value);
    }
    if framing.close {
        field(out, "Connection", "close");
    } else if framing.confirm_keep_alive {
        field(out, "Connection", "keep-alive");
    }
    out.extend_from_slice(b"\r\n");
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
    fn no_content_length_on_204_and_no_body_on_304() {
        for (status, line) in [(204, "204 No Content"), (304, "304 Not Modified")] {
            let a = Answer {
                status,
                fields: &[("ETag", "\"1\"")],
                content_type: "",
                body: b"dropped",
            };
            assert_eq!(
                encoded(&a, PLAIN),
                format!("HTTP/1.1 {line}\r\nETag: \"1\"\r\n\r\n")
            );
        }
    }

    #[test]
    fn a_stream_head_is_chunked_and_chunks_are_hex_sized() {
        let a = Answer {
            status: 200,
            fields: &[],
            content_type: "text/event-stream",
            body: b"",
        };
        let mut out = Vec::new();
        encode_stream_head(&mut out, &a, Delimiting::Chunked, PLAIN);
        chunk(&mut out, &[b'x'; 26]);
        chunk(&mut out, b"");
        out.extend_from_slice(LAST_CHUNK);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                 Transfer-Encoding: chunked\r\n\r\n1a\r\n{}\r\n0\r\n\r\n",
                "x".repeat(26)
            )
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
