//! A connection's two byte buffers: what the peer sent and is not yet taken, and what we
//! write and the socket has not yet taken. Both give their memory back once they are empty
//! and have grown past [`KEEP_CAPACITY`]: a connection that once buffered a burst does not
//! hold the burst's memory for the rest of its life (issue 40: 40 connections that once held
//! 128 KiB each kept 5 MiB while idle).

use std::collections::VecDeque;

use super::frame::{self, Frame, FrameError, Framing};

/// Capacity an empty buffer keeps: a few messages' worth, so that a busy connection does not
/// allocate for every read or write, while an idle one holds little.
pub const KEEP_CAPACITY: usize = 4 * 1024;

/// What the peer sent, in stream framing (RFC 8323 §3.2), not yet taken: whole messages
/// waiting for their turn, then at most a part of one. A WebSocket's messages are framed
/// into it too, so that both framings wait the same way.
#[derive(Debug, Default)]
pub struct Incoming {
    bytes: Vec<u8>,
    /// Bytes at the front already taken.
    taken: usize,
}

impl Incoming {
    /// Appends bytes from the stream.
    pub fn push(&mut self, data: &[u8]) {
        self.compact();
        self.bytes.extend_from_slice(data);
    }

    /// Appends one message (from a WebSocket frame, §4.4), framed for a stream.
    pub fn push_frame(&mut self, f: &Frame<'_>) {
        self.compact();
        frame::encode(&mut self.bytes, Framing::Stream, f);
    }

    /// The message at the front and its length; `Ok(None)` if what is there is short of a
    /// whole one (or nothing is).
    pub fn front(&self, max_size: usize) -> Result<Option<(Frame<'_>, usize)>, FrameError> {
        frame::decode_stream(&self.bytes[self.taken..], max_size)
    }

    /// The first `n` bytes were taken (a message [`front`](Self::front) returned).
    pub fn take(&mut self, n: usize) {
        self.taken = (self.taken + n).min(self.bytes.len());
        if self.taken == self.bytes.len() {
            self.clear();
        }
    }

    /// Bytes not yet taken.
    pub fn len(&self) -> usize {
        self.bytes.len() - self.taken
    }

    /// Whether nothing is left.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drops everything, and the memory past [`KEEP_CAPACITY`].
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.taken = 0;
        shrink(&mut self.bytes);
    }

    /// Moves what is left to the front, so that the buffer holds only what is not taken.
    fn compact(&mut self) {
        if self.taken > 0 {
            self.bytes.drain(..self.taken);
            self.taken = 0;
        }
    }
}

/// What the connection writes, and where each message ends (a WebSocket frame carries one
/// message, and that format has no length to find the end by).
#[derive(Debug, Default)]
pub struct Outgoing {
    bytes: Vec<u8>,
    ends: VecDeque<usize>,
}

impl Outgoing {
    /// Appends one message that `write` encodes.
    pub fn push(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        write(&mut self.bytes);
        self.ends.push_back(self.bytes.len());
    }

    /// The bytes waiting for the socket.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The first `n` bytes were written.
    pub fn consume(&mut self, n: usize) {
        let n = n.min(self.bytes.len());
        self.bytes.drain(..n);
        for end in &mut self.ends {
            *end = end.saturating_sub(n);
        }
        while self.ends.front() == Some(&0) {
            self.ends.pop_front();
        }
        self.free_if_empty();
    }

    /// The next whole message, taken out.
    pub fn pop_message(&mut self) -> Option<Vec<u8>> {
        let end = self.ends.pop_front()?;
        let message = self.bytes.drain(..end).collect();
        for e in &mut self.ends {
            *e -= end;
        }
        self.free_if_empty();
        Some(message)
    }

    /// Drops everything, and the memory.
    pub fn clear(&mut self) {
        *self = Outgoing::default();
    }

    fn free_if_empty(&mut self) {
        if self.bytes.is_empty() {
            shrink(&mut self.bytes);
            if self.ends.capacity() > KEEP_CAPACITY / 8 {
                self.ends = VecDeque::new();
            }
        }
    }
}

/// Gives an empty buffer's memory back if it grew past [`KEEP_CAPACITY`].
fn shrink(bytes: &mut Vec<u8>) {
    if bytes.capacity() > KEEP_CAPACITY {
        *bytes = Vec::new();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coap::Code;

    fn frame(body: &[u8]) -> Frame<'_> {
        Frame {
            code: Code::new(0, 1),
            token: b"t",
            body,
        }
    }

    #[test]
    fn messages_are_taken_one_by_one_and_a_part_waits() {
        let mut input = Incoming::default();
        let mut bytes = Vec::new();
        frame::encode(&mut bytes, Framing::Stream, &frame(b"\xb1a"));
        frame::encode(&mut bytes, Framing::Stream, &frame(b"\xb1b"));
        input.push(&bytes[..bytes.len() - 1]);
        let (first, n) = input.front(1152).unwrap().unwrap();
        assert_eq!(first, frame(b"\xb1a"));
        input.take(n);
        assert_eq!(input.front(1152), Ok(None), "the second is short a byte");
        input.push(&bytes[bytes.len() - 1..]);
        let (second, n) = input.front(1152).unwrap().unwrap();
        assert_eq!(second, frame(b"\xb1b"));
        input.take(n);
        assert!(input.is_empty());
    }

    #[test]
    fn emptied_buffers_give_their_memory_back() {
        let mut input = Incoming::default();
        input.push(&[0x00; 64 * 1024]);
        input.take(64 * 1024);
        assert!(input.bytes.capacity() <= KEEP_CAPACITY);
        let mut output = Outgoing::default();
        output.push(|o| o.extend_from_slice(&[1; 128 * 1024]));
        output.consume(100 * 1024);
        assert!(output.bytes.capacity() >= 28 * 1024, "kept while not empty");
        output.consume(28 * 1024);
        assert!(output.bytes.capacity() <= KEEP_CAPACITY);
        assert_eq!(output.pop_message(), None);
    }
}
