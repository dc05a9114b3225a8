//! Hostile peers (issue 13): budgets and deadlines that cut a connection off, in virtual time.

use std::time::Instant;

use backoffd::http2::{AbuseBudgets, Cutoff, Rate};

use super::*;

/// The GOAWAY in `out`: its last stream id and code.
fn goaway(out: &[u8]) -> Option<(u32, ErrorCode)> {
    frames(out).into_iter().find_map(|f| match f {
        Frame::GoAway {
            last_stream_id,
            code,
            ..
        } => Some((last_stream_id, code)),
        _ => None,
    })
}

/// Asserts the connection was cut off for `cutoff` with GOAWAY(ENHANCE_YOUR_CALM) naming
/// `last_stream_id`.
fn assert_cut_off(conn: &mut Connection, cutoff: Cutoff, last_stream_id: u32) {
    let out = drain(conn);
    assert_eq!(conn.abuse().cutoff, Some(cutoff));
    assert_eq!(
        goaway(&out),
        Some((last_stream_id, ErrorCode::ENHANCE_YOUR_CALM))
    );
    assert!(conn.is_closed());
}

fn assert_alive(conn: &Connection) {
    assert_eq!(conn.abuse().cutoff, None);
    assert!(!conn.is_closed(), "{:?}", conn.error());
}

/// Appends one flood's frames.
type Flood = dyn Fn(&mut Vec<u8>);

fn at(ms: u64) -> Timestamp {
    T0 + Duration::from_millis(ms)
}

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
}

// Row 8: Rapid Reset (CVE-2023-44487).

#[test]
fn rapid_reset_is_cut_off_and_no_reset_stream_reaches_the_application() {
    let mut server = server();
    let mut encoder = Encoder::new();
    let mut input = Vec::new();
    for id in (1..20_000).step_by(2) {
        let block = block(&mut encoder, REQUEST);
        frame::encode_headers(&mut input, id, &block, true, 16_384);
        frame::encode_rst_stream(&mut input, id, ErrorCode::CANCEL);
    }
    server.handle_input(T0, &input);
    assert_eq!(events(&mut server), []);
    // 20 are allowed (hyperium/h2's default); the 21st, stream 41, is cut off.
    assert_eq!(server.abuse().reset_before_accept, 21);
    assert_cut_off(&mut server, Cutoff::PendingAcceptResets, 41);
    assert!(server.buffered_bytes() < 1024);
}

#[test]
fn a_client_cancelling_calls_it_sent_is_not_rapid_reset() {
    let mut server = server();
    let mut encoder = Encoder::new();
    // 2,000 calls over 40 s, five per 100 ms, each cancelled after the server took it;
    // and two per batch cancelled before (a deadline of a millisecond), within the budget.
    let mut id = 1;
    for batch in 0..400 {
        let mut input = Vec::new();
        let now = at(100 * batch);
        for _ in 0..5 {
            input.extend(request_frame(id, REQUEST, true));
            id += 2;
        }
        let block = block(&mut encoder, REQUEST);
        for early in [id, id + 2] {
            frame::encode_headers(&mut input, early, &block, true, 16_384);
            frame::encode_rst_stream(&mut input, early, ErrorCode::CANCEL);
        }
        id += 4;
        server.handle_input(now, &input);
        let taken: Vec<u32> = (events(&mut server).into_iter())
            .filter_map(|e| match e {
                Event::Headers { stream, .. } => Some(stream),
                _ => None,
            })
            .collect();
        assert_eq!(taken.len(), 5);
        let mut cancels = Vec::new();
        for stream in taken {
            frame::encode_rst_stream(&mut cancels, stream, ErrorCode::CANCEL);
        }
        server.handle_input(now, &cancels);
        events(&mut server);
        drain_at(&mut server, now);
        assert_alive(&server);
    }
    assert_eq!(server.abuse().reset_before_accept, 800);
}

