//! What the proxy counts: every forward, duplicate, retry, give-up and drop, grouped by
//! concern so that each part of the engine bumps its own group.

/// Monotonic counters (and gauges, marked so) of one proxy engine, by concern.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    /// Requests and answers as they flow: forwards, duplicates, retransmissions, relayed answers by class.
    pub traffic: Traffic,
    /// Answers the proxy made itself instead of forwarding, by code.
    pub own_answers: OwnAnswers,
    /// The causes of the 5.03s: which limit a request met.
    pub refusals: Refusals,
    /// Datagrams that were malformed or matched nothing.
    pub strays: Strays,
    /// Observe relays (RFC 7641).
    pub observe: ObserveCounters,
    /// The stores of answers kept for clients' retransmissions (`answer_cache.rs`).
    pub kept: KeptAnswers,
    /// Address validation by proof of receipt (`validation.rs`) and the opt-in send rate (`budget.rs`).
    pub proof: Proof,
    /// Gauges of what the engine holds now.
    pub load: Load,
}

/// Requests and answers as they flow: forwards, duplicates, retransmissions, relayed answers by class.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Traffic {
    /// Client requests accepted (not duplicates), whatever their outcome.
    pub requests: u64,
    /// Requests sent upstream for the first time.
    pub forwarded: u64,
    /// Client retransmissions absorbed (never forwarded again).
    pub client_duplicates: u64,
    /// Retransmissions of requests to an upstream.
    pub upstream_retransmissions: u64,
    /// Retransmissions of confirmable answers to clients.
    pub client_retransmissions: u64,
    /// Empty ACKs sent to clients (the answer then travels separately).
    pub empty_acks_sent: u64,
    /// Upstream 2.xx answers relayed to clients.
    pub relayed_2xx: u64,
    /// Upstream 4.xx answers relayed to clients.
    pub relayed_4xx: u64,
    /// Upstream 5.xx answers relayed to clients.
    pub relayed_5xx: u64,
    /// Timer events for an exchange that had already moved on (they did nothing).
    pub stale_timer_events: u64,
    /// Confirmable answers the client never acknowledged.
    pub client_delivery_failures: u64,
    /// Diagnostic events dropped because the driver did not take them (the queue is bounded).
    pub events_dropped: u64,
}

/// Answers the proxy made itself instead of forwarding, by code.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnAnswers {
    /// 5.02 Bad Gateway: the upstream reset, was unreachable or answered unusably (a
    /// response with an unrecognised unsafe option among them, RFC 7252 §5.7.1).
    pub bad_gateway_5_02: u64,
    /// 5.03 Service Unavailable: an in-flight limit was reached, the proxy is shutting down,
    /// or the upstream had no Message ID free; by cause in the `refused_*` counters.
    pub service_unavailable_5_03: u64,
    /// 5.04 Gateway Timeout: the retry policy gave up waiting for the upstream.
    pub gateway_timeout_5_04: u64,
    /// 4.02 Bad Option: an unrecognised unsafe option (RFC 7252 §5.7.1), or too many options.
    pub bad_option_4_02: u64,
    /// Of the 4.02s: requests with more than `max_options` options, a Proxy-Uri counting as
    /// the options it decomposes into.
    pub too_many_options: u64,
    /// 4.13 Request Entity Too Large: a request longer than `max_request_size` bytes
    /// (RFC 7252 §5.9.2.9), answered with Size1.
    pub request_too_large_4_13: u64,
    /// 4.03 Forbidden: a forward-proxy target not in the allow list.
    pub forbidden_4_03: u64,
    /// 4.04 Not Found: a request for the proxy itself with no reverse upstream configured.
    pub not_found_4_04: u64,
    /// 5.05 Proxying Not Supported: forward proxying is off, or the scheme is not `coap`.
    pub proxying_not_supported_5_05: u64,
    /// 5.08 Hop Limit Reached: the request's Hop-Limit ran out (RFC 8768).
    pub hop_limit_5_08: u64,
    /// 4.00 Bad Request: any other malformed request, e.g. an invalid Hop-Limit or Proxy-Uri.
    pub bad_request_4_00: u64,
}

