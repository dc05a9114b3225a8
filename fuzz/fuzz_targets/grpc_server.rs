//! The gRPC server layer (unary calls over a server HTTP/2 connection, as the reconnect server's
//! control port runs it): a valid client preface, then arbitrary bytes in arbitrary pieces with
//! time passing; every request is answered, alternately with its message and with an error.
//! Never panics; requests carry at most one message within the size limit, and what the
//! connection holds stays within its limits.
#![no_main]

use backoffd::grpc::server::{ServerConnection, ServerEvent, ServerLimits};
use backoffd::grpc::status::{Code, Status};
use backoffd::http2::frame::PREFACE;
use backoffd::http2::Config;
use backoffd::time::Timestamp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&piece, bytes)) = data.split_first() else {
        return;
    };
    let mut now = Timestamp::from_nanos(1);
    let limits = ServerLimits::default();
    let mut conn = ServerConnection::with_limits(now, Config::default(), limits);
    conn.handle_input(now, PREFACE);
    let mut answered = 0u32;
    for chunk in bytes.chunks(usize::from(piece).max(1)) {
        // Milliseconds to a few seconds per chunk, so grpc-timeout deadlines can pass.
        now = now + std::time::Duration::from_millis(u64::from(chunk[0]) * 16);
        conn.handle_input(now, chunk);
        if conn.poll_timeout().is_some_and(|t| t <= now) {
            conn.handle_timeout(now);
        }
        while let Some(event) = conn.poll_event() {
            if let ServerEvent::Request(r) = event {
                assert!(r.message.len() <= limits.max_request_message_len);
                answered += 1;
                let result = if answered % 2 == 0 {
                    Ok(r.message)
                } else {
                    Err(Status::new(Code::from_value(answered), "fuzz\u{e9} %"))
                };
                conn.respond(now, r.stream, result);
            }
        }
        let n = conn.pending_output().len();
        conn.consume_output(now, n);
        // Unparsed input, a header block, answers queued, and the request-body budget.
        assert!(conn.buffered_bytes() < 1 << 20);
        if conn.is_closed() {
            return;
        }
    }
});
