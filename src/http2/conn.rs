//! The HTTP/2 connection (RFC 9113) as a sans-IO state machine, client or server.
//!
//! Feed it received bytes with [`Connection::handle_input`] and the time with
//! [`Connection::handle_timeout`]; take [`Event`]s from `poll_event`, bytes to
//! write from `pending_output` / `consume_output`, and the next wake-up from
//! `poll_timeout`. It never touches a socket and never reads a clock.
//!
//! What an untrusted peer can make us hold is bounded: unparsed input by our
//! MAX_FRAME_SIZE, a header block by 4 x MAX_HEADER_LIST_SIZE, streams by
//! MAX_CONCURRENT_STREAMS, received DATA by the connection window (credit goes
//! back only as the application polls it), other events by
//! `max_queued_event_bytes`, and the output it provokes by `max_buffered_output`.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::time::Duration;

use super::error::{ErrorCode, H2Error};
use super::flow::{RecvWindow, SendWindow};
use super::frame::{self, Frame, FrameHeader, SettingsIter};
use super::headers::{self, BlockKind};
use super::hpack::{Decoder, Encoder, Header};
use super::stream::{Local, Remote, Stream};
use crate::time::Timestamp;

/// Initial stream and connection window, before any SETTINGS (§6.9.2).
const DEFAULT_WINDOW: u32 = 65_535;
/// Initial SETTINGS_HEADER_TABLE_SIZE of both peers (§6.5.2).
const DEFAULT_TABLE_SIZE: u32 = 4096;
/// Most HPACK table we keep for encoding, however much the peer offers.
const MAX_ENCODER_TABLE: u32 = 4096;
/// Stream ids are 31 bits (§5.1.1).
const MAX_STREAM_ID: u32 = (1 << 31) - 1;
/// Stream data moves into the output only while less than this is pending,
/// so a slow reader backs up into the per-stream queues, not the output.
const OUTPUT_HIGH_WATER: usize = 64 * 1024;
/// How many streams we reset are remembered, to ignore frames in flight (§5.1).
const RECENT_RESETS: usize = 256;
/// Accounting cost of one queued event beyond its headers or debug data.
const EVENT_OVERHEAD: usize = 64;

/// Which end of the connection we are; it decides stream id parity and who sends the preface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Accepts the client preface and serves peer-initiated (odd) streams.
    Server,
    /// Sends the preface and opens odd-numbered streams (§5.1.1).
    Client,
}

/// Connection settings; `Default` suits a gRPC server or client.
#[derive(Clone, Debug)]
pub struct Config {
    /// Our SETTINGS_MAX_CONCURRENT_STREAMS: more peer streams are refused (§5.1.2).
    pub max_concurrent_streams: u32,
    /// Our SETTINGS_INITIAL_WINDOW_SIZE: each stream's receive window (§6.9.2).
    pub initial_window_size: u32,
    /// The connection's receive window, raised from 65535 by a WINDOW_UPDATE
    /// at start (§6.9.2). It bounds the DATA buffered for the application.
    pub connection_window_size: u32,
    /// Our SETTINGS_MAX_FRAME_SIZE (§4.2); clamped to 16384..=2^24-1.
    pub max_frame_size: u32,
    /// Our SETTINGS_MAX_HEADER_LIST_SIZE (§6.5.2). A larger list gets
    /// RST_STREAM(PROTOCOL_ERROR); one over twice this is a COMPRESSION_ERROR
    /// because HPACK stops decoding it.
    pub max_header_list_size: u32,
    /// Our SETTINGS_HEADER_TABLE_SIZE: the peer's HPACK table for us (§6.5.2).
    pub header_table_size: u32,
    /// The peer's preface and first SETTINGS must arrive, and our SETTINGS be
    /// acknowledged, by then (slowloris); else GOAWAY and close.
    pub handshake_timeout: Duration,
    /// With no open stream for this long: GOAWAY(NO_ERROR) and close.
    pub idle_timeout: Option<Duration>,
    /// More pending output than this when input arrives means the peer is
    /// not reading what it provokes (ACKs, RST_STREAMs): ENHANCE_YOUR_CALM.
    /// Queued stream data does not count; it waits in the stream.
    pub max_buffered_output: usize,
    /// Unpolled events beyond this (headers, resets; DATA is bounded by the
    /// window) are ENHANCE_YOUR_CALM: the HPACK-bomb and rapid-reset bound.
    pub max_queued_event_bytes: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_concurrent_streams: 100,
            initial_window_size: 256 * 1024,
            connection_window_size: 1024 * 1024,
            max_frame_size: frame::DEFAULT_MAX_FRAME_SIZE,
            max_header_list_size: 16 * 1024,
            header_table_size: DEFAULT_TABLE_SIZE,
            handshake_timeout: Duration::from_secs(20),
            idle_timeout: None,
            max_buffered_output: 1024 * 1024,
            max_queued_event_bytes: 2 * 1024 * 1024,
        }
    }
}