/// The causes of the 5.03s: which limit a request met.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Refusals {
    /// 5.03s because every endpoint the bound allows had its Message IDs reserved (or the next
    /// endpoint's socket could not be opened).
    pub refused_endpoints: u64,
    /// 5.03s because the client had `max_inflight_per_client` requests in flight.
    pub refused_client: u64,
    /// 5.03s because the client's opt-in send rate (`--client-bytes-per-sec`) could not take
    /// an answer.
    pub refused_client_rate: u64,
    /// 5.03s in place of the answer to a request not safe to repeat (POST, PATCH, iPATCH)
    /// that could not be held for its unproven client's proof (`awaiting_proof.rs`; a safe
    /// one gets 4.01 with an Echo value, `Proof::backlog_challenges_*`).
    pub refused_proof_backlog: u64,
    /// 5.03s because `max_inflight` requests were in flight in all.
    pub refused_inflight: u64,
    /// 5.03s because `max_inflight_per_upstream` requests were in flight to the upstream.
    pub refused_upstream_inflight: u64,
    /// 5.03s because the copies of the requests in flight held `max_inflight_bytes` bytes.
    pub refused_inflight_bytes: u64,
    /// 5.03s because the proxy was shutting down.
    pub refused_draining: u64,
}

/// Datagrams that were malformed or matched nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Strays {
    /// Malformed datagrams from clients (RST to a CON, a NON dropped).
    pub client_format_errors: u64,
    /// Malformed datagrams from upstreams.
    pub upstream_format_errors: u64,
    /// Upstream datagrams that matched nothing (late answers, unknown tokens, stray ACKs).
    pub unmatched_upstream: u64,
    /// Client datagrams that matched nothing (stray ACKs or RSTs, pings, CONs we cannot process).
    pub unmatched_client: u64,
}

/// Observe relays (RFC 7641).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObserveCounters {
    /// Notifications relayed to observers (RFC 7641).
    pub notifications_relayed: u64,
    /// Of those, sent as CON to learn whether the observer is still there (RFC 7641 §4.5).
    pub notifications_con: u64,
    /// Notifications that replaced one still awaiting its ACK, to go at its next
    /// retransmission (RFC 7641 §4.5.2) rather than at once.
    pub notifications_superseded: u64,
    /// Observations ended by their client: a CON notification never acknowledged, an RST to
    /// a notification, or ICMP unreachable from the client.
    pub observers_lost: u64,
    /// Observe registrations that joined an upstream registration another client had made,
    /// answered from the cache (`--cache-size`; RFC 7641 §5): nothing went upstream for them.
    pub observers_joined: u64,
    /// Registrations answered without Observe because `--max-observations` observations
    /// were alive (RFC 7641 §4.1).
    pub refused_table: u64,
    /// Registrations answered without Observe because their client's source held its share
    /// (`--max-observations-per-source`).
    pub refused_share: u64,
    /// Gauge: Observe relays alive (RFC 7641).
    pub observations: u64,
}

/// The stores of answers kept for clients' retransmissions (`answer_cache.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeptAnswers {
    /// Answers evicted from a full answer cache (`max_cached`, or `max_cached_bytes`) before
    /// their lifetime ended.
    pub cache_evictions: u64,
    /// Of those, answers evicted while their client could still retransmit (cache too small).
    pub early_evictions: u64,
    /// The proxy's own answers (never forwarded) evicted from their full store.
    pub local_answer_evictions: u64,
    /// Kept answers (the proxy's own included) of a client over `max_cached_per_client` or
    /// `max_cached_bytes_per_client`, evicted to make room for its newer ones: its own oldest
    /// first.
    pub share_evictions: u64,
    /// Answers kept without their bytes, being longer than `max_cached_bytes_per_client` (or
    /// `max_cached_bytes`): their retransmissions get nothing, and are not forwarded again.
    pub answers_too_large_to_keep: u64,
    /// Gauge: answers kept to answer duplicates (the proxy's own included).
    pub cached_answers: u64,
    /// Gauge: the bytes their stores hold (within `max_cached_bytes` each), dead ones not
    /// yet dropped included.
    pub cached_answer_bytes: u64,
}

