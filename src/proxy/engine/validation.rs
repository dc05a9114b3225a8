//! Address validation by proof of receipt, always on (RFC 7252 §11.3, RFC 9175 §2.4, and
//! QUIC's rule, RFC 9000 §8.1). A UDP request's source can be forged, so until a source has
//! shown that it receives at the address it claims, the proxy sends it at most 3 times the
//! bytes it has received from it, plus one datagram: the confirmable message that asks for
//! the proof.
//!
//! A source proves receipt by doing what a blind spoofer cannot:
//! - acknowledging or resetting a message the proxy sent it (the ACK or RST carries the
//!   Message ID the proxy chose, RFC 7252 §4.2, §4.3);
//! - repeating an Echo value the proxy issued to it (RFC 9175 §2.4, `--validate-sources`).
//!
//! An answer that would go over the allowance is never dropped silently: the engine sends it
//! as a CON (a separate response after an empty ACK for a CON request, a CON response for a
//! NON one, RFC 7252 §5.2.2, §5.2.3), whose ACK proves the source. One such CON is out per
//! unproven source at a time (the "probe", NSTART = 1, §4.7); the others are withheld, as a
//! lossy network would hold them, and go the moment the proof arrives, or at their own
//! retransmission (a withheld transmission does not count among a CON's 1 + MAX_RETRANSMIT).
//! A spoofed victim so receives one datagram over the allowance, and no more while that CON
//! is retransmitted (its retransmissions are within the allowance or withheld); another may
//! take its place only EXCHANGE_LIFETIME (247 s) after it went, however it ended. One that
//! goes unacknowledged for [`PROBE_ANSWER_WAIT`] shows that the source does not receive
//! ([`SourceValidation::silent`]): what is held for it is then given up
//! (`awaiting_proof.rs`).
//!
//! Before that CON, an answer that does not fit is held and the client pinged (RFC 7252
//! §4.3): an RST proves the client, and the answer goes as it would have, piggybacked or NON
//! (`engine.rs`, answers out).
//!
//! Being proven lasts [`PROVEN_FOR`] from the latest proof. A client whose answers fit its
//! allowance (answers no larger than three requests) never needs one.

use std::net::SocketAddr;
use std::time::Duration;

use crate::coap::echo::{self, EchoKey};
use crate::coap::option::ECHO;
use crate::coap::params::EXCHANGE_LIFETIME;
use crate::coap::Message;
use crate::time::Timestamp;

use super::exchange::ExchangeKey;
use super::keyed_hash::{KeyedMap, KeyedState};

/// RFC 9175 §2.4, RFC 9000 §8.1: an unproven source is sent at most this many times what it
/// sent.
const AMPLIFICATION_FACTOR: u64 = 3;
/// How long an Echo value the proxy issued stays good: short, so a captured one is of
/// little use (RFC 9175 §2.3 leaves it to the server).
pub(super) const ECHO_LIFETIME: Duration = Duration::from_secs(60);
/// How long a source stays proven after its latest proof.
pub(super) const PROVEN_FOR: Duration = Duration::from_secs(300);
/// Sources tracked at most (unproven ones' byte counts and proven ones).
const MAX_SOURCES: usize = 65_536;
/// Withheld CONs remembered per source, to send at once when the proof comes; more wait for
/// their own retransmission.
const MAX_WITHHELD: usize = 32;
/// Bytes of answers the exchanges of one source network's clients (`--source-prefix`: one
/// IPv4 address, one IPv6 /64) may keep while they wait for their proofs (held, or withheld
/// CONs): past it, a request gets 4.01 with an Echo value instead (`awaiting_proof.rs`).
/// Sources that never prove themselves (spoofed victims) cannot make the proxy keep more than
/// this for one network, however many requests are sent in their names; a real client has
/// its requests' answers for one round trip there, as many as its requests in flight (256 by
/// default) of about a kilobyte.
pub(super) const MAX_HELD_BYTES: usize = 256 << 10;
/// Bytes of such answers for all unproven sources together: past it, the oldest held give
/// way to a newer one (`awaiting_proof.rs`). Proven clients are not affected.
pub(super) const MAX_HELD_BYTES_TOTAL: usize = 4 << 20;
/// How long an answer waits for the RST to the ping that asks the client for its proof
/// before it goes as a CON asking for it instead: below ACK_TIMEOUT (2 s, RFC 7252 §4.8), so
/// that it arrives before the client retransmits its request.
pub(super) const PROOF_WAIT: Duration = Duration::from_secs(1);
/// How long the CON asking a source for its proof (the probe) may go without its ACK before
/// the source is taken not to receive: ACK_TIMEOUT (RFC 7252 §4.8), when its first
/// retransmission may be due. A real client acknowledges within a round trip.
pub(super) const PROBE_ANSWER_WAIT: Duration = crate::coap::params::ACK_TIMEOUT;
/// Unmatched ACKs and RSTs an unproven source may send before its ACKs prove nothing.
const MAX_WRONG_PROOFS: u8 = 8;
/// An answer may be this long (RFC 7252 §4.6's message size, when nothing is known of the
/// path): with `--validate-sources` a request is challenged unless its source's allowance
/// takes one, and with an opt-in send rate it is refused unless the client's bucket does.
pub(super) const LIKELY_ANSWER: usize = 1152;

