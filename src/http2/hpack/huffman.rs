//! The static Huffman code for string literals (RFC 7541 §5.2, Appendix B).

use super::HpackError;

/// `(code, bit length)` per symbol, index 256 being EOS: Appendix B verbatim.
#[rustfmt::skip]
const CODES: [(u32, u8); 257] = [
    (0x1ff8, 13), (0x7fffd8, 23), (0xfffffe2, 28), (0xfffffe3, 28), // 0
    (0xfffffe4, 28), (0xfffffe5, 28), (0xfffffe6, 28), (0xfffffe7, 28),
    (0xfffffe8, 28), (0xffffea, 24), (0x3ffffffc, 30), (0xfffffe9, 28), // 8
    (0xfffffea, 28), (0x3ffffffd, 30), (0xfffffeb, 28), (0xfffffec, 28),
    (0xfffffed, 28), (0xfffffee, 28), (0xfffffef, 28), (0xffffff0, 28), // 16
    (0xffffff1, 28), (0xffffff2, 28), (0x3ffffffe, 30), (0xffffff3, 28),
    (0xffffff4, 28), (0xffffff5, 28), (0xffffff6, 28), (0xffffff7, 28), // 24
    (0xffffff8, 28), (0xffffff9, 28), (0xffffffa, 28), (0xffffffb, 28),
    (0x14, 6), (0x3f8, 10), (0x3f9, 10), (0xffa, 12), // 32 ' '
    (0x1ff9, 13), (0x15, 6), (0xf8, 8), (0x7fa, 11),
    (0x3fa, 10), (0x3fb, 10), (0xf9, 8), (0x7fb, 11), // 40 '('
    (0xfa, 8), (0x16, 6), (0x17, 6), (0x18, 6),
    (0x0, 5), (0x1, 5), (0x2, 5), (0x19, 6), // 48 '0'
    (0x1a, 6), (0x1b, 6), (0x1c, 6), (0x1d, 6),
    (0x1e, 6), (0x1f, 6), (0x5c, 7), (0xfb, 8), // 56 '8'
    (0x7ffc, 15), (0x20, 6), (0xffb, 12), (0x3fc, 10),
    (0x1ffa, 13), (0x21, 6), (0x5d, 7), (0x5e, 7), // 64 '@'
    (0x5f, 7), (0x60, 7), (0x61, 7), (0x62, 7),
    (0x63, 7), (0x64, 7), (0x65, 7), (0x66, 7), // 72 'H'
    (0x67, 7), (0x68, 7), (0x69, 7), (0x6a, 7),
    (0x6b, 7), (0x6c, 7), (0x6d, 7), (0x6e, 7), // 80 'P'
    (0x6f, 7), (0x70, 7), (0x71, 7), (0x72, 7),
    (0xfc, 8), (0x73, 7), (0xfd, 8), (0x1ffb, 13), // 88 'X'
    (0x7fff0, 19), (0x1ffc, 13), (0x3ffc, 14), (0x22, 6),
    (0x7ffd, 15), (0x3, 5), (0x23, 6), (0x4, 5), // 96 '`'
    (0x24, 6), (0x5, 5), (0x25, 6), (0x26, 6),
    (0x27, 6), (0x6, 5), (0x74, 7), (0x75, 7), // 104 'h'
    (0x28, 6), (0x29, 6), (0x2a, 6), (0x7, 5),
    (0x2b, 6), (0x76, 7), (0x2c, 6), (0x8, 5), // 112 'p'
    (0x9, 5), (0x2d, 6), (0x77, 7), (0x78, 7),
    (0x79, 7), (0x7a, 7), (0x7b, 7), (0x7ffe, 15), // 120 'x'
    (0x7fc, 11), (0x3ffd, 14), (0x1ffd, 13), (0xffffffc, 28),
    (0xfffe6, 20), (0x3fffd2, 22), (0xfffe7, 20), (0xfffe8, 20), // 128
    (0x3fffd3, 22), (0x3fffd4, 22), (0x3fffd5, 22), (0x7fffd9, 23),
    (0x3fffd6, 22), (0x7fffda, 23), (0x7fffdb, 23), (0x7fffdc, 23), // 136
    (0x7fffdd, 23), (0x7fffde, 23), (0xffffeb, 24), (0x7fffdf, 23),
    (0xffffec, 24), (0xffffed, 24), (0x3fffd7, 22), (0x7fffe0, 23), // 144
    (0xffffee, 24), (0x7fffe1, 23), (0x7fffe2, 23), (0x7fffe3, 23),
    (0x7fffe4, 23), (0x1fffdc, 21), (0x3fffd8, 22), (0x7fffe5, 23), // 152
    (0x3fffd9, 22), (0x7fffe6, 23), (0x7fffe7, 23), (0xffffef, 24),
    (0x3fffda, 22), (0x1fffdd, 21), (0xfffe9, 20), (0x3fffdb, 22), // 160
    (0x3fffdc, 22), (0x7fffe8, 23), (0x7fffe9, 23), (0x1fffde, 21),
    (0x7fffea, 23), (0x3fffdd, 22), (0x3fffde, 22), (0xfffff0, 24), // 168
    (0x1fffdf, 21), (0x3fffdf, 22), (0x7fffeb, 23), (0x7fffec, 23),
    (0x1fffe0, 21), (0x1fffe1, 21), (0x3fffe0, 22), (0x1fffe2, 21), // 176
    (0x7fffed, 23), (0x3fffe1, 22), (0x7fffee, 23), (0x7fffef, 23),
    (0xfffea, 20), (0x3fffe2, 22), (0x3fffe3, 22), (0x3fffe4, 22), // 184
    (0x7ffff0, 23), (0x3fffe5, 22), (0x3fffe6, 22), (0x7ffff1, 23),
    (0x3ffffe0, 26), (0x3ffffe1, 26), (0xfffeb, 20), (0x7fff1, 19), // 192
    (0x3fffe7, 22), (0x7ffff2, 23), (0x3fffe8, 22), (0x1ffffec, 25),
    (0x3ffffe2, 26), (0x3ffffe3, 26), (0x3ffffe4, 26), (0x7ffffde, 27), // 200
    (0x7ffffdf, 27), (0x3ffffe5, 26), (0xfffff1, 24), (0x1ffffed, 25),
    (0x7fff2, 19), (0x1fffe3, 21), (0x3ffffe6, 26), (0x7ffffe0, 27), // 208
    (0x7ffffe1, 27), (0x3ffffe7, 26), (0x7ffffe2, 27), (0xfffff2, 24),
    (0x1fffe4, 21), (0x1fffe5, 21), (0x3ffffe8, 26), (0x3ffffe9, 26), // 216
    (0xffffffd, 28), (0x7ffffe3, 27), (0x7ffffe4, 27), (0x7ffffe5, 27),
    (0xfffec, 20), (0xfffff3, 24), (0xfffed, 20), (0x1fffe6, 21), // 224
    (0x3fffe9, 22), (0x1fffe7, 21), (0x1fffe8, 21), (0x7ffff3, 23),
    (0x3fffea, 22), (0x3fffeb, 22), (0x1ffffee, 25), (0x1ffffef, 25), // 232
    (0xfffff4, 24), (0xfffff5, 24), (0x3ffffea, 26), (0x7ffff4, 23),
    (0x3ffffeb, 26), (0x7ffffe6, 27), (0x3ffffec, 26), (0x3ffffed, 26), // 240
    (0x7ffffe7, 27), (0x7ffffe8, 27), (0x7ffffe9, 27), (0x7ffffea, 27),
    (0x7ffffeb, 27), (0xffffffe, 28), (0x7ffffec, 27), (0x7ffffed, 27), // 248
    (0x7ffffee, 27), (0x7ffffef, 27), (0x7fffff0, 27), (0x3ffffee, 26),
    (0x3fffffff, 30), // 256 EOS
];

