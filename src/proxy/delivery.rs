//! The client leg's way out: answers to clients, piggybacked or separate, and the confirmable
//! ones retransmitted until acknowledged (RFC 7252 §4.2, §5.2).

use crate::coap::option::BLOCK2;
use crate::coap::{empty_ack, ping, rewrite, Code, Message, MessageType};
use crate::time::Timestamp;

use super::clients::ClientSlot;
use super::deliveries::Retransmitted;
use super::engine::{Destination, LastAnswer, Proxy};
use super::events::{ObserverLoss, ProxyEvent};
use super::exchange::{ExchangeKey, Reply, State, TimerKind};
use super::gate::Charge;
use super::local_answer::{encode_local, LocalAnswer};
use super::peer::Peer;
use super::validation::{ProvedBy, MAX_HELD_BYTES, MAX_HELD_BYTES_TOTAL, PROOF_WAIT};

impl Proxy {
    /// The client's CON request was not answered quickly: ACK it now, answer separately later.
    pub(super) fn send_empty_ack(&mut self, key: ExchangeKey) {
        let Some(x) = self.get_mut(key) else { return };
        x.reply = Reply::Separate;
        let (client, mid) = (x.client, x.client_mid);
        self.set_deadline(key, TimerKind::AckDelay, None);
        self.counters.traffic.empty_acks_sent += 1;
        self.gate
            .send_encoded(Charge::Relayed, Destination::Client(client), |b| {
                empty_ack(b, mid)
            });
    }

    /// Sends an answer to the client: piggybacked on the ACK while the client's CON is not yet
    /// acknowledged, otherwise as a separate CON (retransmitted until ACKed) or a NON.
    /// `msg` is a complete message whose type, MID and token are replaced here.
    /// `observing` keeps the exchange alive for notifications instead of finishing it.
    ///
    /// An answer past what the client's address may be sent before it proves it receives
    /// there (`validation.rs`) is held, and the client pinged: its RST proves the address
    /// and the answer goes as it would have (piggybacked or NON) one round trip later. A
    /// registration's answer is not held: it goes as a CON asking for the proof at once.
    pub(super) fn answer_client(
        &mut self,
        now: Timestamp,
        key: ExchangeKey,
        msg: &Message,
        observing: bool,
    ) {
        let Some(x) = self.get(key) else { return };
        let len = msg.as_bytes().len() - msg.token().len() + x.client_token.as_bytes().len();
        let fits = x.reply == Reply::Separate || self.gate.fits(x.client, len);
        let slot = x.client_slot;
        match (fits, observing) {
            (true, _) => self.send_answer(now, key, msg, observing, false),
            (false, true) => self.send_answer(now, key, msg, observing, true),
            (false, false) if self.room_to_hold(slot, len) => self.hold_for_proof(now, key, msg),
            (false, false) => self.refuse_for_proof_backlog(now, key),
        }
    }

    /// Whether `len` more bytes may wait for the proof of the client in `slot`: what its
    /// exchanges keep, and what all exchanges keep, stay within the bounds of `validation.rs`.
    /// What they keep includes their withheld CONs, so the bound covers an answer's whole
    /// wait, not only its first second.
    fn room_to_hold(&self, slot: ClientSlot, len: usize) -> bool {
        self.clients.answer_bytes(slot) + len <= MAX_HELD_BYTES
            && self.usage.answer_bytes() + len <= MAX_HELD_BYTES_TOTAL
    }