/// What a source has shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proof {
    /// Nothing yet. `probe`: the exchange whose CON went over the allowance and waits for
    /// the ACK that proves the source, if one is out. `ping`: the Message ID of the empty
    /// CON (a CoAP ping, RFC 7252 §4.3) the proxy sent to provoke an RST, and when, if one
    /// is out.
    /// `probed_at`: when the latest probe went; another may only go [`EXCHANGE_LIFETIME`]
    /// later, whatever ended this one, so that a source never gets more than one datagram
    /// past its allowance per lifetime. `silent_since`: when ICMP port unreachable came
    /// back for it, if it did (see [`SourceValidation::silent`]).
    Unproven {
        probe: Option<ExchangeKey>,
        ping: Option<(u16, Timestamp)>,
        probed_at: Option<Timestamp>,
        silent_since: Option<Timestamp>,
    },
    /// It received at its address; trusted until `until`.
    Proven { until: Timestamp },
}

impl Proof {
    /// A source not (or no longer) proven, with nothing out to it.
    const FRESH: Proof = Proof::Unproven {
        probe: None,
        ping: None,
        probed_at: None,
        silent_since: None,
    };
}

#[derive(Clone, Copy, Debug)]
struct SourceState {
    received: u64,
    /// Bytes sent within the allowance (the probe is the one datagram beyond it).
    sent: u64,
    proof: Proof,
    /// ACKs and RSTs that matched nothing while unproven (see `wrong_proof`).
    wrong: u8,
    last: Timestamp,
    /// When a datagram last came from it (see [`SourceValidation::silent`]).
    heard: Timestamp,
}

impl SourceState {
    fn proven(&self, now: Timestamp) -> bool {
        matches!(self.proof, Proof::Proven { until } if until > now)
    }

    fn allows(&self, now: Timestamp, len: usize) -> bool {
        self.proven(now) || self.sent + len as u64 <= AMPLIFICATION_FACTOR * self.received
    }
}

/// What happens to a datagram for a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// It goes.
    Send,
    /// It is withheld: over an unproven source's allowance.
    Withhold,
}

/// How a source came to be proven.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ProvedBy {
    /// An ACK or RST to a message of the proxy's.
    Ack,
    /// A fresh Echo value of the proxy's.
    Echo,
}

/// Every source's state. See the module docs.
#[derive(Debug)]
pub(super) struct SourceValidation {
    key: EchoKey,
    sources: KeyedMap<SocketAddr, SourceState>,
    /// CONs withheld from unproven sources, by source, to send when the proof comes.
    withheld: KeyedMap<SocketAddr, Vec<ExchangeKey>>,
    /// Datagrams withheld past 3x what an unproven source sent.
    pub(super) withheld_datagrams: u64,
    /// CONs sent as the one datagram past an unproven source's allowance.
    pub(super) probes: u64,
    /// Pings (empty CONs) sent to ask a source for its proof.
    pub(super) pings: u64,
    /// Sources proven, by how.
    pub(super) proved_by_ack: u64,
    pub(super) proved_by_echo: u64,
    /// ACKs that would have proven a source that had guessed wrong too often.
    pub(super) ack_proofs_refused: u64,
}