const EOS: u16 = 256;
const MAX_LEN: usize = 30;

/// Decoding tables derived from the code lengths at compile time. Appendix B
/// is a canonical code: codes of one length are consecutive in symbol order
/// and each length starts where the previous one ended, shifted left. So a
/// code is found by comparing its value with per-length bounds, and codes of
/// up to 8 bits (the common printable characters) by one direct lookup.
struct Tables {
    /// First code of each length.
    first: [u32; MAX_LEN + 1],
    /// One past the last code of each length.
    limit: [u32; MAX_LEN + 1],
    /// Position in `symbols` of the first code of each length.
    offset: [u16; MAX_LEN + 1],
    /// Symbols ordered by (length, symbol), i.e. by code.
    symbols: [u16; 257],
    /// `(symbol, length)` for every octet starting with a code of <= 8 bits.
    fast: [(u16, u8); 256],
}

static TABLES: Tables = build_tables();

const fn build_tables() -> Tables {
    let mut t = Tables {
        first: [0; MAX_LEN + 1],
        limit: [0; MAX_LEN + 1],
        offset: [0; MAX_LEN + 1],
        symbols: [0; 257],
        fast: [(0, 0); 256],
    };
    let (mut code, mut next, mut len) = (0u32, 0usize, 1usize);
    while len <= MAX_LEN {
        t.first[len] = code;
        t.offset[len] = next as u16;
        let mut sym = 0;
        while sym < CODES.len() {
            if CODES[sym].1 as usize == len {
                if len <= 8 {
                    fill_fast(&mut t.fast, code, len, sym);
                }
                t.symbols[next] = sym as u16;
                next += 1;
                code += 1;
            }
            sym += 1;
        }
        t.limit[len] = code;
        code <<= 1;
        len += 1;
    }
    t
}

