//! A deliberately unreliable CoAP server for the demo: it loses datagrams both ways, answers
//! some requests separately, and counts how often each request was executed.

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

/// What the upstream saw, shared with the demo's report.
#[derive(Debug, Default)]
pub struct UpstreamLedger {
    /// Executions per request id (the request payload): more than 1 would be a duplicate.
    pub executions: HashMap<Vec<u8>, u32>,
    /// Datagrams received, before any simulated loss.
    pub datagrams_in: u64,
    /// Datagrams dropped on purpose, in either direction.
    pub dropped: u64,
    /// Retransmitted requests answered from the (peer, MID) cache, not executed again.
    pub replayed: u64,
}

/// A separate response waiting to be (re)sent until the proxy ACKs it.
struct Separate {
    to: SocketAddr,
    mid: u16,
    bytes: Vec<u8>,
    sends: u32,
}

/// The lossy upstream component.
pub struct LossyUpstream {
    /// Bound by [`bind`](Self::bind), registered at start.
    bound: Option<UdpSocket>,
    socket: Option<Datagram>,
    local_addr: SocketAddr,
    rng: SmallRng,
    loss: f64,
    separate_share: f64,
    /// Answers by (peer, MID), replayed for retransmissions as RFC 7252 §4.5 asks.
    answered: HashMap<(SocketAddr, u16), Vec<u8>>,
    separate: HashMap<u32, Separate>,
    next_key: u32,
    next_mid: u16,
    ledger: Rc<RefCell<UpstreamLedger>>,
}

impl LossyUpstream {
    /// Binds a loopback UDP socket. `loss` is the chance to drop each datagram (each way),
    /// `separate_share` the chance to answer with an empty ACK and a separate response.
    pub fn bind(
        loss: f64,
        separate_share: f64,
        seed: u64,
        ledger: Rc<RefCell<UpstreamLedger>>,
    ) -> io::Result<Self> {
        let bound = UdpSocket::bind("127.0.0.1:0".parse().expect("literal"))?;
        Ok(LossyUpstream {
            local_addr: bound.local_addr()?,
            bound: Some(bound),
            socket: None,
            rng: SmallRng::seed_from_u64(seed),
            loss,
            separate_share,
            answered: HashMap::new(),
            separate: HashMap::new(),
            next_key: 0,
            next_mid: 1,
            ledger,
        })
    }

    /// The address to point the proxy at.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local_addr)
    }

    fn lossy_send(&mut self, bytes: &[u8], to: SocketAddr) {
        if self.rng.random_bool(self.loss) {
            self.ledger.borrow_mut().dropped += 1;
        } else {
            if let Some(socket) = &self.socket {
                let _ = socket.send_to(bytes, to);
            }
        }
    }

    fn on_datagram(&mut self, ctx: &mut Ctx<'_>, bytes: &[u8], from: SocketAddr) {
        self.ledger.borrow_mut().datagrams_in += 1;
        if self.rng.random_bool(self.loss) {
            self.ledger.borrow_mut().dropped += 1;
            return;
        }
        let Ok(msg) = Message::parse(bytes) else {
            return;
        };
        match msg.msg_type() {
            MessageType::Ack => {
                self.separate
                    .retain(|_, s| !(s.to == from && s.mid == msg.message_id()));
            }
            MessageType::Con if msg.code().is_request() => self.on_request(ctx, &msg, from),
            _ => {}
        }
    }

    fn on_request(&mut self, ctx: &mut Ctx<'_>, msg: &Message, from: SocketAddr) {
        if let Some(answer) = self.answered.get(&(from, msg.message_id())).cloned() {
            self.ledger.borrow_mut().replayed += 1;
            return self.lossy_send(&answer, from);
        }
        let body = self.execute(msg);
        let mut out = Vec::new();
        if self.rng.random_bool(self.separate_share) {
            empty_ack(&mut out, msg.message_id());
            self.answered.insert((from, msg.message_id()), out.clone());
            self.lossy_send(&out, from);
            self.next_mid = self.next_mid.wrapping_add(1);
            let mut response = Vec::new();
            let mut b = MessageBuilder::new(
                &mut response,
                MessageType::Con,
                Code::CONTENT,
                self.next_mid,
                msg.token(),
            );
            b.payload(&body);
            let _ = b.finish();
            let key = self.next_key;
            self.next_key += 1;
            self.separate.insert(
                key,
                Separate {
                    to: from,
                    mid: self.next_mid,
                    bytes: response,
                    sends: 0,
                },
            );
            ctx.set_timer(ctx.now() + Duration::from_millis(150), key);
        } else {
            let mut b = MessageBuilder::new(
                &mut out,
                MessageType::Ack,
                Code::CONTENT,
                msg.message_id(),
                msg.token(),
            );
            b.payload(&body);
            let _ = b.finish();
            self.answered.insert((from, msg.message_id()), out.clone());
            self.lossy_send(&out, from);
        }
    }

    /// Runs the request: GET /hello answers a greeting, POST /counter counts executions.
    fn execute(&mut self, msg: &Message) -> Vec<u8> {
        let path = msg.option(URI_PATH).unwrap_or_default();
        let mut ledger = self.ledger.borrow_mut();
        let runs = ledger.executions.entry(msg.payload().to_vec()).or_default();
        *runs += 1;
        match path {
            b"counter" => format!("executed {}", runs).into_bytes(),
            _ => b"hello".to_vec(),
        }
    }
}

impl Component for LossyUpstream {
    fn on_start(&mut self, ctx: &mut Ctx<'_>) -> io::Result<()> {
        let bound = self.bound.take().expect("started once");
        self.socket = Some(Datagram::register(ctx, bound, 0)?);
        Ok(())
    }

    fn on_ready(&mut self, ctx: &mut Ctx<'_>, _: u32, _: Readiness) {
        let mut buf = [0u8; 2048];
        let mut received = Vec::new();
        if let Some(socket) = &mut self.socket {
            let _ = socket.recv(ctx, &mut buf, |r| {
                if let Received::Datagram { data, from } = r {
                    received.push((data.to_vec(), from));
                }
            });
        }
        for (datagram, from) in received {
            self.on_datagram(ctx, &datagram, from);
        }
    }

    fn on_timer(&mut self, ctx: &mut Ctx<'_>, _: TimerId, key: u32) {
        let Some(s) = self.separate.get_mut(&key) else {
            return;
        };
        s.sends += 1;
        let (bytes, to, more) = (s.bytes.clone(), s.to, s.sends < 5);
        if !more {
            self.separate.remove(&key);
        }
        self.lossy_send(&bytes, to);
        if more {
            ctx.set_timer(ctx.now() + Duration::from_millis(200), key);
        }
    }
}
