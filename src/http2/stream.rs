//! One stream's state (RFC 9113 §5.1) and what we still have to send on it.

use std::collections::VecDeque;

use super::flow::{RecvWindow, SendWindow};

/// A stream in the open or half-closed states (§5.1), or a client stream the
/// application opened but has not sent HEADERS on (still idle on the wire).
/// Idle and closed streams are not stored: stream ids only grow (§5.1.1).
#[derive(Debug)]
pub struct Stream {
    /// We sent our HEADERS: a client stream has left idle; a response began.
    pub headers_sent: bool,
    /// A final (non-1xx) header block arrived; the next one is trailers (§8.1).
    pub headers_received: bool,
    /// The application has finished sending; END_STREAM may still be queued.
    pub local_ended: bool,
    /// END_STREAM written: half-closed (local).
    pub local_closed: bool,
    /// END_STREAM received: half-closed (remote).
    pub remote_closed: bool,
    pub send_window: SendWindow,
    pub recv_window: RecvWindow,
    /// Application data waiting for flow-control credit (§6.9).
    pub outbox: VecDeque<u8>,
    /// Trailers to send after `outbox`; HPACK-encoded only when written, so
    /// the dynamic table follows wire order.
    pub trailers: Option<Vec<(Vec<u8>, Vec<u8>)>>,
    /// Listed in the connection's send queue.
    pub scheduled: bool,
}

impl Stream {
    pub fn new(send_window: u32, recv_window: u32) -> Self {
        Stream {
            headers_sent: false,
            headers_received: false,
            local_ended: false,
            local_closed: false,
            remote_closed: false,
            send_window: SendWindow::new(send_window),
            recv_window: RecvWindow::new(recv_window),
            outbox: VecDeque::new(),
            trailers: None,
            scheduled: false,
        }
    }

    /// Both halves closed (§5.1): the stream can be forgotten.
    pub fn is_closed(&self) -> bool {
        self.local_closed && self.remote_closed
    }

    /// Queued data, or a final END_STREAM / trailers not yet written.
    pub fn has_pending(&self) -> bool {
        !self.outbox.is_empty() || (self.local_ended && !self.local_closed)
    }
}
