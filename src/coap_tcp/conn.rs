//! One CoAP-over-TCP connection (RFC 8323) as the engine's client: a sans-IO state machine.
//!
//! Bytes in, messages out to the engine in its message layout (RFC 7252 §3); the engine's
//! answers in, bytes out. RFC 8323 has no message layer (§2.2, §3.2: no types, no Message
//! IDs, no ACKs, no retransmissions), and neither has the engine with this peer: each
//! request goes to it with the fixed placeholder header [`frame::ENGINE_HEADER`], which it
//! ignores (it finds no duplicates by Message ID for such a peer), and the type and Message
//! ID of what it sends back are dropped here when the message is framed. Nothing is
//! acknowledged either way.
//!
//! The connection's life (§5.3): our CSM goes out first; the peer's must come first, within
//! `csm_timeout`, or the connection is aborted. A CSM announcing a Max-Message-Size no answer
//! fits in is aborted too (§5.3.1, [`signal::MIN_MAX_MESSAGE_SIZE`]). Open, a connection quiet
//! for `idle_timeout` gets a Ping (§5.4); no answer within `csm_timeout` closes it; a message
//! begun and not whole within `message_timeout` is aborted. A Release or Abort from the peer
//! ends it; a protocol error sends an Abort (§5.6) and ends it.
//!
//! Requests are taken one at a time ([`StreamConn::poll_to_engine`]), each only while the
//! answers waiting for the socket, and those the engine has queued but not yet delivered
//! ([`StreamConn::queued_by_engine`]), are below `max_output`: however much one read brought,
//! the answers it can cause stay within the bound. What is not taken waits in the input, and
//! no more is read meanwhile.

use std::time::Duration;

use super::buffers::{Incoming, Outgoing};
use super::frame::{self, Frame, Framing};
use super::signal::{self, Settings, Signal};
use crate::coap::Message;
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
    /// How long a message may take to come whole once part of it has (after the CSM): a
    /// peer that sends half a message and stops is aborted then, not kept until the
    /// keepalive finds it.
    pub message_timeout: Duration,
    /// Output bytes waiting for the socket (and answers the engine has queued) past which no
    /// more requests are taken and no more input is read. Answers still come
    /// (notifications, late responses); past twice this the peer is a reader too slow to
    /// keep, and the connection ends ([`Ending::SlowReader`]).
    pub max_output: usize,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_message_size: signal::DEFAULT_MAX_MESSAGE_SIZE,
            csm_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            message_timeout: Duration::from_secs(10),
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
    /// We aborted it (§5.6): its CSM announced a Max-Message-Size (this one) below
    /// [`signal::MIN_MAX_MESSAGE_SIZE`], which no answer would fit in (§5.3.1).
    MaxMessageSizeTooSmall(u32),
    /// We aborted it (§5.6): a message begun was not whole within `message_timeout`.
    MessageTimeout,
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

/// What the input holds after the messages that could be handled were.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Front {
    /// Nothing.
    Empty,
    /// A whole message, waiting for its turn: a request until the driver takes it, or any
    /// message while the output is backed up.
    Waiting,
    /// Part of a message of an open connection, to be whole by `deadline`.
    Partial { deadline: Timestamp },
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
    /// Times requests stopped being taken because the answers waiting for the socket
    /// reached `max_output`.
    pub pauses: u64,
}

