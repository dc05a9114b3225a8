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
//! One concern per file. The connection's own methods are in three: this one
//! holds the state, the application's calls, errors and closing; `recv.rs`
//! handles the peer's frames; `send.rs` writes ours within flow control. They
//! delegate to parts that own their state: `lifecycle.rs` (handshake, GOAWAY,
//! closed), `input.rs` (preface, unparsed bytes, header blocks, HPACK
//! decoding), `output.rs` (bytes to write), `queue.rs` (events for the
//! application), `streams.rs` (the stream table, ids, resets, send queue),
//! `settings.rs` (ours and the peer's SETTINGS) and `budget.rs` (the budgets).
//! `config.rs` holds the [`Config`], `event.rs` what the application is told.

use super::error::{ErrorCode, H2Error};
use super::flow::{RecvWindow, SendWindow};
use super::frame;
use super::hpack::Encoder;
use super::stream::Stream;
use crate::time::Timestamp;

mod budget;
mod config;
mod event;
mod input;
mod lifecycle;
mod output;
mod queue;
mod recv;
mod send;
mod settings;
mod streams;

use budget::Budgets;
pub use budget::{AbuseBudgets, AbuseStats, Cutoff, Rate};
pub use config::Config;
pub use event::{Event, SendError};
use input::Input;
use lifecycle::Lifecycle;
use output::Output;
use queue::EventQueue;
use settings::PeerSettings;
use streams::{Lookup, StreamTable};

/// Initial stream and connection window, before any SETTINGS (§6.9.2).
const DEFAULT_WINDOW: u32 = 65_535;
/// Initial SETTINGS_HEADER_TABLE_SIZE of both peers (§6.5.2).
const DEFAULT_TABLE_SIZE: u32 = 4096;
/// Stream data moves into the output only while less than this is pending,
/// so a slow reader backs up into the per-stream queues, not the output.
const OUTPUT_HIGH_WATER: usize = 64 * 1024;

/// Which end of the connection we are; it decides stream id parity and who sends the preface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Accepts the client preface and serves peer-initiated (odd) streams.
    Server,
    /// Sends the preface and opens odd-numbered streams (§5.1.1).
    Client,
}

/// One HTTP/2 connection's state: framing, HPACK, streams and flow control. See the module docs.
pub struct Connection {
    config: Config,
    now: Timestamp,
    lifecycle: Lifecycle,
    input: Input,
    output: Output,
    events: EventQueue,
    streams: StreamTable,
    peer: PeerSettings,
    encoder: Encoder,
    /// What we may still send on the connection (§6.9.1).
    send_window: SendWindow,
    /// What the peer may still send us on the connection, and the credit we owe it.
    recv_window: RecvWindow,
    budgets: Budgets,
    abuse: AbuseStats,
    /// PINGs we sent whose ACK has not come (§6.7).
    pings_in_flight: usize,
}

fn proto(reason: &'static str) -> H2Error {
    H2Error::connection(ErrorCode::PROTOCOL_ERROR, reason)
}

