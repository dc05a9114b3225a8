//! A valid client preface followed by arbitrary bytes, in arbitrary pieces, to a server-side
//! HTTP/2 connection, with time passing (so budgets refill and the header-block, idle and
//! handshake deadlines fire): never panics and its buffers stay bounded.
#![no_main]

use std::time::Duration;

use backoffd::http2::frame::PREFACE;
use backoffd::http2::{Config, Connection, Role};
use backoffd::time::Timestamp;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let config = Config {
        idle_timeout: Some(Duration::from_secs(60)),
        ..Config::default()
    };
    let mut now = Timestamp::from_nanos(1);
    let mut conn = Connection::new(Role::Server, config, now);
    conn.handle_input(now, PREFACE);
    let Some((&piece, bytes)) = data.split_first() else {
        return;
    };
    for chunk in bytes.chunks(usize::from(piece).max(1)) {
        // Up to about 4 s per chunk: past the 10 s header-block deadline in a few.
        now += Duration::from_millis(u64::from(chunk[0]) * 16);
        if conn.poll_timeout().is_some_and(|t| t <= now) {
            conn.handle_timeout(now);
        }
        conn.handle_input(now, chunk);
        while conn.poll_event().is_some() {}
        let n = conn.pending_output().len();
        conn.consume_output(now, n);
        assert!(conn.buffered_bytes() <= 8 * 1024 * 1024);
        if conn.is_closed() {
            return;
        }
    }
});
