//! The proxy's RFC 8323 listeners: CoAP over TCP (§3), over TLS (§3, §9.2) or over
//! WebSockets (§4). Each is a listening socket and its connections, each connection a
//! sans-IO [`Carried`] (the CoAP connection and its carrier) on the stream driver, inside the
//! proxy's component. Requests go to the engine as [`Peer::Stream`]; the engine's answers for
//! such a peer come back here to be framed.
//!
//! Bounds, so that connections that ask for nothing cannot lock out ones that do:
//! - connections in total and per source address, and at either cap the oldest connection
//!   that has not sent its CSM yet is closed for the new one (none: the new one is closed);
//! - the CSM deadline (RFC 8323 §5.3): a connection that sends none is aborted after
//!   `csm_timeout` (10 s by default), and an open one that stays quiet for `idle_timeout` is
//!   pinged and closed if the Pong does not come within `csm_timeout`;
//! - the stream driver's read budget per turn, its write-stall timeout, and each
//!   connection's bound on buffered input (one message) and output (`max_output`).

// I/O module: The stream listener's driver: owns its listening socket and connections.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use mio::net::{TcpListener, TcpStream};
use slab::Slab;

use super::stream_metrics::{CloseReason, Snapshot, StreamCounters};
use super::{ConnectionId, Peer, Proxy};
use crate::coap_tcp::carried::{Carried, Carrier};
use crate::coap_tcp::{ConnLimits, Ending};
use crate::net::Outbox;
use crate::reactor::listener::Listening;
use crate::reactor::stream::{Stream, StreamCore, READ_CHUNK};
use crate::reactor::{Ctx, Readiness};
use crate::time::Timestamp;
use crate::timer::TimerId;

/// The first stream listener's registration key (and its accept-retry timer's); listener
/// `n`'s is `TCP_KEY + n * KEY_SPAN`, and its connection slot `i` has that plus `1 + i`.
/// Above every upstream endpoint's key, below the coaps keys.
pub const TCP_KEY: u32 = 1 << 30;
/// The keys of one listener.
const KEY_SPAN: u32 = 1 << 21;
/// The most connections a listener may be given: their keys stay within its span.
pub const MAX_CONNECTIONS: usize = 1 << 20;
/// A [`ConnectionId`]'s index is the listener's number in its top byte, the slot below.
const SLOT_BITS: u32 = 24;

/// What a listener's connections are carried by.
#[derive(Clone, Debug)]
pub enum Transport {
    /// coap+tcp.
    Tcp,
    /// coaps+tcp, with this certificate.
    Tls(Arc<rustls::ServerConfig>),
    /// coap+ws.
    Ws,
}

impl Transport {
    /// The `transport` label of its metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::Tls(_) => "tls",
            Transport::Ws => "ws",
        }
    }

    /// Its URI scheme (RFC 8323 §8).
    pub fn scheme(&self) -> &'static str {
        match self {
            Transport::Tcp => "coap+tcp",
            Transport::Tls(_) => "coaps+tcp",
            Transport::Ws => "coap+ws",
        }
    }

    fn carrier(&self, limits: &ConnLimits) -> Option<Carrier> {
        match self {
            Transport::Tcp => Some(Carrier::Tcp),
            Transport::Tls(config) => Carrier::tls(Arc::clone(config)).ok(),
            Transport::Ws => Some(Carrier::ws(limits)),
        }
    }
}

/// A stream listener to open: where, carried how, with which bounds.
#[derive(Clone, Debug)]
pub struct StreamListen {
    /// The address to bind.
    pub addr: SocketAddr,
    /// What carries its connections.
    pub transport: Transport,
    /// Its bounds.
    pub limits: StreamLimits,
}

/// A stream listener's bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamLimits {
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections open at once from one IP address.
    pub max_connections_per_source: usize,
    /// Each connection's bounds and deadlines.
    pub conn: ConnLimits,
}

impl Default for StreamLimits {
    fn default() -> Self {
        StreamLimits {
            max_connections: 512,
            max_connections_per_source: 64,
            conn: ConnLimits::default(),
        }
    }
}

/// One connection's core: the RFC 8323 connection and what the listener knows of it.
struct Conn {
    id: ConnectionId,
    source: IpAddr,
    accepted_at: Timestamp,
    conn: Carried,
}

