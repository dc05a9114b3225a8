//! Upstream endpoints: the proxy's own UDP sockets towards each upstream, and the Message IDs
//! each of them may use (RFC 7252 §4.4).
//!
//! A Message ID must not be reused towards an endpoint within EXCHANGE_LIFETIME (247 s): the
//! upstream may still hold the old request's answer for it. The upstream tells endpoints apart
//! by source address and port, so every socket of the proxy's own (an ephemeral port, connected
//! to the upstream) has an ID space of its own: 65,536 IDs per lifetime, about 265 requests/s
//! sustained. A [`Pool`] per upstream holds as many endpoints as the load needs, up to a bound:
//!
//! - IDs come from the *current* endpoint until its next IDs are still reserved;
//! - then from the resting endpoint whose reservation ran out first, else from the spare;
//! - a new socket is asked for only when the spare was taken, so a burst opens one socket per
//!   65,536 requests, not hundreds; the spare is opened ahead of need, so switching never waits
//!   for the driver;
//! - an endpoint idle for a whole lifetime (no ID reserved, no exchange on it) is closed; the
//!   current endpoint and the spare stay.
//!
//! Sans-IO: the pool asks for sockets with [`EndpointEvent`]s; the driver opens or closes them
//! and reports back ([`Endpoints::opened`], [`Endpoints::failed`]). Nothing is sent from an
//! endpoint before its socket is confirmed.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use slab::Slab;

use crate::time::Timestamp;

/// Index of an upstream (a reverse target or an allowed forward target) in the proxy's table.
pub type UpstreamId = u16;

/// After the driver could not open a socket (out of descriptors, say), ask again this late.
const OPEN_RETRY: Duration = Duration::from_secs(1);

/// Names one upstream endpoint: one socket of the proxy's, connected to one upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EndpointId(pub u32);

impl EndpointId {
    /// Stands for no endpoint: that of an exchange with no upstream leg (a cache hit
    /// delivered as a CON, `caching.rs`). Never handed out: ids count up from 0.
    pub(super) const NONE: EndpointId = EndpointId(u32::MAX);
}

/// What the engine asks the driver to do with sockets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EndpointEvent {
    /// Open a UDP socket on a fresh ephemeral port, connected to `peer`, for `id`; then report
    /// [`Proxy::endpoint_opened`](super::Proxy::endpoint_opened) or
    /// [`Proxy::endpoint_failed`](super::Proxy::endpoint_failed).
    Open {
        /// The endpoint the socket is for.
        id: EndpointId,
        /// The upstream it is connected to.
        peer: SocketAddr,
    },
    /// Close the socket of `id`: idle for a lifetime, none of its Message IDs reserved. Its
    /// number may name a new socket later.
    Close {
        /// The endpoint whose socket goes.
        id: EndpointId,
    },
}

/// Why no Message ID could be had for a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoEndpoint {
    /// Every endpoint the bound allows has its IDs reserved; the first frees at `until`.
    Bound {
        /// When the earliest resting endpoint has IDs again (for the 5.03's Max-Age).
        until: Timestamp,
    },
    /// The socket for the next endpoint is not open yet, or could not be opened.
    Unavailable,
}

/// Hands out one endpoint's Message IDs so that none repeats within the lifetime. IDs go up
/// one by one from a random first one; counted from it, the 65536 IDs form 64 blocks of 1024,
/// and a block may be entered again only when its last ID was handed out at least a lifetime
/// ago. So a full pass is exactly 65536 IDs, and IDs return block by block as they expire.
#[derive(Debug)]
pub(super) struct MidAllocator {
    /// The first ID: blocks are counted from it.
    origin: u16,
    /// IDs handed out so far, modulo 65536: the next ID is `origin + offset`.
    offset: u16,
    /// When each block's last ID was handed out.
    block_left: [Option<Timestamp>; 64],
}

const BLOCK: u16 = 1024;

impl MidAllocator {
    pub(super) fn new(first: u16) -> Self {
        MidAllocator {
            origin: first,
            offset: 0,
            block_left: [None; 64],
        }
    }

    fn block(offset: u16) -> usize {
        usize::from(offset / BLOCK)
    }

