//! The HTTP request target to CoAP target mapping (RFC 8075 §5).
//!
//! Two mappings, either or both enabled:
//! - the default mapping (§5.3): the Target CoAP URI appended as is to the HC Proxy URI, e.g.
//!   `/hc/coap://sensor.example:5683/temp?unit=c`. It becomes one Proxy-Uri option, which the
//!   proxy engine decomposes itself (RFC 7252 §6.4, [`crate::proxy::route`]);
//! - the null mapping (§5.2): with an upstream configured, the HTTP path and query become that
//!   upstream's Uri-Path and Uri-Query options, percent-decoded to bytes.

use std::borrow::Cow;
use std::fmt;
use std::net::Ipv6Addr;

use crate::proxy::route::{self, RouteError};

/// The HC Proxy URI path the README and the command line use. RFC 8075 §5.3 has no default
/// ("There is no default for the HC Proxy URI"); `/hc/` is its example.
pub const DEFAULT_PREFIX: &str = "/hc/";

/// The longest request target looked at. The HTTP/1.1 head limit already bounds it; checking
/// here too keeps this function's cost bounded whatever its caller does (414, RFC 9110 §15.5.15).
pub const MAX_REQUEST_TARGET: usize = 8 * 1024;

/// Proxy-Uri option length 1..=1034 (RFC 7252 §5.10.2).
pub const MAX_PROXY_URI: usize = 1034;

/// Uri-Host, Uri-Path and Uri-Query option values are 0..=255 bytes (RFC 7252 §5.10.1).
pub const MAX_OPTION_VALUE: usize = 255;

/// Which of the RFC 8075 §5 mappings the listener serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mapping<'a> {
    /// The default mapping only (§5.3), under `prefix` (e.g. [`DEFAULT_PREFIX`]).
    Forward {
        /// The HC Proxy URI's path, ending in `/`.
        prefix: &'a str,
    },
    /// The null mapping only (§5.2): every target goes to the configured upstream.
    Reverse,
    /// A target under `prefix` is forwarded (§5.3); any other goes to the upstream (§5.2).
    Both {
        /// The HC Proxy URI's path, ending in `/`.
        prefix: &'a str,
    },
}

impl Mapping<'_> {
    /// The HC Proxy URI's path, if the default mapping is on.
    pub fn prefix(&self) -> Option<&str> {
        match self {
            Mapping::Forward { prefix } | Mapping::Both { prefix } => Some(prefix),
            Mapping::Reverse => None,
        }
    }

    fn has_reverse(&self) -> bool {
        matches!(self, Mapping::Reverse | Mapping::Both { .. })
    }
}

/// What the CoAP request carries to reach the target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CoapTarget {
    /// The default mapping: the Target CoAP URI for a Proxy-Uri option, `coap://` with a
    /// lowercase host, brackets unescaped, and percent-encoding normalised (RFC 3986 §6.2.2).
    Forward {
        /// At most [`MAX_PROXY_URI`] bytes of ASCII.
        proxy_uri: String,
    },
    /// The null mapping: the upstream's Uri-Path segments and Uri-Query arguments, each
    /// percent-decoded (RFC 7252 §6.4 steps 8-9), each at most [`MAX_OPTION_VALUE`] bytes.
    Reverse {
        /// One Uri-Path option each; none for `/`.
        path: Vec<Vec<u8>>,
        /// One Uri-Query option each; none for an absent or empty query.
        query: Vec<Vec<u8>>,
    },
}

/// Defines [`UriError`] with each variant's HTTP status and text in one list.
macro_rules! uri_errors {
    ($($variant:ident => $status:literal, $text:literal,)*) => {
        /// Why a request target maps to no CoAP request; [`UriError::http_status`] says how to
        /// answer, and its `Display` is a short text body for that answer.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub enum UriError { $(#[doc = $text] $variant,)* }

        impl UriError {
            /// The HTTP status to answer with.
            pub const fn http_status(self) -> u16 {
                match self { $(Self::$variant => $status,)* }
            }

            /// The short text for the answer's body.
            pub const fn text(self) -> &'static str {
                match self { $(Self::$variant => $text,)* }
            }
        }

        impl fmt::Display for UriError {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.text())
            }
        }
    };
}

