//! HTTP/1.1 (RFC 9112) for the metrics endpoint, sans-IO: a server connection that takes `now`
//! and bytes and hands back requests, answers to send and when to be woken.
//!
//! Deliberately small: request heads only (no request bodies), answers with a known length, no
//! upgrades, no `Expect` handling, no trailers. What it does have is the defences a listener on a
//! TCP port needs: a bounded head, a header timeout, an idle timeout, a bounded pipelined backlog
//! and bounded buffers, so no peer can make it hold more memory or time than its [`Config`] says.

mod head;
mod response;
mod server;
#[cfg(test)]
mod tests;

use std::time::Duration;

pub use server::Http1Connection;

/// A request head the application must answer, in arrival order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The method token as sent (methods are case-sensitive, RFC 9110 §9.1).
    pub method: String,
    /// The path of the request target, without query; absolute-form targets are reduced to
    /// their path (RFC 9112 §3.2.2).
    pub path: String,
    /// Whether the connection stays open after the answer (RFC 9112 §9.3).
    pub keep_alive: bool,
}

/// Limits of one connection. Every one of them bounds what a peer can make us hold.
#[derive(Clone, Debug)]
pub struct Config {
    /// Longest request head (request line and fields) accepted; longer is 431 (RFC 6585 §5).
    pub max_head_len: usize,
    /// A request head must complete this long after it started (or after the connection
    /// opened, for the first one); otherwise 408 (RFC 9110 §15.5.9). Stops slowloris.
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
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_head_len: 8 * 1024,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            max_pipelined: 16,
            max_pending_output: 256 * 1024,
            max_buffered_input: 64 * 1024,
        }
    }
}

/// The reason phrase for the status codes backoffd sends (RFC 9110 §15); empty otherwise,
/// which RFC 9112 §4 allows.
pub fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "",
    }
}