    /// The next free ID, or `None` while the next block is still reserved.
    pub(super) fn allocate(&mut self, now: Timestamp, lifetime: Duration) -> Option<u16> {
        if self.offset % BLOCK == 0 && now < self.free_at(lifetime) {
            return None;
        }
        let offset = self.offset;
        self.offset = offset.wrapping_add(1);
        if self.offset % BLOCK == 0 {
            self.block_left[Self::block(offset)] = Some(now);
        }
        Some(self.origin.wrapping_add(offset))
    }

    /// When the block of the next ID is free again (the past if it is free now).
    pub(super) fn free_at(&self, lifetime: Duration) -> Timestamp {
        self.block_left[Self::block(self.offset)].map_or(Timestamp::ZERO, |left| left + lifetime)
    }

    /// IDs handed out less than a lifetime ago (counted in whole blocks, plus the block being
    /// handed out, whose previous pass has expired by construction).
    pub(super) fn reserved(&self, now: Timestamp, lifetime: Duration) -> u32 {
        let full = (self.block_left.iter())
            .filter(|left| left.is_some_and(|t| now < t + lifetime))
            .count() as u32;
        full * u32::from(BLOCK) + u32::from(self.offset % BLOCK)
    }
}

/// One socket of the proxy's towards an upstream.
#[derive(Debug)]
struct Endpoint {
    upstream: UpstreamId,
    mids: MidAllocator,
    /// Exchanges whose upstream leg or observation runs through this endpoint: answers and
    /// notifications come back to it, so it stays open while any is left.
    users: u32,
    /// When it last handed out an ID: a lifetime later none is reserved.
    last_used: Option<Timestamp>,
}

impl Endpoint {
    fn idle_since(&self, lifetime: Duration) -> Timestamp {
        self.last_used.map_or(Timestamp::ZERO, |t| t + lifetime)
    }
}

/// The endpoints of one upstream. Each open endpoint has exactly one role: current, spare or
/// resting; an opening one has none yet.
#[derive(Debug)]
struct Pool {
    peer: SocketAddr,
    /// Hands out IDs now.
    current: Option<EndpointId>,
    /// Open with every ID free: takes over when no resting endpoint has IDs again.
    spare: Option<EndpointId>,
    /// Out of IDs for now, by when their next block frees, earliest first.
    resting: BinaryHeap<Reverse<(Timestamp, EndpointId)>>,
    /// Asked of the driver, not confirmed yet.
    opening: Option<EndpointId>,
    /// Endpoints in any of the above: the bound applies to this.
    count: usize,
    /// After a failed open: no new one before this.
    retry_open_at: Option<Timestamp>,
}

/// Every upstream's pool of endpoints, and the socket requests for the driver.
#[derive(Debug)]
pub(super) struct Endpoints {
    slab: Slab<Endpoint>,
    pools: Vec<Pool>,
    events: VecDeque<EndpointEvent>,
    lifetime: Duration,
    max_per_upstream: usize,
    /// When the next endpoint may have been idle for a whole lifetime.
    next_sweep: Option<Timestamp>,
    /// Draws each endpoint's first Message ID (RFC 7252 §4.4 asks for a random start).
    rng: SmallRng,
}

impl Endpoints {
    /// Pools for `peers` (by [`UpstreamId`]); asks for each one's first endpoint at once.
    pub(super) fn new(
        peers: &[SocketAddr],
        lifetime: Duration,
        max_per_upstream: usize,
        seed: u64,
    ) -> Self {
        let pools = peers
            .iter()
            .map(|&peer| Pool {
                peer,
                current: None,
                spare: None,
                resting: BinaryHeap::new(),
                opening: None,
                count: 0,
                retry_open_at: None,
            })
            .collect();
        let mut endpoints = Endpoints {
            slab: Slab::new(),
            pools,
            events: VecDeque::new(),
            lifetime,
            max_per_upstream,
            next_sweep: None,
            rng: SmallRng::seed_from_u64(seed),
        };
        for up in 0..peers.len() {
            endpoints.want_spare(Timestamp::ZERO, up as UpstreamId);
        }
        endpoints
    }

    /// The next socket to open or close, if any.
    pub(super) fn poll_event(&mut self) -> Option<EndpointEvent> {
        self.events.pop_front()
    }

    /// The upstream an endpoint belongs to (`None` for an unknown or closed one).
    pub(super) fn upstream_of(&self, id: EndpointId) -> Option<UpstreamId> {
        self.slab.get(id.0 as usize).map(|e| e.upstream)
    }

