//! Frame codec tests, one behaviour each (RFC 9113 §4, §6).

use super::*;
use ErrorCode as E;

const MAX: u32 = DEFAULT_MAX_FRAME_SIZE;

fn raw(kind: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    put_header(&mut v, payload.len(), Kind::from(kind), flags, stream_id);
    v.extend_from_slice(payload);
    v
}

fn enc(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut v = Vec::new();
    f(&mut v);
    v
}

/// Decodes exactly one frame that must fill `buf`.
fn one(buf: &[u8]) -> Frame<'_> {
    let (frame, n) = decode(buf, MAX).unwrap().unwrap();
    assert_eq!(n, buf.len());
    frame
}

/// Decodes back-to-back frames: `(kind, flags, length)` of each, plus
/// the concatenated DATA/HEADERS/CONTINUATION bodies.
fn frames(mut buf: &[u8]) -> (Vec<(u8, u8, u32)>, Vec<u8>) {
    let (mut shape, mut joined) = (Vec::new(), Vec::new());
    while let Some(h) = FrameHeader::parse(buf) {
        shape.push((u8::from(h.kind), h.flags, h.length));
        match decode(buf, MAX).unwrap().unwrap().0 {
            Frame::Data { data: b, .. }
            | Frame::Headers { fragment: b, .. }
            | Frame::Continuation { fragment: b, .. } => joined.extend_from_slice(b),
            _ => {}
        }
        buf = &buf[h.frame_len()..];
    }
    (shape, joined)
}

/// Collapses a decode error to `(stream, code)`; stream 0 means a
/// connection error, since stream errors never name stream 0.
fn rejection(buf: &[u8]) -> (u32, ErrorCode) {
    match decode(buf, MAX) {
        Err(H2Error::Connection { code, .. }) => (0, code),
        Err(H2Error::Stream {
            stream_id, code, ..
        }) => (stream_id, code),
        other => panic!("expected an error, got {other:?}"),
    }
}

/// One test per case: `name: wire bytes => (stream or 0, code)`.
macro_rules! rejects {
    ($($name:ident: $buf:expr => $want:expr;)*) => {$(
        #[test]
        fn $name() {
            assert_eq!(rejection(&$buf), $want);
        }
    )*};
}

/// One test per case: `name: wire bytes => the single decoded frame`.
macro_rules! decodes {
    ($($name:ident: $buf:expr => $want:expr;)*) => {$(
        #[test]
        fn $name() {
            assert_eq!(one(&$buf), $want);
        }
    )*};
}