/// Points every octet that starts with `code` (`len` <= 8 bits) at `sym`.
const fn fill_fast(fast: &mut [(u16, u8); 256], code: u32, len: usize, sym: usize) {
    let mut i = (code << (8 - len)) as usize;
    while i < ((code + 1) << (8 - len)) as usize {
        fast[i] = (sym as u16, len as u8);
        i += 1;
    }
}

/// Finds the code at the top of a left-aligned 32-bit window.
fn lookup(window: u32) -> (u16, u32) {
    let (sym, len) = TABLES.fast[(window >> 24) as usize];
    if len != 0 {
        return (sym, len.into());
    }
    for len in 9..=MAX_LEN {
        let code = window >> (32 - len);
        if code < TABLES.limit[len] {
            let i = usize::from(TABLES.offset[len]) + (code - TABLES.first[len]) as usize;
            return (TABLES.symbols[i], len as u32);
        }
    }
    (EOS, MAX_LEN as u32) // unreachable: the code is complete
}

/// Length in octets of `src` once Huffman-encoded, padding included, so the
/// encoder can pick the shorter form (§5.2).
pub fn encoded_len(src: &[u8]) -> usize {
    let bits: usize = src
        .iter()
        .map(|&b| usize::from(CODES[usize::from(b)].1))
        .sum();
    bits.div_ceil(8)
}

/// Appends the Huffman encoding of `src`, padded with the most significant
/// bits of EOS, i.e. ones (§5.2).
pub fn encode(src: &[u8], dst: &mut Vec<u8>) {
    let (mut acc, mut nbits) = (0u64, 0u32);
    for &b in src {
        let (code, len) = CODES[usize::from(b)];
        acc = (acc << len) | u64::from(code);
        nbits += u32::from(len);
        while nbits >= 8 {
            nbits -= 8;
            dst.push((acc >> nbits) as u8);
        }
    }
    if nbits > 0 {
        dst.push((acc << (8 - nbits)) as u8 | (0xff >> nbits));
    }
}

/// Appends the decoding of `src`, rejecting EOS and bad padding (§5.2).
pub fn decode(src: &[u8], dst: &mut Vec<u8>) -> Result<(), HpackError> {
    // Unconsumed bits, left-aligned; refilled to at least 49 bits while input
    // remains, so a 30-bit code never straddles a refill.
    let (mut acc, mut nbits) = (0u64, 0u32);
    let mut input = src.iter();
    loop {
        while nbits <= 48 {
            let Some(&b) = input.next() else { break };
            acc |= u64::from(b) << (56 - nbits);
            nbits += 8;
        }
        if nbits == 0 {
            return Ok(());
        }
        // Bits past the end read as ones, so leftover padding finds EOS.
        let window = ((acc | (u64::MAX >> nbits)) >> 32) as u32;
        let (sym, len) = lookup(window);
        if len > nbits {
            return check_padding(acc, nbits);
        }
        if sym == EOS {
            return Err(HpackError::HuffmanEos);
        }
        dst.push(sym as u8);
        acc <<= len;
        nbits -= len;
    }
}