/// Address validation by proof of receipt (`validation.rs`) and the opt-in send rate (`budget.rs`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Proof {
    /// 4.01s with an Echo value to unproven sources (RFC 9175 §2.4): every request of one
    /// with `--validate-sources`, and at defaults a block the client did not ask a proof
    /// for, or an answer that could not be held (`backlog_challenges_*`).
    pub echo_challenges: u64,
    /// Datagrams withheld because an unproven source had been sent 3x what it sent
    /// (`validation.rs`); a CON among them goes when the proof comes, or at its next
    /// retransmission.
    pub amplification_dropped: u64,
    /// CONs sent as the one datagram past an unproven source's allowance, asking for the
    /// proof (its ACK).
    pub amplification_probes: u64,
    /// Answers sent as a CON (after an empty ACK, or instead of a NON) because they did not
    /// fit an unproven client's allowance.
    pub answers_made_confirmable: u64,
    /// Answers held until their client proved its address (it was pinged for the proof).
    pub answers_held_for_proof: u64,
    /// Pings (empty CONs) sent to clients to ask for their proof of address.
    pub proof_pings: u64,
    /// Sources that proved their address by acknowledging (or resetting) a message of ours.
    pub sources_proved_by_ack: u64,
    /// Sources that proved their address with a fresh Echo value (RFC 9175 §2.4).
    pub sources_proved_by_echo: u64,
    /// ACKs that proved nothing: their source had sent too many that matched no message.
    pub ack_proofs_refused: u64,
    /// 4.01s with an Echo value (RFC 9175 §2.4) for an answer that could not be held for its
    /// unproven client's proof (`awaiting_proof.rs`), before its request went upstream or in
    /// its place, by cause: its source network's share of held answers
    /// (`validation::MAX_HELD_BYTES`) was taken ...
    pub backlog_challenges_share: u64,
    /// ... all held answers were at their bound (`validation::MAX_HELD_BYTES_TOTAL`) and none
    /// was left to give way.
    pub backlog_challenges_total: u64,
    /// Answers waiting for a proof given up, by cause: the oldest, evicted for a newer one at
    /// the total bound ...
    pub held_evicted: u64,
    /// ... their client's first CON went unacknowledged ...
    pub held_given_up_unacknowledged: u64,
    /// ... ICMP port unreachable came back from their client.
    pub held_given_up_unreachable: u64,
    /// Gauge: client addresses whose proof of receipt is tracked.
    pub validation_sources: u64,
    /// Datagrams to clients dropped because their source was over its send budget
    /// (`ProxyConfig::client_budget`, RFC 7252 §11.3).
    pub over_budget_dropped: u64,
    /// Their bytes.
    pub over_budget_dropped_bytes: u64,
    /// Gauge: client addresses whose send budget is tracked.
    pub budget_sources: u64,
}

/// Gauges of what the engine holds now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Load {
    /// Gauge: exchanges being worked on (waiting, observing, or delivering an answer).
    pub live_exchanges: u64,
    /// Gauge: of the live exchanges, requests still waiting on an upstream (`Waiting` or
    /// `AwaitingSeparate`).
    pub in_flight: u64,
    /// Gauge: bytes of the request copies kept for retransmission upstream.
    pub in_flight_bytes: u64,
    /// Bytes of the answers live exchanges keep (held for a proof, being delivered, an
    /// observation's latest notification).
    pub exchange_answer_bytes: u64,
}