    /// A Message ID for a request to `up`, and the endpoint it must leave from.
    pub(super) fn allocate(
        &mut self,
        now: Timestamp,
        up: UpstreamId,
    ) -> Result<(EndpointId, u16), NoEndpoint> {
        let lifetime = self.lifetime;
        loop {
            let pool = &mut self.pools[usize::from(up)];
            if let Some(id) = pool.current {
                let endpoint = &mut self.slab[id.0 as usize];
                if let Some(mid) = endpoint.mids.allocate(now, lifetime) {
                    endpoint.last_used = Some(now);
                    return Ok((id, mid));
                }
                pool.resting
                    .push(Reverse((endpoint.mids.free_at(lifetime), id)));
                pool.current = None;
                self.schedule_sweep(now + lifetime);
                continue;
            }
            if let Some(&Reverse((until, id))) = pool.resting.peek() {
                if until <= now {
                    pool.resting.pop();
                    pool.current = Some(id);
                    continue;
                }
            }
            if let Some(id) = pool.spare.take() {
                pool.current = Some(id);
                self.want_spare(now, up);
                continue;
            }
            self.want_spare(now, up);
            let pool = &self.pools[usize::from(up)];
            return Err(match pool.resting.peek() {
                Some(&Reverse((until, _))) if pool.count >= self.max_per_upstream => {
                    NoEndpoint::Bound { until }
                }
                _ => NoEndpoint::Unavailable,
            });
        }
    }

    /// Asks the driver for a new spare socket unless one is there, coming, or over the bound.
    fn want_spare(&mut self, now: Timestamp, up: UpstreamId) {
        let pool = &mut self.pools[usize::from(up)];
        let blocked = pool.retry_open_at.is_some_and(|at| now < at);
        if pool.spare.is_some()
            || pool.opening.is_some()
            || pool.count >= self.max_per_upstream
            || blocked
        {
            return;
        }
        let first = self.rng.random();
        let id = EndpointId(self.slab.insert(Endpoint {
            upstream: up,
            mids: MidAllocator::new(first),
            users: 0,
            last_used: None,
        }) as u32);
        pool.opening = Some(id);
        pool.count += 1;
        self.events.push_back(EndpointEvent::Open {
            id,
            peer: pool.peer,
        });
    }

    /// Which upstream's socket `id` was being opened for (then no longer), if it was.
    fn finish_opening(&mut self, id: EndpointId) -> Option<UpstreamId> {
        let up = self.upstream_of(id)?;
        let pool = &mut self.pools[usize::from(up)];
        (pool.opening == Some(id)).then(|| {
            pool.opening = None;
            up
        })
    }

    /// The driver opened the socket of `id`: it becomes the current endpoint or the spare.
    pub(super) fn opened(&mut self, now: Timestamp, id: EndpointId) {
        let Some(up) = self.finish_opening(id) else {
            return;
        };
        let pool = &mut self.pools[usize::from(up)];
        pool.retry_open_at = None;
        match pool.current {
            None => {
                pool.current = Some(id);
                self.want_spare(now, up);
            }
            Some(_) => pool.spare = Some(id),
        }
    }

    /// The driver could not open the socket of `id`: forget it, and try again a little later.
    pub(super) fn failed(&mut self, now: Timestamp, id: EndpointId) {
        let Some(up) = self.finish_opening(id) else {
            return;
        };
        let pool = &mut self.pools[usize::from(up)];
        pool.count -= 1;
        pool.retry_open_at = Some(now + OPEN_RETRY);
        self.slab.remove(id.0 as usize);
    }

    /// An exchange starts using `id` (its upstream leg, or an observation made through it).
    pub(super) fn acquire(&mut self, id: EndpointId) {
        self.slab[id.0 as usize].users += 1;
    }

    /// An exchange stops using `id`; once nobody does, it may close a lifetime after its last ID.
    pub(super) fn release(&mut self, now: Timestamp, id: EndpointId) {
        let endpoint = &mut self.slab[id.0 as usize];
        endpoint.users -= 1;
        if endpoint.users == 0 {
            let at = endpoint.idle_since(self.lifetime).max(now);
            self.schedule_sweep(at);
        }
    }

    fn schedule_sweep(&mut self, at: Timestamp) {
        if self.next_sweep.is_none_or(|t| at < t) {
            self.next_sweep = Some(at);
        }
    }

