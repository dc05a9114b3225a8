//! The proxy's families in the metrics exposition: its counters under `backoffd_coap_*`,
//! per-upstream gauges of the endpoint pool, and the response cache's families (none in a
//! build without the `cache` feature: a cache that is not there is not reported, even at 0).

#[cfg(feature = "cache")]
use super::{cache::CacheCounters, Proxy};
use super::{Counters, UpstreamStats};
use crate::metrics::MetricsWriter;

/// The plain counters: name after `backoffd_coap_`, help, and where the value comes from.
#[allow(clippy::type_complexity)]
const COUNTERS: &[(&str, &str, fn(&Counters) -> u64)] = &[
    (
        "requests_total",
        "Client requests accepted (duplicates excluded).",
        |c| c.traffic.requests,
    ),
    (
        "forwarded_total",
        "Requests sent upstream for the first time.",
        |c| c.traffic.forwarded,
    ),
    (
        "client_duplicates_total",
        "Client retransmissions absorbed, never forwarded.",
        |c| c.traffic.client_duplicates,
    ),
    (
        "upstream_retransmissions_total",
        "Retransmissions to upstreams by the proxy's retry policy.",
        |c| c.traffic.upstream_retransmissions,
    ),
    (
        "client_retransmissions_total",
        "Retransmissions of confirmable answers to clients.",
        |c| c.traffic.client_retransmissions,
    ),
    (
        "empty_acks_total",
        "Empty ACKs sent to clients before a separate answer.",
        |c| c.traffic.empty_acks_sent,
    ),
    (
        "notifications_relayed_total",
        "Observe notifications relayed to clients.",
        |c| c.observe.notifications_relayed,
    ),
    (
        "notifications_con_total",
        "Of the notifications relayed, those sent as CON (RFC 7641 §4.5, --observe-con-every).",
        |c| c.observe.notifications_con,
    ),
    (
        "notifications_superseded_total",
        "Notifications that replaced one awaiting its ACK, sent at its next retransmission.",
        |c| c.observe.notifications_superseded,
    ),
    #[cfg(feature = "cache")]
    (
        "observers_joined_total",
        "Observe registrations answered from the cache, joining another's upstream one.",
        |c| c.observe.observers_joined,
    ),
    (
        "observers_lost_total",
        "Observations ended by their client: CON notification unacknowledged, RST, ICMP.",
        |c| c.observe.observers_lost,
    ),
    (
        "over_budget_dropped_total",
        "Datagrams to clients dropped over their source's send budget (--client-*).",
        |c| c.proof.over_budget_dropped,
    ),
    (
        "over_budget_dropped_bytes_total",
        "Bytes of the datagrams dropped over a client's send budget.",
        |c| c.proof.over_budget_dropped_bytes,
    ),
    (
        "echo_challenges_total",
        "4.01s with an Echo value to sources not yet proven (RFC 9175).",
        |c| c.proof.echo_challenges,
    ),
    (
        "amplification_dropped_total",
        "Datagrams withheld past 3x what an unproven source sent (a CON goes with the proof).",
        |c| c.proof.amplification_dropped,
    ),
    (
        "amplification_probes_total",
        "CONs sent as the one datagram past an unproven source's 3x, asking for its ACK.",
        |c| c.proof.amplification_probes,
    ),
    (
        "answers_held_for_proof_total",
        "Answers held until their unproven client's RST to a ping proved its address.",
        |c| c.proof.answers_held_for_proof,
    ),
    (
        "proof_pings_total",
        "Pings (empty CONs) sent to clients to ask for their proof of address.",
        |c| c.proof.proof_pings,
    ),
    (
        "answers_made_confirmable_total",
        "Answers sent as CON because they did not fit an unproven client's 3x.",
        |c| c.proof.answers_made_confirmable,
    ),
    (
        "sources_proved_by_ack_total",
        "Sources that proved their address by ACKing or resetting a message of ours.",
        |c| c.proof.sources_proved_by_ack,
    ),
    (
        "sources_proved_by_echo_total",
        "Sources that proved their address with a fresh Echo value (RFC 9175 2.4).",
        |c| c.proof.sources_proved_by_echo,
    ),
    (
        "ack_proofs_refused_total",
        "ACKs that proved nothing: their source had sent too many matching no message.",
        |c| c.proof.ack_proofs_refused,
    ),
    (
        "unmatched_total",
        "Datagrams that matched no exchange.",
        |c| c.strays.unmatched_client + c.strays.unmatched_upstream,
    ),
    (
        "cache_evictions_total",
        "Finished answers evicted because their store was full (--max-cached, --max-cached-bytes).",
        |c| c.kept.cache_evictions,
    ),
    (
        "early_evictions_total",
        "Evicted answers whose client could still retransmit.",
        |c| c.kept.early_evictions,
    ),
    (
        "local_answer_evictions_total",
        "The proxy's own answers evicted from their full store.",
        |c| c.kept.local_answer_evictions,
    ),
    (
        "share_evictions_total",
        "Kept answers of a client over --max-cached-per-client or --max-cached-bytes-per-client, its oldest evicted first.",
        |c| c.kept.share_evictions,
    ),
    (
        "answers_too_large_to_keep_total",
        "Answers kept without their bytes, longer than --max-cached-bytes-per-client.",
        |c| c.kept.answers_too_large_to_keep,
    ),
    (
        "too_many_options_total",
        "Requests answered 4.02 for more than --max-options options (Proxy-Uri decomposed).",
        |c| c.own_answers.too_many_options,
    ),
    (
        "events_dropped_total",
        "Diagnostic events the engine dropped because its bounded queue was full.",
        |c| c.traffic.events_dropped,
    ),
];