/// What the application learns from the peer, in wire order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Server: a request's headers (pseudo-headers included); client: response
    /// headers or trailers. Informational (1xx) responses come through too.
    Headers {
        /// The stream the block arrived on.
        stream: u32,
        /// The decoded field list, in wire order.
        headers: Vec<Header>,
        /// The peer will send nothing more on this stream.
        end_stream: bool,
    },
    /// Consecutive DATA frames of one stream are merged. Polling this event
    /// returns its flow-control credit to the peer.
    Data {
        /// The stream the body belongs to.
        stream: u32,
        /// Body octets, padding removed.
        data: Vec<u8>,
        /// The peer will send nothing more on this stream.
        end_stream: bool,
    },
    /// The peer reset the stream, or we did for a stream error (or because
    /// the peer's GOAWAY excluded it: REFUSED_STREAM, safe to retry). Forget it.
    StreamReset {
        /// The stream that ended.
        stream: u32,
        /// The RST_STREAM error code (§7).
        code: ErrorCode,
    },
    /// A SETTINGS frame (not an ACK) arrived: the gRPC client resets its backoff.
    SettingsReceived,
    /// The peer sent GOAWAY (§6.8): no new streams. Our streams above
    /// `last_stream_id` follow as [`Event::StreamReset`] with REFUSED_STREAM.
    GoAway {
        /// Highest of our streams the peer may have processed.
        last_stream_id: u32,
        /// Why the peer is closing (§7).
        code: ErrorCode,
        /// The peer's opaque diagnostic data.
        debug: Vec<u8>,
    },
    /// The ACK of a PING we sent with [`Connection::ping`] (§6.7).
    PingAcked {
        /// The data we sent, echoed back.
        data: [u8; 8],
    },
}

/// Why a call from the application was refused; the connection is unaffected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendError {
    /// The connection is closed.
    Closed,
    /// A GOAWAY was sent or received: no new streams (§6.8).
    GoingAway,
    /// The peer's MAX_CONCURRENT_STREAMS is reached; retry when one ends (§5.1.2).
    StreamLimit,
    /// All stream ids are used (§5.1.1): open a new connection.
    IdsExhausted,
    /// Only clients open streams (we never push).
    NotClient,
    /// Never opened, finished, or reset.
    UnknownStream,
    /// END_STREAM was already queued.
    StreamEnded,
    /// DATA before HEADERS, trailers without END_STREAM (§8.1), or HEADERS on
    /// a client stream opened before one that already went out (§5.1.1).
    OutOfOrder,
}

impl fmt::Display for SendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl std::error::Error for SendError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadState {
    /// Server: `matched` octets of the client preface seen (§3.4).
    Preface {
        matched: usize,
    },
    /// The peer's first frame must be SETTINGS (§3.4).
    FirstSettings,
    Frames,
}

/// A stream id as the peer's frames see it (§5.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lookup {
    Open,
    Idle,
    Closed { reset_by_us: bool },
}

/// What `write_chunk` left for the send queue.
enum Next {
    More,
    ConnectionBlocked,
    Done,
}

/// A header block waiting for its CONTINUATION frames (§6.10).
struct PartialBlock {
    stream_id: u32,
    end_stream: bool,
    block: Vec<u8>,
}

/// The peer's SETTINGS (§6.5.2) that shape what we send.
struct PeerSettings {
    max_concurrent_streams: u32,
    initial_window_size: u32,
    max_frame_size: u32,
}

