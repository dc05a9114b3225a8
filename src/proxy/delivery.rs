//! The client leg's way out: answers to clients, piggybacked or separate, and the confirmable
//! ones retransmitted until acknowledged (RFC 7252 §4.2, §5.2).

use std::net::SocketAddr;

use rand::Rng;

use crate::coap::{empty_ack, params, rewrite, Message, MessageType};
use crate::time::Timestamp;

use super::engine::{Destination, Proxy};
use super::events::{ObserverLoss, ProxyEvent};
use super::exchange::{ClientDelivery, ExchangeKey, Reply, TimerKind};
use super::validation::ProvedBy;

impl Proxy {
    /// The client's CON request was not answered quickly: ACK it now, answer separately later.
    pub(super) fn send_empty_ack(&mut self, key: ExchangeKey) {
        let Some(x) = self.get_mut(key) else { return };
        x.reply = Reply::Separate;
        let (client, mid) = (x.client, x.client_mid);
        self.set_deadline(key, TimerKind::AckDelay, None);
        self.counters.empty_acks_sent += 1;
        self.out
            .push_encoded(Destination::Client(client), |b| empty_ack(b, mid));
    }

    /// Sends an answer to the client: piggybacked on the ACK while the client's CON is not yet
    /// acknowledged, otherwise as a separate CON (retransmitted until ACKed) or a NON.
    /// `msg` is a complete message whose type, MID and token are replaced here.
    /// `observing` keeps the exchange alive for notifications instead of finishing it.
    pub(super) fn answer_client(
        &mut self,
        now: Timestamp,
        key: ExchangeKey,
        msg: &Message,
        observing: bool,
    ) {
        let Some(x) = self.get(key) else { return };
        let (slot, token, client) = (x.client_slot, x.client_token, x.client);
        let (reply, client_mid) = (x.reply, x.client_mid);
        // Past an unproven client's allowance the answer goes as a CON, whose ACK proves the
        // client's address (`validation.rs`): after an empty ACK for a CON request (RFC 7252
        // §5.2.2), in place of a NON for a NON request (§5.2.3).
        let len = msg.as_bytes().len() - msg.token().len() + token.as_bytes().len();
        let confirm = reply != Reply::Separate && !self.out.fits(client, len);
        if confirm {
            self.counters.answers_made_confirmable += 1;
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
        self.send_to_client(now, key, ty, mid, &bytes);
        self.set_deadline(key, TimerKind::AckDelay, None);
        let delivering = self.get(key).is_some_and(|x| x.delivery.is_some());
        if observing || delivering {
            // Retransmitted or replayed later: the exchange keeps it.
            if let Some(x) = self.get_mut(key) {
                x.answer = Some(Box::from(&bytes[..]));
            }
        }
        match (observing, delivering) {
            (true, _) => self.start_observation(now, key, msg),
            (false, true) => self.finish(now, key),
            // Done: the answer goes straight to the cache, never boxed for the exchange.
            (false, false) => self.retire(now, key, Some(&bytes)),
        }
        self.scratch = bytes;
    }

    /// Sends a CON or NON to the client, tracking its MID for the ACK/RST; CON is retransmitted.
    ///
    /// A NON's MID is tracked only for an observation, where the client's RST cancels it
    /// (RFC 7641 §3.6); an RST to a plain NON answer would have nothing left to stop.
    pub(super) fn send_to_client(
        &mut self,
        now: Timestamp,
        key: ExchangeKey,
        ty: MessageType,
        mid: u16,
        bytes: &[u8],
    ) {
        let Some(x) = self.get(key) else { return };
        let (client, observe) = (x.client, x.wants_observe);
        if ty == MessageType::Non && observe {
            self.forget_non_mid(key);
            if let Some(x) = self.get_mut(key) {
                x.non_mid = Some(mid);
            }
        }
        if ty == MessageType::Con || (ty == MessageType::Non && observe) {
            self.by_client_mid.insert((client, mid), key);
        }
        if ty == MessageType::Con {
            self.cancel_delivery(key);
            // RFC 7252 §4.8: initial timeout uniform in [ACK_TIMEOUT, ACK_TIMEOUT * 1.5].
            let timeout =
                params::ACK_TIMEOUT.mul_f64(self.rng.random_range(1.0..params::ACK_RANDOM_FACTOR));
            self.set_deadline(key, TimerKind::ClientRetransmit, Some(now + timeout));
            if let Some(x) = self.get_mut(key) {
                x.delivery = Some(Box::new(ClientDelivery {
                    mid,
                    retransmits: 0,
                    timeout,
                }));
            }
        }
        match ty {
            MessageType::Con => self.out.push_con(Destination::Client(client), bytes, key),
            _ => self.out.push(Destination::Client(client), bytes),
        };
    }

    /// The retransmission timer of a CON to the client fired: send it again, or give up after
    /// MAX_RETRANSMIT (an answered exchange then retires).
    pub(super) fn retransmit_to_client(&mut self, now: Timestamp, key: ExchangeKey) {
        let Some(x) = self.get_mut(key) else { return };
        let Some(d) = x.delivery.as_mut() else { return };
        if d.retransmits >= params::MAX_RETRANSMIT {
            let mid = d.mid;
            x.delivery = None;
            let client = x.client;
            self.by_client_mid.remove(&(client, mid));
            self.out.validation_mut().delivery_ended(client, key);
            self.counters.client_delivery_failures += 1;
            self.events
                .push(ProxyEvent::ClientNeverAcked { client, mid });
            // RFC 7641 §4.5: a CON notification that times out ends its observation.
            self.observer_gone(now, key, ObserverLoss::NeverAcked);
            return self.delivered(now, key);
        }
        d.retransmits += 1;
        d.timeout *= 2;
        let timeout = d.timeout;
        self.set_deadline(key, TimerKind::ClientRetransmit, Some(now + timeout));
        self.counters.client_retransmissions += 1;
        self.resend_withheld(now, key);
    }

    /// Sends the CON an exchange is delivering (again): a retransmission, or one withheld
    /// from a client that has now proven its address (`validation.rs`).
    pub(super) fn resend_withheld(&mut self, _now: Timestamp, key: ExchangeKey) {
        let exchange = self.exchanges.get(key.index as usize);
        let Some(x) = exchange.filter(|x| x.generation == key.generation && x.delivery.is_some())
        else {
            return;
        };
        if let Some(answer) = x.answer.as_deref() {
            self.out
                .push_con(Destination::Client(x.client), answer, key);
        }
    }

    /// Queues bytes an exchange holds (its request or its answer) without copying them first.
    pub(super) fn push_from(
        &mut self,
        key: ExchangeKey,
        part: impl FnOnce(&super::exchange::Exchange) -> Option<(Destination, &[u8])>,
    ) {
        let exchange = self.exchanges.get(key.index as usize);
        if let Some((to, bytes)) = exchange.and_then(part) {
            self.out.push(to, bytes);
        }
    }

    /// Stops retransmitting to the client (ACK or RST arrived, or a newer message replaces it).
    pub(super) fn cancel_delivery(&mut self, key: ExchangeKey) {
        let Some(x) = self.get_mut(key) else { return };
        if let Some(d) = x.delivery.take() {
            let client = x.client;
            self.by_client_mid.remove(&(client, d.mid));
            self.out.validation_mut().delivery_ended(client, key);
            self.set_deadline(key, TimerKind::ClientRetransmit, None);
        }
    }

    /// The client acknowledged (or rejected) a confirmable answer or a notification.
    pub(super) fn on_client_ack_or_rst(&mut self, now: Timestamp, from: SocketAddr, msg: &Message) {
        let Some(&key) = self.by_client_mid.get(&(from, msg.message_id())) else {
            self.counters.unmatched_client += 1;
            self.out.validation_mut().wrong_proof(now, from);
            return;
        };
        self.by_client_mid.remove(&(from, msg.message_id()));
        // It carries a Message ID the proxy chose: the client receives at its address.
        self.source_proved(now, from, ProvedBy::Ack);
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
    }

    /// Unmaps the latest NON to the client: superseded, or the exchange is going away.
    pub(super) fn forget_non_mid(&mut self, key: ExchangeKey) {
        let Some(x) = self.get_mut(key) else { return };
        if let Some(mid) = x.non_mid.take() {
            let id = (x.client, mid);
            if self.by_client_mid.get(&id) == Some(&key) {
                self.by_client_mid.remove(&id);
            }
        }
    }
}
