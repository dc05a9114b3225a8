//! One connection to a CoAP-over-TCP origin (RFC 8323) as an upstream endpoint of the engine:
//! a sans-IO state machine, the mirror of [`super::conn`].
//!
//! The engine keeps its UDP model here too. It sends datagrams with Message IDs; the
//! connection sends their requests as frames (§3.2: no Message ID, no type) and remembers each
//! token's Message ID. The origin's response comes back to the engine as the ACK of that
//! Message ID (a piggybacked answer), and an observation's later notifications as NONs with
//! Message IDs of the connection's own (§7: a reliable transport has no CON to acknowledge).
//! The engine sends each request once, since its driver marks the upstream reliable.
//!
//! The connection's life is the server side's (§5.3, §5.4): our CSM first; the origin's must
//! come first and within `csm_timeout`; a quiet connection is pinged. An empty CON (the
//! engine's CoAP ping) becomes a Ping, whose Pong comes back as its RST.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use super::conn::{ConnLimits, Ending};
use super::frame::{self, Frame, Framing};
use super::signal::{self, Settings, Signal};
use crate::coap::option::OBSERVE;
use crate::coap::{rst, Message, MessageType};
use crate::time::Timestamp;

/// Requests remembered past which the oldest unanswered ones are forgotten: the engine has
/// given up on them long before (its total timeout).
const MAX_PENDING: usize = 4096;
/// How long an unanswered request's token is kept when the table is full.
const PENDING_LIFETIME: Duration = Duration::from_secs(300);
/// Notifications whose Message ID is remembered, for an RST from the engine to find its
/// observation.
const RECENT_NOTIFICATIONS: usize = 256;

/// A request sent, by token.
#[derive(Clone, Copy, Debug)]
struct Pending {
    /// The engine's Message ID: the response goes back as its ACK.
    mid: u16,
    sent_at: Timestamp,
    /// The request registered an observation (Observe: 0).
    registers: bool,
    /// Its first response came with Observe: later ones are notifications.
    observing: bool,
}

/// Where the connection is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// Our CSM is out; the origin's must come first, by `deadline`.
    AwaitingCsm { deadline: Timestamp },
    /// The origin's CSM came; a Ping goes out at `ping_at` if nothing comes before, and
    /// the connection ends at `give_up_at` if a Ping is out unanswered.
    Open {
        peer: Settings,
        ping_at: Timestamp,
        give_up_at: Option<Timestamp>,
    },
    /// Nothing more is read or sent; what is queued is still written.
    Ended(Ending),
}

/// See the module docs.
pub struct UpstreamConn {
    limits: ConnLimits,
    phase: Phase,
    input: Vec<u8>,
    output: Vec<u8>,
    pending: BTreeMap<Vec<u8>, Pending>,
    /// Message IDs of the notifications handed to the engine, with their tokens.
    notified: VecDeque<(u16, Vec<u8>)>,
    /// The engine's pings out as Pings, by token (its Message ID).
    pings: VecDeque<u16>,
    next_mid: u16,
    to_engine: VecDeque<Vec<u8>>,
    /// Messages from the origin that are for nobody (no such token, requests, empty ones).
    pub strays: u64,
}

impl UpstreamConn {
    /// A new connection at `now`: our CSM is queued first (§5.3).
    pub fn new(now: Timestamp, limits: ConnLimits) -> Self {
        let mut output = Vec::new();
        let ours = Settings {
            max_message_size: limits.max_message_size,
            block_wise: false,
        };
        signal::encode_csm(&mut output, Framing::Stream, ours);
        UpstreamConn {
            limits,
            phase: Phase::AwaitingCsm {
                deadline: now + limits.csm_timeout,
            },
            input: Vec::new(),
            output,
            pending: BTreeMap::new(),
            notified: VecDeque::new(),
            pings: VecDeque::new(),
            next_mid: 0x8000,
            to_engine: VecDeque::new(),
            strays: 0,
        }
    }

