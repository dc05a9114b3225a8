//! Ending: GOAWAY either way (RFC 9113 §6.8), connection and stream errors (§5.4), and close.

use crate::http2::error::{ErrorCode, H2Error};
use crate::http2::frame;
use crate::time::Timestamp;

use super::budget::Cutoff;
use super::{event_cost, event_stream, Connection, Event, Lookup};

impl Connection {
    /// Graceful shutdown (§6.8): GOAWAY naming the last peer stream we
    /// processed; open streams run to completion, then `is_closed()`.
    pub fn go_away(&mut self, now: Timestamp, code: ErrorCode, debug: &[u8]) {
        self.advance(now);
        if self.closed || self.goaway_sent {
            return;
        }
        frame::encode_goaway(&mut self.output, self.last_peer_id, code, debug);
        self.goaway_sent = true;
        self.maybe_close();
    }

    /// GOAWAY (§6.8): no new streams; ours above `last_stream_id` were never
    /// processed, so they end with REFUSED_STREAM and may be retried.
    pub(super) fn on_goaway(&mut self, last_stream_id: u32, code: ErrorCode, debug: &[u8]) {
        self.goaway_received = true;
        let debug = debug.to_vec();
        self.emit(Event::GoAway {
            last_stream_id,
            code,
            debug,
        });
        let unprocessed: Vec<u32> = (self.streams.keys().copied())
            .filter(|&id| self.is_local(id) && id > last_stream_id)
            .collect();
        for stream in unprocessed {
            self.remove_stream(stream);
            let code = ErrorCode::REFUSED_STREAM;
            self.emit(Event::StreamReset { stream, code });
        }
        self.maybe_close();
    }

    /// Connection errors close (§5.4.1); stream errors reset one stream (§5.4.2),
    /// but on an idle stream that would be illegal (§6.4), so they escalate.
    pub(super) fn on_error(&mut self, e: H2Error) {
        match e {
            H2Error::Stream {
                stream_id, code, ..
            } if self.lookup(stream_id) != Lookup::Idle => self.reset(stream_id, code),
            H2Error::Stream { reason, .. } => self.fail(ErrorCode::PROTOCOL_ERROR, reason),
            H2Error::Connection { code, reason } => self.fail(code, reason),
        }
    }

    /// GOAWAY with the last peer stream we processed, then close (§5.4.1).
    pub(super) fn fail(&mut self, code: ErrorCode, reason: &'static str) {
        if self.closed {
            return;
        }
        frame::encode_goaway(&mut self.output, self.last_peer_id, code, reason.as_bytes());
        self.error = Some(H2Error::connection(code, reason));
        self.close();
    }

    /// A budget is spent (§10.5): GOAWAY(ENHANCE_YOUR_CALM) naming the last
    /// peer stream we processed, close, and remember why.
    pub(super) fn cut_off(&mut self, cutoff: Cutoff) {
        if self.closed {
            return;
        }
        self.abuse.cutoff = Some(cutoff);
        self.fail(ErrorCode::ENHANCE_YOUR_CALM, cutoff.reason());
    }

    /// After a GOAWAY either way, the connection ends with its last stream (§6.8).
    pub(super) fn maybe_close(&mut self) {
        if (self.goaway_sent || self.goaway_received) && self.streams.is_empty() {
            self.close();
        }
    }

    /// Every stream ends; requests the application has not taken are
    /// dropped with them, so a failed connection starts no work.
    fn close(&mut self) {
        self.closed = true;
        self.streams.clear();
        self.send_queue.clear();
        self.partial_block = None;
        let unaccepted = std::mem::take(&mut self.pending_accept);
        if !unaccepted.is_empty() {
            let untaken = |e: &Event| event_stream(e).is_some_and(|s| unaccepted.contains(&s));
            self.events.retain(|e| !untaken(e));
            self.event_bytes = self.events.iter().map(event_cost).sum();
        }
    }
}
