//! backoffd: a single-threaded mio daemon with a CoAP forwarding proxy, gRPC's
//! connection-backoff interop server and client, and the hashed timer wheel they run on.
//!
//! Protocol cores are sans-IO state machines that take `now` and bytes and return what to send
//! and when to be woken; [`reactor`] is the only place that owns sockets, the clock and the
//! timer wheel ([`timer`]).

pub mod cli;
pub mod coap;
pub mod demo;
pub mod grpc;
pub mod http1;
pub mod http2;
pub mod metrics;
pub mod net;
pub mod proxy;
pub mod reactor;
pub mod reconnect;
pub mod stats;
#[cfg(test)]
mod test_support;
pub mod time;
pub mod timer;
pub mod timer_bench;
