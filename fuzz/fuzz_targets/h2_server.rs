//! A valid client preface followed by arbitrary bytes, in arbitrary pieces, to a server-side
//! HTTP/2 connection: never panics and its buffers stay bounded.
#![no_main]

use backoffd::http2::frame::PREFACE;
use backoffd::http2::{Config, Connection, Role};
use backoffd::time::Timestamp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut conn = Connection::new(Role::Server, Config::default(), Timestamp::from_nanos(1));
    conn.handle_input(Timestamp::from_nanos(1), PREFACE);
    let Some((&piece, bytes)) = data.split_first() else {
        return;
    };
    for (i, chunk) in bytes.chunks(usize::from(piece).max(1)).enumerate() {
        conn.handle_input(Timestamp::from_nanos(2 + i as u64), chunk);
        while conn.poll_event().is_some() {}
        let n = conn.pending_output().len();
        conn.consume_output(Timestamp::from_nanos(2 + i as u64), n);
        assert!(conn.buffered_bytes() <= 8 * 1024 * 1024);
        if conn.is_closed() {
            return;
        }
    }
});
