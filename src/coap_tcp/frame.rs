//! The RFC 8323 message format: how one CoAP message is delimited on a byte stream (§3.2,
//! TCP and TLS) and inside a WebSocket frame (§4.4), and how it maps to the UDP format the
//! engine speaks (RFC 7252 §3).
//!
//! Past the header the formats agree: token, options (the same delta encoding) and payload are
//! byte for byte what a UDP datagram carries after its Message ID. So a message converts to a
//! datagram by swapping the header, and the datagram's own validation ([`crate::coap::Message::parse`])
//! is the one that checks options.
//!
//! ```text
//! stream:    Len(4) TKL(4) | Extended Length (0, 1, 2 or 4 bytes) | Code | Token | Options... Payload
//! WebSocket: 0(4)   TKL(4) |                                        Code | Token | Options... Payload
//! ```
//! Len counts the bytes from the first option on (not the code, not the token): 0 to 12 as
//! is, 13 + one byte, 269 + two bytes, 65805 + four bytes.

use crate::coap::{error_enum, Code, MessageType, MAX_TOKEN_LEN};

/// How messages are delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// coap+tcp, coaps+tcp (§3.2): each message carries its length.
    Stream,
    /// coap+ws, coaps+ws (§4.4): one message per WebSocket binary frame, Len always 0.
    WebSocket,
}

error_enum! {
    /// Why a byte stream cannot be read as RFC 8323 messages: the connection is aborted.
    FrameError {
        BadTokenLength => "token length 9..15 is reserved (RFC 8323 §3.2, RFC 7252 §3)",
        TooLarge => "message larger than the Max-Message-Size this end announced (RFC 8323 §5.3.1)",
        TooShort => "frame shorter than its header, code and token (RFC 8323 §4.4)",
        LengthInWebSocket => "Len is not 0 in a WebSocket frame (RFC 8323 §4.4)",
    }
}

impl FrameError {
    /// What an Abort says of it (§5.6): short, for the peer's log.
    pub fn diagnostic(self) -> &'static str {
        match self {
            FrameError::BadTokenLength => "token length 9..15 is reserved",
            FrameError::TooLarge => "message larger than our Max-Message-Size",
            FrameError::TooShort => "frame shorter than its header",
            FrameError::LengthInWebSocket => "Len is not 0 in a WebSocket frame",
        }
    }
}

/// Takes the whole messages at the start of `input` (stream framing, each at most `max`
/// bytes), handing each to `on_frame` while it returns true, and drops what was taken. An
/// error names a message that can never be read; what follows it stays.
pub fn take_stream_frames(
    input: &mut Vec<u8>,
    max: usize,
    mut on_frame: impl FnMut(&Frame<'_>) -> bool,
) -> Result<(), FrameError> {
    let mut used = 0;
    let read = loop {
        match decode_stream(&input[used..], max) {
            Ok(Some((f, n))) => {
                used += n;
                if !on_frame(&f) {
                    break Ok(());
                }
            }
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    input.drain(..used);
    read
}

/// One message as framed: its code, token and the bytes from the first option on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The method, response or signalling code.
    pub code: Code,
    /// 0 to 8 bytes.
    pub token: &'a [u8],
    /// Options, payload marker and payload, undecoded.
    pub body: &'a [u8],
}

impl Frame<'_> {
    /// The frame's size as Max-Message-Size counts it: the whole message, header included.
    pub fn size(&self) -> usize {
        header_len(self.body.len()) + 1 + self.token.len() + self.body.len()
    }

    /// The frame as a UDP datagram of type `ty` and Message ID `mid` (RFC 7252 §3), for the
    /// engine; not yet validated.
    pub fn to_datagram(&self, out: &mut Vec<u8>, ty: MessageType, mid: u16) {
        out.clear();
        out.reserve(4 + self.token.len() + self.body.len());
        out.push(0x40 | (ty as u8) << 4 | self.token.len() as u8);
        out.push(self.code.0);
        out.extend_from_slice(&mid.to_be_bytes());
        out.extend_from_slice(self.token);
        out.extend_from_slice(self.body);
    }
}

/// The type and Message ID a stream core writes in the header of each message it hands the
/// engine ([`Frame::to_engine`]). RFC 8323 messages have neither (§2.2, §3.2): these are
/// placeholders, fixed so that nothing is made up per message, and the engine ignores both
/// for a peer without a message layer (the engine's `Peer::has_message_layer`).
pub const ENGINE_HEADER: (MessageType, u16) = (MessageType::Con, 0);

impl Frame<'_> {
    /// The frame in the engine's message layout (RFC 7252 §3), with the placeholder header
    /// [`ENGINE_HEADER`]; not yet validated.
    pub fn to_engine(&self, out: &mut Vec<u8>) {
        let (ty, mid) = ENGINE_HEADER;
        self.to_datagram(out, ty, mid);
    }
}

