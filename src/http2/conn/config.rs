//! What a connection is configured with: our SETTINGS (RFC 9113 §6.5.2), its deadlines, and
//! the bounds on what a peer can make it hold or do.

use std::time::Duration;

use super::budget::AbuseBudgets;
use super::DEFAULT_TABLE_SIZE;
use crate::http2::frame;

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
    /// What a peer may make us do, and how often (§10.5).
    pub budgets: AbuseBudgets,
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
            budgets: AbuseBudgets::default(),
        }
    }
}