rejects! {
    pad_length_equal_to_payload_length_is_protocol_error:
        raw(TYPE_DATA, FLAG_PADDED, 1, b"\x03ab") => (0, E::PROTOCOL_ERROR);
    padded_frame_without_pad_length_octet_is_frame_size_error:
        raw(TYPE_DATA, FLAG_PADDED, 1, b"") => (0, E::FRAME_SIZE_ERROR);
    headers_padding_reaching_into_priority_fields_is_protocol_error:
        raw(TYPE_HEADERS, FLAG_PADDED | FLAG_PRIORITY, 5, b"\x01\0\0\0\x03\x0f")
        => (0, E::PROTOCOL_ERROR);
    headers_priority_flag_without_five_octets_is_frame_size_error:
        raw(TYPE_HEADERS, FLAG_PRIORITY, 5, b"\0\0\0") => (0, E::FRAME_SIZE_ERROR);
    headers_self_dependency_is_connection_error_to_keep_hpack_in_sync:
        raw(TYPE_HEADERS, FLAG_PRIORITY, 5, b"\0\0\0\x05\x0fblock") => (0, E::PROTOCOL_ERROR);
    priority_wrong_length_is_stream_frame_size_error:
        raw(TYPE_PRIORITY, 0, 7, b"\0\0\0\x01") => (7, E::FRAME_SIZE_ERROR);
    priority_self_dependency_is_stream_protocol_error:
        raw(TYPE_PRIORITY, 0, 7, b"\x80\0\0\x07\0") => (7, E::PROTOCOL_ERROR);
    rst_stream_wrong_length_is_connection_frame_size_error:
        raw(TYPE_RST_STREAM, 0, 1, &[0; 5]) => (0, E::FRAME_SIZE_ERROR);
    data_on_stream_zero_is_protocol_error:
        raw(TYPE_DATA, 0, 0, b"x") => (0, E::PROTOCOL_ERROR);
    headers_on_stream_zero_is_protocol_error:
        raw(TYPE_HEADERS, FLAG_END_HEADERS, 0, b"x") => (0, E::PROTOCOL_ERROR);
    priority_on_stream_zero_is_protocol_error:
        raw(TYPE_PRIORITY, 0, 0, b"\0\0\0\x01\0") => (0, E::PROTOCOL_ERROR);
    rst_stream_on_stream_zero_is_protocol_error:
        raw(TYPE_RST_STREAM, 0, 0, &[0; 4]) => (0, E::PROTOCOL_ERROR);
    push_promise_on_stream_zero_is_protocol_error:
        raw(TYPE_PUSH_PROMISE, 0, 0, b"\0\0\0\x02") => (0, E::PROTOCOL_ERROR);
    continuation_on_stream_zero_is_protocol_error:
        raw(TYPE_CONTINUATION, 0, 0, b"x") => (0, E::PROTOCOL_ERROR);
    settings_on_a_stream_is_protocol_error:
        raw(TYPE_SETTINGS, 0, 1, b"") => (0, E::PROTOCOL_ERROR);
    ping_on_a_stream_is_protocol_error:
        raw(TYPE_PING, 0, 1, &[0; 8]) => (0, E::PROTOCOL_ERROR);
    goaway_on_a_stream_is_protocol_error:
        raw(TYPE_GOAWAY, 0, 1, &[0; 8]) => (0, E::PROTOCOL_ERROR);
    settings_length_not_multiple_of_six_is_frame_size_error:
        raw(TYPE_SETTINGS, 0, 0, &[0; 7]) => (0, E::FRAME_SIZE_ERROR);
    settings_ack_with_payload_is_frame_size_error:
        raw(TYPE_SETTINGS, FLAG_ACK, 0, &[0; 6]) => (0, E::FRAME_SIZE_ERROR);
    settings_enable_push_above_one_is_protocol_error:
        enc(|b| encode_settings(b, &[(SETTINGS_ENABLE_PUSH, 2)])) => (0, E::PROTOCOL_ERROR);
    settings_initial_window_size_above_max_is_flow_control_error:
        enc(|b| encode_settings(b, &[(SETTINGS_INITIAL_WINDOW_SIZE, MAX_WINDOW_SIZE + 1)]))
        => (0, E::FLOW_CONTROL_ERROR);
    settings_max_frame_size_below_16384_is_protocol_error:
        enc(|b| encode_settings(b, &[(SETTINGS_MAX_FRAME_SIZE, MAX - 1)]))
        => (0, E::PROTOCOL_ERROR);
    settings_max_frame_size_above_2_pow_24_minus_1_is_protocol_error:
        enc(|b| encode_settings(b, &[(SETTINGS_MAX_FRAME_SIZE, MAX_ALLOWED_FRAME_SIZE + 1)]))
        => (0, E::PROTOCOL_ERROR);
    ping_wrong_length_is_frame_size_error:
        raw(TYPE_PING, 0, 0, &[0; 9]) => (0, E::FRAME_SIZE_ERROR);
    goaway_shorter_than_eight_is_frame_size_error:
        raw(TYPE_GOAWAY, 0, 0, &[0; 7]) => (0, E::FRAME_SIZE_ERROR);
    push_promise_without_promised_id_is_frame_size_error:
        raw(TYPE_PUSH_PROMISE, 0, 1, b"\0\0\0") => (0, E::FRAME_SIZE_ERROR);
    window_update_zero_increment_on_stream_is_stream_error:
        raw(TYPE_WINDOW_UPDATE, 0, 3, b"\x80\0\0\0") => (3, E::PROTOCOL_ERROR);
    window_update_zero_increment_on_connection_is_connection_error:
        raw(TYPE_WINDOW_UPDATE, 0, 0, &[0; 4]) => (0, E::PROTOCOL_ERROR);
    window_update_wrong_length_is_frame_size_error:
        raw(TYPE_WINDOW_UPDATE, 0, 1, &[0, 0, 1]) => (0, E::FRAME_SIZE_ERROR);
}

