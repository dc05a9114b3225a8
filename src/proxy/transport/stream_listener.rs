//! The proxy's RFC 8323 listeners: CoAP over TCP (§3), over TLS (§3, §9.2) or over
//! WebSockets (§4). Each is a listening socket and its connections, each connection a
//! sans-IO [`Carried`] (the CoAP connection and its carrier) on the stream driver, inside the
//! proxy's component. Requests go to the engine as [`Peer::Stream`]; the engine's answers for
//! such a peer come back here to be framed.
//!
//! Bounds, so that connections that ask for nothing cannot lock out ones that do:
//! - connections in total and per source prefix (`--source-prefix`: an IPv4 address, an
//!   IPv6 /64), and at either cap one connection is closed for the new one: the oldest that
//!   has sent no CSM, else an idle one (nothing in flight, no observation) of the source
//!   holding the most, quiet longest (`stream_room.rs`); none such: the new one is closed;
//! - the CSM deadline (RFC 8323 §5.3): a connection that sends none is aborted after
//!   `csm_timeout` (10 s by default), and an open one that stays quiet for `idle_timeout` is
//!   pinged and closed if the Pong does not come within `csm_timeout`; a message begun must
//!   be whole within `message_timeout`;
//! - the stream driver's read budget per turn, its write-stall timeout, and each
//!   connection's bound on output (`max_output`), checked before each request is handed to
//!   the engine, counting the answers the engine has queued for it and not yet delivered:
//!   one read's requests cannot queue more answers than the bound, whatever the answers'
//!   size (issue 40: 16 KiB of 17-byte cache hits were 1,000 answers of a kilobyte).

// I/O module: The stream listener's driver: owns its listening socket and connections.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use mio::net::{TcpListener, TcpStream};
use slab::Slab;

use super::stream_metrics::{CloseReason, Refusal, Snapshot, StreamCounters};
use super::Intake;
use crate::coap_tcp::carried::{Carried, Carrier};
use crate::coap_tcp::{ConnLimits, Ending};
use crate::metrics::MetricsWriter;
use crate::net::Outbox;
use crate::proxy::{ConnectionId, Destination, Peer};
use crate::reactor::keys::KeyRange;
use crate::reactor::listener::Listening;
use crate::reactor::stream::{Stream, StreamCore, READ_CHUNK};
use crate::reactor::{Ctx, Readiness};
use crate::source_prefix::{PrefixLengths, SourcePrefix};
use crate::time::Timestamp;
use crate::timer::TimerId;

#[path = "stream_room.rs"]
mod room;
use room::{Candidate, Eviction, Standing};

/// The most connections a listener may be given: their keys stay within its range (the
/// listening socket's key, then one per connection slot).
pub const MAX_CONNECTIONS: usize = 1 << 20;
/// The most stream listeners a proxy may have: their number is in their connections' ids.
const MAX_LISTENERS: u32 = 4;
/// A [`ConnectionId`]'s index is the listener's number in its top byte, the slot below.
const SLOT_BITS: u32 = 24;
/// What the engine may hold queued for the transports before the stream connections' requests
/// wait for the loop's next turn (each connection then asks for one, `StreamCore::has_work`):
/// as much as one connection may read in a turn (16 reads of 16 KiB). However many
/// connections resume at once, the answers queued between two transmissions stay within it,
/// and so does the memory the queue keeps.
const TURN_OUTPUT_BUDGET: usize = 256 * 1024;

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
    /// Connections open at once from one source prefix.
    pub max_connections_per_source: usize,
    /// What one source is (`--source-prefix`).
    pub source_prefix: PrefixLengths,
    /// Each connection's bounds and deadlines.
    pub conn: ConnLimits,
}

impl Default for StreamLimits {
    /// 512 connections, 32 per source prefix: 16 IPv4 addresses (or IPv6 /64s) are needed
    /// to hold them all, and even then a newcomer closes an idle one.
    fn default() -> Self {
        StreamLimits {
            max_connections: 512,
            max_connections_per_source: 32,
            source_prefix: PrefixLengths::DEFAULT,
            conn: ConnLimits::default(),
        }
    }
}

