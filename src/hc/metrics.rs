//! The cross-proxy's metrics under `backoffd_hc_*` (Prometheus text exposition).

use crate::metrics::MetricsWriter;

use super::HttpFront;

/// HTTP requests by method and status, requests and event streams in flight, connections.
pub fn write_http_metrics(http: &HttpFront, out: &mut MetricsWriter) {
    let front = http.front();
    let rows: Vec<(Vec<String>, u64)> = (front.counters().answers.iter())
        .map(|((method, status), n)| (vec![method.to_string(), status.to_string()], *n))
        .collect();
    out.multi_labelled_counter(
        "backoffd_hc_requests_total",
        "HTTP requests answered by the cross-proxy, by method and status (an event stream counts \
         once, as its 200).",
        &["method", "status"],
        &rows,
    );
    let (in_flight, streams) = front.in_flight();
    out.gauge(
        "backoffd_hc_requests_in_flight",
        "HTTP requests being served (event streams included).",
        in_flight as f64,
    );
    out.gauge(
        "backoffd_hc_event_streams",
        "Event streams (Accept: text/event-stream) registered or registering.",
        streams as f64,
    );
    out.gauge(
        "backoffd_hc_connections",
        "HTTP connections open.",
        http.connections() as f64,
    );
    out.counter(
        "backoffd_hc_connections_total",
        "HTTP connections accepted.",
        http.counts().accepted,
    );
    out.counter(
        "backoffd_hc_connections_refused_total",
        "HTTP connections closed at once: the cap was reached and every one owed answers.",
        http.counts().refused,
    );
    out.counter(
        "backoffd_hc_connections_idle_closed_total",
        "Idle keep-alive HTTP connections closed at the cap for a new one.",
        http.counts().idle_closed,
    );
    out.counter(
        "backoffd_hc_connections_slow_closed_total",
        "HTTP connections with no complete request head, or a body behind the minimum rate, \
         closed at the cap for a new one.",
        http.counts().slow_closed,
    );
    let rows: Vec<(String, u64)> = (front.counters().refused.iter())
        .map(|(status, n)| (status.to_string(), *n))
        .collect();
    let rows: Vec<(&str, u64)> = rows.iter().map(|(s, n)| (s.as_str(), *n)).collect();
    out.labelled_counter(
        "backoffd_hc_refused_total",
        "HTTP requests the connection refused by itself, by status: 400, 408 (a late head or \
         body, or one behind the minimum rate), 413, 431, 503 (past \
         --http-max-inflight-bytes), ...",
        "status",
        &rows,
    );
    out.gauge(
        "backoffd_hc_request_body_bytes",
        "HTTP request-body bytes held: being received, and held by exchanges in flight.",
        http.held_body_bytes() as f64,
    );
}
