//! Answers out to a client that has not proven its address (`validation.rs`) and that do not
//! fit its allowance: held while the client is pinged, then sent as they would have gone
//! (proven) or as a CON asking for the proof; and what happens when one cannot be held.
//!
//! Held answers are bounded in bytes: [`MAX_HELD_BYTES`] per source network (`--source-prefix`,
//! `clients.rs`) and [`MAX_HELD_BYTES_TOTAL`] in all. Whatever bound is met, the client gets a
//! way forward, never a dead end:
//! - all held answers together at the total: the oldest held ones give way (`held.rs`), and
//!   the newcomer is held and pinged as usual. The oldest have waited longest for a proof
//!   that a real client gives within a round trip (or [`PROOF_WAIT`] and a round trip, by
//!   the ACK of a CON); a newcomer that answers pings but does not know Echo (aiocoap 0.4
//!   RSTs pings, and reports a 4.01 as it is) is still served.
//! - its source network's share taken: 4.01 with an Echo value (RFC 9175 §2.4), which costs
//!   the proxy no state, fits the allowance, and which libcoap repeats, proving itself in one
//!   round trip. A network may not push its own older answers out with newer ones: its share
//!   is its share. Before the request is forwarded if it can be (`Proxy::check_source`),
//!   else in place of its answer.
//! - what is turned away for a request that is not safe to repeat (POST, PATCH, iPATCH,
//!   RFC 7252 §5.1) is a bare 5.03 with Max-Age, as before (a 4.01 asks for the repeat).
//!
//! A client that shows it does not receive (`validation::silent`: its first CON, the probe,
//! unacknowledged for ACK_TIMEOUT, 2 s, or ICMP port unreachable) has every answer held for
//! it given up at once, rather than when each CON is given up EXCHANGE_LIFETIME after it
//! went; found at the next timer of any of its exchanges (or at the ICMP error). A held
//! answer is so given up as 4.01 with an Echo value; its later answers are still held and
//! pinged for (a real client that lost the probe on a lossy path still proves itself by an
//! RST), but go as 4.01 with an Echo value at the end of the wait rather than as a CON, which
//! would wait behind a probe that cannot come: a source gets no other probe for a lifetime
//! after one went, however it ended, so the reflection bound (3x plus one datagram) holds
//! however often this happens.

use crate::coap::option::BLOCK2;
use crate::coap::{ping, rewrite, Code, Message, MessageType};
use crate::time::Timestamp;

use super::events::{ObserverLoss, ProxyEvent};
use super::exchange::{ExchangeKey, Reply, State};
use super::gate::{Charge, SendGate};
use super::local_answer::{encode_local, LocalAnswer};
use super::peer::Peer;
use super::table::Exchanges;
use super::validation::{LIKELY_ANSWER, MAX_HELD_BYTES, MAX_HELD_BYTES_TOTAL, PROOF_WAIT};
use super::{Destination, Proxy};

/// Answers waiting for a silent client's proof from which they are given up early (see
/// [`Proxy::client_silent`]).
const EARLY_GIVE_UP: usize = 8;

/// Why an answer could not be held for its client's proof (counted, like refusals).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum NoRoom {
    /// Its source network's share of held answers is taken.
    Share,
    /// All held answers together are at their bound, and none was left to give way.
    Total,
}

/// Why an answer held for a proof was given up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum GiveUp {
    /// The oldest, for a newer one at the total bound.
    Evicted,
    /// Its client's first CON went unacknowledged.
    Unacknowledged,
    /// ICMP port unreachable came back from its client.
    Unreachable,
}

/// Whether the answer of `key` still waits for its client's proof: held, or a CON being
/// delivered to a client not proven (withheld, or the probe).
pub(super) fn waiting_for_proof(exchanges: &Exchanges, gate: &SendGate, key: ExchangeKey) -> bool {
    exchanges.get(key).is_some_and(|x| match x.state {
        State::AwaitingProof { .. } => true,
        State::Answered => x.delivery.is_some() && !gate.proven(x.client),
        _ => false,
    })
}

impl Proxy {
    /// An answer (`len` bytes) that does not fit its unproven client's allowance: held while
    /// the client is asked for its proof if there is room or room can be made, otherwise
    /// turned away with a way forward (see the module docs).
    pub(super) fn answer_unproven(
        &mut self,
        now: Timestamp,
        key: ExchangeKey,
        msg: &Message,
        len: usize,
    ) {
        let Some(client) = self.exchanges.get(key).map(|x| x.client) else {
            return;
        };
        match self.make_room_to_hold(now, client, len) {
            Ok(()) => self.hold_for_proof(now, key, msg),
            Err(cause) => self.turn_away(now, key, cause),
        }
    }

