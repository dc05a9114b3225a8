//! One proxied exchange: everything the proxy remembers about a client request.

use crate::coap::MessageType;
use crate::time::Timestamp;
use crate::timer::TimerId;

use super::cache_use::CacheUse;
use super::clients::ClientSlot;
use super::endpoints::{EndpointId, UpstreamId};
use super::peer::Peer;

/// Names one exchange; a timer or map entry holding a key for a freed or reused slot is
/// recognised by its generation and ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExchangeKey {
    pub index: u32,
    pub generation: u32,
}

/// A CoAP token (0..=8 bytes, RFC 7252 §5.3.1) stored inline; named apart from the
/// reactor's `mio::Token`, which names a socket registration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CoapToken {
    bytes: [u8; 8],
    len: u8,
}

impl CoapToken {
    /// `None` if longer than 8 bytes (the codec already rejects those).
    pub fn new(t: &[u8]) -> Option<CoapToken> {
        let mut bytes = [0; 8];
        bytes.get_mut(..t.len())?.copy_from_slice(t);
        Some(CoapToken {
            bytes,
            len: t.len() as u8,
        })
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }
}

/// Where an exchange is in its life, with what only that part of its life has, deadlines
/// included: a timer exists only inside the state it acts in, so one for a state that has
/// ended cannot be written (as h2's stream `Inner` and quinn-proto's `State`). A deadline is
/// `None` once it fired and until its state arms the next.
#[derive(Debug)]
pub enum State {
    /// Sent upstream, not acknowledged yet.
    Waiting {
        /// The open leg.
        leg: UpstreamLeg,
        /// The next transmission, per the retry policy (past the last retry: the give-up).
        resend_at: Option<Timestamp>,
    },
    /// The upstream sent an empty ACK: its separate response is awaited until the total
    /// timeout (`leg.give_up_at`).
    AwaitingSeparate(UpstreamLeg),
    /// A registration succeeded: upstream notifications are relayed (RFC 7641).
    Observing(Relay),
    /// Answered or given up, and the answer went as a CON the client has not acknowledged
    /// yet: it is retransmitted until it does (RFC 7252 §4.2). Nothing goes upstream again.
    /// Once delivered the exchange leaves, and its answer waits in the answer cache.
    Answered,
    /// The answer (in `answer`, encoded as it would go: on the ACK or as a NON) is more than
    /// the client's address may be sent before it proves it receives there
    /// (`validation.rs`): the proxy has pinged the client, and the answer goes as it is
    /// when the client's RST proves the address, or as a CON asking for the proof.
    AwaitingProof {
        /// When the wait for the proof ends (`PROOF_WAIT` in `engine.rs`).
        until: Option<Timestamp>,
    },
}

/// The upstream leg while it is open (`Waiting`, `AwaitingSeparate`): from the first send
/// until an answer or a give-up closes it.
#[derive(Debug)]
pub struct UpstreamLeg {
    /// The request's Message ID on the exchange's endpoint, mapped in the upstream MID index
    /// while the leg is open.
    pub mid: u16,
    /// Transmissions upstream so far (1 = only the first send).
    pub attempts: u32,
    /// The request as sent upstream, kept while it may be retransmitted (`None` before the
    /// first send, and from the upstream's empty ACK on). Its buffer is one of the spare
    /// buffers of `limits.rs`, and goes back there when the leg closes: a request then costs
    /// no allocation.
    pub request: Option<Vec<u8>>,
    /// The retry policy's total timeout: the proxy gives up with 5.04 then.
    pub give_up_at: Option<Timestamp>,
}

/// An observation being relayed (RFC 7641).
#[derive(Debug)]
pub struct Relay {
    /// The last relayed notification's Observe sequence number and arrival (§3.4).
    pub last_notification: (u32, Timestamp),
    /// Notifications sent as NON since the last CON one, and when that CON went (the
    /// registration's answer counts as one): see the Observe relay in `upstream_leg.rs`, §4.5.
    pub since_con: (u32, Timestamp),
    /// The latest notification's Max-Age and a margin past it: with no newer one by then the
    /// observation is dead upstream.
    pub stale_at: Option<Timestamp>,
}

