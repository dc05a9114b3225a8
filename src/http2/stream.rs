//! One stream's state (RFC 9113 §5.1) and what we still have to send on it.
//!
//! §5.1 draws one state machine per stream; its states are the combinations of two halves,
//! ours and the peer's, each of which only moves forward. They are kept as two enums, so that
//! no combination the RFC has no name for can be written (say, "END_STREAM written" without
//! "the application finished").

use std::collections::VecDeque;

use super::flow::{RecvWindow, SendWindow};
use super::hpack::Header;

/// Our half of a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Local {
    /// No HEADERS sent: a client stream the application opened is still idle on the wire;
    /// a peer's stream is waiting for our response.
    Idle,
    /// HEADERS sent; more may follow.
    Open,
    /// The application has finished; END_STREAM goes after the queued data (and trailers).
    Ending,
    /// END_STREAM written: half-closed (local).
    Closed,
}

/// The peer's half of a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Remote {
    /// No final (non-1xx) header block yet: DATA is not allowed (§8.1).
    AwaitingHeaders,
    /// A final header block arrived; the next one is trailers and ends the stream (§8.1).
    Open,
    /// END_STREAM received: half-closed (remote).
    Closed,
}

/// A stream in the open or half-closed states (§5.1), or a client stream the
/// application opened but has not sent HEADERS on (still idle on the wire).
/// Idle and closed streams are not stored: stream ids only grow (§5.1.1).
#[derive(Debug)]
pub struct Stream {
    pub local: Local,
    pub remote: Remote,
    pub send_window: SendWindow,
    pub recv_window: RecvWindow,
    /// Application data waiting for flow-control credit (§6.9).
    pub outbox: VecDeque<u8>,
    /// Trailers to send after `outbox`; HPACK-encoded only when written, so
    /// the dynamic table follows wire order.
    pub trailers: Option<Vec<Header>>,
    /// Listed in the connection's send queue.
    pub scheduled: bool,
}

impl Stream {
    pub fn new(send_window: u32, recv_window: u32) -> Self {
        Stream {
            local: Local::Idle,
            remote: Remote::AwaitingHeaders,
            send_window: SendWindow::new(send_window),
            recv_window: RecvWindow::new(recv_window),
            outbox: VecDeque::new(),
            trailers: None,
            scheduled: false,
        }
    }

    /// We sent HEADERS: a client stream has left idle; a response began.
    pub fn headers_sent(&self) -> bool {
        self.local != Local::Idle
    }

    /// The application has finished sending (END_STREAM may still be queued).
    pub fn local_ended(&self) -> bool {
        matches!(self.local, Local::Ending | Local::Closed)
    }

    /// Both halves closed (§5.1): the stream can be forgotten.
    pub fn is_closed(&self) -> bool {
        self.local == Local::Closed && self.remote == Remote::Closed
    }

    /// Queued data, or a final END_STREAM / trailers not yet written.
    pub fn has_pending(&self) -> bool {
        !self.outbox.is_empty() || self.local == Local::Ending
    }
}
