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

mod answer_cache;
mod awaiting_proof;
mod budget;
#[cfg(feature = "cache")]
mod cache;
#[cfg(feature = "cache")]
mod cache_use;
#[cfg(feature = "cache")]
mod caching;
mod client_leg;
mod clients;
mod config;
mod counters;
mod deliveries;
mod driver;
mod endpoints;
mod engine;
mod events;
mod exchange;
#[cfg(feature = "cache")]
mod fanout;
mod gate;
mod held;
mod index;
mod kept;
mod keyed_hash;
mod limits;
mod local_answer;
mod metrics;
#[cfg(not(feature = "cache"))]
mod no_cache;
mod transport;
// Without the `cache` feature one stand-in answers to the names of the four cache modules,
// so that the engine's paths and calls stay as they are.
#[cfg(not(feature = "cache"))]
use no_cache::{self as cache, self as cache_use, self as caching, self as fanout};
mod observation_shares;
mod outbox;
mod peer;
mod report;
pub mod route;
#[cfg(feature = "tcp")]
mod stream_listener;
#[cfg(feature = "tcp")]
mod stream_metrics;
#[cfg(feature = "tcp")]
mod stream_upstream;
mod table;
#[cfg(test)]
mod tests;
mod upstream_leg;
mod upstream_request;
mod upstreams;
mod validation;

pub use budget::ClientBudget;
#[cfg(feature = "cache")]
pub use cache::CacheCounters;
pub use config::{
    AllowedTarget, ConfigError, KeptBounds, Limits, ProxyConfig, RetryPolicy, Routing, Seeds,
};
pub use counters::{
    Counters, KeptAnswers, Load, ObserveCounters, OwnAnswers, Proof, Refusals, Strays, Traffic,
};
pub use driver::{ProxyComponent, FIRST_FOREIGN_KEY};
pub use endpoints::{EndpointEvent, EndpointId, UpstreamId};
pub use engine::{Destination, Proxy, Transmit, UpstreamStats};
pub use events::{ObserverLoss, ProxyEvent, Source};
pub use exchange::{Relay, State, UpstreamLeg};
pub use peer::{ClientOrigin, ConnectionId, LocalClient, Peer, SessionId, SlotId};
#[cfg(feature = "tcp")]
pub use stream_listener::{StreamLimits, StreamListen, Transport, MAX_CONNECTIONS};
#[cfg(feature = "tcp")]
pub use stream_upstream::UpstreamTls;
pub use transport::Listeners;
