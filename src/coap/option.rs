//! Option numbers, their property bits and value formats (RFC 7252 §5.4, §5.10, §12.2).

use std::ops::Deref;

/// Defines the option number constants and [`is_known`] from one list.
macro_rules! option_numbers {
    ($($name:ident = $number:literal,)*) => {
        $(#[doc = concat!("Option number ", $number, ".")] pub const $name: u16 = $number;)*

        /// Whether this codec knows it. An endpoint rejects unknown critical options (RFC 7252
        /// §5.4.1); a proxy goes by class instead ([`proxy_must_reject`]).
        pub const fn is_known(number: u16) -> bool {
            matches!(number, $($number)|*)
        }
    };
}

option_numbers! {
    // RFC 7252 §5.10
    IF_MATCH = 1, URI_HOST = 3, ETAG = 4, IF_NONE_MATCH = 5, URI_PORT = 7, LOCATION_PATH = 8,
    URI_PATH = 11, CONTENT_FORMAT = 12, MAX_AGE = 14, URI_QUERY = 15, ACCEPT = 17,
    LOCATION_QUERY = 20, PROXY_URI = 35, PROXY_SCHEME = 39, SIZE1 = 60,
    OBSERVE = 6,                                    // RFC 7641 §2
    HOP_LIMIT = 16,                                 // RFC 8768 §3
    BLOCK2 = 23, BLOCK1 = 27, SIZE2 = 28,           // RFC 7959 §2.1, §4
    Q_BLOCK1 = 19, Q_BLOCK2 = 31,                   // RFC 9177 §4
    ECHO = 252, REQUEST_TAG = 292,                  // RFC 9175 §2.2, §3.2
    NO_RESPONSE = 258,                              // RFC 7967 §2
    OSCORE = 9,                                     // RFC 8613 §2
}

/// Odd numbers are critical: a recipient that does not know one must reject (RFC 7252 §5.4.6).
pub const fn is_critical(number: u16) -> bool {
    number & 0x01 != 0
}

/// Bit 1: a proxy must not forward it without understanding it (RFC 7252 §5.4.6).
pub const fn is_unsafe(number: u16) -> bool {
    number & 0x02 != 0
}

/// Whether a proxy must refuse a message carrying this option (RFC 7252 §5.7.1, §5.7.2): an
/// unsafe option it does not recognise. The critical/elective rules are for non-proxying
/// endpoints (§5.4.1); a safe-to-forward option is forwarded whether the proxy knows it or
/// not, critical or not, in both directions. That is what lets end-to-end protection such
/// as OSCORE (option 9: critical, safe-to-forward, RFC 8613 §2) pass through.
pub const fn proxy_must_reject(number: u16) -> bool {
    is_unsafe(number) && !is_known(number)
}

/// Whether the option may occur more than once in a message (RFC 7252 §5.10 Table 4, RFC
/// 9175 §3.2); an option this codec does not know is taken as repeatable, since nothing says
/// otherwise. A supernumerary occurrence of one that is not counts as unrecognised (§5.4.5).
pub const fn is_repeatable(number: u16) -> bool {
    matches!(
        number,
        IF_MATCH | ETAG | LOCATION_PATH | URI_PATH | URI_QUERY | LOCATION_QUERY | REQUEST_TAG
    ) || !is_known(number)
}

/// Safe options with NoCacheKey bits 0b111 stay out of the cache key (RFC 7252 §5.4.6).
pub const fn is_no_cache_key(number: u16) -> bool {
    number & 0x1e == 0x1c
}

error_enum! {
    /// A value that breaks the format its option requires.
    OptionValueError {
        TooLong => "uint value longer than 4 bytes, or 3 for blocks (RFC 7252 §3.2)",
        ReservedSzx => "block SZX 7 is reserved (RFC 7959 §2.2)",
        BlockNumTooLarge => "block NUM exceeds 20 bits (RFC 7959 §2.2)",
    }
}

/// A minimally encoded uint held inline, so encoding an option value never allocates.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct UintValue([u8; 4], u8);

impl Deref for UintValue {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.0.get(usize::from(self.1)..).unwrap_or_default()
    }
}

/// Encodes without leading zero bytes, so 0 is the empty value (RFC 7252 §3.2).
pub fn encode_uint(value: u32) -> UintValue {
    UintValue(value.to_be_bytes(), (value.leading_zeros() / 8) as u8)
}

/// Decodes big-endian; leading zeros are tolerated, over 4 bytes is an error (RFC 7252 §3.2).
pub fn decode_uint(value: &[u8]) -> Result<u32, OptionValueError> {
    if value.len() > 4 {
        return Err(OptionValueError::TooLong);
    }
    Ok(value.iter().fold(0, |acc, &b| (acc << 8) | u32::from(b)))
}

/// A Block1/Block2 value: block number, more flag and size exponent (RFC 7959 §2.2).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct BlockValue {
    /// NUM: the block's index, counting from 0 (20 bits).
    pub num: u32,
    /// M: more blocks follow this one (RFC 7959 §2.2).
    pub more: bool,
    /// SZX: the size exponent; the block holds 2^(SZX+4) bytes, 7 is reserved.
    pub szx: u8,
}

