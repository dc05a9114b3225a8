//! The stream table: which ids are idle, open or closed (RFC 9113 §5.1), the ids used so far
//! (§5.1.1), the streams we reset (§6.4), the queue of streams with data to send, and since
//! when none is open (the idle timeout).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use crate::http2::stream::Stream;
use crate::time::Timestamp;

use super::{Role, SendError};

/// How many streams we reset are remembered, to ignore frames in flight (§5.1).
const RECENT_RESETS: usize = 256;
/// Stream ids are 31 bits (§5.1.1).
const MAX_STREAM_ID: u32 = (1 << 31) - 1;

/// A stream id as the peer's frames see it (§5.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Lookup {
    Open,
    Idle,
    Closed { reset_by_us: bool },
}

/// The open and half-closed streams, ours and the peer's, and what the ids tell of the rest.
#[derive(Debug)]
pub(super) struct StreamTable {
    role: Role,
    streams: BTreeMap<u32, Stream>,
    /// Streams with data or an END_STREAM to send, in turn (`Stream::scheduled`).
    send_queue: VecDeque<u32>,
    recent_resets: VecDeque<u32>,
    next_local_id: u32,
    /// Our highest stream that sent HEADERS: ours go out in id order (§5.1.1).
    last_local_sent: u32,
    /// The peer's highest stream id, named by our GOAWAY (§6.8).
    last_peer_id: u32,
    /// When the last stream ended; `None` while any is open.
    idle_since: Option<Timestamp>,
}

impl StreamTable {
    /// No streams yet: idle since `now`. A client's ids are odd, a server's even (§5.1.1).
    pub(super) fn new(role: Role, now: Timestamp) -> Self {
        StreamTable {
            role,
            streams: BTreeMap::new(),
            send_queue: VecDeque::new(),
            recent_resets: VecDeque::new(),
            next_local_id: if role == Role::Client { 1 } else { 2 },
            last_local_sent: 0,
            last_peer_id: 0,
            idle_since: Some(now),
        }
    }

    pub(super) fn role(&self) -> Role {
        self.role
    }

    /// Whether `id` is initiated by us: odd for clients, even for servers (§5.1.1).
    pub(super) fn is_local(&self, id: u32) -> bool {
        (id % 2 == 1) == (self.role == Role::Client)
    }

    /// The §5.1 state of `id` for frames from the peer. Ids below the highest
    /// used are closed; a client stream without HEADERS is still idle.
    pub(super) fn lookup(&self, id: u32) -> Lookup {
        let idle = match self.streams.get(&id) {
            Some(s) if self.is_local(id) && !s.headers_sent() => true,
            Some(_) => return Lookup::Open,
            None if self.is_local(id) => id >= self.next_local_id,
            None => id > self.last_peer_id,
        };
        match idle {
            true => Lookup::Idle,
            false => Lookup::Closed {
                reset_by_us: self.recent_resets.contains(&id),
            },
        }
    }

    pub(super) fn get(&self, id: u32) -> Option<&Stream> {
        self.streams.get(&id)
    }

    pub(super) fn get_mut(&mut self, id: u32) -> Option<&mut Stream> {
        self.streams.get_mut(&id)
    }

    /// Streams not yet closed or reset.
    pub(super) fn len(&self) -> usize {
        self.streams.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }

    /// Our streams (`local`) or the peer's, for MAX_CONCURRENT_STREAMS (§5.1.2).
    pub(super) fn count(&self, local: bool) -> usize {
        self.streams
            .keys()
            .filter(|&&id| self.is_local(id) == local)
            .count()
    }

    /// A stream the application may still send on.
    pub(super) fn sendable(&mut self, id: u32) -> Result<&mut Stream, SendError> {
        match self.streams.get_mut(&id) {
            None => Err(SendError::UnknownStream),
            Some(s) if s.local_ended() => Err(SendError::StreamEnded),
            Some(s) => Ok(s),
        }
    }

    /// Reserves our next stream id (§5.1.1) within the peer's MAX_CONCURRENT_STREAMS
    /// (§5.1.2) for `stream`.
    pub(super) fn open_local(
        &mut self,
        max_concurrent: u32,
        stream: Stream,
    ) -> Result<u32, SendError> {
        if self.count(true) >= max_concurrent as usize {
            return Err(SendError::StreamLimit);
        }
        let id = self.next_local_id;
        if id > MAX_STREAM_ID {
            return Err(SendError::IdsExhausted);
        }
        self.next_local_id += 2;
        self.insert(id, stream);
        Ok(id)
    }

