//! The gRPC client layer (as the reconnect client runs it against the control port): two unary
//! calls, one with a deadline, then arbitrary server bytes in arbitrary pieces with time
//! passing. Covers the client side of HTTP/2 and HPACK, response headers, messages, trailers,
//! grpc-status / grpc-message decoding and deadlines. Never panics; each call ends once.
#![no_main]

use std::collections::HashSet;
use std::time::Duration;

use backoffd::grpc::client::{ClientConnection, ClientEvent};
use backoffd::http2::Config;
use backoffd::time::Timestamp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&piece, bytes)) = data.split_first() else {
        return;
    };
    let mut now = Timestamp::from_nanos(1);
    let mut conn = ClientConnection::new(now, "localhost:8080", false, Config::default());
    let mut open = HashSet::new();
    let path = "/grpc.testing.ReconnectService/Start";
    for timeout in [None, Some(Duration::from_secs(2))] {
        if let Ok(stream) = conn.call(now, path, b"\x08\x01", timeout) {
            open.insert(stream);
        }
    }
    for chunk in bytes.chunks(usize::from(piece).max(1)) {
        now = now + Duration::from_millis(u64::from(chunk[0]) * 16);
        conn.handle_input(now, chunk);
        if conn.poll_timeout().is_some_and(|t| t <= now) {
            conn.handle_timeout(now);
        }
        while let Some(event) = conn.poll_event() {
            if let ClientEvent::Response { stream, .. } = event {
                assert!(
                    open.remove(&stream),
                    "stream {stream} ended twice or never opened"
                );
            }
        }
        let n = conn.pending_output().len();
        conn.consume_output(now, n);
    }
});
