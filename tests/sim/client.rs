//! A simulated CoAP client (RFC 7252): one request at a time (NSTART = 1), CON or NON,
//! retransmitted with the same MID and token (ACK_TIMEOUT x [1, 1.5], doubling,
//! MAX_RETRANSMIT), separate answers ACKed and deduplicated by MID (§4.5), giving up after
//! MAX_TRANSMIT_WAIT without an ACK or EXCHANGE_LIFETIME after an empty ACK.

use std::collections::{HashMap, VecDeque};
use std::time::Duration;

use backoffd::coap::option::{PROXY_URI, URI_PATH, URI_QUERY};
use backoffd::coap::params::{
    ACK_RANDOM_FACTOR, ACK_TIMEOUT, EXCHANGE_LIFETIME, MAX_RETRANSMIT, MAX_TRANSMIT_WAIT,
    NON_LIFETIME,
};
use backoffd::coap::{empty_ack, rst, Code, Message, MessageBuilder, MessageType};
use backoffd::time::Timestamp;
use rand::Rng;

use super::ledger::{Req, ReqId};
use super::{upstream_addr, ClientId, Ctx, Event, Hop};

/// The option that carries a request's id when requests share resources: experimental
/// (RFC 7252 §12.2, 65000..65535), elective, safe to forward and NoCacheKey (`% 32 == 28`,
/// §5.4.6), so it reaches the upstream but never splits the cache key.
pub const REQUEST_ID: u16 = 65020;

/// How long a client remembers its requests' MIDs and tokens (and so keeps tokens unique):
/// longer than any answer can take to arrive.
const RETENTION: Duration = Duration::from_secs(400);

/// A token held inline (0..=8 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Tok {
    len: u8,
    bytes: [u8; 8],
}

