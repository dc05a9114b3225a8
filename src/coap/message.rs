//! Zero-copy, validate-once view of one CoAP datagram (RFC 7252 §3).

use super::code::Code;

/// The only version defined; datagrams with others are silently ignored (RFC 7252 §3).
pub const VERSION: u8 = 1;
/// Separates the options from a non-empty payload (RFC 7252 §3).
pub const PAYLOAD_MARKER: u8 = 0xff;
/// TKL 9..=15 are reserved (RFC 7252 §3).
pub const MAX_TOKEN_LEN: usize = 8;

/// The 2-bit message type T (RFC 7252 §3, §4).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum MessageType {
    /// Confirmable: retransmitted until acknowledged (RFC 7252 §4.2).
    Con = 0,
    /// Non-confirmable: sent once, no ACK expected (RFC 7252 §4.3).
    Non = 1,
    /// Acknowledgement of a Confirmable message, possibly carrying the response (RFC 7252 §4.2).
    Ack = 2,
    /// Reset: the recipient cannot process a message (RFC 7252 §4.2, §4.3).
    Rst = 3,
}

impl MessageType {
    /// Decodes the low two bits; all four values are defined, so this cannot fail.
    pub const fn from_bits(bits: u8) -> Self {
        [Self::Con, Self::Non, Self::Ack, Self::Rst][(bits & 0x03) as usize]
    }
}

error_enum! {
    /// The message format rule a datagram breaks.
    FormatError {
        TooShort => "shorter than the 4-byte header plus TKL token bytes (RFC 7252 §3)",
        BadVersion => "version is not 1 (RFC 7252 §3)",
        BadTokenLength => "token length 9..15 is reserved (RFC 7252 §3)",
        ReservedOptionNibble => "option nibble 15 outside the payload marker (RFC 7252 §3.1)",
        TruncatedOption => "option extension or value runs past the datagram (RFC 7252 §3.1)",
        OptionNumberOverflow => "option number exceeds 65535 (RFC 7252 §3.1)",
        EmptyPayloadAfterMarker => "payload marker followed by no payload (RFC 7252 §3)",
        EmptyMessageNotEmpty => "code 0.00 with a token or data after the header (RFC 7252 §4.1)",
    }
}

/// A validated datagram; accessors borrow from the received bytes and cannot fail.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Message<'a> {
    bytes: &'a [u8],
    first: u8,
    code: Code,
    mid: u16,
    token: &'a [u8],
    options: &'a [u8],
    payload: &'a [u8],
}

/// Splits the fixed header (RFC 7252 §3): first byte (Ver|T|TKL), code, MID, rest.
fn read_header(bytes: &[u8]) -> Result<(u8, Code, u16, &[u8]), FormatError> {
    let [first, code, m0, m1, rest @ ..] = bytes else {
        return Err(FormatError::TooShort);
    };
    if first >> 6 != VERSION {
        return Err(FormatError::BadVersion);
    }
    Ok((*first, Code(*code), u16::from_be_bytes([*m0, *m1]), rest))
}

impl<'a> Message<'a> {
    /// Validates the whole datagram once, so nothing later can fail.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, FormatError> {
        let (first, code, mid, rest) = read_header(bytes)?;
        let tkl = usize::from(first & 0x0f);
        if tkl > MAX_TOKEN_LEN {
            return Err(FormatError::BadTokenLength);
        }
        let (token, rest) = rest.split_at_checked(tkl).ok_or(FormatError::TooShort)?;
        if code.is_empty() && !(token.is_empty() && rest.is_empty()) {
            return Err(FormatError::EmptyMessageNotEmpty);
        }
        let (options, payload) = split_options(rest)?;
        Ok(Message {
            bytes,
            first,
            code,
            mid,
            token,
            options,
            payload,
        })
    }

    /// The message type T.
    pub fn msg_type(&self) -> MessageType {
        MessageType::from_bits(self.first >> 4)
    }
    /// The request method or response code.
    pub fn code(&self) -> Code {
        self.code
    }
    /// The Message ID: matches an ACK or RST to its message, detects duplicates (RFC 7252 §4.4).
    pub fn message_id(&self) -> u16 {
        self.mid
    }
    /// The 0..=8 byte token that matches a response to its request (RFC 7252 §5.3.1).
    pub fn token(&self) -> &'a [u8] {
        self.token
    }

    /// Options in wire order: by number, repeats in sequence (RFC 7252 §3.1).
    pub fn options(&self) -> OptionIter<'a> {
        OptionIter(self.options, 0)
    }

    /// The first value of option `number`; repeatable ones (Uri-Path) via [`Message::options`].
    pub fn option(&self, number: u16) -> Option<&'a [u8]> {
        self.options().find(|&(n, _)| n == number).map(|(_, v)| v)
    }

    /// The bytes after the payload marker; empty when there is none.
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    /// The whole datagram as received.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }
}