decodes! {
    padded_data_strips_padding_and_counts_it_in_flow_len:
        raw(TYPE_DATA, FLAG_PADDED | FLAG_END_STREAM, 3, b"\x02abc\0\0")
        => Frame::Data { stream_id: 3, end_stream: true, data: b"abc", flow_len: 6 };
    padded_headers_with_priority_strip_padding:
        raw(TYPE_HEADERS, FLAG_PADDED | FLAG_PRIORITY | FLAG_END_HEADERS, 5,
            b"\x01\x80\0\0\x03\x0fhpack\0")
        => Frame::Headers { stream_id: 5, end_stream: false, end_headers: true,
            priority: Some(Priority { dependency: 3, exclusive: true, weight: 15 }),
            fragment: b"hpack" };
    priority_frame_decodes_dependency_and_weight:
        raw(TYPE_PRIORITY, 0, 7, b"\0\0\0\x01\xff") => Frame::Priority { stream_id: 7,
            priority: Priority { dependency: 1, exclusive: false, weight: 255 } };
    padded_push_promise_decodes_promised_id_and_fragment:
        raw(TYPE_PUSH_PROMISE, FLAG_PADDED, 1, b"\x02\x80\0\0\x04blk\0\0")
        => Frame::PushPromise { stream_id: 1, promised_id: 4, end_headers: false,
            fragment: b"blk" };
    continuation_decodes_fragment_and_end_headers:
        raw(TYPE_CONTINUATION, FLAG_END_HEADERS, 1, b"rest")
        => Frame::Continuation { stream_id: 1, end_headers: true, fragment: b"rest" };
    window_update_ignores_reserved_bit_of_increment:
        raw(TYPE_WINDOW_UPDATE, 0, 3, b"\x80\0\0\x05")
        => Frame::WindowUpdate { stream_id: 3, increment: 5 };
    unknown_frame_type_is_consumed_whole:
        raw(0xfa, 0xff, 0, b"whatever") => Frame::Unknown { kind: 0xfa, stream_id: 0 };
    settings_ack_round_trip:
        enc(encode_settings_ack) => Frame::Settings { ack: true, params: SettingsIter { rest: b"" } };
    ping_round_trip:
        enc(|b| encode_ping(b, true, *b"01234567")) => Frame::Ping { ack: true, data: *b"01234567" };
    goaway_round_trip:
        enc(|b| encode_goaway(b, 41, E::ENHANCE_YOUR_CALM, b"calm"))
        => Frame::GoAway { last_stream_id: 41, code: E::ENHANCE_YOUR_CALM, debug: b"calm" };
    rst_stream_round_trip:
        enc(|b| encode_rst_stream(b, 9, ErrorCode(0xbeef)))
        => Frame::RstStream { stream_id: 9, code: ErrorCode(0xbeef) };
    window_update_round_trip:
        enc(|b| encode_window_update(b, 0, MAX_WINDOW_SIZE))
        => Frame::WindowUpdate { stream_id: 0, increment: MAX_WINDOW_SIZE };
    encode_data_empty_with_end_stream_is_one_empty_frame:
        enc(|b| encode_data(b, 5, b"", true, MAX))
        => Frame::Data { stream_id: 5, end_stream: true, data: b"", flow_len: 0 };
    encode_headers_small_block_is_one_frame_with_end_headers:
        enc(|b| encode_headers(b, 3, b"block", true, MAX)) => Frame::Headers { stream_id: 3,
            end_stream: true, end_headers: true, priority: None, fragment: b"block" };
}

#[test]
fn frame_header_parse_masks_reserved_bit() {
    let h = FrameHeader::parse(&[0, 1, 2, 7, 5, 0x80, 0, 0, 3]).unwrap();
    assert_eq!(
        (h.length, h.kind, h.flags, h.stream_id),
        (258, Kind::GoAway, 5, 3)
    );
}