    /// Whether HEADERS may go out on our stream `id`: not after those of a later stream (§5.1.1).
    pub(super) fn in_order(&self, id: u32) -> bool {
        id >= self.last_local_sent
    }

    /// HEADERS went out on our stream `id`.
    pub(super) fn headers_sent(&mut self, id: u32) {
        self.last_local_sent = id;
    }

    /// The peer's highest stream id, which our GOAWAY names (§6.8).
    pub(super) fn last_peer_id(&self) -> u32 {
        self.last_peer_id
    }

    /// The peer opened stream `id`; ids only grow (§5.1.1).
    pub(super) fn peer_opened(&mut self, id: u32) {
        self.last_peer_id = id;
    }

    pub(super) fn insert(&mut self, id: u32, stream: Stream) {
        self.streams.insert(id, stream);
        self.idle_since = None;
    }

    /// Forgets a stream; with none left, the connection is idle from `now`.
    pub(super) fn remove(&mut self, id: u32, now: Timestamp) -> Option<Stream> {
        let stream = self.streams.remove(&id)?;
        if stream.scheduled {
            self.send_queue.retain(|&queued| queued != id);
        }
        if self.streams.is_empty() {
            self.idle_since = Some(now);
        }
        Some(stream)
    }

    /// The connection closed: every stream ends.
    pub(super) fn clear(&mut self) {
        self.streams.clear();
        self.send_queue.clear();
    }

    /// Our streams above `last_stream_id`, which the peer's GOAWAY says it never processed (§6.8).
    pub(super) fn unprocessed(&self, last_stream_id: u32) -> Vec<u32> {
        (self.streams.keys().copied())
            .filter(|&id| self.is_local(id) && id > last_stream_id)
            .collect()
    }

    /// We sent RST_STREAM on `id`: frames in flight on it are ignored (§5.1).
    pub(super) fn remember_reset(&mut self, id: u32) {
        if self.recent_resets.len() == RECENT_RESETS {
            self.recent_resets.pop_front();
        }
        self.recent_resets.push_back(id);
    }

    /// When the idle timeout fires, if it is set and no stream is open.
    pub(super) fn idle_deadline(&self, timeout: Option<Duration>) -> Option<Timestamp> {
        let (since, timeout) = self.idle_since.zip(timeout)?;
        Some(since + timeout)
    }

    /// Queues `id` to send, if it has something to send and is not queued.
    pub(super) fn schedule(&mut self, id: u32) {
        if let Some(s) = self.streams.get_mut(&id) {
            if !s.scheduled && s.has_pending() {
                s.scheduled = true;
                self.send_queue.push_back(id);
            }
        }
    }

    /// The next stream to send a frame of.
    pub(super) fn next_scheduled(&mut self) -> Option<u32> {
        self.send_queue.pop_front()
    }

    /// `id` sent a frame and has more: its turn comes again after the others.
    pub(super) fn requeue(&mut self, id: u32) {
        self.send_queue.push_back(id);
    }

    /// `id` is blocked by the connection window: it goes first when credit comes.
    pub(super) fn requeue_first(&mut self, id: u32) {
        self.send_queue.push_front(id);
    }

    /// Whether any stream waits to send.
    pub(super) fn any_scheduled(&self) -> bool {
        !self.send_queue.is_empty()
    }

    /// The largest stream send window, `i64::MIN` with no stream.
    pub(super) fn largest_send_window(&self) -> i64 {
        let windows = self.streams.values().map(|s| s.send_window.get());
        windows.max().unwrap_or(i64::MIN)
    }

    /// §6.9.2: a new peer INITIAL_WINDOW_SIZE shifts every stream's send window by `delta`
    /// (checked beforehand not to overflow); streams it unblocks are queued.
    pub(super) fn shift_send_windows(&mut self, delta: i64) {
        for (&id, s) in self.streams.iter_mut() {
            // Cannot fail: the largest window plus the largest delta was checked.
            let _ = s.send_window.adjust(delta);
            if !s.scheduled && s.has_pending() {
                s.scheduled = true;
                self.send_queue.push_back(id);
            }
        }
    }

    /// §6.9.2: our INITIAL_WINDOW_SIZE took effect; every stream's receive window follows.
    pub(super) fn resize_recv_windows(&mut self, size: u32) {
        for s in self.streams.values_mut() {
            s.recv_window.resize(size);
        }
    }

    /// Queued stream data, in octets.
    pub(super) fn outbox_bytes(&self) -> usize {
        self.streams.values().map(|s| s.outbox.len()).sum()
    }
}
