//! Stream limits (RFC 9113 §5.1.2) and the handshake and idle deadlines, in virtual time.

use super::*;

#[test]
fn streams_over_max_concurrent_streams_are_refused() {
    let mut server = server_with(Config {
        max_concurrent_streams: 2,
        ..Config::default()
    });
    let mut encoder = Encoder::new();
    let mut input = Vec::new();
    for id in [1, 3, 5] {
        let block = block(&mut encoder, REQUEST);
        frame::encode_headers(&mut input, id, &block, true, 16_384);
    }
    server.handle_input(T0, &input);
    assert_eq!(
        resets(&drain(&mut server)),
        [(5, ErrorCode::REFUSED_STREAM)]
    );
    let opened: Vec<u32> = events(&mut server)
        .iter()
        .filter_map(|e| match e {
            Event::Headers { stream, .. } => Some(*stream),
            _ => None,
        })
        .collect();
    assert_eq!(opened, [1, 3]);
}

#[test]
fn client_respects_peer_max_concurrent_streams() {
    let mut client = client_with_peer_settings(&[(frame::SETTINGS_MAX_CONCURRENT_STREAMS, 1)]);
    let id = client.open_stream(T0).unwrap();
    assert_eq!(client.open_stream(T0), Err(SendError::StreamLimit));
    client.reset_stream(T0, id, ErrorCode::CANCEL);
    assert_eq!(client.open_stream(T0), Ok(3));
}

#[test]
fn handshake_timeout_closes_a_client_sending_a_byte_a_minute() {
    let mut server = Connection::new(Role::Server, Config::default(), T0);
    drain(&mut server);
    let mut now = T0;
    for &byte in frame::PREFACE {
        now += Duration::from_secs(60);
        if let Some(deadline) = server.poll_timeout().filter(|&t| t <= now) {
            server.handle_timeout(deadline);
            break;
        }
        server.handle_input(now, &[byte]);
    }
    assert_eq!(
        goaway_code(&drain(&mut server)),
        Some(ErrorCode::PROTOCOL_ERROR)
    );
    assert!(server.is_closed());
    assert_eq!(server.poll_timeout(), None);
}

#[test]
fn handshake_deadline_is_cleared_once_settings_are_exchanged() {
    let p = Pair::new();
    assert_eq!(
        (p.client.poll_timeout(), p.server.poll_timeout()),
        (None, None)
    );
}

#[test]
fn spurious_timeouts_are_no_ops() {
    let mut server = Connection::new(Role::Server, Config::default(), T0);
    drain(&mut server);
    server.handle_timeout(T0 + Duration::from_secs(1));
    assert!(!server.is_closed() && server.pending_output().is_empty());
}

fn idle_config() -> Config {
    Config {
        idle_timeout: Some(Duration::from_secs(30)),
        ..Config::default()
    }
}

#[test]
fn idle_timeout_sends_goaway_and_closes() {
    let mut p = Pair::with(Config::default(), idle_config(), false);
    let deadline = p.server.poll_timeout().unwrap();
    assert_eq!(deadline, T0 + Duration::from_secs(30));
    p.server.handle_timeout(deadline);
    assert_eq!(
        goaway_code(&drain(&mut p.server)),
        Some(ErrorCode::NO_ERROR)
    );
    assert!(p.server.is_closed());
}

#[test]
fn idle_clock_starts_when_an_application_call_ends_the_last_stream() {
    let mut p = Pair::with(Config::default(), idle_config(), false);
    let id = p.request(b"");
    p.now += Duration::from_secs(60);
    // The response ends the last stream; the call says when.
    p.respond(id, b"");
    let deadline = p.server.poll_timeout().unwrap();
    assert_eq!(deadline, p.now + Duration::from_secs(30));
    p.server.handle_timeout(p.now + Duration::from_secs(29));
    assert!(!p.server.is_closed());
    p.server.handle_timeout(deadline);
    assert!(p.server.is_closed());
}
