//! One server-side HTTP/1.1 connection, sans-IO.
//!
//! The driver feeds bytes with [`handle_input`](Http1Connection::handle_input) (only while
//! [`wants_input`](Http1Connection::wants_input)), takes requests with
//! [`poll_request`](Http1Connection::poll_request), answers each with
//! [`respond`](Http1Connection::respond) in the same order, writes
//! [`pending_output`](Http1Connection::pending_output), and wakes the connection at
//! [`poll_timeout`](Http1Connection::poll_timeout). Once [`is_closed`](Http1Connection::is_closed)
//! and the output is written, it closes the socket.
//!
//! Refused requests (400, 408, 413, 417, 431, 501, 503) are answered by the connection itself,
//! after the answers still owed to earlier pipelined requests, and end the connection: after
//! such an error the rest of the byte stream cannot be trusted to hold request boundaries.
//! Heads are parsed when a line feed arrives (no head can end without one), so a slowloris
//! dribble costs no re-parse per byte; a malformed head is noticed at its next line feed, at
//! the head limit, at the end of input, or at the header timeout (then it is a 408). A body is
//! read by a state machine that keeps its place ([`BodyReader`](super::body::BodyReader)), so it
//! costs one look per byte whatever the pieces; a request is handed out once its body is
//! complete.
//!
//! A streamed answer ([`start_stream`](Http1Connection::start_stream), for Server-Sent Events)
//! answers the oldest owed request and stays open until
//! [`end_stream`](Http1Connection::end_stream). Meanwhile later requests are still parsed and
//! handed out, and their answers are held (bounded like the output) until the stream ends,
//! since answers go in order (RFC 9112 §9.3.2).
//!
//! One concern per file: this one holds the state, the application's calls and the answers;
//! `receive.rs` reads heads and bodies, `stream.rs` writes streamed answers.
//!
//! Bodies are held whole, so the driver bounds what all its connections' bodies hold together:
//! it gives each connection an allowance ([`set_body_allowance`](Http1Connection::set_body_allowance))
//! before feeding it, and a body that would pass it is refused with 503 and `Retry-After`
//! (RFC 9110 §15.6.4, §10.2.3). What a connection holds against it is
//! [`held_body_bytes`](Http1Connection::held_body_bytes).

use std::collections::VecDeque;

use super::response::{self, Answer, Delimiting, Framing};
use super::{reason_phrase, Config, Request};
use crate::time::Timestamp;

mod receive;
mod stream;

use receive::{Pace, Receiving};

/// How to answer a request that has been parsed.
#[derive(Clone, Copy, Debug)]
struct Owed {
    head_only: bool,
    keep_alive: bool,
    /// An HTTP/1.0 client: no chunked answers (RFC 9112 §6.1).
    http10: bool,
    http10_keep_alive: bool,
}

/// Sent with a 503 for a body past the allowance (RFC 9110 §10.2.3): bodies in flight are
/// held until their upstream answers, so room is back within seconds, mostly.
const BUSY_RETRY_AFTER: &str = "1";

/// Where a connection stands when a server at its connection cap must close one for a new
/// connection, worst first (by `Ord`): the one that made the least progress goes, so that a
/// peer holding slots without using them cannot lock out clients that send whole requests
/// (RFC 9112 §9.5: a server may close a connection that is not in the middle of an answer).
/// A connection that owes answers to complete requests, or streams one, has none
/// ([`Http1Connection::eviction_rank`] is `None`): it is never closed for another.
///
/// A new connection ranks after every older one with no complete head, so a client that sends
/// its request as soon as it connects has a whole cap's worth of newer arrivals as grace.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum EvictionRank {
    /// No complete request head yet: the connection opened at `since` and sent none, or began
    /// a later head at `since`. The oldest has had the longest chance.
    NoHead {
        /// When the connection opened, or the later head began.
        since: Timestamp,
    },
    /// Kept alive after its answers and idle since `since`; its client reconnects when it
    /// needs to (RFC 9112 §9.3).
    Idle {
        /// The last answer or input.
        since: Timestamp,
    },
    /// Receiving a body behind [`Config::min_body_rate`] since `behind_since`; it will be
    /// cut for it anyway.
    SlowBody {
        /// When the average fell behind the rate.
        behind_since: Timestamp,
    },
}

