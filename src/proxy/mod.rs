//! The CoAP forwarding proxy (RFC 7252 §5.7) with its own upstream retry policy.
//!
//! [`Proxy`] is a sans-IO engine: the driver hands it client datagrams, upstream datagrams,
//! upstream ICMP errors and `now`; it returns datagrams to send, the upstream sockets to open
//! or close, and the next instant it needs.
//!
//! Life of an exchange (one client request):
//! - **new request** (not a duplicate by source address, token and Message ID): options are
//!   checked, a route chosen, and a copy goes upstream with the proxy's own Message ID and token
//!   (`Waiting`), out of one of the upstream's endpoints (see below). The client's MID, token
//!   and type are remembered and restored on the way back. A request the proxy answers itself
//!   (4.xx, 5.03, ...) goes nowhere, but its answer is kept, so its retransmissions get the
//!   same answer and never a second chance upstream.
//! - **upstream leg**: retransmitted per the [`RetryPolicy`] (POST/PATCH/iPATCH use the
//!   non-idempotent policy); an empty ACK from upstream stops retransmission
//!   (`AwaitingSeparate`); RST or ICMP unreachable answers 5.02, retries exhausted or the total
//!   timeout 5.04, a response with an unrecognised unsafe option 5.02 (§5.7.1).
//! - **client leg**: a fast answer is piggybacked on the ACK of a CON request; after
//!   `ack_delay` the client gets an empty ACK and the answer follows as a CON, retransmitted
//!   until acknowledged (`Answered`). Client retransmissions are answered from state, never
//!   forwarded again.
//! - **retired**: once the client has its answer the exchange is gone and the answer waits in
//!   a compact cache for the client's duplicates, EXCHANGE_LIFETIME after it finished, within
//!   a bound. An answer with a Message ID of the proxy's own (separate, NON, notification)
//!   keeps that client's numbering alive as long: those IDs count per client, and none may
//!   repeat towards a client within its lifetime (RFC 7252 §4.4).
//!
//! Upstream endpoints (`endpoints.rs`): a Message ID is reserved towards an endpoint for
//! EXCHANGE_LIFETIME, so one socket carries 65,536 requests per 247 s. Each upstream gets a pool
//! of sockets of the proxy's own (each its own ephemeral port, so its own ID space), opened as
//! the load needs them up to `--max-upstream-endpoints`, and closed after a lifetime idle.
//!
//! Every deadline lives in the state it acts in (`exchange.rs`: a retransmission in
//! `Waiting`, staleness in `Observing`, ...), and an exchange's one wheel timer names it by
//! generation: a timer for a finished exchange, or for a state it has left, finds nothing to
//! act on, so none ever sends anything for a finished exchange.

//! Layout: `engine/` is the sans-IO engine ([`Proxy`] and the parts it owns); `transport/` is
//! the I/O side, one file per transport behind one trait; `driver.rs` joins them as a reactor
//! component. Only the last two touch the OS.

mod driver;
mod engine;
mod transport;

pub use driver::{ProxyComponent, FIRST_FOREIGN_KEY};
pub use engine::route;
#[cfg(feature = "cache")]
pub use engine::CacheCounters;
pub use engine::{
    AllowedTarget, ClientBudget, ClientOrigin, ConfigError, ConnectionId, Counters, Destination,
    EndpointEvent, EndpointId, KeptAnswers, KeptBounds, Limits, Load, LocalClient, ObserveCounters,
    ObserverLoss, OwnAnswers, Peer, Proof, Proxy, ProxyConfig, ProxyEvent, Refusals, Relay,
    RetryPolicy, Routing, Seeds, SessionId, SlotId, Source, State, Strays, Traffic, Transmit,
    UpstreamId, UpstreamLeg, UpstreamStats,
};
#[cfg(feature = "tcp")]
pub use transport::stream_listener::{StreamLimits, StreamListen, Transport, MAX_CONNECTIONS};
#[cfg(feature = "tcp")]
pub use transport::stream_upstream::UpstreamTls;
pub use transport::Listeners;
