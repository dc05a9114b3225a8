//! Header fields and options: ETag, If-Match, If-None-Match, Max-Age and Location (RFC 7252
//! §10.2, §5.10, §6.5).

use std::fmt;
use std::fmt::Write as _;

use super::{DEFAULT_MAX_AGE, MAX_LIST_ELEMENTS};
use crate::hc::uri::{is_sub_delim, is_unreserved, push_escaped};

/// A CoAP ETag is 1..=8 opaque bytes (RFC 7252 §5.10.6).
pub const MAX_ETAG: usize = 8;

/// The HTTP entity-tag for a CoAP ETag: its bytes as lowercase hex in quotes, strong.
///
/// Hex turns any opaque bytes into the visible ASCII an entity-tag must be (RFC 9110 §8.8.3),
/// and maps back byte for byte in [`coap_etags`]. Strong, because a CoAP ETag is a strong
/// validator: it changes with every change of the representation (RFC 7252 §5.10.6.1). `None`
/// for a value outside 1..=8 bytes, a malformed option: send no ETag then.
pub fn http_etag(coap: &[u8]) -> Option<String> {
    if coap.is_empty() || coap.len() > MAX_ETAG {
        return None;
    }
    let mut tag = String::with_capacity(2 * coap.len() + 2);
    tag.push('"');
    for b in coap {
        let _ = write!(tag, "{b:02x}");
    }
    tag.push('"');
    Some(tag)
}

/// An If-Match or If-None-Match field value, parsed (RFC 9110 §13.1.1-§13.1.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EntityTags {
    /// `*`: "any current representation".
    Any,
    /// A list of entity-tags.
    Tags {
        /// The tags that are ours, i.e. came from [`http_etag`], as CoAP ETags.
        etags: Vec<CoapEtag>,
        /// How many tags are not ours: they can never equal a CoAP ETag.
        foreign: usize,
    },
}

/// One entity-tag of ours, back as a CoAP ETag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoapEtag {
    /// The CoAP ETag value, 1..=8 bytes.
    pub value: Vec<u8>,
    /// Sent as `W/"..."`.
    pub weak: bool,
}

impl EntityTags {
    /// The ETags for CoAP If-Match options. If-Match compares strongly (RFC 9110 §13.1.1), so
    /// weak tags never match and are left out.
    pub fn if_match_etags(&self) -> impl Iterator<Item = &[u8]> {
        self.etags().filter(|e| !e.weak).map(|e| e.value.as_slice())
    }

    /// The ETags for CoAP ETag request options (RFC 7252 §5.10.6.2) standing for an
    /// If-None-Match. It compares weakly (RFC 9110 §13.1.2), so `W/` does not matter.
    pub fn if_none_match_etags(&self) -> impl Iterator<Item = &[u8]> {
        self.etags().map(|e| e.value.as_slice())
    }

    fn etags(&self) -> impl Iterator<Item = &CoapEtag> {
        match self {
            EntityTags::Any => [].iter(),
            EntityTags::Tags { etags, .. } => etags.iter(),
        }
    }
}

/// Why a header field value cannot be used; the request gets 400.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeaderError {
    /// Not a `*` or a list of entity-tags (RFC 9110 §8.8.3).
    Malformed,
    /// More than [`MAX_LIST_ELEMENTS`] entity-tags: ignoring the rest would change the
    /// precondition's meaning, so the request is refused.
    TooManyTags,
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HeaderError::Malformed => "malformed entity-tag list (RFC 9110 §8.8.3)",
            HeaderError::TooManyTags => "more than 32 entity-tags",
        })
    }
}

impl std::error::Error for HeaderError {}

/// Parses If-Match or If-None-Match: `*` or `#entity-tag` (RFC 9110 §13.1.1-§13.1.2).
///
/// How the cross-proxy maps the result (RFC 7252 §10.2.2 leaves the details open):
/// - If-Match `*`: one CoAP If-Match with an empty value ("the resource exists", RFC 7252
///   §5.10.8.1). Tags: one CoAP If-Match per [`EntityTags::if_match_etags`]; if there is none
///   (all weak or foreign), no current representation can match: answer 412 without
///   forwarding.
/// - If-None-Match `*`: a CoAP If-None-Match (§5.10.8.2). Tags on GET, HEAD or FETCH: CoAP
///   ETag options from [`EntityTags::if_none_match_etags`], so that 2.03 becomes 304; foreign
///   tags cannot match, so they are dropped, and with none left the request is forwarded
///   unconditionally. Tags on another method: CoAP has no way to say it; answer 501 rather
///   than forward the request without its precondition.
pub fn coap_etags(value: &[u8]) -> Result<EntityTags, HeaderError> {
    if trim_ows(value) == b"*" {
        return Ok(EntityTags::Any);
    }
    let (mut etags, mut foreign, mut count) = (Vec::new(), 0, 0);
    let mut rest = value;
    loop {
        // Empty list elements are allowed (RFC 9110 §5.6.1).
        rest = skip_while(rest, |b| b == b',' || b == b' ' || b == b'\t');
        if rest.is_empty() {
            break;
        }
        let (weak, opaque, after) = parse_entity_tag(rest)?;
        count += 1;
        if count > MAX_LIST_ELEMENTS {
            return Err(HeaderError::TooManyTags);
        }
        match ours(opaque) {
            Some(value) => etags.push(CoapEtag { value, weak }),
            None => foreign += 1,
        }
        rest = trim_ows(after);
        if rest.first().is_some_and(|&b| b != b',') {
            return Err(HeaderError::Malformed);
        }
    }
    match count {
        0 => Err(HeaderError::Malformed),
        _ => Ok(EntityTags::Tags { etags, foreign }),
    }
}