    /// A datagram the engine sends this upstream: a request goes out as a frame (before the
    /// origin's CSM too: §5.3 lets the initiator go on at once), a ping as a Ping; the
    /// engine's ACKs and RSTs have nothing to say on a reliable transport.
    pub fn send(&mut self, now: Timestamp, datagram: &[u8]) {
        if self.ended().is_some() {
            return;
        }
        let Ok(msg) = Message::parse(datagram) else {
            return;
        };
        match (
            msg.msg_type(),
            msg.code().is_request(),
            msg.code().is_empty(),
        ) {
            (MessageType::Con | MessageType::Non, true, _) => {
                self.send_request(now, &msg, datagram)
            }
            (MessageType::Con, _, true) => {
                signal::encode_ping(
                    &mut self.output,
                    Framing::Stream,
                    &msg.message_id().to_be_bytes(),
                );
                self.pings.push_back(msg.message_id());
            }
            (MessageType::Rst, _, true) => self.forget_notified(msg.message_id()),
            _ => {}
        }
    }

    fn send_request(&mut self, now: Timestamp, msg: &Message<'_>, datagram: &[u8]) {
        let Some(f) = frame::from_datagram(datagram) else {
            return;
        };
        if f.size() > self.peer().max_message_size as usize {
            // Too large for the origin: it would abort the connection. The engine's total
            // timeout answers the client.
            self.strays += 1;
            return;
        }
        if self.pending.len() >= MAX_PENDING {
            self.pending
                .retain(|_, p| p.observing || now.saturating_since(p.sent_at) < PENDING_LIFETIME);
        }
        let registers = msg
            .option(OBSERVE)
            .is_some_and(|v| v.is_empty() || v == [0]);
        let pending = Pending {
            mid: msg.message_id(),
            sent_at: now,
            registers,
            observing: false,
        };
        self.pending.insert(msg.token().to_vec(), pending);
        frame::encode(&mut self.output, Framing::Stream, &f);
    }

    /// An RST from the engine to one of our notifications: it has no observer for it, so
    /// the observation's later notifications are dropped here.
    fn forget_notified(&mut self, mid: u16) {
        if let Some(at) = self.notified.iter().position(|(m, _)| *m == mid) {
            if let Some((_, token)) = self.notified.remove(at) {
                self.pending.remove(&token);
            }
        }
    }

