//! coaps (RFC 7252 §9): CoAP over DTLS 1.2 (RFC 6347).
//!
//! The record layer and the handshake are webrtc-rs's sans-IO `rtc-dtls` (docs/dtls.md says
//! why that library). This module is what the library does not do for a server that faces
//! the open network:
//! - [`hello`] and [`cookie`]: the stateless cookie exchange (RFC 6347 §4.2.1), before any
//!   state exists for a peer;
//! - [`draws`]: the library's randomness, from our seeds;
//! - [`server`]: the session table, with caps in total and per source, a handshake deadline,
//!   an idle timeout and one wheel timer per session;
//! - [`admission`]: who gets a session at the bounds, and whose handshake makes room;
//! - [`client`]: the proxy's own sessions towards a coaps origin, one per upstream endpoint;
//! - [`config`]: keys, certificates and bounds, and the library's configuration from them.
//!
//! The proxy's driver owns the socket and hands the decrypted datagrams to the engine as
//! the datagrams of a client named by its session, a [`SessionId`](crate::slot_id::SessionId).

pub mod admission;
#[cfg(test)]
mod bounds_tests;
pub mod client;
#[cfg(test)]
mod client_tests;
pub mod clock;
pub mod config;
pub mod cookie;
pub mod counters;
pub mod draws;
pub mod hello;
pub mod metrics;
pub mod server;
#[cfg(test)]
mod tests;

pub use client::{ClientEvent, DtlsClients, SessionEnd};
pub use config::{
    CertifiedKey, ClientCredentials, Credentials, DtlsClientConfig, DtlsServerConfig, PskTable,
    SessionLimits,
};
pub use counters::{ClientCounters, DtlsCounters};
pub use server::{DtlsEvent, DtlsServer, Ending, SessionGone};
