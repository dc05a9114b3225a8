//! The HTTP cross-proxy's flags (issue 15), shared by `backoffd proxy` and `serve`'s `[proxy]`
//! sections: `--http-listen` turns it on, the others tune it. A build without the `http`
//! feature knows the flags and refuses them with a clear error.
//!
//! The feature is wired here alone: the flags exist in every build; the part they make lives
//! in `built` (with the feature) or `left_out` (without it), which offer the same names.

use super::flags::{value, Spec};

/// The flags.
pub const SPEC: &[Spec] = &[
    value("http-listen"),
    value("http-cors"),
    value("http-max-body"),
    value("http-timeout"),
    value("http-max-connections"),
    value("http-max-streams"),
    value("http-max-inflight-bytes"),
];

#[cfg(feature = "http")]
mod built;
#[cfg(feature = "http")]
use built as parts;
#[cfg(not(feature = "http"))]
use left_out as parts;
pub use parts::{from_flags, in_front, listen_addr, HttpPart};

/// A build without the `http` feature: no cross-proxy can exist, and any of its flags is an
/// error.
#[cfg(not(feature = "http"))]
mod left_out {
    use std::net::SocketAddr;

    use super::SPEC;
    use crate::cli::flags::{Flags, UsageError};
    use backoffd::metrics::MetricsSources;
    use backoffd::proxy::{ProxyComponent, ProxyConfig};
    use backoffd::reactor::Component;

    /// There is no cross-proxy to configure: no value of this type exists.
    #[derive(Clone, Debug)]
    pub enum HttpPart {}

    /// Any cross-proxy flag is an error.
    pub fn from_flags(flags: &Flags, _: &ProxyConfig) -> Result<Option<HttpPart>, UsageError> {
        match SPEC.iter().find(|s| flags.has(s.name)) {
            Some(s) => Err(UsageError(format!(
                "--{}: this backoffd was built without the HTTP cross-proxy (cargo feature `http`)",
                s.name
            ))),
            None => Ok(None),
        }
    }

    pub fn listen_addr(part: &HttpPart) -> SocketAddr {
        match *part {}
    }

    pub fn in_front(
        _: ProxyComponent,
        part: HttpPart,
        _: &mut MetricsSources,
    ) -> Result<Box<dyn Component>, String> {
        match part {}
    }
}
