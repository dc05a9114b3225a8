//! What a coaps listener counts: handshakes by outcome and records dropped by reason
//! (exported as `backoffd_dtls_*`, [`super::metrics`]).

use super::admission::Bound;

/// How handshakes ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Handshakes {
    /// HelloVerifyRequests sent: ClientHellos without a valid cookie, answered statelessly.
    pub verify_requests: u64,
    /// Cookie-verified ClientHellos that started a session.
    pub started: u64,
    /// Handshakes that reached Finished.
    pub completed: u64,
    /// Handshakes the peer or the library ended with an error (a wrong key, say).
    pub failed: u64,
    /// Handshakes that did not finish within the handshake timeout, or ran out of
    /// retransmissions.
    pub timed_out: u64,
    /// Cookie-verified ClientHellos refused because the session caps were reached.
    pub refused: u64,
}

/// Datagrams and records dropped, by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Drops {
    /// From an address without a session, and not a ClientHello.
    pub no_session: u64,
    /// A ClientHello whose lengths do not add up.
    pub malformed_hello: u64,
    /// A ClientHello in more than one fragment (see `hello.rs`).
    pub fragmented_hello: u64,
    /// A record of an established session that failed to decrypt, was replayed, or that the
    /// library refused: dropped without an alert (RFC 6347 §4.1.2.1), the session kept.
    pub rejected_records: u64,
    /// Answers for a session that had ended.
    pub ended_session: u64,
    /// ClientHellos without a cookie from the address of a session its client was heard in
    /// lately: not answered, so that a forged one cannot end the session (RFC 6347 §4.2.8,
    /// `server.rs`).
    pub hello_to_live_session: u64,
}

/// Counts by the bound a cookie-verified ClientHello met (`admission.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ByBound {
    /// All sessions.
    pub sessions: u64,
    /// Sessions still handshaking.
    pub handshakes: u64,
    /// One source's sessions.
    pub source_sessions: u64,
    /// One source's sessions still handshaking.
    pub source_handshakes: u64,
}

impl ByBound {
    /// One more at `bound`.
    pub fn count(&mut self, bound: Bound) {
        match bound {
            Bound::Sessions => self.sessions += 1,
            Bound::Handshakes => self.handshakes += 1,
            Bound::SourceSessions => self.source_sessions += 1,
            Bound::SourceHandshakes => self.source_handshakes += 1,
        }
    }

    /// The counts with their metric labels.
    pub fn labelled(&self) -> [(&'static str, u64); 4] {
        [
            ("sessions", self.sessions),
            ("handshakes", self.handshakes),
            ("source_sessions", self.source_sessions),
            ("source_handshakes", self.source_handshakes),
        ]
    }
}

/// How sessions ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Endings {
    /// The peer sent close_notify.
    pub closed: u64,
    /// No record either way for the idle timeout.
    pub idle: u64,
    /// The client started a new handshake from the same address (RFC 6347 §4.2.8).
    pub replaced: u64,
}

/// All of a listener's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DtlsCounters {
    /// Handshakes.
    pub handshakes: Handshakes,
    /// Drops.
    pub drops: Drops,
    /// Established sessions' endings.
    pub endings: Endings,
    /// Handshaking sessions ended to make room for a newcomer, by the bound it met.
    pub evicted: ByBound,
    /// Newcomers refused (only established sessions filled the bound), by bound.
    pub refused: ByBound,
    /// Decrypted CoAP datagrams handed to the proxy.
    pub datagrams_in: u64,
    /// CoAP datagrams sent encrypted.
    pub datagrams_out: u64,
}

/// What a coaps upstream's sessions count (`backoffd_dtls_upstream_*`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientCounters {
    /// Handshakes: `started`, `completed`, `failed` (the origin refused), `timed_out`
    /// (`verify_requests` and `refused` stay 0: they are a server's).
    pub handshakes: Handshakes,
    /// Established sessions' endings (`replaced` stays 0).
    pub endings: ClientEndings,
    /// Datagrams that waited for a session and were dropped to make room.
    pub queue_dropped: u64,
    /// Datagrams from the origin while no session was up.
    pub no_session: u64,
    /// Records of an established session that failed to decrypt or were replayed.
    pub rejected_records: u64,
    /// Datagrams the library would not encrypt.
    pub rejected_writes: u64,
    /// Decrypted CoAP datagrams handed to the proxy.
    pub datagrams_in: u64,
    /// CoAP datagrams sent encrypted.
    pub datagrams_out: u64,
}

/// How an upstream's sessions ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClientEndings {
    /// The origin sent close_notify.
    pub closed: u64,
    /// No record either way for the idle timeout.
    pub idle: u64,
    /// A retransmission found no record from the origin since the first unanswered datagram.
    pub stale: u64,
}