    /// Whether an answer for `client` too big for its allowance may not be held now, and why
    /// (before its request goes upstream: then it gets 4.01 with an Echo value at once).
    /// Only the reasons that a newcomer cannot change: a full total makes room instead.
    pub(super) fn cannot_hold_for(&self, client: Peer) -> Option<NoRoom> {
        client.claimed_address()?;
        if self.gate.proven(client) {
            // The common case, at one look-up: nothing is held for a proven client.
            return None;
        }
        let share = self.clients.prefix_answer_bytes(client) + LIKELY_ANSWER;
        (share > MAX_HELD_BYTES).then_some(NoRoom::Share)
    }

    /// Makes room for `len` more bytes held for `client`: within its network's share, and
    /// within the total once the oldest held answers have given way.
    fn make_room_to_hold(
        &mut self,
        now: Timestamp,
        client: Peer,
        len: usize,
    ) -> Result<(), NoRoom> {
        if self.clients.prefix_answer_bytes(client) + len > MAX_HELD_BYTES {
            return Err(NoRoom::Share);
        }
        while self.usage.answer_bytes() + len > MAX_HELD_BYTES_TOTAL {
            let (exchanges, gate) = (&self.exchanges, &self.gate);
            let oldest = (self.held).pop_oldest(|k| waiting_for_proof(exchanges, gate, k));
            let Some((_, oldest)) = oldest else {
                return Err(NoRoom::Total);
            };
            self.give_up_held(now, oldest, GiveUp::Evicted);
        }
        Ok(())
    }

    /// The answer of `key` is not held (`cause`): the client gets 4.01 with an Echo value,
    /// or a 5.03 for a request not safe to repeat.
    fn turn_away(&mut self, now: Timestamp, key: ExchangeKey, cause: NoRoom) {
        if self.exchanges.get(key).is_some_and(|x| !x.non_idempotent) {
            self.count_backlog_challenge(Some(cause));
        }
        self.challenge_or_refuse(now, key);
    }

    /// Counts a 4.01 with an Echo value that stands for an answer not held, by `cause`.
    pub(super) fn count_backlog_challenge(&mut self, cause: Option<NoRoom>) {
        let c = &mut self.counters.proof;
        match cause {
            Some(NoRoom::Share) => c.backlog_challenges_share += 1,
            Some(NoRoom::Total) => c.backlog_challenges_total += 1,
            None => {}
        }
    }

    /// 4.01 with an Echo value for a safe request, a 5.03 for one that is not.
    fn challenge_or_refuse(&mut self, now: Timestamp, key: ExchangeKey) {
        match self.exchanges.get(key).map(|x| x.non_idempotent) {
            Some(false) => self.challenge_for_proof(now, key),
            Some(true) => self.refuse_for_proof_backlog(now, key),
            None => {}
        }
    }

    /// Gives up the answer of `key`, which waits for its client's proof: a held one is
    /// turned away (4.01 with an Echo value, or 5.03) unless the client is unreachable, a
    /// CON being delivered ends as one never acknowledged would.
    pub(super) fn give_up_held(&mut self, now: Timestamp, key: ExchangeKey, why: GiveUp) {
        let Some(x) = self.exchanges.get(key) else {
            return;
        };
        match (&x.state, x.delivery.is_some()) {
            (State::AwaitingProof { .. }, _) => {
                self.exchanges.update(key, |x| x.state = State::Answered);
                self.exchanges.rearm(key);
                let wire = (&mut self.exchanges, &mut self.clients);
                self.usage.keep_answer(wire, key, None);
                match why {
                    GiveUp::Unreachable => self.finish(now, key),
                    GiveUp::Evicted | GiveUp::Unacknowledged => self.challenge_or_refuse(now, key),
                }
            }
            (State::Answered, true) => {
                self.cancel_delivery(key);
                self.delivered(now, key);
            }
            _ => return,
        }
        let c = &mut self.counters.proof;
        match why {
            GiveUp::Evicted => c.held_evicted += 1,
            GiveUp::Unacknowledged => c.held_given_up_unacknowledged += 1,
            GiveUp::Unreachable => c.held_given_up_unreachable += 1,
        }
    }

    /// `addr` showed that it does not receive: every answer held for it is given up.
    pub(super) fn give_up_held_for(
        &mut self,
        now: Timestamp,
        addr: std::net::SocketAddr,
        why: GiveUp,
    ) {
        for key in self.held.take_client(addr) {
            if waiting_for_proof(&self.exchanges, &self.gate, key) {
                self.give_up_held(now, key, why);
            }
        }
    }

