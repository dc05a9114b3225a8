//! Canonical CoAP encoder writing into a caller-owned buffer (RFC 7252 §3, §3.1).

use super::code::Code;
use super::message::{read_option, Message, MessageType, Step};
use super::message::{MAX_TOKEN_LEN, PAYLOAD_MARKER, VERSION};

/// Longest option value a nibble plus 2-byte extension can express (RFC 7252 §3.1).
pub const MAX_OPTION_LEN: usize = 65535 + 269;

error_enum! {
    /// Why a message could not be encoded.
    EncodeError {
        TokenTooLong => "token longer than 8 bytes (RFC 7252 §3)",
        OptionTooLong => "option value longer than 65804 bytes (RFC 7252 §3.1)",
        EmptyMessageNotEmpty => "code 0.00 with a token, options or payload (RFC 7252 §4.1)",
    }
}

/// Encodes one message straight into `out`, so the only allocation is `out` growing.
/// Options may come in any order (the wire stores deltas, so they end up sorted by number,
/// RFC 7252 §3.1; repeats keep the order they were added in). One added in order is appended
/// at once; one below the highest number so far (or added after the payload), and every one
/// after it, waits in a side list, and `finish()` sorts that list once and merges it in:
/// O(n log n) in all, never a splice per option. Errors are sticky until `finish()`.
#[must_use = "call finish() to learn whether the message is valid"]
pub struct MessageBuilder<'o> {
    out: &'o mut Vec<u8>,
    code: Code,
    /// `out[opts_start..opts_end]` holds the options added in order, sorted by number.
    opts_start: usize,
    opts_end: usize,
    /// The highest option number in `out`.
    last: u16,
    /// Options added out of order, waiting for `finish()`: numbers and values (in `late`).
    deferred: Vec<(u16, std::ops::Range<usize>)>,
    late: Vec<u8>,
    error: Option<EncodeError>,
}

/// The 4-byte header (RFC 7252 §3).
fn header(ty: MessageType, code: Code, mid: u16, tkl: u8) -> [u8; 4] {
    let [m0, m1] = mid.to_be_bytes();
    [(VERSION << 6) | ((ty as u8) << 4) | tkl, code.0, m0, m1]
}

/// Shortest nibble and extension bytes for a delta or length <= 65804 (RFC 7252 §3.1).
fn extended(v: usize) -> (u8, [u8; 2], usize) {
    match v {
        0..=12 => (v as u8, [0; 2], 0),
        13..=268 => (13, [(v - 13) as u8, 0], 1),
        _ => (14, (v.saturating_sub(269) as u16).to_be_bytes(), 2),
    }
}

/// Appends option `number` after option `prev` (<= number): header, then value (RFC 7252 §3.1).
fn append_option(out: &mut Vec<u8>, prev: u16, number: u16, value: &[u8]) {
    let (dn, dx, dl) = extended(usize::from(number - prev));
    let (ln, lx, ll) = extended(value.len());
    let mut h = [(dn << 4) | ln, dx[0], dx[1], 0, 0];
    h[1 + dl..3 + dl].copy_from_slice(&lx); // dl <= 2, so in bounds
    out.extend_from_slice(&h[..1 + dl + ll]);
    out.extend_from_slice(value);
}

impl<'o> MessageBuilder<'o> {
    /// Clears `out` and writes the header and token (at most 8 bytes, RFC 7252 §3).
    pub fn new(out: &'o mut Vec<u8>, ty: MessageType, code: Code, mid: u16, token: &[u8]) -> Self {
        let error = (token.len() > MAX_TOKEN_LEN).then_some(EncodeError::TokenTooLong);
        let token = if error.is_some() { &[][..] } else { token };
        out.clear();
        out.extend_from_slice(&header(ty, code, mid, token.len() as u8));
        out.extend_from_slice(token);
        let (opts_start, opts_end, last) = (out.len(), out.len(), 0);
        Self {
            out,
            code,
            opts_start,
            opts_end,
            last,
            deferred: Vec::new(),
            late: Vec::new(),
            error,
        }
    }

    /// Adds an option in any order; repeats keep the order they were added in.
    pub fn option(&mut self, number: u16, value: &[u8]) -> &mut Self {
        if value.len() > MAX_OPTION_LEN {
            self.error.get_or_insert(EncodeError::OptionTooLong);
            return self;
        }
        let appends = number >= self.last && self.opts_end == self.out.len();
        if !appends || !self.deferred.is_empty() {
            // Out of order, after the payload, or after one of those: sorted in by `finish()`.
            let at = self.late.len();
            self.late.extend_from_slice(value);
            self.deferred.push((number, at..self.late.len()));
            return self;
        }
        append_option(self.out, self.last, number, value);
        self.opts_end = self.out.len();
        self.last = number;
        self
    }

