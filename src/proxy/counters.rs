//! What the proxy counts: every forward, duplicate, retry, give-up and drop.

/// Monotonic counters (and two gauges) of one proxy engine.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counters {
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
    /// Answers relayed to clients by class: 2.xx, 4.xx, 5.xx (upstream's own codes).
    pub relayed_2xx: u64,
    pub relayed_4xx: u64,
    pub relayed_5xx: u64,
    /// Answers the proxy made itself.
    pub bad_gateway_5_02: u64,
    pub service_unavailable_5_03: u64,
    pub gateway_timeout_5_04: u64,
    pub bad_option_4_02: u64,
    pub forbidden_4_03: u64,
    pub not_found_4_04: u64,
    pub proxying_not_supported_5_05: u64,
    pub hop_limit_5_08: u64,
    pub bad_request_4_00: u64,
    /// Malformed datagrams (RST to a CON, a NON dropped).
    pub client_format_errors: u64,
    pub upstream_format_errors: u64,
    /// Datagrams that matched nothing (late answers, unknown tokens, stray ACKs).
    pub unmatched_upstream: u64,
    pub unmatched_client: u64,
    /// Notifications relayed to observers (RFC 7641).
    pub notifications_relayed: u64,
    /// Timer events for an exchange that had already moved on (they did nothing).
    pub stale_timer_events: u64,
    /// Confirmable answers the client never acknowledged.
    pub client_delivery_failures: u64,
    /// Finished exchanges evicted early because the answer cache was full.
    pub cache_evictions: u64,
    /// Of those, answers evicted while their client could still retransmit (cache too small).
    pub early_evictions: u64,
    /// Gauges: exchanges alive (any state) and of those, finished answers kept for duplicates.
    pub live_exchanges: u64,
    pub cached_answers: u64,
    pub observations: u64,
}
