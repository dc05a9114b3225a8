//! A simulated upstream CoAP server. Per request it picks a behaviour from a seeded mix:
//! piggybacked answer (fast, slow or late), empty ACK then a separate CON (retransmitted until
//! ACKed or RST) or NON answer, empty ACK and silence, silence, RST, or 4.04. A deduplicating
//! server remembers (source, MID) for EXCHANGE_LIFETIME, replays its reply to duplicates and
//! executes each request once (RFC 7252 §4.5); the others execute every copy they receive. The
//! source is the proxy's endpoint (its socket's port) the request came from, and every reply
//! goes back to it.
//!
//! With shared resources (`Scenario::resources`) a server keeps a version per resource: a
//! GET gets that version's representation with its ETag and a Max-Age drawn per answer (or
//! 2.03 if it asked with the current ETag, RFC 7252 §5.10.6.2), and a PUT or POST makes the
//! next version.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use backoffd::coap::option::{ETAG, MAX_AGE, URI_QUERY};
use backoffd::coap::params::{ACK_RANDOM_FACTOR, ACK_TIMEOUT, EXCHANGE_LIFETIME, MAX_RETRANSMIT};
use backoffd::coap::{empty_ack, rst, Code, Message, MessageBuilder, MessageType};
use backoffd::proxy::EndpointId;
use backoffd::time::Timestamp;
use rand::Rng;

use super::client::{Tok, REQUEST_ID};
use super::freshness::{etag, not_found, representation, resource_of};
use super::ledger::ReqId;
use super::{Ctx, Event, Hop, ServerSpec};

/// Relative weights of the behaviours.
#[derive(Clone, Copy, Debug)]
pub struct Mix {
    /// Piggybacked within 0..60 ms (before the proxy's ACK delay, usually).
    pub piggyback: u32,
    /// Piggybacked after 0.1..2.5 s: the client gets an empty ACK, the proxy may retransmit.
    pub slow: u32,
    /// Piggybacked after 2.5..40 s: retransmissions, and often after the proxy gave up.
    pub late: u32,
    /// Empty ACK, then a CON answer after 0.05..20 s.
    pub separate_con: u32,
    /// Empty ACK, then a NON answer after 0.05..20 s.
    pub separate_non: u32,
    /// Empty ACK, then nothing.
    pub separate_never: u32,
    /// Nothing at all.
    pub never: u32,
    pub reset: u32,
    /// A piggybacked 4.04.
    pub not_found: u32,
}

