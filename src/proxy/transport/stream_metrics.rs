//! What the stream listeners count, and their families in the metrics exposition
//! (`backoffd_coap_stream_*`, labelled by transport).

use crate::coap_tcp::ConnCounters;
use crate::metrics::MetricsWriter;

/// Why a connection was closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseReason {
    /// No CSM within the bound (RFC 8323 §5.3).
    NoCsm,
    /// A keepalive Ping went unanswered.
    NoPong,
    /// We aborted it: a protocol error (§5.6).
    Aborted,
    /// We aborted it: its CSM announced a Max-Message-Size no answer fits in (§5.3.1).
    BadCsm,
    /// We aborted it: a message begun was not whole within the message timeout.
    MessageTimeout,
    /// The peer sent Abort.
    PeerAborted,
    /// Released (§5.5), by the peer or at our shutdown.
    Released,
    /// The peer closed it.
    PeerClosed,
    /// Answers piled up faster than the peer read them.
    SlowReader,
    /// TLS failed, or the WebSocket was refused or closed.
    Transport,
    /// Output waited the write-stall timeout with the socket taking none of it.
    WriteStall,
    /// Closed at a cap for a new connection, having sent no CSM.
    Evicted,
    /// Closed at a cap for a new connection: open, idle (nothing in flight, no
    /// observation), of the source holding the most, quiet longest.
    EvictedIdle,
    /// The socket failed.
    Error,
}

impl CloseReason {
    const ALL: [CloseReason; 14] = [
        CloseReason::NoCsm,
        CloseReason::NoPong,
        CloseReason::Aborted,
        CloseReason::BadCsm,
        CloseReason::MessageTimeout,
        CloseReason::PeerAborted,
        CloseReason::Released,
        CloseReason::PeerClosed,
        CloseReason::SlowReader,
        CloseReason::Transport,
        CloseReason::WriteStall,
        CloseReason::Evicted,
        CloseReason::EvictedIdle,
        CloseReason::Error,
    ];

    fn label(self) -> &'static str {
        match self {
            CloseReason::NoCsm => "no_csm",
            CloseReason::NoPong => "no_pong",
            CloseReason::Aborted => "aborted",
            CloseReason::BadCsm => "bad_csm",
            CloseReason::MessageTimeout => "message_timeout",
            CloseReason::PeerAborted => "peer_aborted",
            CloseReason::Released => "released",
            CloseReason::PeerClosed => "peer_closed",
            CloseReason::SlowReader => "slow_reader",
            CloseReason::Transport => "transport",
            CloseReason::WriteStall => "write_stall",
            CloseReason::Evicted => "evicted",
            CloseReason::EvictedIdle => "evicted_idle",
            CloseReason::Error => "error",
        }
    }
}

/// Which cap refused a new connection, none being there to close for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The listener's total.
    Total,
    /// Its source prefix's share.
    PerSource,
}

/// A listener's counts, over its life.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamCounters {
    /// Connections accepted.
    pub accepted: u64,
    /// Connections closed at once: the total cap was reached and none could be closed for
    /// them.
    pub refused: u64,
    /// The same at their source prefix's cap.
    pub refused_per_source: u64,
    /// Connections closed, by reason (in [`CloseReason::ALL`]'s order).
    closed: [u64; CloseReason::ALL.len()],
    /// What the connections counted: closed ones, and open ones once added
    /// ([`with_open`](Self::with_open)).
    conns: ConnCounters,
}

impl StreamCounters {
    /// A new connection refused at a cap.
    pub fn refused(&mut self, cap: Refusal) {
        match cap {
            Refusal::Total => self.refused += 1,
            Refusal::PerSource => self.refused_per_source += 1,
        }
    }

    /// A connection closed for `why`, having counted `counted`.
    pub fn closed(&mut self, why: CloseReason, counted: &ConnCounters) {
        self.closed[why as usize] += 1;
        add(&mut self.conns, counted);
    }