    /// No room to keep the answer until the client proves its address: a 5.03 with Max-Age
    /// instead (RFC 7252 §5.9.3.4), small enough for its allowance, so that a real client
    /// retries after it proved itself, and a spoofed one costs the proxy no memory.
    fn refuse_for_proof_backlog(&mut self, now: Timestamp, key: ExchangeKey) {
        let Some(x) = self.get(key) else { return };
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
        let Some(x) = self.get(key) else { return };
        let (client, slot, token) = (x.client, x.client_slot, x.client_token);
        // Encoded as it will most likely go (on the ACK, or as a NON whose MID is drawn
        // when it goes); `send_answer` rewrites type, MID and token anyway.
        let ty = match x.reply {
            Reply::Piggyback => MessageType::Ack,
            _ => MessageType::Non,
        };
        let mut bytes = Vec::with_capacity(msg.as_bytes().len());
        let ids = (ty, x.client_mid, token.as_bytes());
        let copy = |b: &mut crate::coap::MessageBuilder, n, v: &[u8]| _ = b.option(n, v);
        if rewrite(&mut bytes, msg, ids, copy).finish().is_err() {
            return self.finish(now, key);
        }
        if let Some(x) = self.get_mut(key) {
            x.state = State::AwaitingProof;
        }
        self.usage.keep_answer(
            (&mut self.exchanges, &mut self.clients),
            key,
            Some(bytes.into_boxed_slice()),
        );
        self.counters.proof.answers_held_for_proof += 1;
        self.set_deadline(key, TimerKind::AckDelay, None);
        self.set_deadline(key, TimerKind::ProofWait, Some(now + PROOF_WAIT));
        // Only a claimed address is held to its allowance, and so waits for a proof here.
        let Some(addr) = client.claimed_address() else {
            return;
        };
        self.gate.validation_mut().hold(addr, key);
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
        let Some(x) = self
            .get_mut(key)
            .filter(|x| matches!(x.state, State::AwaitingProof))
        else {
            return;
        };
        x.state = State::Answered;
        let held = self
            .usage
            .keep_answer((&mut self.exchanges, &mut self.clients), key, None);
        self.set_deadline(key, TimerKind::ProofWait, None);
        let Some(Ok(msg)) = held.as_deref().map(Message::parse) else {
            return self.finish(now, key);
        };
        let Some(x) = self.get(key) else { return };
        if self.gate.fits(x.client, msg.as_bytes().len()) {
            return self.send_answer(now, key, &msg, false, false);
        }
        if msg.option(BLOCK2).is_some() && !x.non_idempotent {
            return self.challenge_block_transfer(now, key);
        }
        self.send_answer(now, key, &msg, false, true);
    }

