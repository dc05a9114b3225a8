//! One CoAP-over-TCP connection (RFC 8323) as the engine's client: a sans-IO state machine.
//!
//! Bytes in, messages out to the engine as UDP-format datagrams; the engine's answers in,
//! bytes out. The engine keeps its UDP model: each request the peer sends becomes a CON with
//! a Message ID of the connection's own (so a new message is never taken for a duplicate),
//! and a CON the engine sends (a separate answer, a notification) is acknowledged here at
//! once, since a reliable transport has delivered it (§2.2: no ACKs, no retransmissions).
//!
//! The connection's life (§5.3): our CSM goes out first; the peer's must come first, within
//! `csm_timeout`, or the connection is aborted. Open, a connection quiet for `idle_timeout`
//! gets a Ping (§5.4); no answer within `csm_timeout` closes it. A Release or Abort from the
//! peer ends it; a protocol error sends an Abort (§5.6) and ends it.

use std::collections::VecDeque;
use std::time::Duration;

use super::frame::{self, Frame, Framing};
use super::signal::{self, Settings, Signal};
use crate::coap::{empty_ack, Message, MessageType};
use crate::time::Timestamp;

/// A connection's bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnLimits {
    /// The Max-Message-Size we announce, and the largest message we take (§5.3.1).
    pub max_message_size: u32,
    /// How long the peer has to send its CSM, and to answer a keepalive Ping.
    pub csm_timeout: Duration,
    /// How long a connection may be quiet before it is pinged.
    pub idle_timeout: Duration,
    /// Output bytes waiting for the socket past which no more input is read. Answers still
    /// come (notifications, late responses); past twice this the peer is a reader too slow
    /// to keep, and the connection ends ([`Ending::SlowReader`]).
    pub max_output: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_message_size: signal::DEFAULT_MAX_MESSAGE_SIZE,
            csm_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            max_output: 64 * 1024,
        }
    }
}

/// Why a connection ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// No CSM within the bound (§5.3).
    NoCsm,
    /// A keepalive Ping went unanswered.
    NoPong,
    /// We aborted it (§5.6): a protocol error, named.
    Aborted(&'static str),
    /// The peer sent Abort, with its diagnostic.
    PeerAborted(String),
    /// The peer sent Release (§5.5).
    Released,
    /// The peer closed its side.
    Closed,
    /// Answers piled up past twice `max_output`: the peer reads too slowly. What was
    /// queued is dropped.
    SlowReader,
    /// What carries the messages (TLS, WebSocket) failed or closed, saying why.
    Transport(&'static str),
}

/// Where the connection is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// Our CSM is out; the peer's must come first, by `deadline`.
    AwaitingCsm { deadline: Timestamp },
    /// Both CSMs exchanged; `peer` is what the peer announced.
    Open {
        peer: Settings,
        keepalive: Keepalive,
    },
    /// Nothing more is read; what is queued is still written.
    Ended(Ending),
}

/// The keepalive of an open connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Keepalive {
    /// Input came; a Ping goes out if nothing more comes by `ping_at`.
    Quiet { ping_at: Timestamp },
    /// A Ping is out; the connection ends if nothing comes by `give_up_at`.
    Pinged { give_up_at: Timestamp },
}

/// What a connection counts, for the listener's metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ConnCounters {
    /// Requests handed to the engine.
    pub requests: u64,
    /// Answers written to the peer.
    pub answers: u64,
    /// Answers larger than the peer's Max-Message-Size, dropped.
    pub oversized_answers: u64,
    /// Messages ignored: responses from the peer, empty messages, unknown signals.
    pub ignored: u64,
}

/// See the module docs.
pub struct StreamConn {
    framing: Framing,
    limits: ConnLimits,
    phase: Phase,
    input: Vec<u8>,
    output: Outgoing,
    next_mid: u16,
    to_engine: VecDeque<Vec<u8>>,
    counters: ConnCounters,
}

impl StreamConn {
    /// A new connection at `now`: our CSM is queued (§5.3).
    pub fn new(now: Timestamp, framing: Framing, limits: ConnLimits) -> Self {
        let mut output = Outgoing::default();
        // No BERT (§6): the engine's other legs speak UDP, where a block size exponent of
        // 7 is reserved (RFC 7959 §2.2), so a BERT request could not be forwarded as it is.
        let ours = Settings {
            max_message_size: limits.max_message_size,
            block_wise: false,
        };
        output.push(|o| signal::encode_csm(o, framing, ours));
        StreamConn {
            framing,
            limits,
            phase: Phase::AwaitingCsm {
                deadline: now + limits.csm_timeout,
            },
            input: Vec::new(),
            output,
            next_mid: 0,
            to_engine: VecDeque::new(),
            counters: ConnCounters::default(),
        }
    }

