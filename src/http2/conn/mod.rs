//! The HTTP/2 connection (RFC 9113) as a sans-IO state machine, client or server.
//!
//! Feed it received bytes with [`Connection::handle_input`] and the time with
//! [`Connection::handle_timeout`]; take [`Event`]s from `poll_event`, bytes to
//! write from `pending_output` / `consume_output`, and the next wake-up from
//! `poll_timeout`. It never touches a socket and never reads a clock: every
//! call that can change a stream's or the connection's state takes `now`, so
//! the idle timeout runs from the instant the last stream ended. Only
//! `poll_event` does not; it hands back flow-control credit, which no timer
//! depends on.
//!
//! What an untrusted peer can make us hold is bounded: unparsed input by our
//! MAX_FRAME_SIZE, a header block by 4 x MAX_HEADER_LIST_SIZE and
//! `header_block_timeout`, streams by MAX_CONCURRENT_STREAMS, received DATA by
//! the connection window (credit goes back only as the application polls it),
//! other events by `max_queued_event_bytes`, and the output it provokes by
//! `max_buffered_output`. What it can make us *do* is budgeted per second
//! (SETTINGS, control frames, empty frames, resets; `budget.rs`), and streams
//! it resets before the application took them are dropped unseen (Rapid
//! Reset). Each cut-off is reported by [`Connection::abuse`].
//!
//! One concern per file: this one holds the state and the application's
//! calls; `recv.rs` reads frames, `send.rs` writes them within flow control,
//! `settings.rs` handles SETTINGS and the handshake, `streams.rs` the stream
//! table and resets, `goaway.rs` errors, GOAWAY and closing, and `budget.rs`
//! the budgets.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use super::error::{ErrorCode, H2Error};
use super::flow::{RecvWindow, SendWindow};
use super::frame;
use super::headers;
use super::hpack::{Decoder, Encoder};
use super::stream::Stream;
use crate::time::Timestamp;

mod budget;
mod event;
mod goaway;
mod recv;
mod send;
mod settings;
mod streams;