impl SourceValidation {
    pub(super) fn new(key: EchoKey, hash: &KeyedState) -> Self {
        SourceValidation {
            key,
            sources: hash.map(),
            withheld: hash.map(),
            withheld_datagrams: 0,
            probes: 0,
            pings: 0,
            proved_by_ack: 0,
            proved_by_echo: 0,
            ack_proofs_refused: 0,
        }
    }

    fn entry(&mut self, now: Timestamp, addr: SocketAddr) -> &mut SourceState {
        // The length first: below the bound (the common case) the address is hashed once.
        if self.sources.len() >= MAX_SOURCES && !self.sources.contains_key(&addr) {
            self.make_room(now);
        }
        let s = self.sources.entry(addr).or_insert(SourceState {
            received: 0,
            sent: 0,
            proof: Proof::FRESH,
            wrong: 0,
            last: now,
            heard: now,
        });
        s.last = now;
        // A proof that ran out: unproven again, from the start.
        if matches!(s.proof, Proof::Proven { until } if until <= now) {
            s.proof = Proof::FRESH;
        }
        s
    }

    /// The table is full: those not seen for a while go first, then all but the proven, then
    /// all (each then starts again from nothing received, which only restricts it more).
    fn make_room(&mut self, now: Timestamp) {
        self.sources
            .retain(|_, s| now.saturating_since(s.last) < PROVEN_FOR);
        if self.sources.len() >= MAX_SOURCES / 4 * 3 {
            self.sources.retain(|_, s| s.proven(now));
        }
        if self.sources.len() >= MAX_SOURCES / 4 * 3 {
            self.sources.clear();
        }
        let sources = &self.sources;
        self.withheld.retain(|addr, _| sources.contains_key(addr));
    }

    /// A datagram of `len` bytes came from `addr`.
    pub(super) fn received(&mut self, now: Timestamp, addr: SocketAddr, len: usize) {
        let s = self.entry(now, addr);
        s.received += len as u64;
        s.heard = now;
    }

    /// Whether `addr` has proven its address.
    pub(super) fn proven(&self, now: Timestamp, addr: SocketAddr) -> bool {
        self.sources.get(&addr).is_some_and(|s| s.proven(now))
    }

    /// Whether `len` more bytes may go to `addr` now without a proof (nothing is counted).
    pub(super) fn fits(&self, now: Timestamp, addr: SocketAddr, len: usize) -> bool {
        self.sources.get(&addr).is_some_and(|s| s.allows(now, len))
    }

    /// Whether `len` bytes may go to `addr`; counted if so. `con` names the exchange when the
    /// datagram is a CON of the proxy's: over the allowance it becomes the source's probe if
    /// none is out, and is otherwise remembered to be sent with the proof.
    pub(super) fn admit(
        &mut self,
        now: Timestamp,
        addr: SocketAddr,
        len: usize,
        con: Option<ExchangeKey>,
    ) -> Verdict {
        let s = self.entry(now, addr);
        if s.allows(now, len) {
            s.sent += len as u64;
            return Verdict::Send;
        }
        let proof = s.proof;
        if let (
            Proof::Unproven {
                probe: None,
                probed_at,
                ..
            },
            Some(key),
        ) = (proof, con)
        {
            if probed_at.is_none_or(|at| at + EXCHANGE_LIFETIME <= now) {
                if let Proof::Unproven {
                    probe, probed_at, ..
                } = &mut s.proof
                {
                    (*probe, *probed_at) = (Some(key), Some(now));
                }
                self.probes += 1;
                return Verdict::Send;
            }
        }
        self.withheld_datagrams += 1;
        let is_probe = |k| matches!(proof, Proof::Unproven { probe: Some(p), .. } if p == k);
        if let Some(key) = con.filter(|&k| !is_probe(k)) {
            self.hold(addr, key);
        }
        Verdict::Withhold
    }

    /// The CON of exchange `key` to `addr` is no longer being delivered: if it was the
    /// source's probe, another may take its place.
    pub(super) fn delivery_ended(&mut self, addr: SocketAddr, key: ExchangeKey) {
        if let Some(s) = self.sources.get_mut(&addr) {
            if let Proof::Unproven { probe, .. } = &mut s.proof {
                if *probe == Some(key) {
                    *probe = None;
                }
            }
        }
    }