/// `[ "W/" ] DQUOTE *etagc DQUOTE` at the start of `s`: weakness, the opaque tag, the rest.
fn parse_entity_tag(s: &[u8]) -> Result<(bool, &[u8], &[u8]), HeaderError> {
    let (weak, s) = match s.strip_prefix(b"W/") {
        Some(s) => (true, s),
        None => (false, s),
    };
    let s = s.strip_prefix(b"\"").ok_or(HeaderError::Malformed)?;
    let end = s
        .iter()
        .position(|&b| b == b'"')
        .ok_or(HeaderError::Malformed)?;
    let opaque = &s[..end];
    // etagc = %x21 / %x23-7E / obs-text
    if !opaque
        .iter()
        .all(|&b| b == 0x21 || (0x23..=0x7e).contains(&b) || b >= 0x80)
    {
        return Err(HeaderError::Malformed);
    }
    Ok((weak, opaque, &s[end + 1..]))
}

/// The CoAP ETag an opaque tag from [`http_etag`] stands for: 2 to 16 lowercase hex digits.
/// Anything else, uppercase hex included (entity-tags compare byte for byte), is not ours.
fn ours(opaque: &[u8]) -> Option<Vec<u8>> {
    let lower_hex = |b: &u8| b.is_ascii_digit() || (b'a'..=b'f').contains(b);
    if opaque.is_empty() || opaque.len() > 2 * MAX_ETAG || opaque.len() % 2 != 0 {
        return None;
    }
    if !opaque.iter().all(lower_hex) {
        return None;
    }
    let nibble = |b: u8| char::from(b).to_digit(16).map(|d| d as u8);
    opaque
        .chunks_exact(2)
        .map(|pair| Some(nibble(pair[0])? << 4 | nibble(pair[1])?))
        .collect()
}

fn trim_ows(s: &[u8]) -> &[u8] {
    let s = skip_while(s, |b| b == b' ' || b == b'\t');
    let end = s
        .iter()
        .rposition(|&b| b != b' ' && b != b'\t')
        .map_or(0, |i| i + 1);
    &s[..end]
}

fn skip_while(s: &[u8], skip: impl Fn(u8) -> bool) -> &[u8] {
    let start = s.iter().position(|&b| !skip(b)).unwrap_or(s.len());
    &s[start..]
}

/// `Cache-Control: max-age=N` for a response, from its Max-Age, [`DEFAULT_MAX_AGE`] when the
/// option is absent (RFC 7252 §5.10.5). The value must not exceed the remaining freshness
/// (§10.2.2), so a cached response passes what is left of its Max-Age (§5.6.1, §5.7.1), not
/// the original.
pub fn cache_control(max_age: Option<u32>) -> String {
    format!("max-age={}", max_age.unwrap_or(DEFAULT_MAX_AGE))
}

/// Where the HTTP client reaches what a Location-Path/Location-Query points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocationBase<'a> {
    /// The default mapping: back through the proxy, `{prefix}coap://{authority}/...`.
    Forward {
        /// The HC Proxy URI's path, e.g. `/hc/`.
        prefix: &'a str,
        /// The target's `host[:port]` as in its Proxy-Uri; IPv6 brackets are escaped here.
        authority: &'a str,
    },
    /// The null mapping: the upstream's paths are the proxy's own, `/...`.
    Reverse,
}

/// The HTTP Location for a response's Location-Path and Location-Query options (RFC 7252
/// §10.2.4), built as RFC 7252 §6.5 steps 7-8 build a URI: each value percent-encoded with
/// uppercase hex (a `/` in a segment, an `&` in an argument included), `/` alone for no
/// Location-Path. Relative to the proxy, per `base`.
///
/// `None` when a segment is `.` or `..`, which Location-Path must not be (RFC 7252 §5.10.7)
/// and which would climb out of the target in the client's URI resolution: send no Location.
pub fn location<'v>(
    base: &LocationBase,
    path: impl IntoIterator<Item = &'v [u8]>,
    query: impl IntoIterator<Item = &'v [u8]>,
) -> Option<String> {
    let mut out = String::new();
    if let LocationBase::Forward { prefix, authority } = base {
        out.push_str(prefix);
        out.push_str("coap://");
        // RFC 8075 §5.3.2: IPv6 brackets are percent-encoded in the hosting URI.
        out.push_str(&authority.replace('[', "%5B").replace(']', "%5D"));
    }
    let before_path = out.len();
    for segment in path {
        if segment == b"." || segment == b".." {
            return None;
        }
        out.push('/');
        push_encoded(segment, |b| is_sub_delim(b) || b":@".contains(&b), &mut out);
    }
    if out.len() == before_path {
        out.push('/');
    }
    for (i, argument) in query.into_iter().enumerate() {
        out.push(if i == 0 { '?' } else { '&' });
        let keep = |b: u8| (is_sub_delim(b) && b != b'&') || b":@/?".contains(&b);
        push_encoded(argument, keep, &mut out);
    }
    Some(out)
}

/// Unreserved bytes and those `keep` allows as they are; everything else `%XX`.
fn push_encoded(value: &[u8], keep: impl Fn(u8) -> bool, out: &mut String) {
    for &b in value {
        match is_unreserved(b) || keep(b) {
            true => out.push(char::from(b)),
            false => push_escaped(b, out),
        }
    }
}