/// Yields `(number, value)` from an option region validated by [`Message::parse`];
/// holds the remaining bytes and the previous option number.
#[derive(Clone, Debug)]
pub struct OptionIter<'a>(&'a [u8], u16);

impl<'a> Iterator for OptionIter<'a> {
    type Item = (u16, &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        // A validated region holds only well-formed options, so End is the only other case.
        let Ok(Step::Option(number, value, rest)) = read_option(self.0, self.1) else {
            return None;
        };
        (self.0, self.1) = (rest, number);
        Some((number, value))
    }
}

/// Reads only header and token, to answer a datagram that failed [`Message::parse`]: a CON
/// with a format error is rejected by an RST echoing its Message ID (RFC 7252 §4.2; the RST
/// is Empty, so no token), a NON may be ignored or rejected alike (§4.3), ACK/RST ignored.
/// `None` below 4 bytes or for an unknown version, which §3 says to ignore silently; the
/// token is empty if TKL is reserved or the datagram is too short to hold it.
pub fn peek_header(bytes: &[u8]) -> Option<(MessageType, u16, &[u8])> {
    let (first, _, mid, rest) = read_header(bytes).ok()?;
    let tkl = usize::from(first & 0x0f);
    let token = rest.get(..tkl).filter(|_| tkl <= MAX_TOKEN_LEN);
    let token = token.unwrap_or_default();
    Some((MessageType::from_bits(first >> 4), mid, token))
}

/// One step of the option walk (RFC 7252 §3.1).
pub(super) enum Step<'a> {
    End,
    Marker(&'a [u8]),
    /// Option number, value, and the bytes after it.
    Option(u16, &'a [u8], &'a [u8]),
}

/// Decodes a delta or length nibble and its extension bytes (RFC 7252 §3.1).
fn extended(nibble: u8, rest: &[u8]) -> Result<(u32, &[u8]), FormatError> {
    match (nibble, rest) {
        (0..=12, _) => Ok((u32::from(nibble), rest)),
        (13, [b, tail @ ..]) => Ok((u32::from(*b) + 13, tail)),
        (14, [b0, b1, tail @ ..]) => Ok((u32::from(u16::from_be_bytes([*b0, *b1])) + 269, tail)),
        (13 | 14, _) => Err(FormatError::TruncatedOption),
        _ => Err(FormatError::ReservedOptionNibble),
    }
}

/// Reads the option after option number `prev` (RFC 7252 §3.1).
pub(super) fn read_option(buf: &[u8], prev: u16) -> Result<Step<'_>, FormatError> {
    let Some((&first, rest)) = buf.split_first() else {
        return Ok(Step::End);
    };
    if first == PAYLOAD_MARKER {
        return Ok(Step::Marker(rest));
    }
    let (delta, rest) = extended(first >> 4, rest)?;
    let (len, rest) = extended(first & 0x0f, rest)?;
    let number = u16::try_from(u32::from(prev) + delta);
    let number = number.map_err(|_| FormatError::OptionNumberOverflow)?;
    let len = usize::try_from(len).map_err(|_| FormatError::TruncatedOption)?;
    let split = rest.split_at_checked(len);
    let (value, rest) = split.ok_or(FormatError::TruncatedOption)?;
    Ok(Step::Option(number, value, rest))
}

