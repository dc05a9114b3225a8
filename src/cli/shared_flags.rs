//! The flags that the proxy's core and its listeners both read: `--upstream`, whose scheme
//! picks the upstream's transport (the proxy's routing, the coaps and stream upstreams), and
//! `--source-prefix`, what every per-source share counts. Below `proxy.rs`, `dtls.rs` and
//! `stream.rs`, so that those read them without importing the command that includes them.

use std::net::SocketAddr;

use super::flags::{Flags, UsageError};
use super::resolve;
use backoffd::source_prefix::PrefixLengths;

/// `--upstream`'s value: `HOST:PORT`, `coap://HOST[:PORT]` or `coaps://HOST[:PORT]`
/// (RFC 7252 §6.1, §6.2: default ports 5683 and 5684), `coap+tcp://` or `coaps+tcp://`
/// (RFC 8323 §8.1, §8.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct UpstreamFlag {
    /// Where it is.
    pub addr: SocketAddr,
    /// The host as given (what an origin's certificate must name), if the scheme is coaps.
    pub coaps_host: Option<String>,
    /// The scheme is coap+tcp or coaps+tcp (RFC 8323 §8.1, §8.2).
    pub tcp: bool,
    /// The host as given, if the scheme is coaps+tcp: what the origin's certificate must name.
    pub tls_host: Option<String>,
}

/// `--upstream`, if given.
pub(super) fn upstream_flag(flags: &Flags) -> Result<Option<UpstreamFlag>, UsageError> {
    let Some(value) = flags.get::<String>("upstream")? else {
        return Ok(None);
    };
    let (rest, default_port, coaps, tcp) = match value.split_once("://") {
        None => (value.as_str(), None, false, None),
        Some(("coap", rest)) => (rest, Some(5683), false, None),
        Some(("coaps", rest)) => (rest, Some(5684), true, None),
        Some(("coap+tcp", rest)) => (rest, Some(5683), false, Some(false)),
        Some(("coaps+tcp", rest)) => (rest, Some(5684), false, Some(true)),
        Some((scheme, _)) => {
            return Err(UsageError(format!(
                "--upstream: {scheme}:// is not a scheme the proxy speaks upstream (coap://, coaps://, coap+tcp:// or coaps+tcp://)"
            )))
        }
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let host = match rest.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(':') && port.parse::<u16>().is_ok() => host,
        _ => rest,
    };
    let hostport = match (host.len() == rest.len(), default_port) {
        (true, Some(port)) => format!("{rest}:{port}"),
        _ => rest.to_string(),
    };
    let addr = resolve("upstream", &hostport)?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok(Some(UpstreamFlag {
        addr,
        coaps_host: coaps.then(|| host.to_string()),
        tcp: tcp.is_some(),
        tls_host: (tcp == Some(true)).then(|| host.to_string()),
    }))
}

/// `--source-prefix V4,V6`: what every per-source share counts (`/32,/64` by default), for
/// the proxy's own shares and the DTLS and stream listeners'.
pub(super) fn source_prefix(flags: &Flags) -> Result<PrefixLengths, UsageError> {
    flags.get_or("source-prefix", PrefixLengths::DEFAULT)
}
