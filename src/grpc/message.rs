//! Length-Prefixed-Message framing (doc/PROTOCOL-HTTP2.md, "Requests"): a 1-byte
//! Compressed-Flag, a 4-byte big-endian Message-Length, then the message.
//!
//! HTTP/2 DATA frames cut this stream anywhere, so [`MessageDecoder`] takes fragments of any size
//! and yields whole messages; the length is checked against the limit as soon as the 5-byte
//! prefix is complete, before any of the body is buffered.

use std::collections::VecDeque;

use super::status::{Code, Status};

/// Bytes before each message: the compressed flag and the length.
pub const PREFIX_LEN: usize = 5;

/// gRPC's default limit for a received message (4 MiB).
pub const DEFAULT_MAX_MESSAGE_LEN: usize = 4 * 1024 * 1024;

/// A declared length is only a claim until the bytes arrive: reserve at most this much up front.
const INITIAL_BODY_CAPACITY: usize = 64 * 1024;

/// One received message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Compressed with the call's `grpc-encoding`; only possible when one was negotiated.
    pub compressed: bool,
    /// The message bytes after the 5-byte length prefix (protobuf, unless compressed).
    pub payload: Vec<u8>,
}

/// Where the decoder is inside the current message.
#[derive(Debug)]
enum State {
    Prefix {
        buf: [u8; PREFIX_LEN],
        have: usize,
    },
    Body {
        compressed: bool,
        buf: Vec<u8>,
        len: usize,
    },
    /// A violation was found; every later call returns it again.
    Failed(Status),
}

/// Incremental decoder for one direction of one call.
#[derive(Debug)]
pub struct MessageDecoder {
    max_len: usize,
    /// A `grpc-encoding` other than identity was declared, so compressed messages are allowed.
    encoding_negotiated: bool,
    state: State,
    ready: VecDeque<Message>,
}

impl MessageDecoder {
    /// `max_len` bounds each message (larger ones fail with RESOURCE_EXHAUSTED);
    /// `encoding_negotiated` says whether the peer declared a `grpc-encoding` for this call.
    pub fn new(max_len: usize, encoding_negotiated: bool) -> Self {
        MessageDecoder {
            max_len,
            encoding_negotiated,
            state: State::Prefix {
                buf: [0; PREFIX_LEN],
                have: 0,
            },
            ready: VecDeque::new(),
        }
    }

    /// Consumes one fragment (e.g. a DATA frame's payload). Complete messages are queued for
    /// [`pop`](Self::pop); an error is final, and the call should end with that status.
    pub fn push(&mut self, mut data: &[u8]) -> Result<(), Status> {
        while !data.is_empty() || self.body_complete() {
            data = self.step(data)?;
        }
        Ok(())
    }

    /// The next complete message, in arrival order.
    pub fn pop(&mut self) -> Option<Message> {
        self.ready.pop_front()
    }

    /// The peer ended its stream: an unfinished message is an error (INTERNAL).
    pub fn finish(&self) -> Result<(), Status> {
        match &self.state {
            State::Failed(status) => Err(status.clone()),
            State::Prefix { have: 0, .. } => Ok(()),
            _ => Err(Status::new(
                Code::Internal,
                "stream ended in the middle of a message",
            )),
        }
    }

    fn body_complete(&self) -> bool {
        matches!(&self.state, State::Body { buf, len, .. } if buf.len() == *len)
    }

