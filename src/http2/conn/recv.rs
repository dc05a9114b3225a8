//! Input: the preface, frame dispatch, header blocks and DATA (RFC 9113 §3.4, §4, §6.1-§6.2,
//! §6.4, §6.7, §6.10).

use crate::http2::error::{ErrorCode, H2Error};
use crate::http2::frame::{self, Frame, FrameHeader};
use crate::http2::headers::{self, BlockKind};
use crate::http2::hpack::Header;
use crate::http2::stream::{Remote, Stream};
use crate::time::Timestamp;

use super::budget::{Charge, Cutoff};
use super::{flow_error, proto, Connection, Event, Lookup, ReadState, Role};

/// A header block waiting for its CONTINUATION frames (§6.10).
pub(super) struct PartialBlock {
    pub(super) stream_id: u32,
    pub(super) end_stream: bool,
    pub(super) block: Vec<u8>,
    /// When the last CONTINUATION must have arrived (`header_block_timeout`).
    pub(super) deadline: Timestamp,
}

impl Connection {
    /// Consumes the preface and every complete frame of `buf`; returns the
    /// octets used.
    pub(super) fn process(&mut self, buf: &[u8]) -> usize {
        let mut used = match self.read_preface(buf) {
            Ok(n) => n,
            Err(e) => {
                self.on_error(e);
                return buf.len();
            }
        };
        while !self.closed {
            let rest = &buf[used..];
            let Some(header) = FrameHeader::parse(rest) else {
                break;
            };
            let decoded = self
                .check_header(&header)
                .and_then(|()| frame::decode(rest, self.config.max_frame_size));
            match decoded {
                Ok(None) => break,
                Ok(Some((frame, n))) => {
                    used += n;
                    if let Err(cutoff) = self.charge(&frame) {
                        self.cut_off(cutoff);
                    } else if let Err(e) = self.on_frame(frame) {
                        self.on_error(e);
                    }
                }
                Err(e) => {
                    used += header.frame_len().min(rest.len());
                    self.on_error(e);
                }
            }
            self.check_limits();
        }
        used
    }

    /// The client connection preface (§3.4), matched as it trickles in:
    /// anything else, an HTTP/1.1 request included, is PROTOCOL_ERROR.
    fn read_preface(&mut self, buf: &[u8]) -> Result<usize, H2Error> {
        let ReadState::Preface { matched } = self.read_state else {
            return Ok(0);
        };
        let expected = &frame::PREFACE[matched..];
        let n = expected.len().min(buf.len());
        if buf[..n] != expected[..n] {
            return Err(proto("invalid connection preface"));
        }
        self.read_state = match matched + n {
            24 => ReadState::FirstSettings,
            matched => ReadState::Preface { matched },
        };
        Ok(n)
    }

    /// Rules the frame header alone decides, checked before the payload is
    /// buffered.
    fn check_header(&self, h: &FrameHeader) -> Result<(), H2Error> {
        // §3.4: the peer's preface ends with a SETTINGS frame.
        let first = self.read_state == ReadState::FirstSettings;
        if first && (h.kind != frame::Kind::Settings || h.flags & frame::FLAG_ACK != 0) {
            return Err(proto("first frame is not SETTINGS"));
        }
        // §6.10: HEADERS then CONTINUATIONs of the same stream, nothing between.
        let continuation = h.kind == frame::Kind::Continuation;
        match &self.partial_block {
            Some(b) if !continuation || h.stream_id != b.stream_id => {
                Err(proto("frame interleaved in a header block"))
            }
            None if continuation => Err(proto("CONTINUATION without HEADERS")),
            _ => Ok(()),
        }
    }

    /// Caps what a peer can make us hold: output it does not read, and
    /// events faster than the application takes them. Output is judged only
    /// once the driver has been offered it (see `max_buffered_output`).
    fn check_limits(&mut self) {
        let max = self.config.max_buffered_output;
        let unread = self.offered_end.saturating_sub(self.output_start);
        if unread > max || self.pending_output().len() > max.saturating_mul(2) {
            self.cut_off(Cutoff::UnreadOutput);
        } else if self.event_bytes > self.config.max_queued_event_bytes {
            self.cut_off(Cutoff::UnpolledEvents);
        }
    }