    /// Whether what waits for the proof of `key`'s client is to be given up now: the client
    /// is not proven and has shown that it does not receive (`validation::silent`: the CON
    /// asking for its proof went unacknowledged and nothing came from it since, or ICMP port
    /// unreachable came back), `key`'s answer cannot go (past the allowance), and `key` is an
    /// observation or the client has [`EARLY_GIVE_UP`] answers or more waiting. A few answers
    /// wait out their time as before, so that a real client that lost that CON on a lossy path
    /// and went quiet for a while loses nothing; what a flood makes a victim keep goes.
    pub(super) fn client_silent(&self, now: Timestamp, key: ExchangeKey) -> bool {
        let Some(x) = self.exchanges.get(key) else {
            return false;
        };
        let Some(addr) = x.client.claimed_address() else {
            return false;
        };
        let len = x.answer.as_deref().map_or(0, <[u8]>::len);
        if !self.gate.validation().silent(now, addr) || self.gate.fits(x.client, len) {
            return false;
        }
        let (exchanges, gate) = (&self.exchanges, &self.gate);
        let waiting = (self.held).count_client(addr, |k| waiting_for_proof(exchanges, gate, k));
        matches!(x.state, State::Observing(_)) || waiting >= EARLY_GIVE_UP
    }

    /// A timer of `key` fired and its client is silent ([`client_silent`]): what is held
    /// for it is given up, rather than each CON EXCHANGE_LIFETIME after it went (their
    /// retransmissions would be withheld anyway). `key`'s own CON ends as one never
    /// acknowledged (RFC 7252 §4.2; an observation with it, RFC 7641 §4.5).
    ///
    /// [`client_silent`]: Self::client_silent
    pub(super) fn give_up_silent(&mut self, now: Timestamp, key: ExchangeKey) {
        let Some(x) = self.exchanges.get(key) else {
            return;
        };
        let Some(addr) = x.client.claimed_address() else {
            return;
        };
        let (client, held) = (
            x.client,
            waiting_for_proof(&self.exchanges, &self.gate, key),
        );
        if let Some(mid) = x.delivery.as_ref().map(|d| d.mid) {
            self.cancel_delivery(key);
            self.counters.traffic.client_delivery_failures += 1;
            self.events
                .push(ProxyEvent::ClientNeverAcked { client, mid });
            self.observer_gone(now, key, ObserverLoss::NeverAcked);
            self.delivered(now, key);
            self.counters.proof.held_given_up_unacknowledged += u64::from(held);
        } else if held {
            self.give_up_held(now, key, GiveUp::Unacknowledged);
        }
        self.give_up_held_for(now, addr, GiveUp::Unacknowledged);
    }

    /// No room to keep the answer of a request that is not safe to repeat until the client
    /// proves its address: a 5.03 with Max-Age instead (RFC 7252 §5.9.3.4), small enough for
    /// its allowance, so that a real client retries after it proved itself, and a spoofed one
    /// costs the proxy no memory.
    fn refuse_for_proof_backlog(&mut self, now: Timestamp, key: ExchangeKey) {
        let Some(x) = self.exchanges.get(key) else {
            return;
        };
        let token = x.client_token;
        self.counters.refusals.refused_proof_backlog += 1;
        // Bare: the client is unproven, and the code and Max-Age are about as long as the
        // request (a diagnostic would not fit its 3x, see `Proxy::diagnostic_fits`).
        let answer = LocalAnswer {
            diagnostic: "",
            ..self.unavailable("too many answers waiting for this client's proof")
        };
        let mut buf = Vec::with_capacity(64);
        encode_local(&mut buf, MessageType::Ack, 0, token.as_bytes(), &answer);
        match Message::parse(&buf) {
            Ok(msg) => self.send_answer(now, key, &msg, false, false),
            Err(_) => self.finish(now, key),
        }
    }

