//! backoffd: a single-threaded mio daemon with a CoAP forwarding proxy, gRPC's
//! connection-backoff interop server and client, and the hashed timer wheel they run on.
//!
//! Protocol cores are sans-IO state machines that take `now`, bytes and seeds and return what
//! to send, events and when to be woken. They read no clock, own no socket, draw no OS
//! randomness and log nothing, and clippy checks it (`clippy.toml`): only the reactor, the
//! socket helpers, the components' drivers and the application modules are allowed those, each
//! saying why.
//!
//! # Where things live
//!
//! - [`time`]: [`Timestamp`](time::Timestamp), the monotonic nanosecond clock cores are driven by.
//! - [`timer`]: the hashed hierarchical timer wheel: exact deadlines, O(1) insert and cancel.
//! - [`reactor`]: the event loop (mio `Poll`, `timerfd` wake-ups, signals), the
//!   [`Component`](reactor::Component) trait through which drivers plug into it, and the
//!   stream and datagram drivers they are built on.
//! - [`coap`]: CoAP (RFC 7252) message codec: validate-once parsing, canonical encoding.
//! - [`proxy`]: the CoAP forwarding proxy: the sans-IO [`Proxy`](proxy::Proxy) engine and
//!   [`ProxyComponent`](proxy::ProxyComponent), the driver that owns its sockets.
//! - [`http2`]: HTTP/2 (RFC 9113): frame codec, HPACK, and the connection state machine.
//! - [`grpc`]: unary gRPC on top of [`http2`]: status codes, message framing, timeouts, client
//!   and server connections, and the interop protobuf messages.
//! - [`reconnect`]: gRPC's connection-backoff interop test: the server's sessions and Verify,
//!   the client's backoff connector, and both as reactor components.
//! - [`http1`] and [`metrics`]: a small HTTP/1.1 server core, and the Prometheus `/metrics` and
//!   `/healthz` endpoint built on it.
//! - [`net`]: socket helpers: dual-stack listeners, flushing a core's output.
//! - [`stats`]: latency summaries and histograms.
//! - [`relay`]: the stateless UDP relay, the proxy benchmark's baseline, as a component.
//! - [`slot_id`] and [`base64`]: small pieces shared by layers that must not depend on each
//!   other: the name of a transport core's session or connection, which the engine keys a
//!   client by, and the encoding the WebSocket handshake and the cross-proxy's events use.
//!
//! Not in the library: the application is the binaries' (`src/cli/`: the command line, the
//! `serve --config` format, the demo and timer-bench), and the benchmarks' load generator
//! lives with them (`benches/loadgen/`). Both drive this library through its public API only.
//!
//! # Plugging into the reactor
//!
//! A component implements [`reactor::Component`] and is added to a [`reactor::Reactor`]. Each
//! callback runs on the loop's thread, must not block, and gets a [`reactor::Ctx`]: the
//! component's only handle on the loop, to register sockets, arm timers, read `now` and stop
//! the loop. This one arms a timer at start and stops the loop when it fires:
//!
//! ```
//! use std::io;
//! use std::time::Duration;
//!
//! use backoffd::reactor::{self, Component, Ctx, Reactor, Readiness};
//! use backoffd::timer::TimerId;
//!
//! struct OneShot {
//!     fired: bool,
//! }
//!
//! impl Component for OneShot {
//!     fn on_start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
//!         ctx.set_timer(ctx.now() + Duration::from_millis(1), 0);
//!         Ok(())
//!     }
//!     // Only called for sources this component registered: none here.
//!     fn on_ready(&mut self, _ctx: &mut Ctx<'_>, _key: u32, _ready: Readiness) {}
//!     fn on_timer(&mut self, ctx: &mut Ctx<'_>, _timer: TimerId, _key: u32) {
//!         self.fired = true;
//!         ctx.shutdown();
//!     }
//! }
//!
//! // `signals: false` leaves SIGINT/SIGTERM alone, as a library user or a test wants.
//! let mut reactor = Reactor::new(reactor::Config {
//!     signals: false,
//!     ..reactor::Config::default()
//! })?;
//! let index = reactor.add(Box::new(OneShot { fired: false }))?;
//! reactor.run()?;
//! assert!(reactor.component::<OneShot>(index).is_some_and(|c| c.fired));
//! # Ok::<(), io::Error>(())
//! ```
//!
//! Real components own sockets: they [`register`](reactor::Ctx::register) them with a key of
//! their choosing in [`on_start`](reactor::Component::on_start), and
//! [`on_ready`](reactor::Component::on_ready) hands the key back. They do not hand-write the
//! read / flush / interest / timer loop: [`reactor::stream::Stream`] drives a TCP connection's
//! sans-IO core and [`reactor::datagram::Datagram`] a UDP socket, each with a work budget per
//! wake-up. See [`metrics::MetricsServer`] for a small component built on them.

#![warn(missing_docs)]
// The sans-IO boundary: see clippy.toml. Modules that do I/O allow these, each saying why;
// unit tests are drivers and are not checked.
#![cfg_attr(
    not(test),
    warn(
        clippy::disallowed_methods,
        clippy::disallowed_types,
        clippy::disallowed_macros
    )
)]

pub mod base64;
pub mod coap;
#[cfg(feature = "tcp")]
pub mod coap_tcp;
#[cfg(feature = "dtls")]
pub mod dtls;
pub mod grpc;
#[cfg(feature = "http")]
pub mod hc;
pub mod http1;
pub mod http2;
pub mod metrics;
pub mod net;
pub mod proxy;
pub mod reactor;
pub mod reconnect;
pub mod relay;
pub mod slot_id;
pub mod source_prefix;
pub mod stats;
#[cfg(test)]
mod test_support;
pub mod time;
pub mod timer;