/// Per-upstream gauges: endpoints open and Message IDs reserved.
pub(in crate::proxy) fn write_upstream_metrics(stats: &[UpstreamStats], out: &mut MetricsWriter) {
    // The reverse upstream and an allowed forward target may be one address with a pool of
    // endpoints each: one series per address, the pools summed (a label value may not repeat).
    let mut by_addr: Vec<(String, [f64; 3])> = Vec::new();
    for s in stats {
        let name = s.addr.to_string();
        let values = [
            s.endpoints as f64,
            s.mids_reserved as f64,
            s.in_flight as f64,
        ];
        match by_addr.iter_mut().find(|(n, _)| *n == name) {
            Some((_, sum)) => (0..3).for_each(|i| sum[i] += values[i]),
            None => by_addr.push((name, values)),
        }
    }
    let gauge = |i: usize| -> Vec<(&str, f64)> {
        by_addr.iter().map(|(n, v)| (n.as_str(), v[i])).collect()
    };
    out.labelled_gauge(
        "backoffd_coap_upstream_endpoints",
        "Sockets of the proxy's own open towards each upstream (each its own Message ID space).",
        "upstream",
        &gauge(0),
    );
    out.labelled_gauge(
        "backoffd_coap_upstream_mids_reserved",
        "Message IDs handed out towards each upstream less than a lifetime ago.",
        "upstream",
        &gauge(1),
    );
    out.labelled_gauge(
        "backoffd_coap_upstream_in_flight",
        "Requests waiting on each upstream.",
        "upstream",
        &gauge(2),
    );
}

