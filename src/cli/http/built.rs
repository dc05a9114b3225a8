//! The HTTP cross-proxy of a build with the `http` feature: its flags parsed into the
//! library's configuration, and the cross-proxy composed in front of the CoAP proxy.

use std::net::SocketAddr;
use std::time::Duration;

use super::SPEC;
use crate::cli::flags::{DurationArg, Flags, SizeArg, UsageError};
pub use backoffd::hc::HttpFrontConfig as HttpPart;
use backoffd::hc::{CrossProxy, HcConfig};
use backoffd::http1;
use backoffd::metrics::MetricsSources;
use backoffd::proxy::{ProxyComponent, ProxyConfig};
use backoffd::reactor::Component;

/// Where the cross-proxy listens.
pub fn listen_addr(part: &HttpPart) -> SocketAddr {
    part.addr
}

/// The cross-proxy `part` in front of `proxy`, as a component that reports its metrics to
/// `sources`.
pub fn in_front(
    proxy: ProxyComponent,
    part: HttpPart,
    sources: &mut MetricsSources,
) -> Result<Box<dyn Component>, String> {
    let addr = part.addr;
    let cross = CrossProxy::bind(proxy, part)
        .map_err(|e| format!("cannot bind HTTP listener {addr}: {e}"))?;
    Ok(crate::cli::reported(cross, sources))
}

/// Bodies are held whole (a request's until sent, a response's until reassembled), so what
/// one peer may pin is about `PIPELINED x 2 x max body` per connection: with the defaults,
/// 4 x 2 x 256 KiB = 2 MiB per connection, 256 MiB for 128 connections; request bodies are
/// bounded together by `--http-max-inflight-bytes`.
const DEFAULT_MAX_BODY: usize = 256 << 10;
/// What request bodies in flight may hold together, unless `--http-max-body` is larger (then
/// that: one largest body must fit, and a command line that worked keeps working).
const DEFAULT_MAX_INFLIGHT_BODY: usize = 8 << 20;
const MAX_BODY: usize = 64 << 20;
/// Requests one connection may have parsed and unanswered (HTTP/1.1 pipelining, bounded).
const PIPELINED: usize = 4;

/// The cross-proxy in front of `proxy`, if `--http-listen` asks for it.
pub fn from_flags(flags: &Flags, proxy: &ProxyConfig) -> Result<Option<HttpPart>, UsageError> {
    let Some(addr) = crate::cli::addr_flag(flags, "http-listen")? else {
        return match SPEC[1..].iter().find(|s| flags.has(s.name)) {
            Some(s) => Err(UsageError(format!("--{}: needs --http-listen", s.name))),
            None => Ok(None),
        };
    };
    let max_body = flags.get_or("http-max-body", SizeArg(DEFAULT_MAX_BODY))?.0;
    if max_body > MAX_BODY {
        return Err(UsageError(format!(
            "--http-max-body: {max_body} is more than 64MiB"
        )));
    }
    let max_inflight_body = inflight_flag(flags, max_body)?;
    let timeout = flags
        .get_or("http-timeout", DurationArg(Duration::from_secs(60)))?
        .0;
    if timeout.is_zero() {
        return Err(UsageError("--http-timeout: must be more than 0".into()));
    }
    let front = HcConfig {
        prefix: "/hc/".into(),
        forward: proxy.routing.forward,
        reverse: proxy.routing.upstream.is_some(),
        max_body,
        max_request: proxy.limits.max_request_size,
        timeout,
        cors: cors_flag(flags)?,
        max_streams: flags.get_or("http-max-streams", 64)?,
    };
    Ok(Some(HttpPart {
        addr,
        http: http1::Config {
            max_body_len: max_body,
            max_pipelined: PIPELINED,
            ..http1::Config::default()
        },
        max_connections: positive(flags, "http-max-connections", 128)?,
        max_inflight_body,
        front,
    }))
}

/// `--http-max-inflight-bytes`: at least one largest body, else no body could ever be taken.
fn inflight_flag(flags: &Flags, max_body: usize) -> Result<usize, UsageError> {
    let default = SizeArg(DEFAULT_MAX_INFLIGHT_BODY.max(max_body));
    match flags.get_or("http-max-inflight-bytes", default)?.0 {
        0 => Err(UsageError(
            "--http-max-inflight-bytes: must be more than 0".into(),
        )),
        n if n < max_body => Err(UsageError(format!(
            "--http-max-inflight-bytes: {n} is less than --http-max-body ({max_body})"
        ))),
        n => Ok(n),
    }
}

/// An origin is written into every answer's Access-Control-Allow-Origin: one visible
/// token, `*` or `scheme://host[:port]` (Fetch standard, "HTTP responses").
fn cors_flag(flags: &Flags) -> Result<Option<String>, UsageError> {
    let Some(origin) = flags.get::<String>("http-cors")? else {
        return Ok(None);
    };
    let visible = !origin.is_empty() && origin.bytes().all(|b| b.is_ascii_graphic());
    if origin != "*" && !(visible && origin.contains("://")) {
        return Err(UsageError(format!(
            "--http-cors: {origin:?} is not an origin (use * or scheme://host[:port])"
        )));
    }
    Ok(Some(origin))
}

fn positive(flags: &Flags, name: &str, default: usize) -> Result<usize, UsageError> {
    match flags.get_or(name, default)? {
        0 => Err(UsageError(format!("--{name}: must be at least 1"))),
        n => Ok(n),
    }
}
