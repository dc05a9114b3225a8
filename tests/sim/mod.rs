//! A deterministic discrete-event simulation of the CoAP proxy engine in virtual time.
//!
//! Simulated clients and upstream servers exchange datagrams with one [`Proxy`] through a lossy,
//! duplicating, reordering network. Everything runs on one seeded RNG and one event queue:
//! [`Sim::step`] jumps to the earliest of the next event and the proxy's own deadline, so a
//! minute of retransmissions costs no more than the datagrams it moves. The [`Ledger`] taps
//! every datagram the proxy emits (before loss) and records what clients and upstreams saw,
//! then checks the invariants at the end of a run.

pub mod client;
pub mod freshness;
pub mod ledger;
pub mod net;
pub mod upstream;

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::fmt;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use backoffd::coap::params::{EXCHANGE_LIFETIME, MAX_TRANSMIT_WAIT};
#[cfg(feature = "cache")]
use backoffd::proxy::CacheCounters;
use backoffd::proxy::{
    AllowedTarget, Counters, Destination, EndpointEvent, EndpointId, Peer, Proxy, ProxyConfig,
    Routing, Seeds,
};
use backoffd::time::Timestamp;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use client::Client;
pub use ledger::{Ledger, ReqId};
pub use net::Leg;
pub use upstream::{Mix, Server};

/// Index of a simulated client.
pub type ClientId = u32;
/// Clients listen on 127.0.0.1:(CLIENT_BASE_PORT + id). No datagram ever leaves the process.
const CLIENT_BASE_PORT: u16 = 10_000;
/// After the last request started, the run goes on this long: every client deadline, the
/// proxy's EXCHANGE_LIFETIME, a last MAX_TRANSMIT_WAIT of delivery and a margin fit in it.
const DRAIN: Duration = EXCHANGE_LIFETIME
    .saturating_add(MAX_TRANSMIT_WAIT)
    .saturating_add(Duration::from_secs(200));

/// A datagram's hop through the simulated network. Upstream hops name the proxy's endpoint
/// (its socket towards one upstream server).
#[derive(Clone, Copy, Debug)]
pub enum Hop {
    ClientToProxy(ClientId),
    ProxyToClient(ClientId),
    ProxyToUpstream(EndpointId),
    UpstreamToProxy(EndpointId),
}

/// Something that happens at an instant of virtual time.
pub enum Event {
    /// A datagram arrives; `tag` names the client request it carries, if the sender knows it.
    Deliver {
        hop: Hop,
        bytes: Vec<u8>,
        tag: Option<ReqId>,
    },
    /// A client's retransmission, give-up or think timer; stale unless `generation` matches.
    ClientTimer { client: ClientId, generation: u32 },
    /// An upstream server's delayed reply or retransmission.
    Server { up: u16, action: upstream::Action },
}

