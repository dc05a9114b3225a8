//! The bytes we have to write, and how much of them the driver has been offered: a peer that
//! does not read what it provokes (ACKs, RST_STREAMs; RFC 9113 §10.5) is judged on that.

/// Frames encoded and not yet written to the socket, oldest first.
#[derive(Debug, Default)]
pub(super) struct Output {
    buf: Vec<u8>,
    /// `buf[..start]` was written.
    start: usize,
    /// `buf[start..offered_end]` was pending at the driver's last `consume`, or made at an
    /// earlier instant than now: it had its chance to write that and could not.
    offered_end: usize,
}

impl Output {
    /// Where frames are encoded, after everything pending.
    pub(super) fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// Bytes to write, oldest first.
    pub(super) fn pending(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// The driver wrote `n` octets of `pending`; the written prefix is dropped once it is all
    /// of the buffer or at least `compact_at` octets. Whatever is still pending was offered
    /// and not taken.
    pub(super) fn consume(&mut self, n: usize, compact_at: usize) {
        self.start = (self.start + n).min(self.buf.len());
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start >= compact_at {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.offer_all();
    }

    /// Everything pending counts as offered: a driver flushes before its clock moves on.
    pub(super) fn offer_all(&mut self) {
        self.offered_end = self.buf.len();
    }

    /// Whether the peer is not reading (`max_buffered_output`): more than `max` octets it was
    /// offered are unwritten, or more than twice `max` are pending in all, offered or not.
    pub(super) fn exceeds(&self, max: usize) -> bool {
        let unread = self.offered_end.saturating_sub(self.start);
        unread > max || self.pending().len() > max.saturating_mul(2)
    }
}