impl State {
    /// A new upstream leg, its request going out with Message ID `mid` now and given up at
    /// `give_up_at`.
    pub(super) fn waiting(mid: u16, now: Timestamp, give_up_at: Timestamp) -> State {
        State::Waiting {
            leg: UpstreamLeg {
                mid,
                attempts: 0,
                request: None,
                give_up_at: Some(give_up_at),
            },
            resend_at: Some(now),
        }
    }

    /// The upstream leg, while it is open.
    pub(super) fn leg(&self) -> Option<&UpstreamLeg> {
        match self {
            State::Waiting { leg, .. } | State::AwaitingSeparate(leg) => Some(leg),
            _ => None,
        }
    }

    pub(super) fn leg_mut(&mut self) -> Option<&mut UpstreamLeg> {
        match self {
            State::Waiting { leg, .. } | State::AwaitingSeparate(leg) => Some(leg),
            _ => None,
        }
    }

    /// The relay, while observing.
    pub(super) fn relay(&self) -> Option<&Relay> {
        match self {
            State::Observing(relay) => Some(relay),
            _ => None,
        }
    }

    pub(super) fn relay_mut(&mut self) -> Option<&mut Relay> {
        match self {
            State::Observing(relay) => Some(relay),
            _ => None,
        }
    }
}

/// What a deadline is for. When several fall due at once they act in this order (a give-up
/// first, so no copy goes upstream at the instant the exchange gives up).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerKind {
    /// Give up on the upstream with 5.04 (`UpstreamLeg::give_up_at`).
    TotalTimeout,
    /// Send the request upstream again (`State::Waiting`'s `resend_at`).
    UpstreamRetransmit,
    /// Stop holding the client's ACK for a piggybacked answer: send an empty ACK
    /// (`Reply::Piggyback`'s `ack_by`).
    AckDelay,
    /// Retransmit a confirmable answer to the client (`ClientDelivery::next_at`).
    ClientRetransmit,
    /// An observation got no notification for too long (`Relay::stale_at`).
    ObserveStale,
    /// Stop waiting for the client's proof of address: send the held answer as a CON
    /// (`State::AwaitingProof`'s `until`).
    ProofWait,
}

/// How the client's request gets its answer (RFC 7252 §5.2); it decides the answer's type
/// and Message ID. Only a CON moves, once, from `Piggyback` to `Separate`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// A peer without a message layer (RFC 8323 §2.2, §3.2; [`Peer::has_message_layer`]):
    /// its transport delivers what it is handed, so the answer (and each notification) is
    /// handed over once, with the placeholder header [`RELIABLE_HEADER`], nothing is
    /// acknowledged, retransmitted or kept for a replay, and the exchange retires as soon
    /// as its answer is handed over (an observation stays until it ends).
    Reliable,
    /// A CON not acknowledged yet: the answer rides on its ACK, with the client's MID
    /// (§5.2.1), if it comes in time.
    Piggyback {
        /// Past this (`--ack-delay`) the client gets an empty ACK, and the answer follows.
        ack_by: Option<Timestamp>,
    },
    /// A CON we acknowledged with an empty ACK: the answer travels as a separate CON with a
    /// MID of ours (§5.2.2).
    Separate,
    /// A NON: the answer is a NON with a MID of ours (§5.2.3); nothing is acknowledged.
    Non,
}

/// The type and Message ID in the header of every message to a peer without a message
/// layer ([`Reply::Reliable`]): the engine's layout has both, RFC 8323 has neither (§3.2),
/// so they mean nothing, and the peer's transport drops them when it frames the message.
pub(super) const RELIABLE_HEADER: (MessageType, u16) = (MessageType::Non, 0);

/// A confirmable message to the client being retransmitted until ACK or RST (RFC 7252 §4.2).
#[derive(Debug)]
pub struct ClientDelivery {
    pub mid: u16,
    /// Transmissions that went; one withheld from a client that has not proven its address
    /// (`validation.rs`) does not count, so that each answer still gets its
    /// 1 + MAX_RETRANSMIT chances once it may go.
    pub sent: u32,
    /// The current retransmission timeout, doubled at each attempt (RFC 7252 §4.2).
    pub timeout: std::time::Duration,
    /// The first attempt: past EXCHANGE_LIFETIME from it the delivery gives up, however few
    /// transmissions went.
    pub since: Timestamp,
    /// The next retransmission (or the give-up).
    pub next_at: Option<Timestamp>,
}

