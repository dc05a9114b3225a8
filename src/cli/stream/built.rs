//! The RFC 8323 listeners and upstream of a build with the `tcp` feature: their flags parsed
//! into the library's configurations, described for `--check-config`, and handed to the
//! proxy.

use std::time::Duration;

use super::SPEC;
use crate::cli::flags::{DurationArg, Flags, UsageError};
use backoffd::proxy::{Listeners, ProxyComponent, StreamLimits, StreamListen, Transport};

/// The RFC 8323 listeners and upstream asked for (at least one of them).
#[derive(Clone, Debug)]
pub struct StreamPart {
    /// The listeners, in the order TCP, TLS, WebSocket.
    listens: Vec<StreamListen>,
    /// `--upstream coap+tcp://` or `coaps+tcp://`.
    upstream: Option<UpstreamPart>,
}

/// A CoAP-over-TCP upstream: the origin, each connection's bounds, and TLS for coaps+tcp.
#[derive(Clone, Debug)]
struct UpstreamPart {
    /// The origin.
    addr: std::net::SocketAddr,
    /// Each connection's bounds (the `--tcp-*` deadlines).
    limits: backoffd::coap_tcp::ConnLimits,
    /// coaps+tcp: the CAs `--upstream-ca` trusts and the name to check.
    tls: Option<backoffd::proxy::UpstreamTls>,
}

/// Where the first listener is, as a URI authority with its scheme (nothing if there is none).
pub fn listen_uri(part: &StreamPart) -> String {
    (part.listens.first())
        .map(|l| format!("{}://{}", l.transport.scheme(), l.addr))
        .unwrap_or_default()
}

/// Whether a listener asked for is secure (coaps+tcp): then no plain UDP port opens unless
/// asked for.
pub fn is_secure(part: &StreamPart) -> bool {
    (part.listens.iter()).any(|l| matches!(l.transport, Transport::Tls(_)))
}

/// One line for `--check-config`.
pub fn describe(part: &StreamPart) -> String {
    let mut out = String::new();
    if let Some(u) = &part.upstream {
        let scheme = if u.tls.is_some() {
            "coaps+tcp"
        } else {
            "coap+tcp"
        };
        out += &format!(
            "  upstream {scheme}://{}: each request sent once (RFC 8323)\n",
            u.addr
        );
    }
    for listen in &part.listens {
        let l = &listen.limits;
        out += &format!(
            "  {} on {}: up to {} connections, {} per source; CSM within {:?}, pinged after {:?} idle, messages whole within {:?} (a source: {})\n",
            listen.transport.scheme(),
            listen.addr,
            l.max_connections,
            l.max_connections_per_source,
            l.conn.csm_timeout,
            l.conn.idle_timeout,
            l.conn.message_timeout,
            l.source_prefix
        );
    }
    out
}

/// The most connections the listeners of `part` may hold together.
pub fn max_connections(part: &StreamPart) -> u64 {
    (part.listens.iter())
        .map(|l| l.limits.max_connections as u64)
        .sum()
}

/// The proxy's RFC 8323 listeners are those of `part`.
pub fn add_listeners(listeners: &mut Listeners, part: &StreamPart) {
    listeners.streams = part.listens.clone();
}

/// `proxy`, speaking CoAP over TCP (or TLS) to its upstream if `part` says so.
pub fn with_upstream(proxy: ProxyComponent, part: StreamPart) -> ProxyComponent {
    match part.upstream {
        Some(u) => proxy.with_tcp_upstream(u.addr, u.limits, u.tls),
        None => proxy,
    }
}