    /// Bytes the origin sent, in order.
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
            self.abort(e.diagnostic());
        }
    }

    fn handle_frame(&mut self, now: Timestamp, f: &Frame<'_>) {
        let idle = self.limits.idle_timeout;
        let peer = match &mut self.phase {
            Phase::AwaitingCsm { .. } if f.code != signal::CSM => {
                return self.abort("the first message must be a CSM (RFC 8323 §5.3)");
            }
            Phase::AwaitingCsm { .. } => Settings::default(),
            Phase::Open {
                peer,
                ping_at,
                give_up_at,
            } => {
                (*ping_at, *give_up_at) = (now + idle, None);
                *peer
            }
            Phase::Ended(_) => return,
        };
        match f.code.class() {
            7 => self.handle_signal(now, f, peer),
            2..=5 => self.handle_response(f),
            _ => self.strays += 1,
        }
    }

    fn handle_signal(&mut self, now: Timestamp, f: &Frame<'_>, peer: Settings) {
        let (signal, bad) = match signal::parse(f, peer) {
            Ok(read) => read,
            Err(_) => return self.abort("signalling options are not well formed"),
        };
        if bad.is_some() {
            return self.abort("a CSM option this end does not know");
        }
        match signal {
            Signal::Csm(settings) => {
                self.phase = Phase::Open {
                    peer: settings,
                    ping_at: now + self.limits.idle_timeout,
                    give_up_at: None,
                }
            }
            Signal::Ping(token) => signal::encode_pong(&mut self.output, Framing::Stream, &token),
            Signal::Pong => {
                let mid = u16::from_be_bytes([
                    f.token.first().copied().unwrap_or(0),
                    f.token.get(1).copied().unwrap_or(0),
                ]);
                if let Some(at) = self.pings.iter().position(|m| *m == mid) {
                    self.pings.remove(at);
                    let mut answer = Vec::new();
                    rst(&mut answer, mid);
                    self.to_engine.push_back(answer);
                }
            }
            Signal::Release => self.phase = Phase::Ended(Ending::Released),
            Signal::Abort(why) => self.phase = Phase::Ended(Ending::PeerAborted(why)),
            Signal::Unknown => {}
        }
    }

    /// A response: the ACK of its request, or a notification of its observation.
    fn handle_response(&mut self, f: &Frame<'_>) {
        let Some(p) = self.pending.get_mut(f.token) else {
            self.strays += 1;
            return;
        };
        let mut datagram = Vec::new();
        if p.observing {
            let mid = self.next_mid;
            self.next_mid = self.next_mid.wrapping_add(1).max(0x8000);
            f.to_datagram(&mut datagram, MessageType::Non, mid);
            if self.notified.len() >= RECENT_NOTIFICATIONS {
                self.notified.pop_front();
            }
            self.notified.push_back((mid, f.token.to_vec()));
        } else {
            f.to_datagram(&mut datagram, MessageType::Ack, p.mid);
            let observed = Message::parse(&datagram).is_ok_and(|m| m.option(OBSERVE).is_some());
            match p.registers && observed {
                true => p.observing = true,
                false => {
                    self.pending.remove(f.token);
                }
            }
        }
        if Message::parse(&datagram).is_err() {
            return self.abort("a response whose options are not well formed");
        }
        self.to_engine.push_back(datagram);
    }

    fn abort(&mut self, why: &'static str) {
        signal::encode_abort(&mut self.output, Framing::Stream, why, None);
        self.phase = Phase::Ended(Ending::Aborted(why));
    }

    /// The next datagram for the engine (answers, notifications, ping answers).
    pub fn poll_to_engine(&mut self) -> Option<Vec<u8>> {
        self.to_engine.pop_front()
    }

    /// The origin closed its side.
    pub fn handle_eof(&mut self) {
        if self.ended().is_none() {
            self.phase = Phase::Ended(Ending::Closed);
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) is next needed.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        match &self.phase {
            Phase::AwaitingCsm { deadline } => Some(*deadline),
            Phase::Open {
                ping_at,
                give_up_at,
                ..
            } => Some(give_up_at.unwrap_or(*ping_at)),
            Phase::Ended(_) => None,
        }
    }

    /// Runs the CSM and keepalive deadlines (early calls do nothing).
    pub fn handle_timeout(&mut self, now: Timestamp) {
        let csm_timeout = self.limits.csm_timeout;
        match &mut self.phase {
            Phase::AwaitingCsm { deadline } if now >= *deadline => {
                self.abort("no CSM in time");
                self.phase = Phase::Ended(Ending::NoCsm);
            }
            Phase::Open {
                give_up_at: Some(at),
                ..
            } if now >= *at => self.phase = Phase::Ended(Ending::NoPong),
            Phase::Open {
                ping_at,
                give_up_at: give_up_at @ None,
                ..
            } if now >= *ping_at => {
                *give_up_at = Some(now + csm_timeout);
                signal::encode_ping(&mut self.output, Framing::Stream, &[]);
            }
            _ => {}
        }
    }

    /// Ends the connection at once: what carries it (TLS) failed. Nothing more is written.
    pub fn fail(&mut self, why: &'static str) {
        self.output.clear();
        self.to_engine.clear();
        self.phase = Phase::Ended(Ending::Transport(why));
    }

    /// Sends Release (§5.5) and ends: the engine closed this endpoint.
    pub fn release(&mut self) {
        if self.ended().is_none() {
            signal::encode_release(&mut self.output, Framing::Stream);
            self.phase = Phase::Ended(Ending::Released);
        }
    }

    /// Why the connection ended, once it has.
    pub fn ended(&self) -> Option<&Ending> {
        match &self.phase {
            Phase::Ended(why) => Some(why),
            _ => None,
        }
    }

    /// Whether input should be read now.
    pub fn wants_input(&self) -> bool {
        self.ended().is_none() && self.output.len() < self.limits.max_output
    }

    /// Bytes waiting for the socket.
    pub fn pending_output(&self) -> &[u8] {
        &self.output
    }

    /// The first `n` of them were written.
    pub fn consume_output(&mut self, n: usize) {
        self.output.drain(..n.min(self.output.len()));
    }

    /// Requests waiting for their answer, and observations.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    fn peer(&self) -> Settings {
        match &self.phase {
            Phase::Open { peer, .. } => *peer,
            _ => Settings::default(),
        }
    }
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
