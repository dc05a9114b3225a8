//! The demo's CoAP client: a burst of confirmable requests through the proxy, each
//! retransmitted like an RFC 7252 client (scaled down so the demo is quick), answers recorded.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use mio::net::UdpSocket;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use backoffd::coap::option::URI_PATH;
use backoffd::coap::{empty_ack, Code, Message, MessageBuilder, MessageType};
use backoffd::reactor::datagram::{Datagram, Received};
use backoffd::reactor::{Component, Ctx, Readiness};
use backoffd::timer::TimerId;

/// First retransmission timeout of the demo client (RFC 7252 uses 2-3 s).
const ACK_TIMEOUT: Duration = Duration::from_millis(300);
const MAX_RETRANSMIT: u32 = 4;

/// Final answers by request, shared with the report.
#[derive(Debug, Default)]
pub struct BurstOutcome {
    /// Final code per request id (None: the client gave up).
    pub answers: Vec<Option<Code>>,
    /// Requests the client sent again after an ACK timeout.
    pub retransmissions: u64,
}

struct Pending {
    bytes: Vec<u8>,
    sends: u32,
    timeout: Duration,
    acked: bool,
}

/// Sends `count` requests (every third a POST to /counter) and waits for every answer.
pub struct BurstClient {
    /// Bound by [`bind`](Self::bind), registered at start.
    bound: Option<UdpSocket>,
    socket: Option<Datagram>,
    proxy: SocketAddr,
    count: usize,
    /// By request id; the MID and token are derived from the id.
    pending: HashMap<u32, Pending>,
    outcome: Rc<RefCell<BurstOutcome>>,
    /// Share of the proxy's datagrams this client "loses", so it has to retransmit.
    loss: f64,
    rng: SmallRng,
}

impl BurstClient {
    /// Binds a loopback UDP socket that will send `count` requests to `proxy`, ignoring a
    /// `loss` share of the proxy's datagrams; answers are written into `outcome`.
    pub fn bind(
        proxy: SocketAddr,
        count: usize,
        loss: f64,
        seed: u64,
        outcome: Rc<RefCell<BurstOutcome>>,
    ) -> io::Result<Self> {
        outcome.borrow_mut().answers = vec![None; count];
        Ok(BurstClient {
            bound: Some(UdpSocket::bind("127.0.0.1:0".parse().expect("literal"))?),
            socket: None,
            proxy,
            count,
            pending: HashMap::new(),
            outcome,
            loss,
            rng: SmallRng::seed_from_u64(seed ^ 0xc1),
        })
    }

    /// Sends to the proxy; a full send buffer loses the datagram, as the network would.
    fn send(&self, bytes: &[u8]) {
        if let Some(socket) = &self.socket {
            let _ = socket.send_to(bytes, self.proxy);
        }
    }

    fn request(id: u32) -> Vec<u8> {
        let (code, path) = match id % 3 {
            0 => (Code::POST, &b"counter"[..]),
            _ => (Code::GET, &b"hello"[..]),
        };
        let mut out = Vec::new();
        let mut b = MessageBuilder::new(
            &mut out,
            MessageType::Con,
            code,
            id as u16,
            &id.to_be_bytes(),
        );
        b.option(URI_PATH, path);
        b.payload(&id.to_be_bytes());
        let _ = b.finish();
        out
    }

    fn on_answer(&mut self, msg: &Message) {
        let Ok(id) = <[u8; 4]>::try_from(msg.token()).map(u32::from_be_bytes) else {
            return;
        };
        if msg.msg_type() == MessageType::Con {
            let mut ack = Vec::new();
            empty_ack(&mut ack, msg.message_id());
            self.send(&ack);
        }
        if msg.code().is_empty() {
            if let Some(p) = self.pending.get_mut(&id) {
                p.acked = true;
            }
            return;
        }
        if self.pending.remove(&id).is_some() {
            self.outcome.borrow_mut().answers[id as usize] = Some(msg.code());
        }
    }

    fn on_ack_only(&mut self, msg: &Message) {
        // An empty ACK carries the request's MID, which is the low 16 bits of its id.
        let mid = msg.message_id();
        if let Some(p) = self
            .pending
            .iter_mut()
            .find(|(id, _)| **id as u16 == mid)
            .map(|(_, p)| p)
        {
            p.acked = true;
        }
    }
}

impl Component for BurstClient {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        let bound = self.bound.take().expect("started once");
        self.socket = Some(Datagram::register(ctx, bound, 0)?);
        for id in 0..self.count as u32 {
            let bytes = Self::request(id);
            self.send(&bytes);
            self.pending.insert(
                id,
                Pending {
                    bytes,
                    sends: 1,
                    timeout: ACK_TIMEOUT,
                    acked: false,
                },
            );
            ctx.set_timer(ctx.now() + ACK_TIMEOUT, id);
        }
        Ok(())
    }

    fn on_ready(&mut self, ctx: &mut Ctx<'_>, _: u32, _: Readiness) {
        let mut buf = [0u8; 2048];
        let mut received = Vec::new();
        if let Some(socket) = &mut self.socket {
            let _ = socket.recv(ctx, &mut buf, |r| {
                if let Received::Datagram { data, .. } = r {
                    received.push(data.to_vec());
                }
            });
        }
        for datagram in received {
            if self.rng.random_bool(self.loss) {
                continue;
            }
            let Ok(msg) = Message::parse(&datagram) else {
                continue;
            };
            match (msg.msg_type(), msg.code().is_empty()) {
                (MessageType::Ack, true) => self.on_ack_only(&msg),
                _ => self.on_answer(&msg),
            }
        }
        if self.pending.is_empty() {
            ctx.shutdown();
        }
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_>, _: TimerId, id: u32) {
        let Some(p) = self.pending.get_mut(&id) else {
            return;
        };
        if p.acked {
            // Acknowledged: the separate answer will come (the proxy retransmits it with RFC
            // 7252 timing, 2-3 s and doubling), so wait up to ~MAX_TRANSMIT_WAIT-like 12 s.
            if p.sends > MAX_RETRANSMIT + 12 {
                self.pending.remove(&id);
            } else {
                p.sends += 1;
                ctx.set_timer(ctx.now() + Duration::from_secs(1), id);
            }
        } else if p.sends > MAX_RETRANSMIT {
            self.pending.remove(&id);
        } else {
            p.sends += 1;
            p.timeout *= 2;
            if let Some(socket) = &self.socket {
                let _ = socket.send_to(&p.bytes, self.proxy);
            }
            self.outcome.borrow_mut().retransmissions += 1;
            ctx.set_timer(ctx.now() + p.timeout, id);
        }
        if self.pending.is_empty() {
            ctx.shutdown();
        }
    }
}