/// One HTTP/2 connection's state: framing, HPACK, streams and flow control. See the module docs.
pub struct Connection {
    role: Role,
    config: Config,
    now: Timestamp,
    read_state: ReadState,
    recv_buf: Vec<u8>,
    partial_block: Option<PartialBlock>,
    decoder: Decoder,
    encoder: Encoder,
    encoder_table_size: u32,
    output: Vec<u8>,
    output_start: usize,
    events: VecDeque<Event>,
    event_bytes: usize,
    peer: PeerSettings,
    settings_acked: bool,
    handshake_deadline: Option<Timestamp>,
    idle_since: Option<Timestamp>,
    /// `idle_since` was taken from a current `now`, not in an application
    /// call that may come long after the last input (see `handle_timeout`).
    idle_since_exact: bool,
    /// Inside `handle_input` or `handle_timeout`, where `now` is current.
    now_is_current: bool,
    streams: BTreeMap<u32, Stream>,
    send_queue: VecDeque<u32>,
    recent_resets: VecDeque<u32>,
    next_local_id: u32,
    last_local_sent: u32,
    last_peer_id: u32,
    send_window: SendWindow,
    recv_window: RecvWindow,
    goaway_sent: bool,
    goaway_received: bool,
    pings_in_flight: usize,
    error: Option<H2Error>,
    closed: bool,
}

fn proto(reason: &'static str) -> H2Error {
    H2Error::connection(ErrorCode::PROTOCOL_ERROR, reason)
}

fn flow_error(reason: &'static str) -> H2Error {
    H2Error::connection(ErrorCode::FLOW_CONTROL_ERROR, reason)
}

fn event_cost(event: &Event) -> usize {
    EVENT_OVERHEAD
        + match event {
            Event::Headers { headers, .. } => headers::list_size(headers),
            Event::GoAway { debug, .. } => debug.len(),
            _ => 0,
        }
}

impl Connection {
    /// Queues the client preface (client) and our SETTINGS (both); a server
    /// sends SETTINGS first, before reading anything (§3.4).
    pub fn new(role: Role, mut config: Config, now: Timestamp) -> Self {
        config.max_frame_size = config
            .max_frame_size
            .clamp(frame::DEFAULT_MAX_FRAME_SIZE, frame::MAX_ALLOWED_FRAME_SIZE);
        config.initial_window_size = config.initial_window_size.min(frame::MAX_WINDOW_SIZE);
        let conn_window = config
            .connection_window_size
            .clamp(DEFAULT_WINDOW, frame::MAX_WINDOW_SIZE);
        let hard_list_limit = (config.max_header_list_size as usize).saturating_mul(2);
        let mut conn = Connection {
            role,
            now,
            read_state: match role {
                Role::Server => ReadState::Preface { matched: 0 },
                Role::Client => ReadState::FirstSettings,
            },
            recv_buf: Vec::new(),
            partial_block: None,
            decoder: Decoder::new(DEFAULT_TABLE_SIZE as usize, hard_list_limit),
            encoder: Encoder::new(),
            encoder_table_size: DEFAULT_TABLE_SIZE,
            output: Vec::new(),
            output_start: 0,
            events: VecDeque::new(),
            event_bytes: 0,
            peer: PeerSettings {
                max_concurrent_streams: u32::MAX,
                initial_window_size: DEFAULT_WINDOW,
                max_frame_size: frame::DEFAULT_MAX_FRAME_SIZE,
            },
            settings_acked: false,
            handshake_deadline: Some(now + config.handshake_timeout),
            idle_since: Some(now),
            idle_since_exact: true,
            now_is_current: false,
            streams: BTreeMap::new(),
            send_queue: VecDeque::new(),
            recent_resets: VecDeque::new(),
            next_local_id: if role == Role::Client { 1 } else { 2 },
            last_local_sent: 0,
            last_peer_id: 0,
            send_window: SendWindow::new(DEFAULT_WINDOW),
            recv_window: RecvWindow::new(conn_window),
            goaway_sent: false,
            goaway_received: false,
            pings_in_flight: 0,
            error: None,
            closed: false,
            config,
        };
        if role == Role::Client {
            conn.output.extend_from_slice(frame::PREFACE);
        }
        let settings = conn.local_settings();
        frame::encode_settings(&mut conn.output, &settings);
        if conn_window > DEFAULT_WINDOW {
            frame::encode_window_update(&mut conn.output, 0, conn_window - DEFAULT_WINDOW);
        }
        conn
    }