    /// Bytes the peer sent (stream framing), in order.
    pub fn handle_input(&mut self, now: Timestamp, data: &[u8]) {
        if self.ended().is_some() {
            return;
        }
        let mut input = std::mem::take(&mut self.input);
        input.extend_from_slice(data);
        let max = self.limits.max_message_size as usize;
        let read = frame::take_stream_frames(&mut input, max, |f| {
            self.handle_frame(now, f);
            self.ended().is_none()
        });
        self.input = input;
        if let Err(e) = read {
            self.abort(e.diagnostic(), None);
        }
    }

    /// One message from a WebSocket binary frame (§4.4).
    pub fn handle_ws_message(&mut self, now: Timestamp, payload: &[u8]) {
        if self.ended().is_some() {
            return;
        }
        match frame::decode_ws(payload, self.limits.max_message_size as usize) {
            Ok(f) => self.handle_frame(now, &f),
            Err(e) => self.abort(e.diagnostic(), None),
        }
    }

    /// The peer closed its side.
    pub fn handle_eof(&mut self) {
        if self.ended().is_none() {
            self.phase = Phase::Ended(Ending::Closed);
        }
        self.to_engine.clear();
    }

    fn handle_frame(&mut self, now: Timestamp, f: &Frame<'_>) {
        let peer = match &mut self.phase {
            Phase::AwaitingCsm { .. } if f.code != signal::CSM => {
                return self.abort("the first message must be a CSM (RFC 8323 §5.3)", None);
            }
            Phase::AwaitingCsm { .. } => Settings::default(),
            Phase::Open { peer, keepalive } => {
                *keepalive = Keepalive::Quiet {
                    ping_at: now + self.limits.idle_timeout,
                };
                *peer
            }
            Phase::Ended(_) => return,
        };
        if f.code.class() == 7 {
            return self.handle_signal(now, f, peer);
        }
        if !f.code.is_request() {
            // Empty messages are to be ignored (§3.4); the proxy asks its clients nothing,
            // so a response is for nobody.
            self.counters.ignored += 1;
            return;
        }
        let mut datagram = Vec::new();
        f.to_datagram(&mut datagram, MessageType::Con, self.next_mid);
        if Message::parse(&datagram).is_err() {
            return self.abort("a message whose options are not well formed", None);
        }
        self.next_mid = self.next_mid.wrapping_add(1);
        self.counters.requests += 1;
        self.to_engine.push_back(datagram);
    }

    fn handle_signal(&mut self, now: Timestamp, f: &Frame<'_>, peer: Settings) {
        let (signal, bad) = match signal::parse(f, peer) {
            Ok(read) => read,
            Err(e) => return self.abort(signal_error(e), None),
        };
        if let Some(option) = bad {
            return self.abort("a CSM option this end does not know", Some(option));
        }
        match signal {
            Signal::Csm(settings) => {
                self.phase = Phase::Open {
                    peer: settings,
                    keepalive: Keepalive::Quiet {
                        ping_at: now + self.limits.idle_timeout,
                    },
                }
            }
            Signal::Ping(token) => {
                let framing = self.framing;
                self.output
                    .push(|o| signal::encode_pong(o, framing, &token))
            }
            Signal::Pong => {}
            Signal::Release => self.phase = Phase::Ended(Ending::Released),
            Signal::Abort(why) => self.phase = Phase::Ended(Ending::PeerAborted(why)),
            Signal::Unknown => self.counters.ignored += 1,
        }
    }

    /// Sends Abort saying `why` and ends the connection (§5.6).
    fn abort(&mut self, why: &'static str, bad_option: Option<u16>) {
        let framing = self.framing;
        (self.output).push(|o| signal::encode_abort(o, framing, why, bad_option));
        self.phase = Phase::Ended(Ending::Aborted(why));
        self.to_engine.clear();
    }

    /// The next request for the engine, as a UDP-format datagram.
    pub fn poll_to_engine(&mut self) -> Option<Vec<u8>> {
        self.to_engine.pop_front()
    }

    /// A datagram the engine sent this peer. What it must hear back (the ACK of a CON, which
    /// the transport has delivered) is returned, for the engine.
    pub fn deliver(&mut self, datagram: &[u8]) -> Option<Vec<u8>> {
        let msg = Message::parse(datagram).ok()?;
        let ack = (msg.msg_type() == MessageType::Con).then(|| {
            let mut ack = Vec::new();
            empty_ack(&mut ack, msg.message_id());
            ack
        });
        let peer = match &self.phase {
            Phase::Open { peer, .. } => *peer,
            // Before the peer's CSM nothing was asked; once ended nothing more is written.
            _ => return ack,
        };
        if msg.code().is_empty() {
            return ack;
        }
        let f = frame::from_datagram(datagram)?;
        if f.size() > peer.max_message_size as usize {
            self.counters.oversized_answers += 1;
            return ack;
        }
        if self.output.bytes.len() + f.size() > 2 * self.limits.max_output {
            self.cut_off(Ending::SlowReader);
            return ack;
        }
        let framing = self.framing;
        self.output.push(|o| frame::encode(o, framing, &f));
        self.counters.answers += 1;
        ack
    }

