//! An opt-in send rate per client address and port (`--client-bytes-per-sec`): token buckets
//! of bytes and of datagrams. Reflection is bounded by proof (`validation.rs`), not by rate,
//! so this is off by default: a forward proxy's heaviest client (one application server
//! talking to many devices) is a legitimate one, and a rate low enough to matter against a
//! reflector throttles it. Where an operator wants a rate anyway, everything the proxy sends
//! a client passes here; a new request from a client whose bucket cannot take an answer gets
//! 5.03 with a Max-Age saying when it can (RFC 7252 §5.9.3.4), and a datagram past the
//! budget (answers already on their way) is dropped and counted.

use std::net::SocketAddr;

use crate::time::Timestamp;

use super::keyed_hash::{KeyedMap, KeyedState};

/// The budget's limits (see `ProxyConfig::client_budget`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientBudget {
    /// Bytes per second a source may be sent on average; 0 turns the budget off.
    pub bytes_per_sec: u32,
    /// Bytes it may be sent at once (the bucket's depth).
    pub burst_bytes: u32,
    /// Datagrams per second on average.
    pub datagrams_per_sec: u32,
    /// Datagrams at once.
    pub burst_datagrams: u32,
    /// Sources tracked at most; past it those whose buckets are full (idle ones, which an
    /// entry would not restrict) are dropped, and if that frees too little, all are.
    pub max_sources: usize,
}

impl ClientBudget {
    /// Off (no rate). With `--client-bytes-per-sec N`: a burst of 256 KiB, 200 datagrams/s
    /// with a burst of 512. A client may have 256 requests in flight
    /// (`max_inflight_per_client`); the burst lets all their answers (a ~1 KiB datagram
    /// each, RFC 7252 §4.6) and an ACK each come back at once.
    pub const DEFAULT: ClientBudget = ClientBudget {
        bytes_per_sec: 0,
        burst_bytes: 256 << 10,
        datagrams_per_sec: 200,
        burst_datagrams: 512,
        max_sources: 65_536,
    };
}

/// One source's buckets at `at`.
#[derive(Clone, Copy, Debug)]
struct Bucket {
    bytes: f64,
    datagrams: f64,
    at: Timestamp,
}

/// Every source's buckets.
#[derive(Debug)]
pub(super) struct SendBudget {
    limits: ClientBudget,
    sources: KeyedMap<SocketAddr, Bucket>,
    /// Datagrams and bytes dropped over budget.
    pub(super) dropped: u64,
    pub(super) dropped_bytes: u64,
}

impl SendBudget {
    pub(super) fn new(limits: ClientBudget, hash: &KeyedState) -> Self {
        SendBudget {
            limits,
            sources: hash.map(),
            dropped: 0,
            dropped_bytes: 0,
        }
    }

    /// Whether `len` bytes may go to `to` at `now`; if so, they are taken from its buckets,
    /// if not, the datagram is counted as dropped.
    pub(super) fn admit(&mut self, now: Timestamp, to: SocketAddr, len: usize) -> bool {
        let l = self.limits;
        if l.bytes_per_sec == 0 {
            return true;
        }
        if !self.sources.contains_key(&to) && self.sources.len() >= l.max_sources {
            self.make_room(now);
        }
        let b = self.sources.entry(to).or_insert(Bucket {
            bytes: f64::from(l.burst_bytes),
            datagrams: f64::from(l.burst_datagrams),
            at: now,
        });
        let elapsed = now.saturating_since(b.at).as_secs_f64();
        b.bytes = (b.bytes + elapsed * f64::from(l.bytes_per_sec)).min(f64::from(l.burst_bytes));
        b.datagrams = (b.datagrams + elapsed * f64::from(l.datagrams_per_sec))
            .min(f64::from(l.burst_datagrams));
        b.at = b.at.max(now);
        let len_f = len as f64;
        if b.bytes >= len_f && b.datagrams >= 1.0 {
            b.bytes -= len_f;
            b.datagrams -= 1.0;
            return true;
        }
        self.dropped += 1;
        self.dropped_bytes += len as u64;
        false
    }