/// The proxy's counters under `backoffd_coap_*` names.
pub(in crate::proxy) fn write_proxy_metrics(
    c: &Counters,
    send_drops: u64,
    out: &mut MetricsWriter,
) {
    for (name, help, read) in COUNTERS {
        out.counter(&format!("backoffd_coap_{name}"), help, read(c));
    }
    out.counter(
        "backoffd_coap_send_drops_total",
        "Datagrams the kernel refused to send (treated as lost).",
        send_drops,
    );
    out.labelled_counter(
        "backoffd_coap_answers_total",
        "Answers to clients by code: relayed classes and the proxy's own codes.",
        "code",
        &[
            ("2.xx", c.traffic.relayed_2xx),
            ("4.xx", c.traffic.relayed_4xx),
            ("5.xx", c.traffic.relayed_5xx),
            ("4.00", c.own_answers.bad_request_4_00),
            ("4.02", c.own_answers.bad_option_4_02),
            ("4.03", c.own_answers.forbidden_4_03),
            ("4.04", c.own_answers.not_found_4_04),
            ("4.13", c.own_answers.request_too_large_4_13),
            ("5.02", c.own_answers.bad_gateway_5_02),
            ("5.03", c.own_answers.service_unavailable_5_03),
            ("5.04", c.own_answers.gateway_timeout_5_04),
            ("5.05", c.own_answers.proxying_not_supported_5_05),
            ("5.08", c.own_answers.hop_limit_5_08),
        ],
    );
    out.labelled_counter(
        "backoffd_coap_refusals_total",
        "Requests answered 5.03 by the proxy, by cause.",
        "cause",
        &[
            ("endpoints", c.refusals.refused_endpoints),
            ("client", c.refusals.refused_client),
            ("client_rate", c.refusals.refused_client_rate),
            ("proof_backlog", c.refusals.refused_proof_backlog),
            ("inflight", c.refusals.refused_inflight),
            ("upstream_inflight", c.refusals.refused_upstream_inflight),
            ("inflight_bytes", c.refusals.refused_inflight_bytes),
            ("draining", c.refusals.refused_draining),
        ],
    );
    write_proof_and_share_metrics(c, out);
    out.labelled_counter(
        "backoffd_coap_format_errors_total",
        "Malformed datagrams (RST to a CON, NON dropped), by leg.",
        "leg",
        &[
            ("client", c.strays.client_format_errors),
            ("upstream", c.strays.upstream_format_errors),
        ],
    );
    for (name, help, read) in GAUGES {
        out.gauge(&format!("backoffd_coap_{name}"), help, read(c));
    }
}

/// The observation shares' refusals and the held answers' challenges and give-ups.
fn write_proof_and_share_metrics(c: &Counters, out: &mut MetricsWriter) {
    out.labelled_counter(
        "backoffd_coap_observations_refused_total",
        "Observe registrations answered without Observe (RFC 7641 §4.1), by cause.",
        "cause",
        &[
            ("max_observations", c.observe.refused_table),
            ("observation_share", c.observe.refused_share),
        ],
    );
    out.labelled_counter(
        "backoffd_coap_backlog_challenges_total",
        "4.01s with Echo for an answer that could not be held for its client's proof, by cause.",
        "cause",
        &[
            ("share", c.proof.backlog_challenges_share),
            ("total", c.proof.backlog_challenges_total),
        ],
    );
    out.labelled_counter(
        "backoffd_coap_held_answers_given_up_total",
        "Answers waiting for their client's proof that were given up, by cause.",
        "cause",
        &[
            ("evicted", c.proof.held_evicted),
            ("unacknowledged", c.proof.held_given_up_unacknowledged),
            ("unreachable", c.proof.held_given_up_unreachable),
        ],
    );
}

/// The proxy's gauges: name (after `backoffd_coap_`), help, and how to read it.
type Gauge = (&'static str, &'static str, fn(&Counters) -> f64);

const GAUGES: &[Gauge] = &[
    ("live_exchanges", "Exchanges alive in any state.", |c| {
        c.load.live_exchanges as f64
    }),
    (
        "cached_answers",
        "Finished answers kept for retransmissions.",
        |c| c.kept.cached_answers as f64,
    ),
    (
        "cached_answer_bytes",
        "Bytes the stores of finished answers hold (--max-cached-bytes each).",
        |c| c.kept.cached_answer_bytes as f64,
    ),
    ("in_flight", "Requests still waiting on an upstream.", |c| {
        c.load.in_flight as f64
    }),
    (
        "in_flight_bytes",
        "Bytes of the request copies kept for retransmission upstream.",
        |c| c.load.in_flight_bytes as f64,
    ),
    (
        "exchange_answer_bytes",
        "Bytes of the answers live exchanges keep: held for a client's proof, being delivered \
         as CONs, an observation's latest notification.",
        |c| c.load.exchange_answer_bytes as f64,
    ),
    (
        "budget_sources",
        "Client addresses whose send budget is tracked (--client-bytes-per-sec).",
        |c| c.proof.budget_sources as f64,
    ),
    (
        "validation_sources",
        "Client addresses whose proof of receipt is tracked.",
        |c| c.proof.validation_sources as f64,
    ),
    ("observations", "Observe relays alive.", |c| {
        c.observe.observations as f64
    }),
];

/// The response cache's families are named apart from the answer store's older
/// `backoffd_coap_cached_answers` and `backoffd_coap_cache_evictions_total`, which keep their
/// names and meaning.
#[cfg(feature = "cache")]
const RESPONSE_CACHE: &str = "backoffd_coap_response_cache_";