/// One connection's core: the RFC 8323 connection and what the listener knows of it.
struct Conn {
    id: ConnectionId,
    /// The address it connects from, which the engine counts its per-source shares by.
    address: IpAddr,
    source: SourcePrefix,
    accepted_at: Timestamp,
    conn: Carried,
}

impl Conn {
    /// Where it stands for closing it for a newcomer; `busy` are the connections the engine
    /// holds something for (a request in flight, an observation).
    fn standing(&self, busy: &HashSet<ConnectionId>) -> Standing {
        let c = &self.conn;
        match (c.ended(), c.is_open()) {
            (Some(_), _) => Standing::Kept,
            (None, false) => Standing::NoCsm {
                accepted_at: self.accepted_at,
            },
            (None, true) if busy.contains(&self.id) => Standing::Kept,
            (None, true) => Standing::Idle {
                quiet_since: c.last_input(),
            },
        }
    }
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
    fn has_work(&self) -> bool {
        self.conn.has_work()
    }
}

/// A stream listener and its connections. See the module docs.
pub struct StreamListener {
    listening: Listening,
    transport: Transport,
    /// Its number among the proxy's stream listeners: its connection ids say it.
    number: u32,
    /// The listening socket's key (and its accept-retry timer's), then connection slot `i`'s
    /// at `1 + i`.
    keys: KeyRange,
    local_addr: SocketAddr,
    conns: Slab<Stream<Conn>>,
    /// Each slot's generation: bumped when its connection closes, so that a [`ConnectionId`]
    /// names one connection only.
    generations: Vec<u32>,
    per_source: HashMap<SourcePrefix, usize>,
    limits: StreamLimits,
    buf: Vec<u8>,
    /// Slots the engine wrote to since the last [`settle`](Self::settle).
    written: Vec<usize>,
    /// Slots the engine queued answers for since its queue last went out: at
    /// [`settle`](Self::settle) (after the transmissions) what they owe is delivered.
    owing: Vec<usize>,
    counters: StreamCounters,
}