struct Scheduled {
    at: Timestamp,
    seq: u64,
    event: Event,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Scheduled {
    /// Reversed, so the max-heap pops the earliest event; `seq` keeps equal instants FIFO.
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// What one run looks like. Build with [`Scenario::new`] and adjust fields.
#[derive(Clone)]
pub struct Scenario {
    pub name: &'static str,
    pub seed: u64,
    pub clients: u32,
    /// Client requests started in the run.
    pub requests: u32,
    /// One entry per upstream; entry 0 is the reverse-proxy upstream, the rest are reached
    /// through Proxy-Uri (forward proxying with an allowlist).
    pub servers: Vec<ServerSpec>,
    pub mix: Mix,
    /// Fraction of NON requests (the rest are CON).
    pub non_fraction: f64,
    /// Method fractions; the rest are GET.
    pub post_fraction: f64,
    pub put_fraction: f64,
    /// 0: every request names a resource of its own (its id is the Uri-Query), so none
    /// shares a cache key. N: requests go to N resources per upstream, shared by all clients,
    /// whose answers carry ETag and Max-Age, and the ledger checks that every answer to a GET
    /// was fresh when given (`freshness.rs`); set `config.cache_size` to cache them.
    pub resources: u32,
    /// A client waits uniformly up to this long between requests.
    pub think: Duration,
    pub client_leg: Leg,
    pub upstream_leg: Leg,
    pub config: ProxyConfig,
}

/// How one simulated upstream server behaves.
#[derive(Clone, Copy, Debug)]
pub struct ServerSpec {
    /// Remembers (source, MID) for EXCHANGE_LIFETIME and replays its reply (RFC 7252 §4.5).
    pub dedup: bool,
    /// Goes down for 5 s every 2 minutes: datagrams vanish and the proxy hears ICMP unreachable.
    pub outages: bool,
}

impl Scenario {
    /// A busy, lossy run: 1500 clients, four upstreams (two deduplicating, one with outages),
    /// loss, duplication and delay drawn from the seed for each leg.
    pub fn new(name: &'static str, seed: u64, requests: u32) -> Scenario {
        let mut rng = SmallRng::seed_from_u64(seed ^ 0x5eed_1e95);
        let servers = vec![
            ServerSpec {
                dedup: true,
                outages: false,
            },
            ServerSpec {
                dedup: false,
                outages: false,
            },
            ServerSpec {
                dedup: true,
                outages: false,
            },
            ServerSpec {
                dedup: false,
                outages: true,
            },
        ];
        Scenario {
            name,
            seed,
            clients: 1500,
            requests,
            servers,
            mix: Mix::default(),
            non_fraction: 0.15,
            post_fraction: 0.3,
            put_fraction: 0.2,
            resources: 0,
            think: Duration::from_secs(1),
            client_leg: Leg::random(&mut rng),
            upstream_leg: Leg::random(&mut rng),
            config: ProxyConfig::default(),
        }
    }

    /// The proxy configuration with routing filled in for [`Scenario::servers`].
    fn proxy_config(&self) -> ProxyConfig {
        let allow = (1..self.servers.len() as u16)
            .map(|u| AllowedTarget {
                host: upstream_addr(u).ip().to_string(),
                port: upstream_addr(u).port(),
                addr: upstream_addr(u),
            })
            .collect::<Vec<_>>();
        let routing = Routing {
            upstream: Some(upstream_addr(0)),
            forward: !allow.is_empty(),
            allow,
        };
        ProxyConfig {
            routing,
            ..self.config.clone()
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "scenario {} seed {} ({} requests, {} clients; client leg {}; upstream leg {})",
            self.name, self.seed, self.requests, self.clients, self.client_leg, self.upstream_leg
        )
    }
}

pub fn client_addr(c: ClientId) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], CLIENT_BASE_PORT + c as u16))
}

pub fn client_id(addr: SocketAddr) -> Option<ClientId> {
    addr.port().checked_sub(CLIENT_BASE_PORT).map(u32::from)
}

pub fn upstream_addr(u: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 1, 1 + u as u8], 5683))
}

/// Shared by everything in the simulation except the proxy: clock, events, RNG, network, ledger.
pub struct Ctx {
    pub now: Timestamp,
    queue: BinaryHeap<Scheduled>,
    seq: u64,
    pub rng: SmallRng,
    pub net: net::Network,
    pub ledger: Ledger,
    pub scenario: Scenario,
    /// Requests started so far, and when the last one started.
    pub started: u32,
    pub last_start: Timestamp,
}

impl Ctx {
    pub fn schedule(&mut self, at: Timestamp, event: Event) {
        self.seq += 1;
        self.queue.push(Scheduled {
            at,
            seq: self.seq,
            event,
        });
    }

    /// Hands a datagram to the network: it may be lost, duplicated and delayed.
    pub fn send(&mut self, hop: Hop, bytes: Vec<u8>, tag: Option<ReqId>) {
        let leg = match hop {
            Hop::ClientToProxy(_) | Hop::ProxyToClient(_) => self.scenario.client_leg,
            Hop::ProxyToUpstream(_) | Hop::UpstreamToProxy(_) => self.scenario.upstream_leg,
        };
        for delay in self.net.fate(&mut self.rng, &leg) {
            let at = self.now + delay;
            self.schedule(
                at,
                Event::Deliver {
                    hop,
                    bytes: bytes.clone(),
                    tag,
                },
            );
        }
    }

