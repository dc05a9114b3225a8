//! RFC 7541 Appendix C examples, encoder/decoder round trips, robustness.

use super::table::entry_size;
use super::{Decoder, Encoder, Header, HpackError};

fn hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
    let nibble = |d: u8| (d as char).to_digit(16).unwrap() as u8;
    digits
        .chunks(2)
        .map(|p| nibble(p[0]) << 4 | nibble(p[1]))
        .collect()
}

/// `name: value` lines, as Appendix C prints header lists and tables.
fn lines(s: &str) -> Vec<(String, String)> {
    let split = |l: &str| {
        let (name, value) = l.split_at(l[1..].find(": ").unwrap() + 1);
        (name.to_string(), value[2..].to_string())
    };
    s.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(split)
        .collect()
}

fn texts(headers: &[Header]) -> Vec<(String, String)> {
    let text = |b: &[u8]| String::from_utf8(b.to_vec()).unwrap();
    let pair = |h: &Header| (text(&h.name), text(&h.value));
    headers.iter().map(pair).collect()
}

fn decode(decoder: &mut Decoder, block: &[u8]) -> Result<Vec<Header>, HpackError> {
    let mut out = Vec::new();
    decoder.decode(block, &mut out).map(|()| out)
}

/// Decodes a hex block with a fresh decoder (4096-octet table, 64 KiB list).
fn decode_fresh(block: &str) -> Result<Vec<Header>, HpackError> {
    decode(&mut Decoder::new(4096, 1 << 16), &hex(block))
}

/// Decodes consecutive blocks, checking each list and the dynamic table
/// (newest first) with its size afterwards.
fn check_decoder(table_size: usize, blocks: &[&str], lists: &[&str], tables: &[(&str, usize)]) {
    let mut decoder = Decoder::new(table_size, 1 << 16);
    for ((block, list), (table, size)) in blocks.iter().zip(lists).zip(tables) {
        let out = decode(&mut decoder, &hex(block)).unwrap();
        assert_eq!(texts(&out), lines(list));
        assert_eq!(decoder.table().entries(), lines(table));
        assert_eq!(decoder.table().size(), *size);
    }
}

/// Our encoder reproduces the Huffman examples byte for byte, after the
/// size update `prefix` when the table is not the default 4096.
fn check_encoder(table_size: usize, prefix: &str, blocks: &[&str], lists: &[&str]) {
    let mut encoder = Encoder::new();
    if table_size != 4096 {
        encoder.set_max_table_size(table_size);
    }
    for (i, (block, list)) in blocks.iter().zip(lists).enumerate() {
        let headers = lines(list);
        let mut dst = Vec::new();
        encoder.encode(
            headers.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())),
            &mut dst,
        );
        let expected = if i == 0 { hex(prefix) } else { Vec::new() };
        assert_eq!(dst, [expected, hex(block)].concat());
    }
}

const REQUESTS: [&str; 3] = [
    ":method: GET
     :scheme: http
     :path: /
     :authority: www.example.com",
    ":method: GET
     :scheme: http
     :path: /
     :authority: www.example.com
     cache-control: no-cache",
    ":method: GET
     :scheme: https
     :path: /index.html
     :authority: www.example.com
     custom-key: custom-value",
];
const REQUEST_TABLES: [(&str, usize); 3] = [
    (":authority: www.example.com", 57),
    (
        "cache-control: no-cache
         :authority: www.example.com",
        110,
    ),
    (
        "custom-key: custom-value
         cache-control: no-cache
         :authority: www.example.com",
        164,
    ),
];
const RESPONSES: [&str; 3] = [
    ":status: 302
     cache-control: private
     date: Mon, 21 Oct 2013 20:13:21 GMT
     location: https://www.example.com",
    ":status: 307
     cache-control: private
     date: Mon, 21 Oct 2013 20:13:21 GMT
     location: https://www.example.com",
    ":status: 200
     cache-control: private
     date: Mon, 21 Oct 2013 20:13:22 GMT
     location: https://www.example.com
     content-encoding: gzip
     set-cookie: foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
];
const RESPONSE_TABLES: [(&str, usize); 3] = [
    (
        "location: https://www.example.com
         date: Mon, 21 Oct 2013 20:13:21 GMT
         cache-control: private
         :status: 302",
        222,
    ),
    (
        ":status: 307
         location: https://www.example.com
         date: Mon, 21 Oct 2013 20:13:21 GMT
         cache-control: private",
        222,
    ),
    (
        "set-cookie: foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1
         content-encoding: gzip
         date: Mon, 21 Oct 2013 20:13:22 GMT",
        215,
    ),
];

