//! The stream table: which ids are idle, open or closed (RFC 9113 §5.1), and resets (§6.4).

use crate::http2::error::ErrorCode;
use crate::http2::frame;
use crate::http2::stream::Stream;
use crate::time::Timestamp;

use super::budget::Cutoff;
use super::{event_cost, event_stream, Connection, Event, Role, SendError, RECENT_RESETS};

/// A stream id as the peer's frames see it (§5.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Lookup {
    Open,
    Idle,
    Closed { reset_by_us: bool },
}

impl Connection {
    /// Abandons a stream with RST_STREAM (§6.4). Events already queued for it
    /// may still be polled; nothing more will come.
    pub fn reset_stream(&mut self, now: Timestamp, stream: u32, code: ErrorCode) {
        self.advance(now);
        let Some(s) = self.streams.get(&stream).filter(|_| !self.closed) else {
            return;
        };
        // A client stream without HEADERS is still idle on the wire (§6.4).
        if s.headers_sent() || !self.is_local(stream) {
            frame::encode_rst_stream(&mut self.output, stream, code);
            self.remember_reset(stream);
        }
        self.remove_stream(stream);
    }

    /// RST_STREAM for a stream error; the application hears of it if it had
    /// taken the stream, and never sees it otherwise. Past
    /// `max_local_error_resets` such errors, the peer is cut off.
    pub(super) fn reset(&mut self, id: u32, code: ErrorCode) {
        frame::encode_rst_stream(&mut self.output, id, code);
        self.remember_reset(id);
        self.abuse.local_error_resets += 1;
        if self.remove_stream(id).is_some() && !self.drop_unaccepted(id) {
            self.emit(Event::StreamReset { stream: id, code });
        }
        if !self.budgets.local_error_resets.take() {
            self.cut_off(Cutoff::LocalErrorResets);
        }
    }

    /// Drops every queued event of a stream whose request the application
    /// has not taken (its HEADERS event unpolled), handing back the
    /// connection credit of its DATA: a stream that is already reset must
    /// not reach the application. Whether it was such a stream.
    pub(super) fn drop_unaccepted(&mut self, id: u32) -> bool {
        if !self.pending_accept.remove(&id) {
            return false;
        }
        let (mut cost, mut credit) = (0, 0);
        self.events.retain(|e| {
            let theirs = event_stream(e) == Some(id);
            if theirs {
                cost += event_cost(e);
                if let Event::Data { data, .. } = e {
                    credit += data.len();
                }
            }
            !theirs
        });
        self.event_bytes -= cost;
        self.abuse.reset_before_accept += 1;
        self.release_connection(u32::try_from(credit).unwrap_or(u32::MAX));
        true
    }

    /// Whether `id` is initiated by us: odd for clients, even for servers (§5.1.1).
    pub(super) fn is_local(&self, id: u32) -> bool {
        (id % 2 == 1) == (self.role == Role::Client)
    }

    /// The §5.1 state of `id` for frames from the peer. Ids below the highest
    /// used are closed; a client stream without HEADERS is still idle.
    pub(super) fn lookup(&self, id: u32) -> Lookup {
        let idle = match self.streams.get(&id) {
            Some(s) if self.is_local(id) && !s.headers_sent() => true,
            Some(_) => return Lookup::Open,
            None if self.is_local(id) => id >= self.next_local_id,
            None => id > self.last_peer_id,
        };
        match idle {
            true => Lookup::Idle,
            false => Lookup::Closed {
                reset_by_us: self.recent_resets.contains(&id),
            },
        }
    }

    pub(super) fn count_streams(&self, local: bool) -> usize {
        self.streams
            .keys()
            .filter(|&&id| self.is_local(id) == local)
            .count()
    }

    pub(super) fn sendable(&mut self, id: u32) -> Result<&mut Stream, SendError> {
        if self.closed {
            return Err(SendError::Closed);
        }
        match self.streams.get_mut(&id) {
            None => Err(SendError::UnknownStream),
            Some(s) if s.local_ended() => Err(SendError::StreamEnded),
            Some(s) => Ok(s),
        }
    }

    pub(super) fn insert_stream(&mut self, id: u32, stream: Stream) {
        self.streams.insert(id, stream);
        self.idle_since = None;
    }

    pub(super) fn remove_stream(&mut self, id: u32) -> Option<Stream> {
        let stream = self.streams.remove(&id)?;
        if stream.scheduled {
            self.send_queue.retain(|&queued| queued != id);
        }
        if self.streams.is_empty() {
            self.idle_since = Some(self.now);
        }
        self.maybe_close();
        Some(stream)
    }

    pub(super) fn finish_if_closed(&mut self, id: u32) {
        if self.streams.get(&id).is_some_and(Stream::is_closed) {
            self.remove_stream(id);
        }
    }

    fn remember_reset(&mut self, id: u32) {
        if self.recent_resets.len() == RECENT_RESETS {
            self.recent_resets.pop_front();
        }
        self.recent_resets.push_back(id);
    }
}