    /// Advances by one state transition, returning the unconsumed input.
    fn step<'a>(&mut self, data: &'a [u8]) -> Result<&'a [u8], Status> {
        match &mut self.state {
            State::Failed(status) => Err(status.clone()),
            State::Prefix { buf, have } => {
                let n = (PREFIX_LEN - *have).min(data.len());
                buf[*have..*have + n].copy_from_slice(&data[..n]);
                *have += n;
                if *have == PREFIX_LEN {
                    let prefix = *buf;
                    self.start_body(prefix)?;
                }
                Ok(&data[n..])
            }
            State::Body {
                compressed,
                buf,
                len,
            } => {
                let n = (*len - buf.len()).min(data.len());
                buf.extend_from_slice(&data[..n]);
                if buf.len() == *len {
                    let message = Message {
                        compressed: *compressed,
                        payload: std::mem::take(buf),
                    };
                    self.ready.push_back(message);
                    self.state = State::Prefix {
                        buf: [0; PREFIX_LEN],
                        have: 0,
                    };
                }
                Ok(&data[n..])
            }
        }
    }

    /// Validates a complete prefix and moves to the body (possibly empty).
    fn start_body(&mut self, prefix: [u8; PREFIX_LEN]) -> Result<(), Status> {
        let checked = self.check_prefix(prefix);
        self.state = match &checked {
            Ok((compressed, len)) => State::Body {
                compressed: *compressed,
                buf: Vec::with_capacity((*len).min(INITIAL_BODY_CAPACITY)),
                len: *len,
            },
            Err(status) => State::Failed(status.clone()),
        };
        checked.map(|_| ())
    }

    fn check_prefix(&self, prefix: [u8; PREFIX_LEN]) -> Result<(bool, usize), Status> {
        let compressed = match prefix[0] {
            0 => false,
            1 if self.encoding_negotiated => true,
            1 => {
                return Err(Status::new(
                    Code::Internal,
                    "compressed message without a negotiated grpc-encoding",
                ))
            }
            flag => {
                return Err(Status::new(
                    Code::Internal,
                    format!("invalid compressed flag {flag}"),
                ))
            }
        };
        let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]);
        match usize::try_from(len) {
            Ok(len) if len <= self.max_len => Ok((compressed, len)),
            _ => Err(Status::new(
                Code::ResourceExhausted,
                format!(
                    "received message larger than max ({len} vs. {})",
                    self.max_len
                ),
            )),
        }
    }
}