/// What an exchange whose request asked to observe (RFC 7641) has, in any state: from the
/// registration's answer on, the client's RST to a NON notification ends it (§3.6), and an
/// observation may share its upstream registration with other observers (§5, `fanout.rs`).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Observer {
    /// The group of observers of one resource it belongs to, if any.
    pub group: Option<GroupId>,
    /// The Message ID of the latest NON to the client, mapped for the client's RST until the
    /// next one replaces it or the exchange goes.
    pub non_mid: Option<u16>,
}

/// Per-exchange state. See the module docs of [`super`] for its life cycle.
#[derive(Debug)]
pub struct Exchange {
    pub generation: u32,
    pub state: State,
    pub client: Peer,
    /// The client's entry (its numbering of our MIDs, its in-flight count), held by reference.
    pub client_slot: ClientSlot,
    pub client_mid: u16,
    pub client_token: CoapToken,
    /// Piggybacked, separate or NON: see [`Reply`].
    pub reply: Reply,
    pub upstream: UpstreamId,
    /// The endpoint the request left from: its answers, ACKs and notifications come back there.
    pub endpoint: EndpointId,
    pub upstream_token: CoapToken,
    /// Which of the configured retry policies applies: POST/PATCH/iPATCH use the
    /// non-idempotent one (see `Proxy::policy_of` in `engine.rs`). A flag rather than a copy
    /// of the policy keeps the exchange small.
    pub non_idempotent: bool,
    /// The latest answer sent to the client, kept when it may be sent again (a CON being
    /// retransmitted, an observation's latest notification) and given to the answer cache
    /// when the exchange leaves; `None` while there is none to repeat.
    pub answer: Option<Box<[u8]>>,
    /// Boxed: only separate CON answers have one, so the common exchange pays one pointer.
    pub delivery: Option<Box<ClientDelivery>>,
    /// The engine's wheel timer for this exchange and its instant, while armed: at the
    /// earliest of its deadlines (`Exchange::next_deadline`).
    pub wheel: Option<(TimerId, Timestamp)>,
    /// What the response cache does with the answer, if anything (`caching.rs`).
    pub cache: Option<Box<CacheUse>>,
    /// Observe (RFC 7641): `Some` if the request asked to register (Observe: 0).
    pub observe: Option<Observer>,
}

impl Exchange {
    /// A new client request going to `endpoint`, with nothing sent upstream yet (and no
    /// deadline for a CON's piggybacked answer: the caller sets one if it waits for one).
    /// How it is answered follows the client's type, unless the client has no message
    /// layer: then the type (and Message ID) is a placeholder, and the reply is
    /// [`Reply::Reliable`].
    pub fn new(
        generation: u32,
        state: State,
        (client, client_slot): (Peer, ClientSlot),
        (client_mid, client_token, client_type): (u16, CoapToken, MessageType),
        (upstream, endpoint): (UpstreamId, EndpointId),
        non_idempotent: bool,
    ) -> Exchange {
        Exchange {
            generation,
            state,
            client,
            client_slot,
            client_mid,
            client_token,
            reply: match (client.has_message_layer(), client_type) {
                (false, _) => Reply::Reliable,
                (true, MessageType::Con) => Reply::Piggyback { ack_by: None },
                (true, _) => Reply::Non,
            },
            upstream,
            endpoint,
            upstream_token: CoapToken::default(),
            non_idempotent,
            answer: None,
            delivery: None,
            wheel: None,
            cache: None,
            observe: None,
        }
    }

    /// Whether the upstream leg is still open (a retransmission or the total timeout matters).
    pub fn upstream_pending(&self) -> bool {
        self.state.leg().is_some()
    }

    /// The earliest deadline, if any: where its wheel timer belongs. (Run at every change of
    /// a deadline, so written out rather than as a minimum over [`Exchange::deadlines`].)
    #[inline]
    pub fn next_deadline(&self) -> Option<Timestamp> {
        let state = match &self.state {
            State::Waiting { leg, resend_at } => earliest(leg.give_up_at, *resend_at),
            State::AwaitingSeparate(leg) => leg.give_up_at,
            State::Observing(relay) => relay.stale_at,
            State::AwaitingProof { until } => *until,
            State::Answered => None,
        };
        let ack = match self.reply {
            Reply::Piggyback { ack_by } => ack_by,
            _ => None,
        };
        let retransmit = self.delivery.as_ref().and_then(|d| d.next_at);
        earliest(earliest(state, ack), retransmit)
    }

