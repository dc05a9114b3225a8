//! The gRPC parsers on arbitrary peer input: no panics, and fragmenting never changes the result.

use backoffd::grpc::message::{encode_message, MessageDecoder};
use backoffd::grpc::status::{decode_message, encode_message as encode_grpc_message};
use backoffd::grpc::timeout::{format_timeout, parse_timeout};
use proptest::prelude::*;
use std::time::Duration;

/// Pushes `wire` cut at `cuts` and returns the messages and the first error.
fn decode_in_pieces(wire: &[u8], cuts: &[usize]) -> (Vec<Vec<u8>>, Option<String>) {
    let mut decoder = MessageDecoder::new(64, false);
    let mut points: Vec<usize> = cuts.iter().map(|c| c % (wire.len() + 1)).collect();
    points.push(0);
    points.push(wire.len());
    points.sort_unstable();
    let mut error = None;
    for piece in points.windows(2) {
        if let Err(status) = decoder.push(&wire[piece[0]..piece[1]]) {
            error.get_or_insert(status.to_string());
        }
    }
    let messages = std::iter::from_fn(|| decoder.pop())
        .map(|m| m.payload)
        .collect();
    (messages, error)
}

proptest! {
    #[test]
    fn message_decoder_result_is_independent_of_fragmentation(
        wire in prop::collection::vec(prop_oneof![Just(0u8), Just(1), any::<u8>()], 0..200),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        prop_assert_eq!(decode_in_pieces(&wire, &cuts), decode_in_pieces(&wire, &[]));
    }

    #[test]
    fn framed_messages_come_back_whole(
        messages in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..8),
        cuts in prop::collection::vec(any::<usize>(), 0..12),
    ) {
        let mut wire = Vec::new();
        for m in &messages {
            encode_message(&mut wire, m).unwrap();
        }
        prop_assert_eq!(decode_in_pieces(&wire, &cuts), (messages, None));
    }

    #[test]
    fn grpc_timeout_parser_never_panics(value in prop::collection::vec(any::<u8>(), 0..12)) {
        let _ = parse_timeout(&value);
    }

    #[test]
    fn grpc_timeout_round_trips_without_shortening(nanos in any::<u64>()) {
        let d = Duration::from_nanos(nanos);
        let parsed = parse_timeout(format_timeout(d).as_bytes()).unwrap();
        prop_assert!(parsed >= d);
    }

    #[test]
    fn grpc_message_decoding_never_panics(value in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = decode_message(&value);
    }

    #[test]
    fn grpc_message_encoding_is_header_safe_and_reversible(text in any::<String>()) {
        let encoded = encode_grpc_message(&text);
        prop_assert!(encoded.iter().all(|b| (0x20..=0x7e).contains(b)));
        prop_assert_eq!(decode_message(&encoded), text);
    }
}
