//! Prefix-coded integers (RFC 7541 §5.1).

use super::HpackError;

/// Largest decodable value. Indices and lengths never need more, and the cap
/// keeps hostile continuation octets from overflowing the accumulator (§8.1).
const MAX_VALUE: u64 = u32::MAX as u64;

/// Appends `value` using the low `prefix_bits` of the first octet; `flags`
/// carries the representation's pattern bits above the prefix (§5.1).
pub fn encode(value: usize, prefix_bits: u8, flags: u8, dst: &mut Vec<u8>) {
    let max = (1usize << prefix_bits) - 1;
    if value < max {
        dst.push(flags | value as u8);
        return;
    }
    dst.push(flags | max as u8);
    let mut rest = value - max;
    while rest >= 128 {
        dst.push(0x80 | (rest % 128) as u8);
        rest /= 128;
    }
    dst.push(rest as u8);
}

/// Decodes an integer whose prefix is the low `prefix_bits` of `src[0]` and
/// returns it with the number of octets consumed (§5.1). Input that ends
/// mid-integer is `Truncated`, never a panic (RUSTSEC-2023-0085: a lone
/// `0x3f` with a 6-bit prefix); more than 2^32-1 is `IntegerOverflow`.
pub fn decode(src: &[u8], prefix_bits: u8) -> Result<(usize, usize), HpackError> {
    let max = (1u64 << prefix_bits) - 1;
    let first = *src.first().ok_or(HpackError::Truncated)?;
    let mut value = u64::from(first) & max;
    if value < max {
        return Ok((value as usize, 1));
    }
    for (i, &octet) in src.iter().enumerate().skip(1) {
        let shift = 7 * (i - 1);
        if shift > 28 {
            return Err(HpackError::IntegerOverflow);
        }
        value += u64::from(octet & 0x7f) << shift;
        if value > MAX_VALUE {
            return Err(HpackError::IntegerOverflow);
        }
        if octet & 0x80 == 0 {
            return Ok((value as usize, i + 1));
        }
    }
    Err(HpackError::Truncated)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enc(value: usize, prefix_bits: u8) -> Vec<u8> {
        let mut dst = Vec::new();
        encode(value, prefix_bits, 0, &mut dst);
        dst
    }

    #[test]
    fn rfc_c1_1_ten_with_5_bit_prefix() {
        assert_eq!(enc(10, 5), [0x0a]);
        assert_eq!(decode(&[0xea], 5), Ok((10, 1)));
    }

    #[test]
    fn rfc_c1_2_1337_with_5_bit_prefix() {
        assert_eq!(enc(1337, 5), [0x1f, 0x9a, 0x0a]);
        assert_eq!(decode(&[0x1f, 0x9a, 0x0a, 0xff], 5), Ok((1337, 3)));
    }

    #[test]
    fn rfc_c1_3_42_at_octet_boundary() {
        assert_eq!(enc(42, 8), [0x2a]);
        assert_eq!(decode(&[0x2a], 8), Ok((42, 1)));
    }

    #[test]
    fn round_trips_every_prefix_and_keeps_flags() {
        for prefix in 1..=8u8 {
            for value in [
                0,
                1,
                30,
                31,
                126,
                127,
                128,
                254,
                255,
                256,
                1 << 20,
                u32::MAX as usize,
            ] {
                let flags = if prefix == 8 { 0 } else { 0xffu8 << prefix };
                let mut dst = Vec::new();
                encode(value, prefix, flags, &mut dst);
                assert_eq!(dst[0] & flags, flags);
                assert_eq!(decode(&dst, prefix), Ok((value, dst.len())));
            }
        }
    }

    #[test]
    fn lone_full_prefix_is_truncated_not_a_panic() {
        assert_eq!(decode(&[0x3f], 6), Err(HpackError::Truncated));
        assert_eq!(decode(&[], 6), Err(HpackError::Truncated));
        assert_eq!(decode(&[0x1f, 0x80, 0x80], 5), Err(HpackError::Truncated));
    }

    #[test]
    fn values_above_u32_max_overflow() {
        // 31 + (2^32 - 1) needs 33 bits.
        let too_big = [0x1f, 0xff, 0xff, 0xff, 0xff, 0x0f];
        assert_eq!(decode(&too_big, 5), Err(HpackError::IntegerOverflow));
        let endless = [0x1f, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00];
        assert_eq!(decode(&endless, 5), Err(HpackError::IntegerOverflow));
    }
}