#[test]
fn cancelling_taken_streams_faster_than_the_reset_rate_is_cut_off() {
    let config = Config {
        budgets: AbuseBudgets {
            peer_reset_rate: Rate {
                burst: 10,
                per_second: 5,
            },
            ..AbuseBudgets::default()
        },
        ..Config::default()
    };
    let mut server = server_with(config);
    let mut last = 0;
    for (i, id) in (1..200).step_by(2).enumerate() {
        let now = at(50 * i as u64); // 20 per second
        server.handle_input(now, &request_frame(id, REQUEST, true));
        events(&mut server);
        let mut rst = Vec::new();
        frame::encode_rst_stream(&mut rst, id, ErrorCode::CANCEL);
        server.handle_input(now, &rst);
        events(&mut server);
        last = id;
        if server.is_closed() {
            break;
        }
    }
    // 10 at once, then 5 a second against 20 a second: about the 14th reset.
    assert!((25..=31).contains(&last), "{last}");
    assert_cut_off(&mut server, Cutoff::PeerResets, last);
}

#[test]
fn too_many_stream_errors_of_the_peers_making_are_cut_off() {
    let mut server = server_with(Config {
        budgets: AbuseBudgets {
            max_local_error_resets: 50,
            ..AbuseBudgets::default()
        },
        ..Config::default()
    });
    let bad: Fields = &[
        (b":method", b"POST"),
        (b":scheme", b"http"),
        (b":path", b"/x/y"),
        (b"Upper", b"case"),
    ];
    let mut input = Vec::new();
    for id in (1..=101).step_by(2) {
        input.extend(request_frame(id, bad, true));
    }
    server.handle_input(T0, &input);
    assert_eq!(server.abuse().local_error_resets, 51);
    assert_cut_off(&mut server, Cutoff::LocalErrorResets, 101);
}

// Row 9: SETTINGS amplification.

#[test]
fn settings_flood_is_cut_off() {
    let mut server = server_with_open_streams(Config::default(), 100);
    let storm = window_size_storm();
    let mut input = Vec::new();
    for _ in 0..300 {
        input.extend_from_slice(&storm);
    }
    server.handle_input(T0, &input);
    let out = drain(&mut server);
    let acks = frames(&out)
        .iter()
        .filter(|f| matches!(f, Frame::Settings { ack: true, .. }))
        .count();
    // 32 at once (the first SETTINGS of the handshake took one).
    assert_eq!(acks, 31);
    assert_eq!(server.abuse().cutoff, Some(Cutoff::SettingsFlood));
    assert_eq!(goaway(&out), Some((199, ErrorCode::ENHANCE_YOUR_CALM)));
}

#[test]
fn a_settings_frame_every_200_ms_is_fine() {
    let mut server = server_with_open_streams(Config::default(), 10);
    for i in 0..500 {
        let mut input = Vec::new();
        let value = 65_535 + (i % 7);
        frame::encode_settings(&mut input, &[(frame::SETTINGS_INITIAL_WINDOW_SIZE, value)]);
        server.handle_input(at(200 * u64::from(i)), &input);
        drain(&mut server);
    }
    assert_alive(&server);
}

#[test]
fn only_the_last_initial_window_size_of_a_frame_moves_the_windows() {
    let mut client = client_with_peer_settings(&[(frame::SETTINGS_INITIAL_WINDOW_SIZE, 10)]);
    let id = client.open_stream(T0).unwrap();
    client.send_headers(T0, id, REQUEST, false).unwrap();
    client.send_data(T0, id, &[7; 100], true).unwrap();
    assert_eq!(data_sent(&drain(&mut client)), (10, false));
    let mut input = Vec::new();
    let values = [1_000, 0, 3, 60];
    let entries = values.map(|v| (frame::SETTINGS_INITIAL_WINDOW_SIZE, v));
    frame::encode_settings(&mut input, &entries);
    client.handle_input(T0, &input);
    // As if applied one by one: the window is 60 - 10 = 50 more than it was.
    assert_eq!(data_sent(&drain(&mut client)), (50, false));
}