/// A streamed answer in progress; it answers the request taken from `owed` when it started.
#[derive(Clone, Copy, Debug)]
struct OpenStream {
    delimiting: Delimiting,
    /// The client went away (it closed its side, or broke the next request): nothing more of
    /// the stream is written, and the application should end it.
    gone: bool,
}

/// The deadline the connection waits for.
#[derive(Clone, Copy, Debug)]
enum Timer {
    /// A head is being received (RFC 9110 §15.5.9: 408 when late).
    Header,
    /// A body is being received (408 when late, or behind the minimum rate).
    Body,
    /// Nothing in progress and nothing owed (RFC 9112 §9.5).
    Idle,
}

/// See the module docs.
pub struct Http1Connection {
    config: Config,
    /// Received bytes not parsed yet.
    input: Vec<u8>,
    receiving: Receiving,
    /// Parsed requests not yet handed to the application.
    ready: VecDeque<Request>,
    /// Every parsed request not yet answered, oldest first (`ready` are its newest).
    owed: VecDeque<Owed>,
    output: Vec<u8>,
    /// Bytes at the start of `output` already written to the socket.
    written: usize,
    /// The answer being streamed, if any.
    stream: Option<OpenStream>,
    /// Answers given while a stream is open: they follow it when it ends.
    held: Vec<u8>,
    /// No more bytes are coming: the peer closed its side, or overran the input bound.
    input_ended: bool,
    /// No more requests will be parsed (close requested, error, shutdown, time-out).
    stopped: bool,
    /// The refusal to send once the owed answers are out.
    refusal: Option<u16>,
    /// A refusal sent and not yet reported by [`poll_refusal`](Self::poll_refusal).
    refused: Option<u16>,
    /// The last input or answer, for the idle timeout.
    last_activity: Timestamp,
    /// The latest `now` the connection was given (answers are timed by it).
    now: Timestamp,
    /// What bodies may hold, those of `ready` requests and the one being received together
    /// (see [`set_body_allowance`](Self::set_body_allowance)).
    body_allowance: usize,
}

impl Http1Connection {
    /// A connection just accepted at `now`: its first request head must complete within the
    /// first-head timeout from here. Its body allowance is unbounded until the driver sets one.
    pub fn new(now: Timestamp, config: Config) -> Self {
        Http1Connection {
            config,
            input: Vec::new(),
            receiving: Receiving::FirstHead { opened: now },
            ready: VecDeque::new(),
            owed: VecDeque::new(),
            output: Vec::new(),
            written: 0,
            stream: None,
            held: Vec::new(),
            input_ended: false,
            stopped: false,
            refusal: None,
            refused: None,
            last_activity: now,
            now,
            body_allowance: usize::MAX,
        }
    }

    /// Bytes read from the socket. Parses every complete request it can (pipelining), up to
    /// the backlog bound; input after the connection stopped reading is discarded.
    pub fn handle_input(&mut self, now: Timestamp, bytes: &[u8]) {
        self.now = now;
        if self.stopped || self.input_ended || bytes.is_empty() {
            return;
        }
        self.last_activity = now;
        self.input.extend_from_slice(bytes);
        // A head cannot end without a line feed; skip re-parsing slowloris dribbles.
        let in_body = matches!(self.receiving, Receiving::Body(_));
        if in_body || bytes.contains(&b'\n') || self.input.len() >= self.config.max_head_len {
            self.parse_input();
        } else {
            self.head_begun();
        }
        if self.input.len() > self.config.max_buffered_input {
            // The driver read while told not to: refuse to keep it. Owed answers still go out.
            self.input = Vec::new();
            self.handle_eof();
        }
        if self.input.is_empty() {
            // Everything went into requests: give a large read buffer's memory back.
            release_if_large(&mut self.input);
        }
    }