/// See the module docs.
pub struct StreamConn {
    framing: Framing,
    limits: ConnLimits,
    phase: Phase,
    input: Incoming,
    front: Front,
    output: Outgoing,
    /// Bytes the engine queued for this connection (or because of its requests) that have
    /// not come through [`deliver`](Self::deliver) yet.
    owed: usize,
    /// Bytes of ours a carrier (TLS, WebSocket) still holds for the socket.
    carried: usize,
    /// Whether the last request offered was declined for the output bound.
    paused: bool,
    /// The time of the latest input or timeout: when a message is taken later, its time.
    clock: Timestamp,
    /// When the peer last sent anything.
    last_input: Timestamp,
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
            input: Incoming::default(),
            front: Front::Empty,
            output,
            owed: 0,
            carried: 0,
            paused: false,
            clock: now,
            last_input: now,
            counters: ConnCounters::default(),
        }
    }

    /// Bytes the peer sent (stream framing), in order.
    pub fn handle_input(&mut self, now: Timestamp, data: &[u8]) {
        if self.ended().is_some() {
            return;
        }
        self.clock = now;
        if !data.is_empty() {
            self.last_input = now;
        }
        self.input.push(data);
        self.advance();
    }

    /// One message from a WebSocket binary frame (§4.4).
    pub fn handle_ws_message(&mut self, now: Timestamp, payload: &[u8]) {
        if self.ended().is_some() {
            return;
        }
        (self.clock, self.last_input) = (now, now);
        match frame::decode_ws(payload, self.limits.max_message_size as usize) {
            Ok(f) => self.input.push_frame(&f),
            Err(e) => return self.abort(e.diagnostic(), None),
        }
        self.advance();
    }

    /// The peer closed its side.
    pub fn handle_eof(&mut self) {
        if self.ended().is_none() {
            self.phase = Phase::Ended(Ending::Closed);
        }
        self.input.clear();
        self.front = Front::Empty;
    }

    /// The largest message taken from the input. A WebSocket's messages were checked
    /// against the bound as they came (their framing here adds a length).
    fn input_max(&self) -> usize {
        match self.framing {
            Framing::Stream => self.limits.max_message_size as usize,
            Framing::WebSocket => usize::MAX,
        }
    }

    /// Handles the messages at the front of the input that are not requests, while the
    /// output takes more; notes what is left ([`Front`]).
    fn advance(&mut self) {
        let mut input = std::mem::take(&mut self.input);
        let max = self.input_max();
        let front = loop {
            if self.ended().is_some() {
                input.clear();
                break Front::Empty;
            }
            let (f, n) = match input.front(max) {
                Ok(Some(read)) => read,
                Ok(None) if input.is_empty() => break Front::Empty,
                Ok(None) => break self.partial(),
                Err(e) => {
                    self.abort(e.diagnostic(), None);
                    continue;
                }
            };
            if self.is_open() && (f.code.is_request() || self.output_full()) {
                break Front::Waiting;
            }
            self.handle_frame(&f);
            input.take(n);
        };
        self.input = input;
        self.front = front;
    }

    /// The front for part of a message: its deadline runs from when it was first seen.
    fn partial(&self) -> Front {
        match (self.front, &self.phase) {
            (Front::Partial { deadline }, _) => Front::Partial { deadline },
            (_, Phase::Open { .. }) => Front::Partial {
                deadline: self.clock + self.limits.message_timeout,
            },
            // Before the CSM its own deadline runs.
            _ => Front::Empty,
        }
    }

    /// A message that is not a request (or any message before the CSM).
    fn handle_frame(&mut self, f: &Frame<'_>) {
        let peer = match &mut self.phase {
            Phase::AwaitingCsm { .. } if f.code != signal::CSM => {
                return self.abort("the first message must be a CSM (RFC 8323 §5.3)", None);
            }
            Phase::AwaitingCsm { .. } => Settings::default(),
            Phase::Open { peer, keepalive } => {
                *keepalive = Keepalive::Quiet {
                    ping_at: self.clock + self.limits.idle_timeout,
                };
                *peer
            }
            Phase::Ended(_) => return,
        };
        if f.code.class() == 7 {
            return self.handle_signal(f, peer);
        }
        // Empty messages are to be ignored (§3.4); the proxy asks its clients nothing, so a
        // response is for nobody.
        self.counters.ignored += 1;
    }

    fn handle_signal(&mut self, f: &Frame<'_>, peer: Settings) {
        let (signal, bad) = match signal::parse(f, peer) {
            Ok(read) => read,
            Err(e) => return self.abort(signal_error(e), None),
        };
        if let Some(option) = bad {
            return self.abort("a CSM option this end does not know", Some(option));
        }
        match signal {
            Signal::Csm(settings) if settings.max_message_size < signal::MIN_MAX_MESSAGE_SIZE => {
                self.refuse_max_message_size(settings.max_message_size)
            }
            Signal::Csm(settings) => {
                self.phase = Phase::Open {
                    peer: settings,
                    keepalive: Keepalive::Quiet {
                        ping_at: self.clock + self.limits.idle_timeout,
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

    /// A CSM whose Max-Message-Size no answer fits in: every answer would be dropped, and
    /// the peer would wait for them forever. Abort says so, naming the option (§5.6).
    fn refuse_max_message_size(&mut self, size: u32) {
        self.abort(
            "Max-Message-Size too small for any answer (RFC 8323 §5.3.1)",
            Some(signal::MAX_MESSAGE_SIZE),
        );
        self.phase = Phase::Ended(Ending::MaxMessageSizeTooSmall(size));
    }

    /// Sends Abort saying `why` and ends the connection (§5.6).
    fn abort(&mut self, why: &'static str, bad_option: Option<u16>) {
        let framing = self.framing;
        (self.output).push(|o| signal::encode_abort(o, framing, why, bad_option));
        self.end(Ending::Aborted(why));
    }

    fn end(&mut self, why: Ending) {
        self.phase = Phase::Ended(why);
        self.input.clear();
        self.front = Front::Empty;
    }

    /// The next request for the engine, in its message layout with the placeholder header
    /// ([`Frame::to_engine`]): none while the output is
    /// at its bound (`max_output`, counting what the engine has queued and not yet
    /// delivered). Tell the connection what the engine queued for it after each
    /// ([`queued_by_engine`](Self::queued_by_engine)).
    pub fn poll_to_engine(&mut self) -> Option<Vec<u8>> {
        if self.front != Front::Waiting || !self.is_open() {
            return None;
        }
        if self.output_full() {
            self.counters.pauses += u64::from(!self.paused);
            self.paused = true;
            return None;
        }
        self.paused = false;
        let mut input = std::mem::take(&mut self.input);
        let datagram = match input.front(self.input_max()) {
            Ok(Some((f, n))) if f.code.is_request() => {
                let mut datagram = Vec::new();
                f.to_engine(&mut datagram);
                input.take(n);
                Some(datagram)
            }
            // A signal left while the output was full: handled now.
            _ => None,
        };
        self.input = input;
        if let Some(datagram) = &datagram {
            if Message::parse(datagram).is_err() {
                self.abort("a message whose options are not well formed", None);
                return None;
            }
            if let Phase::Open { keepalive, .. } = &mut self.phase {
                *keepalive = Keepalive::Quiet {
                    ping_at: self.clock + self.limits.idle_timeout,
                };
            }
            self.counters.requests += 1;
        }
        self.advance();
        datagram.or_else(|| self.poll_to_engine_after_signals())
    }

    /// After a signal at the front was handled: the request behind it, if any.
    fn poll_to_engine_after_signals(&mut self) -> Option<Vec<u8>> {
        match self.front == Front::Waiting && !self.output_full() {
            true => self.poll_to_engine(),
            false => None,
        }
    }

    /// The engine queued `bytes` because of the request just taken (its answer, or what
    /// goes upstream for it): they count against the output bound until they are delivered
    /// or [`engine_queue_emptied`](Self::engine_queue_emptied).
    pub fn queued_by_engine(&mut self, bytes: usize) {
        self.owed += bytes;
    }

    /// Everything the engine had queued has gone to its transports.
    pub fn engine_queue_emptied(&mut self) {
        self.owed = 0;
        self.resume();
    }

    /// Bytes of ours a carrier (TLS, WebSocket) still holds for the socket: they count
    /// against the output bound.
    pub fn carrier_holds(&mut self, bytes: usize) {
        self.carried = bytes;
        self.resume();
    }

    /// Handles what waited for the output to drain, once it has.
    fn resume(&mut self) {
        if self.front == Front::Waiting && !self.output_full() {
            self.advance();
        }
    }

    /// Whether the carrier (a WebSocket) holds part of a message: its deadline runs as for
    /// part of one in the input ([`ConnLimits::message_timeout`]).
    pub fn carrier_holds_part(&mut self, part: bool) {
        self.front = match (part, self.front) {
            (true, Front::Empty) => self.partial(),
            (false, Front::Partial { .. }) if self.input.is_empty() => Front::Empty,
            (_, front) => front,
        };
    }

    /// Whether the output, with what the engine owes and the carrier holds, is at its bound.
    fn output_full(&self) -> bool {
        self.output.bytes().len() + self.owed + self.carried >= self.limits.max_output
    }

    /// A message the engine sent this peer (an answer, a notification), framed for it: its
    /// type and Message ID are dropped (§3.2), and nothing goes back to the engine, which
    /// expects no ACK from a peer without a message layer. An empty message is nothing to
    /// the peer (§3.4).
    pub fn deliver(&mut self, datagram: &[u8]) {
        self.owed = self.owed.saturating_sub(datagram.len());
        let peer = match &self.phase {
            Phase::Open { peer, .. } => *peer,
            // Before the peer's CSM nothing was asked; once ended nothing more is written.
            _ => return,
        };
        let well_formed = Message::parse(datagram).is_ok_and(|m| !m.code().is_empty());
        let Some(f) = well_formed
            .then(|| frame::from_datagram(datagram))
            .flatten()
        else {
            return;
        };
        if f.size() > peer.max_message_size as usize {
            self.counters.oversized_answers += 1;
            return;
        }
        if self.output.bytes().len() + self.carried + f.size() > 2 * self.limits.max_output {
            return self.cut_off(Ending::SlowReader);
        }
        let framing = self.framing;
        self.output.push(|o| frame::encode(o, framing, &f));
        self.counters.answers += 1;
    }

    /// Whether input should be read now: not once ended, not while a message waits for its
    /// turn, not while the output is at its bound.
    pub fn wants_input(&self) -> bool {
        self.ended().is_none() && self.front != Front::Waiting && !self.output_full()
    }

    /// Whether a request waits that only the engine's queue keeps from being taken: once
    /// what the engine queued is delivered ([`engine_queue_emptied`](Self::engine_queue_emptied)),
    /// [`poll_to_engine`](Self::poll_to_engine) gives it without more input.
    pub fn has_work(&self) -> bool {
        let unwritten = self.output.bytes().len() + self.carried;
        self.front == Front::Waiting && self.is_open() && unwritten < self.limits.max_output
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next needed.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        let phase = match &self.phase {
            Phase::AwaitingCsm { deadline } => *deadline,
            Phase::Open { keepalive, .. } => match keepalive {
                Keepalive::Quiet { ping_at } => *ping_at,
                Keepalive::Pinged { give_up_at } => *give_up_at,
            },
            Phase::Ended(_) => return None,
        };
        Some(match self.front {
            Front::Partial { deadline } => phase.min(deadline),
            _ => phase,
        })
    }

    /// Runs the CSM, keepalive and message deadlines (early calls do nothing).
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.clock = now;
        self.message_deadline(now);
        match self.phase {
            Phase::AwaitingCsm { deadline } if now >= deadline => {
                let framing = self.framing;
                (self.output).push(|o| signal::encode_abort(o, framing, "no CSM in time", None));
                self.end(Ending::NoCsm);
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
                    self.end(Ending::NoPong);
                }
                _ => {}
            },
            _ => {}
        }
    }

    /// A part of a message not whole by its deadline is aborted, unless it is we who stopped
    /// reading (the output at its bound): then the peer gets the time again.
    fn message_deadline(&mut self, now: Timestamp) {
        let Front::Partial { deadline } = self.front else {
            return;
        };
        if now < deadline {
            return;
        }
        if self.output_full() {
            self.front = Front::Partial {
                deadline: now + self.limits.message_timeout,
            };
            return;
        }
        self.abort("a message not completed in time", None);
        self.phase = Phase::Ended(Ending::MessageTimeout);
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

    /// When the peer last sent anything.
    pub fn last_input(&self) -> Timestamp {
        self.last_input
    }

    /// Sends Release (§5.5) and ends: the proxy is shutting down.
    pub fn release(&mut self) {
        if self.ended().is_none() {
            let framing = self.framing;
            self.output.push(|o| signal::encode_release(o, framing));
            self.end(Ending::Released);
        }
    }

    /// Bytes waiting for the socket.
    pub fn pending_output(&self) -> &[u8] {
        self.output.bytes()
    }

    /// The first `n` of them were written.
    pub fn consume_output(&mut self, n: usize) {
        self.output.consume(n);
        self.resume();
    }

    /// The next whole message written, taken out: what a WebSocket frame carries (§4.4),
    /// since that format has no length of its own.
    pub fn pop_message(&mut self) -> Option<Vec<u8>> {
        self.output.pop_message()
    }

    /// Ends the connection for `why`, dropping what it has not written and the requests not
    /// yet taken: what carries it failed, or its reader is too slow ([`Ending::SlowReader`]).
    pub fn cut_off(&mut self, why: Ending) {
        self.output.clear();
        self.end(why);
    }

    /// What it counted.
    pub fn counters(&self) -> ConnCounters {
        self.counters
    }

    /// Bytes it holds: input not yet taken, and output not yet written.
    pub fn buffered(&self) -> usize {
        self.input.len() + self.output.bytes().len()
    }
}

fn signal_error(e: signal::SignalError) -> &'static str {
    match e {
        signal::SignalError::Malformed => "signalling options are not well formed",
    }
}