    /// Draws on the budget a frame costs (`budget.rs`), if any.
    fn charge(&mut self, frame: &Frame<'_>) -> Result<(), Cutoff> {
        match self.charge_of(frame) {
            Some(charge) => self.budgets.charge(charge, self.now),
            None => Ok(()),
        }
    }

    /// Which budget a frame draws on: frames that carry requests, data or
    /// the end of something are free; frames that change nothing we keep,
    /// SETTINGS, resets and empty fragments are not (§10.5).
    fn charge_of(&self, frame: &Frame<'_>) -> Option<Charge> {
        let empty = |fragment: &[u8], ends: bool| fragment.is_empty() && !ends;
        match *frame {
            Frame::Data {
                data, end_stream, ..
            } => empty(data, end_stream).then_some(Charge::Empty),
            Frame::Headers {
                fragment,
                end_headers,
                ..
            }
            | Frame::Continuation {
                fragment,
                end_headers,
                ..
            } => empty(fragment, end_headers).then_some(Charge::Empty),
            Frame::Settings { ack: false, .. } => Some(Charge::Settings),
            // We send one SETTINGS: its ACK is due, later ones are not.
            Frame::Settings { ack: true, .. } => self.settings_acked.then_some(Charge::Control),
            Frame::Ping { ack, .. } => {
                (!ack || self.pings_in_flight == 0).then_some(Charge::Control)
            }
            Frame::RstStream { stream_id, .. } => match self.lookup(stream_id) {
                Lookup::Open => Some(Charge::PeerReset),
                _ => Some(Charge::Control),
            },
            Frame::WindowUpdate { stream_id, .. } => {
                (!self.unblocks(stream_id)).then_some(Charge::Control)
            }
            Frame::Priority { .. } | Frame::GoAway { .. } | Frame::Unknown { .. } => {
                Some(Charge::Control)
            }
            Frame::PushPromise { .. } => None,
        }
    }

    /// Whether a WINDOW_UPDATE on `id` (0: the connection) can let queued data move.
    fn unblocks(&self, id: u32) -> bool {
        match id {
            0 => !self.send_queue.is_empty(),
            id => self.streams.get(&id).is_some_and(Stream::has_pending),
        }
    }

    fn on_frame(&mut self, frame: Frame<'_>) -> Result<(), H2Error> {
        match frame {
            Frame::Data {
                stream_id,
                end_stream,
                data,
                flow_len,
            } => self.on_data(stream_id, end_stream, data, flow_len),
            Frame::Headers {
                stream_id,
                end_stream,
                end_headers,
                fragment,
                ..
            } => {
                self.partial_block = Some(PartialBlock {
                    stream_id,
                    end_stream,
                    block: Vec::new(),
                    deadline: self.now + self.config.header_block_timeout,
                });
                self.on_continuation(end_headers, fragment)
            }
            Frame::Continuation {
                end_headers,
                fragment,
                ..
            } => self.on_continuation(end_headers, fragment),
            // §5.3.2: RFC 7540 priorities are deprecated; accepted, ignored.
            Frame::Priority { .. } => Ok(()),
            Frame::RstStream { stream_id, code } => self.on_rst_stream(stream_id, code),
            Frame::Settings { ack: true, .. } => {
                self.on_settings_ack();
                Ok(())
            }
            Frame::Settings { params, .. } => self.on_settings(params),
            // §8.4: a client cannot push, and we never enable push as one.
            Frame::PushPromise { .. } => Err(proto("PUSH_PROMISE received")),
            Frame::Ping { ack, data } => {
                self.on_ping(ack, data);
                Ok(())
            }
            Frame::GoAway {
                last_stream_id,
                code,
                debug,
            } => {
                self.on_goaway(last_stream_id, code, debug);
                Ok(())
            }
            Frame::WindowUpdate {
                stream_id,
                increment,
            } => self.on_window_update(stream_id, increment),
            // §5.5: unknown frame types are ignored.
            Frame::Unknown { .. } => Ok(()),
        }
    }

