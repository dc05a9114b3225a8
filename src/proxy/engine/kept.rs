//! What the proxy remembers of requests it is done with: the duplicate index and the answers
//! it replays to a client's retransmissions (RFC 7252 §4.5), and the upstream CONs it
//! acknowledged (§4.5 again, from the other side). One owner, so that an answer and its index
//! entry always leave together, and the client reference an answer holds goes with it.

use std::time::Duration;

use crate::coap::params;
use crate::time::Timestamp;

use super::answer_cache::{AnswerRing, Bound, ClientKey, Gone, Replay};
use super::clients::{ClientSlot, Clients};
use super::config::KeptBounds;
use super::counters::KeptAnswers;
use super::endpoints::EndpointId;
use super::exchange::ExchangeKey;
use super::index::Index;
use super::keyed_hash::KeyedState;
use super::local_answer::LOCAL_ANSWER_LIFETIME;
use super::peer::Peer;

/// What the duplicate index knows of a client request (source, token, MID).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Seen {
    /// Still being worked on.
    Live(ExchangeKey),
    /// Answered; the answer is this entry of the answer cache.
    Answered(u64),
    /// Answered by the proxy itself without going upstream; this entry of the local answers.
    AnsweredLocally(u64),
}

/// Kept answers expire in batches: at most this late, and one wake-up per batch rather than
/// one per answer at high request rates.
const EXPIRY_BATCH: Duration = Duration::from_millis(100);

/// The duplicate index, the kept answers and the acknowledged upstream CONs.
pub(super) struct Kept {
    /// Client retransmission detection: every request live or answered, and no other. An
    /// answer that leaves its store takes its entry with it (`forget`). (It was once swept
    /// in bulk, to save a lookup per answer; with per-client shares evicting all the time,
    /// the sweeps came every few thousand requests and paused the loop long enough to
    /// overflow the client socket's receive buffer.)
    by_client: Index<ClientKey, Seen>,
    /// Answers to requests that went upstream: kept EXCHANGE_LIFETIME (NON answers too, so
    /// all expire in the order they came), bounded in all and per client, in answers and in
    /// bytes.
    answers: AnswerRing<ClientKey>,
    /// Answers the proxy made without asking an upstream (4.xx, 5.03, 5.05, 5.08): cheap to
    /// make again, so kept only [`LOCAL_ANSWER_LIFETIME`], and apart, so that a flood of them
    /// never pushes a real answer out of `answers`.
    local_answers: AnswerRing<ClientKey>,
    /// Separate responses and notifications the upstreams sent as CON and we acknowledged: a
    /// retransmission (our ACK was lost) is acknowledged again and not taken twice (§4.5).
    upstream_cons: AnswerRing<(EndpointId, u16)>,
    by_upstream_con: Index<(EndpointId, u16), u64>,
}

impl Kept {
    pub(super) fn new(bounds: &KeptBounds, hash: &KeyedState) -> Self {
        let all = Bound {
            count: bounds.max_cached,
            bytes: bounds.max_cached_bytes,
        };
        let share = Bound {
            count: bounds.max_cached_per_client,
            bytes: bounds.max_cached_bytes_per_client,
        };
        Kept {
            by_client: Index::new(hash.clone()),
            answers: AnswerRing::with_shares(params::EXCHANGE_LIFETIME, all, share),
            local_answers: AnswerRing::with_shares(LOCAL_ANSWER_LIFETIME, all, share),
            upstream_cons: AnswerRing::new(params::MAX_TRANSMIT_WAIT, all),
            by_upstream_con: Index::new(hash.clone()),
        }
    }

    /// What the duplicate index knows of a request, if it is still current.
    #[inline]
    pub(super) fn seen(&self, key: &ClientKey) -> Option<Seen> {
        let seen = *self.by_client.get(key)?;
        let current = match seen {
            Seen::Live(_) => true,
            Seen::Answered(seq) => self.answers.holds(seq),
            Seen::AnsweredLocally(seq) => self.local_answers.holds(seq),
        };
        current.then_some(seen)
    }