impl BlockValue {
    /// NUM has 20 bits (RFC 7959 §2.2).
    pub const MAX_NUM: u32 = (1 << 20) - 1;

    /// Unchecked; [`BlockValue::encode`] validates.
    pub const fn new(num: u32, more: bool, szx: u8) -> Self {
        BlockValue { num, more, szx }
    }

    /// Block size 2^(SZX+4) bytes (RFC 7959 §2.2); SZX is clamped to 6 (1024).
    pub fn size(self) -> usize {
        16 << self.szx.min(6)
    }

    /// Decodes a 0..=3 byte value (RFC 7959 §2.2).
    pub fn decode(value: &[u8]) -> Result<Self, OptionValueError> {
        if value.len() > 3 {
            return Err(OptionValueError::TooLong);
        }
        let v = decode_uint(value)?;
        match (v & 0x07) as u8 {
            7 => Err(OptionValueError::ReservedSzx),
            szx => Ok(BlockValue::new(v >> 4, v & 0x08 != 0, szx)),
        }
    }

    /// Encodes minimally; rejects SZX >= 7 and NUM >= 2^20 (RFC 7959 §2.2).
    pub fn encode(self) -> Result<UintValue, OptionValueError> {
        if self.szx >= 7 {
            return Err(OptionValueError::ReservedSzx);
        }
        if self.num > Self::MAX_NUM {
            return Err(OptionValueError::BlockNumTooLarge);
        }
        let flags = (u32::from(self.more) << 3) | u32::from(self.szx);
        Ok(encode_uint((self.num << 4) | flags))
    }
}

#[cfg(test)]
mod tests {
    use super::OptionValueError::*;
    use super::*;

    #[test]
    fn property_bits_follow_option_number_and_known_ones_are_listed() {
        assert!(is_critical(URI_HOST) && is_unsafe(URI_HOST) && !is_no_cache_key(URI_HOST));
        assert!(!is_critical(ETAG) && !is_unsafe(ETAG) && !is_no_cache_key(ETAG));
        assert!(!is_critical(MAX_AGE) && is_unsafe(MAX_AGE) && is_critical(PROXY_URI));
        assert!(is_no_cache_key(SIZE1) && is_no_cache_key(SIZE2) && !is_no_cache_key(BLOCK1));
        let known: Vec<u16> = (0..=u16::MAX).filter(|&n| is_known(n)).collect();
        let want = [
            1, 3, 4, 5, 6, 7, 8, 9, 11, 12, 14, 15, 16, 17, 19, 20, 23, 27, 28, 31, 35, 39,
        ];
        assert_eq!(known, [&want[..], &[60, 252, 258, 292]].concat());
        // By class: OSCORE and unknown safe options pass, critical or not; unknown unsafe
        // options do not, elective or not.
        assert!(is_critical(OSCORE) && !is_unsafe(OSCORE) && !proxy_must_reject(OSCORE));
        assert!(!proxy_must_reject(65001) && !proxy_must_reject(2048));
        assert!(proxy_must_reject(66) && proxy_must_reject(67) && !proxy_must_reject(PROXY_URI));
        assert!(is_repeatable(URI_PATH) && is_repeatable(ETAG) && is_repeatable(65001));
        assert!(!is_repeatable(PROXY_URI) && !is_repeatable(BLOCK2) && !is_repeatable(OSCORE));
    }

    #[test]
    fn uint_is_minimal_on_encode_and_lenient_up_to_4_bytes_on_decode() {
        let encoded = [0, 255, 256, 0x0102_0304].map(|v| encode_uint(v).to_vec());
        assert_eq!(encoded, [vec![], vec![255], vec![1, 0], vec![1, 2, 3, 4]]);
        for v in [0, 1, 255, 256, 65535, 65536, u32::MAX] {
            assert_eq!(decode_uint(&encode_uint(v)), Ok(v));
        }
        assert_eq!(decode_uint(&[0, 0, 0, 60]), Ok(60));
        assert_eq!(decode_uint(&[0; 5]), Err(TooLong));
    }

    #[test]
    fn block_szx_7_is_reserved_and_num_must_fit_20_bits() {
        assert_eq!(BlockValue::decode(&[0x07]), Err(ReservedSzx));
        assert_eq!(BlockValue::new(0, false, 7).encode(), Err(ReservedSzx));
        assert_eq!(BlockValue::decode(&[0; 4]), Err(TooLong));
        let too_big = BlockValue::new(1 << 20, false, 0);
        assert_eq!(too_big.encode(), Err(BlockNumTooLarge));
        let max = BlockValue::new(BlockValue::MAX_NUM, true, 6).encode();
        assert_eq!(max.as_deref(), Ok(&[0xff, 0xff, 0xfe][..]));
    }

    #[test]
    fn block_value_round_trips_and_sizes() {
        let b = BlockValue::new(2, true, 6);
        assert_eq!((b.encode().as_deref(), b.size()), (Ok(&[0x2e][..]), 1024));
        assert_eq!(BlockValue::decode(&[0x2e]), Ok(b));
        let zero = BlockValue::new(0, false, 0);
        assert_eq!((zero.encode().as_deref(), zero.size()), (Ok(&[][..]), 16));
        assert_eq!(BlockValue::decode(&[]), Ok(zero));
    }
}