impl StreamListener {
    /// Binds `listen.addr` as the proxy's stream listener number `number` (0 to 3).
    pub fn bind(listen: &StreamListen, number: u32) -> io::Result<Self> {
        if number >= MAX_LISTENERS {
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
            keys: KeyRange::default(),
            local_addr,
            conns: Slab::new(),
            generations: Vec::new(),
            per_source: HashMap::new(),
            limits,
            buf: vec![0; READ_CHUNK],
            written: Vec::new(),
            owing: Vec::new(),
            counters: StreamCounters::default(),
        })
    }

    /// Registers the listening socket with the loop under the first of `keys`; its
    /// connections take the others.
    fn start(&mut self, ctx: &mut Ctx<'_>, keys: KeyRange) -> io::Result<()> {
        self.keys = keys;
        let key = keys.key(0).ok_or(io::ErrorKind::InvalidInput)?;
        let name = match self.transport {
            Transport::Tcp => "coap+tcp listener",
            Transport::Tls(_) => "coaps+tcp listener",
            Transport::Ws => "coap+ws listener",
        };
        self.listening.start(ctx, key, name)
    }

    /// The connection slot whose key `key` is; `None` for the listening socket's.
    fn slot_of(&self, key: u32) -> Option<usize> {
        self.keys
            .index(key)?
            .checked_sub(1)
            .map(|slot| slot as usize)
    }

    /// Whether connection `id` is (or was) one of this listener's.
    pub fn carries(&self, id: ConnectionId) -> bool {
        id.index() >> SLOT_BITS == self.number
    }

    /// Readiness of the listener or a connection.
    fn on_ready(&mut self, ctx: &mut Ctx<'_>, key: u32, ready: Readiness, engine: &mut Intake) {
        let Some(slot) = self.slot_of(key) else {
            if let Some(listener) = self.listening.driven() {
                listener.on_ready();
            }
            return self.accept(ctx, engine);
        };
        let Some(conn) = self.conns.get_mut(slot) else {
            return;
        };
        match conn.on_ready(ready) {
            Ok(()) => self.pump(ctx, slot, engine, Requests::Take),
            Err(_) => self.remove(ctx, slot, CloseReason::Error, engine),
        }
    }

    /// A timer of the listener (its accept pause) or of a connection.
    fn on_timer(&mut self, ctx: &mut Ctx<'_>, timer: TimerId, key: u32, engine: &mut Intake) {
        let Some(slot) = self.slot_of(key) else {
            if self.listening.driven().is_some_and(|l| l.on_timer(timer)) {
                self.accept(ctx, engine);
            }
            return;
        };
        if let Some(conn) = self.conns.get_mut(slot) {
            if conn.on_timer(ctx.now(), timer) {
                self.pump(ctx, slot, engine, Requests::Take);
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
        conn.core_mut().conn.deliver(datagram);
        self.written.push(slot);
        Ok(())
    }

    /// After the engine's transmissions: writes what it gave the connections. Nothing goes
    /// back to the engine for what it sent: the connections build no ACKs (RFC 8323 §2.2; the
    /// engine hands a stream peer each answer once and expects nothing back). A connection
    /// that closes here is still reported to the engine.
    fn settle(&mut self, ctx: &mut Ctx<'_>, engine: &mut Intake) {
        // Called after the transmissions: what the engine queued has been delivered.
        let mut owing = std::mem::take(&mut self.owing);
        owing.sort_unstable();
        owing.dedup();
        for slot in owing {
            if let Some(stream) = self.conns.get_mut(slot) {
                stream.core_mut().conn.engine_queue_emptied();
                self.written.push(slot);
            }
        }
        let mut written = std::mem::take(&mut self.written);
        written.sort_unstable();
        written.dedup();
        // No requests are taken here: each connection takes its share in a turn of its own
        // (its readiness, or the next turn it asks for), so that none waits behind the others
        // round after round, and the engine's queue is empty when a turn begins.
        for &slot in &written {
            self.pump(ctx, slot, engine, Requests::Leave);
        }
        written.clear();
        self.written = written;
    }

    /// Stops accepting and releases every connection (RFC 8323 §5.5).
    fn shutdown(&mut self, ctx: &mut Ctx<'_>, engine: &mut Intake) {
        self.listening.close(ctx);
        let slots: Vec<usize> = self.conns.iter().map(|(slot, _)| slot).collect();
        for slot in slots {
            self.conns[slot].core_mut().conn.release();
            self.pump(ctx, slot, engine, Requests::Leave);
        }
    }

    fn accept(&mut self, ctx: &mut Ctx<'_>, engine: &mut Intake) {
        // What the engine works for, found once per batch of accepts and only at a cap.
        let mut busy: Option<HashSet<ConnectionId>> = None;
        while let Some((socket, from)) = self.listening.driven().and_then(|l| l.accept(ctx)) {
            let source = self.limits.source_prefix.source_of(from.ip());
            match self.make_room(ctx, source, &mut busy, engine) {
                Ok(()) => self.add(ctx, socket, (from.ip(), source), engine),
                Err(refusal) => self.counters.refused(refusal),
            }
        }
    }

    /// Whether a connection from `source` may open: under both caps, or at a cap with a
    /// connection to close for it (`stream_room.rs`), which is closed. At the source's cap
    /// only its own are candidates.
    fn make_room(
        &mut self,
        ctx: &mut Ctx<'_>,
        source: SourcePrefix,
        busy: &mut Option<HashSet<ConnectionId>>,
        engine: &mut Intake,
    ) -> Result<(), Refusal> {
        let total_full = self.conns.len() >= self.limits.max_connections;
        let source_full = self.connections_of(source) >= self.limits.max_connections_per_source;
        let (scope, refusal) = match (total_full, source_full) {
            (false, false) => return Ok(()),
            (_, true) => (Some(source), Refusal::PerSource),
            (true, false) => (None, Refusal::Total),
        };
        let busy = busy.get_or_insert_with(|| busy_connections(engine));
        let candidates = (self.conns.iter()).map(|(slot, s)| Candidate {
            slot,
            source: s.core().source,
            standing: s.core().standing(busy),
        });
        let Some((slot, why)) = room::choose(candidates, scope, |s| self.connections_of(s)) else {
            return Err(refusal);
        };
        let why = match why {
            Eviction::NoCsm => CloseReason::Evicted,
            Eviction::Idle => CloseReason::EvictedIdle,
        };
        self.remove(ctx, slot, why, engine);
        Ok(())
    }

    fn connections_of(&self, source: SourcePrefix) -> usize {
        self.per_source.get(&source).copied().unwrap_or(0)
    }

    fn add(
        &mut self,
        ctx: &mut Ctx<'_>,
        socket: TcpStream,
        (address, source): (IpAddr, SourcePrefix),
        engine: &mut Intake,
    ) {
        let _ = socket.set_nodelay(true);
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
            address,
            source,
            accepted_at: now,
            conn: Carried::new(now, carrier, self.limits.conn),
        };
        let Some(key) = self.keys.key(1 + slot as u32) else {
            return;
        };
        let Ok(stream) = Stream::accepted(ctx, socket, key, core) else {
            return;
        };
        entry.insert(stream);
        *self.per_source.entry(source).or_default() += 1;
        self.counters.accepted += 1;
        self.pump(ctx, slot, engine, Requests::Take);
    }

    /// Reads, hands requests to the engine and writes, for as long as that makes progress
    /// (within the read budget and the output bound), then closes the connection if it is
    /// over and its last words are out, or settles it.
    fn pump(&mut self, ctx: &mut Ctx<'_>, slot: usize, engine: &mut Intake, requests: Requests) {
        let now = ctx.now();
        let Some(stream) = self.conns.get_mut(slot) else {
            return;
        };
        let io = loop {
            let reads_left = stream.reads_left();
            if let Err(e) = stream.read(now, &mut self.buf) {
                break Err(e);
            }
            let fed = match requests {
                Requests::Take => feed(stream, engine),
                Requests::Leave => 0,
            };
            if fed > 0 {
                self.owing.push(slot);
            }
            let unwritten = stream.core().conn.pending_output().len();
            if let Err(e) = stream.flush(now) {
                break Err(e);
            }
            let wrote = stream.core().conn.pending_output().len() < unwritten;
            if stream.reads_left() == reads_left && fed == 0 && !wrote {
                break Ok(());
            }
        };
        if io.is_err() {
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
    fn remove(&mut self, ctx: &mut Ctx<'_>, slot: usize, why: CloseReason, engine: &mut Intake) {
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
        engine.client_gone(Peer::Stream(core.id));
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

/// The proxy's stream listeners (at most [`MAX_LISTENERS`]) as one transport: their metrics
/// are one family, labelled by transport.
pub(super) struct StreamListeners {
    listeners: Vec<StreamListener>,
    keys: KeyRange,
}

impl StreamListeners {
    /// Binds every listener `listens` names, numbered in order.
    pub(super) fn bind(listens: &[StreamListen]) -> io::Result<Self> {
        let listeners = (listens.iter().zip(0..))
            .map(|(listen, number)| StreamListener::bind(listen, number))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(StreamListeners {
            listeners,
            keys: KeyRange::default(),
        })
    }

    fn owner_of(&mut self, key: u32) -> Option<&mut StreamListener> {
        self.listeners.iter_mut().find(|l| l.keys.owns(key))
    }
}

/// The keys of one listener: its listening socket's and its connections'.
const LISTENER_KEYS: u32 = 1 + MAX_CONNECTIONS as u32;

impl super::Transport for StreamListeners {
    fn keys_needed(&self) -> u32 {
        LISTENER_KEYS * self.listeners.len() as u32
    }

    fn start(&mut self, ctx: &mut Ctx<'_>, keys: KeyRange) -> io::Result<()> {
        self.keys = keys;
        let mut space = keys.space();
        for listener in &mut self.listeners {
            listener.start(ctx, space.take(LISTENER_KEYS)?)?;
        }
        Ok(())
    }

    fn keys(&self) -> KeyRange {
        self.keys
    }

    fn on_ready(&mut self, ctx: &mut Ctx<'_>, key: u32, ready: Readiness, intake: &mut Intake) {
        if let Some(listener) = self.owner_of(key) {
            listener.on_ready(ctx, key, ready, intake);
        }
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_>, timer: TimerId, key: u32, intake: &mut Intake) {
        if let Some(listener) = self.owner_of(key) {
            listener.on_timer(ctx, timer, key, intake);
        }
    }

    fn carries(&self, to: Destination) -> bool {
        matches!(to, Destination::Client(Peer::Stream(_)))
    }

    fn send(&mut self, _: Timestamp, to: Destination, payload: &[u8]) -> io::Result<()> {
        let Destination::Client(Peer::Stream(id)) = to else {
            return Err(io::ErrorKind::NotConnected.into());
        };
        match self.listeners.iter_mut().find(|l| l.carries(id)) {
            Some(listener) => listener.send(id, payload),
            None => Err(io::ErrorKind::NotConnected.into()),
        }
    }

    fn settle(&mut self, ctx: &mut Ctx<'_>, intake: &mut Intake) {
        for listener in &mut self.listeners {
            listener.settle(ctx, intake);
        }
    }

    fn shutdown(&mut self, ctx: &mut Ctx<'_>, intake: &mut Intake) {
        for listener in &mut self.listeners {
            listener.shutdown(ctx, intake);
        }
    }

    fn listening(&self, out: &mut Vec<(&'static str, SocketAddr)>) {
        let addrs = self.listeners.iter();
        out.extend(addrs.map(|l| (l.transport.scheme(), l.local_addr)));
    }

    fn write_metrics(&self, out: &mut MetricsWriter) {
        let snapshots: Vec<Snapshot> = self.listeners.iter().map(|l| l.snapshot()).collect();
        super::stream_metrics::write(&snapshots, out);
    }
}

/// Whether a [`StreamListener::pump`] hands the connection's requests to the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Requests {
    /// Yes: the connection's turn.
    Take,
    /// No: only reading and writing.
    Leave,
}

/// Hands the connection's requests to the engine, one at a time, while its output bound lets
/// it take them: each request's answer (or what it sends upstream) counts against the bound
/// until the engine's queue goes out. How many it handed.
fn feed(stream: &mut Stream<Conn>, engine: &mut Intake) -> usize {
    let from = Peer::Stream(stream.core().id).connected_from(stream.core().address);
    let conn = &mut stream.core_mut().conn;
    let mut fed = 0;
    while engine.queued_bytes() < TURN_OUTPUT_BUDGET {
        let Some(datagram) = conn.poll_to_engine() else {
            break;
        };
        let queued = engine.queued_bytes();
        engine.client(from, &datagram);
        conn.queued_by_engine(engine.queued_bytes().saturating_sub(queued));
        fed += 1;
    }
    fed
}

/// The stream connections the engine holds something for: a request in flight, an answer
/// being delivered, an observation. None of them is closed for a newcomer.
fn busy_connections(engine: &Intake) -> HashSet<ConnectionId> {
    (engine.busy_clients())
        .filter_map(|client| match client {
            Peer::Stream(id) => Some(id),
            _ => None,
        })
        .collect()
}

impl From<&Ending> for CloseReason {
    fn from(ending: &Ending) -> Self {
        match ending {
            Ending::NoCsm => CloseReason::NoCsm,
            Ending::NoPong => CloseReason::NoPong,
            Ending::Aborted(_) => CloseReason::Aborted,
            Ending::MaxMessageSizeTooSmall(_) => CloseReason::BadCsm,
            Ending::MessageTimeout => CloseReason::MessageTimeout,
            Ending::PeerAborted(_) => CloseReason::PeerAborted,
            Ending::Released => CloseReason::Released,
            Ending::Closed => CloseReason::PeerClosed,
            Ending::SlowReader => CloseReason::SlowReader,
            Ending::Transport(_) => CloseReason::Transport,
        }
    }
}