    /// What a retransmission of an answered request gets again (`None` for a live one).
    pub(super) fn replay(&self, seen: Seen) -> Option<Replay<Vec<u8>>> {
        match seen {
            Seen::Live(_) => None,
            Seen::Answered(seq) => self.answers.replay(seq),
            Seen::AnsweredLocally(seq) => self.local_answers.replay(seq),
        }
    }

    /// A new request is live as exchange `key`.
    #[inline]
    pub(super) fn live(&mut self, request: ClientKey, key: ExchangeKey) {
        self.by_client.insert(request, Seen::Live(key));
    }

    /// Keeps the answer to a request that went upstream, with the client reference its
    /// exchange held on `slot`, and evicts past the client's share and the bounds.
    pub(super) fn keep(
        &mut self,
        now: Timestamp,
        answer: (ClientKey, Replay<&[u8]>),
        slot: ClientSlot,
        clients: &mut Clients,
        counters: &mut KeptAnswers,
    ) {
        let store = (&mut self.answers, &mut self.by_client);
        keep_in(
            store,
            Seen::Answered,
            (now, answer, slot),
            clients,
            counters,
            |c, gone| {
                c.cache_evictions += 1;
                // The client may still retransmit this request; it would go upstream again.
                c.early_evictions += u64::from(gone.early);
            },
        );
    }

    /// Keeps the proxy's own answer to a request that never went upstream, with a reference
    /// on its client taken for it. Only an answer that was queued: one the outbox did not
    /// queue is not kept at all, and the request's retransmission is handled afresh, which
    /// is allowed for these: it runs nothing twice (see [`LOCAL_ANSWER_LIFETIME`]; a cache
    /// hit answers a GET or FETCH, which are safe, RFC 7252 §5.1).
    pub(super) fn keep_local(
        &mut self,
        now: Timestamp,
        answer: (ClientKey, Replay<&[u8]>),
        slot: ClientSlot,
        clients: &mut Clients,
        counters: &mut KeptAnswers,
    ) {
        let store = (&mut self.local_answers, &mut self.by_client);
        let indexed_as = Seen::AnsweredLocally;
        keep_in(
            store,
            indexed_as,
            (now, answer, slot),
            clients,
            counters,
            |c, _| {
                c.local_answer_evictions += 1;
            },
        );
    }

    /// Remembers that the upstream CON `mid` on `endpoint` was acknowledged.
    pub(super) fn keep_upstream_con(&mut self, now: Timestamp, endpoint: EndpointId, mid: u16) {
        let seq = (self.upstream_cons).push(now, (endpoint, mid), Replay::Nothing, None);
        self.by_upstream_con.insert((endpoint, mid), seq);
        while let Some(gone) = self.upstream_cons.pop_over_bound(now) {
            self.forget_upstream_con(gone);
        }
    }

    /// Whether the upstream CON `mid` on `endpoint` was acknowledged already.
    pub(super) fn acked_upstream_con(&self, endpoint: EndpointId, mid: u16) -> bool {
        self.by_upstream_con.contains_key(&(endpoint, mid))
    }

    fn forget_upstream_con(&mut self, gone: Gone<(EndpointId, u16)>) {
        if self.by_upstream_con.get(&gone.key) == Some(&gone.seq) {
            self.by_upstream_con.remove(&gone.key);
        }
    }

