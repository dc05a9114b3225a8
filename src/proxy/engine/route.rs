//! Forward-proxy routing: decomposing a Proxy-Uri (RFC 7252 §6.4, §5.10.2) and the allowlist.

use std::net::IpAddr;

use super::config::AllowedTarget;

/// Default CoAP port (RFC 7252 §6.1).
pub const COAP_PORT: u16 = 5683;

/// A forward request's target, decomposed into what the upstream request carries.
#[derive(Debug, PartialEq, Eq)]
pub struct Target {
    /// Lowercase host without brackets.
    pub host: String,
    /// Port from the URI, or [`COAP_PORT`] if none was given.
    pub port: u16,
    /// Uri-Path segments, percent-decoded.
    pub path: Vec<Vec<u8>>,
    /// Uri-Query parameters, percent-decoded.
    pub query: Vec<Vec<u8>>,
}

impl Target {
    /// Whether the host is an IP literal, in which case no Uri-Host option is sent.
    pub fn host_is_ip(&self) -> bool {
        self.host.parse::<IpAddr>().is_ok()
    }
}

/// Why a forward request cannot be routed.
#[derive(Debug, PartialEq, Eq)]
pub enum RouteError {
    /// Not a `coap` URI: 5.05 Proxying Not Supported.
    UnsupportedScheme,
    /// Not a valid URI: 4.00 Bad Request... or 4.02 for a malformed option.
    Malformed,
}

/// Decomposes an absolute `coap://host[:port]/path?query` URI.
pub fn parse_proxy_uri(uri: &[u8]) -> Result<Target, RouteError> {
    let (authority, path, query) = split_uri(uri)?;
    let (host, port) = split_authority(authority)?;
    let path = segments(path)
        .map(percent_decode)
        .collect::<Result<_, _>>()?;
    let query = parameters(query)
        .map(percent_decode)
        .collect::<Result<_, _>>()?;
    Ok(Target {
        host,
        port,
        path,
        query,
    })
}

/// How many Uri-Path and Uri-Query options `uri` decomposes into (RFC 7252 §6.4), counted
/// without decoding or allocating anything; `None` if it is no URI [`parse_proxy_uri`] takes.
pub fn decomposed_options(uri: &[u8]) -> Option<usize> {
    let (_, path, query) = split_uri(uri).ok()?;
    Some(segments(path).count() + parameters(query).count())
}

/// Authority, path and query of an absolute `coap` URI without fragment (RFC 3986 §3).
fn split_uri(uri: &[u8]) -> Result<(&str, &str, Option<&str>), RouteError> {
    let uri = std::str::from_utf8(uri).map_err(|_| RouteError::Malformed)?;
    let (scheme, rest) = uri.split_once("://").ok_or(RouteError::Malformed)?;
    check_scheme(scheme.as_bytes())?;
    if rest.contains('#') {
        return Err(RouteError::Malformed);
    }
    let (authority, path_query) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    Ok(match path_query.split_once('?') {
        Some((p, q)) => (authority, p, Some(q)),
        None => (authority, path_query, None),
    })
}

/// The path's segments, one Uri-Path each; `/` and the empty path have none (RFC 7252 §6.4).
fn segments(path: &str) -> impl Iterator<Item = &str> {
    let path = path.strip_prefix('/').filter(|p| !p.is_empty());
    path.into_iter().flat_map(|p| p.split('/'))
}

/// The query's `&`-separated parameters, one Uri-Query each (RFC 7252 §6.4).
fn parameters(query: Option<&str>) -> impl Iterator<Item = &str> {
    query.into_iter().flat_map(|q| q.split('&'))
}

/// Only `coap` is proxied; `coaps`, `http` and the rest get 5.05 (RFC 7252 §5.7.2).
pub fn check_scheme(scheme: &[u8]) -> Result<(), RouteError> {
    match scheme.eq_ignore_ascii_case(b"coap") {
        true => Ok(()),
        false => Err(RouteError::UnsupportedScheme),
    }
}