/// The listeners `--listen-tcp`, `--listen-tls` and `--listen-ws` ask for.
pub fn from_flags(flags: &Flags) -> Result<Option<StreamPart>, UsageError> {
    let tcp = crate::cli::addr_flag(flags, "listen-tcp")?;
    let tls = crate::cli::addr_flag(flags, "listen-tls")?;
    let ws = crate::cli::addr_flag(flags, "listen-ws")?;
    let config = tls_config(flags, tls.is_some())?;
    let upstream = crate::cli::shared_flags::upstream_flag(flags)?.filter(|u| u.tcp);
    if tcp.is_none() && tls.is_none() && ws.is_none() && upstream.is_none() {
        return match SPEC.iter().find(|s| flags.has(s.name)) {
            Some(s) => Err(UsageError(format!(
                "--{}: needs --listen-tcp, --listen-tls, --listen-ws or --upstream coap+tcp://",
                s.name
            ))),
            None => Ok(None),
        };
    }
    let limits = limits(flags)?;
    let upstream = match upstream {
        Some(u) => Some(UpstreamPart {
            addr: u.addr,
            limits: limits.conn,
            tls: u
                .tls_host
                .map(|host| upstream_tls(flags, host))
                .transpose()?,
        }),
        None => None,
    };
    let listen = |addr, transport| StreamListen {
        addr,
        transport,
        limits,
    };
    let mut listens = Vec::new();
    listens.extend(tcp.map(|a| listen(a, Transport::Tcp)));
    listens.extend(tls.zip(config).map(|(a, c)| listen(a, Transport::Tls(c))));
    listens.extend(ws.map(|a| listen(a, Transport::Ws)));
    Ok(Some(StreamPart { listens, upstream }))
}

/// coaps+tcp's trust: `--upstream-ca` (required) and the URI's host as the name to check.
fn upstream_tls(flags: &Flags, host: String) -> Result<backoffd::proxy::UpstreamTls, UsageError> {
    let Some(path) = flags.get::<String>("upstream-ca")? else {
        return Err(UsageError(
            "--upstream coaps+tcp://: needs --upstream-ca FILE (the CAs the origin's certificate must chain to)".into(),
        ));
    };
    let roots = crate::cli::pem::certificates("upstream-ca", &path)?;
    let config = backoffd::coap_tcp::tls::client_config(&roots)
        .map_err(|e| UsageError(format!("--upstream-ca: {path}: {e}")))?;
    let name = rustls::pki_types::ServerName::try_from(host.clone()).map_err(|_| {
        UsageError(format!(
            "--upstream: {host:?} is not a host name or address"
        ))
    })?;
    Ok(backoffd::proxy::UpstreamTls { config, name })
}

/// The certificate `--listen-tls` needs (`--tls-cert`, `--tls-key`), read and checked.
fn tls_config(
    flags: &Flags,
    listening: bool,
) -> Result<Option<std::sync::Arc<rustls::ServerConfig>>, UsageError> {
    let (cert, key) = (
        flags.get::<String>("tls-cert")?,
        flags.get::<String>("tls-key")?,
    );
    let (cert, key) = match (listening, cert, key) {
        (false, None, None) => return Ok(None),
        (false, Some(_), _) => return Err(UsageError("--tls-cert: needs --listen-tls".into())),
        (false, None, Some(_)) => return Err(UsageError("--tls-key: needs --listen-tls".into())),
        (true, Some(c), Some(k)) => (c, k),
        (true, _, _) => {
            return Err(UsageError(
                "--listen-tls: needs --tls-cert FILE and --tls-key FILE".into(),
            ))
        }
    };
    let chain = crate::cli::pem::certificates("tls-cert", &cert)?;
    let key = crate::cli::pem::private_key("tls-key", &key)?;
    let config = backoffd::coap_tcp::tls::server_config(chain, key)
        .map_err(|e| UsageError(format!("--tls-key: {e}")))?;
    Ok(Some(config))
}

fn limits(flags: &Flags) -> Result<StreamLimits, UsageError> {
    let d = StreamLimits::default();
    let max = backoffd::proxy::MAX_CONNECTIONS;
    let count = |name: &str, default: usize| match flags.get_or(name, default)? {
        0 => Err(UsageError(format!("--{name}: must be at least 1"))),
        n if n > max => Err(UsageError(format!("--{name}: at most {max}"))),
        n => Ok(n),
    };
    let duration = |name: &str, default: Duration| match flags.get_or(name, DurationArg(default))?.0
    {
        t if t.is_zero() => Err(UsageError(format!("--{name}: must be more than 0"))),
        t => Ok(t),
    };
    let mut conn = d.conn;
    conn.csm_timeout = duration("tcp-csm-timeout", conn.csm_timeout)?;
    conn.idle_timeout = duration("tcp-idle-timeout", conn.idle_timeout)?;
    conn.message_timeout = duration("tcp-message-timeout", conn.message_timeout)?;
    Ok(StreamLimits {
        max_connections: count("tcp-max-connections", d.max_connections)?,
        max_connections_per_source: count(
            "tcp-max-connections-per-source",
            d.max_connections_per_source,
        )?,
        source_prefix: crate::cli::shared_flags::source_prefix(flags)?,
        conn,
    })
}
