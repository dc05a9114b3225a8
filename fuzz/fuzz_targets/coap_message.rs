//! Any datagram: parse never panics, and what parses re-encodes to the same bytes.
#![no_main]

use backoffd::coap::{echo, option, rewrite, Message, MessageBuilder};
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
    let mut b = MessageBuilder::new(
        &mut out,
        msg.msg_type(),
        msg.code(),
        msg.message_id(),
        token,
    );
    b.payload(msg.payload());
    options.iter().for_each(|&(n, v)| _ = b.option(n, v));
    b.finish()
        .expect("a parsed message re-encodes in any order");
    assert_eq!(out, data, "options out of order encode canonically");
    // Echo (RFC 9175), the untrusted-input path of address validation: decoding checks the
    // length, and verifying a value never panics, and only a value of the issued shape verifies.
    let key = echo::EchoKey::new([1, 2]);
    let client = "192.0.2.1:5683".parse().unwrap();
    let now = backoffd::time::Timestamp::from_nanos(1 << 40);
    for (_, value) in msg.options().filter(|&(n, _)| n == option::ECHO) {
        match echo::decode(value) {
            Ok(e) => {
                assert!((1..=echo::MAX_ECHO_LEN).contains(&value.len()));
                let fresh = key.verify(e, client, now, std::time::Duration::from_secs(60));
                if fresh.is_ok() {
                    assert_eq!(
                        value.len(),
                        echo::ISSUED_LEN,
                        "only an issued value verifies"
                    );
                }
            }
            Err(_) => assert!(value.is_empty() || value.len() > echo::MAX_ECHO_LEN),
        }
    }
});