uri_errors! {
    TooLong => 414, "request target longer than 8 KiB",
    NotOriginForm => 400, "request target is neither a path nor an absolute http URI",
    NotMapped => 404, "request target is not under the proxy prefix",
    Fragment => 400, "a fragment ('#') in the request target",
    BadPercentEncoding => 400, "'%' not followed by two hex digits (RFC 3986 §2.1)",
    MissingScheme => 400, "target URI without a scheme (RFC 8075 §5.3.1)",
    UnsupportedScheme => 400, "target URI scheme is not coap",
    CoapsUnsupported => 501, "coaps targets are not proxied (RFC 8075 §10.3)",
    UserInfo => 400, "userinfo in the target URI (RFC 7252 §6.1)",
    EmptyHost => 400, "empty host in the target URI",
    BadHost => 400, "malformed host in the target URI",
    BadPort => 400, "port is not a number in 1..=65535",
    ProxyUriTooLong => 414, "target URI longer than 1034 bytes (RFC 7252 §5.10.2)",
    OptionTooLong => 414, "a host, path segment or query argument over 255 bytes (RFC 7252 §5.10.1)",
}

/// Maps an HTTP request target (origin-form, or absolute-form `http://proxy/...`, RFC 9112
/// §3.2) to the CoAP target, per the enabled `mapping`.
///
/// The errors: see [`UriError`]. Targets over [`MAX_REQUEST_TARGET`] are refused before any
/// other work.
pub fn coap_target(request_target: &str, mapping: &Mapping) -> Result<CoapTarget, UriError> {
    if request_target.len() > MAX_REQUEST_TARGET {
        return Err(UriError::TooLong);
    }
    if request_target.contains('#') {
        return Err(UriError::Fragment);
    }
    let target = origin_form(request_target)?;
    check_escapes(&target)?;
    if let Some(uri) = mapping.prefix().and_then(|p| target.strip_prefix(p)) {
        return forward(uri);
    }
    match mapping.has_reverse() {
        true => reverse(&target),
        false => Err(UriError::NotMapped),
    }
}

/// The path and query of the target: as is in origin-form, without `http://authority` in
/// absolute-form, which a server must accept too (RFC 9112 §3.2.2).
fn origin_form(target: &str) -> Result<Cow<'_, str>, UriError> {
    if target.starts_with('/') {
        return Ok(Cow::Borrowed(target));
    }
    let scheme_end = target.find("://").ok_or(UriError::NotOriginForm)?;
    let scheme = &target[..scheme_end];
    if !(scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https")) {
        return Err(UriError::NotOriginForm);
    }
    let rest = &target[scheme_end + 3..];
    Ok(match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => Cow::Borrowed(&rest[i..]),
        Some(i) => Cow::Owned(format!("/{}", &rest[i..])),
        None => Cow::Borrowed("/"),
    })
}

/// The default mapping (RFC 8075 §5.3): `uri` is what follows the prefix.
fn forward(uri: &str) -> Result<CoapTarget, UriError> {
    let rest = strip_coap_scheme(uri)?;
    let (authority, path_query) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    let mut proxy_uri = String::with_capacity(uri.len() + 8);
    proxy_uri.push_str("coap://");
    push_authority(&unescape_brackets(authority), &mut proxy_uri)?;
    push_path_query(path_query, &mut proxy_uri);
    if proxy_uri.len() > MAX_PROXY_URI {
        return Err(UriError::ProxyUriTooLong);
    }
    check_decomposes(&proxy_uri)?;
    Ok(CoapTarget::Forward { proxy_uri })
}

/// Checks the scheme (case-insensitive, RFC 3986 §3.1) and returns what follows `scheme://`.
/// A target without one must get a 4xx (RFC 8075 §5.3.1); `coaps` needs a security policy
/// mapping we do not have (§10.3), so it is refused as a request we are unwilling to serve
/// (501, RFC 7252 §10.2); any other scheme is no CoAP URI (400).
fn strip_coap_scheme(uri: &str) -> Result<&str, UriError> {
    let (scheme, rest) = uri.split_once("://").ok_or(UriError::MissingScheme)?;
    let is_scheme = scheme
        .as_bytes()
        .first()
        .is_some_and(u8::is_ascii_alphabetic)
        && scheme
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b));
    if !is_scheme {
        return Err(UriError::MissingScheme);
    }
    if scheme.eq_ignore_ascii_case("coaps") {
        return Err(UriError::CoapsUnsupported);
    }
    route::check_scheme(scheme.as_bytes()).map_err(|_| UriError::UnsupportedScheme)?;
    Ok(rest)
}

