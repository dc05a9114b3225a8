//! What the metrics endpoint answers, as pure functions of the request, and what it counts.

use super::MetricsWriter;

/// The exposition format Prometheus scrapes (text format 0.0.4).
pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
const TEXT: &str = "text/plain; charset=utf-8";
/// RFC 9110 §15.5.6: a 405 lists the methods the resource supports.
const ALLOW: &[(&str, &str)] = &[("Allow", "GET, HEAD")];

/// Where a request goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// `GET /metrics`: the exposition document.
    Metrics,
    /// `GET /healthz`: a liveness probe, always `ok`.
    Healthz,
    /// Any other path: 404.
    NotFound,
    /// A known path with a method other than GET or HEAD: 405.
    MethodNotAllowed,
}

/// `GET`/`HEAD` of `/metrics` and `/healthz`; other methods there are 405, other paths 404.
/// HEAD is answered like GET and the connection drops the body (RFC 9110 §9.3.2).
pub fn route(method: &str, path: &str) -> Route {
    let known = match path {
        "/metrics" => Route::Metrics,
        "/healthz" => Route::Healthz,
        _ => return Route::NotFound,
    };
    match method {
        "GET" | "HEAD" => known,
        _ => Route::MethodNotAllowed,
    }
}

/// An answer ready for [`crate::http1::Http1Connection::respond_with`].
pub struct Reply {
    /// HTTP status code.
    pub status: u16,
    /// Extra header fields, e.g. `Allow` on a 405.
    pub fields: &'static [(&'static str, &'static str)],
    /// The `Content-Type` of the body.
    pub content_type: &'static str,
    /// The response body (dropped for HEAD by the connection).
    pub body: Vec<u8>,
}

impl Reply {
    /// The answer for `route`; `/metrics` gets the document `metrics` writes.
    pub fn new(route: Route, metrics: impl FnOnce() -> String) -> Reply {
        let text = |status, fields, body: &str| Reply {
            status,
            fields,
            content_type: TEXT,
            body: body.as_bytes().to_vec(),
        };
        match route {
            Route::Metrics => Reply {
                status: 200,
                fields: &[],
                content_type: METRICS_CONTENT_TYPE,
                body: metrics().into_bytes(),
            },
            Route::Healthz => text(200, &[], "ok\n"),
            Route::NotFound => text(404, &[], "not found\n"),
            Route::MethodNotAllowed => text(405, ALLOW, "method not allowed\n"),
        }
    }
}

/// Every status the endpoint can send: its answers and the connection's own refusals.
const CODES: [(u16, &str); 9] = [
    (200, "200"),
    (400, "400"),
    (404, "404"),
    (405, "405"),
    (408, "408"),
    (413, "413"),
    (431, "431"),
    (503, "503"),
    (500, "500"),
];

/// The endpoint's own counters.
#[derive(Clone, Debug, Default)]
pub struct HttpStats {
    by_code: [u64; CODES.len()],
    /// Connections accepted.
    pub connections: u64,
    /// Connections closed right after accept because `max_connections` were open.
    pub connections_refused: u64,
    /// Idle keep-alive connections closed at the cap to make room for a new one.
    pub idle_closed: u64,
    /// Connections with no complete request yet (or a body behind the minimum rate) closed
    /// at the cap to make room for a new one.
    pub slow_closed: u64,
    /// Failed accepts (e.g. out of descriptors); accepting resumed after a pause.
    pub accept_failures: u64,
}

impl HttpStats {
    /// Counts an answer; a status outside the table counts as 500, which is what it became.
    pub fn count(&mut self, status: u16) {
        let i = CODES.iter().position(|(c, _)| *c == status);
        let i = i.unwrap_or(CODES.len() - 1);
        self.by_code[i] += 1;
    }

    /// Writes the counters, plus `open` as the open-connections gauge.
    pub fn write(&self, out: &mut MetricsWriter, open: usize) {
        let by_code: Vec<(&str, u64)> = CODES
            .iter()
            .zip(self.by_code)
            .map(|((_, label), n)| (*label, n))
            .collect();
        out.labelled_counter(
            "backoffd_http_requests_total",
            "Metrics endpoint answers by HTTP status, refusals included.",
            "code",
            &by_code,
        );
        out.counter(
            "backoffd_http_connections_total",
            "Metrics endpoint connections accepted.",
            self.connections,
        );
        out.counter(
            "backoffd_http_connections_refused_total",
            "Metrics endpoint connections closed at once: too many open.",
            self.connections_refused,
        );
        out.counter(
            "backoffd_http_connections_idle_closed_total",
            "Metrics endpoint idle keep-alive connections closed at the cap for a new one.",
            self.idle_closed,
        );
        out.counter(
            "backoffd_http_connections_slow_closed_total",
            "Metrics endpoint connections with no complete request yet closed at the cap for a \
             new one.",
            self.slow_closed,
        );
        out.counter(
            "backoffd_http_accept_failures_total",
            "Metrics endpoint accepts that failed (e.g. out of descriptors) and paused accepting.",
            self.accept_failures,
        );
        out.gauge(
            "backoffd_http_connections_open",
            "Metrics endpoint connections open.",
            open as f64,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_by_path_then_method() {
        assert_eq!(route("GET", "/metrics"), Route::Metrics);
        assert_eq!(route("HEAD", "/healthz"), Route::Healthz);
        assert_eq!(route("POST", "/metrics"), Route::MethodNotAllowed);
        assert_eq!(
            route("get", "/metrics"),
            Route::MethodNotAllowed,
            "methods are case-sensitive"
        );
        assert_eq!(route("POST", "/nope"), Route::NotFound);
        assert_eq!(route("GET", "/metrics/"), Route::NotFound);
    }

    #[test]
    fn method_not_allowed_lists_the_allowed_methods() {
        let r = Reply::new(Route::MethodNotAllowed, String::new);
        assert_eq!((r.status, r.fields), (405, ALLOW));
    }

    #[test]
    fn counts_by_code() {
        let mut s = HttpStats::default();
        s.count(200);
        s.count(200);
        s.count(431);
        s.count(999);
        let mut w = MetricsWriter::new();
        s.write(&mut w, 1);
        let text = w.finish();
        assert!(text.contains("backoffd_http_requests_total{code=\"200\"} 2\n"));
        assert!(text.contains("backoffd_http_requests_total{code=\"431\"} 1\n"));
        assert!(text.contains("backoffd_http_requests_total{code=\"500\"} 1\n"));
        assert!(text.contains("backoffd_http_connections_open 1\n"));
    }
}