    /// A uniformly random duration in `[lo, hi]`.
    pub fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let ns = self
            .rng
            .random_range(lo.as_nanos() as u64..=hi.as_nanos() as u64);
        Duration::from_nanos(ns)
    }
}

/// The outcome of one run: what happened, how fast, and every invariant violation.
pub struct Report {
    pub scenario: String,
    pub requests: u64,
    pub outcomes: ledger::Tally,
    pub counters: Counters,
    #[cfg(feature = "cache")]
    pub cache: CacheCounters,
    pub events: u64,
    /// Datagrams sent, lost and duplicated by the network.
    pub datagrams: (u64, u64, u64),
    pub virtual_time: Duration,
    /// When the last request started.
    pub last_start: Duration,
    pub wall: Duration,
    /// Upstream endpoints: opened in all, most open at once, open at the end.
    pub endpoints: (u64, usize, usize),
    pub violations: Vec<String>,
    pub violation_count: u64,
}

impl Report {
    /// Panics with the scenario (and so the seed) and the first violations, if any.
    pub fn assert_ok(&self) {
        assert!(
            self.violation_count == 0,
            "{} violation(s) in {}:\n  {}\n{}",
            self.violation_count,
            self.scenario,
            self.violations.join("\n  "),
            self
        );
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rate = self.requests as f64 / self.wall.as_secs_f64().max(1e-9);
        writeln!(f, "{}", self.scenario)?;
        writeln!(
            f,
            "  {} exchanges started within {:.0} s, {} events, {:.0} s virtual in {:.2} s wall ({:.0} exchanges/s)",
            self.requests,
            self.last_start.as_secs_f64(),
            self.events,
            self.virtual_time.as_secs_f64(),
            self.wall.as_secs_f64(),
            rate
        )?;
        let (sent, lost, duplicated) = self.datagrams;
        writeln!(
            f,
            "  network: {sent} datagrams, {lost} lost, {duplicated} duplicated"
        )?;
        let (opened, most, left) = self.endpoints;
        writeln!(
            f,
            "  upstream endpoints: {opened} opened, at most {most} open at once, {left} open at the end"
        )?;
        writeln!(f, "  {}", self.outcomes)?;
        let c = &self.counters;
        write!(
            f,
            "  proxy: forwarded {}, client dups {}, upstream retx {}, client retx {}, empty ACKs {}, \
             5.02 {}, 5.03 {}, 5.04 {}, stale timers {}, evictions {}, delivery failures {}",
            c.traffic.forwarded,
            c.traffic.client_duplicates,
            c.traffic.upstream_retransmissions,
            c.traffic.client_retransmissions,
            c.traffic.empty_acks_sent,
            c.own_answers.bad_gateway_5_02,
            c.own_answers.service_unavailable_5_03,
            c.own_answers.gateway_timeout_5_04,
            c.traffic.stale_timer_events,
            c.kept.cache_evictions,
            c.traffic.client_delivery_failures
        )?;
        #[cfg(feature = "cache")]
        if self.cache.stored > 0 {
            let k = &self.cache;
            write!(
                f,
                "\n  response cache: hits {}, misses {}, revalidations {} ({} answered 2.03), \
                 invalidations {}, evictions {}, expired {}, stored {}",
                k.hits,
                k.misses,
                k.revalidations,
                k.revalidated,
                k.invalidations,
                k.evictions,
                k.expired,
                k.stored
            )?;
        }
        Ok(())
    }
}

/// The proxy's randomness for a scenario's seed: the same seed replays the same run.
fn seeds(seed: u64) -> Seeds {
    Seeds {
        rng: seed,
        hash: [seed ^ 0x243f_6a88_85a3_08d3, seed ^ 0x1319_8a2e_0370_7344],
    }
}

/// The proxy, its clients and upstreams, and the event queue between them.
pub struct Sim {
    proxy: Proxy,
    clients: Vec<Client>,
    servers: Vec<Server>,
    /// The proxy's open endpoints and the server each one is connected to.
    endpoints: HashMap<EndpointId, u16>,
    endpoint_stats: (u64, usize),
    ctx: Ctx,
    events: u64,
}