impl Default for Mix {
    fn default() -> Mix {
        Mix {
            piggyback: 45,
            slow: 8,
            late: 4,
            separate_con: 15,
            separate_non: 8,
            separate_never: 3,
            never: 4,
            reset: 4,
            not_found: 3,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Behaviour {
    Piggyback(Duration),
    Separate { con: bool, after: Duration },
    SeparateNever,
    Never,
    Reset,
    NotFound,
}

impl Mix {
    fn pick(&self, ctx: &mut Ctx) -> Behaviour {
        let ms = |a, b| (Duration::from_millis(a), Duration::from_millis(b));
        let weights = [
            self.piggyback,
            self.slow,
            self.late,
            self.separate_con,
            self.separate_non,
            self.separate_never,
            self.never,
            self.reset,
            self.not_found,
        ];
        let mut x = ctx.rng.random_range(0..weights.iter().sum::<u32>());
        let mut i = 0;
        while x >= weights[i] {
            x -= weights[i];
            i += 1;
        }
        let mut delay = |(lo, hi)| ctx.between(lo, hi);
        match i {
            0 => Behaviour::Piggyback(delay(ms(0, 60))),
            1 => Behaviour::Piggyback(delay(ms(100, 2_500))),
            2 => Behaviour::Piggyback(delay(ms(2_500, 40_000))),
            3 | 4 => Behaviour::Separate {
                con: i == 3,
                after: delay(ms(50, 20_000)),
            },
            5 => Behaviour::SeparateNever,
            6 => Behaviour::Never,
            7 => Behaviour::Reset,
            _ => Behaviour::NotFound,
        }
    }
}

/// A server's delayed work, each towards the proxy endpoint `to`.
pub enum Action {
    /// Send this datagram now (a late piggybacked answer).
    Send { to: EndpointId, bytes: Vec<u8> },
    /// Send a separate answer with a fresh MID.
    Separate {
        to: EndpointId,
        con: bool,
        reply: Reply,
        token: Tok,
    },
    /// Retransmit the separate CON answer `mid` unless it was ACKed (generation matches).
    Retransmit {
        to: EndpointId,
        mid: u16,
        generation: u32,
    },
}

/// What a deduplicating server remembers per request MID.
struct Seen {
    until: Timestamp,
    /// The reply, sendable from `ready` on (a slow answer is not ready yet).
    ready: Timestamp,
    reply: Option<Vec<u8>>,
}

struct PendingCon {
    bytes: Vec<u8>,
    retransmits: u32,
    timeout: Duration,
    generation: u32,
}

pub struct Server {
    index: u16,
    spec: ServerSpec,
    next_mid: u16,
    seen: HashMap<(EndpointId, u16), Seen>,
    seen_order: VecDeque<(Timestamp, (EndpointId, u16))>,
    pending: HashMap<(EndpointId, u16), PendingCon>,
    generation: u32,
    last_unreachable: Option<Timestamp>,
    /// The current version of each shared resource.
    versions: HashMap<u32, u32>,
}

/// What a server answers to one request, whatever message carries it.
#[derive(Clone, Debug)]
pub struct Reply {
    code: Code,
    etag: Option<[u8; 8]>,
    /// None: no Max-Age option (RFC 7252 §5.10.5: 60 s).
    max_age: Option<u32>,
    payload: Vec<u8>,
}

impl Server {
    pub fn new(index: u16, spec: ServerSpec) -> Server {
        Server {
            index,
            spec,
            next_mid: 0x4000 * index,
            seen: HashMap::new(),
            seen_order: VecDeque::new(),
            pending: HashMap::new(),
            generation: 0,
            last_unreachable: None,
            versions: HashMap::new(),
        }
    }

    /// Down 5 s out of every 120 s (phase per server), if it has outages at all.
    pub fn is_down(&self, now: Timestamp) -> bool {
        let phase = (now.as_nanos() / 1_000_000_000 + 37 * u64::from(self.index)) % 120;
        self.spec.outages && phase < 5
    }

    /// ICMP errors are rate-limited (as kernels do): at most one report per 200 ms.
    pub fn should_report_unreachable(&mut self, now: Timestamp) -> bool {
        let due = self
            .last_unreachable
            .is_none_or(|t| now >= t + Duration::from_millis(200));
        if due {
            self.last_unreachable = Some(now);
        }
        due
    }

    fn send(&self, ctx: &mut Ctx, to: EndpointId, bytes: Vec<u8>) {
        ctx.send(Hop::UpstreamToProxy(to), bytes, None);
    }

    fn later(&self, ctx: &mut Ctx, at: Timestamp, action: Action) {
        let up = self.index;
        ctx.schedule(at, Event::Server { up, action });
    }

    /// A datagram from the proxy's endpoint `from`.
    pub fn on_datagram(&mut self, ctx: &mut Ctx, from: EndpointId, bytes: &[u8]) {
        let Ok(msg) = Message::parse(bytes) else {
            let text = format!("upstream {} got a malformed datagram", self.index);
            return ctx.ledger.violation(ctx.now, text);
        };
        match msg.msg_type() {
            MessageType::Ack | MessageType::Rst => {
                self.pending.remove(&(from, msg.message_id()));
            }
            _ if msg.code().is_request() => self.on_request(ctx, from, &msg),
            _ => {
                let text = format!("upstream {} got a non-request CON/NON", self.index);
                ctx.ledger.violation(ctx.now, text);
            }
        }
    }

    fn on_request(&mut self, ctx: &mut Ctx, from: EndpointId, msg: &Message) {
        let mid = msg.message_id();
        if self.spec.dedup && self.replay(ctx, (from, mid)) {
            return;
        }
        let Some(id) = request_id(msg) else {
            let text = format!("upstream {} got a request without its id", self.index);
            return ctx.ledger.violation(ctx.now, text);
        };
        ctx.ledger.executed(id, self.spec.dedup);
        let token = Tok::new(msg.token());
        let mix = ctx.scenario.mix;
        let (reply, ready) = match mix.pick(ctx) {
            Behaviour::Piggyback(after) => {
                let reply = self.execute(ctx, msg, id);
                (Some(answer(MessageType::Ack, mid, token, &reply)), after)
            }
            Behaviour::NotFound => {
                let reply = not_found_reply(ctx, msg, id);
                let a = answer(MessageType::Ack, mid, token, &reply);
                (Some(a), Duration::ZERO)
            }
            Behaviour::Separate { con, after } => {
                let action = Action::Separate {
                    to: from,
                    con,
                    reply: self.execute(ctx, msg, id),
                    token,
                };
                self.later(ctx, ctx.now + after, action);
                (Some(encoded(empty_ack, mid)), Duration::ZERO)
            }
            Behaviour::SeparateNever => (Some(encoded(empty_ack, mid)), Duration::ZERO),
            Behaviour::Never => (None, Duration::ZERO),
            Behaviour::Reset => (Some(encoded(rst, mid)), Duration::ZERO),
        };
        let ready = ctx.now + ready;
        if let Some(bytes) = &reply {
            let action = Action::Send {
                to: from,
                bytes: bytes.clone(),
            };
            self.later(ctx, ready, action);
        }
        if self.spec.dedup {
            let until = ctx.now + EXCHANGE_LIFETIME;
            self.seen.insert(
                (from, mid),
                Seen {
                    until,
                    ready,
                    reply,
                },
            );
            self.seen_order.push_back((until, (from, mid)));
        }
    }

    /// A duplicate within EXCHANGE_LIFETIME gets the same reply again, once it is ready.
    fn replay(&mut self, ctx: &mut Ctx, source_mid: (EndpointId, u16)) -> bool {
        while let Some(&(until, old)) = self.seen_order.front() {
            if until > ctx.now {
                break;
            }
            self.seen_order.pop_front();
            if self.seen.get(&old).is_some_and(|s| s.until == until) {
                self.seen.remove(&old);
            }
        }
        let Some(seen) = self.seen.get(&source_mid) else {
            return false;
        };
        if let Some(reply) = seen.reply.as_ref().filter(|_| seen.ready <= ctx.now) {
            self.send(ctx, source_mid.0, reply.clone());
        }
        true
    }

    pub fn on_action(&mut self, ctx: &mut Ctx, action: Action) {
        match action {
            Action::Send { to, bytes } => self.send(ctx, to, bytes),
            Action::Separate {
                to,
                con,
                reply,
                token,
            } => {
                let mid = self.next_mid;
                self.next_mid = mid.wrapping_add(1);
                let ty = if con {
                    MessageType::Con
                } else {
                    MessageType::Non
                };
                let bytes = answer(ty, mid, token, &reply);
                if con {
                    let timeout =
                        ACK_TIMEOUT.mul_f64(ctx.rng.random_range(1.0..=ACK_RANDOM_FACTOR));
                    self.generation += 1;
                    let generation = self.generation;
                    let pending = PendingCon {
                        bytes: bytes.clone(),
                        retransmits: 0,
                        timeout,
                        generation,
                    };
                    self.pending.insert((to, mid), pending);
                    let action = Action::Retransmit {
                        to,
                        mid,
                        generation,
                    };
                    self.later(ctx, ctx.now + timeout, action);
                }
                self.send(ctx, to, bytes);
            }
            Action::Retransmit {
                to,
                mid,
                generation,
            } => self.retransmit(ctx, to, mid, generation),
        }
    }

    fn retransmit(&mut self, ctx: &mut Ctx, to: EndpointId, mid: u16, generation: u32) {
        let Some(p) = self
            .pending
            .get_mut(&(to, mid))
            .filter(|p| p.generation == generation)
        else {
            return;
        };
        if p.retransmits == MAX_RETRANSMIT {
            self.pending.remove(&(to, mid));
            return;
        }
        p.retransmits += 1;
        p.timeout *= 2;
        let (bytes, at) = (p.bytes.clone(), ctx.now + p.timeout);
        let action = Action::Retransmit {
            to,
            mid,
            generation,
        };
        self.later(ctx, at, action);
        self.send(ctx, to, bytes);
    }
}

fn encoded(write: fn(&mut Vec<u8>, u16), mid: u16) -> Vec<u8> {
    let mut out = Vec::with_capacity(4);
    write(&mut out, mid);
    out
}

impl Server {
    /// Executes request `id`: an answer echoing its id, so its client can tell it got its
    /// own; for a shared resource, its representation, or the next version of it.
    fn execute(&mut self, ctx: &mut Ctx, msg: &Message, id: ReqId) -> Reply {
        let echo = |code| Reply::echo(code, id);
        let Some(res) = shared_resource(msg) else {
            return echo(match msg.code() {
                Code::POST => Code::CREATED,
                Code::PUT => Code::CHANGED,
                _ => Code::CONTENT,
            });
        };
        let version = self.versions.entry(res).or_default();
        match msg.code() {
            Code::POST | Code::PUT => {
                *version += 1;
                echo(match msg.code() {
                    Code::POST => Code::CREATED,
                    _ => Code::CHANGED,
                })
            }
            _ => {
                let tag = etag(res, *version);
                let current = msg.options().any(|(n, v)| n == ETAG && v == tag);
                let (code, payload) = match current {
                    true => (Code::VALID, Vec::new()),
                    false => (Code::CONTENT, representation(res, *version).into_bytes()),
                };
                Reply {
                    code,
                    etag: Some(tag),
                    max_age: draw_max_age(ctx),
                    payload,
                }
            }
        }
    }
}

impl Reply {
    fn echo(code: Code, id: ReqId) -> Reply {
        Reply {
            code,
            etag: None,
            max_age: None,
            payload: format!("id={id}").into_bytes(),
        }
    }
}

/// A 4.04: echoing the id, or naming the shared resource (then cacheable, §5.6).
fn not_found_reply(ctx: &mut Ctx, msg: &Message, id: ReqId) -> Reply {
    match shared_resource(msg) {
        Some(res) if msg.code() == Code::GET => Reply {
            code: Code::NOT_FOUND,
            etag: None,
            max_age: draw_max_age(ctx),
            payload: not_found(res).into_bytes(),
        },
        _ => Reply::echo(Code::NOT_FOUND, id),
    }
}

/// Max-Age 0..=20 s, or (one in eight) no option: the default 60 s.
fn draw_max_age(ctx: &mut Ctx) -> Option<u32> {
    match ctx.rng.random_range(0..8) {
        0 => None,
        _ => Some(ctx.rng.random_range(0..=20)),
    }
}

fn answer(ty: MessageType, mid: u16, token: Tok, reply: &Reply) -> Vec<u8> {
    let mut out = Vec::with_capacity(24);
    let mut b = MessageBuilder::new(&mut out, ty, reply.code, mid, token.as_bytes());
    if let Some(tag) = &reply.etag {
        b.option(ETAG, tag);
    }
    if let Some(age) = reply.max_age {
        b.option(
            MAX_AGE,
            &age.to_be_bytes()[age.leading_zeros() as usize / 8..],
        );
    }
    b.payload(&reply.payload);
    b.finish().expect("a valid answer");
    out
}

/// The request id: the REQUEST_ID option (NoCacheKey, with shared resources), else
/// Uri-Query `id=N`.
pub fn request_id(msg: &Message) -> Option<ReqId> {
    if let Some(id) = msg.option(REQUEST_ID) {
        return std::str::from_utf8(id).ok()?.parse().ok();
    }
    let query = msg
        .options()
        .find(|&(n, v)| n == URI_QUERY && v.starts_with(b"id="))?
        .1;
    std::str::from_utf8(&query[3..]).ok()?.parse().ok()
}

/// The shared resource a request names in Uri-Query `res=K`.
fn shared_resource(msg: &Message) -> Option<u32> {
    let (_, query) = msg
        .options()
        .find(|&(n, v)| n == URI_QUERY && v.starts_with(b"res="))?;
    resource_of(query)
}
