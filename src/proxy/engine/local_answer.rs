//! The answers the proxy makes itself, without asking an upstream (4.xx, 5.03, 5.04, ...):
//! what they say, how they are encoded, and how long they are kept for the request's
//! retransmissions; and the first answer of an observer joining a group (`fanout.rs`), which
//! nothing upstream answers either.

use std::time::Duration;

use crate::coap::option::{encode_uint, MAX_AGE, OBSERVE, SIZE1};
use crate::coap::{params, Code, Message, MessageBuilder, MessageType};

/// How long the proxy keeps an answer it made itself (4.xx, 5.03, ...), for the request's
/// retransmissions: MAX_TRANSMIT_WAIT, not EXCHANGE_LIFETIME. RFC 7252 §4.5 asks that a
/// duplicate CON be acknowledged with the same answer and its request processed once, and
/// relaxes the second half for a request "handled in an idempotent fashion". A request the
/// proxy answered itself went nowhere: handling a late copy again runs nothing twice (it
/// is refused again, or forwarded for the first time). So the answer need only outlast the
/// client's interest in it, MAX_TRANSMIT_WAIT after its first transmission, when the client
/// gives up (§4.8.2), and not the network's longest delay on top (2 x MAX_LATENCY in
/// EXCHANGE_LIFETIME), which is there so that a forwarded request never runs twice. Every
/// retransmission the client makes still gets the same answer.
pub(super) const LOCAL_ANSWER_LIFETIME: Duration = params::MAX_TRANSMIT_WAIT;

/// What the proxy answers with when it answers itself.
#[derive(Clone, Copy)]
pub(super) struct LocalAnswer {
    pub(super) code: Code,
    pub(super) max_age: Option<u32>,
    /// Size1 of a 4.13: the largest request entity the proxy would take (RFC 7252 §5.10.9).
    pub(super) size1: Option<u32>,
    /// An Echo value to repeat (RFC 9175 §2.4), with a 4.01 from `--validate-sources`.
    pub(super) echo: Option<[u8; crate::coap::echo::ISSUED_LEN]>,
    /// Diagnostic payload (RFC 7252 §5.5.2): a short human-readable reason.
    pub(super) diagnostic: &'static str,
}

/// Encodes a response the proxy makes itself (type, MID and token are placeholders until
/// `Proxy::answer_client` rewrites them, or final for a direct answer).
pub(super) fn encode_local(
    out: &mut Vec<u8>,
    ty: MessageType,
    mid: u16,
    token: &[u8],
    a: &LocalAnswer,
) {
    let mut b = MessageBuilder::new(out, ty, a.code, mid, token);
    if let Some(age) = a.max_age {
        b.option(MAX_AGE, &encode_uint(age));
    }
    if let Some(size) = a.size1 {
        b.option(SIZE1, &encode_uint(size));
    }
    if let Some(echo) = &a.echo {
        b.option(crate::coap::option::ECHO, echo);
    }
    b.payload(a.diagnostic.as_bytes());
    // Tokens come from parsed messages (<= 8 bytes), so encoding cannot fail.
    let _ = b.finish();
}

/// `msg` with an Observe option of value `seq` (sorted in by the builder): a joining
/// observer's first answer is its group's cached representation with the group's latest
/// Observe value, so that the notifications after it are newer (RFC 7641 §3.4).
pub(super) fn with_observe(
    out: &mut Vec<u8>,
    msg: &Message,
    seq: u32,
) -> Result<(), crate::coap::EncodeError> {
    let ty = msg.msg_type();
    let mut b = MessageBuilder::new(out, ty, msg.code(), msg.message_id(), msg.token());
    b.option(OBSERVE, &encode_uint(seq));
    for (number, value) in msg.options() {
        b.option(number, value);
    }
    b.payload(msg.payload());
    b.finish()
}