impl Sim {
    pub fn new(scenario: &Scenario) -> Sim {
        let config = scenario.proxy_config();
        config
            .validate()
            .expect("scenario builds a valid proxy configuration");
        let mut ctx = Ctx {
            now: Timestamp::ZERO,
            queue: BinaryHeap::new(),
            seq: 0,
            rng: SmallRng::seed_from_u64(scenario.seed),
            net: net::Network::default(),
            ledger: Ledger::new(&config),
            scenario: scenario.clone(),
            started: 0,
            last_start: Timestamp::ZERO,
        };
        let clients = (0..scenario.clients)
            .map(|c| Client::new(c, &mut ctx))
            .collect();
        let servers = scenario
            .servers
            .iter()
            .enumerate()
            .map(|(u, spec)| Server::new(u as u16, *spec))
            .collect();
        let mut sim = Sim {
            proxy: Proxy::new(config, seeds(scenario.seed)),
            clients,
            servers,
            endpoints: HashMap::new(),
            endpoint_stats: (0, 0),
            ctx,
            events: 0,
        };
        sim.follow_endpoints();
        sim
    }

    /// Opens and closes what the proxy asks for, as a driver would; the ledger checks that no
    /// endpoint closes while one of its Message IDs may be reserved.
    fn follow_endpoints(&mut self) {
        let now = self.ctx.now;
        for event in self.proxy.accept_endpoint_events(now) {
            match event {
                EndpointEvent::Open { id, peer } => {
                    let server = (0..self.servers.len() as u16)
                        .find(|&u| upstream_addr(u) == peer)
                        .expect("endpoints connect to a simulated upstream");
                    if self.endpoints.insert(id, server).is_some() {
                        let text = format!("endpoint {id:?} opened twice");
                        self.ctx.ledger.violation(now, text);
                    }
                    self.endpoint_stats.0 += 1;
                }
                EndpointEvent::Close { id } => {
                    if self.endpoints.remove(&id).is_none() {
                        let text = format!("endpoint {id:?} closed but not open");
                        self.ctx.ledger.violation(now, text);
                    }
                    self.ctx.ledger.endpoint_closed(now, id);
                }
            }
        }
        self.endpoint_stats.1 = self.endpoint_stats.1.max(self.endpoints.len());
    }

    /// Runs until nothing is left to happen (or the drain deadline passed), then checks.
    pub fn run(mut self) -> Report {
        let wall = Instant::now();
        while self.step() {
            let all_started = self.ctx.started == self.ctx.scenario.requests;
            if all_started && self.ctx.now > self.ctx.last_start + DRAIN {
                break;
            }
        }
        self.finish(wall.elapsed())
    }

    /// Advances to the earliest event or proxy deadline and runs it. `false` when idle.
    pub fn step(&mut self) -> bool {
        let next_event = self.ctx.queue.peek().map(|s| s.at);
        let proxy_due = self.proxy.poll_timeout();
        let proxy_first = match (proxy_due, next_event) {
            (None, None) => return false,
            (Some(p), Some(e)) => p <= e,
            (p, _) => p.is_some(),
        };
        self.events += 1;
        if proxy_first {
            let due = proxy_due.expect("checked");
            self.ctx.now = self.ctx.now.max(due);
            self.proxy.handle_timeout(self.ctx.now);
        } else {
            let Scheduled { at, event, .. } = self.ctx.queue.pop().expect("peeked");
            self.ctx.now = at;
            self.dispatch(event);
        }
        self.flush_proxy();
        true
    }

