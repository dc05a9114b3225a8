//! The CoAP-over-TCP listener's flags (RFC 8323), shared by `backoffd proxy` and `serve`'s
//! `[proxy]` sections: `--listen-tcp` turns it on, the `--tcp-*` flags bound it. A build
//! without the `tcp` feature knows the flags and refuses them with a clear error.

use std::net::SocketAddr;
#[cfg(feature = "tcp")]
use std::time::Duration;

#[cfg(feature = "tcp")]
use super::flags::DurationArg;
use super::flags::{value, Flags, Spec, UsageError};
#[cfg(feature = "tcp")]
use backoffd::proxy::StreamLimits;

/// A CoAP-over-TCP listener: where, and its bounds.
#[cfg(feature = "tcp")]
#[derive(Clone, Debug)]
pub struct StreamPart {
    /// `--listen-tcp`.
    pub addr: SocketAddr,
    /// Connections, CSM and idle deadlines.
    pub limits: StreamLimits,
}

/// Built without the `tcp` feature, there is no TCP listener: no value of this type exists.
#[cfg(not(feature = "tcp"))]
#[derive(Clone, Debug)]
pub enum StreamPart {}

/// The flags.
pub const SPEC: &[Spec] = &[
    value("listen-tcp"),
    value("tcp-max-connections"),
    value("tcp-max-connections-per-source"),
    value("tcp-csm-timeout"),
    value("tcp-idle-timeout"),
];

/// Where the listener is.
pub fn listen_addr(part: &StreamPart) -> SocketAddr {
    #[cfg(feature = "tcp")]
    return part.addr;
    #[cfg(not(feature = "tcp"))]
    match *part {}
}

/// One line for `--check-config`.
pub fn describe(part: &StreamPart) -> String {
    #[cfg(feature = "tcp")]
    {
        let l = &part.limits;
        format!(
            "  coap+tcp on {}: up to {} connections, {} per source; CSM within {:?}, pinged after {:?} idle\n",
            part.addr,
            l.max_connections,
            l.max_connections_per_source,
            l.conn.csm_timeout,
            l.conn.idle_timeout
        )
    }
    #[cfg(not(feature = "tcp"))]
    match *part {}
}

/// Built without the `tcp` feature: any of the flags is an error.
#[cfg(not(feature = "tcp"))]
pub fn from_flags(flags: &Flags) -> Result<Option<StreamPart>, UsageError> {
    match SPEC.iter().find(|s| flags.has(s.name)) {
        Some(s) => Err(UsageError(format!(
            "--{}: this backoffd was built without CoAP over TCP (cargo feature `tcp`)",
            s.name
        ))),
        None => Ok(None),
    }
}

/// The listener `--listen-tcp` asks for.
#[cfg(feature = "tcp")]
pub fn from_flags(flags: &Flags) -> Result<Option<StreamPart>, UsageError> {
    let Some(addr) = super::addr_flag(flags, "listen-tcp")? else {
        return match SPEC[1..].iter().find(|s| flags.has(s.name)) {
            Some(s) => Err(UsageError(format!("--{}: needs --listen-tcp", s.name))),
            None => Ok(None),
        };
    };
    Ok(Some(StreamPart {
        addr,
        limits: limits(flags)?,
    }))
}

#[cfg(feature = "tcp")]
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
    Ok(StreamLimits {
        max_connections: count("tcp-max-connections", d.max_connections)?,
        max_connections_per_source: count(
            "tcp-max-connections-per-source",
            d.max_connections_per_source,
        )?,
        conn,
    })
}