    /// The peer closed its sending side: complete requests are still answered (a client may
    /// half-close after its last request), then the connection closes (RFC 9112 §9.6). An
    /// open stream's client is taken to be gone ([`stream_gone`](Self::stream_gone)).
    pub fn handle_eof(&mut self) {
        self.input_ended = true;
        self.stream_client_left();
        self.parse_input();
    }

    /// Whether the driver should read more: false while the backlog or the output is full,
    /// and once no more requests will be parsed.
    pub fn wants_input(&self) -> bool {
        !self.input_ended && self.may_parse()
    }

    /// Whether [`poll_request`](Self::poll_request) has a request.
    pub fn has_request(&self) -> bool {
        !self.ready.is_empty()
    }

    /// The next request, oldest first, with its whole body. Answer each in order, with
    /// [`respond`](Self::respond) or [`start_stream`](Self::start_stream).
    pub fn poll_request(&mut self) -> Option<Request> {
        let request = self.ready.pop_front()?;
        // The application holds its body now, as far as this connection knows until the
        // driver says otherwise: it still counts against the allowance.
        self.body_allowance = self.body_allowance.saturating_sub(request.body.len());
        Some(request)
    }

    /// How many bytes of request bodies this connection may hold: the driver's budget for all
    /// bodies in flight minus what the others and the application hold. Set before feeding
    /// input (or answers, which resume parsing). A body that would pass it is refused with 503
    /// and `Retry-After`: at its head for a known length, at the chunk that passes it for a
    /// chunked one (RFC 9110 §15.6.4).
    pub fn set_body_allowance(&mut self, bytes: usize) {
        self.body_allowance = bytes;
    }

    /// Bytes of request bodies this connection holds against its allowance: the bodies of
    /// requests parsed and not handed out yet, and the one being received, counted at its
    /// full length from its head when the length is known (it will be held whole) and as far
    /// as its announced chunks go when chunked.
    pub fn held_body_bytes(&self) -> usize {
        let ready: usize = self.ready.iter().map(|r| r.body.len()).sum();
        ready + self.receiving_body_bytes()
    }

    /// Answers the oldest request handed out by [`poll_request`](Self::poll_request) and not
    /// answered yet; false if there is none. For HEAD the body is measured, not sent; 204 and
    /// 304 send none (RFC 9110 §8.6, §15.3.5, §15.4.5). While a stream is open, the answer is
    /// held until it ends.
    pub fn respond(&mut self, status: u16, content_type: &str, body: &[u8]) -> bool {
        self.respond_with(status, &[], content_type, body)
    }

    /// [`respond`](Self::respond) with extra fields, e.g. `("Allow", "GET, HEAD")`. An empty
    /// `content_type` writes no Content-Type.
    pub fn respond_with(
        &mut self,
        status: u16,
        fields: &[(&str, &str)],
        content_type: &str,
        body: &[u8],
    ) -> bool {
        let Some(owed) = self.next_owed() else {
            return false;
        };
        let framing = self.framing_for(owed);
        let answer = Answer {
            status,
            fields,
            content_type,
            body,
        };
        let sink = if self.stream.is_some() {
            &mut self.held
        } else {
            &mut self.output
        };
        response::encode(sink, &answer, framing);
        self.last_activity = self.now;
        self.after_answer();
        true
    }

    /// Response bytes not yet written to the socket.
    pub fn pending_output(&self) -> &[u8] {
        self.output.get(self.written..).unwrap_or_default()
    }

    /// Answer bytes not written yet: the pending output, and the answers held behind an open
    /// stream. A streaming application skips events while a client's figure stays high.
    pub fn unsent_len(&self) -> usize {
        self.pending_output().len() + self.held.len()
    }

