//! The RFC 8323 listeners' flags, shared by `backoffd proxy` and `serve`'s `[proxy]`
//! sections: `--listen-tcp` (coap+tcp), `--listen-tls` with `--tls-cert` and `--tls-key`
//! (coaps+tcp) and `--listen-ws` (coap+ws) turn them on; the `--tcp-*` flags bound each of
//! them. A build without the `tcp` feature knows the flags and refuses them with a clear
//! error.
//!
//! The feature is wired here alone: the flags exist in every build; the parts they make live
//! in `built` (with the feature) or `left_out` (without it), which offer the same names.

use super::flags::{value, Spec};

/// The flags.
pub const SPEC: &[Spec] = &[
    value("listen-tcp"),
    value("listen-tls"),
    value("tls-cert"),
    value("tls-key"),
    value("listen-ws"),
    value("tcp-max-connections"),
    value("tcp-max-connections-per-source"),
    value("tcp-csm-timeout"),
    value("tcp-idle-timeout"),
    value("tcp-message-timeout"),
];

#[cfg(feature = "tcp")]
mod built;
#[cfg(feature = "tcp")]
use built as parts;
#[cfg(not(feature = "tcp"))]
use left_out as parts;
pub use parts::{
    add_listeners, describe, from_flags, is_secure, listen_uri, max_connections, with_upstream,
    StreamPart,
};

/// A build without the `tcp` feature: no RFC 8323 part can exist, and any of the flags is an
/// error.
#[cfg(not(feature = "tcp"))]
mod left_out {
    use super::SPEC;
    use crate::cli::flags::{Flags, UsageError};
    use backoffd::proxy::{Listeners, ProxyComponent};

    /// There is no TCP listener: no value of this type exists.
    #[derive(Clone, Debug)]
    pub enum StreamPart {}

    /// Any of the flags, or a coap+tcp upstream, is an error.
    pub fn from_flags(flags: &Flags) -> Result<Option<StreamPart>, UsageError> {
        if crate::cli::shared_flags::upstream_flag(flags)?.is_some_and(|u| u.tcp) {
            return Err(UsageError(
                "--upstream: coap+tcp://: this backoffd was built without CoAP over TCP (cargo feature `tcp`)".into(),
            ));
        }
        match SPEC.iter().find(|s| flags.has(s.name)) {
            Some(s) => Err(UsageError(format!(
                "--{}: this backoffd was built without CoAP over TCP (cargo feature `tcp`)",
                s.name
            ))),
            None => Ok(None),
        }
    }

    pub fn listen_uri(part: &StreamPart) -> String {
        match *part {}
    }

    pub fn is_secure(part: &StreamPart) -> bool {
        match *part {}
    }

    pub fn describe(part: &StreamPart) -> String {
        match *part {}
    }

    pub fn max_connections(part: &StreamPart) -> u64 {
        match *part {}
    }

    pub fn add_listeners(_: &mut Listeners, part: &StreamPart) {
        match *part {}
    }

    pub fn with_upstream(_: ProxyComponent, part: StreamPart) -> ProxyComponent {
        match part {}
    }
}
