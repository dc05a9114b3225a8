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

/// Where an exchange is in its life, with what only that part of its life has. Every timer
/// checks this first, and what a timer acts on exists only in the state it acts in: a
/// retransmission finds its request and attempt count in `Waiting`, or nothing.
#[derive(Debug)]
pub enum State {
    /// Sent upstream, not acknowledged yet: retransmitted per the retry policy.
    Waiting(UpstreamLeg),
    /// The upstream sent an empty ACK: its separate response is awaited until the total timeout.
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
    /// when the client's RST proves the address, or as a CON asking for the proof at the
    /// `ProofWait` deadline.
    AwaitingProof,
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
}

/// An observation being relayed (RFC 7641).
#[derive(Debug)]
pub struct Relay {
    /// The last relayed notification's Observe sequence number and arrival (§3.4).
    pub last_notification: (u32, Timestamp),
    /// Notifications sent as NON since the last CON one, and when that CON went (the
    /// registration's answer counts as one): see the Observe relay in `upstream_leg.rs`, §4.5.
    pub since_con: (u32, Timestamp),
}

impl State {
    /// A new upstream leg, its request going out with Message ID `mid`.
    pub(super) fn waiting(mid: u16) -> State {
        State::Waiting(UpstreamLeg {
            mid,
            attempts: 0,
            request: None,
        })
    }

    /// The upstream leg, while it is open.
    pub(super) fn leg(&self) -> Option<&UpstreamLeg> {
        match self {
            State::Waiting(leg) | State::AwaitingSeparate(leg) => Some(leg),
            _ => None,
        }
    }

    pub(super) fn leg_mut(&mut self) -> Option<&mut UpstreamLeg> {
        match self {
            State::Waiting(leg) | State::AwaitingSeparate(leg) => Some(leg),
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
    /// Give up on the upstream with 5.04 (acts only while `Waiting` or `AwaitingSeparate`).
    TotalTimeout,
    /// Retransmit the request upstream (acts only while `Waiting`).
    UpstreamRetransmit,
    /// Stop holding the client's ACK for a piggybacked answer: send an empty ACK.
    AckDelay,
    /// Retransmit a confirmable answer to the client.
    ClientRetransmit,
    /// An observation got no notification for too long.
    ObserveStale,
    /// Stop waiting for the client's proof of address: send the held answer as a CON
    /// (acts only while `AwaitingProof`).
    ProofWait,
}

impl TimerKind {
    const ALL: [TimerKind; 6] = [
        TimerKind::TotalTimeout,
        TimerKind::UpstreamRetransmit,
        TimerKind::AckDelay,
        TimerKind::ClientRetransmit,
        TimerKind::ObserveStale,
        TimerKind::ProofWait,
    ];
}

/// An exchange's deadlines, one per [`TimerKind`], behind a single timer in the engine's
/// wheel at the earliest of them (as quinn-proto's `TimerTable`). Setting a deadline later
/// than that timer, or clearing one, touches no wheel: the timer fires, finds nothing due and
/// is armed again for what is left. A request answered at once so costs one timer, not three.
#[derive(Debug)]
pub struct Deadlines {
    /// By kind; [`UNSET`] where none is pending (8 bytes a slot, not 16 for an `Option`).
    at: [Timestamp; 6],
    /// The wheel timer and its instant, while armed.
    pub wheel: Option<(TimerId, Timestamp)>,
}

/// The end of time: a deadline there would never fire, so it stands for "none".
const UNSET: Timestamp = Timestamp::from_nanos(u64::MAX);

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            at: [UNSET; 6],
            wheel: None,
        }
    }
}

impl Deadlines {
    pub fn set(&mut self, kind: TimerKind, at: Option<Timestamp>) {
        self.at[kind as usize] = at.unwrap_or(UNSET);
    }

    /// The earliest deadline, if any.
    pub fn next(&self) -> Option<Timestamp> {
        let earliest = self.at.iter().copied().min().unwrap_or(UNSET);
        (earliest != UNSET).then_some(earliest)
    }

    /// The earliest deadline due at `now` (ties in [`TimerKind`] order) and its instant,
    /// cleared.
    pub fn take_due(&mut self, now: Timestamp) -> Option<(TimerKind, Timestamp)> {
        let (kind, at) = (TimerKind::ALL.into_iter())
            .map(|k| (k, self.at[k as usize]))
            .filter(|&(_, t)| t != UNSET && t <= now)
            .min_by_key(|&(_, t)| t)?;
        self.at[kind as usize] = UNSET;
        Some((kind, at))
    }
}

/// How the client's request gets its answer (RFC 7252 §5.2); it decides the answer's type
/// and Message ID. Only a CON moves, once, from `Piggyback` to `Separate`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// A CON not acknowledged yet: the answer rides on its ACK, with the client's MID (§5.2.1).
    Piggyback,
    /// A CON we acknowledged with an empty ACK: the answer travels as a separate CON with a
    /// MID of ours (§5.2.2).
    Separate,
    /// A NON: the answer is a NON with a MID of ours (§5.2.3); nothing is acknowledged.
    Non,
}

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
    pub since: crate::time::Timestamp,
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
    /// Its pending deadlines (retransmissions, give-up, ack delay, staleness).
    pub deadlines: Deadlines,
    /// What the response cache does with the answer, if anything (`caching.rs`).
    pub cache: Option<Box<CacheUse>>,
    /// Observe (RFC 7641): `Some` if the request asked to register (Observe: 0).
    pub observe: Option<Observer>,
}

impl Exchange {
    /// A new client request going to `endpoint`, with nothing sent upstream yet.
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
            reply: match client_type {
                MessageType::Con => Reply::Piggyback,
                _ => Reply::Non,
            },
            upstream,
            endpoint,
            upstream_token: CoapToken::default(),
            non_idempotent,
            answer: None,
            delivery: None,
            deadlines: Deadlines::default(),
            cache: None,
            observe: None,
        }
    }

    /// Whether the upstream leg is still open (a retransmission or the total timeout matters).
    pub fn upstream_pending(&self) -> bool {
        self.state.leg().is_some()
    }
}

/// An observe group (`fanout.rs`), as a member exchange names the one it belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct GroupId(pub(super) u32);
