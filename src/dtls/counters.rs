//! What a coaps listener counts: handshakes by outcome and records dropped by reason
//! (exported as `backoffd_dtls_*`, `crate::proxy::metrics`).

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
