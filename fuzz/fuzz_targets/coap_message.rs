//! Any datagram: parse never panics, and what parses re-encodes to the same bytes.
#![no_main]

use backoffd::coap::{rewrite, Message};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(msg) = Message::parse(data) else {
        return;
    };
    let mut out = Vec::new();
    let token = msg.token();
    rewrite(
        &mut out,
        &msg,
        (msg.msg_type(), msg.message_id(), token),
        |b, n, v| {
            b.option(n, v);
        },
    )
    .finish()
    .expect("a parsed message re-encodes");
    assert_eq!(out, data, "canonical encoding round-trips");
});