impl Outbox for Conn {
    fn pending_output(&self) -> &[u8] {
        self.conn.pending_output()
    }
    fn consume_output(&mut self, _: Timestamp, n: usize) {
        self.conn.consume_output(n)
    }
}

impl StreamCore for Conn {
    fn wants_input(&self) -> bool {
        self.conn.wants_input()
    }
    fn handle_input(&mut self, now: Timestamp, data: &[u8]) {
        self.conn.handle_input(now, data)
    }
    fn handle_eof(&mut self, _: Timestamp) {
        self.conn.handle_eof()
    }
    fn poll_timeout(&self) -> Option<Timestamp> {
        self.conn.poll_timeout()
    }
    fn handle_timeout(&mut self, now: Timestamp) {
        self.conn.handle_timeout(now)
    }
}

/// A stream listener and its connections. See the module docs.
pub struct StreamListener {
    listening: Listening,
    transport: Transport,
    /// Its number among the proxy's stream listeners: its keys and connection ids say it.
    number: u32,
    local_addr: SocketAddr,
    conns: Slab<Stream<Conn>>,
    /// Each slot's generation: bumped when its connection closes, so that a [`ConnectionId`]
    /// names one connection only.
    generations: Vec<u32>,
    per_source: HashMap<IpAddr, usize>,
    limits: StreamLimits,
    buf: Vec<u8>,
    /// Slots the engine wrote to since the last [`settle`](Self::settle).
    written: Vec<usize>,
    /// ACKs of the engine's CONs, which the transport delivered: the engine hears them at
    /// [`settle`](Self::settle).
    acks: Vec<(ConnectionId, Vec<u8>)>,
    /// Whether the engine was handed something since the last settle: it may have answers.
    fed: bool,
    counters: StreamCounters,
}