#[test]
fn an_initial_window_size_overflowing_midway_is_an_error_even_if_the_last_is_fine() {
    let mut client = client_with_peer_settings(&[]);
    let id = client.open_stream(T0).unwrap();
    client.send_headers(T0, id, REQUEST, false).unwrap();
    let mut input = Vec::new();
    frame::encode_window_update(&mut input, id, frame::MAX_WINDOW_SIZE - 65_535);
    let entries = [65_536, 0].map(|v| (frame::SETTINGS_INITIAL_WINDOW_SIZE, v));
    frame::encode_settings(&mut input, &entries);
    client.handle_input(T0, &input);
    assert_eq!(
        goaway_code(&drain(&mut client)),
        Some(ErrorCode::FLOW_CONTROL_ERROR)
    );
    // The same values the other way round never overflow.
    let mut client = client_with_peer_settings(&[]);
    let id = client.open_stream(T0).unwrap();
    client.send_headers(T0, id, REQUEST, false).unwrap();
    let mut input = Vec::new();
    frame::encode_window_update(&mut input, id, frame::MAX_WINDOW_SIZE - 65_535);
    let entries = [0, 65_535].map(|v| (frame::SETTINGS_INITIAL_WINDOW_SIZE, v));
    frame::encode_settings(&mut input, &entries);
    client.handle_input(T0, &input);
    assert_alive(&client);
}

// Row 10: empty frames, control frames, header blocks that never end, unread output.

#[test]
fn empty_frame_floods_are_cut_off() {
    let empty_continuations = |input: &mut Vec<u8>| {
        input.extend(raw(frame::TYPE_HEADERS, 0, 1, &[]));
        for _ in 0..1_000_000 {
            input.extend(raw(frame::TYPE_CONTINUATION, 0, 1, &[]));
        }
    };
    let empty_data = |input: &mut Vec<u8>| {
        input.extend(request_frame(1, REQUEST, false));
        for _ in 0..100_000 {
            frame::encode_data(input, 1, &[], false, 16_384);
        }
    };
    let empty_headers = |input: &mut Vec<u8>| {
        for _ in 0..100_000 {
            input.extend(raw(frame::TYPE_HEADERS, 0, 1, &[]));
            input.extend(raw(
                frame::TYPE_CONTINUATION,
                frame::FLAG_END_HEADERS,
                1,
                &[],
            ));
        }
    };
    let floods: [&Flood; 3] = [&empty_continuations, &empty_data, &empty_headers];
    for (i, flood) in floods.iter().enumerate() {
        let mut server = server();
        let mut input = Vec::new();
        flood(&mut input);
        server.handle_input(T0, &input);
        assert_eq!(
            server.abuse().cutoff,
            Some(Cutoff::EmptyFrames),
            "flood {i}"
        );
        let (_, code) = goaway(&drain(&mut server)).unwrap();
        assert_eq!(code, ErrorCode::ENHANCE_YOUR_CALM, "flood {i}");
        assert!(server.buffered_bytes() < 1024, "flood {i}");
    }
}

#[test]
fn an_empty_fragment_that_ends_something_is_free() {
    let mut server = server();
    for id in (1..2_000).step_by(2) {
        let mut input = request_frame(id, REQUEST, false);
        frame::encode_data(&mut input, id, &[], true, 16_384);
        server.handle_input(T0, &input);
        events(&mut server);
        server.send_headers(T0, id, TRAILERS, true).unwrap();
        drain(&mut server);
    }
    assert_alive(&server);
}