    /// When [`expire`](Self::expire) has something to drop, batched.
    pub(super) fn next_expiry(&self) -> Option<Timestamp> {
        let batched = |t: Option<Timestamp>| t.map(|t| t + EXPIRY_BATCH);
        [
            batched(self.answers.next_expiry()),
            batched(self.local_answers.next_expiry()),
            batched(self.upstream_cons.next_expiry()),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Drops everything whose time is up.
    pub(super) fn expire(&mut self, now: Timestamp, clients: &mut Clients) {
        while let Some(gone) = self.answers.pop_expired(now) {
            forget(&mut self.by_client, clients, gone, Seen::Answered);
        }
        while let Some(gone) = self.local_answers.pop_expired(now) {
            forget(&mut self.by_client, clients, gone, Seen::AnsweredLocally);
        }
        while let Some(gone) = self.upstream_cons.pop_expired(now) {
            self.forget_upstream_con(gone);
        }
    }

    /// The gauges of [`KeptAnswers`].
    pub(super) fn count(&self, c: &mut KeptAnswers) {
        let (a, l) = (&self.answers, &self.local_answers);
        c.cached_answers = (a.len() + l.len()) as u64;
        c.cached_answer_bytes = (a.bytes() + l.bytes()) as u64;
        c.answers_too_large_to_keep = a.too_large() + l.too_large();
    }

    /// Entries of each store, for tests: (index, answers, local answers, upstream CONs and
    /// their index).
    #[cfg(test)]
    pub(super) fn sizes(&self) -> KeptSizes {
        KeptSizes {
            by_client: self.by_client.len(),
            answers: self.answers.len(),
            local_answers: self.local_answers.len(),
            upstream_cons: self.upstream_cons.len(),
            by_upstream_con: self.by_upstream_con.len(),
        }
    }
}

/// How many entries each store of [`Kept`] has.
#[cfg(test)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct KeptSizes {
    pub by_client: usize,
    pub answers: usize,
    pub local_answers: usize,
    pub upstream_cons: usize,
    pub by_upstream_con: usize,
}

/// Keeps `answer` in `ring`, indexed as `indexed_as`, then evicts past the client's share
/// and past the ring's bounds (counted by `evicted`), each eviction taking its index entry
/// and client reference with it. Generic, so that each store's call is compiled on its own.
fn keep_in(
    (ring, by_client): (&mut AnswerRing<ClientKey>, &mut Index<ClientKey, Seen>),
    indexed_as: fn(u64) -> Seen,
    (now, (request, replay), slot): (Timestamp, (ClientKey, Replay<&[u8]>), ClientSlot),
    clients: &mut Clients,
    counters: &mut KeptAnswers,
    evicted: impl Fn(&mut KeptAnswers, &Gone<ClientKey>),
) {
    if !request.0.has_message_layer() {
        // A peer without a message layer (a stream connection, RFC 8323 §2.2) never sends a
        // request twice, and its Message IDs are placeholders: its requests are not indexed
        // (`Proxy::insert_exchange`), and nothing is kept. A key would only hold memory until
        // EXCHANGE_LIFETIME, past the connection's end (issue 40: 100,000 keys, 20 MiB,
        // after 40 connections pipelining cache hits had closed).
        clients.release(slot);
        return;
    }
    let replay = kept_for(&request.0, replay);
    let seq = ring.push(now, request, replay, Some(slot));
    by_client.insert(request, indexed_as(seq));
    while let Some(gone) = ring.pop_over_share(now, slot) {
        counters.share_evictions += 1;
        forget(by_client, clients, gone, indexed_as);
    }
    while let Some(gone) = ring.pop_over_bound(now) {
        evicted(counters, &gone);
        forget(by_client, clients, gone, indexed_as);
    }
}

/// An answer left its store (`indexed_as` names which): its index entry goes, unless a
/// newer request with the same key took it, and so does the client reference it held.
fn forget(
    by_client: &mut Index<ClientKey, Seen>,
    clients: &mut Clients,
    gone: Gone<ClientKey>,
    indexed_as: fn(u64) -> Seen,
) {
    if by_client.get(&gone.key) == Some(&indexed_as(gone.seq)) {
        by_client.remove(&gone.key);
    }
    if let Some(slot) = gone.client {
        clients.release(slot);
    }
}

/// What a kept answer to `client` replays. A client on a reliable transport (the HTTP
/// cross-proxy's in-process clients) is handed every answer and never loses one: when its
/// request is retransmitted all the same (its timer ran out as the answer came), it has the
/// answer already, so only the key is kept (it still stops a second forward), not a second
/// copy of the answer, which for HTTP is often a large cached one.
fn kept_for<'a>(client: &Peer, replay: Replay<&'a [u8]>) -> Replay<&'a [u8]> {
    match replay {
        Replay::Answer(_) if client.is_reliable() => Replay::Nothing,
        replay => replay,
    }
}