use budget::Budgets;
pub use budget::{AbuseStats, Cutoff, Rate};
pub use event::{Event, SendError};
use recv::PartialBlock;
use settings::PeerSettings;
use streams::Lookup;

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
    /// With no open stream for this long: GOAWAY(NO_ERROR) and close. A
    /// stream waiting for its answer (a parked Start) is open, so not idle.
    /// `None` by default: the reconnect server sets its own (600 s).
    pub idle_timeout: Option<Duration>,
    /// A header block must get its last CONTINUATION within this (§6.10:
    /// nothing else may be sent meanwhile, so an open block stalls the
    /// connection; VU#421644); else GOAWAY(ENHANCE_YOUR_CALM). Default 10 s:
    /// an encoder writes a block's frames back to back.
    pub header_block_timeout: Duration,
    /// Output the driver was offered and could not write, beyond this, means
    /// the peer is not reading what it provokes (ACKs, RST_STREAMs):
    /// ENHANCE_YOUR_CALM. Offered: pending at its last `consume_output` (0
    /// octets taken counts), or made at an earlier `now` (a driver flushes
    /// before its clock moves on). Output of the current input batch is not
    /// judged, but twice this in all is the memory bound. Queued stream data
    /// does not count; it waits in the stream. Default 1 MiB.
    pub max_buffered_output: usize,
    /// Unpolled events beyond this (headers, resets; DATA is bounded by the
    /// window) are ENHANCE_YOUR_CALM: the HPACK-bomb bound.
    pub max_queued_event_bytes: usize,
    /// Streams the peer may reset before the application has taken their
    /// requests (it polls every event after each input, so: within one input
    /// batch) before GOAWAY(ENHANCE_YOUR_CALM): Rapid Reset, CVE-2023-44487.
    /// Such streams are dropped unseen. hyperium/h2's
    /// `max_pending_accept_reset_streams`, with its default of 20.
    pub max_pending_accept_reset_streams: usize,
    /// RST_STREAM from the peer on open streams, sustained (a client
    /// cancelling calls); beyond it, ENHANCE_YOUR_CALM. Default 200 at once,
    /// 100 a second.
    pub peer_reset_rate: Rate,
    /// Streams we may reset for the peer's stream errors (malformed or
    /// refused streams) over the connection's life before
    /// ENHANCE_YOUR_CALM; hyperium/h2's `max_local_error_reset_streams`, 1024.
    pub max_local_error_resets: usize,
    /// SETTINGS frames (not ACKs): each costs an ACK and, with an
    /// INITIAL_WINDOW_SIZE, a pass over the streams (§6.9.2). Clients send
    /// one, grpc-go a few more as its BDP estimate grows the window. Default
    /// 32 at once, 8 a second.
    pub settings_rate: Rate,
    /// Frames that change nothing we keep, each costing a frame of work and
    /// some an answer: PING, PRIORITY, WINDOW_UPDATE that unblocks no queued
    /// data, RST_STREAM on a closed stream, GOAWAY, unsolicited ACKs, unknown
    /// frame types (§10.5). Each HEADERS or DATA frame we send earns the
    /// peer 4 more (its WINDOW_UPDATEs and BDP PINGs follow our data), so
    /// this is what a peer gets for nothing: keepalive PINGs, mostly.
    /// Default 200 at once, 50 a second.
    pub control_frame_rate: Rate,
    /// Empty frames that end nothing: DATA without END_STREAM, HEADERS and
    /// CONTINUATION fragments without END_HEADERS (CVE-2019-9518). Default
    /// 100 at once, 20 a second; real clients send none.
    pub empty_frame_rate: Rate,
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
            header_block_timeout: Duration::from_secs(10),
            max_buffered_output: 1024 * 1024,
            max_queued_event_bytes: 2 * 1024 * 1024,
            max_pending_accept_reset_streams: 20,
            peer_reset_rate: Rate {
                burst: 200,
                per_second: 100,
            },
            max_local_error_resets: 1024,
            settings_rate: Rate {
                burst: 32,
                per_second: 8,
            },
            control_frame_rate: Rate {
                burst: 200,
                per_second: 50,
            },
            empty_frame_rate: Rate {
                burst: 100,
                per_second: 20,
            },
        }
    }
}

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
    /// `output[output_start..offered_end]` was pending at the driver's last
    /// `consume_output`, or made at an earlier instant than now: it had its
    /// chance to write that and could not.
    offered_end: usize,
    events: VecDeque<Event>,
    event_bytes: usize,
    /// Peer streams whose opening HEADERS event the application has not polled.
    pending_accept: BTreeSet<u32>,
    budgets: Budgets,
    abuse: AbuseStats,
    peer: PeerSettings,
    settings_acked: bool,
    handshake_deadline: Option<Timestamp>,
    /// When the last stream ended; `None` while any is open.
    idle_since: Option<Timestamp>,
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