    /// When [`sweep`](Self::sweep) must run next.
    pub(super) fn next_deadline(&self) -> Option<Timestamp> {
        self.next_sweep
    }

    /// Closes every resting endpoint idle for a whole lifetime (the current one and the spare
    /// stay open for the next burst).
    pub(super) fn sweep(&mut self, now: Timestamp) {
        if self.next_sweep.is_none_or(|t| now < t) {
            return;
        }
        self.next_sweep = None;
        let lifetime = self.lifetime;
        for pool in &mut self.pools {
            let slab = &self.slab;
            let closable = |id: EndpointId| {
                slab[id.0 as usize].users == 0 && slab[id.0 as usize].idle_since(lifetime) <= now
            };
            let (closing, keep): (Vec<_>, Vec<_>) = pool
                .resting
                .drain()
                .partition(|&Reverse((_, id))| closable(id));
            pool.resting = keep.into();
            for Reverse((_, id)) in closing {
                self.slab.remove(id.0 as usize);
                pool.count -= 1;
                self.events.push_back(EndpointEvent::Close { id });
            }
            // What is left closes later: a lifetime after its last ID, or when its last user
            // goes (`release` schedules that).
            for &Reverse((_, id)) in pool.resting.iter() {
                let endpoint = &self.slab[id.0 as usize];
                if endpoint.users == 0 {
                    let at = endpoint.idle_since(lifetime);
                    if self.next_sweep.is_none_or(|t| at < t) {
                        self.next_sweep = Some(at);
                    }
                }
            }
        }
    }

    /// Endpoints of `up` in any state (open, or asked for).
    pub(super) fn count(&self, up: UpstreamId) -> usize {
        self.pools[usize::from(up)].count
    }

    /// Message IDs of `up` handed out less than a lifetime ago, over all its endpoints.
    pub(super) fn reserved(&self, now: Timestamp, up: UpstreamId) -> u64 {
        (self.slab.iter())
            .filter(|(_, e)| e.upstream == up)
            .map(|(_, e)| u64::from(e.mids.reserved(now, self.lifetime)))
            .sum()
    }
}

/// One upstream: its address, and what is in flight to it.
#[derive(Debug)]
pub(super) struct Upstream {
    pub(super) addr: SocketAddr,
    pub(super) inflight: usize,
    /// Reached over a reliable transport (CoAP over TCP or TLS, RFC 8323): requests to it are
    /// never retransmitted (§2.2); the total timeout alone bounds the wait.
    pub(super) reliable: bool,
}

