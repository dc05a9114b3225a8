//! What the connection tells the application, and why it refuses a call.

use std::fmt;

use crate::http2::error::ErrorCode;
use crate::http2::hpack::Header;

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
    /// The ACK of a PING we sent with [`Connection::ping`](super::Connection::ping) (§6.7).
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