    /// The SETTINGS we advertise (§6.5.2): standard ids only, never gRPC's
    /// private 0xFE03. A client disables push (§8.4).
    fn local_settings(&self) -> Vec<(u16, u32)> {
        let c = &self.config;
        let mut settings = vec![
            (
                frame::SETTINGS_MAX_CONCURRENT_STREAMS,
                c.max_concurrent_streams,
            ),
            (frame::SETTINGS_INITIAL_WINDOW_SIZE, c.initial_window_size),
            (frame::SETTINGS_MAX_FRAME_SIZE, c.max_frame_size),
            (frame::SETTINGS_MAX_HEADER_LIST_SIZE, c.max_header_list_size),
            (frame::SETTINGS_HEADER_TABLE_SIZE, c.header_table_size),
        ];
        if self.role == Role::Client {
            settings.push((frame::SETTINGS_ENABLE_PUSH, 0));
        }
        settings
    }

    // ----- application interface -----

    /// Takes received bytes, in any fragmentation.
    pub fn handle_input(&mut self, now: Timestamp, bytes: &[u8]) {
        self.now = self.now.max(now);
        if self.closed {
            return;
        }
        self.now_is_current = true;
        if self.recv_buf.is_empty() {
            let used = self.process(bytes);
            self.recv_buf
                .extend_from_slice(&bytes[used.min(bytes.len())..]);
        } else {
            let mut buf = std::mem::take(&mut self.recv_buf);
            buf.extend_from_slice(bytes);
            let used = self.process(&buf);
            buf.drain(..used.min(buf.len()));
            self.recv_buf = buf;
        }
        if self.closed {
            self.recv_buf = Vec::new();
        }
        self.now_is_current = false;
    }

    /// The next event. Taking DATA hands its flow-control credit back.
    pub fn poll_event(&mut self) -> Option<Event> {
        let event = self.events.pop_front()?;
        self.event_bytes -= event_cost(&event);
        if let Event::Data { stream, data, .. } = &event {
            self.release(*stream, u32::try_from(data.len()).unwrap_or(u32::MAX));
        }
        Some(event)
    }

    /// Bytes to write to the socket, oldest first; report progress with `consume_output`.
    pub fn pending_output(&self) -> &[u8] {
        &self.output[self.output_start..]
    }

    /// The caller wrote `n` octets of `pending_output`; queued stream data
    /// moves in behind them.
    pub fn consume_output(&mut self, n: usize) {
        self.output_start = (self.output_start + n).min(self.output.len());
        if self.output_start == self.output.len() {
            self.output.clear();
            self.output_start = 0;
        } else if self.output_start >= OUTPUT_HIGH_WATER {
            self.output.drain(..self.output_start);
            self.output_start = 0;
        }
        self.flush_streams();
    }

