//! Hostile peers (issue 13): budgets and deadlines that cut a connection off, in virtual time.

use std::time::{Duration, Instant};

use super::*;

/// A server with `n` peer streams open (HEADERS without END_STREAM), its output drained.
fn server_with_open_streams(config: Config, n: u32) -> Connection {
    let mut server = server_with(config);
    let mut encoder = Encoder::new();
    let mut input = Vec::new();
    for id in (1..2 * n).step_by(2) {
        let block = block(&mut encoder, REQUEST);
        frame::encode_headers(&mut input, id, &block, false, 16_384);
    }
    server.handle_input(T0, &input);
    events(&mut server);
    drain(&mut server);
    assert_eq!(server.open_streams(), n as usize);
    server
}

/// The worst SETTINGS frame of row 9: 2,730 INITIAL_WINDOW_SIZE entries (16,380 octets).
fn window_size_storm() -> Vec<u8> {
    let entries: Vec<(u16, u32)> = (0..2730)
        .map(|i| (frame::SETTINGS_INITIAL_WINDOW_SIZE, 65_535 + (i % 2)))
        .collect();
    let mut input = Vec::new();
    frame::encode_settings(&mut input, &entries);
    input
}

/// Row 9's measurement: the cost of that frame with 100 open streams. Prints, asserts nothing:
/// `cargo test --release --test http2_conn -- --ignored --nocapture settings_frame_cost`.
#[test]
#[ignore]
fn settings_frame_cost() {
    let storm = window_size_storm();
    let mut samples = Vec::new();
    for _ in 0..200 {
        let mut server = server_with_open_streams(Config::default(), 100);
        let start = Instant::now();
        server.handle_input(T0, &storm);
        samples.push(start.elapsed());
        assert!(!server.is_closed());
    }
    samples.sort();
    println!(
        "one SETTINGS frame of 2730 INITIAL_WINDOW_SIZE entries, 100 open streams: \
         min {:?}, median {:?}, max {:?}",
        samples[0],
        samples[samples.len() / 2],
        samples[samples.len() - 1]
    );
    let _ = Duration::ZERO;
}
