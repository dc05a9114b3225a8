//! Output and flow control: opening streams, HEADERS and DATA within the peer's windows, and
//! handing credit back (RFC 9113 §5.1.1, §6.9).

use crate::http2::error::{ErrorCode, H2Error};
use crate::http2::frame;
use crate::http2::hpack::{Field, Header};
use crate::http2::stream::{Local, Remote, Stream};
use crate::time::Timestamp;

use super::{
    flow_error, proto, Connection, Lookup, Role, SendError, MAX_STREAM_ID, OUTPUT_HIGH_WATER,
};

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
        if self.closed {
            return Err(SendError::Closed);
        }
        if self.role != Role::Client {
            return Err(SendError::NotClient);
        }
        if self.goaway_sent || self.goaway_received {
            return Err(SendError::GoingAway);
        }
        if self.count_streams(true) >= self.peer.max_concurrent_streams as usize {
            return Err(SendError::StreamLimit);
        }
        let id = self.next_local_id;
        if id > MAX_STREAM_ID {
            return Err(SendError::IdsExhausted);
        }
        self.next_local_id += 2;
        let stream = Stream::new(self.peer.initial_window_size, self.local_initial_window());
        self.insert_stream(id, stream);
        Ok(id)
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
        let local = self.is_local(stream);
        let last_sent = self.last_local_sent;
        let s = self.sendable(stream)?;
        if s.headers_sent() {
            if !end_stream {
                return Err(SendError::OutOfOrder);
            }
            s.local = Local::Ending;
            s.trailers = Some(headers.iter().map(|&(n, v)| Header::new(n, v)).collect());
            self.schedule(stream);
            self.flush_streams();
            return Ok(());
        }
        if local && stream < last_sent {
            return Err(SendError::OutOfOrder);
        }
        s.local = match end_stream {
            true => Local::Closed,
            false => Local::Open,
        };
        if local {
            self.last_local_sent = stream;
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
        let s = self.sendable(stream)?;
        if !s.headers_sent() {
            return Err(SendError::OutOfOrder);
        }
        s.outbox.extend(data);
        if end_stream {
            s.local = Local::Ending;
        }
        self.schedule(stream);
        self.flush_streams();
        Ok(())
    }

    /// Sends a PING (§6.7); its ACK becomes [`Event::PingAcked`](super::Event::PingAcked).
    pub fn ping(&mut self, now: Timestamp, data: [u8; 8]) {
        self.advance(now);
        if !self.closed {
            frame::encode_ping(&mut self.output, false, data);
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
        frame::encode_headers(&mut self.output, id, &block, end_stream, max);
        self.budgets.earn(self.now);
    }

    fn schedule(&mut self, id: u32) {
        if let Some(s) = self.streams.get_mut(&id) {
            if !s.scheduled && s.has_pending() {
                s.scheduled = true;
                self.send_queue.push_back(id);
            }
        }
    }

    /// Moves queued stream data into the output, a frame per stream in turn,
    /// while the output is short and the windows allow (§6.9).
    pub(super) fn flush_streams(&mut self) {
        while !self.closed && self.pending_output().len() < OUTPUT_HIGH_WATER {
            let Some(id) = self.send_queue.pop_front() else {
                return;
            };
            match self.write_chunk(id) {
                Next::More => self.send_queue.push_back(id),
                Next::ConnectionBlocked => {
                    self.send_queue.push_front(id);
                    return;
                }
                Next::Done => {
                    if let Some(s) = self.streams.get_mut(&id) {
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
        let Some(s) = self.streams.get_mut(&id) else {
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
            frame::encode_data(&mut self.output, id, chunk, end_stream, max as u32);
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

    /// WINDOW_UPDATE (§6.9): more credit; past 2^31-1 is a FLOW_CONTROL_ERROR
    /// of the window it targets (§6.9.1).
    pub(super) fn on_window_update(&mut self, id: u32, increment: u32) -> Result<(), H2Error> {
        if id == 0 {
            self.send_window
                .adjust(increment.into())
                .map_err(|_| flow_error("connection window overflow"))?;
        } else {
            match self.lookup(id) {
                Lookup::Idle => return Err(proto("WINDOW_UPDATE on an idle stream")),
                // §5.1: it may have crossed our END_STREAM or RST_STREAM.
                Lookup::Closed { .. } => return Ok(()),
                Lookup::Open => {}
            }
            let Some(s) = self.streams.get_mut(&id) else {
                return Ok(());
            };
            if s.send_window.adjust(increment.into()).is_err() {
                let reason = "stream window overflow";
                return Err(H2Error::stream(id, ErrorCode::FLOW_CONTROL_ERROR, reason));
            }
            self.schedule(id);
        }
        self.flush_streams();
        Ok(())
    }

    /// Hands `n` octets of credit back on the connection and, while the peer
    /// may still send on it, the stream (§6.9.1).
    pub(super) fn release(&mut self, id: u32, n: u32) {
        self.release_connection(n);
        let Some(s) = self
            .streams
            .get_mut(&id)
            .filter(|s| s.remote != Remote::Closed)
        else {
            return;
        };
        if let Some(increment) = s.recv_window.release(n) {
            if !self.closed {
                frame::encode_window_update(&mut self.output, id, increment);
            }
        }
    }

    pub(super) fn release_connection(&mut self, n: u32) {
        if let Some(increment) = self.recv_window.release(n) {
            if !self.closed {
                frame::encode_window_update(&mut self.output, 0, increment);
            }
        }
    }
}