const C3: [&str; 3] = [
    "8286 8441 0f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
    "8286 84be 5808 6e6f 2d63 6163 6865",
    "8287 85bf 400a 6375 7374 6f6d 2d6b 6579 0c63 7573 746f 6d2d 7661 6c75 65",
];
const C4: [&str; 3] = [
    "8286 8441 8cf1 e3c2 e5f2 3a6b a0ab 90f4 ff",
    "8286 84be 5886 a8eb 1064 9cbf",
    "8287 85bf 4088 25a8 49e9 5ba9 7d7f 8925 a849 e95b b8e8 b4bf",
];
const C5: [&str; 3] = [
    "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133
     2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70
     6c65 2e63 6f6d",
    "4803 3330 37c1 c0bf",
    "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d
     54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049
     5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e
     3d31",
];
const C6: [&str; 3] = [
    "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6
     2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
    "4883 640e ffc1 c0bf",
    "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab
     77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f
     9587 3160 65c0 03ed 4ee5 b106 3d50 07",
];

#[test]
fn rfc_c2_1_literal_with_indexing() {
    let block = "400a 6375 7374 6f6d 2d6b 6579 0d63 7573 746f 6d2d 6865 6164 6572";
    let list = "custom-key: custom-header";
    check_decoder(4096, &[block], &[list], &[(list, 55)]);
}

#[test]
fn rfc_c2_2_literal_without_indexing() {
    let block = "040c 2f73 616d 706c 652f 7061 7468";
    check_decoder(4096, &[block], &[":path: /sample/path"], &[("", 0)]);
}

#[test]
fn rfc_c2_3_literal_never_indexed_is_sensitive() {
    let out = decode_fresh("1008 7061 7373 776f 7264 0673 6563 7265 74").unwrap();
    let expected = Header {
        name: b"password".to_vec(),
        value: b"secret".to_vec(),
        sensitive: true,
    };
    assert_eq!(out, [expected]);
}

#[test]
fn rfc_c2_4_indexed_field() {
    check_decoder(4096, &["82"], &[":method: GET"], &[("", 0)]);
    check_encoder(4096, "", &["82"], &[":method: GET"]);
}

#[test]
fn rfc_c3_requests_without_huffman() {
    check_decoder(4096, &C3, &REQUESTS, &REQUEST_TABLES);
}

#[test]
fn rfc_c4_requests_with_huffman() {
    check_decoder(4096, &C4, &REQUESTS, &REQUEST_TABLES);
    check_encoder(4096, "", &C4, &REQUESTS);
}

#[test]
fn rfc_c5_responses_without_huffman_evict() {
    check_decoder(256, &C5, &RESPONSES, &RESPONSE_TABLES);
}

#[test]
fn rfc_c6_responses_with_huffman_evict() {
    check_decoder(256, &C6, &RESPONSES, &RESPONSE_TABLES);
    check_encoder(256, "3fe1 01", &C6, &RESPONSES);
}

#[test]
fn size_update_at_start_is_applied() {
    let mut decoder = Decoder::new(4096, 1 << 16);
    decode(&mut decoder, &hex("400a 6375 7374 6f6d 2d6b 6579 0161")).unwrap();
    decode(&mut decoder, &hex("20 3fe1 01 82")).unwrap();
    assert_eq!(
        (decoder.table().size(), decoder.table().entries().len()),
        (0, 0)
    );
}

