//! A coaps listener's families in the metrics exposition, under `backoffd_dtls_*`.

use super::DtlsCounters;
use crate::metrics::MetricsWriter;

/// Writes the listener's counters; `sessions` is (all, handshaking), `send_drops` the
/// datagrams its socket could not send.
pub fn write_dtls_metrics(
    c: &DtlsCounters,
    sessions: (usize, usize),
    send_drops: u64,
    out: &mut MetricsWriter,
) {
    out.labelled_gauge(
        "backoffd_dtls_sessions",
        "DTLS sessions held now, by phase.",
        "phase",
        &[
            ("handshaking", sessions.1 as f64),
            ("established", (sessions.0 - sessions.1) as f64),
        ],
    );
    let h = &c.handshakes;
    out.labelled_counter(
        "backoffd_dtls_handshakes_total",
        "ClientHellos by outcome: verify (a stateless HelloVerifyRequest, RFC 6347 §4.2.1), \
         started (a valid cookie), completed, failed, timed_out, refused (session caps).",
        "outcome",
        &[
            ("verify", h.verify_requests),
            ("started", h.started),
            ("completed", h.completed),
            ("failed", h.failed),
            ("timed_out", h.timed_out),
            ("refused", h.refused),
        ],
    );
    let d = &c.drops;
    out.labelled_counter(
        "backoffd_dtls_dropped_total",
        "Datagrams and records dropped, by reason.",
        "reason",
        &[
            ("no_session", d.no_session),
            ("malformed_hello", d.malformed_hello),
            ("fragmented_hello", d.fragmented_hello),
            ("rejected_record", d.rejected_records),
            ("ended_session", d.ended_session),
            ("hello_to_live_session", d.hello_to_live_session),
            ("send_failed", send_drops),
        ],
    );
    write_admission_metrics(c, out);
    let e = &c.endings;
    out.labelled_counter(
        "backoffd_dtls_sessions_ended_total",
        "Established sessions ended, by reason.",
        "reason",
        &[
            ("closed", e.closed),
            ("idle", e.idle),
            ("replaced", e.replaced),
        ],
    );
    out.counter(
        "backoffd_dtls_datagrams_in_total",
        "CoAP datagrams decrypted and handed to the proxy.",
        c.datagrams_in,
    );
    out.counter(
        "backoffd_dtls_datagrams_out_total",
        "CoAP datagrams encrypted and sent.",
        c.datagrams_out,
    );
}

/// The handshake bounds' evictions and refusals (`admission.rs`).
fn write_admission_metrics(c: &DtlsCounters, out: &mut MetricsWriter) {
    out.labelled_counter(
        "backoffd_dtls_evicted_total",
        "Sessions still handshaking ended to make room for a cookie-verified ClientHello, by \
         the bound it met: sessions, handshakes, source_sessions, source_handshakes.",
        "bound",
        &c.evicted.labelled(),
    );
    out.labelled_counter(
        "backoffd_dtls_refused_total",
        "Cookie-verified ClientHellos refused because only established sessions filled the \
         bound they met, by bound.",
        "bound",
        &c.refused.labelled(),
    );
}

/// Writes a coaps upstream's counters (`--upstream coaps://`); `sessions` is
/// (established, handshaking).
pub fn write_dtls_upstream_metrics(
    c: &super::ClientCounters,
    sessions: (usize, usize),
    out: &mut MetricsWriter,
) {
    out.labelled_gauge(
        "backoffd_dtls_upstream_sessions",
        "The proxy's DTLS sessions towards its coaps upstream, by phase.",
        "phase",
        &[
            ("handshaking", sessions.1 as f64),
            ("established", sessions.0 as f64),
        ],
    );
    let h = &c.handshakes;
    out.labelled_counter(
        "backoffd_dtls_upstream_handshakes_total",
        "The proxy's handshakes with its coaps upstream, by outcome.",
        "outcome",
        &[
            ("started", h.started),
            ("completed", h.completed),
            ("failed", h.failed),
            ("timed_out", h.timed_out),
        ],
    );
    let e = &c.endings;
    out.labelled_counter(
        "backoffd_dtls_upstream_sessions_ended_total",
        "Sessions towards the coaps upstream ended, by reason (stale: a retransmission \
         found nothing heard from the upstream since; set up again).",
        "reason",
        &[("closed", e.closed), ("idle", e.idle), ("stale", e.stale)],
    );
    out.labelled_counter(
        "backoffd_dtls_upstream_dropped_total",
        "Datagrams and records towards or from the coaps upstream dropped, by reason.",
        "reason",
        &[
            ("queue_full", c.queue_dropped),
            ("no_session", c.no_session),
            ("rejected_record", c.rejected_records),
            ("rejected_write", c.rejected_writes),
        ],
    );
}