    /// `n` bytes of [`pending_output`](Self::pending_output) were written.
    pub fn consume_output(&mut self, n: usize) {
        self.written = (self.written + n).min(self.output.len());
        if self.written == self.output.len() {
            // Written: a large buffer's memory goes back rather than stay at the largest
            // answer's size; a small one is kept for the next answer.
            release_if_large(&mut self.output);
            self.written = 0;
            self.parse_input();
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) must run: the header or body deadline
    /// while a request is being received, else the idle deadline while nothing is owed and
    /// no stream is open (a stream whose client is gone does not hold the connection).
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.timer().map(|(_, at)| at)
    }

    /// A header or body timeout, or a body behind the minimum rate, answers 408 (RFC 9110
    /// §15.5.9), or closes silently if the peer never sent a byte of the head; an idle timeout
    /// closes and drops unread output. Early calls are no-ops.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.now = now;
        let Some((timer, at)) = self.timer() else {
            return;
        };
        if at > now {
            return;
        }
        match timer {
            Timer::Header if self.input.is_empty() => self.stop(),
            Timer::Header | Timer::Body => self.refuse(408),
            Timer::Idle => self.abort(),
        }
    }

    /// Graceful close: parse nothing more, answer what is owed (the last answer says
    /// `Connection: close`), then close. An open stream must still be ended.
    pub fn close_after_answers(&mut self) {
        self.stop();
    }

    /// Nothing more will be read or answered: close the socket once the output is written.
    pub fn is_closed(&self) -> bool {
        self.stopped && self.owed.is_empty() && self.refusal.is_none() && self.stream.is_none()
    }

    /// The status of a refusal the connection answered by itself (400, 408, 413, 417, 431,
    /// 501 or 503), reported once, for the driver's counters.
    pub fn poll_refusal(&mut self) -> Option<u16> {
        self.refused.take()
    }

    /// Bytes held in buffers, for tests of the memory bounds.
    pub fn buffered(&self) -> usize {
        self.input.len() + self.output.len() + self.held.len()
    }

    /// Where the connection stands at `now` for a driver at its connection cap that must
    /// close one for a new connection ([`EvictionRank`], the least first); `None` when it must
    /// not be closed: it owes answers (or has some unwritten), streams one, is closing, or
    /// receives a body at the minimum rate.
    pub fn eviction_rank(&self, now: Timestamp) -> Option<EvictionRank> {
        let owes = !self.owed.is_empty()
            || self.refusal.is_some()
            || self.stream.is_some()
            || !self.pending_output().is_empty();
        if owes || self.stopped {
            return None;
        }
        match &self.receiving {
            Receiving::FirstHead { opened: since } | Receiving::Head { since } => {
                Some(EvictionRank::NoHead { since: *since })
            }
            Receiving::Between => Some(EvictionRank::Idle {
                since: self.last_activity,
            }),
            Receiving::Body(body) => body
                .pace
                .behind_at(self.config.min_body_rate)
                .filter(|&behind_since| behind_since < now)
                .map(|behind_since| EvictionRank::SlowBody { behind_since }),
        }
    }

    /// Requests parsed and not answered yet.
    pub fn backlog(&self) -> usize {
        self.owed.len()
    }
}

impl Http1Connection {
    fn may_parse(&self) -> bool {
        !self.stopped
            && self.owed.len() < self.config.max_pipelined
            && self.output.len() + self.held.len() < self.config.max_pending_output
    }

    /// The deadline that applies now. Header and body deadlines run only while parsing is
    /// not paused: then it is us, not the peer, who is slow.
    fn timer(&self) -> Option<(Timer, Timestamp)> {
        if self.is_closed() && self.pending_output().is_empty() {
            return None;
        }
        if self.may_parse() {
            match &self.receiving {
                Receiving::FirstHead { opened } => {
                    return Some((Timer::Header, *opened + self.config.first_head_timeout));
                }
                Receiving::Head { since } => {
                    return Some((Timer::Header, *since + self.config.header_timeout));
                }
                Receiving::Body(body) => {
                    let cap = body.since + self.config.body_timeout;
                    let paced = body.pace.cut_at(&self.config).map_or(cap, |at| at.min(cap));
                    return Some((Timer::Body, paced));
                }
                Receiving::Between => {}
            }
        }
        // A stream whose client is gone does not hold the connection, even if the
        // application never ends it.
        let idle = self.owed.is_empty() && self.refusal.is_none() && self.stream.is_none();
        (idle || self.stream_gone())
            .then(|| (Timer::Idle, self.last_activity + self.config.idle_timeout))
    }