    /// Accumulates a header block (§4.3) up to 4 x MAX_HEADER_LIST_SIZE; a
    /// larger one cannot be dropped without desynchronising HPACK, so it is a
    /// connection error.
    fn on_continuation(&mut self, end_headers: bool, fragment: &[u8]) -> Result<(), H2Error> {
        let cap = (self.config.max_header_list_size as usize).saturating_mul(4);
        let Some(mut partial) = self.partial_block.take() else {
            return Err(proto("CONTINUATION without HEADERS"));
        };
        if partial.block.len() + fragment.len() > cap {
            self.cut_off(Cutoff::HeaderBlockTooLarge);
            return Ok(());
        }
        if !end_headers {
            partial.block.extend_from_slice(fragment);
            self.partial_block = Some(partial);
            return Ok(());
        }
        let (stream_id, end_stream) = (partial.stream_id, partial.end_stream);
        let block = if partial.block.is_empty() {
            fragment
        } else {
            partial.block.extend_from_slice(fragment);
            &partial.block[..]
        };
        self.on_header_block(stream_id, end_stream, block)
    }

    /// A complete header block, decoded first whatever becomes of the stream
    /// so the HPACK table stays in sync (§4.3).
    fn on_header_block(&mut self, id: u32, end_stream: bool, block: &[u8]) -> Result<(), H2Error> {
        let mut headers = Vec::new();
        if self.decoder.decode(block, &mut headers).is_err() {
            return Err(H2Error::connection(
                ErrorCode::COMPRESSION_ERROR,
                "HPACK error",
            ));
        }
        match self.lookup(id) {
            Lookup::Open => self.on_stream_headers(id, headers, end_stream),
            Lookup::Idle if self.role == Role::Server && !self.is_local(id) => {
                self.open_peer_stream(id, headers, end_stream)
            }
            // §5.1: frames may still arrive on a stream we reset.
            Lookup::Closed { reset_by_us: true } => Ok(()),
            // §5.1.1: new stream ids only grow; §8.4: servers cannot open streams.
            _ => Err(proto("HEADERS on a closed or unusable stream")),
        }
    }

    /// A request opens a stream (§5.1), unless over our MAX_CONCURRENT_STREAMS
    /// (§5.1.2) or after our GOAWAY (§6.8): then REFUSED_STREAM, safe to retry.
    fn open_peer_stream(
        &mut self,
        id: u32,
        headers: Vec<Header>,
        end_stream: bool,
    ) -> Result<(), H2Error> {
        self.last_peer_id = id;
        let limit = self.config.max_concurrent_streams as usize;
        if self.goaway_sent || self.count_streams(false) >= limit {
            return Err(H2Error::stream(
                id,
                ErrorCode::REFUSED_STREAM,
                "stream refused",
            ));
        }
        self.check_block(id, BlockKind::Request, &headers)?;
        let mut stream = Stream::new(self.peer.initial_window_size, self.local_initial_window());
        stream.remote = match end_stream {
            true => Remote::Closed,
            false => Remote::Open,
        };
        self.insert_stream(id, stream);
        self.pending_accept.insert(id);
        self.emit(Event::Headers {
            stream: id,
            headers,
            end_stream,
        });
        Ok(())
    }

    /// A response or trailers (§8.1) on an open stream.
    fn on_stream_headers(
        &mut self,
        id: u32,
        headers: Vec<Header>,
        end_stream: bool,
    ) -> Result<(), H2Error> {
        let Some(s) = self.streams.get(&id) else {
            return Ok(());
        };
        // §5.1: half-closed (remote) takes no more HEADERS.
        if s.remote == Remote::Closed {
            return Err(H2Error::stream(
                id,
                ErrorCode::STREAM_CLOSED,
                "HEADERS after END_STREAM",
            ));
        }
        let kind = match s.remote {
            Remote::Open if !end_stream => {
                let reason = "trailers without END_STREAM";
                return Err(H2Error::stream(id, ErrorCode::PROTOCOL_ERROR, reason));
            }
            Remote::Open => BlockKind::Trailers,
            _ => BlockKind::Response,
        };
        self.check_block(id, kind, &headers)?;
        if let Some(s) = self.streams.get_mut(&id) {
            if end_stream {
                s.remote = Remote::Closed;
            } else if !headers::is_informational(&headers) {
                s.remote = Remote::Open;
            }
        }
        self.emit(Event::Headers {
            stream: id,
            headers,
            end_stream,
        });
        self.finish_if_closed(id);
        Ok(())
    }