    /// Remembers `key` to send when `addr` proves itself: a held answer
    /// (`State::AwaitingProof`) or a withheld CON; at most [`MAX_WITHHELD`] per source (the
    /// rest go at their own retransmission or deadline).
    pub(super) fn hold(&mut self, addr: SocketAddr, key: ExchangeKey) {
        let list = self.withheld.entry(addr).or_default();
        if list.len() < MAX_WITHHELD && !list.contains(&key) {
            list.push(key);
        }
    }

    /// Whether `addr` should be pinged to prove itself: it is not proven, and no ping of ours
    /// is out to it (one is out for [`PROOF_WAIT`]).
    pub(super) fn ping_due(&self, now: Timestamp, addr: SocketAddr) -> bool {
        match self.sources.get(&addr).map(|s| s.proof) {
            Some(Proof::Unproven {
                ping: Some((_, at)),
                ..
            }) => at + PROOF_WAIT <= now,
            Some(Proof::Proven { until }) => until <= now,
            _ => true,
        }
    }

    /// A ping with Message ID `mid` went to `addr` (which `entry` made unproven if its proof
    /// had run out).
    pub(super) fn pinged(&mut self, now: Timestamp, addr: SocketAddr, mid: u16) {
        if let Proof::Unproven { ping, .. } = &mut self.entry(now, addr).proof {
            *ping = Some((mid, now));
        }
        self.pings += 1;
    }

    /// Whether `addr` is not proven and showed within a lifetime that it does not receive
    /// (see [`Proof::Unproven`]), and nothing came from it since: its probe went
    /// [`PROBE_ANSWER_WAIT`] ago or more without its ACK (ended or not), or ICMP port
    /// unreachable came back. What is held for it is then given up (`awaiting_proof.rs`). A
    /// real client on a lossy path that lost the probe or its ACK still shows itself: it
    /// retransmits a request not yet acknowledged, answers pings, sends more.
    pub(super) fn silent(&self, now: Timestamp, addr: SocketAddr) -> bool {
        let Some(s) = self.sources.get(&addr) else {
            return false;
        };
        let Proof::Unproven {
            probed_at,
            silent_since,
            ..
        } = s.proof
        else {
            return false;
        };
        let unanswered = probed_at
            .filter(|&at| s.heard <= at)
            .map(|at| at + PROBE_ANSWER_WAIT)
            .filter(|&at| at <= now);
        let unreachable = silent_since.filter(|&at| s.heard <= at);
        let since = [unanswered, unreachable].into_iter().flatten().max();
        since.is_some_and(|at| now < at + EXCHANGE_LIFETIME)
    }

    /// ICMP port unreachable came back for a datagram to `addr`: nobody receives there. An
    /// unproven source is silent from now on (a proven one keeps its proof: a forged ICMP
    /// error must not cost a real client more than the observations it ends).
    pub(super) fn unreachable(&mut self, now: Timestamp, addr: SocketAddr) {
        if let Some(s) = self.sources.get_mut(&addr) {
            if let Proof::Unproven { silent_since, .. } = &mut s.proof {
                *silent_since = Some(now);
            }
        }
    }

    /// Whether an ACK or RST with `mid` from `addr` answers the ping of ours out to it.
    pub(super) fn answers_ping(&self, addr: SocketAddr, mid: u16) -> bool {
        let proof = self.sources.get(&addr).map(|s| s.proof);
        matches!(proof, Some(Proof::Unproven { ping: Some((m, _)), .. }) if m == mid)
    }

    /// An ACK or RST from `addr` matched no message of ours: a wrong guess, if it is a
    /// spoofer's. Past [`MAX_WRONG_PROOFS`] of them an unproven source's ACKs prove nothing
    /// more, so a Message ID cannot be found by trying them all (the probe's is one of 65,536).
    pub(super) fn wrong_proof(&mut self, now: Timestamp, addr: SocketAddr) {
        let s = self.entry(now, addr);
        if !s.proven(now) {
            s.wrong = s.wrong.saturating_add(1);
        }
    }