#[test]
fn kind_round_trips_every_type_octet_and_names_only_unknown_ones_unknown() {
    for octet in 0..=255u8 {
        let kind = Kind::from(octet);
        assert_eq!(u8::from(kind), octet);
        assert_eq!(matches!(kind, Kind::Unknown(_)), octet > TYPE_CONTINUATION);
    }
}

#[test]
fn frame_header_encode_round_trips() {
    let wire = [0xff, 0xff, 0xff, 0xfe, 0xff, 0x7f, 0xff, 0xff, 0xff];
    let h = FrameHeader::parse(&wire).unwrap();
    assert_eq!(
        (enc(|b| h.encode(b)), h.frame_len()),
        (wire.to_vec(), 9 + (1 << 24) - 1)
    );
}

#[test]
fn every_proper_prefix_of_a_frame_is_incomplete() {
    let buf = raw(TYPE_DATA, 0, 1, b"hello");
    for end in 0..buf.len() {
        assert_eq!(decode(&buf[..end], MAX), Ok(None), "prefix {end}");
    }
}

#[test]
fn oversized_frame_is_connection_frame_size_error_before_payload_arrives() {
    let header_only = &raw(TYPE_DATA, 0, 1, &[0; MAX as usize + 1])[..FRAME_HEADER_LEN];
    assert_eq!(rejection(header_only), (0, E::FRAME_SIZE_ERROR));
    assert_eq!(decode(header_only, MAX + 1), Ok(None));
}

#[test]
fn decode_consumes_exactly_one_frame_from_a_batch() {
    let mut buf = enc(|b| encode_ping(b, false, [7; 8]));
    encode_settings_ack(&mut buf);
    let (frame, n) = decode(&buf, MAX).unwrap().unwrap();
    assert_eq!((frame, n), (one(&buf[..17]), 17));
}

#[test]
fn stream_error_frame_is_skippable_by_header_length() {
    let mut buf = raw(TYPE_PRIORITY, 0, 7, b"\0\0\0");
    encode_settings_ack(&mut buf);
    assert_eq!(rejection(&buf), (7, E::FRAME_SIZE_ERROR));
    let skip = FrameHeader::parse(&buf).unwrap().frame_len();
    assert_eq!(buf[skip..], enc(encode_settings_ack));
}

/// The pairs of the single SETTINGS frame in `buf`.
fn settings_params(buf: &[u8]) -> Vec<(u16, u32)> {
    match one(buf) {
        Frame::Settings { ack: false, params } => params.collect(),
        other => panic!("not SETTINGS: {other:?}"),
    }
}

#[test]
fn settings_round_trip() {
    let params = [
        (1, 0),
        (2, 1),
        (3, 100),
        (4, MAX_WINDOW_SIZE),
        (5, 1 << 20),
        (6, 8192),
    ];
    assert_eq!(
        settings_params(&enc(|b| encode_settings(b, &params))),
        params
    );
}

#[test]
fn settings_unknown_id_is_passed_through_unvalidated() {
    let buf = enc(|b| encode_settings(b, &[(0xabcd, u32::MAX)]));
    assert_eq!(settings_params(&buf), [(0xabcd, u32::MAX)]);
}

#[test]
fn goaway_debug_is_truncated_to_fit_minimum_max_frame_size() {
    let buf = enc(|b| encode_goaway(b, 1, E::NO_ERROR, &[b'x'; 20_000]));
    assert_eq!(frames(&buf).0, [(TYPE_GOAWAY, 0, MAX)]);
}

#[test]
fn encode_data_splits_by_max_frame_size_with_end_stream_on_last() {
    let data: Vec<u8> = (0..40_000u32).map(|i| i as u8).collect();
    let (shape, joined) = frames(&enc(|b| encode_data(b, 1, &data, true, MAX)));
    let want = [(0, 0, MAX), (0, 0, MAX), (0, FLAG_END_STREAM, 7232)];
    assert_eq!((shape, joined), (want.to_vec(), data));
}

