//! Arbitrary bytes in arbitrary pieces to the HTTP/1.1 server connection: never panics, buffers
//! stay bounded, bodies stay within the limit, and the requests it yields (bodies included) are
//! the same whether the bytes arrive at once or in pieces. Some answers are streamed.
//!
//! Input: one byte for the piece size, one mode byte (bit 0: accept bodies of up to 256
//! bytes; bit 1: stream every other answer; bit 2: end with a far timeout), then the bytes.
#![no_main]

use backoffd::http1::{Config, Http1Connection, Request};
use backoffd::time::Timestamp;
use libfuzzer_sys::fuzz_target;

const NOW: Timestamp = Timestamp::from_nanos(1);

fuzz_target!(|data: &[u8]| {
    let Some((&[piece, mode], bytes)) = data.split_first_chunk::<2>() else {
        return;
    };
    let config = Config {
        max_body_len: if mode & 1 != 0 { 256 } else { 0 },
        max_pipelined: 4,
        ..Config::default()
    };
    // Beyond this the driver would not have read it all (see Config::max_buffered_input).
    if bytes.len() > config.max_buffered_input - config.max_head_len {
        return;
    }
    let whole = run(&config, bytes, bytes.len().max(1), mode);
    let pieces = run(&config, bytes, usize::from(piece).max(1), mode);
    assert_eq!(whole, pieces, "the same requests however the input is cut");
});

/// Feeds `bytes` in pieces of `piece`, answering as it goes; the requests seen.
fn run(config: &Config, bytes: &[u8], piece: usize, mode: u8) -> Vec<(String, String, Vec<u8>)> {
    let mut conn = Http1Connection::new(NOW, config.clone());
    let mut seen = Vec::new();
    for chunk in bytes.chunks(piece) {
        conn.handle_input(NOW, chunk);
        answer(&mut conn, &mut seen, config, mode);
        if conn.is_closed() {
            break;
        }
    }
    conn.handle_eof();
    answer(&mut conn, &mut seen, config, mode);
    if mode & 4 != 0 {
        conn.handle_timeout(Timestamp::from_nanos(u64::MAX / 2));
        assert!(conn.poll_timeout().is_none() || !conn.pending_output().is_empty());
    }
    seen
}

/// Answers every request ready, streaming some, and writes the output.
fn answer(
    conn: &mut Http1Connection,
    seen: &mut Vec<(String, String, Vec<u8>)>,
    config: &Config,
    mode: u8,
) {
    while let Some(req) = conn.poll_request() {
        assert!(req.body.len() <= config.max_body_len);
        if mode & 2 != 0 && seen.len() % 2 == 1 {
            assert!(conn.start_stream(200, &[("Cache-Control", "no-cache")], "text/event-stream"));
            conn.stream_data(&req.body);
            conn.stream_data(b"");
            assert!(conn.end_stream());
        } else {
            let status = [200, 204, 304, 404][seen.len() % 4];
            assert!(conn.respond(status, "", req.target.as_bytes()));
        }
        seen.push(summary(req));
    }
    let bound = config.max_buffered_input + config.max_pending_output + 2 * config.max_head_len;
    assert!(conn.buffered() <= bound, "buffers stay bounded");
    let n = conn.pending_output().len();
    conn.consume_output(n);
}

fn summary(req: Request) -> (String, String, Vec<u8>) {
    (req.method, req.target, req.body)
}
