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
//! Refused requests (400, 408, 413, 431) are answered by the connection itself, after the
//! answers still owed to earlier pipelined requests, and end the connection: after such an
//! error the rest of the byte stream cannot be trusted to hold request boundaries. Input is
//! parsed when a line feed arrives (no head can end without one), so a slowloris dribble costs
//! no re-parse per byte; a malformed head is noticed at its next line feed, at the head limit,
//! at the end of input, or at the header timeout (then it is a 408).

use std::collections::VecDeque;

use super::head::{self, Head};
use super::response::{self, Answer, Framing};
use super::{reason_phrase, Config, Request};
use crate::time::Timestamp;

/// How to answer a request that has been parsed.
#[derive(Clone, Copy, Debug)]
struct Owed {
    head_only: bool,
    keep_alive: bool,
    http10_keep_alive: bool,
}

/// See the module docs.
pub struct Http1Connection {
    config: Config,
    /// Received bytes not parsed yet.
    input: Vec<u8>,
    /// Parsed requests not yet handed to the application.
    ready: VecDeque<Request>,
    /// Every parsed request not yet answered, oldest first (`ready` are its newest).
    owed: VecDeque<Owed>,
    output: Vec<u8>,
    /// Bytes at the start of `output` already written to the socket.
    written: usize,
    /// No more bytes are coming: the peer closed its side, or overran the input bound.
    input_ended: bool,
    /// No more requests will be parsed (close requested, error, shutdown, time-out).
    stopped: bool,
    /// The refusal to send once the owed answers are out.
    refusal: Option<u16>,
    /// A refusal sent and not yet reported by [`poll_refusal`](Self::poll_refusal).
    refused: Option<u16>,
    /// When the head being received started; `None` while no request is in progress.
    head_started: Option<Timestamp>,
    /// The last input or answer, for the idle timeout.
    last_activity: Timestamp,
    /// The latest `now` the connection was given (answers are timed by it).
    now: Timestamp,
}

impl Http1Connection {
    /// A connection just accepted at `now`: its first request head must complete within the
    /// header timeout from here.
    pub fn new(now: Timestamp, config: Config) -> Self {
        Http1Connection {
            config,
            input: Vec::new(),
            ready: VecDeque::new(),
            owed: VecDeque::new(),
            output: Vec::new(),
            written: 0,
            input_ended: false,
            stopped: false,
            refusal: None,
            refused: None,
            head_started: Some(now),
            last_activity: now,
            now,
        }
    }

    /// Bytes read from the socket. Parses every complete head it can (pipelining), up to the
    /// backlog bound; input after the connection stopped reading is discarded.
    pub fn handle_input(&mut self, now: Timestamp, bytes: &[u8]) {
        self.now = now;
        if self.stopped || self.input_ended || bytes.is_empty() {
            return;
        }
        self.last_activity = now;
        self.input.extend_from_slice(bytes);
        // A head cannot end without a line feed; skip re-parsing slowloris dribbles.
        if bytes.contains(&b'\n') || self.input.len() >= self.config.max_head_len {
            self.parse_heads();
        } else {
            self.head_started.get_or_insert(now);
        }
        if self.input.len() > self.config.max_buffered_input {
            // The driver read while told not to: refuse to keep it. Owed answers still go out.
            self.input.clear();
            self.handle_eof();
        }
    }

    /// The peer closed its sending side: complete requests are still answered (a client may
    /// half-close after its last request), then the connection closes (RFC 9112 §9.6).
    pub fn handle_eof(&mut self) {
        self.input_ended = true;
        self.parse_heads();
    }

    /// Whether the driver should read more: false while the backlog or the output is full,
    /// and once no more requests will be parsed.
    pub fn wants_input(&self) -> bool {
        !self.input_ended && self.may_parse()
    }

    /// The next request, oldest first. Answer each with [`respond`](Self::respond) in order.
    pub fn poll_request(&mut self) -> Option<Request> {
        self.ready.pop_front()
    }

    /// Answers the oldest request handed out by [`poll_request`](Self::poll_request) and not
    /// answered yet; false if there is none. For HEAD the body is measured, not sent.
    pub fn respond(&mut self, status: u16, content_type: &str, body: &[u8]) -> bool {
        self.respond_with(status, &[], content_type, body)
    }

    /// [`respond`](Self::respond) with extra fields, e.g. `("Allow", "GET, HEAD")`.
    pub fn respond_with(
        &mut self,
        status: u16,
        fields: &[(&str, &str)],
        content_type: &str,
        body: &[u8],
    ) -> bool {
        if self.owed.len() == self.ready.len() {
            return false;
        }
        let Some(owed) = self.owed.pop_front() else {
            return false;
        };
        let framing = Framing {
            head_only: owed.head_only,
            close: !owed.keep_alive || self.is_last_answer(),
            confirm_keep_alive: owed.http10_keep_alive,
        };
        let answer = Answer {
            status,
            fields,
            content_type,
            body,
        };
        response::encode(&mut self.output, &answer, framing);
        self.last_activity = self.now;
        self.send_refusal_when_due();
        self.parse_heads();
        true
    }