/// Appends `message` to `dst` with an uncompressed prefix. Fails (RESOURCE_EXHAUSTED) only for a
/// message whose length does not fit the 4-byte field.
pub fn encode_message(dst: &mut Vec<u8>, message: &[u8]) -> Result<(), Status> {
    let len = u32::try_from(message.len()).map_err(|_| {
        Status::new(
            Code::ResourceExhausted,
            "message longer than 4 GiB cannot be framed",
        )
    })?;
    dst.reserve(PREFIX_LEN + message.len());
    dst.push(0);
    dst.extend_from_slice(&len.to_be_bytes());
    dst.extend_from_slice(message);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(messages: &[&[u8]]) -> Vec<u8> {
        let mut wire = Vec::new();
        for m in messages {
            encode_message(&mut wire, m).unwrap();
        }
        wire
    }

    fn drain(decoder: &mut MessageDecoder) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| decoder.pop())
            .map(|m| m.payload)
            .collect()
    }

    #[test]
    fn encoding_writes_flag_and_big_endian_length() {
        assert_eq!(framed(&[b"abc"]), [0, 0, 0, 0, 3, b'a', b'b', b'c']);
        assert_eq!(framed(&[b""]), [0, 0, 0, 0, 0]);
    }

    #[test]
    fn whole_messages_in_one_fragment() {
        let mut d = MessageDecoder::new(100, false);
        d.push(&framed(&[b"one", b"", b"three"])).unwrap();
        assert_eq!(drain(&mut d), [&b"one"[..], b"", b"three"]);
        assert!(d.finish().is_ok());
    }

    #[test]
    fn every_split_point_yields_the_same_messages() {
        let wire = framed(&[b"hello", b"", b"world!"]);
        for split in 0..=wire.len() {
            let mut d = MessageDecoder::new(100, false);
            d.push(&wire[..split]).unwrap();
            d.push(&wire[split..]).unwrap();
            assert_eq!(drain(&mut d), [&b"hello"[..], b"", b"world!"], "{split}");
        }
    }

    #[test]
    fn byte_at_a_time_fragments() {
        let wire = framed(&[b"abc", b"defg"]);
        let mut d = MessageDecoder::new(100, false);
        for b in &wire {
            d.push(std::slice::from_ref(b)).unwrap();
        }
        assert_eq!(drain(&mut d), [&b"abc"[..], b"defg"]);
    }

    #[test]
    fn empty_message_completes_with_its_prefix() {
        let mut d = MessageDecoder::new(100, false);
        d.push(&[0, 0, 0, 0, 0]).unwrap();
        assert_eq!(d.pop().map(|m| m.payload), Some(vec![]));
    }

    #[test]
    fn message_at_the_limit_is_accepted() {
        let mut d = MessageDecoder::new(4, false);
        d.push(&framed(&[b"1234"])).unwrap();
        assert_eq!(drain(&mut d), [b"1234"]);
    }

    #[test]
    fn oversized_message_is_resource_exhausted_before_its_body() {
        let mut d = MessageDecoder::new(4, false);
        let err = d.push(&[0, 0, 0, 0, 5]).unwrap_err();
        assert_eq!(err.code, Code::ResourceExhausted);
        assert_eq!(err.message, "received message larger than max (5 vs. 4)");
    }

    #[test]
    fn huge_declared_length_does_not_allocate() {
        let mut d = MessageDecoder::new(DEFAULT_MAX_MESSAGE_LEN, false);
        let err = d.push(&[0, 0xff, 0xff, 0xff, 0xff]).unwrap_err();
        assert_eq!(err.code, Code::ResourceExhausted);
    }

    #[test]
    fn compressed_flag_without_encoding_is_internal() {
        let mut d = MessageDecoder::new(100, false);
        let err = d.push(&[1, 0, 0, 0, 1, 0xaa]).unwrap_err();
        assert_eq!(err.code, Code::Internal);
    }

    #[test]
    fn compressed_flag_with_encoding_is_passed_on() {
        let mut d = MessageDecoder::new(100, true);
        d.push(&[1, 0, 0, 0, 1, 0xaa]).unwrap();
        let m = d.pop().unwrap();
        assert!(m.compressed);
        assert_eq!(m.payload, [0xaa]);
    }

    #[test]
    fn reserved_flag_values_are_internal() {
        for flag in [2u8, 0x80, 0xff] {
            let mut d = MessageDecoder::new(100, true);
            assert_eq!(
                d.push(&[flag, 0, 0, 0, 0]).unwrap_err().code,
                Code::Internal
            );
        }
    }

    #[test]
    fn errors_are_sticky() {
        let mut d = MessageDecoder::new(100, false);
        let err = d.push(&[7, 0, 0, 0, 0]).unwrap_err();
        assert_eq!(d.push(&framed(&[b"ok"])).unwrap_err(), err);
        assert_eq!(d.finish().unwrap_err(), err);
        assert!(d.pop().is_none());
    }

    #[test]
    fn messages_before_an_error_are_still_delivered() {
        let mut d = MessageDecoder::new(100, false);
        let mut wire = framed(&[b"good"]);
        wire.extend_from_slice(&[9, 0, 0, 0, 0]);
        assert!(d.push(&wire).is_err());
        assert_eq!(drain(&mut d), [b"good"]);
    }

    #[test]
    fn ending_inside_a_prefix_or_body_is_internal() {
        let mut d = MessageDecoder::new(100, false);
        d.push(&[0, 0]).unwrap();
        assert_eq!(d.finish().unwrap_err().code, Code::Internal);
        let mut d = MessageDecoder::new(100, false);
        d.push(&[0, 0, 0, 0, 2, b'x']).unwrap();
        assert_eq!(d.finish().unwrap_err().code, Code::Internal);
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            let mut d = MessageDecoder::new(64, seed & 1 == 0);
            let bytes: Vec<u8> = (0..(seed % 40))
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    (seed % 4) as u8
                })
                .collect();
            let _ = d.push(&bytes);
            let _ = d.finish();
            seed = seed.wrapping_add(1);
        }
    }
}
