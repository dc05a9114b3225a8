//! The proxy's families in the metrics exposition: its counters under `backoffd_coap_*`,
//! and per-upstream gauges of the endpoint pool.

use super::{Counters, UpstreamStats};
use crate::metrics::MetricsWriter;

/// The plain counters: name after `backoffd_coap_`, help, and where the value comes from.
#[allow(clippy::type_complexity)]
const COUNTERS: &[(&str, &str, fn(&Counters) -> u64)] = &[
    (
        "requests_total",
        "Client requests accepted (duplicates excluded).",
        |c| c.requests,
    ),
    (
        "forwarded_total",
        "Requests sent upstream for the first time.",
        |c| c.forwarded,
    ),
    (
        "client_duplicates_total",
        "Client retransmissions absorbed, never forwarded.",
        |c| c.client_duplicates,
    ),
    (
        "upstream_retransmissions_total",
        "Retransmissions to upstreams by the proxy's retry policy.",
        |c| c.upstream_retransmissions,
    ),
    (
        "client_retransmissions_total",
        "Retransmissions of confirmable answers to clients.",
        |c| c.client_retransmissions,
    ),
    (
        "empty_acks_total",
        "Empty ACKs sent to clients before a separate answer.",
        |c| c.empty_acks_sent,
    ),
    (
        "notifications_relayed_total",
        "Observe notifications relayed to clients.",
        |c| c.notifications_relayed,
    ),
    (
        "notifications_con_total",
        "Of the notifications relayed, those sent as CON (RFC 7641 §4.5, --observe-con-every).",
        |c| c.notifications_con,
    ),
    (
        "notifications_superseded_total",
        "Notifications that replaced one awaiting its ACK, sent at its next retransmission.",
        |c| c.notifications_superseded,
    ),
    (
        "observers_lost_total",
        "Observations ended by their client: CON notification unacknowledged, RST, ICMP.",
        |c| c.observers_lost,
    ),
    (
        "over_budget_dropped_total",
        "Datagrams to clients dropped over their source's send budget (--client-*).",
        |c| c.over_budget_dropped,
    ),
    (
        "over_budget_dropped_bytes_total",
        "Bytes of the datagrams dropped over a client's send budget.",
        |c| c.over_budget_dropped_bytes,
    ),
    (
        "echo_challenges_total",
        "--validate-sources: 4.01s with an Echo value to sources not yet validated (RFC 9175).",
        |c| c.echo_challenges,
    ),
    (
        "amplification_dropped_total",
        "--validate-sources: datagrams dropped past 3x what an unvalidated source sent.",
        |c| c.amplification_dropped,
    ),
    (
        "unmatched_total",
        "Datagrams that matched no exchange.",
        |c| c.unmatched_client + c.unmatched_upstream,
    ),
    (
        "cache_evictions_total",
        "Finished answers evicted because the cache was full.",
        |c| c.cache_evictions,
    ),
    (
        "early_evictions_total",
        "Evicted answers whose client could still retransmit.",
        |c| c.early_evictions,
    ),
    (
        "local_answer_evictions_total",
        "The proxy's own answers evicted from their full store.",
        |c| c.local_answer_evictions,
    ),
    (
        "share_evictions_total",
        "Kept answers of a client over --max-cached-per-client, its oldest evicted first.",
        |c| c.share_evictions,
    ),
    (
        "too_many_options_total",
        "Requests answered 4.02 for more than --max-options options (Proxy-Uri decomposed).",
        |c| c.too_many_options,
    ),
    (
        "events_dropped_total",
        "Diagnostic events the engine dropped because its bounded queue was full.",
        |c| c.events_dropped,
    ),
];

/// Per-upstream gauges: endpoints open and Message IDs reserved.
pub(super) fn write_upstream_metrics(stats: &[UpstreamStats], out: &mut MetricsWriter) {
    let names: Vec<String> = stats.iter().map(|s| s.addr.to_string()).collect();
    let gauge = |f: fn(&UpstreamStats) -> f64| -> Vec<(&str, f64)> {
        names
            .iter()
            .map(String::as_str)
            .zip(stats.iter().map(f))
            .collect()
    };
    out.labelled_gauge(
        "backoffd_coap_upstream_endpoints",
        "Sockets of the proxy's own open towards each upstream (each its own Message ID space).",
        "upstream",
        &gauge(|s| s.endpoints as f64),
    );
    out.labelled_gauge(
        "backoffd_coap_upstream_mids_reserved",
        "Message IDs handed out towards each upstream less than a lifetime ago.",
        "upstream",
        &gauge(|s| s.mids_reserved as f64),
    );
    out.labelled_gauge(
        "backoffd_coap_upstream_in_flight",
        "Requests waiting on each upstream.",
        "upstream",
        &gauge(|s| s.in_flight as f64),
    );
}

/// The proxy's counters under `backoffd_coap_*` names.
pub(super) fn write_proxy_metrics(c: &Counters, send_drops: u64, out: &mut MetricsWriter) {
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
            ("2.xx", c.relayed_2xx),
            ("4.xx", c.relayed_4xx),
            ("5.xx", c.relayed_5xx),
            ("4.00", c.bad_request_4_00),
            ("4.02", c.bad_option_4_02),
            ("4.03", c.forbidden_4_03),
            ("4.04", c.not_found_4_04),
            ("4.13", c.request_too_large_4_13),
            ("5.02", c.bad_gateway_5_02),
            ("5.03", c.service_unavailable_5_03),
            ("5.04", c.gateway_timeout_5_04),
            ("5.05", c.proxying_not_supported_5_05),
            ("5.08", c.hop_limit_5_08),
        ],
    );
    out.labelled_counter(
        "backoffd_coap_refusals_total",
        "Requests answered 5.03 by the proxy, by cause.",
        "cause",
        &[
            ("endpoints", c.refused_endpoints),
            ("client", c.refused_client),
            ("inflight", c.refused_inflight),
            ("upstream_inflight", c.refused_upstream_inflight),
            ("inflight_bytes", c.refused_inflight_bytes),
            ("draining", c.refused_draining),
        ],
    );
    out.labelled_counter(
        "backoffd_coap_format_errors_total",
        "Malformed datagrams (RST to a CON, NON dropped), by leg.",
        "leg",
        &[
            ("client", c.client_format_errors),
            ("upstream", c.upstream_format_errors),
        ],
    );
    for (name, help, read) in GAUGES {
        out.gauge(&format!("backoffd_coap_{name}"), help, read(c));
    }
}

/// The proxy's gauges: name (after `backoffd_coap_`), help, and how to read it.
type Gauge = (&'static str, &'static str, fn(&Counters) -> f64);

const GAUGES: &[Gauge] = &[
    ("live_exchanges", "Exchanges alive in any state.", |c| {
        c.live_exchanges as f64
    }),
    (
        "cached_answers",
        "Finished answers kept for retransmissions.",
        |c| c.cached_answers as f64,
    ),
    ("in_flight", "Requests still waiting on an upstream.", |c| {
        c.in_flight as f64
    }),
    (
        "in_flight_bytes",
        "Bytes of the request copies kept for retransmission upstream.",
        |c| c.in_flight_bytes as f64,
    ),
    (
        "budget_sources",
        "Client addresses whose send budget is tracked.",
        |c| c.budget_sources as f64,
    ),
    ("observations", "Observe relays alive.", |c| {
        c.observations as f64
    }),
];
