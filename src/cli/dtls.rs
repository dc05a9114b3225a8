//! The coaps listener's flags (RFC 7252 §9), shared by `backoffd proxy` and `serve`'s
//! `[proxy]` sections: `--listen-dtls` turns it on, the others give its keys and bounds. A
//! build without the `dtls` feature knows the flags and refuses them with a clear error.
//!
//! Key and certificate files are read here, at parse time, so that `--check-config` finds a
//! missing or unreadable file before anything is bound.
//!
//! The feature is wired here alone: the flags exist in every build; the parts they make live
//! in `built` (with the feature) or `left_out` (without it), which offer the same names.

use super::flags::{value, Spec};

/// The flags.
pub const SPEC: &[Spec] = &[
    value("listen-dtls"),
    value("psk-identity"),
    value("psk-key-file"),
    value("dtls-cert"),
    value("dtls-key"),
    value("dtls-client-ca"),
    value("dtls-max-sessions"),
    value("dtls-max-sessions-per-source"),
    value("dtls-max-handshakes"),
    value("dtls-max-handshakes-per-source"),
    value("dtls-handshake-timeout"),
    value("dtls-idle-timeout"),
];

/// The coaps upstream's flags.
pub const UPSTREAM_SPEC: &[Spec] = &[
    value("upstream-psk-identity"),
    value("upstream-psk-key-file"),
    value("upstream-ca"),
];

#[cfg(feature = "dtls")]
mod built;
#[cfg(feature = "dtls")]
use built as parts;
#[cfg(not(feature = "dtls"))]
use left_out as parts;
pub use parts::{
    add_listener, describe, describe_upstream, from_flags, listen_addr, upstream_from_flags,
    with_upstream, DtlsPart, UpstreamPart,
};

/// A build without the `dtls` feature: no coaps part can exist, and any coaps flag is an error.
#[cfg(not(feature = "dtls"))]
mod left_out {
    use std::net::SocketAddr;

    use super::{SPEC, UPSTREAM_SPEC};
    use crate::cli::flags::{Flags, UsageError};
    use backoffd::proxy::{Listeners, ProxyComponent};

    /// There is no coaps listener: no value of this type exists.
    #[derive(Clone, Debug)]
    pub enum DtlsPart {}

    /// There is no coaps upstream: no value of this type exists.
    #[derive(Clone, Debug)]
    pub enum UpstreamPart {}

    /// The error for a coaps flag.
    fn refused(flag: &str) -> UsageError {
        UsageError(format!(
            "--{flag}: this backoffd was built without coaps (cargo feature `dtls`)"
        ))
    }

    /// Any coaps flag is an error.
    pub fn from_flags(flags: &Flags) -> Result<Option<DtlsPart>, UsageError> {
        match SPEC.iter().find(|s| flags.has(s.name)) {
            Some(s) => Err(refused(s.name)),
            None => Ok(None),
        }
    }

    /// A coaps upstream, or any of its flags, is an error.
    pub fn upstream_from_flags(flags: &Flags) -> Result<Option<UpstreamPart>, UsageError> {
        let upstream = crate::cli::shared_flags::upstream_flag(flags)?;
        let coaps = upstream.as_ref().is_some_and(|u| u.coaps_host.is_some());
        // --upstream-ca is coaps+tcp's too (cli/stream.rs).
        let over_tls = upstream.is_some_and(|u| u.tls_host.is_some());
        let flag = (UPSTREAM_SPEC.iter().map(|s| s.name))
            .filter(|n| !(over_tls && *n == "upstream-ca"))
            .find(|n| flags.has(n));
        match (coaps, flag) {
            (false, None) => Ok(None),
            (_, f) => Err(refused(f.unwrap_or("upstream"))),
        }
    }

    pub fn listen_addr(part: &DtlsPart) -> SocketAddr {
        match *part {}
    }

    pub fn describe(part: &DtlsPart) -> String {
        match *part {}
    }

    pub fn describe_upstream(part: &UpstreamPart) -> String {
        match *part {}
    }

    pub fn add_listener(_: &mut Listeners, part: DtlsPart) {
        match part {}
    }

    pub fn with_upstream(_: ProxyComponent, part: UpstreamPart) -> Result<ProxyComponent, String> {
        match part {}
    }
}
