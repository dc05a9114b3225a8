//! Parsing one request head with `httparse`, and the RFC 9112 rules backoffd applies to it.

use httparse::{Header, Status, EMPTY_HEADER};

use super::{Config, Request};

/// Fields per head; more is 431, like a head over the length limit.
const MAX_FIELDS: usize = 64;

/// What the start of the input holds.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Head {
    /// A whole head of `len` bytes; `http10` for an HTTP/1.0 request.
    Complete {
        request: Request,
        len: usize,
        http10: bool,
    },
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
        Ok(Status::Complete(len)) => match check(&req) {
            Ok(request) => Head::Complete {
                request,
                len,
                http10: req.version == Some(0),
            },
            Err(status) => Head::Invalid(status),
        },
        Err(httparse::Error::TooManyHeaders) => Head::Invalid(431),
        Err(_) => Head::Invalid(400),
    }
}

/// Applies the rules httparse leaves to the server.
fn check(req: &httparse::Request<'_, '_>) -> Result<Request, u16> {
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Err(400);
    };
    let hosts = fields(req.headers, "host").count();
    // RFC 9112 §3.2: exactly one Host in HTTP/1.1, at most one in HTTP/1.0.
    if hosts > 1 || (version == 1 && hosts == 0) {
        return Err(400);
    }
    check_no_body(req.headers)?;
    Ok(Request {
        method: method.to_string(),
        path: path_of(target).to_string(),
        keep_alive: keep_alive(version, req.headers),
    })
}

/// Bodies are not accepted, and a body we will not read cannot be skipped safely, so any
/// request announcing one is refused with 413 and the connection closed (RFC 9110 §15.5.14).
/// A Content-Length that is not a number, or disagrees with another, is 400 (RFC 9112 §6.3
/// item 5); Transfer-Encoding together with Content-Length is 400 as a smuggling attempt
/// (RFC 9112 §6.1, §6.3 item 3).
fn check_no_body(headers: &[Header<'_>]) -> Result<(), u16> {
    let mut length: Option<u64> = None;
    for value in fields(headers, "content-length") {
        for item in value.split(|&b| b == b',') {
            let n = parse_length(item.trim_ascii()).ok_or(400u16)?;
            if length.is_some_and(|l| l != n) {
                return Err(400);
            }
            length = Some(n);
        }
    }
    let chunked = fields(headers, "transfer-encoding").next().is_some();
    match (chunked, length) {
        (true, Some(_)) => Err(400),
        (true, None) => Err(413),
        (false, Some(n)) if n > 0 => Err(413),
        _ => Ok(()),
    }
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
    let options = fields(headers, "connection")
        .flat_map(|v| v.split(|&b| b == b','))
        .map(<[u8]>::trim_ascii);
    let (mut close, mut keep) = (false, false);
    for option in options {
        close |= option.eq_ignore_ascii_case(b"close");
        keep |= option.eq_ignore_ascii_case(b"keep-alive");
    }
    !close && (version == 1 || keep)
}

/// The path of a request target: origin-form up to `?`, or the path of an absolute-form
/// target (RFC 9112 §3.2); asterisk- and authority-form are returned as they are.
fn path_of(target: &str) -> &str {
    let path = match target.split_once("://") {
        Some((_, rest)) if !target.starts_with('/') => rest.find('/').map_or("/", |i| &rest[i..]),
        _ => target,
    };
    path.split(['?', '#']).next().unwrap_or(path)
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
        assert_eq!(path_of("/metrics?x=1"), "/metrics");
        assert_eq!(path_of("http://h:9102/healthz"), "/healthz");
        assert_eq!(path_of("http://h:9102"), "/");
        assert_eq!(path_of("http://h/a?b"), "/a");
        assert_eq!(path_of("*"), "*");
        assert_eq!(path_of("/a://b"), "/a://b");
    }

    #[test]
    fn content_length_must_be_digits() {
        assert_eq!(parse_length(b"0"), Some(0));
        assert_eq!(parse_length(b"+1"), None);
        assert_eq!(parse_length(b""), None);
        assert_eq!(parse_length(b"99999999999999999999999"), None);
    }
}