    /// Whether input should be read now: not once ended, not while output is backed up.
    pub fn wants_input(&self) -> bool {
        self.ended().is_none() && self.output.bytes.len() < self.limits.max_output
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next needed.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        match &self.phase {
            Phase::AwaitingCsm { deadline } => Some(*deadline),
            Phase::Open { keepalive, .. } => Some(match keepalive {
                Keepalive::Quiet { ping_at } => *ping_at,
                Keepalive::Pinged { give_up_at } => *give_up_at,
            }),
            Phase::Ended(_) => None,
        }
    }

    /// Runs the CSM and keepalive deadlines (early calls do nothing).
    pub fn handle_timeout(&mut self, now: Timestamp) {
        match self.phase {
            Phase::AwaitingCsm { deadline } if now >= deadline => {
                let framing = self.framing;
                (self.output).push(|o| signal::encode_abort(o, framing, "no CSM in time", None));
                self.phase = Phase::Ended(Ending::NoCsm);
            }
            Phase::Open {
                ref mut keepalive, ..
            } => match *keepalive {
                Keepalive::Quiet { ping_at } if now >= ping_at => {
                    let framing = self.framing;
                    self.output.push(|o| signal::encode_ping(o, framing, &[]));
                    *keepalive = Keepalive::Pinged {
                        give_up_at: now + self.limits.csm_timeout,
                    };
                }
                Keepalive::Pinged { give_up_at } if now >= give_up_at => {
                    self.phase = Phase::Ended(Ending::NoPong);
                }
                _ => {}
            },
            _ => {}
        }
    }

    /// Why the connection ended, once it has: the driver closes it when its output is out.
    pub fn ended(&self) -> Option<&Ending> {
        match &self.phase {
            Phase::Ended(why) => Some(why),
            _ => None,
        }
    }

    /// Whether the peer's CSM has come.
    pub fn is_open(&self) -> bool {
        matches!(self.phase, Phase::Open { .. })
    }

    /// Sends Release (§5.5) and ends: the proxy is shutting down.
    pub fn release(&mut self) {
        if self.ended().is_none() {
            let framing = self.framing;
            self.output.push(|o| signal::encode_release(o, framing));
            self.phase = Phase::Ended(Ending::Released);
        }
    }

    /// Bytes waiting for the socket.
    pub fn pending_output(&self) -> &[u8] {
        &self.output.bytes
    }

    /// The first `n` of them were written.
    pub fn consume_output(&mut self, n: usize) {
        self.output.consume(n);
    }

    /// The next whole message written, taken out: what a WebSocket frame carries (§4.4),
    /// since that format has no length of its own.
    pub fn pop_message(&mut self) -> Option<Vec<u8>> {
        self.output.pop_message()
    }

    /// Ends the connection for `why`, dropping what it has not written and the requests not
    /// yet taken: what carries it failed, or its reader is too slow ([`Ending::SlowReader`]).
    pub fn cut_off(&mut self, why: Ending) {
        self.output = Outgoing::default();
        self.to_engine.clear();
        self.phase = Phase::Ended(why);
    }

    /// What it counted.
    pub fn counters(&self) -> ConnCounters {
        self.counters
    }

    /// Bytes it holds: input not yet a whole message, and output not yet written.
    pub fn buffered(&self) -> usize {
        self.input.len() + self.output.bytes.len()
    }
}

/// What the connection writes, and where each message ends (a WebSocket frame carries one
/// message, and that format has no length to find the end by).
#[derive(Default)]
struct Outgoing {
    bytes: Vec<u8>,
    ends: VecDeque<usize>,
}

impl Outgoing {
    fn push(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        write(&mut self.bytes);
        self.ends.push_back(self.bytes.len());
    }

    fn consume(&mut self, n: usize) {
        let n = n.min(self.bytes.len());
        self.bytes.drain(..n);
        for end in &mut self.ends {
            *end = end.saturating_sub(n);
        }
        while self.ends.front() == Some(&0) {
            self.ends.pop_front();
        }
    }

    fn pop_message(&mut self) -> Option<Vec<u8>> {
        let end = self.ends.pop_front()?;
        let message = self.bytes.drain(..end).collect();
        for e in &mut self.ends {
            *e -= end;
        }
        Some(message)
    }
}

fn signal_error(e: signal::SignalError) -> &'static str {
    match e {
        signal::SignalError::Malformed => "signalling options are not well formed",
    }
}