/// The stream an event belongs to, if any.
fn event_stream(event: &Event) -> Option<u32> {
    match *event {
        Event::Headers { stream, .. }
        | Event::Data { stream, .. }
        | Event::StreamReset { stream, .. } => Some(stream),
        _ => None,
    }
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
            offered_end: 0,
            events: VecDeque::new(),
            event_bytes: 0,
            pending_accept: BTreeSet::new(),
            budgets: Budgets::new(&config, now),
            abuse: AbuseStats::default(),
            peer: PeerSettings {
                max_concurrent_streams: u32::MAX,
                initial_window_size: DEFAULT_WINDOW,
                max_frame_size: frame::DEFAULT_MAX_FRAME_SIZE,
            },
            settings_acked: false,
            handshake_deadline: Some(now + config.handshake_timeout),
            idle_since: Some(now),
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

    /// Takes received bytes, in any fragmentation.
    pub fn handle_input(&mut self, now: Timestamp, bytes: &[u8]) {
        self.advance(now);
        if self.closed {
            return;
        }
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
    }

    /// The next event. Taking DATA hands its flow-control credit back; taking
    /// a request's HEADERS accepts its stream, and once every event is taken
    /// the streams reset before acceptance no longer count (see
    /// `max_pending_accept_reset_streams`).
    pub fn poll_event(&mut self) -> Option<Event> {
        let Some(event) = self.events.pop_front() else {
            self.budgets.pending_accept_resets.clear();
            return None;
        };
        self.event_bytes -= event_cost(&event);
        match &event {
            Event::Data { stream, data, .. } => {
                self.release(*stream, u32::try_from(data.len()).unwrap_or(u32::MAX));
            }
            Event::Headers { stream, .. } => {
                self.pending_accept.remove(stream);
            }
            _ => {}
        }
        Some(event)
    }

    /// Bytes to write to the socket, oldest first; report progress with `consume_output`.
    pub fn pending_output(&self) -> &[u8] {
        &self.output[self.output_start..]
    }

    /// The caller wrote `n` octets of `pending_output`; queued stream data
    /// moves in behind them.
    pub fn consume_output(&mut self, now: Timestamp, n: usize) {
        self.advance(now);
        self.output_start = (self.output_start + n).min(self.output.len());
        if self.output_start == self.output.len() {
            self.output.clear();
            self.output_start = 0;
        } else if self.output_start >= OUTPUT_HIGH_WATER {
            self.output.drain(..self.output_start);
            self.output_start = 0;
        }
        // Whatever is still pending was offered and not taken; what
        // `flush_streams` adds now has not been offered yet.
        self.offered_end = self.output.len();
        self.flush_streams();
    }

    /// When to call `handle_timeout` next (handshake, header block or idle
    /// deadline); `None`: nothing is due.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        if self.closed {
            return None;
        }
        let block = self.partial_block.as_ref().map(|b| b.deadline);
        [self.handshake_deadline, block, self.idle_deadline()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Fires whatever deadline has passed; spurious calls do nothing.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.advance(now);
        if self.closed {
            return;
        }
        let due = |t: Option<Timestamp>| t.is_some_and(|t| now >= t);
        if due(self.handshake_deadline) {
            self.abuse.cutoff = Some(Cutoff::HandshakeTimeout);
            // §6.5.3 names the case where only our SETTINGS ACK is missing;
            // a preface that never completes is as bad as an invalid one (§3.4).
            match self.read_state {
                ReadState::Frames => self.fail(ErrorCode::SETTINGS_TIMEOUT, "no SETTINGS ACK"),
                _ => self.fail(ErrorCode::PROTOCOL_ERROR, "handshake timeout"),
            }
        } else if due(self.partial_block.as_ref().map(|b| b.deadline)) {
            self.cut_off(Cutoff::HeaderBlockTimeout);
        } else if due(self.idle_deadline()) {
            self.abuse.cutoff = Some(Cutoff::IdleTimeout);
            self.go_away(now, ErrorCode::NO_ERROR, b"idle timeout");
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

    /// What this connection refused its peer: the limit that ended it, if
    /// one did, and the streams it dropped or reset (for the driver's metrics).
    pub fn abuse(&self) -> AbuseStats {
        self.abuse
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

    /// Every state-changing call brings the time, so the idle clock starts
    /// exactly when the last stream ends; it never runs backwards. A driver
    /// flushes before its clock moves on, so output made at an earlier
    /// instant has been offered to the socket.
    fn advance(&mut self, now: Timestamp) {
        if now > self.now {
            self.offered_end = self.output.len();
            self.now = now;
        }
    }

    fn emit(&mut self, event: Event) {
        self.event_bytes += event_cost(&event);
        self.events.push_back(event);
    }

    fn idle_deadline(&self) -> Option<Timestamp> {
        let (since, timeout) = self.idle_since.zip(self.config.idle_timeout)?;
        Some(since + timeout)
    }
}