#[test]
fn control_frame_floods_are_cut_off_although_the_peer_reads() {
    let ping = |input: &mut Vec<u8>| frame::encode_ping(input, false, [1; 8]);
    let priority =
        |input: &mut Vec<u8>| input.extend(raw(frame::TYPE_PRIORITY, 0, 1, &[0, 0, 0, 3, 7]));
    let idle_window = |input: &mut Vec<u8>| frame::encode_window_update(input, 0, 1);
    let unknown = |input: &mut Vec<u8>| input.extend(raw(0xfa, 0, 0, b"x"));
    let floods: [&Flood; 4] = [&ping, &priority, &idle_window, &unknown];
    for (i, flood) in floods.iter().enumerate() {
        let mut server = server();
        for round in 0..1_000 {
            let mut input = Vec::new();
            flood(&mut input);
            server.handle_input(at(round), &input);
            drain_at(&mut server, at(round));
            if server.is_closed() {
                break;
            }
        }
        assert_eq!(
            server.abuse().cutoff,
            Some(Cutoff::ControlFlood),
            "flood {i}"
        );
    }
}

#[test]
fn window_updates_and_pings_answering_our_data_are_fine_at_any_call_rate() {
    // grpcio on one connection: per call, a WINDOW_UPDATE for the (by then closed) stream
    // and one for the connection after our response, and a PING now and then.
    let mut server = server();
    for (i, id) in (1..20_000).step_by(2).enumerate() {
        let now = T0 + Duration::from_micros(100 * i as u64); // 10,000 calls a second
        server.handle_input(now, &request_frame(id, REQUEST, true));
        events(&mut server);
        server.send_headers(now, id, RESPONSE, false).unwrap();
        server.send_data(now, id, b"12345", false).unwrap();
        server.send_headers(now, id, TRAILERS, true).unwrap();
        drain_at(&mut server, now);
        let mut input = Vec::new();
        frame::encode_window_update(&mut input, id, 5);
        frame::encode_window_update(&mut input, 0, 5);
        frame::encode_ping(&mut input, false, [3; 8]);
        server.handle_input(now, &input);
        drain_at(&mut server, now);
        assert_alive(&server);
    }
}

#[test]
fn a_ping_a_second_is_fine() {
    let mut server = server();
    for s in 0..1_000 {
        let mut input = Vec::new();
        frame::encode_ping(&mut input, false, [2; 8]);
        frame::encode_window_update(&mut input, 0, 1000);
        let now = T0 + Duration::from_secs(s);
        server.handle_input(now, &input);
        drain_at(&mut server, now);
    }
    assert_alive(&server);
}

#[test]
fn a_header_block_must_end_within_its_deadline() {
    let mut server = server();
    let block = block(&mut Encoder::new(), REQUEST);
    server.handle_input(T0, &raw(frame::TYPE_HEADERS, 0, 1, &block[..4]));
    let deadline = T0 + Config::default().header_block_timeout;
    assert_eq!(server.poll_timeout(), Some(deadline));
    let mut now = T0;
    for &byte in &block[4..] {
        now += Duration::from_secs(1);
        if server.poll_timeout().is_some_and(|t| t <= now) {
            server.handle_timeout(now);
            break;
        }
        server.handle_input(now, &raw(frame::TYPE_CONTINUATION, 0, 1, &[byte]));
    }
    assert_cut_off(&mut server, Cutoff::HeaderBlockTimeout, 0);
}

#[test]
fn a_header_block_finished_in_time_clears_its_deadline() {
    let mut server = server();
    let block = block(&mut Encoder::new(), REQUEST);
    server.handle_input(T0, &raw(frame::TYPE_HEADERS, 0, 1, &block[..4]));
    let end = raw(
        frame::TYPE_CONTINUATION,
        frame::FLAG_END_HEADERS,
        1,
        &block[4..],
    );
    server.handle_input(at(9_999), &end);
    assert_eq!(events(&mut server), [headers(1, REQUEST, false)]);
    assert_eq!(server.poll_timeout(), None);
}

