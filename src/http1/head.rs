//! Parsing one request head with `httparse`, and the RFC 9112 rules backoffd applies to it.

use std::borrow::Cow;

use httparse::{Header, Status, EMPTY_HEADER};

use super::{Config, Request};

/// Fields per head; more is 431, like a head over the length limit.
const MAX_FIELDS: usize = 64;

/// How the body of a request is delimited (RFC 9112 §6.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum BodyLength {
    /// No body: neither Content-Length nor Transfer-Encoding, or a length of 0.
    None,
    /// `Content-Length` bytes, already known to fit [`Config::max_body_len`].
    Exactly(u64),
    /// `Transfer-Encoding: chunked`, its size known only at the last chunk.
    Chunked,
}

/// A head that passed the rules, with what the connection needs to read the rest.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Parsed {
    /// The request, without its body yet.
    pub request: Request,
    /// Bytes of the head, to drop from the input.
    pub len: usize,
    /// An HTTP/1.0 request (keep-alive is then opt-in, and no chunked answers).
    pub http10: bool,
    pub body: BodyLength,
    /// `Expect: 100-continue` on a request with a body (RFC 9110 §10.1.1).
    pub expects_continue: bool,
}

/// What the start of the input holds.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Head {
    /// A whole head.
    Complete(Box<Parsed>),
    /// Not a whole head yet, and nothing wrong so far.
    Partial,
    /// A head backoffd refuses: answer with this status and close.
    Invalid(u16),
}

/// Parses the head at the start of `buf`.
pub(super) fn parse(buf: &[u8], config: &Config) -> Head {
    let mut fields = [EMPTY_HEADER; MAX_FIELDS];
    let mut req = httparse::Request::new(&mut fields);
    match req.parse(buf) {
        Ok(Status::Partial) if buf.len() >= config.max_head_len => Head::Invalid(431),
        Ok(Status::Partial) => Head::Partial,
        Ok(Status::Complete(len)) if len > config.max_head_len => Head::Invalid(431),
        Ok(Status::Complete(len)) => match check(&req, len, config) {
            Ok(parsed) => Head::Complete(Box::new(parsed)),
            Err(status) => Head::Invalid(status),
        },
        Err(httparse::Error::TooManyHeaders) => Head::Invalid(431),
        Err(_) => Head::Invalid(400),
    }
}

/// Applies the rules httparse leaves to the server.
fn check(req: &httparse::Request<'_, '_>, len: usize, config: &Config) -> Result<Parsed, u16> {
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Err(400);
    };
    let hosts = fields(req.headers, "host").count();
    // RFC 9112 §3.2: exactly one Host in HTTP/1.1, at most one in HTTP/1.0.
    if hosts > 1 || (version == 1 && hosts == 0) {
        return Err(400);
    }
    let body = body_length(req.headers, version, config.max_body_len)?;
    let expects_continue = expects_continue(req.headers, version)? && body != BodyLength::None;
    let target = target_of(target);
    Ok(Parsed {
        request: Request {
            method: method.to_string(),
            path: path_of(&target).to_string(),
            target: target.into_owned(),
            fields: req
                .headers
                .iter()
                .map(|h| (h.name.to_string(), h.value.trim_ascii().to_vec()))
                .collect(),
            body: Vec::new(),
            keep_alive: keep_alive(version, req.headers),
        },
        len,
        http10: version == 0,
        body,
        expects_continue,
    })
}