    /// `addr` showed it receives there: it is proven for [`PROVEN_FOR`]. Returns the CONs
    /// withheld from it, to send now.
    pub(super) fn prove(
        &mut self,
        now: Timestamp,
        addr: SocketAddr,
        by: ProvedBy,
    ) -> Vec<ExchangeKey> {
        let s = self.entry(now, addr);
        let newly = !s.proven(now);
        if newly && by == ProvedBy::Ack && s.wrong >= MAX_WRONG_PROOFS {
            self.ack_proofs_refused += 1;
            return Vec::new();
        }
        s.proof = Proof::Proven {
            until: now + PROVEN_FOR,
        };
        match (newly, by) {
            (false, _) => {}
            (true, ProvedBy::Ack) => self.proved_by_ack += 1,
            (true, ProvedBy::Echo) => self.proved_by_echo += 1,
        }
        self.withheld.remove(&addr).unwrap_or_default()
    }

    /// Whether `msg` repeats a fresh Echo value the proxy issued to `addr`.
    pub(super) fn echoes(&self, now: Timestamp, addr: SocketAddr, msg: &Message) -> bool {
        (msg.options().filter(|&(n, _)| n == ECHO))
            .filter_map(|(_, v)| echo::decode(v).ok())
            .any(|e| self.key.verify(e, addr, now, ECHO_LIFETIME).is_ok())
    }

    /// An Echo value for `addr` to repeat (RFC 9175 §2.4).
    pub(super) fn echo_value(&self, now: Timestamp, addr: SocketAddr) -> [u8; echo::ISSUED_LEN] {
        self.key.issue(addr, now)
    }

    /// `--validate-sources`: the Echo value to challenge a request from `addr` with, unless
    /// it is proven or its allowance takes a likely answer.
    pub(super) fn challenge(
        &mut self,
        now: Timestamp,
        addr: SocketAddr,
    ) -> Option<[u8; echo::ISSUED_LEN]> {
        let s = self.entry(now, addr);
        let allowance = (AMPLIFICATION_FACTOR * s.received).saturating_sub(s.sent);
        let fine = s.proven(now) || allowance >= LIKELY_ANSWER as u64;
        (!fine).then(|| self.key.issue(addr, now))
    }