    /// The oldest owed request that was handed out, to answer now.
    fn next_owed(&mut self) -> Option<Owed> {
        if self.owed.len() == self.ready.len() {
            return None;
        }
        self.owed.pop_front()
    }

    fn framing_for(&self, owed: Owed) -> Framing {
        Framing {
            head_only: owed.head_only,
            close: !owed.keep_alive || self.is_last_answer(),
            confirm_keep_alive: owed.http10_keep_alive,
        }
    }

    /// After an answer: what waited for the owed ones, then more parsing.
    fn after_answer(&mut self) {
        self.send_refusal_when_due();
        self.send_continue_when_due();
        self.parse_input();
    }

    /// `100 Continue` for a body whose client waits, once no earlier answer is owed:
    /// interim answers go in order like the others (RFC 9110 §15.2). Until then the client
    /// waits (curl sends the body anyway after a second).
    fn send_continue_when_due(&mut self) {
        if !self.owed.is_empty() || self.stream.is_some() {
            return;
        }
        if let Receiving::Body(body) = &mut self.receiving {
            if let Pace::AwaitingContinue = body.pace {
                self.output.extend_from_slice(response::CONTINUE);
                // The client may send from now: its pace counts from here.
                body.pace = Pace::Flowing {
                    since: self.now,
                    received: 0,
                };
            }
        }
    }

    /// Queues a refusal after the owed answers and stops parsing.
    fn refuse(&mut self, status: u16) {
        self.refusal = Some(status);
        self.stop();
        self.stream_client_left();
        self.send_refusal_when_due();
    }

    fn stream_client_left(&mut self) {
        if let Some(stream) = &mut self.stream {
            stream.gone = true;
        }
    }

    fn send_refusal_when_due(&mut self) {
        if !self.owed.is_empty() || self.stream.is_some() {
            return;
        }
        let Some(status) = self.refusal.take() else {
            return;
        };
        let body = format!("{}\n", reason_phrase(status).to_ascii_lowercase());
        let busy: &[(&str, &str)] = &[("Retry-After", BUSY_RETRY_AFTER)];
        let answer = Answer {
            status,
            fields: if status == 503 { busy } else { &[] },
            content_type: "text/plain; charset=utf-8",
            body: body.as_bytes(),
        };
        let framing = Framing {
            head_only: false,
            close: true,
            confirm_keep_alive: false,
        };
        response::encode(&mut self.output, &answer, framing);
        self.refused = Some(status);
    }

    fn is_last_answer(&self) -> bool {
        self.stopped && self.owed.is_empty() && self.refusal.is_none()
    }

    fn stop(&mut self) {
        self.stopped = true;
        self.input = Vec::new();
        self.receiving = Receiving::Between;
    }

    /// Gives up on the peer: unread output, unanswered requests and a stream whose client
    /// is gone are dropped.
    fn abort(&mut self) {
        self.stop();
        self.ready.clear();
        self.owed.clear();
        self.refusal = None;
        self.stream = None;
        self.held = Vec::new();
        self.output = Vec::new();
        self.written = 0;
    }
}

/// Capacity an emptied buffer keeps for reuse: a typical request or answer, without an
/// allocation each; beyond it the memory goes back (a connection that once carried a large
/// body does not keep its size).
const KEPT_CAPACITY: usize = 16 << 10;

/// Empties `buf`, freeing its memory if it grew past [`KEPT_CAPACITY`].
fn release_if_large(buf: &mut Vec<u8>) {
    buf.clear();
    if buf.capacity() > KEPT_CAPACITY {
        *buf = Vec::new();
    }
}