    /// The earliest deadline due at `now` (ties in [`TimerKind`] order) and its instant,
    /// cleared: the state it belongs to is there to act on, and arms the next itself.
    pub fn take_due(&mut self, now: Timestamp) -> Option<(TimerKind, Timestamp)> {
        let at = self.next_deadline().filter(|&at| at <= now)?;
        let Exchange {
            state,
            reply,
            delivery,
            ..
        } = self;
        let (give_up, resend, stale, proof) = match state {
            State::Waiting { leg, resend_at } => {
                (Some(&mut leg.give_up_at), Some(resend_at), None, None)
            }
            State::AwaitingSeparate(leg) => (Some(&mut leg.give_up_at), None, None, None),
            State::Observing(relay) => (None, None, Some(&mut relay.stale_at), None),
            State::AwaitingProof { until } => (None, None, None, Some(until)),
            State::Answered => (None, None, None, None),
        };
        let ack = match reply {
            Reply::Piggyback { ack_by } => Some(ack_by),
            _ => None,
        };
        let retransmit = delivery.as_mut().map(|d| &mut d.next_at);
        let slots = [
            (TimerKind::TotalTimeout, give_up),
            (TimerKind::UpstreamRetransmit, resend),
            (TimerKind::AckDelay, ack),
            (TimerKind::ClientRetransmit, retransmit),
            (TimerKind::ObserveStale, stale),
            (TimerKind::ProofWait, proof),
        ];
        let (kind, slot) = (slots.into_iter())
            .find_map(|(kind, slot)| Some((kind, slot.filter(|s| **s == Some(at))?)))?;
        *slot = None;
        Some((kind, at))
    }
}

/// The earlier of two deadlines, either of which may be unset.
#[inline]
fn earliest(a: Option<Timestamp>, b: Option<Timestamp>) -> Option<Timestamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

/// An observe group (`fanout.rs`), as a member exchange names the one it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct GroupId(pub(super) u32);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::engine::clients::tests::some_slot;
    use std::time::Duration;

    fn at(ms: u64) -> Timestamp {
        Timestamp::ZERO + Duration::from_millis(ms)
    }

    fn con_waiting() -> Exchange {
        let peer = Peer::Udp("127.0.0.1:40000".parse().unwrap());
        let client = (1, CoapToken::default(), MessageType::Con);
        let state = State::waiting(5, at(0), at(1_000));
        let mut x = Exchange::new(
            1,
            state,
            (peer, some_slot()),
            client,
            (0, EndpointId(0)),
            false,
        );
        x.reply = Reply::Piggyback {
            ack_by: Some(at(1_000)),
        };
        x
    }

    #[test]
    fn a_deadline_goes_with_the_state_it_belongs_to() {
        let mut x = con_waiting();
        assert_eq!(
            x.take_due(at(0)),
            Some((TimerKind::UpstreamRetransmit, at(0)))
        );
        assert_eq!(
            x.take_due(at(0)),
            None,
            "taken, until the leg arms the next"
        );
        if let State::Waiting { resend_at, .. } = &mut x.state {
            *resend_at = Some(at(300));
        }
        // The upstream's empty ACK: the retransmission goes with `Waiting`, the give-up stays.
        let State::Waiting { leg, .. } = std::mem::replace(&mut x.state, State::Answered) else {
            unreachable!()
        };
        x.state = State::AwaitingSeparate(leg);
        assert_eq!(x.next_deadline(), Some(at(1_000)));
        // Ties act in `TimerKind` order: the give-up before the empty ACK.
        assert_eq!(
            x.take_due(at(5_000)),
            Some((TimerKind::TotalTimeout, at(1_000)))
        );
        assert_eq!(
            x.take_due(at(5_000)),
            Some((TimerKind::AckDelay, at(1_000)))
        );
        // Answered with the ACK on its way: nothing of the upstream leg can fire any more.
        x.state = State::Answered;
        x.reply = Reply::Separate;
        assert_eq!(
            (x.next_deadline(), x.take_due(at(u64::MAX / 2_000_000))),
            (None, None)
        );
    }
}