/// Leftover bits must be a prefix of EOS (all ones) and shorter than an octet.
fn check_padding(acc: u64, nbits: u32) -> Result<(), HpackError> {
    let mask = !(u64::MAX >> nbits);
    if acc & mask != mask {
        Err(HpackError::HuffmanInvalid)
    } else if nbits > 7 {
        Err(HpackError::HuffmanPadding)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(src: &[u8]) -> Vec<u8> {
        let mut dst = Vec::new();
        encode(src, &mut dst);
        assert_eq!(dst.len(), encoded_len(src));
        dst
    }

    fn dec(src: &[u8]) -> Result<Vec<u8>, HpackError> {
        let mut dst = Vec::new();
        decode(src, &mut dst).map(|()| dst)
    }

    #[test]
    fn table_is_the_complete_canonical_code_of_appendix_b() {
        // Kraft sum of exactly 1: no gaps, no overlaps.
        let kraft: u64 = CODES
            .iter()
            .map(|&(_, len)| 1u64 << (MAX_LEN - len as usize))
            .sum();
        assert_eq!(kraft, 1 << MAX_LEN);
        // The transcribed codes are the ones the lengths imply canonically.
        for (i, &sym) in TABLES.symbols.iter().enumerate() {
            let (code, len) = CODES[usize::from(sym)];
            let len = usize::from(len);
            assert_eq!(
                code,
                TABLES.first[len] + (i - usize::from(TABLES.offset[len])) as u32
            );
        }
    }

    #[test]
    fn rfc_c4_1_example_string() {
        let www = [
            0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
        ];
        assert_eq!(enc(b"www.example.com"), www);
        assert_eq!(dec(&www).unwrap(), b"www.example.com");
    }

    #[test]
    fn round_trips_all_256_octets() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(dec(&enc(&all)).unwrap(), all);
        for b in all {
            assert_eq!(dec(&enc(&[b])).unwrap(), [b]);
            assert_eq!(dec(&enc(&[b, b, b])).unwrap(), [b, b, b]);
        }
    }

    #[test]
    fn round_trips_random_strings() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..5000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let s: Vec<u8> = x
                .to_le_bytes()
                .iter()
                .cycle()
                .take((x % 50) as usize)
                .copied()
                .collect();
            assert_eq!(dec(&enc(&s)).unwrap(), s);
        }
    }

    #[test]
    fn empty_string_is_empty() {
        assert_eq!(enc(b""), b"");
        assert_eq!(dec(b"").unwrap(), b"");
    }

    #[test]
    fn encoded_eos_is_rejected() {
        assert_eq!(dec(&[0xff, 0xff, 0xff, 0xff]), Err(HpackError::HuffmanEos));
        // 'a' (00011) followed by EOS and five padding bits.
        assert_eq!(
            dec(&[0x1f, 0xff, 0xff, 0xff, 0xff]),
            Err(HpackError::HuffmanEos)
        );
    }

    #[test]
    fn padding_longer_than_seven_bits_is_rejected() {
        assert_eq!(dec(&[0xff]), Err(HpackError::HuffmanPadding));
        // '0' (00000) followed by eleven ones.
        assert_eq!(dec(&[0x07, 0xff]), Err(HpackError::HuffmanPadding));
    }

    #[test]
    fn padding_that_is_not_all_ones_is_rejected() {
        // 'a' (00011) followed by 000.
        assert_eq!(dec(&[0x18]), Err(HpackError::HuffmanInvalid));
        // 'a' followed by 110: a prefix of a longer code, not of EOS.
        assert_eq!(dec(&[0x1e]), Err(HpackError::HuffmanInvalid));
        assert_eq!(dec(&[0x1f]).unwrap(), b"a");
    }
}