    /// Malformed blocks (§8.1.1) and lists over our MAX_HEADER_LIST_SIZE
    /// (§6.5.2) are stream errors: the block was decoded, HPACK is in sync.
    fn check_block(&self, id: u32, kind: BlockKind, headers: &[Header]) -> Result<(), H2Error> {
        let malformed = |reason| H2Error::stream(id, ErrorCode::PROTOCOL_ERROR, reason);
        if headers::list_size(headers) > self.config.max_header_list_size as usize {
            return Err(malformed("header list too large"));
        }
        headers::validate(kind, headers).map_err(malformed)
    }

    /// DATA (§6.1), counted against the connection window even on streams we
    /// no longer track (§6.9); padding is credited back at once.
    fn on_data(
        &mut self,
        id: u32,
        end_stream: bool,
        data: &[u8],
        flow_len: u32,
    ) -> Result<(), H2Error> {
        self.recv_window
            .receive(flow_len)
            .map_err(|_| flow_error("connection window exceeded"))?;
        let deliver = self.check_data(id);
        if deliver != Ok(true) {
            self.release_connection(flow_len);
            return deliver.map(drop);
        }
        let Some(s) = self.streams.get_mut(&id) else {
            return Ok(());
        };
        if s.recv_window.receive(flow_len).is_err() {
            self.release_connection(flow_len);
            let reason = "stream window exceeded";
            return Err(H2Error::stream(id, ErrorCode::FLOW_CONTROL_ERROR, reason));
        }
        if end_stream {
            s.remote = Remote::Closed;
        }
        self.release(id, flow_len.saturating_sub(data.len() as u32));
        self.emit_data(id, data, end_stream);
        self.finish_if_closed(id);
        Ok(())
    }

    /// Whether DATA on `id` is delivered (`Ok(true)`), silently dropped after
    /// our RST_STREAM (`Ok(false)`, §5.1), or an error.
    fn check_data(&self, id: u32) -> Result<bool, H2Error> {
        match (self.lookup(id), self.streams.get(&id)) {
            (Lookup::Idle, _) => Err(proto("DATA on an idle stream")),
            (Lookup::Closed { reset_by_us: true }, _) => Ok(false),
            (_, Some(s)) if s.remote == Remote::AwaitingHeaders => Err(H2Error::stream(
                id,
                ErrorCode::PROTOCOL_ERROR,
                "DATA before HEADERS",
            )),
            (_, Some(s)) if s.remote != Remote::Closed => Ok(true),
            // §6.1: not open or half-closed (local).
            _ => Err(H2Error::stream(
                id,
                ErrorCode::STREAM_CLOSED,
                "DATA on a closed stream",
            )),
        }
    }

    /// Queues DATA for the application, merged into the previous event when
    /// that is DATA of the same stream.
    fn emit_data(&mut self, id: u32, data: &[u8], end_stream: bool) {
        if let Some(Event::Data {
            stream,
            data: queued,
            end_stream: ended,
        }) = self.events.back_mut()
        {
            if *stream == id && !*ended {
                queued.extend_from_slice(data);
                *ended = end_stream;
                return;
            }
        }
        if !data.is_empty() || end_stream {
            let data = data.to_vec();
            self.emit(Event::Data {
                stream: id,
                data,
                end_stream,
            });
        }
    }

    /// RST_STREAM (§6.4): the stream is gone; on an idle stream, an error.
    /// A stream the application never took is dropped unseen, and too many
    /// of those at once is Rapid Reset (CVE-2023-44487).
    fn on_rst_stream(&mut self, id: u32, code: ErrorCode) -> Result<(), H2Error> {
        match self.lookup(id) {
            Lookup::Idle => Err(proto("RST_STREAM on an idle stream")),
            Lookup::Closed { .. } => Ok(()),
            Lookup::Open => {
                self.remove_stream(id);
                if !self.drop_unaccepted(id) {
                    self.emit(Event::StreamReset { stream: id, code });
                } else if !self.budgets.pending_accept_resets.take() {
                    self.cut_off(Cutoff::PendingAcceptResets);
                }
                Ok(())
            }
        }
    }

    /// PING (§6.7): answered with an ACK echoing the data; ACKs never are.
    fn on_ping(&mut self, ack: bool, data: [u8; 8]) {
        if !ack {
            frame::encode_ping(&mut self.output, true, data);
        } else if self.pings_in_flight > 0 {
            self.pings_in_flight -= 1;
            self.emit(Event::PingAcked { data });
        }
    }
}