/// Validates the options and splits them from the payload (RFC 7252 §3).
fn split_options(buf: &[u8]) -> Result<(&[u8], &[u8]), FormatError> {
    let (mut rest, mut prev) = (buf, 0);
    loop {
        match read_option(rest, prev)? {
            Step::End => return Ok((buf, &[])),
            Step::Marker([]) => return Err(FormatError::EmptyPayloadAfterMarker),
            Step::Marker(payload) => {
                let used = buf.len().saturating_sub(rest.len());
                return Ok((buf.get(..used).unwrap_or_default(), payload));
            }
            Step::Option(number, _, after) => (prev, rest) = (number, after),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::option::{BlockValue, BLOCK2, ECHO, REQUEST_TAG, URI_PATH};
    use super::FormatError::*;
    use super::*;

    /// The options of a datagram as (number, value length), or its format error.
    fn parsed(bytes: &[u8]) -> Result<Vec<(u16, usize)>, FormatError> {
        Message::parse(bytes).map(|m| m.options().map(|(n, v)| (n, v.len())).collect())
    }

    /// One named test per rule: a datagram and what parsing it must give.
    macro_rules! parses {
        ($($name:ident: $bytes:literal => $want:expr,)*) => {
            $(#[test] fn $name() { assert_eq!(parsed($bytes), $want); })*
        };
    }

    parses! {
        header_shorter_than_four_bytes_is_format_error: b"\x40\x01\0" => Err(TooShort),
        token_shorter_than_tkl_is_format_error: b"\x42\x01\0\0t" => Err(TooShort),
        version_2_is_format_error: b"\x80\x01\0\0" => Err(BadVersion),
        tkl_9_is_format_error: b"\x49\x01\0\0abcdefghi" => Err(BadTokenLength),
        bare_empty_message_parses: b"\x60\0\0\x01" => Ok(vec![]),
        empty_message_with_token_is_format_error: b"\x61\0\0\x01t" => Err(EmptyMessageNotEmpty),
        empty_message_with_payload_is_format_error:
            b"\x70\0\0\x01\xffx" => Err(EmptyMessageNotEmpty),
        delta_nibble_15_is_format_error: b"\x40\x01\0\0\xf0" => Err(ReservedOptionNibble),
        length_nibble_15_is_format_error: b"\x40\x01\0\0\x1f\0" => Err(ReservedOptionNibble),
        option_number_65536_is_format_error:
            b"\x40\x01\0\0\xe0\xfe\xf3" => Err(OptionNumberOverflow),
        delta_sum_past_65535_is_format_error:
            b"\x40\x01\0\0\xe0\xfe\xf2\x10" => Err(OptionNumberOverflow),
        missing_delta_extension_is_format_error: b"\x40\x01\0\0\xd0" => Err(TruncatedOption),
        short_length_extension_is_format_error: b"\x40\x01\0\0\x1e\0" => Err(TruncatedOption),
        truncated_option_value_is_format_error: b"\x40\x01\0\0\x13ab" => Err(TruncatedOption),
        payload_marker_without_payload_is_format_error:
            b"\x40\x01\0\0\xff" => Err(EmptyPayloadAfterMarker),
        option_delta_13_uses_one_extension_byte: b"\x40\x01\0\0\xd0\0" => Ok(vec![(13, 0)]),
        option_delta_13_extension_255_is_268: b"\x40\x01\0\0\xd0\xff" => Ok(vec![(268, 0)]),
        echo_252_is_delta_13_plus_239: b"\x40\x01\0\0\xd0\xef" => Ok(vec![(ECHO, 0)]),
        option_delta_14_uses_two_extension_bytes: b"\x40\x01\0\0\xe0\0\0" => Ok(vec![(269, 0)]),
        request_tag_292_is_delta_269_plus_23:
            b"\x40\x01\0\0\xe0\0\x17" => Ok(vec![(REQUEST_TAG, 0)]),
        option_number_65535_still_fits: b"\x40\x01\0\0\xe0\xfe\xf2" => Ok(vec![(65535, 0)]),
        option_length_13_uses_one_extension_byte:
            b"\x40\x01\0\0\x1d\0abcdefghijklm" => Ok(vec![(1, 13)]),
    }

    #[test]
    fn option_length_14_uses_two_extension_bytes() {
        let bytes = [&b"\x40\x01\0\0\x1e\0\x1f"[..], &[8; 300]].concat();
        assert_eq!(parsed(&bytes), Ok(vec![(1, 300)]));
    }

    #[test]
    fn header_fields_and_token_are_exposed() {
        let m = Message::parse(&[0x52, 0x45, 0xbe, 0xef, 0xaa, 0xbb]).unwrap();
        assert_eq!((m.msg_type(), m.code()), (MessageType::Non, Code::CONTENT));
        assert_eq!((m.message_id(), m.token()), (0xbeef, &[0xaa, 0xbb][..]));
        assert!(m.payload().is_empty() && m.options().next().is_none());
    }

    #[test]
    fn uri_path_segments_and_block2_are_read_in_order() {
        let bytes = b"\x41\x01\x12\x34\xab\xb7sensors\x04temp\xc1\x26\xffhi";
        let msg = Message::parse(bytes).unwrap();
        let path = msg.options().filter(|&(n, _)| n == URI_PATH);
        assert!(path.map(|(_, v)| v).eq([b"sensors".as_slice(), b"temp"]));
        assert_eq!(msg.option(URI_PATH), Some(b"sensors".as_slice()));
        let block = BlockValue::decode(msg.option(BLOCK2).unwrap());
        assert_eq!(block, Ok(BlockValue::new(2, false, 6)));
        assert_eq!((msg.token(), msg.option(12)), (&[0xab][..], None));
        assert_eq!((msg.payload(), msg.as_bytes()), (&b"hi"[..], &bytes[..]));
    }

    #[test]
    fn peek_header_reads_mid_of_malformed_con_but_not_bad_version() {
        let bad = [0x42, 0x01, 0xab, 0xcd, 1, 2, 0xf0];
        assert!(Message::parse(&bad).is_err());
        let con = MessageType::Con;
        assert_eq!(peek_header(&bad), Some((con, 0xabcd, &[1, 2][..])));
        assert_eq!(peek_header(&[0x4f, 0x01, 0, 7]), Some((con, 7, &[][..])));
        assert_eq!(peek_header(&[0x40, 0x01, 0]), None);
        assert_eq!(peek_header(&[0x00, 0x01, 0, 0]), None);
    }
}