    /// Holds the answer until the client proves its address (`State::AwaitingProof`), and
    /// pings the client for that proof if no ping is out to it.
    fn hold_for_proof(&mut self, now: Timestamp, key: ExchangeKey, msg: &Message) {
        let Some(x) = self.exchanges.get(key) else {
            return;
        };
        let (client, slot, token) = (x.client, x.client_slot, x.client_token);
        // Encoded as it will most likely go (on the ACK, or as a NON whose MID is drawn
        // when it goes); `send_answer` rewrites type, MID and token anyway.
        let ty = match x.reply {
            Reply::Piggyback { .. } => MessageType::Ack,
            _ => MessageType::Non,
        };
        let mut bytes = Vec::with_capacity(msg.as_bytes().len());
        let ids = (ty, x.client_mid, token.as_bytes());
        let copy = |b: &mut crate::coap::MessageBuilder, n, v: &[u8]| _ = b.option(n, v);
        if rewrite(&mut bytes, msg, ids, copy).finish().is_err() {
            return self.finish(now, key);
        }
        // The ACK waits for the proof too. Dropped first: with no deadline left the wheel
        // timer goes, and the proof's is armed at its own instant, not at the ACK's.
        self.exchanges.update(key, |x| {
            if let Reply::Piggyback { ack_by } = &mut x.reply {
                *ack_by = None;
            }
        });
        let until = Some(now + PROOF_WAIT);
        (self.exchanges).update(key, |x| x.state = State::AwaitingProof { until });
        self.usage.keep_answer(
            (&mut self.exchanges, &mut self.clients),
            key,
            Some(bytes.into_boxed_slice()),
        );
        self.counters.proof.answers_held_for_proof += 1;
        // Only a claimed address is held to its allowance, and so waits for a proof here.
        let Some(addr) = client.claimed_address() else {
            return;
        };
        self.gate.validation_mut().hold(addr, key);
        let (exchanges, gate) = (&self.exchanges, &self.gate);
        (self.held).push(addr, key, |k| waiting_for_proof(exchanges, gate, k));
        if self.gate.validation().ping_due(now, addr) {
            let mid = self.clients.fresh_mid(slot);
            let to = Destination::Client(client);
            if (self.gate).send_encoded(Charge::Relayed, to, |b| ping(b, mid)) {
                self.gate.validation_mut().pinged(now, addr, mid);
            }
        }
    }

    /// The held answer goes: as it would have, now that the client proved its address, or,
    /// if it did not within `PROOF_WAIT`, as a CON asking for the proof.
    pub(super) fn release_held(&mut self, now: Timestamp, key: ExchangeKey) {
        if self.client_silent(now, key) {
            return self.give_up_silent(now, key);
        }
        let Some(x) = self
            .exchanges
            .get_mut(key)
            .filter(|x| matches!(x.state, State::AwaitingProof { .. }))
        else {
            return;
        };
        x.state = State::Answered;
        self.exchanges.rearm(key);
        let held = self
            .usage
            .keep_answer((&mut self.exchanges, &mut self.clients), key, None);
        let Some(Ok(msg)) = held.as_deref().map(Message::parse) else {
            return self.finish(now, key);
        };
        let Some(x) = self.exchanges.get(key) else {
            return;
        };
        if self.gate.fits(x.client, msg.as_bytes().len()) {
            return self.send_answer(now, key, &msg, false, false);
        }
        if msg.option(BLOCK2).is_some() && !x.non_idempotent {
            // A block of a block-wise transfer (RFC 7959): 4.01 with an Echo value rather
            // than the block as a separate CON, which some clients do not follow up
            // (libcoap 4.3.1 ends the transfer there, and ignores pings).
            return self.challenge_for_proof(now, key);
        }
        self.send_answer(now, key, &msg, false, true);
    }

    /// 4.01 with an Echo value (RFC 9175 §2.4) as the answer of `key`, in place of one that
    /// is not sent: a client that implements Echo (libcoap, Californium) repeats the request
    /// with the value, which proves it, and the answer goes again from the upstream (or the
    /// cache). Only for safe and idempotent requests, which may be made twice (RFC 7252
    /// §5.1); the caller checks. The proxy keeps nothing for it: the value is a MAC of the
    /// client's address and the time (`validation.rs`).
    fn challenge_for_proof(&mut self, now: Timestamp, key: ExchangeKey) {
        let Some(x) = self.exchanges.get(key) else {
            return;
        };
        let token = x.client_token;
        let Some(addr) = x.client.claimed_address() else {
            return self.finish(now, key);
        };
        let echo = self.gate.validation().echo_value(now, addr);
        self.counters.proof.echo_challenges += 1;
        let answer = LocalAnswer {
            code: Code::UNAUTHORIZED,
            max_age: None,
            size1: None,
            echo: Some(echo),
            diagnostic: "",
        };
        let mut buf = Vec::with_capacity(32);
        encode_local(&mut buf, MessageType::Ack, 0, token.as_bytes(), &answer);
        match Message::parse(&buf) {
            Ok(msg) => self.send_answer(now, key, &msg, false, false),
            Err(_) => self.finish(now, key),
        }
    }
}
