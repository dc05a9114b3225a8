//! One HTTP request's CoAP side: the requests it sends the engine (one, or one per block),
//! and what their answers make of it (RFC 7959 for the blocks, RFC 7641 for event streams).
//!
//! HTTP clients see whole bodies. A body larger than one request can carry goes in Block1
//! blocks, each sent when the previous one was answered 2.31 Continue (RFC 7959 §2.3); a
//! response that comes in Block2 blocks is fetched block by block and reassembled, its ETag
//! checked on each so two representations are never spliced (RFC 7959 §2.4).

use std::collections::VecDeque;

use crate::coap::option::{
    decode_uint, encode_uint, BlockValue, BLOCK1, BLOCK2, CONTENT_FORMAT, ECHO, ETAG, OBSERVE,
    SIZE1,
};
use crate::coap::{Code, Message, MessageBuilder, MessageType};

use super::answer::{self, HttpAnswer};
use super::request::{CoapRequest, Kind, Refusal};
use super::sse;

/// Notifications kept for a stream that cannot write yet (it waits behind an earlier answer
/// on its connection); older ones are dropped: an observer wants the latest state.
const MAX_PENDING_EVENTS: usize = 16;
/// Block size exponent 6 (1024 bytes): the largest (RFC 7959 §2.2).
const MAX_SZX: u8 = 6;

/// Where an exchange is.
#[derive(Debug)]
pub(super) enum Transfer {
    /// Sending the request, or its last block: the answer ends it or starts a download.
    Asking,
    /// Sending the body in Block1 blocks; the one out starts at `offset`.
    Uploading { offset: usize, szx: u8 },
    /// Fetching Block2 block `next` of the answer; `body` holds the blocks before it.
    Downloading {
        body: Vec<u8>,
        etag: Option<Vec<u8>>,
        next: u32,
        szx: u8,
    },
    /// Registered: each notification becomes an event (`pending` until it can be written).
    Streaming {
        head_sent: bool,
        pending: VecDeque<Vec<u8>>,
        ended: bool,
    },
    /// The answer, waiting for its turn on the connection.
    Answered(HttpAnswer),
    /// A stream whose HTTP client went away: its deregistration is out (RFC 7641 §3.6).
    Leaving,
}

/// What an answer makes of the exchange.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Next {
    /// Send the next request (`Exchange::encode`).
    Send,
    /// Nothing to send: answered, streaming, or left.
    Wait,
}

/// One HTTP request being served.
#[derive(Debug)]
pub(super) struct Exchange {
    pub request: CoapRequest,
    pub transfer: Transfer,
    /// An Echo value the engine asked for (RFC 9175 §2.3), repeated once.
    echo: Option<Vec<u8>>,
    /// The largest body reassembled from Block2.
    max_body: usize,
}

impl Exchange {
    /// An exchange for `request`, whose CoAP requests may be `max_request` bytes long and
    /// whose reassembled answer at most `max_body`.
    pub fn new(request: CoapRequest, max_request: usize, max_body: usize) -> Self {
        let transfer = Transfer::Asking;
        let mut x = Exchange {
            request,
            transfer,
            echo: None,
            max_body,
        };
        let base = x.base_len();
        if x.request.body.len() + base > max_request {
            x.transfer = Transfer::Uploading {
                offset: 0,
                szx: block_szx(max_request.saturating_sub(base + 8)),
            };
        }
        x
    }