impl Tok {
    pub fn new(t: &[u8]) -> Tok {
        let mut bytes = [0; 8];
        bytes[..t.len()].copy_from_slice(t);
        Tok {
            len: t.len() as u8,
            bytes,
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

/// The request in flight.
struct Outstanding {
    id: ReqId,
    con: bool,
    bytes: Vec<u8>,
    retransmits: u32,
    timeout: Duration,
    /// An empty ACK came: stop retransmitting, wait for the separate answer.
    acked: bool,
}

pub struct Client {
    id: ClientId,
    next_mid: u16,
    /// Recent requests by MID (piggybacked ACKs) and by token (separate answers).
    pub by_mid: HashMap<u16, ReqId>,
    pub by_token: HashMap<Tok, ReqId>,
    history: VecDeque<(Timestamp, u16, Tok, ReqId)>,
    /// CON/NON Message IDs received from the proxy, for deduplication (RFC 7252 §4.5).
    seen: HashMap<u16, Timestamp>,
    seen_order: VecDeque<(Timestamp, u16)>,
    current: Option<Outstanding>,
    generation: u32,
    /// The token of the latest request, which the partner client sometimes reuses.
    pub last_token: Tok,
}

impl Client {
    /// A client whose first request starts within the first second.
    pub fn new(id: ClientId, ctx: &mut Ctx) -> Client {
        let client = Client {
            id,
            next_mid: ctx.rng.random(),
            by_mid: HashMap::new(),
            by_token: HashMap::new(),
            history: VecDeque::new(),
            seen: HashMap::new(),
            seen_order: VecDeque::new(),
            current: None,
            generation: 0,
            last_token: Tok::default(),
        };
        let start = ctx.between(Duration::ZERO, Duration::from_secs(1));
        ctx.schedule(
            Timestamp::ZERO + start,
            Event::ClientTimer {
                client: id,
                generation: 0,
            },
        );
        client
    }

    fn arm(&mut self, ctx: &mut Ctx, at: Timestamp) {
        self.generation += 1;
        let (client, generation) = (self.id, self.generation);
        ctx.schedule(at, Event::ClientTimer { client, generation });
    }

    pub fn on_timer(&mut self, ctx: &mut Ctx, generation: u32, partner: Tok) {
        if generation != self.generation {
            return;
        }
        let Some(cur) = self.current.as_mut() else {
            return self.start(ctx, partner);
        };
        if cur.con && !cur.acked && cur.retransmits < MAX_RETRANSMIT {
            cur.retransmits += 1;
            cur.timeout *= 2;
            let (bytes, at, id) = (cur.bytes.clone(), ctx.now + cur.timeout, cur.id);
            ctx.send(Hop::ClientToProxy(self.id), bytes, Some(id));
            return self.arm(ctx, at);
        }
        let id = cur.id;
        ctx.ledger.gave_up(id);
        self.current = None;
        self.think(ctx);
    }

    fn think(&mut self, ctx: &mut Ctx) {
        let pause = ctx.between(Duration::ZERO, ctx.scenario.think);
        let at = ctx.now + pause;
        self.arm(ctx, at);
    }

    /// Sends a new request, unless the run has started all it wanted.
    fn start(&mut self, ctx: &mut Ctx, partner: Tok) {
        if ctx.started == ctx.scenario.requests {
            return;
        }
        ctx.started += 1;
        ctx.last_start = ctx.now;
        self.forget_old(ctx.now);
        let s = &ctx.scenario;
        let (non, post, put) = (s.non_fraction, s.post_fraction, s.put_fraction);
        let upstreams = s.servers.len() as u16;
        let con = !ctx.rng.random_bool(non);
        let method = match ctx.rng.random::<f64>() {
            x if x < post => Code::POST,
            x if x < post + put => Code::PUT,
            _ => Code::GET,
        };
        let upstream = ctx.rng.random_range(0..upstreams);
        let resource = (s.resources > 0).then(|| ctx.rng.random_range(0..s.resources));
        let token = self.fresh_token(ctx, partner);
        let mid = self.next_mid;
        self.next_mid = mid.wrapping_add(1);
        let mut req = Req::new(self.id, mid, token, method, con, upstream, ctx.now);
        req.resource = resource;
        let id = ctx.ledger.open(req);
        let bytes = encode_request(id, (con, method, mid, token), upstream, resource);
        self.by_mid.insert(mid, id);
        self.by_token.insert(token, id);
        self.history.push_back((ctx.now, mid, token, id));
        self.last_token = token;
        ctx.send(Hop::ClientToProxy(self.id), bytes.clone(), Some(id));
        let timeout = ACK_TIMEOUT.mul_f64(ctx.rng.random_range(1.0..=ACK_RANDOM_FACTOR));
        let at = ctx.now + if con { timeout } else { MAX_TRANSMIT_WAIT };
        self.current = Some(Outstanding {
            id,
            con,
            bytes,
            retransmits: 0,
            timeout,
            acked: false,
        });
        self.arm(ctx, at);
    }

    /// A token of 0..=8 random bytes, unique among this client's recent requests; odd clients
    /// sometimes take their partner's latest token, so two clients share one.
    fn fresh_token(&self, ctx: &mut Ctx, partner: Tok) -> Tok {
        if self.id % 2 == 1 && ctx.rng.random_bool(0.2) && !self.by_token.contains_key(&partner) {
            return partner;
        }
        loop {
            let len = ctx.rng.random_range(0..=8);
            let mut bytes = [0u8; 8];
            ctx.rng.fill(&mut bytes[..len]);
            let token = Tok::new(&bytes[..len]);
            if !self.by_token.contains_key(&token) {
                return token;
            }
        }
    }

    fn forget_old(&mut self, now: Timestamp) {
        while let Some(&(at, mid, token, id)) = self.history.front() {
            if at + RETENTION > now {
                break;
            }
            self.history.pop_front();
            if self.by_mid.get(&mid) == Some(&id) {
                self.by_mid.remove(&mid);
            }
            if self.by_token.get(&token) == Some(&id) {
                self.by_token.remove(&token);
            }
        }
    }

    pub fn on_datagram(&mut self, ctx: &mut Ctx, bytes: &[u8]) {
        let Ok(msg) = Message::parse(bytes) else {
            return ctx.ledger.violation(
                ctx.now,
                format!("client {} got a malformed datagram", self.id),
            );
        };
        let (ty, code, mid) = (msg.msg_type(), msg.code(), msg.message_id());
        match ty {
            MessageType::Ack if code.is_empty() => self.on_empty_ack(ctx, mid),
            MessageType::Ack => {
                let Some(&id) = self.by_mid.get(&mid) else {
                    return self.stray(ctx, "a piggybacked answer with a MID it never used", &msg);
                };
                if ctx.ledger.req(id).token.as_bytes() != msg.token() {
                    return self.stray(ctx, "a piggybacked answer with another token", &msg);
                }
                self.accept(ctx, id, &msg);
            }
            MessageType::Con | MessageType::Non if code.is_response() => {
                let id = self.by_token.get(&Tok::new(msg.token())).copied();
                if ty == MessageType::Con {
                    let mut ack = Vec::with_capacity(4);
                    empty_ack(&mut ack, mid);
                    ctx.send(Hop::ClientToProxy(self.id), ack, id);
                }
                if self.is_duplicate(ctx.now, mid, ty) {
                    return;
                }
                let Some(id) = id else {
                    return self.stray(ctx, "a separate answer with a token it never used", &msg);
                };
                self.accept(ctx, id, &msg);
            }
            // A ping (the proxy asking for proof of this client's address): RST, as RFC 7252
            // §4.3 asks of every endpoint.
            MessageType::Con if code.is_empty() => {
                let mut reset = Vec::with_capacity(4);
                rst(&mut reset, mid);
                ctx.send(Hop::ClientToProxy(self.id), reset, None);
            }
            _ => self.stray(ctx, "an RST, a request or an empty NON", &msg),
        }
    }

    fn stray(&self, ctx: &mut Ctx, what: &str, msg: &Message) {
        let text = format!("client {} got {what}: {msg:?}", self.id);
        ctx.ledger.violation(ctx.now, text);
    }

    fn on_empty_ack(&mut self, ctx: &mut Ctx, mid: u16) {
        let Some(&id) = self.by_mid.get(&mid) else {
            let text = format!(
                "client {} got an empty ACK for MID {mid} it never used",
                self.id
            );
            return ctx.ledger.violation(ctx.now, text);
        };
        let Some(cur) = self
            .current
            .as_mut()
            .filter(|c| c.id == id && c.con && !c.acked)
        else {
            return;
        };
        cur.acked = true;
        let at = ctx.ledger.req(id).sent_at + EXCHANGE_LIFETIME;
        self.arm(ctx, at);
    }

    /// RFC 7252 §4.5: a CON/NON seen from this source within its lifetime is processed once.
    fn is_duplicate(&mut self, now: Timestamp, mid: u16, ty: MessageType) -> bool {
        while let Some(&(until, old)) = self.seen_order.front() {
            if until > now {
                break;
            }
            self.seen_order.pop_front();
            if self.seen.get(&old) == Some(&until) {
                self.seen.remove(&old);
            }
        }
        if self.seen.contains_key(&mid) {
            return true;
        }
        let lifetime = match ty {
            MessageType::Con => EXCHANGE_LIFETIME,
            _ => NON_LIFETIME,
        };
        self.seen.insert(mid, now + lifetime);
        self.seen_order.push_back((now + lifetime, mid));
        false
    }

    /// An answer for request `id`: completes it if it is the one in flight.
    fn accept(&mut self, ctx: &mut Ctx, id: ReqId, msg: &Message) {
        ctx.ledger.client_answer(ctx.now, id, msg);
        if self.current.as_ref().is_some_and(|c| c.id == id) {
            self.current = None;
            self.think(ctx);
        }
    }
}

/// A request carrying its id (and, for PUT/POST, in the payload too): through the reverse
/// proxy for upstream 0, through Proxy-Uri for the others. The id is its Uri-Query, so no two
/// requests name one resource, or, for a shared `resource`, a REQUEST_ID option beside it.
fn encode_request(
    id: ReqId,
    (con, method, mid, token): (bool, Code, u16, Tok),
    up: u16,
    resource: Option<u32>,
) -> Vec<u8> {
    let ty = if con {
        MessageType::Con
    } else {
        MessageType::Non
    };
    let id_text = format!("id={id}");
    let query = match resource {
        Some(res) => format!("res={res}"),
        None => id_text.clone(),
    };
    let mut out = Vec::with_capacity(48);
    let mut b = MessageBuilder::new(&mut out, ty, method, mid, token.as_bytes());
    if up == 0 {
        b.option(URI_PATH, b"r");
        b.option(URI_QUERY, query.as_bytes());
    } else {
        let uri = format!("coap://{}/r?{query}", upstream_addr(up));
        b.option(PROXY_URI, uri.as_bytes());
    }
    if resource.is_some() {
        b.option(REQUEST_ID, id.to_string().as_bytes());
    }
    if method != Code::GET {
        b.payload(id_text.as_bytes());
    }
    b.finish().expect("a valid request");
    out
}