    /// Options added out of order (or after the payload) so far, which `finish()` sorts in;
    /// 0 means every option was appended where it belongs: the linear path.
    pub fn deferred_options(&self) -> usize {
        self.deferred.len()
    }

    /// Merges the deferred options into the sorted ones: a stable sort of the deferred by
    /// number, then one pass over both. Every option in `out` was added before the first
    /// deferred one, so equal numbers keep the order they were added in when `out`'s come first.
    fn merge_deferred(&mut self) {
        if self.deferred.is_empty() {
            return;
        }
        let mut deferred = std::mem::take(&mut self.deferred);
        deferred.sort_by_key(|&(number, _)| number);
        let region = self.out.get(self.opts_start..self.opts_end);
        let (mut rest, mut prev) = (region.unwrap_or_default(), 0);
        let mut in_order = std::iter::from_fn(|| match read_option(rest, prev) {
            Ok(Step::Option(number, value, after)) => {
                (prev, rest) = (number, after);
                Some((number, value))
            }
            _ => None,
        })
        .peekable();
        let late = &self.late;
        let headers = 5 * deferred.len();
        let mut merged = Vec::with_capacity(self.opts_end - self.opts_start + late.len() + headers);
        let mut last = 0;
        for (number, range) in deferred {
            while let Some((n, v)) = in_order.next_if(|&(n, _)| n <= number) {
                append_option(&mut merged, last, n, v);
                last = n;
            }
            append_option(&mut merged, last, number, &late[range]);
            last = number;
        }
        for (n, v) in in_order {
            append_option(&mut merged, last, n, v);
            last = n;
        }
        let end = self.opts_start + merged.len();
        self.out.splice(self.opts_start..self.opts_end, merged);
        self.opts_end = end;
    }

    /// Sets the payload, replacing any earlier one; empty means no marker (RFC 7252 §3).
    pub fn payload(&mut self, payload: &[u8]) -> &mut Self {
        self.out.truncate(self.opts_end);
        if !payload.is_empty() {
            self.out.push(PAYLOAD_MARKER);
            self.out.extend_from_slice(payload);
        }
        self
    }

    /// Checks the message; on error `out` is cleared so a partial datagram is never sent.
    pub fn finish(mut self) -> Result<(), EncodeError> {
        self.merge_deferred();
        let not_empty = self.code.is_empty() && self.out.len() != 4;
        let not_empty = not_empty.then_some(EncodeError::EmptyMessageNotEmpty);
        let Some(error) = self.error.or(not_empty) else {
            return Ok(());
        };
        self.out.clear();
        Err(error)
    }
}

/// Writes an Empty ACK, e.g. to stop retransmission before a separate response (RFC 7252 §5.2.2).
pub fn empty_ack(out: &mut Vec<u8>, mid: u16) {
    out.clear();
    out.extend_from_slice(&header(MessageType::Ack, Code::EMPTY, mid, 0));
}

/// Writes a CoAP ping: an empty CON, which the recipient answers with an RST carrying `mid`
/// (RFC 7252 §4.3).
pub fn ping(out: &mut Vec<u8>, mid: u16) {
    out.clear();
    out.extend_from_slice(&header(MessageType::Con, Code::EMPTY, mid, 0));
}

/// Writes an RST rejecting message `mid`, e.g. a malformed CON (RFC 7252 §4.2, §4.3).
pub fn rst(out: &mut Vec<u8>, mid: u16) {
    out.clear();
    out.extend_from_slice(&header(MessageType::Rst, Code::EMPTY, mid, 0));
}

/// Re-encodes `msg` with its own type, Message ID and token, as a proxy does for every
/// forwarded message (RFC 7252 §5.7.2). `edit` sees each option in order and emits what to
/// keep, replace or add through the builder (emitting nothing drops it). The code and
/// payload are copied; the returned builder still takes options before `finish()`.
pub fn rewrite<'o, 'a>(
    out: &'o mut Vec<u8>,
    msg: &Message<'a>,
    (ty, mid, token): (MessageType, u16, &[u8]),
    mut edit: impl FnMut(&mut MessageBuilder<'o>, u16, &'a [u8]),
) -> MessageBuilder<'o> {
    let mut b = MessageBuilder::new(out, ty, msg.code(), mid, token);
    for (number, value) in msg.options() {
        edit(&mut b, number, value);
    }
    b.payload(msg.payload());
    b
}

#[cfg(test)]
mod tests {
    use super::super::option::{self, decode_uint, encode_uint, BlockValue};
    use super::*;

    type Built = Result<Vec<u8>, EncodeError>;