#[test]
fn encode_headers_splits_large_block_into_continuations() {
    let block: Vec<u8> = (0..40_000u32).map(|i| (i * 7) as u8).collect();
    let (shape, joined) = frames(&enc(|b| encode_headers(b, 3, &block, true, MAX)));
    let want = [
        (TYPE_HEADERS, FLAG_END_STREAM, MAX),
        (TYPE_CONTINUATION, 0, MAX),
        (TYPE_CONTINUATION, FLAG_END_HEADERS, 7232),
    ];
    assert_eq!((shape, joined), (want.to_vec(), block));
}

#[test]
fn encoders_clamp_max_frame_size_below_protocol_minimum() {
    let buf = enc(|b| encode_data(b, 1, &[0; 20_000], false, 0));
    assert_eq!(frames(&buf).0, [(TYPE_DATA, 0, MAX), (TYPE_DATA, 0, 3616)]);
}

use crate::test_support::Rng;

/// Checks the decode contract beyond "no panic"; returns the outcome
/// (0 = contract broken).
fn check_contract(buf: &[u8], max: u32) -> usize {
    let header = FrameHeader::parse(buf);
    let complete = header.is_some_and(|h| h.frame_len() <= buf.len());
    match decode(buf, max) {
        Ok(Some((_, n))) => usize::from(Some(n) == header.map(|h| h.frame_len())) * 4,
        Ok(None) => usize::from(!complete),
        Err(H2Error::Stream { stream_id, .. }) => usize::from(stream_id != 0 && complete) * 2,
        Err(H2Error::Connection { .. }) => usize::from(header.is_some()) * 3,
    }
}

#[test]
fn decode_never_panics_on_one_and_two_byte_inputs() {
    for a in 0..=255u8 {
        assert_eq!(decode(&[a], MAX), Ok(None));
        for b in 0..=255u8 {
            assert_eq!(decode(&[a, b], MAX), Ok(None));
        }
    }
}

#[test]
fn decode_never_panics_on_random_and_mutated_input() {
    let seeds = [
        enc(|b| encode_settings(b, &[(SETTINGS_MAX_FRAME_SIZE, 20_000), (9, 1)])),
        raw(TYPE_HEADERS, 0x2d, 5, b"\x01\0\0\0\x03\x0fhpack\0"),
        raw(TYPE_PUSH_PROMISE, FLAG_PADDED, 1, b"\x02\0\0\0\x04blk\0\0"),
        raw(TYPE_PRIORITY, 0, 7, b"\0\0\0\x01\xff"),
        raw(TYPE_DATA, FLAG_PADDED, 3, b"\x02abc\0\0"),
        enc(|b| {
            encode_ping(b, false, [1; 8]);
            encode_goaway(b, 3, E::CANCEL, b"dbg");
            encode_rst_stream(b, 3, E::CANCEL);
            encode_window_update(b, 3, 10);
            encode_headers(b, 3, &[9; 40], false, MAX);
        }),
    ];
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let mut outcomes = [0u32; 5];
    for i in 0..300_000 {
        let mut buf = if i % 2 == 0 {
            // A valid frame with a few bytes overwritten, then cut or not.
            let mut s = seeds[rng.below(seeds.len())].clone();
            for _ in 0..=rng.below(4) {
                let at = rng.below(s.len());
                s[at] = rng.next() as u8;
            }
            s.truncate(rng.below(s.len() + 8));
            s
        } else {
            // A plausible header (small length, low type, stream 0..=3)
            // over random payload bytes, give or take a few.
            let len = rng.below(40);
            let kind = rng.below(12) as u8;
            let mut s = raw(kind, rng.next() as u8, rng.below(4) as u32, &[]);
            s[..3].copy_from_slice(&(len as u32).to_be_bytes()[1..]);
            s.extend((0..len + rng.below(4)).map(|_| rng.next() as u8));
            s
        };
        let max = [MAX, 8, rng.next() as u32][rng.below(3)];
        outcomes[check_contract(&buf, max)] += 1;
        // Also drain it frame by frame, as the connection would.
        while let Ok(Some((_, n))) = decode(&buf, max) {
            buf.drain(..n);
        }
    }
    assert_eq!(outcomes[0], 0, "decode contract broken");
    assert!(outcomes[1..].iter().all(|&n| n > 1000), "{outcomes:?}");
}
