//! The connection's life as one state (RFC 9113 §3.4, §6.5.3, §6.8): handshaking while open,
//! closing once a GOAWAY has gone either way, closed. Each state carries what only it has (the
//! handshake's deadline, which way GOAWAY went, the error we closed with), so combinations the
//! RFC has no name for, such as "closed but still waiting for a SETTINGS ACK", cannot be written.

use crate::http2::error::{ErrorCode, H2Error};
use crate::time::Timestamp;

/// Where the connection stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Lifecycle {
    /// Streams may open (§5.1); the handshake may still be under way.
    Open {
        /// How far the opening exchange has got.
        handshake: Handshake,
    },
    /// A GOAWAY has gone one way or both (§6.8): no new streams; the connection ends with its
    /// last stream. The handshake still runs to its end or its deadline.
    Closing {
        /// How far the opening exchange has got.
        handshake: Handshake,
        /// Which way GOAWAY went.
        goaway: GoAway,
    },
    /// Done: the caller flushes the output and closes the socket.
    Closed {
        /// The connection error we closed with (§5.4.1); `None` when it ended gracefully.
        error: Option<H2Error>,
    },
}

/// The opening exchange (§3.4): the peer's preface and first SETTINGS, then its ACK of our
/// SETTINGS (§6.5.3), all due by one deadline so a peer cannot hold a connection by never
/// finishing it (slowloris). The order is fixed: the peer's first frame must be SETTINGS, so
/// its ACK of ours cannot come before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Handshake {
    /// The peer's preface or first SETTINGS has not arrived.
    AwaitingSettings { deadline: Timestamp },
    /// The peer's SETTINGS arrived; its ACK of ours has not.
    AwaitingAck { deadline: Timestamp },
    /// Both done: no deadline.
    Done,
}

/// Which way GOAWAY has gone (§6.8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum GoAway {
    /// We sent one: we take no new streams from the peer.
    Sent,
    /// The peer sent one: we open no new streams.
    Received,
    /// Both.
    Both,
}

impl Handshake {
    /// When the handshake must be done; `None` once it is.
    fn deadline(self) -> Option<Timestamp> {
        match self {
            Handshake::AwaitingSettings { deadline } | Handshake::AwaitingAck { deadline } => {
                Some(deadline)
            }
            Handshake::Done => None,
        }
    }
}

impl GoAway {
    fn sent(self) -> bool {
        matches!(self, GoAway::Sent | GoAway::Both)
    }
}

impl Lifecycle {
    /// A new connection: open, with the whole handshake due by `deadline`.
    pub(super) fn new(deadline: Timestamp) -> Self {
        Lifecycle::Open {
            handshake: Handshake::AwaitingSettings { deadline },
        }
    }

    pub(super) fn is_closed(&self) -> bool {
        matches!(self, Lifecycle::Closed { .. })
    }

    /// A GOAWAY went either way: no new streams (§6.8).
    pub(super) fn going_away(&self) -> bool {
        matches!(self, Lifecycle::Closing { .. })
    }

    /// We sent GOAWAY: the peer's new streams are refused (§6.8).
    pub(super) fn goaway_sent(&self) -> bool {
        matches!(self, Lifecycle::Closing { goaway, .. } if goaway.sent())
    }

    /// The connection error we closed with, if any.
    pub(super) fn error(&self) -> Option<H2Error> {
        match *self {
            Lifecycle::Closed { error } => error,
            _ => None,
        }
    }

    fn handshake(&self) -> Option<Handshake> {
        match *self {
            Lifecycle::Open { handshake } | Lifecycle::Closing { handshake, .. } => Some(handshake),
            Lifecycle::Closed { .. } => None,
        }
    }

    fn handshake_mut(&mut self) -> Option<&mut Handshake> {
        match self {
            Lifecycle::Open { handshake } | Lifecycle::Closing { handshake, .. } => Some(handshake),
            Lifecycle::Closed { .. } => None,
        }
    }

    /// When the handshake must be done; `None` once it is, or once closed.
    pub(super) fn handshake_deadline(&self) -> Option<Timestamp> {
        self.handshake().and_then(Handshake::deadline)
    }