    /// Encodes the request to send now with `mid` and `token`.
    pub fn encode(&self, mid: u16, token: &[u8]) -> Vec<u8> {
        let r = &self.request;
        let mut out = Vec::with_capacity(r.body.len().min(1100) + 64);
        let code = match &self.transfer {
            Transfer::Leaving => Code::GET,
            _ => r.method,
        };
        let mut b = MessageBuilder::new(&mut out, MessageType::Con, code, mid, token);
        for (n, v) in &r.options {
            b.option(*n, v);
        }
        if let Some(echo) = &self.echo {
            b.option(ECHO, echo);
        }
        let payload = match &self.transfer {
            Transfer::Asking => {
                self.observe(&mut b, 0);
                Some(&r.body[..])
            }
            Transfer::Uploading { offset, szx } => {
                Some(upload_block(&mut b, &r.body, *offset, *szx))
            }
            Transfer::Downloading { next, szx, .. } => {
                let block = BlockValue::new(*next, false, *szx).encode();
                b.option(BLOCK2, &block.unwrap_or(encode_uint(0)));
                (r.method == Code::FETCH).then_some(&r.body[..])
            }
            Transfer::Leaving => {
                self.observe(&mut b, 1);
                None
            }
            Transfer::Streaming { .. } | Transfer::Answered(_) => None,
        };
        if let Some(p) = payload.filter(|p| !p.is_empty()) {
            b.payload(p);
        }
        let _ = b.finish();
        out
    }

    /// Adds Observe `value` (0 registers, 1 deregisters) for an event stream.
    fn observe(&self, b: &mut MessageBuilder<'_>, value: u32) {
        if self.request.kind == Kind::Events {
            b.option(OBSERVE, &encode_uint(value));
        }
    }

