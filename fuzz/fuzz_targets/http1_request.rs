//! Arbitrary bytes in arbitrary pieces to the HTTP/1.1 server connection: never panics, output
//! and buffers stay bounded, every request it yields is answered.
#![no_main]

use backoffd::http1::{Config, Http1Connection};
use backoffd::time::Timestamp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut conn = Http1Connection::new(Timestamp::from_nanos(1), Config::default());
    let Some((&piece, bytes)) = data.split_first() else {
        return;
    };
    for (i, chunk) in bytes.chunks(usize::from(piece).max(1)).enumerate() {
        conn.handle_input(Timestamp::from_nanos(1 + i as u64), chunk);
        while let Some(req) = conn.poll_request() {
            conn.respond(200, "text/plain", req.path.as_bytes());
        }
        let n = conn.pending_output().len();
        conn.consume_output(n);
        if conn.is_closed() {
            return;
        }
    }
});