/// The body's framing (RFC 9112 §6.3), or the status refusing it:
/// - Transfer-Encoding together with Content-Length is 400, as a smuggling attempt (§6.1,
///   §6.3 item 3), and so is Transfer-Encoding in HTTP/1.0 (§6.1: "faulty" framing);
/// - a Content-Length that is not a number, or disagrees with another, is 400 (§6.3 item 5);
/// - a transfer coding other than chunked is 501 (§6.1), wherever it is in the list (we
///   would not understand the body); an empty list item, or chunked twice (§7), is 400;
/// - a length over `max_body_len` is 413 (RFC 9110 §15.5.14) before any byte of it is read,
///   and with `max_body_len` 0 so is any chunked body (a body we will not read cannot be
///   skipped safely, so the connection closes after the refusal).
fn body_length(
    headers: &[Header<'_>],
    version: u8,
    max_body_len: usize,
) -> Result<BodyLength, u16> {
    let length = content_length(headers)?;
    let mut codings = fields(headers, "transfer-encoding").peekable();
    if codings.peek().is_none() {
        return match length {
            Some(n) if n > u64::try_from(max_body_len).unwrap_or(u64::MAX) => Err(413),
            Some(n) if n > 0 => Ok(BodyLength::Exactly(n)),
            _ => Ok(BodyLength::None),
        };
    }
    if length.is_some() || version == 0 {
        return Err(400);
    }
    let codings: Vec<&[u8]> = codings.flat_map(list_items).collect();
    if codings.iter().any(|c| c.is_empty()) {
        return Err(400);
    }
    if codings.iter().any(|c| !c.eq_ignore_ascii_case(b"chunked")) {
        return Err(501);
    }
    match codings.len() {
        1 if max_body_len == 0 => Err(413),
        1 => Ok(BodyLength::Chunked),
        _ => Err(400),
    }
}

/// The one value of every Content-Length line and list item, if any (RFC 9110 §8.6: a list
/// of equal values may be taken as one).
fn content_length(headers: &[Header<'_>]) -> Result<Option<u64>, u16> {
    let mut length: Option<u64> = None;
    for item in fields(headers, "content-length").flat_map(list_items) {
        let n = parse_length(item).ok_or(400u16)?;
        if length.is_some_and(|l| l != n) {
            return Err(400);
        }
        length = Some(n);
    }
    Ok(length)
}

/// Whether the client waits for `100 Continue` (RFC 9110 §10.1.1); any expectation other than
/// `100-continue` is 417. An HTTP/1.0 client's `100-continue` is ignored, as that section says.
fn expects_continue(headers: &[Header<'_>], version: u8) -> Result<bool, u16> {
    let mut expects = false;
    for item in fields(headers, "expect").flat_map(list_items) {
        if !item.eq_ignore_ascii_case(b"100-continue") {
            return Err(417);
        }
        expects = version == 1;
    }
    Ok(expects)
}

/// `Content-Length = 1*DIGIT` (RFC 9110 §8.6), without overflow.
fn parse_length(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// HTTP/1.1 persists unless `close`; HTTP/1.0 only with `keep-alive` (RFC 9112 §9.3).
fn keep_alive(version: u8, headers: &[Header<'_>]) -> bool {
    let options = fields(headers, "connection").flat_map(list_items);
    let (mut close, mut keep) = (false, false);
    for option in options {
        close |= option.eq_ignore_ascii_case(b"close");
        keep |= option.eq_ignore_ascii_case(b"keep-alive");
    }
    !close && (version == 1 || keep)
}

/// The path and query of a request target: origin-form as it is, an absolute-form target
/// without its scheme and authority (RFC 9112 §3.2.2: `/` when its path is empty); asterisk-
/// and authority-form are returned as they are.
fn target_of(target: &str) -> Cow<'_, str> {
    match target.split_once("://") {
        Some((_, rest)) if !target.starts_with('/') => match rest.find(['/', '?']) {
            Some(i) if rest[i..].starts_with('/') => Cow::Borrowed(&rest[i..]),
            Some(i) => Cow::Owned(format!("/{}", &rest[i..])),
            None => Cow::Borrowed("/"),
        },
        _ => Cow::Borrowed(target),
    }
}

/// The path of a path-and-query: up to `?` (or a `#` a client should not have sent).
fn path_of(target: &str) -> &str {
    target.split(['?', '#']).next().unwrap_or(target)
}

/// The items of a comma-separated field value, trimmed (RFC 9110 §5.6.1).
fn list_items(value: &[u8]) -> impl Iterator<Item = &[u8]> {
    value.split(|&b| b == b',').map(<[u8]>::trim_ascii)
}

/// Values of every field named `name` (field names are case-insensitive, RFC 9110 §5.1).
fn fields<'a>(headers: &'a [Header<'a>], name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
    headers
        .iter()
        .filter(move |h| h.name.eq_ignore_ascii_case(name))
        .map(|h| h.value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_of_strips_query_and_authority() {
        let path = |t| path_of(&target_of(t)).to_string();
        assert_eq!(path("/metrics?x=1"), "/metrics");
        assert_eq!(path("http://h:9102/healthz"), "/healthz");
        assert_eq!(path("http://h:9102"), "/");
        assert_eq!(path("http://h/a?b"), "/a");
        assert_eq!(path("http://h?b"), "/");
        assert_eq!(path("*"), "*");
        assert_eq!(path("/a://b"), "/a://b");
    }

    #[test]
    fn target_keeps_path_and_query_as_sent() {
        let t = "/hc/coap://127.0.0.1:5683/a%20b?x=1";
        assert_eq!(target_of(t), t);
        assert_eq!(target_of("http://h:80/a%2Fb?q=%20"), "/a%2Fb?q=%20");
        assert_eq!(target_of("http://h?q"), "/?q");
    }

    #[test]
    fn content_length_must_be_digits() {
        assert_eq!(parse_length(b"0"), Some(0));
        assert_eq!(parse_length(b"+1"), None);
        assert_eq!(parse_length(b""), None);
        assert_eq!(parse_length(b"99999999999999999999999"), None);
    }
}