#[test]
fn size_update_after_a_field_is_rejected() {
    let err = decode_fresh("82 20");
    assert_eq!(err, Err(HpackError::TableSizeUpdateNotAtStart));
}

#[test]
fn size_update_above_our_setting_is_rejected() {
    let mut decoder = Decoder::new(4096, 1 << 16);
    decoder.set_max_allowed_table_size(100);
    assert_eq!(
        decode(&mut decoder, &hex("3f46")),
        Err(HpackError::TableSizeUpdateTooLarge)
    );
}

#[test]
fn shrunk_setting_requires_an_update_in_the_next_block() {
    let mut decoder = Decoder::new(4096, 1 << 16);
    decoder.set_max_allowed_table_size(100);
    assert_eq!(
        decode(&mut decoder, &hex("82")),
        Err(HpackError::TableSizeUpdateMissing)
    );
    let mut decoder = Decoder::new(4096, 1 << 16);
    decoder.set_max_allowed_table_size(100);
    assert!(decode(&mut decoder, &hex("3f45 82")).is_ok());
    assert!(decode(&mut decoder, &hex("82")).is_ok());
}

#[test]
fn index_zero_and_past_the_table_are_invalid() {
    for block in ["80", "be", "7e 00", "0f 2f 00"] {
        assert_eq!(
            decode_fresh(block),
            Err(HpackError::InvalidIndex),
            "{block}"
        );
    }
}

#[test]
fn truncated_literals_are_rejected() {
    for block in ["3f", "40", "4003 6162", "0403 6162", "408a ffff"] {
        assert_eq!(decode_fresh(block), Err(HpackError::Truncated), "{block}");
    }
}

#[test]
fn header_list_limit_stops_amplification_and_restores_out() {
    // One 4000-octet entry, then one-octet references to it.
    let mut block = hex("40 01 61 7f a1 1e");
    block.extend(vec![b'v'; 4000]);
    block.extend(vec![0xbe; 1000]);
    let mut decoder = Decoder::new(4096, 16 << 10);
    let mut out = decode(&mut decoder, &[0x82]).unwrap();
    let err = decoder.decode(&block, &mut out);
    assert_eq!(err, Err(HpackError::HeaderListTooLarge));
    assert_eq!(out.len(), 1);
}

#[test]
fn strings_longer_than_the_list_limit_are_rejected_before_reading() {
    let mut decoder = Decoder::new(4096, 1000);
    let err = decode(&mut decoder, &hex("00 7f a1 1e"));
    assert_eq!(err, Err(HpackError::StringTooLong));
}

#[test]
fn encoder_signals_smallest_then_latest_table_size() {
    let mut encoder = Encoder::new();
    encoder.set_max_table_size(0);
    encoder.set_max_table_size(100);
    let mut dst = Vec::new();
    encoder.encode([], &mut dst);
    assert_eq!(dst, hex("20 3f45"));
    dst.clear();
    encoder.encode([], &mut dst);
    assert!(dst.is_empty());
}

#[test]
fn encoder_indexes_repeats_but_not_oversized_entries() {
    let mut encoder = Encoder::new();
    let big = vec![b'x'; 5000];
    let mut dst = Vec::new();
    encoder.encode(
        [(&b"x-key"[..], &b"v"[..]), (&b"x-big"[..], &big[..])],
        &mut dst,
    );
    dst.clear();
    encoder.encode([(&b"x-key"[..], &b"v"[..])], &mut dst);
    assert_eq!(dst, [0xbe]);
    assert_eq!(encoder.table().entries().len(), 1);
}

use crate::test_support::Rng;

/// Draws shaped like header lists.
trait HeaderDraws {
    fn bytes(&mut self, max_len: usize) -> Vec<u8>;
    fn headers(&mut self) -> Vec<(Vec<u8>, Vec<u8>)>;
}

impl HeaderDraws for Rng {
    fn bytes(&mut self, max_len: usize) -> Vec<u8> {
        let len = self.below(max_len + 1);
        match self.below(3) {
            0 => (0..len).map(|_| self.next() as u8).collect(),
            _ => (0..len)
                .map(|_| b"abcdefgh-/:;=0123456789"[self.below(23)])
                .collect(),
        }
    }

