//! The peer's frames (RFC 9113 §4, §6): dispatch after the budgets and the preface, header
//! blocks opening or continuing streams, DATA, resets, SETTINGS and their ACK, PING, GOAWAY
//! and WINDOW_UPDATE.

use crate::http2::error::{ErrorCode, H2Error};
use crate::http2::frame::{self, Frame, FrameHeader, SettingsIter};
use crate::http2::headers::{self, BlockKind};
use crate::http2::hpack::Header;
use crate::http2::stream::{Remote, Stream};

use super::budget::{Charge, Cutoff};
use super::input::{Fragment, HeaderBlock};
use super::{flow_error, proto, Connection, Event, Lookup, Role};

impl Connection {
    /// Consumes the preface and every complete frame of `buf`; returns the
    /// octets used.
    pub(super) fn process(&mut self, buf: &[u8]) -> usize {
        let mut used = match self.input.read_preface(buf) {
            Ok(n) => n,
            Err(e) => {
                self.on_error(e);
                return buf.len();
            }
        };
        while !self.lifecycle.is_closed() {
            let rest = &buf[used..];
            let Some(header) = FrameHeader::parse(rest) else {
                break;
            };
            let settings_due = self.lifecycle.awaiting_peer_settings();
            let decoded = (self.input.check_header(&header, settings_due))
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

    /// Caps what a peer can make us hold: output it does not read, and
    /// events faster than the application takes them. Output is judged only
    /// once the driver has been offered it (see `max_buffered_output`).
    fn check_limits(&mut self) {
        if self.output.exceeds(self.config.max_buffered_output) {
            self.cut_off(Cutoff::UnreadOutput);
        } else if self.events.cost() > self.config.max_queued_event_bytes {
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
            Frame::Settings { ack: true, .. } => {
                self.lifecycle.settings_acked().then_some(Charge::Control)
            }
            Frame::Ping { ack, .. } => {
                (!ack || self.pings_in_flight == 0).then_some(Charge::Control)
            }
            Frame::RstStream { stream_id, .. } => match self.streams.lookup(stream_id) {
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
            0 => self.streams.any_scheduled(),
            id => self.streams.get(id).is_some_and(Stream::has_pending),
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
                let deadline = self.now + self.config.header_block_timeout;
                self.input.start_block(stream_id, end_stream, deadline);
                self.on_fragment(end_headers, fragment)
            }
            Frame::Continuation {
                end_headers,
                fragment,
                ..
            } => self.on_fragment(end_headers, fragment),
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

    /// A header block grows up to 4 x MAX_HEADER_LIST_SIZE; a larger one
    /// cannot be dropped without desynchronising HPACK, so it is a
    /// connection error.
    fn on_fragment(&mut self, end_headers: bool, fragment: &[u8]) -> Result<(), H2Error> {
        let cap = (self.config.max_header_list_size as usize).saturating_mul(4);
        match self.input.on_fragment(end_headers, fragment, cap)? {
            Fragment::Incomplete => Ok(()),
            Fragment::TooLarge => {
                self.cut_off(Cutoff::HeaderBlockTooLarge);
                Ok(())
            }
            Fragment::Complete(block) => self.on_header_block(block),
        }
    }

    /// A complete header block, decoded whatever becomes of the stream so
    /// the HPACK table stays in sync (§4.3).
    fn on_header_block(&mut self, block: HeaderBlock) -> Result<(), H2Error> {
        let HeaderBlock {
            stream_id: id,
            end_stream,
            headers,
        } = block;
        match self.streams.lookup(id) {
            Lookup::Open => self.on_stream_headers(id, headers, end_stream),
            Lookup::Idle if self.streams.role() == Role::Server && !self.streams.is_local(id) => {
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
        self.streams.peer_opened(id);
        let limit = self.config.max_concurrent_streams as usize;
        if self.lifecycle.goaway_sent() || self.streams.count(false) >= limit {
            return Err(H2Error::stream(
                id,
                ErrorCode::REFUSED_STREAM,
                "stream refused",
            ));
        }
        self.check_block(id, BlockKind::Request, &headers)?;
        let mut stream = self.new_stream();
        stream.remote = match end_stream {
            true => Remote::Closed,
            false => Remote::Open,
        };
        self.streams.insert(id, stream);
        self.events.push_request(id, headers, end_stream);
        Ok(())
    }

    /// A response or trailers (§8.1) on an open stream.
    fn on_stream_headers(
        &mut self,
        id: u32,
        headers: Vec<Header>,
        end_stream: bool,
    ) -> Result<(), H2Error> {
        let Some(s) = self.streams.get(id) else {
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
        if let Some(s) = self.streams.get_mut(id) {
            if end_stream {
                s.remote = Remote::Closed;
            } else if !headers::is_informational(&headers) {
                s.remote = Remote::Open;
            }
        }
        self.events.push(Event::Headers {
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
        let Some(s) = self.streams.get_mut(id) else {
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
        self.events.push_data(id, data, end_stream);
        self.finish_if_closed(id);
        Ok(())
    }

    /// Whether DATA on `id` is delivered (`Ok(true)`), silently dropped after
    /// our RST_STREAM (`Ok(false)`, §5.1), or an error.
    fn check_data(&self, id: u32) -> Result<bool, H2Error> {
        match (self.streams.lookup(id), self.streams.get(id)) {
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

    /// RST_STREAM (§6.4): the stream is gone; on an idle stream, an error.
    /// A stream the application never took is dropped unseen, and too many
    /// of those at once is Rapid Reset (CVE-2023-44487).
    fn on_rst_stream(&mut self, id: u32, code: ErrorCode) -> Result<(), H2Error> {
        match self.streams.lookup(id) {
            Lookup::Idle => Err(proto("RST_STREAM on an idle stream")),
            Lookup::Closed { .. } => Ok(()),
            Lookup::Open => {
                self.remove_stream(id);
                if !self.drop_unaccepted(id) {
                    self.events.push(Event::StreamReset { stream: id, code });
                } else if !self.budgets.pending_accept_resets.take() {
                    self.cut_off(Cutoff::PendingAcceptResets);
                }
                Ok(())
            }
        }
    }

    /// SETTINGS (§6.5): applied in order (`settings.rs`), then acknowledged
    /// (§6.5.3); the peer's first completes its part of the handshake (§3.4).
    fn on_settings(&mut self, params: SettingsIter<'_>) -> Result<(), H2Error> {
        self.peer
            .apply(params, &mut self.streams, &mut self.encoder)?;
        frame::encode_settings_ack(self.output.buf());
        self.lifecycle.on_peer_settings();
        self.events.push(Event::SettingsReceived);
        self.flush_streams();
        Ok(())
    }

    /// Our SETTINGS took effect (§6.5.3): the peer may use our HPACK table size
    /// and has shifted its view of every stream window (§6.9.2), so we do too.
    fn on_settings_ack(&mut self) {
        if !self.lifecycle.on_settings_ack() {
            return; // we send one SETTINGS; extra ACKs mean nothing
        }
        self.input.allow_table_size(self.config.header_table_size);
        self.streams
            .resize_recv_windows(self.config.initial_window_size);
    }

    /// PING (§6.7): answered with an ACK echoing the data; ACKs never are.
    fn on_ping(&mut self, ack: bool, data: [u8; 8]) {
        if !ack {
            frame::encode_ping(self.output.buf(), true, data);
        } else if self.pings_in_flight > 0 {
            self.pings_in_flight -= 1;
            self.events.push(Event::PingAcked { data });
        }
    }

    /// GOAWAY (§6.8): no new streams; ours above `last_stream_id` were never
    /// processed, so they end with REFUSED_STREAM and may be retried.
    fn on_goaway(&mut self, last_stream_id: u32, code: ErrorCode, debug: &[u8]) {
        self.lifecycle.on_goaway_received();
        let debug = debug.to_vec();
        self.events.push(Event::GoAway {
            last_stream_id,
            code,
            debug,
        });
        for stream in self.streams.unprocessed(last_stream_id) {
            self.remove_stream(stream);
            let code = ErrorCode::REFUSED_STREAM;
            self.events.push(Event::StreamReset { stream, code });
        }
        self.maybe_close();
    }

    /// WINDOW_UPDATE (§6.9): more credit; past 2^31-1 is a FLOW_CONTROL_ERROR
    /// of the window it targets (§6.9.1).
    fn on_window_update(&mut self, id: u32, increment: u32) -> Result<(), H2Error> {
        if id == 0 {
            self.send_window
                .adjust(increment.into())
                .map_err(|_| flow_error("connection window overflow"))?;
        } else {
            match self.streams.lookup(id) {
                Lookup::Idle => return Err(proto("WINDOW_UPDATE on an idle stream")),
                // §5.1: it may have crossed our END_STREAM or RST_STREAM.
                Lookup::Closed { .. } => return Ok(()),
                Lookup::Open => {}
            }
            let Some(s) = self.streams.get_mut(id) else {
                return Ok(());
            };
            if s.send_window.adjust(increment.into()).is_err() {
                let reason = "stream window overflow";
                return Err(H2Error::stream(id, ErrorCode::FLOW_CONTROL_ERROR, reason));
            }
            self.streams.schedule(id);
        }
        self.flush_streams();
        Ok(())
    }
}