/// One upstream's endpoints as the metrics see them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpstreamStats {
    /// The upstream's address.
    pub addr: SocketAddr,
    /// Endpoints (sockets of the proxy's own) open or being opened towards it.
    pub endpoints: usize,
    /// Message IDs handed out towards it less than a lifetime ago, over all its endpoints.
    pub mids_reserved: u64,
    /// Exchanges waiting on it.
    pub in_flight: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Timestamp {
        Timestamp::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn the_id_space_runs_out_within_a_lifetime_and_returns_after_it() {
        let lifetime = Duration::from_secs(1);
        let mut mids = MidAllocator::new(0);
        for i in 0..=u16::MAX {
            assert_eq!(mids.allocate(at(0), lifetime), Some(i));
        }
        assert_eq!(mids.allocate(at(999), lifetime), None);
        assert_eq!(mids.free_at(lifetime), at(1000));
        assert_eq!(mids.reserved(at(999), lifetime), 65536);
        assert_eq!(mids.allocate(at(1000), lifetime), Some(0));
        assert_eq!(mids.reserved(at(1000), lifetime), 1);
    }

    /// Confirms every socket the pool asked for; returns how many were opened.
    fn open_all(e: &mut Endpoints, now: Timestamp) -> usize {
        let mut opened = 0;
        while let Some(ev) = e.poll_event() {
            if let EndpointEvent::Open { id, .. } = ev {
                e.opened(now, id);
                opened += 1;
            }
        }
        opened
    }

    fn pool(lifetime_s: u64, max: usize) -> Endpoints {
        let peer = "127.0.0.1:5683".parse().unwrap();
        let mut e = Endpoints::new(&[peer], Duration::from_secs(lifetime_s), max, 1);
        assert_eq!(open_all(&mut e, at(0)), 2, "current and spare");
        e
    }

    #[test]
    fn a_burst_takes_the_spare_then_opens_one_endpoint_per_id_space() {
        let mut e = pool(247, 1024);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..3 * 65536 {
            let (id, mid) = e.allocate(at(10), 0).unwrap();
            assert!(seen.insert((id, mid)), "{id:?} MID {mid} reused");
            open_all(&mut e, at(10));
        }
        // Three full ID spaces, plus the next spare.
        assert_eq!(e.count(0), 4);
        assert_eq!(e.reserved(at(10), 0), 3 * 65536);
    }

    #[test]
    fn a_resting_endpoint_is_reused_before_a_new_one_is_opened() {
        let mut e = pool(1, 1024);
        let (first, _) = e.allocate(at(0), 0).unwrap();
        for _ in 1..65536 {
            e.allocate(at(0), 0).unwrap();
        }
        let (second, _) = e.allocate(at(0), 0).unwrap();
        assert_ne!(first, second, "the spare took over");
        open_all(&mut e, at(0));
        for _ in 1..65536 {
            assert_eq!(e.allocate(at(600), 0).unwrap().0, second);
        }
        // The second endpoint is used up until 1.6 s; the first one's IDs are free at 1 s.
        assert_eq!(e.allocate(at(1000), 0).unwrap().0, first);
        assert_eq!(e.count(0), 3, "no socket beyond the spare");
    }

    #[test]
    fn at_the_bound_requests_are_refused_until_the_first_endpoint_frees() {
        let mut e = pool(247, 2);
        for _ in 0..2 * 65536 {
            e.allocate(at(5), 0).unwrap();
            open_all(&mut e, at(5));
        }
        assert_eq!(
            e.allocate(at(6), 0),
            Err(NoEndpoint::Bound {
                until: at(5) + Duration::from_secs(247)
            })
        );
        assert!(e.allocate(at(5) + Duration::from_secs(247), 0).is_ok());
    }

    #[test]
    fn idle_endpoints_close_a_lifetime_after_their_last_id_but_the_current_and_spare_stay() {
        let mut e = pool(10, 1024);
        for _ in 0..5 * 65536 {
            e.allocate(at(0), 0).unwrap();
            open_all(&mut e, at(0));
        }
        assert_eq!(e.count(0), 6, "five used up, one spare");
        assert_eq!(e.next_deadline(), Some(at(10_000)));
        e.sweep(at(9_999));
        assert!(
            e.poll_event().is_none(),
            "nothing closes before the lifetime"
        );
        e.sweep(at(10_000));
        let closed = std::iter::from_fn(|| e.poll_event()).count();
        assert_eq!(
            (closed, e.count(0)),
            (4, 2),
            "the current one and the spare stay"
        );
        assert_eq!(e.next_deadline(), None);
    }

    #[test]
    fn an_endpoint_with_an_observation_stays_until_its_last_user_goes() {
        let mut e = pool(10, 1024);
        let (observed, _) = e.allocate(at(0), 0).unwrap();
        e.acquire(observed);
        for _ in 1..65536 + 1 {
            e.allocate(at(0), 0).unwrap();
            open_all(&mut e, at(0));
        }
        e.sweep(at(20_000));
        assert!(e.poll_event().is_none(), "still observed");
        e.release(at(30_000), observed);
        assert_eq!(e.next_deadline(), Some(at(30_000)));
        e.sweep(at(30_000));
        assert_eq!(e.poll_event(), Some(EndpointEvent::Close { id: observed }));
    }

    #[test]
    fn a_failed_open_is_retried_a_second_later() {
        let peer = "127.0.0.1:5683".parse().unwrap();
        let mut e = Endpoints::new(&[peer], Duration::from_secs(247), 8, 1);
        let Some(EndpointEvent::Open { id, .. }) = e.poll_event() else {
            panic!("asks for a socket")
        };
        e.failed(at(0), id);
        assert_eq!(e.allocate(at(10), 0), Err(NoEndpoint::Unavailable));
        assert!(e.poll_event().is_none(), "not again within a second");
        assert_eq!(e.allocate(at(1000), 0), Err(NoEndpoint::Unavailable));
        assert_eq!(open_all(&mut e, at(1000)), 2);
        assert!(e.allocate(at(1001), 0).is_ok());
    }
}