    fn dispatch(&mut self, event: Event) {
        let now = self.ctx.now;
        match event {
            Event::Deliver { hop, bytes, tag } => match hop {
                Hop::ClientToProxy(c) => {
                    self.ctx.ledger.proxy_received(now, tag, &bytes);
                    let from = client_addr(c);
                    self.proxy.handle_client_datagram(now, from, &bytes);
                }
                Hop::UpstreamToProxy(ep) => {
                    // A datagram to a closed endpoint finds no socket (the kernel drops it).
                    if let Some(&up) = self.endpoints.get(&ep) {
                        self.ctx.ledger.proxy_heard(now, (up, ep), &bytes);
                        self.proxy.handle_upstream_datagram(now, ep, &bytes)
                    }
                }
                Hop::ProxyToClient(c) => {
                    self.clients[c as usize].on_datagram(&mut self.ctx, &bytes)
                }
                Hop::ProxyToUpstream(ep) => {
                    let Some(&u) = self.endpoints.get(&ep) else {
                        let text = format!("a datagram left endpoint {ep:?}, which is not open");
                        return self.ctx.ledger.violation(now, text);
                    };
                    let server = &mut self.servers[usize::from(u)];
                    if server.is_down(now) {
                        if server.should_report_unreachable(now) {
                            self.proxy.handle_upstream_unreachable(now, ep);
                        }
                    } else {
                        server.on_datagram(&mut self.ctx, ep, &bytes);
                    }
                }
            },
            Event::ClientTimer { client, generation } => {
                let partner = self.clients[(client ^ 1) as usize % self.clients.len()].last_token;
                self.clients[client as usize].on_timer(&mut self.ctx, generation, partner);
            }
            Event::Server { up, action } => {
                self.servers[usize::from(up)].on_action(&mut self.ctx, action)
            }
        }
    }

    /// Everything the proxy wants to send goes through the ledger's tap, then the network.
    fn flush_proxy(&mut self) {
        self.follow_endpoints();
        while let Some(t) = self.proxy.poll_transmit() {
            let server = match t.to {
                Destination::Upstream(ep) => self.endpoints.get(&ep).copied(),
                Destination::Client(_) => None,
            };
            self.ctx
                .ledger
                .proxy_sent(self.ctx.now, &t, server, &self.clients);
            let hop = match t.to {
                Destination::Client(Peer::Udp(addr)) => {
                    Hop::ProxyToClient(client_id(addr).expect("a simulated client"))
                }
                Destination::Client(peer) => panic!("{peer} is not a simulated client"),
                Destination::Upstream(ep) => Hop::ProxyToUpstream(ep),
            };
            self.ctx.send(hop, t.payload, None);
        }
    }

    fn finish(mut self, wall: Duration) -> Report {
        let counters = self.proxy.counters();
        let proxy_state = [
            ("live_exchanges()", self.proxy.live_exchanges() as u64),
            ("pending_timers()", self.proxy.pending_timers() as u64),
            ("counters().live_exchanges", counters.load.live_exchanges),
            ("counters().cached_answers", counters.kept.cached_answers),
            ("counters().in_flight", counters.load.in_flight),
            ("counters().observations", counters.observe.observations),
        ];
        for (what, left) in proxy_state {
            if left != 0 {
                let at = self.ctx.now;
                self.ctx.ledger.violation(
                    at,
                    format!("{what} = {left} after every deadline passed (state left behind)"),
                );
            }
        }
        let outcomes = self.ctx.ledger.check_end(self.ctx.now, &counters);
        Report {
            scenario: self.ctx.scenario.to_string(),
            requests: u64::from(self.ctx.started),
            outcomes,
            counters,
            #[cfg(feature = "cache")]
            cache: self.proxy.cache_counters(),
            events: self.events,
            datagrams: (
                self.ctx.net.sent,
                self.ctx.net.lost,
                self.ctx.net.duplicated,
            ),
            virtual_time: self.ctx.now.saturating_since(Timestamp::ZERO),
            last_start: self.ctx.last_start.saturating_since(Timestamp::ZERO),
            wall,
            endpoints: (
                self.endpoint_stats.0,
                self.endpoint_stats.1,
                self.endpoints.len(),
            ),
            violations: self.ctx.ledger.violations.clone(),
            violation_count: self.ctx.ledger.violation_count,
        }
    }
}

/// Runs a scenario and prints its report (visible with `--nocapture`).
pub fn run(scenario: &Scenario) -> Report {
    let report = Sim::new(scenario).run();
    println!("{report}");
    report
}