/// The first byte's Len nibble and the extended length bytes for a body of `len` bytes.
fn length_field(len: usize) -> (u8, [u8; 4], usize) {
    match len {
        0..=12 => (len as u8, [0; 4], 0),
        13..=268 => (13, [(len - 13) as u8, 0, 0, 0], 1),
        269..=65804 => {
            let [a, b] = ((len - 269) as u16).to_be_bytes();
            (14, [a, b, 0, 0], 2)
        }
        _ => (15, ((len - 65805) as u32).to_be_bytes(), 4),
    }
}

/// Bytes before the code for a body of `len` bytes on a stream.
fn header_len(len: usize) -> usize {
    1 + length_field(len).2
}

/// Appends one message with `framing` to `out`.
pub fn encode(out: &mut Vec<u8>, framing: Framing, frame: &Frame<'_>) {
    let tkl = frame.token.len().min(MAX_TOKEN_LEN);
    match framing {
        Framing::Stream => {
            let (nibble, ext, n) = length_field(frame.body.len());
            out.push(nibble << 4 | tkl as u8);
            out.extend_from_slice(&ext[..n]);
        }
        Framing::WebSocket => out.push(tkl as u8),
    }
    out.push(frame.code.0);
    out.extend_from_slice(&frame.token[..tkl]);
    out.extend_from_slice(frame.body);
}

/// The message at the front of `buf` on a stream and the bytes it took, `Ok(None)` while it
/// is incomplete. A message over `max_size` (as [`Frame::size`] counts) is an error as soon
/// as its header says so, before its bytes are buffered.
pub fn decode_stream(
    buf: &[u8],
    max_size: usize,
) -> Result<Option<(Frame<'_>, usize)>, FrameError> {
    let Some(&first) = buf.first() else {
        return Ok(None);
    };
    let tkl = usize::from(first & 0x0f);
    if tkl > MAX_TOKEN_LEN {
        return Err(FrameError::BadTokenLength);
    }
    let ext = match first >> 4 {
        13 => 1,
        14 => 2,
        15 => 4,
        _ => 0,
    };
    let Some(ext_bytes) = buf.get(1..1 + ext) else {
        return Ok(None);
    };
    let body_len = match (first >> 4, ext_bytes) {
        (13, [a]) => 13 + usize::from(*a),
        (14, [a, b]) => 269 + usize::from(u16::from_be_bytes([*a, *b])),
        (15, [a, b, c, d]) => 65805 + u32::from_be_bytes([*a, *b, *c, *d]) as usize,
        (len, _) => usize::from(len),
    };
    let total = (1 + ext + 1 + tkl).saturating_add(body_len);
    if total > max_size {
        return Err(FrameError::TooLarge);
    }
    let Some(message) = buf.get(1 + ext..total) else {
        return Ok(None);
    };
    let frame = Frame {
        code: Code(message[0]),
        token: &message[1..1 + tkl],
        body: &message[1 + tkl..],
    };
    Ok(Some((frame, total)))
}

/// The message in one WebSocket binary frame's payload.
pub fn decode_ws(payload: &[u8], max_size: usize) -> Result<Frame<'_>, FrameError> {
    let [first, code, rest @ ..] = payload else {
        return Err(FrameError::TooShort);
    };
    if first >> 4 != 0 {
        return Err(FrameError::LengthInWebSocket);
    }
    let tkl = usize::from(first & 0x0f);
    if tkl > MAX_TOKEN_LEN {
        return Err(FrameError::BadTokenLength);
    }
    if payload.len() > max_size {
        return Err(FrameError::TooLarge);
    }
    let (token, body) = rest.split_at_checked(tkl).ok_or(FrameError::TooShort)?;
    Ok(Frame {
        code: Code(*code),
        token,
        body,
    })
}

