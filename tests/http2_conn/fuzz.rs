//! Seeded random and mutated input: no panic, and memory stays bounded.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;

/// A client that mostly plays by the rules: requests on increasing ids (with
/// HPACK state shared with the server), DATA and trailers on recent streams,
/// control frames, and now and then something random.
struct FuzzClient {
    rng: StdRng,
    encoder: Encoder,
    next_id: u32,
}

impl FuzzClient {
    fn recent_id(&mut self) -> u32 {
        self.next_id
            .saturating_sub(2 * self.rng.random_range(1..4))
            .max(1)
    }

    fn frame(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        let end = self.rng.random_bool(0.3);
        let pick = match self.next_id {
            1 => 0, // no stream yet
            _ => self.rng.random_range(0..200),
        };
        match pick {
            0..=59 => {
                let id = self.next_id;
                self.next_id += 2;
                let block = block(&mut self.encoder, REQUEST);
                let max = if self.rng.random_bool(0.2) { 1 } else { 16_384 };
                split_headers(&mut out, id, &block, end, max);
            }
            60..=109 => {
                let (id, len) = (self.recent_id(), self.rng.random_range(0..3000));
                frame::encode_data(&mut out, id, &vec![1; len], end, 16_384);
            }
            110..=119 => {
                let (id, pad) = (self.recent_id(), self.rng.random_range(0..=255u8));
                let payload = [&[pad][..], b"abc", &vec![0; pad as usize]].concat();
                out = raw(frame::TYPE_DATA, frame::FLAG_PADDED, id, &payload);
            }
            120..=129 => {
                let block = block(&mut self.encoder, TRAILERS);
                split_headers(&mut out, self.recent_id(), &block, true, 16_384);
            }
            130..=149 => {
                let id = if end { 0 } else { self.recent_id() };
                frame::encode_window_update(&mut out, id, self.rng.random_range(1..100_000));
            }
            150..=159 => {
                let setting = [(1, 0), (1, 8192), (2, 0), (3, 1), (3, 100), (4, 0)]
                    [self.rng.random_range(0..6)];
                let window = (4, self.rng.random_range(0..100_000));
                frame::encode_settings(&mut out, &[setting, window, (5, 20_000), (9, 9)]);
            }
            160..=169 => frame::encode_ping(&mut out, end, [7; 8]),
            170..=179 => frame::encode_rst_stream(&mut out, self.recent_id(), ErrorCode::CANCEL),
            180..=189 => out = raw(frame::TYPE_PRIORITY, 0, self.recent_id(), &[0, 0, 0, 0, 9]),
            190..=197 => out = raw(0x42, 0, self.recent_id(), b"unknown"),
            198 => frame::encode_goaway(&mut out, 1, ErrorCode::NO_ERROR, b"bye"),
            _ => {
                out = (0..self.rng.random_range(1..64))
                    .map(|_| self.rng.random())
                    .collect()
            }
        }
        if self.rng.random_bool(0.01) {
            let at = self.rng.random_range(0..out.len());
            out[at] = self.rng.random();
        }
        out
    }
}

/// A header block as HEADERS plus CONTINUATIONs of at most `max` octets.
fn split_headers(out: &mut Vec<u8>, id: u32, block: &[u8], end_stream: bool, max: usize) {
    let mut chunks = block.chunks(max).peekable();
    let mut flags = if end_stream {
        frame::FLAG_END_STREAM
    } else {
        0
    };
    let mut kind = frame::TYPE_HEADERS;
    while let Some(chunk) = chunks.next() {
        if chunks.peek().is_none() {
            flags |= frame::FLAG_END_HEADERS;
        }
        out.extend(raw(kind, flags, id, chunk));
        (kind, flags) = (frame::TYPE_CONTINUATION, 0);
    }
}

/// One seeded run: a handshaken server fed a mostly well-behaved client's
/// frames in random pieces, answering requests as an application would.
fn fuzz_one(seed: u64) -> usize {
    let mut client = FuzzClient {
        rng: StdRng::seed_from_u64(seed),
        encoder: Encoder::new(),
        next_id: 1,
    };
    let config = Config {
        max_concurrent_streams: 8,
        max_header_list_size: 4096,
        ..Config::default()
    };
    let mut server = server_with(config);
    let mut now = T0;
    for round in 0..300 {
        let input = client.frame();
        let rng = &mut client.rng;
        for piece in input.chunks(rng.random_range(1..64)) {
            now += Duration::from_millis(rng.random_range(0..50));
            server.handle_input(now, piece);
        }
        for event in events(&mut server) {
            if let Event::Headers { stream, .. } = event {
                let _ = server.send_headers(T0, stream, RESPONSE, false);
                let _ = server.send_data(T0, stream, &[5; 1000], rng.random_bool(0.5));
            }
        }
        let out = server.pending_output().len();
        server.consume_output(T0, rng.random_range(0..=out));
        assert!(
            server.buffered_bytes() < 1 << 20,
            "{}",
            server.buffered_bytes()
        );
        assert!(server.open_streams() <= 8);
        if server.is_closed() {
            return round;
        }
    }
    300
}

/// The same frames fed to a client with requests in flight: no panic, bounded.
fn fuzz_client_one(seed: u64) {
    let mut peer = FuzzClient {
        rng: StdRng::seed_from_u64(seed),
        encoder: Encoder::new(),
        next_id: 1,
    };
    let mut client = client_with_peer_settings(&[]);
    for _ in 0..300 {
        while client.open_streams() < 4 {
            let Ok(id) = client.open_stream(T0) else {
                break;
            };
            client.send_headers(T0, id, REQUEST, false).unwrap();
            client.send_data(T0, id, &[3; 500], true).unwrap();
        }
        client.handle_input(T0, &peer.frame());
        events(&mut client);
        drain(&mut client);
        assert!(client.buffered_bytes() < 1 << 20);
        if client.is_closed() {
            return;
        }
    }
}

/// Prints the seed when a fuzz run panics.
struct SeedGuard(u64);

impl Drop for SeedGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "failing seed: {} (rerun with H2_FUZZ_SEED={}; H2_FUZZ_RUNS=n runs more)",
                self.0, self.0
            );
        }
    }
}

#[test]
fn random_and_mutated_input_never_panics_and_memory_stays_bounded() {
    let env = |name| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let (base, runs) = match env("H2_FUZZ_SEED") {
        Some(seed) => (seed, 1),
        None => (0x5eed_0002, env("H2_FUZZ_RUNS").unwrap_or(5000)),
    };
    let mut rounds = 0;
    for seed in base..base + runs {
        let _guard = SeedGuard(seed);
        rounds += fuzz_one(seed);
        fuzz_client_one(seed);
    }
    // The client is well-behaved enough to get deep into most connections.
    assert!(
        rounds / runs as usize >= 20,
        "mean rounds {}",
        rounds / runs as usize
    );
}
