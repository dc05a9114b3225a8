//! HTTP/1.1 (RFC 9112) for the metrics endpoint and the HTTP cross-proxy, sans-IO: a server
//! connection that takes `now` and bytes and hands back requests, answers to send and when to
//! be woken. [`driver`] (the one I/O file here) is the listener and its connections on the
//! loop, shared by both.
//!
//! Deliberately small: request bodies with a length or chunked (RFC 9112 §6, §7.1) up to a
//! limit, `Expect: 100-continue`, answers with a known length, and streamed answers (chunked,
//! for Server-Sent Events); no upgrades, no trailers sent. What it does have is the defences a
//! listener on a TCP port needs: a bounded head, a header timeout (shorter for a connection's
//! first head), a body limit, timeout and minimum rate, a share of a body budget the driver
//! keeps across connections (503 past it), an idle timeout, a bounded pipelined backlog and
//! bounded buffers, so no peer can make it hold more memory or time than its [`Config`] says;
//! and a rank ([`EvictionRank`]) by which a driver at its connection cap closes the connection
//! that made the least progress for a new one.

mod body;
pub mod driver;
mod head;
mod response;
mod server;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::time::Duration;

pub use server::{EvictionRank, Http1Connection};

/// A request the application must answer, in arrival order.
///
/// Its memory is bounded by the connection's limits: method, target and fields come from one
/// head, so together they are at most [`Config::max_head_len`] bytes (plus one small header per
/// field, at most 64 fields); the body is at most [`Config::max_body_len`]. At most
/// [`Config::max_pipelined`] requests wait for answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The method token as sent, any token (RFC 9110 §9.1: case-sensitive, extensible); the
    /// connection does not judge methods, the application does.
    pub method: String,
    /// The request target as sent, path and query, still percent-encoded; an absolute-form
    /// target is reduced to its path and query (RFC 9112 §3.2.2), asterisk- and
    /// authority-form are kept as they are.
    pub target: String,
    /// The path of the request target, without query (the metrics routes need no more).
    pub path: String,
    /// The header fields in the order received: name as sent, value bytes without the
    /// surrounding whitespace (RFC 9112 §5.1). See [`field`](Self::field).
    pub fields: Vec<(String, Vec<u8>)>,
    /// The content, de-chunked; empty when there was none (RFC 9112 §6).
    pub body: Vec<u8>,
    /// Whether the connection stays open after the answer (RFC 9112 §9.3).
    pub keep_alive: bool,
}

impl Request {
    /// The value of every field line named `name`, in order (names are case-insensitive,
    /// RFC 9110 §5.1).
    pub fn field_lines<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.fields
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    /// The field named `name`, its repeated lines combined with `", "` in order (RFC 9110
    /// §5.3), e.g. two `Accept` lines; `None` when absent. Borrowed when it is one line.
    pub fn field(&self, name: &str) -> Option<Cow<'_, [u8]>> {
        let mut lines = self
            .fields
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice());
        let first = lines.next()?;
        let Some(second) = lines.next() else {
            return Some(Cow::Borrowed(first));
        };
        let mut combined = [first, second].join(&b", "[..]);
        for line in lines {
            combined.extend_from_slice(b", ");
            combined.extend_from_slice(line);
        }
        Some(Cow::Owned(combined))
    }
}

/// Limits of one connection. Every one of them bounds what a peer can make us hold.
#[derive(Clone, Debug)]
pub struct Config {
    /// Longest request head (request line and fields) accepted; longer is 431 (RFC 6585 §5).
    pub max_head_len: usize,
    /// The first request head of a connection must complete this long after the connection
    /// opened; otherwise 408 (RFC 9110 §15.5.9), or a silent close if nothing came. Short,
    /// because a connection that has asked for nothing yet holds a slot of the connection cap
    /// for free: a real client sends its request as soon as it connects.
    pub first_head_timeout: Duration,
    /// A later request head (on a kept-alive connection) must complete this long after its
    /// first byte; otherwise 408 (RFC 9110 §15.5.9). Stops slowloris.
    pub header_timeout: Duration,
    /// How long a connection may sit with no request in progress, or with an answer nobody
    /// reads, before it is closed (RFC 9112 §9.5).
    pub idle_timeout: Duration,
    /// Requests parsed and not yet answered; at this many, parsing (and reading) stops until
    /// the application answers (RFC 9112 §9.3.2 pipelining, bounded).
    pub max_pipelined: usize,
    /// Answer bytes waiting for the socket; at this many, parsing stops until they drain.
    pub max_pending_output: usize,
    /// Unparsed input kept while parsing is paused; more ends the connection after the owed
    /// answers. A driver that reads only while [`Http1Connection::wants_input`], at most
    /// `max_buffered_input - max_head_len` bytes at a time, never gets there.
    pub max_buffered_input: usize,
    /// Longest request body accepted (RFC 9112 §6); longer is 413 (RFC 9110 §15.5.14), known
    /// from Content-Length before the body is read. 0 accepts no body at all: a request that
    /// announces one is refused with 413 at its head, chunked too.
    pub max_body_len: usize,
    /// A request body must complete this long after its head did; otherwise 408 (RFC 9110
    /// §15.5.9). A dribbling body cannot keep a connection forever. The absolute cap; see
    /// [`min_body_rate`](Self::min_body_rate) for the pace.
    pub body_timeout: Duration,
    /// Bytes per second a body must average, counted over the whole body so far, from the
    /// end of its head (or from the `100 Continue`, for a client that waits for one, RFC 9110
    /// §10.1.1), less [`body_rate_grace`](Self::body_rate_grace); behind it, the request is
    /// 408 (RFC 9110 §15.5.9). A body dribbled a byte at a time, or announced and never sent,
    /// is cut in seconds rather than at the body timeout. Averaging over the whole body lets a
    /// real client on a slow or bursty network pass. 0 turns the check off.
    pub min_body_rate: u64,
    /// A head start for [`min_body_rate`](Self::min_body_rate): a body must have had
    /// `rate x (elapsed - grace)` bytes. TCP's slow start and one lost segment can delay the
    /// first bytes by a second or more.
    pub body_rate_grace: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_head_len: 8 * 1024,
            first_head_timeout: Duration::from_secs(3),
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_pipelined: 16,
            max_pending_output: 256 * 1024,
            max_buffered_input: 64 * 1024,
            max_body_len: 0,
            body_timeout: Duration::from_secs(30),
            min_body_rate: 1024,
            body_rate_grace: Duration::from_secs(2),
        }
    }
}

/// The reason phrase for the status codes backoffd sends (RFC 9110 §15; 429 and 431 from
/// RFC 6585 §4, §5); empty otherwise, which RFC 9112 §4 allows.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        304 => "Not Modified",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        406 => "Not Acceptable",
        408 => "Request Timeout",
        409 => "Conflict",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        417 => "Expectation Failed",
        422 => "Unprocessable Content",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "",
    }
}