    /// Whether the peer has acknowledged our SETTINGS (§6.5.3); asked only while not closed.
    pub(super) fn settings_acked(&self) -> bool {
        self.handshake() == Some(Handshake::Done)
    }

    /// Whether the peer's next frame must be its first SETTINGS (§3.4).
    pub(super) fn awaiting_peer_settings(&self) -> bool {
        matches!(self.handshake(), Some(Handshake::AwaitingSettings { .. }))
    }

    /// The peer's SETTINGS arrived; only its first moves the handshake (§3.4).
    pub(super) fn on_peer_settings(&mut self) {
        if let Some(handshake) = self.handshake_mut() {
            if let Handshake::AwaitingSettings { deadline } = *handshake {
                *handshake = Handshake::AwaitingAck { deadline };
            }
        }
    }

    /// The peer acknowledged our SETTINGS: the handshake is done. Whether that is news (we
    /// send one SETTINGS, so later ACKs mean nothing).
    pub(super) fn on_settings_ack(&mut self) -> bool {
        match self.handshake_mut() {
            Some(handshake @ Handshake::AwaitingAck { .. }) => {
                *handshake = Handshake::Done;
                true
            }
            _ => false,
        }
    }

    /// Why the handshake failed at its deadline: §6.5.3 names the case where only our
    /// SETTINGS ACK is missing; a preface or SETTINGS that never completes is as bad as an
    /// invalid one (§3.4).
    pub(super) fn handshake_failure(&self) -> (ErrorCode, &'static str) {
        match self.handshake() {
            Some(Handshake::AwaitingAck { .. }) => (ErrorCode::SETTINGS_TIMEOUT, "no SETTINGS ACK"),
            _ => (ErrorCode::PROTOCOL_ERROR, "handshake timeout"),
        }
    }

    /// We sent GOAWAY (§6.8).
    pub(super) fn on_goaway_sent(&mut self) {
        self.on_goaway(GoAway::Sent);
    }

    /// The peer sent GOAWAY (§6.8).
    pub(super) fn on_goaway_received(&mut self) {
        self.on_goaway(GoAway::Received);
    }

    fn on_goaway(&mut self, way: GoAway) {
        *self = match *self {
            Lifecycle::Open { handshake } => Lifecycle::Closing {
                handshake,
                goaway: way,
            },
            Lifecycle::Closing { handshake, goaway } if goaway != way => Lifecycle::Closing {
                handshake,
                goaway: GoAway::Both,
            },
            unchanged => unchanged,
        };
    }

    /// Done, with the connection error we closed with, if any.
    pub(super) fn close(&mut self, error: Option<H2Error>) {
        *self = Lifecycle::Closed { error };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEADLINE: Timestamp = Timestamp::ZERO;

    #[test]
    fn the_handshake_is_done_once_the_peer_sent_settings_and_acked_ours() {
        let mut life = Lifecycle::new(DEADLINE);
        assert!(life.awaiting_peer_settings());
        assert_eq!(life.handshake_failure().0, ErrorCode::PROTOCOL_ERROR);
        life.on_peer_settings();
        assert!(!life.awaiting_peer_settings() && !life.settings_acked());
        assert_eq!(life.handshake_failure().0, ErrorCode::SETTINGS_TIMEOUT);
        assert_eq!(life.handshake_deadline(), Some(DEADLINE));
        assert!(life.on_settings_ack());
        assert!(!life.on_settings_ack(), "a second ACK is no news");
        assert!(life.settings_acked());
        assert_eq!(life.handshake_deadline(), None);
        life.on_peer_settings();
        assert_eq!(
            life.handshake_deadline(),
            None,
            "later SETTINGS change nothing"
        );
    }

    #[test]
    fn goaway_both_ways_is_one_closing_state_that_keeps_the_handshake() {
        let mut life = Lifecycle::new(DEADLINE);
        life.on_goaway_received();
        assert!(life.going_away() && !life.goaway_sent());
        life.on_goaway_sent();
        assert!(life.goaway_sent());
        assert_eq!(life.handshake_deadline(), Some(DEADLINE));
        life.close(None);
        assert!(life.is_closed() && !life.going_away());
        assert_eq!(life.handshake_deadline(), None);
    }
}
