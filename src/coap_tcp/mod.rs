//! CoAP over reliable transports (RFC 8323): TCP, TLS and WebSockets.
//!
//! - [`frame`]: the message format on a stream (§3.2) and in a WebSocket frame (§4.4), and
//!   its mapping to the UDP format the engine speaks;
//! - [`signal`]: the signalling messages (§5): CSM, Ping/Pong, Release, Abort;
//! - [`conn`]: one connection as a client of the engine, with its CSM and keepalive
//!   deadlines;
//! - [`tls`] and [`ws`]: what carries the messages on coaps+tcp (rustls over bytes) and
//!   coap+ws (RFC 6455's handshake and framing), both sans-IO.
//!
//! The proxy's driver owns the sockets and hands the requests to the engine as the requests
//! of a client named by its connection, a [`ConnectionId`](crate::slot_id::ConnectionId).

mod buffers;
pub mod carried;
pub mod client;
pub mod conn;
pub mod frame;
mod sha1;
pub mod signal;
#[cfg(test)]
mod tests;
pub mod tls;
pub mod ws;

pub use conn::{ConnCounters, ConnLimits, Ending, StreamConn};
pub use frame::{FrameError, Framing};