/// A server that answers PINGs for a peer that does not read: `max_buffered_output` 4096,
/// no control budget to speak of.
fn server_of_a_peer_not_reading() -> Connection {
    server_with(Config {
        max_buffered_output: 4096,
        budgets: AbuseBudgets {
            control_frame_rate: Rate {
                burst: u32::MAX,
                per_second: u32::MAX,
            },
            ..AbuseBudgets::default()
        },
        ..Config::default()
    })
}

fn pings(n: usize) -> Vec<u8> {
    let mut input = Vec::new();
    for _ in 0..n {
        frame::encode_ping(&mut input, false, [1; 8]);
    }
    input
}

#[test]
fn output_one_input_batch_makes_is_not_judged_before_the_driver_tried_to_write_it() {
    let mut server = server_of_a_peer_not_reading();
    // 6.8 KiB of PING ACKs from one batch: more than 4096, less than twice that.
    server.handle_input(T0, &pings(400));
    assert_alive(&server);
    assert_eq!(server.pending_output().len(), 400 * 17);
}

#[test]
fn output_the_driver_could_not_write_is_judged_at_the_next_input() {
    let mut server = server_of_a_peer_not_reading();
    server.handle_input(T0, &pings(300));
    // The driver tried and the socket took six ACKs (a full buffer takes nothing: 0).
    server.consume_output(T0, 6 * 17);
    server.consume_output(T0, 0);
    server.handle_input(T0, &pings(1));
    assert_cut_off(&mut server, Cutoff::UnreadOutput, 0);
}

#[test]
fn output_made_at_an_earlier_instant_was_offered_to_the_driver() {
    let mut server = server_of_a_peer_not_reading();
    server.handle_input(T0, &pings(300));
    // The driver flushed (the socket took nothing) before its clock moved on.
    server.handle_input(at(1), &pings(1));
    assert_cut_off(&mut server, Cutoff::UnreadOutput, 0);
}

#[test]
fn a_peer_that_reads_is_never_judged_unread() {
    let mut server = server_of_a_peer_not_reading();
    for ms in 0..100 {
        server.handle_input(at(ms), &pings(400));
        drain_at(&mut server, at(ms));
    }
    assert_alive(&server);
}

#[test]
fn twice_max_buffered_output_is_the_memory_bound_whatever_was_offered() {
    let mut server = server_of_a_peer_not_reading();
    server.handle_input(T0, &pings(10_000));
    assert!(server.pending_output().len() <= 2 * 4096 + 100);
    assert_cut_off(&mut server, Cutoff::UnreadOutput, 0);
}

// Row 2: idle connections, with the reconnect server's idle timeout.

fn server_with_idle_timeout() -> Connection {
    server_with(Config {
        idle_timeout: Some(Duration::from_secs(600)),
        ..Config::default()
    })
}

#[test]
fn an_idle_connection_is_closed_after_the_idle_timeout() {
    let mut server = server_with_idle_timeout();
    let deadline = server.poll_timeout().unwrap();
    assert_eq!(deadline, T0 + Duration::from_secs(600));
    server.handle_timeout(deadline);
    assert_eq!(goaway(&drain(&mut server)), Some((0, ErrorCode::NO_ERROR)));
    assert_eq!(server.abuse().cutoff, Some(Cutoff::IdleTimeout));
    assert!(server.is_closed());
}

#[test]
fn a_stream_waiting_for_its_answer_is_not_idle() {
    let mut server = server_with_idle_timeout();
    server.handle_input(T0, &request_frame(1, REQUEST, true));
    events(&mut server);
    // No idle deadline while the stream is open, however long.
    assert_eq!(server.poll_timeout(), None);
    let hour = T0 + Duration::from_secs(3600);
    server.handle_timeout(hour);
    assert_alive(&server);
    server.send_headers(hour, 1, RESPONSE, true).unwrap();
    assert_eq!(server.poll_timeout(), Some(hour + Duration::from_secs(600)));
}
