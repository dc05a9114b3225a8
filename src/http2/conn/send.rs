//! Output and flow control: opening streams, HEADERS and DATA within the peer's windows, and
//! handing credit back (RFC 9113 §5.1.1, §6.9).

use crate::http2::frame;
use crate::http2::hpack::{Field, Header};
use crate::http2::stream::{Local, Remote};
use crate::time::Timestamp;

use super::{Connection, Role, SendError, OUTPUT_HIGH_WATER};

/// What `write_chunk` left for the send queue.
enum Next {
    More,
    ConnectionBlocked,
    Done,
}

impl Connection {
    /// Client: reserves the next odd stream id (§5.1.1) within the peer's
    /// MAX_CONCURRENT_STREAMS (§5.1.2). HEADERS must then go out in id order.
    pub fn open_stream(&mut self, now: Timestamp) -> Result<u32, SendError> {
        self.advance(now);
        if self.lifecycle.is_closed() {
            return Err(SendError::Closed);
        }
        if self.streams.role() != Role::Client {
            return Err(SendError::NotClient);
        }
        if self.lifecycle.going_away() {
            return Err(SendError::GoingAway);
        }
        let stream = self.new_stream();
        self.streams
            .open_local(self.peer.max_concurrent_streams, stream)
    }

    /// Request or response headers, or trailers (which must end the stream
    /// and are sent after the data queued before them, §8.1).
    pub fn send_headers(
        &mut self,
        now: Timestamp,
        stream: u32,
        headers: &[Field<'_>],
        end_stream: bool,
    ) -> Result<(), SendError> {
        self.advance(now);
        if self.lifecycle.is_closed() {
            return Err(SendError::Closed);
        }
        let local = self.streams.is_local(stream);
        let in_order = self.streams.in_order(stream);
        let s = self.streams.sendable(stream)?;
        if s.headers_sent() {
            if !end_stream {
                return Err(SendError::OutOfOrder);
            }
            s.local = Local::Ending;
            s.trailers = Some(headers.iter().map(|&(n, v)| Header::new(n, v)).collect());
            self.streams.schedule(stream);
            self.flush_streams();
            return Ok(());
        }
        if local && !in_order {
            return Err(SendError::OutOfOrder);
        }
        s.local = match end_stream {
            true => Local::Closed,
            false => Local::Open,
        };
        if local {
            self.streams.headers_sent(stream);
        }
        self.write_headers(stream, headers.iter().copied(), end_stream);
        self.finish_if_closed(stream);
        Ok(())
    }

    /// Queues DATA; it is sent as the peer's windows allow (§6.9).
    pub fn send_data(
        &mut self,
        now: Timestamp,
        stream: u32,
        data: &[u8],
        end_stream: bool,
    ) -> Result<(), SendError> {
        self.advance(now);
        if self.lifecycle.is_closed() {
            return Err(SendError::Closed);
        }
        let s = self.streams.sendable(stream)?;
        if !s.headers_sent() {
            return Err(SendError::OutOfOrder);
        }
        s.outbox.extend(data);
        if end_stream {
            s.local = Local::Ending;
        }
        self.streams.schedule(stream);
        self.flush_streams();
        Ok(())
    }

    /// Sends a PING (§6.7); its ACK becomes [`Event::PingAcked`](super::Event::PingAcked).
    pub fn ping(&mut self, now: Timestamp, data: [u8; 8]) {
        self.advance(now);
        if !self.lifecycle.is_closed() {
            frame::encode_ping(self.output.buf(), false, data);
            self.pings_in_flight += 1;
        }
    }

    /// HEADERS plus CONTINUATIONs for the peer's MAX_FRAME_SIZE (§4.3),
    /// encoded now because HPACK state follows wire order.
    fn write_headers<'a>(
        &mut self,
        id: u32,
        headers: impl IntoIterator<Item = Field<'a>>,
        end_stream: bool,
    ) {
        let mut block = Vec::new();
        self.encoder.encode(headers, &mut block);
        let max = self.peer.max_frame_size;
        frame::encode_headers(self.output.buf(), id, &block, end_stream, max);
        self.budgets.earn(self.now);
    }

    /// Moves queued stream data into the output, a frame per stream in turn,
    /// while the output is short and the windows allow (§6.9).
    pub(super) fn flush_streams(&mut self) {
        while !self.lifecycle.is_closed() && self.pending_output().len() < OUTPUT_HIGH_WATER {
            let Some(id) = self.streams.next_scheduled() else {
                return;
            };
            match self.write_chunk(id) {
                Next::More => self.streams.requeue(id),
                Next::ConnectionBlocked => {
                    self.streams.requeue_first(id);
                    return;
                }
                Next::Done => {
                    if let Some(s) = self.streams.get_mut(id) {
                        s.scheduled = false;
                    }
                }
            }
        }
    }

    /// Writes one DATA frame of `id` within the windows, then END_STREAM or
    /// the trailers once its data is out (§8.1).
    fn write_chunk(&mut self, id: u32) -> Next {
        let max = (self.peer.max_frame_size as usize).min(OUTPUT_HIGH_WATER);
        let conn_window = self.send_window.available();
        let Some(s) = self.streams.get_mut(id) else {
            return Next::Done;
        };
        let n = (s.outbox.len())
            .min(s.send_window.available())
            .min(conn_window)
            .min(max);
        let data_done = n == s.outbox.len();
        let end_stream = data_done && s.local == Local::Ending && s.trailers.is_none();
        if n > 0 || end_stream {
            let chunk = &s.outbox.make_contiguous()[..n];
            frame::encode_data(self.output.buf(), id, chunk, end_stream, max as u32);
            s.outbox.drain(..n);
            s.send_window.consume(n);
            self.send_window.consume(n);
            self.budgets.earn(self.now);
        }
        if data_done && s.local == Local::Ending {
            s.local = Local::Closed;
            if let Some(trailers) = s.trailers.take() {
                let fields = trailers.iter().map(Header::field);
                self.write_headers(id, fields, true);
            }
            self.finish_if_closed(id);
            return Next::Done;
        }
        if s.outbox.is_empty() || s.send_window.available() == 0 {
            Next::Done // resumes on the stream's WINDOW_UPDATE or more data
        } else if self.send_window.available() == 0 {
            Next::ConnectionBlocked
        } else {
            Next::More
        }
    }

    /// Hands `n` octets of credit back on the connection and, while the peer
    /// may still send on it, the stream (§6.9.1).
    pub(super) fn release(&mut self, id: u32, n: u32) {
        self.release_connection(n);
        let Some(s) = (self.streams.get_mut(id)).filter(|s| s.remote != Remote::Closed) else {
            return;
        };
        if let Some(increment) = s.recv_window.release(n) {
            if !self.lifecycle.is_closed() {
                frame::encode_window_update(self.output.buf(), id, increment);
            }
        }
    }

    pub(super) fn release_connection(&mut self, n: u32) {
        if let Some(increment) = self.recv_window.release(n) {
            if !self.lifecycle.is_closed() {
                frame::encode_window_update(self.output.buf(), 0, increment);
            }
        }
    }
}