/// An IPv6 literal's brackets must be percent-encoded in the hosting URI and are reverted
/// when the target is unpacked (RFC 8075 §5.3.2). Raw brackets are taken as well.
fn unescape_brackets(authority: &str) -> Cow<'_, str> {
    if !authority.contains('%') {
        return Cow::Borrowed(authority);
    }
    let mut s = authority.to_owned();
    for (escaped, bracket) in [("%5B", "["), ("%5b", "["), ("%5D", "]"), ("%5d", "]")] {
        s = s.replace(escaped, bracket);
    }
    Cow::Owned(s)
}

/// Appends `host[:port]`, validated: no userinfo (RFC 7252 §6.1 has none), a reg-name or an
/// IPv6 literal, a port in 1..=65535. The host is lowercased (RFC 3986 §6.2.2.1).
fn push_authority(authority: &str, out: &mut String) -> Result<(), UriError> {
    if authority.contains('@') {
        return Err(UriError::UserInfo);
    }
    let (host, port) = split_host_port(authority)?;
    if host.is_empty() {
        return Err(UriError::EmptyHost);
    }
    if let Some(literal) = host.strip_prefix('[') {
        let literal = literal.strip_suffix(']').ok_or(UriError::BadHost)?;
        literal.parse::<Ipv6Addr>().map_err(|_| UriError::BadHost)?;
        out.push('[');
        out.push_str(&literal.to_ascii_lowercase());
        out.push(']');
    } else {
        push_reg_name(host, out)?;
    }
    if let Some(port) = port {
        out.push(':');
        out.push_str(&parse_port(port)?.to_string());
    }
    Ok(())
}

/// Splits `host[:port]`; a bracketed host keeps its brackets. Brackets anywhere else are wrong.
fn split_host_port(authority: &str) -> Result<(&str, Option<&str>), UriError> {
    let host_end = match authority.strip_prefix('[') {
        Some(v6) => v6.find(']').ok_or(UriError::BadHost)? + 2,
        None => authority.find(':').unwrap_or(authority.len()),
    };
    let (host, after) = authority.split_at(host_end);
    if after.contains(['[', ']']) || (!host.starts_with('[') && host.contains(']')) {
        return Err(UriError::BadHost);
    }
    match after.strip_prefix(':') {
        Some(port) => Ok((host, Some(port))),
        None if after.is_empty() => Ok((host, None)),
        None => Err(UriError::BadHost),
    }
}

/// 1 to 5 digits, 1..=65535; an empty port (which RFC 3986 §3.2.3 allows) is refused, as the
/// issue asks for a port that is a number.
fn parse_port(port: &str) -> Result<u16, UriError> {
    if port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(UriError::BadPort);
    }
    match port.parse::<u16>() {
        Ok(p) if p != 0 => Ok(p),
        _ => Err(UriError::BadPort),
    }
}

/// A reg-name (RFC 3986 §3.2.2): unreserved, sub-delims and escapes, lowercased.
fn push_reg_name(host: &str, out: &mut String) -> Result<(), UriError> {
    let bytes = host.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            push_normalised_escape(decode_escape(bytes, i)?, out, true);
            i += 3;
            continue;
        }
        if !(is_unreserved(b) || is_sub_delim(b)) {
            return Err(UriError::BadHost);
        }
        out.push(char::from(b.to_ascii_lowercase()));
        i += 1;
    }
    Ok(())
}

/// Appends the path and query, escapes normalised and bytes a URI may not hold raw (RFC 3986
/// §3.3-§3.4) percent-encoded, so the Proxy-Uri is a valid URI. An empty query is dropped:
/// it yields no Uri-Query either way (RFC 7252 §6.4 step 9).
fn push_path_query(path_query: &str, out: &mut String) {
    let (path, query) = match path_query.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path_query, None),
    };
    push_component(path, is_path_char, out);
    if let Some(query) = query.filter(|q| !q.is_empty()) {
        out.push('?');
        push_component(query, is_query_char, out);
    }
}

/// Escapes are already checked by [`check_escapes`]; one that is not passes through encoded.
fn push_component(part: &str, allowed: fn(u8) -> bool, out: &mut String) {
    let bytes = part.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if let (b'%', Ok(decoded)) = (b, decode_escape(bytes, i)) {
            push_normalised_escape(decoded, out, false);
            i += 3;
            continue;
        }
        match allowed(b) && b != b'%' {
            true => out.push(char::from(b)),
            false => push_escaped(b, out),
        }
        i += 1;
    }
}