    /// Response bytes not yet written to the socket.
    pub fn pending_output(&self) -> &[u8] {
        self.output.get(self.written..).unwrap_or_default()
    }

    /// `n` bytes of [`pending_output`](Self::pending_output) were written.
    pub fn consume_output(&mut self, n: usize) {
        self.written = (self.written + n).min(self.output.len());
        if self.written == self.output.len() {
            self.output.clear();
            self.written = 0;
            self.parse_heads();
        }
    }

    /// When [`handle_timeout`](Self::handle_timeout) must run: the header deadline while a
    /// head is being received, else the idle deadline while nothing is owed.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        if self.is_closed() && self.pending_output().is_empty() {
            return None;
        }
        if let Some(started) = self.head_timer() {
            return Some(started + self.config.header_timeout);
        }
        let idle = self.owed.is_empty() && self.refusal.is_none();
        idle.then(|| self.last_activity + self.config.idle_timeout)
    }

    /// A header timeout answers 408 (RFC 9110 §15.5.9), or closes silently if the peer never
    /// sent a byte; an idle timeout closes and drops unread output. Early calls are no-ops.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.now = now;
        if self.poll_timeout().is_none_or(|at| at > now) {
            return;
        }
        match self.head_timer() {
            Some(_) if !self.input.is_empty() => self.refuse(408),
            Some(_) => self.stop(),
            None => self.abort(),
        }
    }

    /// Graceful close: parse nothing more, answer what is owed (the last answer says
    /// `Connection: close`), then close.
    pub fn close_after_answers(&mut self) {
        self.stop();
    }

    /// Nothing more will be read or answered: close the socket once the output is written.
    pub fn is_closed(&self) -> bool {
        self.stopped && self.owed.is_empty() && self.refusal.is_none()
    }

    /// The status of a refusal the connection answered by itself (400, 408, 413 or 431),
    /// reported once, for the driver's counters.
    pub fn poll_refusal(&mut self) -> Option<u16> {
        self.refused.take()
    }

    /// Bytes held in buffers, for tests of the memory bounds.
    pub fn buffered(&self) -> usize {
        self.input.len() + self.output.len()
    }

    /// Since when the connection has been idle between requests, if it is: kept alive after
    /// an answer, with nothing owed, nothing unwritten and no next head begun. A driver at its
    /// connection cap may close such a connection for a new one (RFC 9112 §9.5: a server may
    /// close an idle connection at any time; the client retries on a new one).
    pub fn idle_since(&self) -> Option<Timestamp> {
        let between = self.head_started.is_none() && self.input.is_empty();
        let quiet = self.owed.is_empty() && self.refusal.is_none() && !self.stopped;
        (between && quiet && self.pending_output().is_empty()).then_some(self.last_activity)
    }

    /// Requests parsed and not answered yet.
    pub fn backlog(&self) -> usize {
        self.owed.len()
    }

    fn may_parse(&self) -> bool {
        !self.stopped
            && self.owed.len() < self.config.max_pipelined
            && self.output.len() < self.config.max_pending_output
    }

    /// The start of the head in progress, while its timer runs (not while parsing is paused:
    /// then it is us, not the peer, who is slow).
    fn head_timer(&self) -> Option<Timestamp> {
        self.head_started.filter(|_| self.may_parse())
    }

    /// Parses complete heads off the input while the bounds allow.
    fn parse_heads(&mut self) {
        while self.may_parse() {
            match head::parse(&self.input, &self.config) {
                Head::Complete {
                    request,
                    len,
                    http10,
                } => self.accept(request, len, http10),
                Head::Partial if self.input_ended => self.stop(),
                Head::Partial => {
                    if !self.input.is_empty() {
                        self.head_started.get_or_insert(self.now);
                    }
                    return;
                }
                Head::Invalid(status) => self.refuse(status),
            }
        }
    }

    fn accept(&mut self, request: Request, len: usize, http10: bool) {
        self.input.drain(..len);
        self.head_started = None;
        self.owed.push_back(Owed {
            head_only: request.method == "HEAD",
            keep_alive: request.keep_alive,
            http10_keep_alive: http10 && request.keep_alive,
        });
        // RFC 9112 §9.6: no further requests are processed after one that closes.
        if !request.keep_alive {
            self.stop();
        }
        self.ready.push_back(request);
    }

    /// Queues a refusal after the owed answers and stops parsing.
    fn refuse(&mut self, status: u16) {
        self.refusal = Some(status);
        self.stop();
        self.send_refusal_when_due();
    }

    fn send_refusal_when_due(&mut self) {
        if !self.owed.is_empty() {
            return;
        }
        let Some(status) = self.refusal.take() else {
            return;
        };
        let body = format!("{}\n", reason_phrase(status).to_ascii_lowercase());
        let answer = Answer {
            status,
            fields: &[],
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
        self.head_started = None;
    }

    /// Gives up on the peer: unread output and unanswered requests are dropped.
    fn abort(&mut self) {
        self.stop();
        self.ready.clear();
        self.owed.clear();
        self.refusal = None;
        self.output = Vec::new();
        self.written = 0;
    }
}
