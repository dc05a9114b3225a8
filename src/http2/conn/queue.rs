//! Events waiting for the application, what they cost us to hold (`max_queued_event_bytes`, the
//! HPACK-bomb bound), and which requests it has not taken yet: a stream reset before it took
//! its request is dropped unseen (Rapid Reset, CVE-2023-44487).

use std::collections::{BTreeSet, VecDeque};

use super::Event;
use crate::http2::headers;
use crate::http2::hpack::Header;

/// Accounting cost of one queued event beyond its headers or debug data.
const EVENT_OVERHEAD: usize = 64;

/// The stream an event belongs to, if any.
fn event_stream(event: &Event) -> Option<u32> {
    match *event {
        Event::Headers { stream, .. }
        | Event::Data { stream, .. }
        | Event::StreamReset { stream, .. } => Some(stream),
        _ => None,
    }
}

fn event_cost(event: &Event) -> usize {
    EVENT_OVERHEAD
        + match event {
            Event::Headers { headers, .. } => headers::list_size(headers),
            Event::GoAway { debug, .. } => debug.len(),
            _ => 0,
        }
}

/// Events in wire order, with their cost and the requests not yet taken.
#[derive(Debug, Default)]
pub(super) struct EventQueue {
    events: VecDeque<Event>,
    /// What the queued events cost to hold (`event_cost`), DATA octets aside: the
    /// connection window bounds those.
    cost: usize,
    /// Peer streams whose opening HEADERS event the application has not polled.
    unaccepted: BTreeSet<u32>,
}

impl EventQueue {
    pub(super) fn push(&mut self, event: Event) {
        self.cost += event_cost(&event);
        self.events.push_back(event);
    }

    /// A request opens a peer stream: it is not accepted until the application polls it.
    pub(super) fn push_request(&mut self, stream: u32, headers: Vec<Header>, end_stream: bool) {
        self.unaccepted.insert(stream);
        self.push(Event::Headers {
            stream,
            headers,
            end_stream,
        });
    }

    /// Queues DATA, merged into the previous event when that is DATA of the same stream.
    pub(super) fn push_data(&mut self, stream: u32, data: &[u8], end_stream: bool) {
        if let Some(Event::Data {
            stream: queued_stream,
            data: queued,
            end_stream: ended,
        }) = self.events.back_mut()
        {
            if *queued_stream == stream && !*ended {
                queued.extend_from_slice(data);
                *ended = end_stream;
                return;
            }
        }
        if !data.is_empty() || end_stream {
            let data = data.to_vec();
            self.push(Event::Data {
                stream,
                data,
                end_stream,
            });
        }
    }

    /// The oldest event; a request's HEADERS accepts its stream.
    pub(super) fn pop(&mut self) -> Option<Event> {
        let event = self.events.pop_front()?;
        self.cost -= event_cost(&event);
        if let Event::Headers { stream, .. } = &event {
            self.unaccepted.remove(stream);
        }
        Some(event)
    }

    /// Drops every queued event of `stream` if the application has not taken its request:
    /// a stream that is already reset must not reach it. The DATA octets dropped, whose
    /// connection credit goes back; `None` if the request was taken.
    pub(super) fn drop_unaccepted(&mut self, stream: u32) -> Option<usize> {
        if !self.unaccepted.remove(&stream) {
            return None;
        }
        let (mut cost, mut credit) = (0, 0);
        self.events.retain(|e| {
            let theirs = event_stream(e) == Some(stream);
            if theirs {
                cost += event_cost(e);
                if let Event::Data { data, .. } = e {
                    credit += data.len();
                }
            }
            !theirs
        });
        self.cost -= cost;
        Some(credit)
    }

    /// The connection closed: requests the application has not taken are dropped with their
    /// streams, so a failed connection starts no work.
    pub(super) fn drop_all_unaccepted(&mut self) {
        let unaccepted = std::mem::take(&mut self.unaccepted);
        if !unaccepted.is_empty() {
            let untaken = |e: &Event| event_stream(e).is_some_and(|s| unaccepted.contains(&s));
            self.events.retain(|e| !untaken(e));
            self.cost = self.events.iter().map(event_cost).sum();
        }
    }

    /// What the queued events cost to hold, DATA octets aside.
    pub(super) fn cost(&self) -> usize {
        self.cost
    }

    /// Octets held: the cost plus queued DATA.
    pub(super) fn buffered(&self) -> usize {
        let data = |e: &Event| match e {
            Event::Data { data, .. } => data.len(),
            _ => 0,
        };
        self.cost + self.events.iter().map(data).sum::<usize>()
    }
}