/// A UDP datagram (already validated) as a frame: its code, token and the bytes after them.
pub fn from_datagram(datagram: &[u8]) -> Option<Frame<'_>> {
    let [first, code, _, _, rest @ ..] = datagram else {
        return None;
    };
    let tkl = usize::from(first & 0x0f);
    let (token, body) = rest.split_at_checked(tkl.min(MAX_TOKEN_LEN))?;
    Some(Frame {
        code: Code(*code),
        token,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coap::Message;

    fn frame(body: &[u8]) -> Frame<'_> {
        Frame {
            code: Code::new(0, 1),
            token: b"tok",
            body,
        }
    }

    #[test]
    fn every_length_class_round_trips_on_a_stream() {
        for len in [0, 1, 12, 13, 268, 269, 65804, 65805, 70000] {
            let body = vec![0xffu8; len];
            let mut out = Vec::new();
            encode(&mut out, Framing::Stream, &frame(&body));
            assert_eq!(out.len(), frame(&body).size(), "{len}");
            // Every prefix is incomplete, the whole is one message.
            for cut in [0, 1, out.len() / 2, out.len() - 1] {
                assert_eq!(
                    decode_stream(&out[..cut], usize::MAX),
                    Ok(None),
                    "{len} {cut}"
                );
            }
            let (back, used) = decode_stream(&out, usize::MAX).unwrap().unwrap();
            assert_eq!((back, used), (frame(&body), out.len()), "{len}");
        }
    }

    #[test]
    fn the_rfc_examples_lengths_are_where_the_rfc_puts_them() {
        // RFC 8323 §3.2: Len 13 means one extension byte, the length minus 13.
        let mut out = Vec::new();
        encode(&mut out, Framing::Stream, &frame(&[0xff; 20]));
        assert_eq!(&out[..3], &[0xd3, 7, 0x01]);
        let mut ws = Vec::new();
        encode(&mut ws, Framing::WebSocket, &frame(&[0xff; 20]));
        assert_eq!(&ws[..2], &[0x03, 0x01]);
        assert_eq!(decode_ws(&ws, 1152), Ok(frame(&[0xff; 20])));
    }

    #[test]
    fn oversized_and_malformed_frames_are_errors() {
        let mut out = Vec::new();
        encode(&mut out, Framing::Stream, &frame(&[0xff; 2000]));
        // Known from the header alone: three bytes suffice.
        assert_eq!(decode_stream(&out[..3], 1152), Err(FrameError::TooLarge));
        assert_eq!(
            decode_stream(&[0x09], 1152),
            Err(FrameError::BadTokenLength)
        );
        assert_eq!(
            decode_stream(&[0xf0, 0xff, 0xff, 0xff, 0xff], usize::MAX),
            Ok(None)
        );
        assert_eq!(
            decode_ws(&[0x10, 1], 1152),
            Err(FrameError::LengthInWebSocket)
        );
        assert_eq!(decode_ws(&[0x02, 1, 9], 1152), Err(FrameError::TooShort));
        assert_eq!(decode_ws(&[0x00], 1152), Err(FrameError::TooShort));
    }

    #[test]
    fn a_frame_is_a_datagram_with_another_header() {
        let body = [0xb5, b'h', b'e', b'l', b'l', b'o', 0xff, b'x'];
        let mut datagram = Vec::new();
        frame(&body).to_datagram(&mut datagram, MessageType::Con, 0x1234);
        let msg = Message::parse(&datagram).unwrap();
        assert_eq!(msg.message_id(), 0x1234);
        assert_eq!(msg.token(), b"tok");
        assert_eq!(msg.option(11), Some(&b"hello"[..]));
        assert_eq!(msg.payload(), b"x");
        assert_eq!(from_datagram(&datagram), Some(frame(&body)));
    }
}
