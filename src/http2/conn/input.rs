//! The read side below frame handling: the client preface (RFC 9113 §3.4), input not yet
//! parsed, header blocks assembled from HEADERS and CONTINUATION (§4.3, §6.10) and decoded by
//! HPACK in wire order.

use crate::http2::error::{ErrorCode, H2Error};
use crate::http2::frame::{self, FrameHeader};
use crate::http2::hpack::{Decoder, Header};
use crate::time::Timestamp;

use super::{proto, Role, DEFAULT_TABLE_SIZE};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadState {
    /// Server: `matched` octets of the client preface seen (§3.4).
    Preface {
        matched: usize,
    },
    Frames,
}

/// A header block waiting for its CONTINUATION frames (§6.10).
#[derive(Debug)]
struct PartialBlock {
    stream_id: u32,
    end_stream: bool,
    block: Vec<u8>,
    /// When the last CONTINUATION must have arrived (`header_block_timeout`).
    deadline: Timestamp,
}

/// A complete header block, decoded.
pub(super) struct HeaderBlock {
    pub(super) stream_id: u32,
    pub(super) end_stream: bool,
    pub(super) headers: Vec<Header>,
}

/// What a HEADERS or CONTINUATION fragment made of its block.
pub(super) enum Fragment {
    /// More CONTINUATION frames are due.
    Incomplete,
    /// The block passed 4 x MAX_HEADER_LIST_SIZE and was dropped; HPACK cannot skip it.
    TooLarge,
    Complete(HeaderBlock),
}

/// Everything of the peer's bytes that is not a frame handled yet.
pub(super) struct Input {
    state: ReadState,
    /// Received octets not parsed yet: less than a frame.
    unparsed: Vec<u8>,
    partial: Option<PartialBlock>,
    decoder: Decoder,
}

impl Input {
    /// A server first reads the client preface; a client reads frames at once (§3.4).
    /// HPACK stops decoding a list past `hard_list_limit`.
    pub(super) fn new(role: Role, hard_list_limit: usize) -> Self {
        Input {
            state: match role {
                Role::Server => ReadState::Preface { matched: 0 },
                Role::Client => ReadState::Frames,
            },
            unparsed: Vec::new(),
            partial: None,
            decoder: Decoder::new(DEFAULT_TABLE_SIZE as usize, hard_list_limit),
        }
    }

    /// Takes the unparsed octets, to parse them with what arrived after them.
    pub(super) fn take_unparsed(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.unparsed)
    }

    /// Keeps `rest` to parse with the next input.
    pub(super) fn keep_unparsed(&mut self, rest: Vec<u8>) {
        self.unparsed = rest;
    }

    /// The client connection preface (§3.4), matched as it trickles in: anything else, an
    /// HTTP/1.1 request included, is PROTOCOL_ERROR. Returns the octets used.
    pub(super) fn read_preface(&mut self, buf: &[u8]) -> Result<usize, H2Error> {
        let ReadState::Preface { matched } = self.state else {
            return Ok(0);
        };
        let expected = &frame::PREFACE[matched..];
        let n = expected.len().min(buf.len());
        if buf[..n] != expected[..n] {
            return Err(proto("invalid connection preface"));
        }
        self.state = match matched + n {
            24 => ReadState::Frames,
            matched => ReadState::Preface { matched },
        };
        Ok(n)
    }

    /// Rules the frame header alone decides, checked before the payload is buffered;
    /// `settings_due`: the peer's first SETTINGS has not arrived.
    pub(super) fn check_header(&self, h: &FrameHeader, settings_due: bool) -> Result<(), H2Error> {
        // §3.4: the peer's preface ends with a SETTINGS frame.
        if settings_due && (h.kind != frame::Kind::Settings || h.flags & frame::FLAG_ACK != 0) {
            return Err(proto("first frame is not SETTINGS"));
        }
        // §6.10: HEADERS then CONTINUATIONs of the same stream, nothing between.
        let continuation = h.kind == frame::Kind::Continuation;
        match &self.partial {
            Some(b) if !continuation || h.stream_id != b.stream_id => {
                Err(proto("frame interleaved in a header block"))
            }
            None if continuation => Err(proto("CONTINUATION without HEADERS")),
            _ => Ok(()),
        }
    }

    /// HEADERS begins a block, due whole by `deadline` (`header_block_timeout`).
    pub(super) fn start_block(&mut self, stream_id: u32, end_stream: bool, deadline: Timestamp) {
        self.partial = Some(PartialBlock {
            stream_id,
            end_stream,
            block: Vec::new(),
            deadline,
        });
    }

    /// Accumulates a header block (§4.3) up to `cap` octets and decodes it once complete,
    /// whatever becomes of its stream, so the HPACK table stays in sync.
    pub(super) fn on_fragment(
        &mut self,
        end_headers: bool,
        fragment: &[u8],
        cap: usize,
    ) -> Result<Fragment, H2Error> {
        let Some(mut partial) = self.partial.take() else {
            return Err(proto("CONTINUATION without HEADERS"));
        };
        if partial.block.len() + fragment.len() > cap {
            return Ok(Fragment::TooLarge);
        }
        if !end_headers {
            partial.block.extend_from_slice(fragment);
            self.partial = Some(partial);
            return Ok(Fragment::Incomplete);
        }
        let block = if partial.block.is_empty() {
            fragment
        } else {
            partial.block.extend_from_slice(fragment);
            &partial.block[..]
        };
        let mut headers = Vec::new();
        if self.decoder.decode(block, &mut headers).is_err() {
            let code = ErrorCode::COMPRESSION_ERROR;
            return Err(H2Error::connection(code, "HPACK error"));
        }
        Ok(Fragment::Complete(HeaderBlock {
            stream_id: partial.stream_id,
            end_stream: partial.end_stream,
            headers,
        }))
    }

    /// When the block being assembled must be complete.
    pub(super) fn block_deadline(&self) -> Option<Timestamp> {
        self.partial.as_ref().map(|b| b.deadline)
    }

    /// The connection closed: no block will complete.
    pub(super) fn drop_block(&mut self) {
        self.partial = None;
    }

    /// Our SETTINGS_HEADER_TABLE_SIZE took effect (§6.5.3): the peer may use that much.
    pub(super) fn allow_table_size(&mut self, size: u32) {
        self.decoder.set_max_allowed_table_size(size as usize);
    }

    /// Octets held: unparsed input and a partial header block.
    pub(super) fn buffered(&self) -> usize {
        self.unparsed.len() + self.partial.as_ref().map_or(0, |b| b.block.len())
    }
}
