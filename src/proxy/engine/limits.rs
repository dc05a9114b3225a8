//! What one request may cost the proxy: its size, its options, and the bytes of the requests in
//! flight, counted here (`Usage`). Size and options are checked before anything else is done for the request, so that
//! the cost of any one datagram is bounded by them (its parse, which is linear, comes first: a
//! malformed CON must still get its RST); the bytes in flight with the other in-flight limits.

use crate::coap::option::PROXY_URI;
use crate::coap::{Code, Message};

use super::clients::{ClientSlot, Clients};
use super::config::Limits;
use super::counters::{self, OwnAnswers};
use super::exchange::ExchangeKey;
use super::local_answer::LocalAnswer;
use super::observation_shares::{ObservationShares, SourceKey};
use super::route;
use super::table::Exchanges;

/// RFC 7252 §5.9.2.9: a request longer than `max_request_size` gets 4.13 Request Entity
/// Too Large; one with more than `max_options` options gets 4.02 Bad Option.
///
/// Size1 in the 4.13 says how large an entity the proxy would take (§5.10.9): the limit
/// less this request's header, token, options and payload marker, so that a client that
/// sends that much (in one message or in Block1 blocks, RFC 7959 §2.9.3) fits. It is 0 if
/// the options alone are too long.
///
/// A Proxy-Uri counts as the Uri-Path and Uri-Query options it decomposes into (§6.4),
/// and the answer to one with too many is also 4.02: the request is well formed, but one
/// of its options carries a value this proxy cannot process, and §5.4.3 asks that such an
/// option be treated like an unrecognised one, which for a critical option (Proxy-Uri is,
/// §5.10.2) is 4.02 (§5.4.1). 4.00 would not say which part of the request to change.
#[inline]
pub(super) fn check_request(
    limits: &Limits,
    counters: &mut OwnAnswers,
    msg: &Message,
) -> Result<(), LocalAnswer> {
    let (len, limit) = (msg.as_bytes().len(), limits.max_request_size);
    if len > limit {
        let framing = len - msg.payload().len() + usize::from(msg.payload().is_empty());
        let room = limit.saturating_sub(framing);
        return Err(LocalAnswer {
            code: Code::REQUEST_ENTITY_TOO_LARGE,
            max_age: None,
            size1: Some(u32::try_from(room).unwrap_or(u32::MAX)),
            echo: None,
            diagnostic: "request longer than this proxy takes",
        });
    }
    let mut options = msg.options().count();
    if let Some(uri) = msg.option(PROXY_URI) {
        // A Proxy-Uri that does not split is refused later, by route.
        options = options - 1 + route::decomposed_options(uri).unwrap_or(1);
    }
    if options > limits.max_options {
        counters.too_many_options += 1;
        return Err(LocalAnswer {
            code: Code::BAD_OPTION,
            max_age: None,
            size1: None,
            echo: None,
            diagnostic: "more options than this proxy takes",
        });
    }
    Ok(())
}

/// What the proxy holds against its [`Limits`] right now, and whether it still admits new
/// requests. Kept apart from the exchanges so that each sum is changed in one place, by the
/// move that changes what it counts.
#[derive(Debug, Default)]
pub(super) struct Usage {
    /// Exchanges waiting on an upstream.
    inflight: usize,
    /// Bytes of the request copies exchanges keep (`UpstreamLeg::request`), within
    /// `max_inflight_bytes`.
    inflight_bytes: usize,
    /// Bytes of the answers live exchanges keep (`Exchange::answer`): held for a client's
    /// proof, being delivered as CONs, an observation's latest notification.
    answer_bytes: usize,
    /// Live observations, within `max_observations`.
    observations: usize,
    /// Of those, each source's, within `max_observations_per_source`.
    shares: ObservationShares,
    /// Shutting down: new requests are refused with 5.03.
    draining: bool,
    /// Empty buffers of closed legs' request copies, for the next ones: an allocation and a
    /// free per request were about 4 % of a request's instructions (callgrind). At most
    /// [`SPARE_BUFFERS`], each of at most [`SPARE_CAPACITY`] bytes.
    spare: Vec<Vec<u8>>,
}

/// Spare request buffers kept at most: enough for the legs that close in one turn of the
/// loop at full load, which the next turn's requests take again.
const SPARE_BUFFERS: usize = 64;

/// A buffer larger than this is freed, not kept: a default `--max-request-size` (1152)
/// request fits, and the spares hold at most 128 KiB.
const SPARE_CAPACITY: usize = 2048;

impl Usage {
    /// Why a new request of `len` bytes is not admitted, if it is not: shutting down, too
    /// many in flight, or too many bytes in flight (the per-upstream and per-client limits
    /// are their owners' to check).
    pub(super) fn refusal(&self, limits: &Limits, len: usize) -> Option<Refusal> {
        if self.draining {
            Some(Refusal::Draining)
        } else if self.inflight >= limits.max_inflight {
            Some(Refusal::Inflight)
        } else if self.inflight_bytes + len > limits.max_inflight_bytes {
            // Its copy, made only once it is admitted, may be a little longer.
            Some(Refusal::InflightBytes)
        } else {
            None
        }
    }

    /// Stop admitting new requests.
    pub(super) fn drain(&mut self) {
        self.draining = true;
    }

