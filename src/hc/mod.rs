//! The HTTP-to-CoAP cross-proxy (RFC 8075; issue 15): HTTP/1.1 requests in, CoAP requests
//! through the proxy engine out, and their answers back as HTTP responses.
//!
//! Sans-IO like the rest. [`front::HcFront`] is the core: a CoAP client of the proxy engine
//! ([`crate::proxy::Peer::Local`]), one client per HTTP connection, so that HTTP requests get
//! the engine's routes, retry policy, deduplication, limits, cache and metrics. Around it:
//! [`uri`] maps an HTTP request target to a CoAP target (RFC 8075 §5); [`request`] builds the
//! CoAP request from the HTTP one and [`answer`] the HTTP answer from the CoAP one, with the
//! tables of [`mapping`] (RFC 8075 §6-§7, RFC 7252 §10.2); `exchange.rs` runs the blocks
//! (RFC 7959) and event streams (RFC 7641); [`sse`] writes Server-Sent Events.

pub mod answer;
mod cross;
pub mod driver;
mod exchange;
pub mod front;
pub mod mapping;
pub mod metrics;
pub mod request;
pub mod sse;
#[cfg(test)]
mod tests;
pub mod uri;

pub use crate::http1::driver::ConnId;
pub use answer::HttpAnswer;
pub use cross::CrossProxy;
pub use driver::{HttpFront, HttpFrontConfig};
pub use front::{HcConfig, HcCounters, HcFront};