    /// Builds a CON with MID 0x1234 into a dirty buffer.
    fn build(code: Code, token: &[u8], f: impl FnOnce(&mut MessageBuilder)) -> Built {
        let mut out = vec![0xaa; 3];
        let mut b = MessageBuilder::new(&mut out, MessageType::Con, code, 0x1234, token);
        f(&mut b);
        b.finish().map(|()| out)
    }

    #[test]
    fn options_added_out_of_order_encode_sorted_and_minimal() {
        let block = BlockValue::new(2, false, 6).encode().unwrap();
        let out = build(Code::GET, &[0xab], |b| {
            b.option(option::BLOCK2, &block);
            b.option(option::URI_PATH, b"sensors").option(11, b"temp");
        });
        let want = b"\x41\x01\x12\x34\xab\xb7sensors\x04temp\xc1\x26";
        assert_eq!(out.as_deref(), Ok(&want[..]));
    }

    #[test]
    fn options_after_the_payload_or_a_deferred_one_keep_the_order_they_were_added_in() {
        let mut out = Vec::new();
        let mut b = MessageBuilder::new(&mut out, MessageType::Non, Code::PUT, 1, &[]);
        b.option(11, b"a")
            .payload(b"body")
            .option(11, b"b")
            .option(3, b"h");
        b.payload(&[]).option(11, b"c").option(12, &[]);
        assert_eq!(b.deferred_options(), 4);
        assert_eq!(b.finish(), Ok(()));
        let got: Vec<_> = Message::parse(&out).unwrap().options().collect();
        let want: [(u16, &[u8]); 5] = [(3, b"h"), (11, b"a"), (11, b"b"), (11, b"c"), (12, b"")];
        assert_eq!(got, want);
    }

    #[test]
    fn ten_thousand_options_in_reverse_are_sorted_once_not_spliced_one_by_one() {
        // The wire form of options in any order is the in-order one; out of order they wait
        // in a list that `finish` sorts once (each used to cost a scan and a splice of what
        // came before: quadratic, the 8.2 s of issue 13's 60,000-segment request).
        let opts: Vec<(u16, Vec<u8>)> = (0..10_000u16)
            .map(|i| (i / 3, i.to_be_bytes().to_vec()))
            .collect();
        let (mut sorted, mut reversed) = (Vec::new(), Vec::new());
        let mut b = MessageBuilder::new(&mut sorted, MessageType::Con, Code::GET, 7, b"t");
        opts.iter().for_each(|(n, v)| _ = b.option(*n, v));
        assert_eq!((b.deferred_options(), b.finish()), (0, Ok(())));
        let mut by_number_desc = opts.clone();
        by_number_desc.sort_by_key(|&(n, _)| std::cmp::Reverse(n));
        let mut b = MessageBuilder::new(&mut reversed, MessageType::Con, Code::GET, 7, b"t");
        by_number_desc.iter().for_each(|(n, v)| _ = b.option(*n, v));
        assert_eq!((b.deferred_options(), b.finish()), (opts.len() - 1, Ok(())));
        assert_eq!(reversed, sorted);
    }

    #[test]
    fn empty_payload_writes_no_marker() {
        let out = build(Code::GET, &[], |b| _ = b.payload(b"x").payload(&[]));
        assert_eq!(out.as_deref(), Ok(&[0x40, 0x01, 0x12, 0x34][..]));
    }

    #[test]
    fn long_token_or_nonempty_empty_message_is_encode_error() {
        let out = build(Code::GET, &[0; 9], |_| {});
        assert_eq!(out, Err(EncodeError::TokenTooLong));
        let out = build(Code::EMPTY, &[1], |_| {});
        assert_eq!(out, Err(EncodeError::EmptyMessageNotEmpty));
        let mut out = vec![1];
        let mut b = MessageBuilder::new(&mut out, MessageType::Ack, Code::EMPTY, 1, &[]);
        b.payload(b"x");
        let cleared = (b.finish(), out.is_empty());
        assert_eq!(cleared, (Err(EncodeError::EmptyMessageNotEmpty), true));
    }

    #[test]
    fn option_longer_than_65804_is_encode_error() {
        let value = vec![0; MAX_OPTION_LEN + 1];
        let out = build(Code::GET, &[], |b| _ = b.option(1, &value));
        assert_eq!(out, Err(EncodeError::OptionTooLong));
        let out = build(Code::GET, &[], |b| _ = b.option(65535, &value[1..])).unwrap();
        let got = Message::parse(&out).unwrap().option(65535).map(<[u8]>::len);
        assert_eq!(got, Some(65804));
    }