    /// Why one more observation of `source` does not fit, if it does not: the table is full
    /// (`max_observations`), or the source holds its share (`max_observations_per_source`).
    pub(super) fn observation_refusal(
        &self,
        limits: &Limits,
        source: &SourceKey,
    ) -> Option<ObservationRefusal> {
        if self.observations >= limits.max_observations {
            Some(ObservationRefusal::Table)
        } else if self.shares.held(source) >= limits.max_observations_per_source {
            Some(ObservationRefusal::Share)
        } else {
            None
        }
    }

    /// An exchange went upstream, keeping `request` as its copy for retransmission.
    pub(super) fn leg_opened(
        &mut self,
        exchanges: &mut Exchanges,
        key: ExchangeKey,
        request: &[u8],
    ) {
        self.inflight += 1;
        if let Some(leg) = exchanges.get_mut(key).and_then(|x| x.state.leg_mut()) {
            debug_assert!(leg.request.is_none(), "one copy per exchange");
            let mut copy = self.spare.pop().unwrap_or_default();
            copy.extend_from_slice(request);
            leg.request = Some(copy);
            self.inflight_bytes += request.len();
        }
    }

    /// An upstream leg closed, releasing its request copy.
    pub(super) fn leg_closed(&mut self, request: Option<Vec<u8>>) {
        self.inflight -= 1;
        if let Some(request) = request {
            self.recycle(request);
        }
    }

    /// A request copy leaves the in-flight budget, and its buffer is kept for another.
    fn recycle(&mut self, mut request: Vec<u8>) {
        self.inflight_bytes -= request.len();
        if self.spare.len() < SPARE_BUFFERS && request.capacity() <= SPARE_CAPACITY {
            request.clear();
            self.spare.push(request);
        }
    }

    /// No copy of the request goes upstream again: its bytes leave the in-flight budget.
    pub(super) fn drop_request(&mut self, exchanges: &mut Exchanges, key: ExchangeKey) {
        let leg = exchanges.get_mut(key).and_then(|x| x.state.leg_mut());
        if let Some(request) = leg.and_then(|leg| leg.request.take()) {
            self.recycle(request);
        }
    }

    /// Replaces the answer the exchange keeps (for a retransmission, a proof, a replay),
    /// counting its bytes for its client and in all; the old one is returned.
    pub(super) fn keep_answer(
        &mut self,
        (exchanges, clients): (&mut Exchanges, &mut Clients),
        key: ExchangeKey,
        answer: Option<Box<[u8]>>,
    ) -> Option<Box<[u8]>> {
        let x = exchanges.get_mut(key)?;
        let added = answer.as_deref().map_or(0, <[u8]>::len);
        let old = std::mem::replace(&mut x.answer, answer);
        let removed = old.as_deref().map_or(0, <[u8]>::len);
        self.count_answer_bytes(clients, x.client_slot, added, removed);
        old
    }

    /// The exchanges of the client in `slot` keep `added` answer bytes more and `removed`
    /// fewer: counted for it and in all.
    pub(super) fn count_answer_bytes(
        &mut self,
        clients: &mut Clients,
        slot: ClientSlot,
        added: usize,
        removed: usize,
    ) {
        clients.count_answer_bytes(slot, added, removed);
        self.answer_bytes = self.answer_bytes + added - removed;
    }

    /// The answer bytes all exchanges keep.
    pub(super) fn answer_bytes(&self) -> usize {
        self.answer_bytes
    }

    /// An observation of `source` began (`true`) or ended.
    pub(super) fn count_observation(&mut self, began: bool, source: SourceKey) {
        match began {
            true => {
                self.observations += 1;
                self.shares.began(source);
            }
            false => {
                self.observations -= 1;
                self.shares.ended(&source);
            }
        }
    }

    /// Observations `source` holds, for tests.
    #[cfg(test)]
    pub(super) fn observations_of(&self, source: &SourceKey) -> usize {
        self.shares.held(source)
    }

    /// Sources holding an observation, for tests.
    #[cfg(test)]
    pub(super) fn observing_sources(&self) -> usize {
        self.shares.sources()
    }

    /// Spare request buffers kept, for tests.
    #[cfg(test)]
    pub(super) fn spares(&self) -> usize {
        self.spare.len()
    }

    /// Exchanges waiting on an upstream.
    pub(super) fn inflight(&self) -> usize {
        self.inflight
    }

    /// The gauges of [`counters::Load`], with `live_exchanges` (the table's to know), and
    /// the observations gauge.
    pub(super) fn gauges(&self, live_exchanges: usize) -> (counters::Load, u64) {
        let load = counters::Load {
            live_exchanges: live_exchanges as u64,
            in_flight: self.inflight as u64,
            in_flight_bytes: self.inflight_bytes as u64,
            exchange_answer_bytes: self.answer_bytes as u64,
        };
        (load, self.observations as u64)
    }
}

/// Which limit refused an observation: its registration is answered as a plain GET.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ObservationRefusal {
    /// `max_observations`: the table is full.
    Table,
    /// `max_observations_per_source`: the client's source holds its share.
    Share,
}

/// Which of [`Usage`]'s limits refused a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    Draining,
    Inflight,
    InflightBytes,
}
