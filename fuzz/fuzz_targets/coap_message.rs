//! Any datagram: parse never panics, and what parses re-encodes to the same bytes.
#![no_main]

use backoffd::coap::{rewrite, Message, MessageBuilder};
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
    // Options in reverse order (repeats in order): the builder defers and sorts them.
    let mut options: Vec<_> = msg.options().collect();
    options.sort_by_key(|&(n, _)| std::cmp::Reverse(n));
    let mut b = MessageBuilder::new(&mut out, msg.msg_type(), msg.code(), msg.message_id(), token);
    b.payload(msg.payload());
    options.iter().for_each(|&(n, v)| _ = b.option(n, v));
    b.finish().expect("a parsed message re-encodes in any order");
    assert_eq!(out, data, "options out of order encode canonically");
});