    /// The engine's final answer to the request out. `extra` are fields every HTTP answer
    /// carries (CORS).
    pub fn on_answer(&mut self, msg: &Message<'_>, extra: &[(&'static str, String)]) -> Next {
        if msg.code() == Code::UNAUTHORIZED && self.echo.is_none() {
            if let Some(echo) = msg.option(ECHO) {
                self.echo = Some(echo.to_vec());
                return Next::Send;
            }
        }
        match std::mem::replace(&mut self.transfer, Transfer::Asking) {
            Transfer::Uploading { offset, szx } => self.uploaded(msg, (offset, szx), extra),
            Transfer::Downloading { body, etag, .. } => self.downloaded(msg, (body, etag), extra),
            Transfer::Leaving => {
                self.transfer = Transfer::Leaving;
                Next::Wait
            }
            _ => self.answered(msg, Vec::new(), extra),
        }
    }

    /// A block was answered: 2.31 asks for the next (at the size the server wants, RFC 7959
    /// §2.5); any other code is the answer, and the upload is over.
    fn uploaded(
        &mut self,
        msg: &Message<'_>,
        (offset, szx): (usize, u8),
        extra: &[(&'static str, String)],
    ) -> Next {
        let size = 16 << szx;
        let next = offset + size;
        if msg.code() != Code::CONTINUE || next >= self.request.body.len() {
            return self.answered(msg, Vec::new(), extra);
        }
        let asked = msg
            .option(BLOCK1)
            .and_then(|v| BlockValue::decode(v).ok())
            .map_or(szx, |b| b.szx.min(szx));
        self.transfer = Transfer::Uploading {
            offset: next,
            szx: asked,
        };
        Next::Send
    }

    /// A further Block2 block came: it must be of the same representation.
    fn downloaded(
        &mut self,
        msg: &Message<'_>,
        (body, etag): (Vec<u8>, Option<Vec<u8>>),
        extra: &[(&'static str, String)],
    ) -> Next {
        if msg.code().class() == 2 && msg.option(ETAG) != etag.as_deref() {
            let r = Refusal {
                status: 502,
                text: "the representation changed during a block-wise transfer",
            };
            return self.answer(HttpAnswer::refusal(r, extra.to_vec()));
        }
        self.answered(msg, body, extra)
    }

    /// A response whose payload follows `body` (the blocks before it): the next block, the
    /// start of a stream, or the answer.
    fn answered(
        &mut self,
        msg: &Message<'_>,
        mut body: Vec<u8>,
        extra: &[(&'static str, String)],
    ) -> Next {
        body.extend_from_slice(msg.payload());
        if body.len() > self.max_body {
            let r = Refusal {
                status: 502,
                text: "the CoAP response is larger than the cross-proxy's body limit",
            };
            return self.answer(HttpAnswer::refusal(r, extra.to_vec()));
        }
        let block2 = msg.option(BLOCK2).and_then(|v| BlockValue::decode(v).ok());
        if let Some(b) = block2.filter(|b| b.more && msg.code().class() == 2) {
            self.transfer = Transfer::Downloading {
                next: b.num + 1,
                szx: b.szx,
                etag: msg.option(ETAG).map(<[u8]>::to_vec),
                body,
            };
            return Next::Send;
        }
        if self.request.kind == Kind::Events && msg.code().class() == 2 {
            return self.start_stream(msg, &body);
        }
        self.answer(answer::http_answer(&self.request, msg, body, extra))
    }

    fn answer(&mut self, answer: HttpAnswer) -> Next {
        self.transfer = Transfer::Answered(answer);
        Next::Wait
    }

    /// The registration's answer: the first event; a resource that is not observable
    /// (no Observe in the answer, RFC 7641 §3.1) gives that one event and the stream ends.
    fn start_stream(&mut self, msg: &Message<'_>, body: &[u8]) -> Next {
        let mut pending = VecDeque::new();
        pending.push_back(event(msg, body));
        self.transfer = Transfer::Streaming {
            head_sent: false,
            pending,
            ended: msg.option(OBSERVE).is_none(),
        };
        Next::Wait
    }

    /// A notification on the stream (RFC 7641 §3.2); one that is not 2.xx ends the
    /// observation (§3.2: the server removed the observer), and so the stream.
    pub fn on_notification(&mut self, msg: &Message<'_>) {
        let Transfer::Streaming { pending, ended, .. } = &mut self.transfer else {
            return;
        };
        if *ended {
            return;
        }
        if msg.code().class() != 2 || msg.option(OBSERVE).is_none() {
            *ended = true;
            return;
        }
        if pending.len() == MAX_PENDING_EVENTS {
            pending.pop_front();
        }
        pending.push_back(event(msg, msg.payload()));
    }

    /// Whether the request out asked to be kept informed (a registration).
    pub fn is_stream(&self) -> bool {
        matches!(self.transfer, Transfer::Streaming { .. })
    }

    /// The HTTP client went away: a stream deregisters (RFC 7641 §3.6); true if that
    /// request must be sent, false if the exchange can simply go.
    pub fn leave(&mut self) -> bool {
        let streaming = matches!(self.transfer, Transfer::Streaming { ended: false, .. });
        if streaming {
            self.transfer = Transfer::Leaving;
        }
        streaming
    }

    /// Bytes of the request's options as encoded, with the header and token: what every
    /// block repeats.
    fn base_len(&self) -> usize {
        let options: usize = (self.request.options.iter())
            .map(|(_, v)| v.len() + 5)
            .sum();
        4 + 8 + options + 1 + 4 + 4
    }
}

/// The event for a notification or registration answer with payload `body`.
fn event(msg: &Message<'_>, body: &[u8]) -> Vec<u8> {
    let seq = msg.option(OBSERVE).and_then(|v| decode_uint(v).ok());
    let cf = msg
        .option(CONTENT_FORMAT)
        .and_then(|v| decode_uint(v).ok())
        .and_then(|v| u16::try_from(v).ok());
    sse::event(seq, cf, body)
}

/// The largest block size exponent whose block fits in `room` bytes (at least 16 bytes).
fn block_szx(room: usize) -> u8 {
    (0..=MAX_SZX).rev().find(|&s| 16 << s <= room).unwrap_or(0)
}

/// Adds Block1 (and Size1 on the first, RFC 7959 §4) for the block at `offset`; its bytes.
fn upload_block<'b>(
    b: &mut MessageBuilder<'_>,
    body: &'b [u8],
    offset: usize,
    szx: u8,
) -> &'b [u8] {
    let size = 16usize << szx;
    let end = (offset + size).min(body.len());
    let num = (offset / size) as u32;
    let block = BlockValue::new(num, end < body.len(), szx).encode();
    b.option(BLOCK1, &block.unwrap_or(encode_uint(0)));
    if offset == 0 {
        b.option(SIZE1, &encode_uint(body.len() as u32));
    }
    &body[offset.min(body.len())..end]
}
