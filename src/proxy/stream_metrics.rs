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
    /// The peer sent Abort.
    PeerAborted,
    /// Released (§5.5), by the peer or at our shutdown.
    Released,
    /// The peer closed it.
    PeerClosed,
    /// Answers piled up faster than the peer read them.
    SlowReader,
    /// Output waited the write-stall timeout with the socket taking none of it.
    WriteStall,
    /// CloseReason at a cap for a new connection, having sent no CSM.
    Evicted,
    /// The socket failed.
    Error,
}

impl CloseReason {
    const ALL: [CloseReason; 10] = [
        CloseReason::NoCsm,
        CloseReason::NoPong,
        CloseReason::Aborted,
        CloseReason::PeerAborted,
        CloseReason::Released,
        CloseReason::PeerClosed,
        CloseReason::SlowReader,
        CloseReason::WriteStall,
        CloseReason::Evicted,
        CloseReason::Error,
    ];

    fn label(self) -> &'static str {
        match self {
            CloseReason::NoCsm => "no_csm",
            CloseReason::NoPong => "no_pong",
            CloseReason::Aborted => "aborted",
            CloseReason::PeerAborted => "peer_aborted",
            CloseReason::Released => "released",
            CloseReason::PeerClosed => "peer_closed",
            CloseReason::SlowReader => "slow_reader",
            CloseReason::WriteStall => "write_stall",
            CloseReason::Evicted => "evicted",
            CloseReason::Error => "error",
        }
    }
}

/// A listener's counts, over its life.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamCounters {
    /// Connections accepted.
    pub accepted: u64,
    /// Connections closed at once: a cap was reached and none could be closed for them.
    pub refused: u64,
    /// Connections closed, by reason (in [`CloseReason::ALL`]'s order).
    closed: [u64; 10],
    /// What the connections counted: closed ones, and open ones once added
    /// ([`with_open`](Self::with_open)).
    conns: ConnCounters,
}

impl StreamCounters {
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
}

/// Writes a listener's families: `c` its counts (open connections' included), `gauges` its
/// (open, awaiting CSM, buffered bytes), `accept_failures` its failed accepts.
pub fn write(
    transport: &str,
    c: &StreamCounters,
    gauges: (usize, usize, usize),
    accept_failures: u64,
    out: &mut MetricsWriter,
) {
    let with = |v: &str| vec![transport.to_string(), v.to_string()];
    let (open, waiting, buffered) = gauges;
    out.multi_labelled_gauge(
        "backoffd_coap_stream_connections",
        "CoAP connections (RFC 8323) open now, by transport and phase (awaiting_csm: the peer's CSM has not come).",
        &["transport", "phase"],
        &[
            (with("open"), open as f64),
            (with("awaiting_csm"), waiting as f64),
        ],
    );
    out.labelled_gauge(
        "backoffd_coap_stream_buffered_bytes",
        "Bytes the connections hold: input short of a whole message, output not yet written.",
        "transport",
        &[(transport, buffered as f64)],
    );
    out.multi_labelled_counter(
        "backoffd_coap_stream_accepted_total",
        "Connections accepted, and refused at a cap (with none awaiting its CSM to close for them).",
        &["transport", "outcome"],
        &[
            (with("accepted"), c.accepted),
            (with("refused"), c.refused),
            (with("accept_failed"), accept_failures),
        ],
    );
    let closed: Vec<(Vec<String>, u64)> = (CloseReason::ALL.iter())
        .map(|why| (with(why.label()), c.closed[*why as usize]))
        .collect();
    out.multi_labelled_counter(
        "backoffd_coap_stream_closed_total",
        "Connections closed, by reason.",
        &["transport", "reason"],
        &closed,
    );
    let m = &c.conns;
    out.multi_labelled_counter(
        "backoffd_coap_stream_messages_total",
        "Messages: requests handed to the proxy, answers written, answers dropped as larger than the peer's Max-Message-Size, messages ignored.",
        &["transport", "kind"],
        &[
            (with("request"), m.requests),
            (with("answer"), m.answers),
            (with("oversized_answer"), m.oversized_answers),
            (with("ignored"), m.ignored),
        ],
    );
}