    /// When to call `handle_timeout` next (handshake or idle deadline); `None`: nothing is due.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        if self.closed {
            return None;
        }
        [self.handshake_deadline, self.idle_deadline()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Fires whatever deadline has passed; spurious calls do nothing.
    ///
    /// The last stream may end in an application call, which has no `now`;
    /// the idle clock then starts at the first wake-up after it, so such an
    /// idle period lasts between one and two `idle_timeout`s.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.now = self.now.max(now);
        if self.closed {
            return;
        }
        self.now_is_current = true;
        if self.handshake_deadline.is_some_and(|t| now >= t) {
            // §6.5.3 names the case where only our SETTINGS ACK is missing;
            // a preface that never completes is as bad as an invalid one (§3.4).
            match self.read_state {
                ReadState::Frames => self.fail(ErrorCode::SETTINGS_TIMEOUT, "no SETTINGS ACK"),
                _ => self.fail(ErrorCode::PROTOCOL_ERROR, "handshake timeout"),
            }
        } else if self.idle_deadline().is_some_and(|t| now >= t) {
            if self.idle_since_exact {
                self.go_away(ErrorCode::NO_ERROR, b"idle timeout");
            } else {
                self.idle_since = Some(self.now);
                self.idle_since_exact = true;
            }
        }
        self.now_is_current = false;
    }

    /// Client: reserves the next odd stream id (§5.1.1) within the peer's
    /// MAX_CONCURRENT_STREAMS (§5.1.2). HEADERS must then go out in id order.
    pub fn open_stream(&mut self) -> Result<u32, SendError> {
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
        stream: u32,
        headers: &[(&[u8], &[u8])],
        end_stream: bool,
    ) -> Result<(), SendError> {
        let local = self.is_local(stream);
        let last_sent = self.last_local_sent;
        let s = self.sendable(stream)?;
        if s.headers_sent() {
            if !end_stream {
                return Err(SendError::OutOfOrder);
            }
            s.local = Local::Ending;
            s.trailers = Some(
                headers
                    .iter()
                    .map(|(n, v)| (n.to_vec(), v.to_vec()))
                    .collect(),
            );
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
        stream: u32,
        data: &[u8],
        end_stream: bool,
    ) -> Result<(), SendError> {
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

    /// Abandons a stream with RST_STREAM (§6.4). Events already queued for it
    /// may still be polled; nothing more will come.
    pub fn reset_stream(&mut self, stream: u32, code: ErrorCode) {
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

    /// Graceful shutdown (§6.8): GOAWAY naming the last peer stream we
    /// processed; open streams run to completion, then `is_closed()`.
    pub fn go_away(&mut self, code: ErrorCode, debug: &[u8]) {
        if self.closed || self.goaway_sent {
            return;
        }
        frame::encode_goaway(&mut self.output, self.last_peer_id, code, debug);
        self.goaway_sent = true;
        self.maybe_close();
    }

    /// Sends a PING (§6.7); its ACK becomes [`Event::PingAcked`].
    pub fn ping(&mut self, data: [u8; 8]) {
        if !self.closed {
            frame::encode_ping(&mut self.output, false, data);
            self.pings_in_flight += 1;
        }
    }

    /// Done: the caller flushes `pending_output` and closes the socket.
    pub fn is_closed(&self) -> bool {
        self.closed
    }

    /// Streams not yet closed or reset (open or half-closed), ours and the peer's.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// The connection error we closed with, for logs.
    pub fn error(&self) -> Option<H2Error> {
        self.error
    }

    /// Octets held in buffers: unparsed input, a partial header block,
    /// output, queued events and queued stream data.
    pub fn buffered_bytes(&self) -> usize {
        let data = |e: &Event| match e {
            Event::Data { data, .. } => data.len(),
            _ => 0,
        };
        self.recv_buf.len()
            + self.partial_block.as_ref().map_or(0, |b| b.block.len())
            + self.pending_output().len()
            + self.event_bytes
            + self.events.iter().map(data).sum::<usize>()
            + self.streams.values().map(|s| s.outbox.len()).sum::<usize>()
    }

    // ----- input -----

    /// Consumes the preface and every complete frame of `buf`; returns the
    /// octets used.
    fn process(&mut self, buf: &[u8]) -> usize {
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
                    if let Err(e) = self.on_frame(frame) {
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

    /// Caps what a peer can make us hold: output it never reads, and events
    /// faster than the application takes them.
    fn check_limits(&mut self) {
        if self.pending_output().len() > self.config.max_buffered_output {
            self.fail(ErrorCode::ENHANCE_YOUR_CALM, "peer is not reading");
        } else if self.event_bytes > self.config.max_queued_event_bytes {
            self.fail(ErrorCode::ENHANCE_YOUR_CALM, "too many unread events");
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
            let reason = "header block too large";
            return Err(H2Error::connection(ErrorCode::ENHANCE_YOUR_CALM, reason));
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
    fn on_rst_stream(&mut self, id: u32, code: ErrorCode) -> Result<(), H2Error> {
        match self.lookup(id) {
            Lookup::Idle => Err(proto("RST_STREAM on an idle stream")),
            Lookup::Closed { .. } => Ok(()),
            Lookup::Open => {
                self.remove_stream(id);
                self.emit(Event::StreamReset { stream: id, code });
                Ok(())
            }
        }
    }

    /// SETTINGS (§6.5): applied in order, then acknowledged (§6.5.3).
    fn on_settings(&mut self, params: SettingsIter<'_>) -> Result<(), H2Error> {
        for (id, value) in params {
            self.apply_setting(id, value)?;
        }
        frame::encode_settings_ack(&mut self.output);
        if self.read_state == ReadState::FirstSettings {
            self.read_state = ReadState::Frames;
            self.check_handshake();
        }
        self.emit(Event::SettingsReceived);
        self.flush_streams();
        Ok(())
    }

    /// One setting (§6.5.2); values were range-checked by the codec, and
    /// unknown ids and the advisory MAX_HEADER_LIST_SIZE are ignored.
    fn apply_setting(&mut self, id: u16, value: u32) -> Result<(), H2Error> {
        match id {
            frame::SETTINGS_HEADER_TABLE_SIZE => {
                // We use at most 4096 octets of what the peer offers.
                let size = value.min(MAX_ENCODER_TABLE);
                if size != self.encoder_table_size {
                    self.encoder_table_size = size;
                    self.encoder.set_max_table_size(size as usize);
                }
            }
            frame::SETTINGS_ENABLE_PUSH if value == 1 && self.role == Role::Client => {
                return Err(proto("server sent ENABLE_PUSH=1"));
            }
            frame::SETTINGS_MAX_CONCURRENT_STREAMS => self.peer.max_concurrent_streams = value,
            frame::SETTINGS_INITIAL_WINDOW_SIZE => self.set_peer_initial_window(value)?,
            frame::SETTINGS_MAX_FRAME_SIZE => self.peer.max_frame_size = value,
            _ => {}
        }
        Ok(())
    }

    /// §6.9.2: a new INITIAL_WINDOW_SIZE shifts every stream's send window by
    /// the difference; past 2^31-1 is a FLOW_CONTROL_ERROR.
    fn set_peer_initial_window(&mut self, value: u32) -> Result<(), H2Error> {
        let delta = i64::from(value) - i64::from(self.peer.initial_window_size);
        self.peer.initial_window_size = value;
        for (&id, s) in self.streams.iter_mut() {
            s.send_window
                .adjust(delta)
                .map_err(|_| flow_error("INITIAL_WINDOW_SIZE overflows a stream window"))?;
            if !s.scheduled && s.has_pending() {
                s.scheduled = true;
                self.send_queue.push_back(id);
            }
        }
        Ok(())
    }

    /// Our SETTINGS took effect (§6.5.3): the peer may use our HPACK table size
    /// and has shifted its view of every stream window (§6.9.2), so we do too.
    fn on_settings_ack(&mut self) {
        if self.settings_acked {
            return; // we send one SETTINGS; extra ACKs mean nothing
        }
        self.settings_acked = true;
        self.decoder
            .set_max_allowed_table_size(self.config.header_table_size as usize);
        for s in self.streams.values_mut() {
            s.recv_window.resize(self.config.initial_window_size);
        }
        self.check_handshake();
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

    /// GOAWAY (§6.8): no new streams; ours above `last_stream_id` were never
    /// processed, so they end with REFUSED_STREAM and may be retried.
    fn on_goaway(&mut self, last_stream_id: u32, code: ErrorCode, debug: &[u8]) {
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

    /// WINDOW_UPDATE (§6.9): more credit; past 2^31-1 is a FLOW_CONTROL_ERROR
    /// of the window it targets (§6.9.1).
    fn on_window_update(&mut self, id: u32, increment: u32) -> Result<(), H2Error> {
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

    /// Connection errors close (§5.4.1); stream errors reset one stream (§5.4.2),
    /// but on an idle stream that would be illegal (§6.4), so they escalate.
    fn on_error(&mut self, e: H2Error) {
        match e {
            H2Error::Stream {
                stream_id, code, ..
            } if self.lookup(stream_id) != Lookup::Idle => self.reset(stream_id, code),
            H2Error::Stream { reason, .. } => self.fail(ErrorCode::PROTOCOL_ERROR, reason),
            H2Error::Connection { code, reason } => self.fail(code, reason),
        }
    }

    /// GOAWAY with the last peer stream we processed, then close (§5.4.1).
    fn fail(&mut self, code: ErrorCode, reason: &'static str) {
        if self.closed {
            return;
        }
        frame::encode_goaway(&mut self.output, self.last_peer_id, code, reason.as_bytes());
        self.error = Some(H2Error::connection(code, reason));
        self.close();
    }

    /// RST_STREAM for a stream error; the application hears of it if it knew
    /// the stream.
    fn reset(&mut self, id: u32, code: ErrorCode) {
        frame::encode_rst_stream(&mut self.output, id, code);
        self.remember_reset(id);
        if self.remove_stream(id).is_some() {
            self.emit(Event::StreamReset { stream: id, code });
        }
    }

    // ----- output -----

    /// HEADERS plus CONTINUATIONs for the peer's MAX_FRAME_SIZE (§4.3),
    /// encoded now because HPACK state follows wire order.
    fn write_headers<'a>(
        &mut self,
        id: u32,
        headers: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
        end_stream: bool,
    ) {
        let mut block = Vec::new();
        self.encoder.encode(headers, &mut block);
        let max = self.peer.max_frame_size;
        frame::encode_headers(&mut self.output, id, &block, end_stream, max);
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
    fn flush_streams(&mut self) {
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
        }
        if data_done && s.local == Local::Ending {
            s.local = Local::Closed;
            if let Some(trailers) = s.trailers.take() {
                let fields = trailers.iter().map(|(n, v)| (&n[..], &v[..]));
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

    // ----- bookkeeping -----

    /// Whether `id` is initiated by us: odd for clients, even for servers (§5.1.1).
    fn is_local(&self, id: u32) -> bool {
        (id % 2 == 1) == (self.role == Role::Client)
    }

    /// The §5.1 state of `id` for frames from the peer. Ids below the highest
    /// used are closed; a client stream without HEADERS is still idle.
    fn lookup(&self, id: u32) -> Lookup {
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

    fn count_streams(&self, local: bool) -> usize {
        self.streams
            .keys()
            .filter(|&&id| self.is_local(id) == local)
            .count()
    }

    /// Our stream receive window: 65535 until the peer acknowledges our
    /// INITIAL_WINDOW_SIZE (§6.9.2).
    fn local_initial_window(&self) -> u32 {
        match self.settings_acked {
            true => self.config.initial_window_size,
            false => DEFAULT_WINDOW,
        }
    }

    fn sendable(&mut self, id: u32) -> Result<&mut Stream, SendError> {
        if self.closed {
            return Err(SendError::Closed);
        }
        match self.streams.get_mut(&id) {
            None => Err(SendError::UnknownStream),
            Some(s) if s.local_ended() => Err(SendError::StreamEnded),
            Some(s) => Ok(s),
        }
    }

    fn insert_stream(&mut self, id: u32, stream: Stream) {
        self.streams.insert(id, stream);
        self.idle_since = None;
    }

    fn remove_stream(&mut self, id: u32) -> Option<Stream> {
        let stream = self.streams.remove(&id)?;
        if stream.scheduled {
            self.send_queue.retain(|&queued| queued != id);
        }
        if self.streams.is_empty() {
            self.idle_since = Some(self.now);
            self.idle_since_exact = self.now_is_current;
        }
        self.maybe_close();
        Some(stream)
    }

    fn finish_if_closed(&mut self, id: u32) {
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

    /// Hands `n` octets of credit back on the connection and, while the peer
    /// may still send on it, the stream (§6.9.1).
    fn release(&mut self, id: u32, n: u32) {
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

    fn release_connection(&mut self, n: u32) {
        if let Some(increment) = self.recv_window.release(n) {
            if !self.closed {
                frame::encode_window_update(&mut self.output, 0, increment);
            }
        }
    }

    fn emit(&mut self, event: Event) {
        self.event_bytes += event_cost(&event);
        self.events.push_back(event);
    }

    fn check_handshake(&mut self) {
        if self.read_state == ReadState::Frames && self.settings_acked {
            self.handshake_deadline = None;
        }
    }

    fn idle_deadline(&self) -> Option<Timestamp> {
        let (since, timeout) = self.idle_since.zip(self.config.idle_timeout)?;
        Some(since + timeout)
    }

    /// After a GOAWAY either way, the connection ends with its last stream (§6.8).
    fn maybe_close(&mut self) {
        if (self.goaway_sent || self.goaway_received) && self.streams.is_empty() {
            self.close();
        }
    }

    fn close(&mut self) {
        self.closed = true;
        self.streams.clear();
        self.send_queue.clear();
        self.partial_block = None;
    }
}