    /// Sources tracked now.
    pub(super) fn sources(&self) -> usize {
        self.sources.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coap::Code;

    fn at(ms: u64) -> Timestamp {
        Timestamp::ZERO + Duration::from_millis(ms)
    }

    fn key(index: u32) -> ExchangeKey {
        ExchangeKey {
            index,
            generation: 1,
        }
    }

    fn validation() -> SourceValidation {
        SourceValidation::new(EchoKey::new([1, 2]), &KeyedState::new([3, 4]))
    }

    const VICTIM: &str = "192.0.2.7:5683";

    #[test]
    fn an_unproven_source_gets_3x_then_one_con_then_nothing() {
        let (mut v, victim) = (validation(), VICTIM.parse().unwrap());
        v.received(at(0), victim, 12);
        assert!(v.fits(at(0), victim, 36) && !v.fits(at(0), victim, 37));
        assert_eq!(v.admit(at(0), victim, 30, None), Verdict::Send);
        assert_eq!(v.admit(at(0), victim, 7, None), Verdict::Withhold);
        // The one CON past the allowance: the probe. Its retransmission and any other CON
        // are withheld; the others are remembered for the proof.
        assert_eq!(v.admit(at(0), victim, 1000, Some(key(1))), Verdict::Send);
        assert_eq!(
            v.admit(at(2), victim, 1000, Some(key(1))),
            Verdict::Withhold
        );
        assert_eq!(
            v.admit(at(2), victim, 1000, Some(key(2))),
            Verdict::Withhold
        );
        assert_eq!(v.admit(at(2), victim, 6, None), Verdict::Send, "within 3x");
        assert_eq!((v.probes, v.withheld_datagrams), (1, 3));
        // The probe ended: another may take its place, once a lifetime has passed since it
        // went (whatever ended it: one datagram past 3x per lifetime).
        v.delivery_ended(victim, key(1));
        assert_eq!(
            v.admit(at(3), victim, 1000, Some(key(2))),
            Verdict::Withhold
        );
        let later = at(0) + EXCHANGE_LIFETIME;
        assert_eq!(v.admit(later, victim, 1000, Some(key(2))), Verdict::Send);
    }

    #[test]
    fn a_probe_unanswered_makes_its_source_silent_until_proven() {
        let (mut v, victim) = (validation(), VICTIM.parse().unwrap());
        v.received(at(0), victim, 12);
        assert_eq!(v.admit(at(0), victim, 1000, Some(key(1))), Verdict::Send);
        let answered_by = at(0) + PROBE_ANSWER_WAIT;
        assert!(!v.silent(at(1999), victim));
        assert!(
            v.silent(answered_by, victim),
            "the probe went unacknowledged"
        );
        v.delivery_ended(victim, key(1));
        assert!(v.silent(answered_by, victim), "however it ended");
        assert!(
            !v.silent(answered_by + EXCHANGE_LIFETIME, victim),
            "for a lifetime"
        );
        v.prove(at(4000), victim, ProvedBy::Echo);
        assert!(!v.silent(at(4000), victim), "an Echo still proves it");
        // ICMP port unreachable silences an unproven source, never a proven one.
        let other: SocketAddr = "192.0.2.8:5683".parse().unwrap();
        v.received(at(5000), other, 12);
        v.unreachable(at(5000), other);
        v.unreachable(at(5000), victim);
        assert!(v.silent(at(5000), other) && !v.silent(at(5000), victim));
        // Anything it sends after shows that it is there after all.
        v.received(at(5001), other, 4);
        assert!(!v.silent(at(5001), other));
    }

    #[test]
    fn a_source_heard_from_after_its_probe_is_not_silent() {
        let (mut v, client) = (validation(), VICTIM.parse().unwrap());
        v.received(at(0), client, 12);
        assert_eq!(v.admit(at(10), client, 1000, Some(key(1))), Verdict::Send);
        // A lossy client that lost the probe retransmits its request.
        v.received(at(1500), client, 12);
        assert!(!v.silent(at(5000), client));
    }

    #[test]
    fn an_ack_proves_the_source_and_hands_back_what_was_withheld() {
        let (mut v, client) = (validation(), VICTIM.parse().unwrap());
        v.received(at(0), client, 20);
        assert_eq!(v.admit(at(0), client, 500, Some(key(1))), Verdict::Send);
        assert_eq!(v.admit(at(0), client, 500, Some(key(2))), Verdict::Withhold);
        assert_eq!(v.admit(at(0), client, 500, Some(key(2))), Verdict::Withhold);
        assert_eq!(v.prove(at(10), client, ProvedBy::Ack), vec![key(2)]);
        assert_eq!(v.admit(at(10), client, 50_000, None), Verdict::Send);
        assert_eq!(v.proved_by_ack, 1);
        // Proven for PROVEN_FOR from the latest proof, then back to 3x.
        let later = at(10) + PROVEN_FOR;
        assert_eq!(v.admit(later, client, 50_000, None), Verdict::Withhold);
    }

    #[test]
    fn a_source_that_guesses_message_ids_proves_nothing_by_ack() {
        let (mut v, victim) = (validation(), VICTIM.parse().unwrap());
        v.received(at(0), victim, 12);
        (0..MAX_WRONG_PROOFS).for_each(|_| v.wrong_proof(at(0), victim));
        assert!(v.prove(at(0), victim, ProvedBy::Ack).is_empty());
        assert!(!v.fits(at(0), victim, 1000));
        assert_eq!(v.ack_proofs_refused, 1);
        v.prove(at(0), victim, ProvedBy::Echo);
        assert!(v.fits(at(0), victim, 1000), "an Echo still proves it");
    }

    #[test]
    fn the_table_stays_bounded() {
        let mut v = validation();
        for i in 0..(MAX_SOURCES as u32 * 2) {
            let addr = SocketAddr::from((i.to_be_bytes(), 1));
            v.received(at(u64::from(i)), addr, 10);
            assert!(v.sources() <= MAX_SOURCES);
        }
    }

    #[test]
    fn echo_values_prove_only_their_own_source_while_fresh() {
        let (v, client) = (validation(), VICTIM.parse().unwrap());
        let value = v.key.issue(client, at(0));
        let mut req = Vec::new();
        let mut b = crate::coap::MessageBuilder::new(
            &mut req,
            crate::coap::MessageType::Con,
            Code::GET,
            1,
            b"t",
        );
        b.option(ECHO, &value);
        b.finish().unwrap();
        let msg = Message::parse(&req).unwrap();
        assert!(v.echoes(at(1000), client, &msg));
        assert!(!v.echoes(at(1000), "192.0.2.8:5683".parse().unwrap(), &msg));
        let stale = at(0) + ECHO_LIFETIME + Duration::from_secs(1);
        assert!(!v.echoes(stale, client, &msg));
    }
}