fn flow_error(reason: &'static str) -> H2Error {
    H2Error::connection(ErrorCode::FLOW_CONTROL_ERROR, reason)
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
            now,
            lifecycle: Lifecycle::new(now + config.handshake_timeout),
            input: Input::new(role, hard_list_limit),
            output: Output::default(),
            events: EventQueue::default(),
            streams: StreamTable::new(role, now),
            peer: PeerSettings::default(),
            encoder: Encoder::new(),
            send_window: SendWindow::new(DEFAULT_WINDOW),
            recv_window: RecvWindow::new(conn_window),
            budgets: Budgets::new(&config.budgets, now),
            abuse: AbuseStats::default(),
            pings_in_flight: 0,
            config,
        };
        let out = conn.output.buf();
        if role == Role::Client {
            out.extend_from_slice(frame::PREFACE);
        }
        frame::encode_settings(out, &settings::local_settings(&conn.config, role));
        if conn_window > DEFAULT_WINDOW {
            frame::encode_window_update(out, 0, conn_window - DEFAULT_WINDOW);
        }
        conn
    }

    /// Takes received bytes, in any fragmentation.
    pub fn handle_input(&mut self, now: Timestamp, bytes: &[u8]) {
        self.advance(now);
        if self.lifecycle.is_closed() {
            return;
        }
        let mut buf = self.input.take_unparsed();
        if buf.is_empty() {
            let used = self.process(bytes);
            buf.extend_from_slice(&bytes[used.min(bytes.len())..]);
        } else {
            buf.extend_from_slice(bytes);
            let used = self.process(&buf);
            buf.drain(..used.min(buf.len()));
        }
        if self.lifecycle.is_closed() {
            buf = Vec::new();
        }
        self.input.keep_unparsed(buf);
    }

    /// The next event. Taking DATA hands its flow-control credit back; taking
    /// a request's HEADERS accepts its stream, and once every event is taken
    /// the streams reset before acceptance no longer count (see
    /// `max_pending_accept_reset_streams`).
    pub fn poll_event(&mut self) -> Option<Event> {
        let Some(event) = self.events.pop() else {
            self.budgets.pending_accept_resets.clear();
            return None;
        };
        if let Event::Data { stream, data, .. } = &event {
            self.release(*stream, u32::try_from(data.len()).unwrap_or(u32::MAX));
        }
        Some(event)
    }

    /// Bytes to write to the socket, oldest first; report progress with `consume_output`.
    pub fn pending_output(&self) -> &[u8] {
        self.output.pending()
    }

    /// The caller wrote `n` octets of `pending_output`; queued stream data
    /// moves in behind them.
    pub fn consume_output(&mut self, now: Timestamp, n: usize) {
        self.advance(now);
        // Whatever is still pending was offered and not taken; what
        // `flush_streams` adds now has not been offered yet.
        self.output.consume(n, OUTPUT_HIGH_WATER);
        self.flush_streams();
    }

    /// When to call `handle_timeout` next (handshake, header block or idle
    /// deadline); `None`: nothing is due.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        if self.lifecycle.is_closed() {
            return None;
        }
        let handshake = self.lifecycle.handshake_deadline();
        [handshake, self.input.block_deadline(), self.idle_deadline()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Fires whatever deadline has passed; spurious calls do nothing.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.advance(now);
        if self.lifecycle.is_closed() {
            return;
        }
        let due = |t: Option<Timestamp>| t.is_some_and(|t| now >= t);
        if due(self.lifecycle.handshake_deadline()) {
            self.abuse.cutoff = Some(Cutoff::HandshakeTimeout);
            let (code, reason) = self.lifecycle.handshake_failure();
            self.fail(code, reason);
        } else if due(self.input.block_deadline()) {
            self.cut_off(Cutoff::HeaderBlockTimeout);
        } else if due(self.idle_deadline()) {
            self.abuse.cutoff = Some(Cutoff::IdleTimeout);
            self.go_away(now, ErrorCode::NO_ERROR, b"idle timeout");
        }
    }

    /// Graceful shutdown (§6.8): GOAWAY naming the last peer stream we
    /// processed; open streams run to completion, then `is_closed()`.
    pub fn go_away(&mut self, now: Timestamp, code: ErrorCode, debug: &[u8]) {
        self.advance(now);
        if self.lifecycle.is_closed() || self.lifecycle.goaway_sent() {
            return;
        }
        let last_peer_id = self.streams.last_peer_id();
        frame::encode_goaway(self.output.buf(), last_peer_id, code, debug);
        self.lifecycle.on_goaway_sent();
        self.maybe_close();
    }

    /// Abandons a stream with RST_STREAM (§6.4). Events already queued for it
    /// may still be polled; nothing more will come.
    pub fn reset_stream(&mut self, now: Timestamp, stream: u32, code: ErrorCode) {
        self.advance(now);
        if self.lifecycle.is_closed() {
            return;
        }
        let Some(s) = self.streams.get(stream) else {
            return;
        };
        // A client stream without HEADERS is still idle on the wire (§6.4).
        if s.headers_sent() || !self.streams.is_local(stream) {
            frame::encode_rst_stream(self.output.buf(), stream, code);
            self.streams.remember_reset(stream);
        }
        self.remove_stream(stream);
    }

    /// Done: the caller flushes `pending_output` and closes the socket.
    pub fn is_closed(&self) -> bool {
        self.lifecycle.is_closed()
    }

    /// Streams not yet closed or reset (open or half-closed), ours and the peer's.
    pub fn open_streams(&self) -> usize {
        self.streams.len()
    }

    /// The connection error we closed with, for logs.
    pub fn error(&self) -> Option<H2Error> {
        self.lifecycle.error()
    }

    /// What this connection refused its peer: the limit that ended it, if
    /// one did, and the streams it dropped or reset (for the driver's metrics).
    pub fn abuse(&self) -> AbuseStats {
        self.abuse
    }

    /// Octets held in buffers: unparsed input, a partial header block,
    /// output, queued events and queued stream data.
    pub fn buffered_bytes(&self) -> usize {
        self.input.buffered()
            + self.pending_output().len()
            + self.events.buffered()
            + self.streams.outbox_bytes()
    }

    /// Every state-changing call brings the time, so the idle clock starts
    /// exactly when the last stream ends; it never runs backwards. A driver
    /// flushes before its clock moves on, so output made at an earlier
    /// instant has been offered to the socket.
    fn advance(&mut self, now: Timestamp) {
        if now > self.now {
            self.output.offer_all();
            self.now = now;
        }
    }

    fn idle_deadline(&self) -> Option<Timestamp> {
        self.streams.idle_deadline(self.config.idle_timeout)
    }

    /// Our stream receive window: 65535 until the peer acknowledges our
    /// INITIAL_WINDOW_SIZE (§6.9.2).
    fn local_initial_window(&self) -> u32 {
        match self.lifecycle.settings_acked() {
            true => self.config.initial_window_size,
            false => DEFAULT_WINDOW,
        }
    }

    /// A new stream's state: its windows are the peer's and our initial ones (§6.9.2).
    fn new_stream(&self) -> Stream {
        Stream::new(self.peer.initial_window_size, self.local_initial_window())
    }

    fn remove_stream(&mut self, id: u32) -> Option<Stream> {
        let stream = self.streams.remove(id, self.now)?;
        self.maybe_close();
        Some(stream)
    }

    fn finish_if_closed(&mut self, id: u32) {
        if self.streams.get(id).is_some_and(Stream::is_closed) {
            self.remove_stream(id);
        }
    }

    /// Connection errors close (§5.4.1); stream errors reset one stream (§5.4.2),
    /// but on an idle stream that would be illegal (§6.4), so they escalate.
    fn on_error(&mut self, e: H2Error) {
        match e {
            H2Error::Stream {
                stream_id, code, ..
            } if self.streams.lookup(stream_id) != Lookup::Idle => self.reset(stream_id, code),
            H2Error::Stream { reason, .. } => self.fail(ErrorCode::PROTOCOL_ERROR, reason),
            H2Error::Connection { code, reason } => self.fail(code, reason),
        }
    }

    /// RST_STREAM for a stream error; the application hears of it if it had
    /// taken the stream, and never sees it otherwise. Past
    /// `max_local_error_resets` such errors, the peer is cut off.
    fn reset(&mut self, id: u32, code: ErrorCode) {
        frame::encode_rst_stream(self.output.buf(), id, code);
        self.streams.remember_reset(id);
        self.abuse.local_error_resets += 1;
        if self.remove_stream(id).is_some() && !self.drop_unaccepted(id) {
            self.events.push(Event::StreamReset { stream: id, code });
        }
        if !self.budgets.local_error_resets.take() {
            self.cut_off(Cutoff::LocalErrorResets);
        }
    }

    /// Drops a reset stream the application has not taken (see
    /// [`EventQueue::drop_unaccepted`]), handing back the connection credit of
    /// its DATA. Whether it was such a stream.
    fn drop_unaccepted(&mut self, id: u32) -> bool {
        let Some(credit) = self.events.drop_unaccepted(id) else {
            return false;
        };
        self.abuse.reset_before_accept += 1;
        self.release_connection(u32::try_from(credit).unwrap_or(u32::MAX));
        true
    }

    /// GOAWAY with the last peer stream we processed, then close (§5.4.1).
    fn fail(&mut self, code: ErrorCode, reason: &'static str) {
        if self.lifecycle.is_closed() {
            return;
        }
        let last_peer_id = self.streams.last_peer_id();
        frame::encode_goaway(self.output.buf(), last_peer_id, code, reason.as_bytes());
        self.close(Some(H2Error::connection(code, reason)));
    }

    /// A budget is spent (§10.5): GOAWAY(ENHANCE_YOUR_CALM) naming the last
    /// peer stream we processed, close, and remember why.
    fn cut_off(&mut self, cutoff: Cutoff) {
        if self.lifecycle.is_closed() {
            return;
        }
        self.abuse.cutoff = Some(cutoff);
        self.fail(ErrorCode::ENHANCE_YOUR_CALM, cutoff.reason());
    }

    /// After a GOAWAY either way, the connection ends with its last stream (§6.8).
    fn maybe_close(&mut self) {
        if self.lifecycle.going_away() && self.streams.is_empty() {
            self.close(None);
        }
    }

    /// Every stream ends; requests the application has not taken are
    /// dropped with them, so a failed connection starts no work.
    fn close(&mut self, error: Option<H2Error>) {
        self.lifecycle.close(error);
        self.streams.clear();
        self.input.drop_block();
        self.events.drop_all_unaccepted();
    }
}
