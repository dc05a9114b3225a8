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
        "HTTP connections closed at once: the cap was reached and none was idle.",
        http.counts().refused,
    );
}