/// The response cache's counters: name after [`RESPONSE_CACHE`], help, and where the value
/// comes from.
#[cfg(feature = "cache")]
#[allow(clippy::type_complexity)]
const CACHE_COUNTERS: &[(&str, &str, fn(&CacheCounters) -> u64)] = &[
    (
        "hits_total",
        "Requests answered from a fresh cached response (RFC 7252 §5.6.1).",
        |c| c.hits,
    ),
    (
        "misses_total",
        "Cacheable requests with no usable cached response: forwarded.",
        |c| c.misses,
    ),
    (
        "revalidations_total",
        "Stale cached responses with an ETag, asked for upstream with it (RFC 7252 §5.6.2).",
        |c| c.revalidations,
    ),
    (
        "revalidated_total",
        "Of the revalidations, those the upstream confirmed with 2.03 Valid.",
        |c| c.revalidated,
    ),
    (
        "invalidations_total",
        "Successful unsafe requests that made a resource's cached responses stale (RFC 7252 §5.6).",
        |c| c.invalidations,
    ),
    (
        "evictions_total",
        "Cached responses evicted, least recently used first, to stay within --cache-size.",
        |c| c.evictions,
    ),
    (
        "expired_total",
        "Stale cached responses without an ETag, dropped on lookup: they cannot be revalidated.",
        |c| c.expired,
    ),
    (
        "stored_total",
        "Upstream responses stored in the response cache.",
        |c| c.stored,
    ),
];

/// The response cache's counters and gauges, under [`RESPONSE_CACHE`] names. Written whether
/// or not the cache is on (zeros when off), like the `--validate-sources` counters, so that a
/// dashboard needs no case for it; a build without the `cache` feature, which cannot turn it
/// on, has none to write.
#[cfg(feature = "cache")]
pub(in crate::proxy) fn write_cache_metrics(engine: &Proxy, out: &mut MetricsWriter) {
    let (counters, entries, bytes) = engine.cache_stats();
    for (name, help, read) in CACHE_COUNTERS {
        out.counter(&format!("{RESPONSE_CACHE}{name}"), help, read(&counters));
    }
    for (name, help, value) in [
        ("entries", "Responses in the response cache.", entries),
        (
            "bytes",
            "Bytes the response cache holds, its bookkeeping included.",
            bytes,
        ),
        (
            "budget_bytes",
            "What the response cache may hold (--cache-size); 0: off.",
            engine.config.cache_size,
        ),
    ] {
        out.gauge(&format!("{RESPONSE_CACHE}{name}"), help, value as f64);
    }
}

#[cfg(all(test, feature = "cache"))]
mod tests {
    use super::*;
    use crate::proxy::{ProxyConfig, Seeds};

    fn cache_exposition(cache_size: usize) -> String {
        let config = ProxyConfig {
            cache_size,
            ..ProxyConfig::default()
        };
        let engine = Proxy::new(
            config,
            Seeds {
                rng: 1,
                hash: [1, 2],
            },
        );
        let mut out = MetricsWriter::new();
        write_cache_metrics(&engine, &mut out);
        out.finish()
    }

    /// The value of the sample named `name` in `text`.
    fn sample(text: &str, name: &str) -> Option<String> {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ').map(String::from))
    }

    #[test]
    fn cache_families_are_written_with_zeros_when_the_cache_is_off() {
        let text = cache_exposition(0);
        let gauges = ["entries", "bytes", "budget_bytes"];
        for (name, kind) in (CACHE_COUNTERS.iter().map(|(n, _, _)| (*n, "counter")))
            .chain(gauges.map(|n| (n, "gauge")))
        {
            let family = format!("{RESPONSE_CACHE}{name}");
            assert!(
                text.contains(&format!("# TYPE {family} {kind}\n")),
                "{family}"
            );
            assert_eq!(sample(&text, &family).as_deref(), Some("0"), "{family}");
        }
    }

    #[test]
    fn cache_budget_gauge_is_the_configured_cache_size() {
        let text = cache_exposition(4 << 20);
        let budget = sample(&text, "backoffd_coap_response_cache_budget_bytes");
        assert_eq!(budget.as_deref(), Some("4194304"));
    }
}