fn split_authority(authority: &str) -> Result<(String, u16), RouteError> {
    if authority.contains('@') {
        return Err(RouteError::Malformed);
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or(RouteError::Malformed)?;
        (host, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(RouteError::Malformed);
    }
    let port = match port {
        Some(p) => p.parse().map_err(|_| RouteError::Malformed)?,
        None => COAP_PORT,
    };
    Ok((percent_decode(host).and_then(utf8_lower)?, port))
}

fn utf8_lower(bytes: Vec<u8>) -> Result<String, RouteError> {
    String::from_utf8(bytes)
        .map(|s| s.to_ascii_lowercase())
        .map_err(|_| RouteError::Malformed)
}

/// Decodes `%XX` escapes; a malformed escape is an error (RFC 3986 §2.1).
fn percent_decode(s: &str) -> Result<Vec<u8>, RouteError> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or(RouteError::Malformed)?;
            let hex = std::str::from_utf8(hex).map_err(|_| RouteError::Malformed)?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| RouteError::Malformed)?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// The index of the allowed target matching `host:port`, if any.
pub fn find_allowed(allow: &[AllowedTarget], host: &str, port: u16) -> Option<usize> {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let as_ip = host.parse::<IpAddr>().ok();
    allow.iter().position(|a| {
        a.port == port
            && (a.host.eq_ignore_ascii_case(host)
                || as_ip.is_some_and(|ip| a.host.parse::<IpAddr>().ok() == Some(ip)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decomposes_host_port_path_and_query() {
        let t = parse_proxy_uri(b"coap://Example.COM:5690/a/b%20c?x=1&y").unwrap();
        assert_eq!(t.host, "example.com");
        assert_eq!(t.port, 5690);
        assert_eq!(t.path, vec![b"a".to_vec(), b"b c".to_vec()]);
        assert_eq!(t.query, vec![b"x=1".to_vec(), b"y".to_vec()]);
        assert!(!t.host_is_ip());
    }

    #[test]
    fn the_decomposed_option_count_is_what_parsing_gives() {
        for uri in [
            &b"coap://h"[..],
            b"coap://h/",
            b"coap://h?",
            b"coap://h//a/?x&&y",
            b"coap://[::1]:7/a/b%20c?x=1&y",
        ] {
            let t = parse_proxy_uri(uri).unwrap();
            assert_eq!(decomposed_options(uri), Some(t.path.len() + t.query.len()));
        }
        let many = format!("coap://h{}", "/".repeat(60_000));
        assert_eq!(decomposed_options(many.as_bytes()), Some(60_000));
        assert_eq!(decomposed_options(b"http://h/a"), None);
    }

    #[test]
    fn ipv6_literal_and_default_port() {
        let t = parse_proxy_uri(b"coap://[::1]/temp").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", COAP_PORT));
        assert!(t.host_is_ip());
    }

    #[test]
    fn other_schemes_are_not_proxied() {
        for uri in [&b"coaps://h/x"[..], b"http://h/x", b"coap+tcp://h/"] {
            assert_eq!(parse_proxy_uri(uri), Err(RouteError::UnsupportedScheme));
        }
    }

    #[test]
    fn malformed_uris_are_rejected() {
        for uri in [
            &b"coap:/h"[..],
            b"coap://",
            b"coap://h:port/",
            b"coap://h/%zz",
            b"coap://u@h/",
            b"coap://h/#f",
        ] {
            assert_eq!(parse_proxy_uri(uri), Err(RouteError::Malformed), "{uri:?}");
        }
    }

    #[test]
    fn allowlist_matches_names_and_equivalent_ip_literals() {
        let allow = vec![AllowedTarget {
            host: "::1".into(),
            port: 5683,
            addr: "[::1]:5683".parse().unwrap(),
        }];
        assert_eq!(find_allowed(&allow, "0:0:0:0:0:0:0:1", 5683), Some(0));
        assert_eq!(find_allowed(&allow, "::1", 5684), None);
        assert_eq!(find_allowed(&allow, "evil.example", 5683), None);
    }
}
