//! One connection to a CoAP-over-TCP origin (RFC 8323) as an upstream endpoint of the engine:
//! a sans-IO state machine, the mirror of [`super::conn`].
//!
//! RFC 8323 messages have no type and no Message ID (§2.2, §3.2), and the engine keeps none
//! with a reliable upstream: it matches the origin's responses by token alone, the answer
//! and an observation's notifications alike. So the connection keeps no table: each request
//! the engine sends goes out as a frame, its header dropped, and each response comes back in
//! the engine's message layout with the fixed placeholder header
//! [`frame::ENGINE_HEADER`] ([`Frame::to_engine`]), which the engine ignores. Nothing is
//! acknowledged, reset or numbered here; the engine sends each request once, since its
//! driver marks the upstream reliable, and ends an observation with a deregistration GET
//! (RFC 7641 §3.6), a request like any other.
//!
//! The connection's life is the server side's (§5.3, §5.4): our CSM first; the origin's must
//! come first and within `csm_timeout`; a quiet connection is pinged (§5.4), its Pong taken
//! here.

use std::collections::VecDeque;

use super::conn::{ConnLimits, Ending};
use super::frame::{self, Frame, Framing};
use super::signal::{self, Settings, Signal};
use crate::coap::Message;
use crate::time::Timestamp;

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
    /// The origin's responses, in the engine's layout, not yet taken.
    to_engine: VecDeque<Vec<u8>>,
    /// What the connection drops: requests and empty messages from the origin (an origin
    /// is not ours to serve), and requests of the engine's too large for the origin.
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
            to_engine: VecDeque::new(),
            strays: 0,
        }
    }

    /// A message the engine sends this upstream: a request goes out as a frame, its type
    /// and Message ID dropped (§3.2), before the origin's CSM too (§5.3 lets the initiator
    /// go on at once). Anything else (an ACK, an RST, an empty message) has nothing to say
    /// on a reliable transport, and the engine sends none to a reliable upstream.
    pub fn send(&mut self, datagram: &[u8]) {
        if self.ended().is_some() {
            return;
        }
        let Ok(msg) = Message::parse(datagram) else {
            return;
        };
        if !msg.code().is_request() {
            return;
        }
        let Some(f) = frame::from_datagram(datagram) else {
            return;
        };
        if f.size() > self.peer().max_message_size as usize {
            // Too large for the origin: it would abort the connection. The engine's total
            // timeout answers the client.
            self.strays += 1;
            return;
        }
        frame::encode(&mut self.output, Framing::Stream, &f);
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
            _ if f.code.is_response() => self.handle_response(f),
            // Requests and empty messages (the origin is not ours to serve), and the reserved
            // classes 1, 3 and 6 (RFC 7252 §12.1), which are no response to relay.
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
            // Answers our keepalive Ping: any input already moved the deadlines on.
            Signal::Pong => {}
            Signal::Release => self.phase = Phase::Ended(Ending::Released),
            Signal::Abort(why) => self.phase = Phase::Ended(Ending::PeerAborted(why)),
            Signal::Unknown => {}
        }
    }

    /// A response, whoever it is for: the engine matches it by its token (an answer or a
    /// notification), so it goes on with the placeholder header, once its options are
    /// known to be well formed.
    fn handle_response(&mut self, f: &Frame<'_>) {
        let mut message = Vec::new();
        f.to_engine(&mut message);
        if Message::parse(&message).is_err() {
            return self.abort("a response whose options are not well formed");
        }
        self.to_engine.push_back(message);
    }

    fn abort(&mut self, why: &'static str) {
        signal::encode_abort(&mut self.output, Framing::Stream, why, None);
        self.phase = Phase::Ended(Ending::Aborted(why));
    }

    /// The next response for the engine (answers and notifications alike), in its layout
    /// with the placeholder header [`frame::ENGINE_HEADER`].
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