impl StreamListener {
    /// Binds `listen.addr` as the proxy's stream listener number `number` (0 to 3).
    pub fn bind(listen: &StreamListen, number: u32) -> io::Result<Self> {
        if number > 3 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "at most 4 stream listeners",
            ));
        }
        let socket = TcpListener::bind(listen.addr)?;
        let local_addr = socket.local_addr()?;
        let limits = listen.limits;
        Ok(StreamListener {
            listening: Listening::Bound(socket),
            transport: listen.transport.clone(),
            number,
            local_addr,
            conns: Slab::new(),
            generations: Vec::new(),
            per_source: HashMap::new(),
            limits,
            buf: vec![0; READ_CHUNK],
            written: Vec::new(),
            acks: Vec::new(),
            fed: false,
            counters: StreamCounters::default(),
        })
    }

    /// The address bound.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// What carries its connections.
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// Registers the listening socket with the loop.
    pub fn start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        let name = match self.transport {
            Transport::Tcp => "coap+tcp listener",
            Transport::Tls(_) => "coaps+tcp listener",
            Transport::Ws => "coap+ws listener",
        };
        self.listening.start(ctx, self.key_base(), name)
    }

    fn key_base(&self) -> u32 {
        TCP_KEY + self.number * KEY_SPAN
    }

    /// Whether `key` is the listener's or one of its connections'.
    pub fn owns(&self, key: u32) -> bool {
        (self.key_base()..=self.key_base() + MAX_CONNECTIONS as u32).contains(&key)
    }

    /// Whether connection `id` is (or was) one of this listener's.
    pub fn carries(&self, id: ConnectionId) -> bool {
        id.index() >> SLOT_BITS == self.number
    }

    /// Readiness of the listener or a connection.
    pub fn on_ready(&mut self, ctx: &mut Ctx<'_>, key: u32, ready: Readiness, engine: &mut Proxy) {
        let Some(slot) = (key - self.key_base()).checked_sub(1) else {
            if let Some(listener) = self.listening.driven() {
                listener.on_ready();
            }
            return self.accept(ctx, engine);
        };
        let slot = slot as usize;
        let Some(conn) = self.conns.get_mut(slot) else {
            return;
        };
        match conn.on_ready(ready) {
            Ok(()) => self.pump(ctx, slot, engine),
            Err(_) => self.remove(ctx, slot, CloseReason::Error, engine),
        }
    }

    /// A timer of the listener (its accept pause) or of a connection.
    pub fn on_timer(&mut self, ctx: &mut Ctx<'_>, timer: TimerId, key: u32, engine: &mut Proxy) {
        let Some(slot) = (key - self.key_base()).checked_sub(1) else {
            if self.listening.driven().is_some_and(|l| l.on_timer(timer)) {
                self.accept(ctx, engine);
            }
            return;
        };
        let slot = slot as usize;
        if let Some(conn) = self.conns.get_mut(slot) {
            if conn.on_timer(ctx.now(), timer) {
                self.pump(ctx, slot, engine);
            }
        }
    }

    /// Frames a datagram the engine sent to connection `id`; an error if it has closed.
    pub fn send(&mut self, id: ConnectionId, datagram: &[u8]) -> io::Result<()> {
        let slot = (id.index() & ((1 << SLOT_BITS) - 1)) as usize;
        let conn = match self.conns.get_mut(slot) {
            Some(c) if c.core().id == id => c,
            _ => return Err(io::ErrorKind::NotConnected.into()),
        };
        if let Some(ack) = conn.core_mut().conn.deliver(datagram) {
            self.acks.push((id, ack));
        }
        self.written.push(slot);
        Ok(())
    }

    /// After the engine's transmissions: hands it the ACKs of its CONs and writes what it
    /// gave the connections. True if the engine was handed something since the last call
    /// (it may have more to send).
    pub fn settle(&mut self, ctx: &mut Ctx<'_>, engine: &mut Proxy) -> bool {
        self.fed |= !self.acks.is_empty();
        for (id, ack) in std::mem::take(&mut self.acks) {
            engine.handle_client_datagram(ctx.now(), Peer::Stream(id), &ack);
        }
        let mut written = std::mem::take(&mut self.written);
        written.sort_unstable();
        written.dedup();
        for &slot in &written {
            self.pump(ctx, slot, engine);
        }
        written.clear();
        self.written = written;
        std::mem::take(&mut self.fed)
    }

    /// Stops accepting and releases every connection (RFC 8323 §5.5).
    pub fn shutdown(&mut self, ctx: &mut Ctx<'_>, engine: &mut Proxy) {
        self.listening.close(ctx);
        let slots: Vec<usize> = self.conns.iter().map(|(slot, _)| slot).collect();
        for slot in slots {
            self.conns[slot].core_mut().conn.release();
            self.pump(ctx, slot, engine);
        }
    }

    fn accept(&mut self, ctx: &mut Ctx<'_>, engine: &mut Proxy) {
        while let Some((socket, from)) = self.listening.driven().and_then(|l| l.accept(ctx)) {
            if self.make_room(ctx, from.ip(), engine) {
                self.add(ctx, socket, from, engine);
            } else {
                self.counters.refused += 1;
            }
        }
    }

    /// Whether a connection from `source` may open: under both caps, or at a cap with a
    /// connection in its scope still waiting for its CSM, which is closed for it (the oldest).
    fn make_room(&mut self, ctx: &mut Ctx<'_>, source: IpAddr, engine: &mut Proxy) -> bool {
        let total_full = self.conns.len() >= self.limits.max_connections;
        let from_source = self.per_source.get(&source).copied().unwrap_or(0);
        let source_full = from_source >= self.limits.max_connections_per_source;
        if !total_full && !source_full {
            return true;
        }
        let oldest_waiting = (self.conns.iter())
            .map(|(slot, s)| (slot, s.core()))
            .filter(|(_, c)| !c.conn.is_open() && c.conn.ended().is_none())
            .filter(|(_, c)| total_full || c.source == source)
            .min_by_key(|(_, c)| c.accepted_at)
            .map(|(slot, _)| slot);
        match oldest_waiting {
            Some(slot) => {
                self.remove(ctx, slot, CloseReason::Evicted, engine);
                // Closing one from another source does not make room under this one's cap.
                self.per_source.get(&source).copied().unwrap_or(0)
                    < self.limits.max_connections_per_source
            }
            None => false,
        }
    }

    fn add(&mut self, ctx: &mut Ctx<'_>, socket: TcpStream, from: SocketAddr, engine: &mut Proxy) {
        let _ = socket.set_nodelay(true);
        let key_base = self.key_base();
        let entry = self.conns.vacant_entry();
        let slot = entry.key();
        if self.generations.len() <= slot {
            self.generations.resize(slot + 1, 0);
        }
        let now = ctx.now();
        let Some(carrier) = self.transport.carrier(&self.limits.conn) else {
            return;
        };
        let core = Conn {
            id: ConnectionId::new(
                self.number << SLOT_BITS | slot as u32,
                self.generations[slot],
            ),
            source: from.ip(),
            accepted_at: now,
            conn: Carried::new(now, carrier, self.limits.conn),
        };
        let key = key_base + 1 + slot as u32;
        let Ok(stream) = Stream::accepted(ctx, socket, key, core) else {
            return;
        };
        entry.insert(stream);
        *self.per_source.entry(from.ip()).or_default() += 1;
        self.counters.accepted += 1;
        self.pump(ctx, slot, engine);
    }

    /// Reads, hands requests to the engine and writes, then closes the connection if it is
    /// over and its last words are out, or settles it.
    fn pump(&mut self, ctx: &mut Ctx<'_>, slot: usize, engine: &mut Proxy) {
        let now = ctx.now();
        let Some(stream) = self.conns.get_mut(slot) else {
            return;
        };
        let read = stream.read(now, &mut self.buf);
        let (id, source) = (stream.core().id, stream.core().source);
        while let Some(datagram) = stream.core_mut().conn.poll_to_engine() {
            let from = Peer::Stream(id).connected_from(source);
            engine.handle_client_datagram(now, from, &datagram);
            self.fed = true;
        }
        if read.and_then(|()| stream.flush(now)).is_err() {
            let why = match stream.core().conn.pending_output().is_empty() {
                true => CloseReason::Error,
                false => CloseReason::WriteStall,
            };
            return self.remove(ctx, slot, why, engine);
        }
        let conn = &stream.core().conn;
        if let Some(ending) = conn.ended() {
            if conn.pending_output().is_empty() || stream.eof() {
                let why = CloseReason::from(ending);
                return self.remove(ctx, slot, why, engine);
            }
        }
        stream.settle(ctx);
    }

    /// Closes the connection in `slot`; the engine forgets the peer (its observations end).
    fn remove(&mut self, ctx: &mut Ctx<'_>, slot: usize, why: CloseReason, engine: &mut Proxy) {
        let Some(stream) = self.conns.try_remove(slot) else {
            return;
        };
        let core = stream.close(ctx);
        self.generations[slot] = self.generations[slot].wrapping_add(1);
        if let Some(n) = self.per_source.get_mut(&core.source) {
            *n -= 1;
            if *n == 0 {
                self.per_source.remove(&core.source);
            }
        }
        self.counters.closed(why, &core.conn.counters());
        let scheme = self.transport.scheme();
        log::debug!("{scheme}: connection {slot} closed: {why:?}");
        engine.handle_client_unreachable(ctx.now(), Peer::Stream(core.id));
        self.fed = true;
    }

    /// The listener's figures for the metrics (`backoffd_coap_stream_*`).
    pub fn snapshot(&self) -> Snapshot {
        let cores = || self.conns.iter().map(|(_, s)| &s.core().conn);
        let awaiting_csm = cores().filter(|c| !c.is_open()).count();
        Snapshot {
            transport: self.transport.label(),
            counters: self.counters.with_open(cores().map(Carried::counters)),
            open: self.conns.len() - awaiting_csm,
            awaiting_csm,
            buffered: cores().map(Carried::buffered).sum(),
            accept_failures: self.listening.failures(),
        }
    }
}

impl From<&Ending> for CloseReason {
    fn from(ending: &Ending) -> Self {
        match ending {
            Ending::NoCsm => CloseReason::NoCsm,
            Ending::NoPong => CloseReason::NoPong,
            Ending::Aborted(_) => CloseReason::Aborted,
            Ending::PeerAborted(_) => CloseReason::PeerAborted,
            Ending::Released => CloseReason::Released,
            Ending::Closed => CloseReason::PeerClosed,
            Ending::SlowReader => CloseReason::SlowReader,
            Ending::Transport(_) => CloseReason::Transport,
        }
    }
}