    /// These counts with the open connections' added.
    pub fn with_open(&self, open: impl Iterator<Item = ConnCounters>) -> StreamCounters {
        let mut all = self.clone();
        for c in open {
            add(&mut all.conns, &c);
        }
        all
    }
}

fn add(total: &mut ConnCounters, c: &ConnCounters) {
    total.requests += c.requests;
    total.answers += c.answers;
    total.oversized_answers += c.oversized_answers;
    total.ignored += c.ignored;
    total.pauses += c.pauses;
}

/// One listener's figures for a scrape.
pub struct Snapshot {
    /// Its `transport` label.
    pub transport: &'static str,
    /// Its counts, open connections' included.
    pub counters: StreamCounters,
    /// Connections open (CSMs exchanged).
    pub open: usize,
    /// Connections awaiting the peer's CSM.
    pub awaiting_csm: usize,
    /// Bytes the connections hold.
    pub buffered: usize,
    /// Failed accepts.
    pub accept_failures: u64,
}

/// Writes the listeners' families, a row per listener in each.
pub fn write(listeners: &[Snapshot], out: &mut MetricsWriter) {
    if listeners.is_empty() {
        return;
    }
    let rows = |f: &dyn Fn(&Snapshot) -> Vec<(&'static str, u64)>| -> Vec<(Vec<String>, u64)> {
        (listeners.iter())
            .flat_map(|l| {
                f(l).into_iter()
                    .map(|(v, n)| (vec![l.transport.to_string(), v.to_string()], n))
            })
            .collect()
    };
    let gauges: Vec<(Vec<String>, f64)> = (listeners.iter())
        .flat_map(|l| {
            [("open", l.open), ("awaiting_csm", l.awaiting_csm)]
                .map(|(phase, n)| (vec![l.transport.to_string(), phase.to_string()], n as f64))
        })
        .collect();
    out.multi_labelled_gauge(
        "backoffd_coap_stream_connections",
        "CoAP connections (RFC 8323) open now, by transport and phase (awaiting_csm: the peer's CSM has not come).",
        &["transport", "phase"],
        &gauges,
    );
    let buffered: Vec<(&str, f64)> = (listeners.iter())
        .map(|l| (l.transport, l.buffered as f64))
        .collect();
    out.labelled_gauge(
        "backoffd_coap_stream_buffered_bytes",
        "Bytes the connections hold: input short of a whole message, output not yet written.",
        "transport",
        &buffered,
    );
    out.multi_labelled_counter(
        "backoffd_coap_stream_accepted_total",
        "Connections accepted, and refused at the total cap or at their source prefix's (with none there to close for them: none without a CSM, none idle).",
        &["transport", "outcome"],
        &rows(&|l| {
            vec![
                ("accepted", l.counters.accepted),
                ("refused", l.counters.refused),
                ("refused_per_source", l.counters.refused_per_source),
                ("accept_failed", l.accept_failures),
            ]
        }),
    );
    out.multi_labelled_counter(
        "backoffd_coap_stream_closed_total",
        "Connections closed, by reason.",
        &["transport", "reason"],
        &rows(&|l| {
            (CloseReason::ALL.iter())
                .map(|why| (why.label(), l.counters.closed[*why as usize]))
                .collect()
        }),
    );
    let pauses: Vec<(&str, u64)> = (listeners.iter())
        .map(|l| (l.transport, l.counters.conns.pauses))
        .collect();
    out.labelled_counter(
        "backoffd_coap_stream_output_pauses_total",
        "Times a connection's requests stopped being taken because its answers waiting for the socket (or queued for it) reached 64 KiB; taking resumes as they drain.",
        "transport",
        &pauses,
    );
    out.multi_labelled_counter(
        "backoffd_coap_stream_messages_total",
        "Messages: requests handed to the proxy, answers written, answers dropped as larger than the peer's Max-Message-Size, messages ignored.",
        &["transport", "kind"],
        &rows(&|l| {
            let m = &l.counters.conns;
            vec![
                ("request", m.requests),
                ("answer", m.answers),
                ("oversized_answer", m.oversized_answers),
                ("ignored", m.ignored),
            ]
        }),
    );
}