    /// A header list mixing static entries, recurring pairs and noise.
    fn headers(&mut self) -> Vec<(Vec<u8>, Vec<u8>)> {
        const POOL: [(&[u8], &[u8]); 5] = [
            (b":method", b"POST"),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
            (b"grpc-status", b"0"),
            (b":path", b"/backoff.v1.Backoff/Next"),
        ];
        (0..self.below(12))
            .map(|_| match self.below(4) {
                0 => {
                    let (n, v) = POOL[self.below(POOL.len())];
                    (n.to_vec(), v.to_vec())
                }
                1 => (b"x-id".to_vec(), self.bytes(3)),
                2 => (b":status".to_vec(), self.bytes(4)),
                _ => (self.bytes(20), self.bytes(300)),
            })
            .collect()
    }
}

#[test]
fn random_header_lists_round_trip_with_tables_in_sync() {
    let mut rng = Rng::new(0x2545_f491_4f6c_dd1d);
    for table_size in [0, 64, 256, 4096] {
        let (mut encoder, mut decoder) = (Encoder::new(), Decoder::new(4096, 1 << 20));
        for round in 0..1500 {
            if round % 400 == 0 {
                let size = if round == 0 {
                    table_size
                } else {
                    rng.below(4097)
                };
                decoder.set_max_allowed_table_size(size);
                encoder.set_max_table_size(size);
            }
            let headers = rng.headers();
            let mut block = Vec::new();
            encoder.encode(headers.iter().map(|(n, v)| (&n[..], &v[..])), &mut block);
            let out = decode(&mut decoder, &block).unwrap();
            let got: Vec<_> = out.into_iter().map(|h| (h.name, h.value)).collect();
            assert_eq!(got, headers);
            assert_eq!(decoder.table().entries(), encoder.table().entries());
        }
    }
}

/// Decodes hostile input: no panic, and nothing beyond the list limit kept.
fn decode_bounded(decoder: &mut Decoder, block: &[u8], limit: usize) -> bool {
    let mut out = Vec::new();
    let ok = decoder.decode(block, &mut out).is_ok();
    let size: usize = out.iter().map(|h| entry_size(&h.name, &h.value)).sum();
    assert!(size <= limit);
    assert!(decoder.table().size() <= 4096);
    ok
}

#[test]
fn every_one_and_two_octet_input_is_handled_without_panic() {
    for a in 0..=255u8 {
        decode_bounded(&mut Decoder::new(4096, 1024), &[a], 1024);
        for b in 0..=255u8 {
            decode_bounded(&mut Decoder::new(4096, 1024), &[a, b], 1024);
        }
    }
}

#[test]
fn random_and_mutated_blocks_never_panic_and_stay_bounded() {
    const LIMIT: usize = 8 << 10;
    let mut rng = Rng::new(0x853c_49e6_748f_ea9b);
    let (mut encoder, mut synced) = (Encoder::new(), Decoder::new(4096, LIMIT));
    for _ in 0..2_000 {
        let mut valid = Vec::new();
        let headers = rng.headers();
        encoder.encode(headers.iter().map(|(n, v)| (&n[..], &v[..])), &mut valid);
        // Mutants are decoded against the table state the valid block sees.
        for _ in 0..100 {
            let mut block = valid.clone();
            match rng.below(4) {
                0 => block = rng.bytes(64),
                1 => block.truncate(rng.below(block.len() + 1)),
                _ => {
                    for _ in 0..=rng.below(3) {
                        let at = rng.below(block.len() + 1);
                        block.insert(at, rng.next() as u8);
                        let at = rng.below(block.len());
                        block[at] ^= 1 << rng.below(8);
                    }
                }
            }
            decode_bounded(&mut synced.clone(), &block, LIMIT);
        }
        assert!(decode_bounded(&mut synced, &valid, LIMIT));
    }
}