    /// A block of a block-wise transfer (RFC 7959) to a client that did not answer the ping:
    /// 4.01 with an Echo value (RFC 9175 §2.4) rather than the block as a separate CON,
    /// which some clients do not follow up (libcoap 4.3.1 ends the transfer there, and
    /// ignores pings). Such clients repeat the request with the Echo value, which proves
    /// them, and the block goes again from the upstream (or the cache): only for safe and
    /// idempotent requests, which may be made twice (RFC 7252 §5.1).
    fn challenge_block_transfer(&mut self, now: Timestamp, key: ExchangeKey) {
        let Some(x) = self.get(key) else { return };
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

    /// Sends the answer (see [`answer_client`](Self::answer_client)); `confirm`: as a CON,
    /// whose ACK proves the client's address, since it is past the client's allowance:
    /// after an empty ACK for a CON request (RFC 7252 §5.2.2), in place of a NON for a NON
    /// request (§5.2.3).
    fn send_answer(
        &mut self,
        now: Timestamp,
        key: ExchangeKey,
        msg: &Message,
        observing: bool,
        confirm: bool,
    ) {
        let Some(x) = self.get(key) else { return };
        let (slot, token) = (x.client_slot, x.client_token);
        let (reply, client_mid) = (x.reply, x.client_mid);
        if confirm {
            self.counters.proof.answers_made_confirmable += 1;
            if reply == Reply::Piggyback {
                self.send_empty_ack(key);
            }
        }
        let (ty, mid) = match (reply, confirm) {
            (Reply::Piggyback, false) => (MessageType::Ack, client_mid),
            (Reply::Non, false) => (MessageType::Non, self.clients.fresh_mid(slot)),
            _ => (MessageType::Con, self.clients.fresh_mid(slot)),
        };
        let mut bytes = std::mem::take(&mut self.scratch);
        let encoded = rewrite(&mut bytes, msg, (ty, mid, token.as_bytes()), |b, n, v| {
            b.option(n, v);
        })
        .finish();
        if encoded.is_err() {
            // Cannot happen for parsed input; finish anyway so no state is left behind.
            self.scratch = bytes;
            return self.finish(now, key);
        }
        let queued = self.send_to_client(now, key, ty, mid, &bytes);
        self.set_deadline(key, TimerKind::AckDelay, None);
        let delivering = self.get(key).is_some_and(|x| x.delivery.is_some());
        if observing || delivering {
            // Retransmitted or replayed later: the exchange keeps it.
            self.usage.keep_answer(
                (&mut self.exchanges, &mut self.clients),
                key,
                Some(Box::from(&bytes[..])),
            );
        }
        match (observing, delivering) {
            (true, _) => self.start_observation(now, key, msg),
            (false, true) => self.finish(now, key),
            // Done: the answer goes straight to the cache, never boxed for the exchange; one
            // the outbox did not queue (over the client's send rate) is not kept.
            (false, false) => {
                let last = match queued {
                    true => LastAnswer::Queued(&bytes),
                    false => LastAnswer::NotQueued,
                };
                self.retire(now, key, last);
            }
        }
        self.scratch = bytes;
    }

    /// The retransmission timer of a CON to the client fired: sent again, or given up after
    /// MAX_RETRANSMIT (an answered exchange then retires).
    pub(super) fn retransmit_to_client(&mut self, now: Timestamp, key: ExchangeKey) {
        let wire = (&mut self.exchanges, &mut self.gate);
        match self.deliveries.retransmit(wire, now, key) {
            Retransmitted::Nothing | Retransmitted::Sent { again: false } => {}
            Retransmitted::Sent { again: true } => {
                self.counters.traffic.client_retransmissions += 1;
            }
            Retransmitted::GaveUp { client, mid } => {
                self.counters.traffic.client_delivery_failures += 1;
                self.events
                    .push(ProxyEvent::ClientNeverAcked { client, mid });
                // RFC 7641 §4.5: a CON notification that times out ends its observation.
                self.observer_gone(now, key, ObserverLoss::NeverAcked);
                self.delivered(now, key);
            }
        }
    }

    /// Sends a CON or NON to the client (see [`super::deliveries::Deliveries::send`]).
    pub(super) fn send_to_client(
        &mut self,
        now: Timestamp,
        key: ExchangeKey,
        ty: MessageType,
        mid: u16,
        bytes: &[u8],
    ) -> bool {
        let wire = (&mut self.exchanges, &mut self.gate);
        (self.deliveries).send(wire, &mut self.rng, now, key, (ty, mid, bytes))
    }

    /// What was withheld from a client that has now proven its address (`validation.rs`)
    /// goes: a held answer, or the CON being delivered.
    pub(super) fn resend_withheld(&mut self, now: Timestamp, key: ExchangeKey) {
        match self
            .get(key)
            .map(|x| matches!(x.state, State::AwaitingProof))
        {
            Some(true) => self.release_held(now, key),
            Some(false) => (self.deliveries).resend((&mut self.exchanges, &mut self.gate), key),
            None => {}
        }
    }

    /// Queues bytes an exchange holds (its request or its answer) without copying them first.
    pub(super) fn push_from(
        &mut self,
        key: ExchangeKey,
        part: impl FnOnce(&super::exchange::Exchange) -> Option<(Destination, &[u8])>,
    ) {
        if let Some((to, bytes)) = self.exchanges.get(key).and_then(part) {
            self.gate.send(Charge::Relayed, to, bytes);
        }
    }

    /// Stops retransmitting to the client (ACK or RST arrived, or a newer message replaces it).
    pub(super) fn cancel_delivery(&mut self, key: ExchangeKey) {
        (self.deliveries).cancel((&mut self.exchanges, &mut self.gate), key);
    }

    /// The client acknowledged (or rejected) a confirmable answer or a notification.
    pub(super) fn on_client_ack_or_rst(&mut self, now: Timestamp, from: Peer, msg: &Message) {
        if self.gate.answers_ping(from, msg.message_id()) {
            // The RST to our ping (`hold_for_proof`): the client receives at its address.
            return self.source_proved(now, from, ProvedBy::Ack);
        }
        let Some(key) = self.deliveries.answered_by(from, msg.message_id()) else {
            self.counters.strays.unmatched_client += 1;
            self.gate.wrong_proof(from);
            return;
        };
        let delivering = self
            .get(key)
            .and_then(|x| x.delivery.as_ref())
            .map(|d| d.mid);
        if delivering == Some(msg.message_id()) {
            self.cancel_delivery(key);
            self.delivered(now, key);
        }
        // RFC 7641 §3.6: an RST in reply to a notification cancels the observation.
        if msg.msg_type() == MessageType::Rst {
            self.observer_gone(now, key, ObserverLoss::Reset);
        }
        // It carries a Message ID the proxy chose: the client receives at its address. Last,
        // so that what this message settled is not among what the proof sends again.
        self.source_proved(now, from, ProvedBy::Ack);
    }
}