    /// The table is full: drop the buckets that have refilled (an entry for them restricts
    /// nothing); if that leaves it three quarters full, drop all (each source then starts
    /// from a full bucket again, which is what a new one gets anyway). Amortised O(1).
    fn make_room(&mut self, now: Timestamp) {
        let l = self.limits;
        let refill = f64::from(l.burst_bytes) / f64::from(l.bytes_per_sec.max(1));
        let refill_d = f64::from(l.burst_datagrams) / f64::from(l.datagrams_per_sec.max(1));
        let full_after = refill.max(refill_d);
        self.sources
            .retain(|_, b| now.saturating_since(b.at).as_secs_f64() < full_after);
        if self.sources.len() >= l.max_sources / 4 * 3 {
            self.sources.clear();
        }
    }

    /// When `to`'s buckets will hold an answer of `len` bytes again, if they do not now.
    pub(super) fn refill_at(
        &self,
        now: Timestamp,
        to: SocketAddr,
        len: usize,
    ) -> Option<Timestamp> {
        let l = self.limits;
        let b = self.sources.get(&to)?;
        let elapsed = now.saturating_since(b.at).as_secs_f64();
        let bytes = (b.bytes + elapsed * f64::from(l.bytes_per_sec)).min(f64::from(l.burst_bytes));
        let datagrams = (b.datagrams + elapsed * f64::from(l.datagrams_per_sec))
            .min(f64::from(l.burst_datagrams));
        let wait_bytes = (len as f64 - bytes) / f64::from(l.bytes_per_sec.max(1));
        let wait_datagrams = (1.0 - datagrams) / f64::from(l.datagrams_per_sec.max(1));
        let wait = wait_bytes.max(wait_datagrams);
        (wait > 0.0).then(|| now + std::time::Duration::from_secs_f64(wait))
    }

    /// Sources tracked now.
    pub(super) fn sources(&self) -> usize {
        self.sources.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(ms: u64) -> Timestamp {
        Timestamp::ZERO + Duration::from_millis(ms)
    }

    fn budget(edit: impl FnOnce(&mut ClientBudget)) -> SendBudget {
        let mut l = ClientBudget {
            bytes_per_sec: 64 << 10,
            ..ClientBudget::DEFAULT
        };
        edit(&mut l);
        SendBudget::new(l, &KeyedState::new([1, 2]))
    }

    #[test]
    fn a_source_gets_its_burst_then_its_rate() {
        let mut b = budget(|_| {});
        let victim: SocketAddr = "192.0.2.1:5683".parse().unwrap();
        let sent = (0..1000).filter(|_| b.admit(at(0), victim, 1024)).count();
        assert_eq!(sent, 256, "256 KiB at once");
        let more = (0..1000)
            .filter(|_| b.admit(at(1000), victim, 1024))
            .count();
        assert_eq!(more, 64, "then 64 KiB a second");
        assert_eq!((b.dropped, b.dropped_bytes), (1680, 1680 * 1024));
        let other: SocketAddr = "192.0.2.2:5683".parse().unwrap();
        assert!(b.admit(at(1000), other, 1024), "each source has its own");
        // Empty: an answer of 1 KiB fits again 1/64 s later.
        let at_refill = b.refill_at(at(1000), victim, 1024).unwrap();
        assert_eq!(at_refill.saturating_since(at(1000)).as_micros(), 15_625);
        assert_eq!(b.refill_at(at(1000), other, 1024), None);
    }

    #[test]
    fn small_datagrams_are_bounded_by_their_count() {
        let mut b = budget(|_| {});
        let victim: SocketAddr = "192.0.2.1:5683".parse().unwrap();
        let sent = (0..1000).filter(|_| b.admit(at(0), victim, 4)).count();
        assert_eq!(sent, 512);
        let more = (0..1000).filter(|_| b.admit(at(500), victim, 4)).count();
        assert_eq!(more, 100);
    }

    #[test]
    fn the_table_stays_bounded_and_a_zero_rate_turns_it_off() {
        let mut b = budget(|l| l.max_sources = 100);
        for i in 0..10_000u32 {
            let addr = SocketAddr::from((i.to_be_bytes(), 1));
            b.admit(at(u64::from(i)), addr, 100);
            assert!(b.sources() <= 100);
        }
        let mut off = budget(|l| l.bytes_per_sec = 0);
        let victim: SocketAddr = "192.0.2.1:5683".parse().unwrap();
        assert!((0..10_000).all(|_| off.admit(at(0), victim, 1500)));
        assert_eq!(off.sources(), 0);
    }
}