    #[test]
    fn empty_ack_and_rst_are_bare_headers() {
        let mut out = vec![9; 10];
        empty_ack(&mut out, 0x0102);
        assert_eq!(out, [0x60, 0x00, 0x01, 0x02]);
        rst(&mut out, 0xfffe);
        assert_eq!(out, [0x70, 0x00, 0xff, 0xfe]);
    }

    #[test]
    fn rewrite_gives_new_header_and_edits_options_like_a_proxy() {
        let req = b"\x42\x02\x00\x07\x01\x02\xd1\x03\x10\xda\x06coap://h/x\xffhi";
        let msg = Message::parse(req).unwrap();
        let (mut out, header) = (Vec::new(), (MessageType::Non, 99, &[9; 8][..]));
        let mut b = rewrite(&mut out, &msg, header, |b, n, v| match n {
            option::PROXY_URI => {}
            option::HOP_LIMIT => _ = b.option(n, &encode_uint(decode_uint(v).unwrap() - 1)),
            _ => _ = b.option(n, v),
        });
        b.option(option::URI_HOST, b"h")
            .option(option::URI_PATH, b"x");
        assert_eq!(b.finish(), Ok(()));
        let fwd = Message::parse(&out).unwrap();
        assert_eq!((fwd.msg_type(), fwd.message_id(), fwd.token()), header);
        assert_eq!((fwd.code(), fwd.payload()), (Code::POST, &b"hi"[..]));
        let got: Vec<_> = fwd.options().collect();
        assert_eq!(got, [(3, &b"h"[..]), (11, b"x"), (16, &[15])]);
    }

    /// Uniform in `0..below` from the shared seeded generator.
    fn rand(rng: &mut crate::test_support::Rng, below: usize) -> usize {
        rng.below(below)
    }

    /// If `bytes` parses, rebuilding it in order and in reverse order gives the same bytes.
    fn round_trips(bytes: &[u8], out: &mut Vec<u8>) -> bool {
        let Ok(msg) = Message::parse(bytes) else {
            return false;
        };
        let header = (msg.msg_type(), msg.message_id(), msg.token());
        let b = rewrite(out, &msg, header, |b, n, v| _ = b.option(n, v));
        assert_eq!(b.finish(), Ok(()));
        assert_eq!((&out[..], Message::parse(out)), (bytes, Ok(msg)));
        // Highest numbers first, repeats in original order: exercises the splice path.
        let mut opts: Vec<_> = msg.options().collect();
        opts.sort_by_key(|&(n, _)| std::cmp::Reverse(n));
        let (ty, code, mid) = (msg.msg_type(), msg.code(), msg.message_id());
        let mut b = MessageBuilder::new(out, ty, code, mid, msg.token());
        b.payload(msg.payload());
        opts.iter().for_each(|&(n, v)| _ = b.option(n, v));
        assert_eq!((b.finish(), &out[..]), (Ok(()), bytes));
        true
    }

    #[test]
    fn parse_never_panics_and_valid_input_round_trips() {
        let mut out = Vec::new();
        for a in 0..=255u8 {
            assert!(!round_trips(&[a], &mut out));
            for b in 0..=255u8 {
                assert!(!round_trips(&[a, b], &mut out));
                round_trips(&[0x40, 0x01, 0, 0, a, b], &mut out);
            }
        }
        let seeds: [&[u8]; 3] = [
            b"\x44\x01\x12\x34\x01\x02\x03\x04\xb7sensors\x04temp\x31a\xc1\x26\xffpayload",
            b"\x60\x45\x00\x01\xc1\x2e\xd1\x0a\x00\xe1\x00\x00\x07\xffx",
            b"\x50\x02\xff\xff\x3d\x00abcdefghijklm\x10\xd0\xe2",
        ];
        let (mut state, mut valid) = (crate::test_support::Rng::new(0x9e37_79b9_7f4a_7c15), 0);
        for i in 0..300_000 {
            let mut m = seeds[i % 3].to_vec();
            if i % 4 == 0 {
                let len = rand(&mut state, 40);
                m = (0..len).map(|_| rand(&mut state, 256) as u8).collect();
                m.iter_mut().take(1).for_each(|b| *b = 0x40 | (*b & 0x37));
            }
            for _ in 0..=rand(&mut state, 4) {
                let (at, byte) = (rand(&mut state, m.len() + 1), rand(&mut state, 256) as u8);
                match (rand(&mut state, 5), m.get_mut(at)) {
                    (0, Some(b)) => *b ^= 1 << (byte % 8),
                    (1, Some(b)) => *b = byte,
                    (2, _) => m.insert(at, byte),
                    (3, Some(_)) => _ = m.remove(at),
                    _ => m.truncate(at),
                }
            }
            valid += usize::from(round_trips(&m, &mut out));
        }
        assert!(valid > 20_000, "fuzz reached only {valid} valid messages");
    }
}
