//! Field validation for requests, responses and trailers (RFC 9113 §8.2, §8.3).
//! A block that fails is malformed: a stream error of type PROTOCOL_ERROR (§8.1.1).

use super::hpack::Header;

/// What a header block is for (§8.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockKind {
    Request,
    Response,
    Trailers,
}

/// Size of a header list as SETTINGS_MAX_HEADER_LIST_SIZE counts it (§6.5.2).
pub fn list_size(headers: &[Header]) -> usize {
    headers
        .iter()
        .map(|h| h.name.len() + h.value.len() + 32)
        .sum()
}

/// A 1xx response: informational, another header block follows (§8.1).
pub fn is_informational(headers: &[Header]) -> bool {
    headers
        .iter()
        .any(|h| h.name == b":status" && h.value.first() == Some(&b'1'))
}

/// Checks one decoded block; the error is a reason for logs.
pub fn validate(kind: BlockKind, headers: &[Header]) -> Result<(), &'static str> {
    const PSEUDO: [&[u8]; 5] = [b":method", b":scheme", b":path", b":authority", b":status"];
    let mut seen = [false; PSEUDO.len()];
    let mut regular_seen = false;
    let mut connect = false;
    for h in headers {
        check_name(&h.name)?;
        check_value(&h.value)?;
        if h.name.starts_with(b":") {
            // §8.3: pseudo-header fields come first, once each, and only the
            // ones defined for this kind of message.
            let i = PSEUDO.iter().position(|p| *p == h.name);
            let allowed = match (kind, i) {
                (BlockKind::Request, Some(i)) => i < 4,
                (BlockKind::Response, Some(i)) => i == 4,
                _ => false,
            };
            let i = i
                .filter(|_| allowed)
                .ok_or("unknown or misplaced pseudo-header")?;
            if regular_seen || std::mem::replace(&mut seen[i], true) {
                return Err("pseudo-header after a field or repeated");
            }
            connect |= i == 0 && h.value == b"CONNECT";
            if i == 2 && h.value.is_empty() {
                return Err("empty :path");
            }
        } else {
            regular_seen = true;
            check_not_connection_specific(h)?;
        }
    }
    let [method, scheme, path, authority, status] = seen;
    let complete = match kind {
        // §8.5: CONNECT names only an authority.
        BlockKind::Request if connect => authority && !scheme && !path,
        BlockKind::Request => method && scheme && path,
        BlockKind::Response => status,
        BlockKind::Trailers => true,
    };
    complete
        .then_some(())
        .ok_or("missing or extra pseudo-header")
}

/// §8.2.1: no empty names, no uppercase, no controls, space, DEL or non-ASCII;
/// a colon only as the pseudo-header prefix.
fn check_name(name: &[u8]) -> Result<(), &'static str> {
    let body = name.strip_prefix(b":").unwrap_or(name);
    let bad = |&c: &u8| c <= 0x20 || c.is_ascii_uppercase() || c >= 0x7f || c == b':';
    if body.is_empty() || body.iter().any(bad) {
        return Err("invalid field name");
    }
    Ok(())
}

/// §8.2.1: no NUL, CR or LF, and no leading or trailing whitespace.
fn check_value(value: &[u8]) -> Result<(), &'static str> {
    let ws = |c: Option<&u8>| matches!(c, Some(b' ' | b'\t'));
    if value.iter().any(|&c| matches!(c, 0 | b'\r' | b'\n'))
        || ws(value.first())
        || ws(value.last())
    {
        return Err("invalid field value");
    }
    Ok(())
}

/// §8.2.2: HTTP/1.1 connection-specific fields are forbidden; `te` may only
/// say "trailers".
fn check_not_connection_specific(h: &Header) -> Result<(), &'static str> {
    const FORBIDDEN: [&[u8]; 5] = [
        b"connection",
        b"proxy-connection",
        b"keep-alive",
        b"transfer-encoding",
        b"upgrade",
    ];
    if FORBIDDEN.contains(&&h.name[..]) || (h.name == b"te" && h.value != b"trailers") {
        return Err("connection-specific field");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(pairs: &[(&str, &str)]) -> Vec<Header> {
        let h = |&(n, v): &(&str, &str)| Header {
            name: n.into(),
            value: v.into(),
            sensitive: false,
        };
        pairs.iter().map(h).collect()
    }

    const GET: [(&str, &str); 3] = [(":method", "GET"), (":scheme", "http"), (":path", "/")];

    #[test]
    fn request_with_required_pseudo_headers_is_valid() {
        assert_eq!(validate(BlockKind::Request, &block(&GET)), Ok(()));
    }

    #[test]
    fn request_missing_path_is_malformed() {
        assert!(validate(BlockKind::Request, &block(&GET[..2])).is_err());
    }

    #[test]
    fn uppercase_field_name_is_malformed() {
        let mut b = block(&GET);
        b.extend(block(&[("Content-Type", "application/grpc")]));
        assert!(validate(BlockKind::Request, &b).is_err());
    }

    #[test]
    fn pseudo_header_after_regular_field_is_malformed() {
        let b = block(&[(":status", "200"), ("a", "b"), (":status", "200")]);
        assert!(validate(BlockKind::Response, &b).is_err());
    }

    #[test]
    fn response_pseudo_header_in_request_is_malformed() {
        let mut b = block(&GET);
        b.insert(0, block(&[(":status", "200")]).remove(0));
        assert!(validate(BlockKind::Request, &b).is_err());
    }

    #[test]
    fn trailers_carry_no_pseudo_headers() {
        assert_eq!(
            validate(BlockKind::Trailers, &block(&[("grpc-status", "0")])),
            Ok(())
        );
        assert!(validate(BlockKind::Trailers, &block(&[(":status", "200")])).is_err());
    }

    #[test]
    fn te_other_than_trailers_is_malformed() {
        let mut b = block(&GET);
        b.extend(block(&[("te", "gzip")]));
        assert!(validate(BlockKind::Request, &b).is_err());
    }
}
