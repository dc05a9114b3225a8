//! The proxy engine's unit tests, all in virtual time: no sockets, no clock, no sleeps. The
//! engine's own modules test their parts (`endpoints.rs`, `answer_cache.rs`, ...); these drive
//! the whole [`Proxy`] with datagrams and timeouts. Simulations with loss, duplication and
//! reordering over millions of exchanges live in `tests/proxy_sim.rs`.

mod answers;
mod behaviours;
mod budget;
#[cfg(feature = "cache")]
mod cache;
mod held;
mod observation_shares;
mod observers;
mod regressions;
mod reliable;
mod reliable_upstream;

use crate::proxy::{EndpointId, Proxy, ProxyConfig, Seeds, Transmit};
use crate::time::Timestamp;

/// The first endpoint of the first upstream: where requests go while traffic is light.
const EP0: EndpointId = EndpointId(0);

/// A proxy made with fixed seeds, whose endpoint sockets were confirmed open at `now`.
fn started_at(config: ProxyConfig, now: Timestamp) -> Proxy {
    let seeds = Seeds {
        rng: config.seed.unwrap_or(1),
        hash: [1, 2],
    };
    let mut p = Proxy::new(config, seeds);
    p.accept_endpoint_events(now);
    p
}

/// Everything the proxy has queued to send.
fn drain(p: &mut Proxy) -> Vec<Transmit> {
    std::iter::from_fn(|| p.poll_transmit()).collect()
}