/// An escaped unreserved character is decoded; any other escape keeps uppercase hex digits
/// (RFC 3986 §6.2.2.1-§6.2.2.2).
fn push_normalised_escape(decoded: u8, out: &mut String, lowercase: bool) {
    match (is_unreserved(decoded), lowercase) {
        (true, true) => out.push(char::from(decoded.to_ascii_lowercase())),
        (true, false) => out.push(char::from(decoded)),
        (false, _) => push_escaped(decoded, out),
    }
}

/// `%XX` with uppercase hex digits (RFC 3986 §2.1, RFC 7252 §6.5).
pub(super) fn push_escaped(b: u8, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    out.push('%');
    out.push(char::from(HEX[usize::from(b >> 4)]));
    out.push(char::from(HEX[usize::from(b & 0x0f)]));
}

/// The byte of the `%XX` escape at `bytes[i]`.
fn decode_escape(bytes: &[u8], i: usize) -> Result<u8, UriError> {
    let hex = |b: u8| char::from(b).to_digit(16);
    match bytes.get(i + 1..i + 3) {
        Some(&[h, l]) => match (hex(h), hex(l)) {
            (Some(h), Some(l)) => Ok((h * 16 + l) as u8),
            _ => Err(UriError::BadPercentEncoding),
        },
        _ => Err(UriError::BadPercentEncoding),
    }
}

/// Every `%` starts a valid escape (RFC 3986 §2.1).
fn check_escapes(target: &str) -> Result<(), UriError> {
    let bytes = target.as_bytes();
    (0..bytes.len())
        .filter(|&i| bytes[i] == b'%')
        .try_for_each(|i| decode_escape(bytes, i).map(|_| ()))
}

/// The proxy engine must accept the Proxy-Uri we built, and every option it decomposes into
/// must fit (RFC 7252 §5.10.1). Our checks leave only a host that is not UTF-8 once decoded.
fn check_decomposes(proxy_uri: &str) -> Result<(), UriError> {
    let target = route::parse_proxy_uri(proxy_uri.as_bytes()).map_err(|e| match e {
        RouteError::UnsupportedScheme => UriError::UnsupportedScheme,
        RouteError::Malformed => UriError::BadHost,
    })?;
    check_option_lengths(&target.path, &target.query)?;
    match target.host.len() > MAX_OPTION_VALUE {
        true => Err(UriError::OptionTooLong),
        false => Ok(()),
    }
}

fn check_option_lengths(path: &[Vec<u8>], query: &[Vec<u8>]) -> Result<(), UriError> {
    match path.iter().chain(query).any(|v| v.len() > MAX_OPTION_VALUE) {
        true => Err(UriError::OptionTooLong),
        false => Ok(()),
    }
}

/// The null mapping (RFC 8075 §5.2): the path and query become the upstream's Uri-Path and
/// Uri-Query. Decomposed by the proxy engine's own RFC 7252 §6.4 parser, under a stand-in
/// authority that is dropped again; a `/` inside a segment arrives as `%2F`.
fn reverse(target: &str) -> Result<CoapTarget, UriError> {
    let target = match target.split_once('?') {
        Some((path, "")) => path,
        _ => target,
    };
    let uri = format!("coap://upstream{target}");
    // Escapes were checked, so the stand-in URI always parses.
    let decomposed =
        route::parse_proxy_uri(uri.as_bytes()).map_err(|_| UriError::BadPercentEncoding)?;
    check_option_lengths(&decomposed.path, &decomposed.query)?;
    Ok(CoapTarget::Reverse {
        path: decomposed.path,
        query: decomposed.query,
    })
}

/// RFC 3986 §2.3.
pub(super) fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~".contains(&b)
}

/// RFC 3986 §2.2.
pub(super) fn is_sub_delim(b: u8) -> bool {
    b"!$&'()*+,;=".contains(&b)
}

/// `pchar` and `/` (RFC 3986 §3.3).
fn is_path_char(b: u8) -> bool {
    is_unreserved(b) || is_sub_delim(b) || b":@/".contains(&b)
}

/// `pchar`, `/` and `?` (RFC 3986 §3.4).
fn is_query_char(b: u8) -> bool {
    is_path_char(b) || b == b'?'
}

#[cfg(test)]
mod tests;
