//! The one fake CoAP upstream: a UDP server on loopback, on its own thread until its handle
//! drops, whose behaviour a test scripts. By default it answers every request at once with an
//! empty 2.05, piggybacked on the ACK of a CON, a NON (with a Message ID of its own) to a NON;
//! a [`Script`] changes the code, the payload, the timing, and what a path gets instead.

use std::collections::{HashMap, HashSet};
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use backoffd::coap::option::URI_PATH;
use backoffd::coap::{empty_ack, Code, Message, MessageBuilder, MessageType};

/// What a request to a path gets instead of the script's answer.
#[derive(Clone, Debug)]
pub enum Rule {
    /// Nothing at all.
    Silent,
    /// Nothing for the first copy of each Message ID, the answer for any retransmission: the
    /// proxy must retransmit.
    DropFirstCopy,
    /// An empty ACK at once, then the answer with this payload as a separate CON `after`.
    Separate { after: Duration, payload: Vec<u8> },
}

/// Called with each request the upstream executes (once per message with
/// [`Script::once_per_message`]).
type Hook = Box<dyn FnMut(&Message<'_>) + Send>;

/// How the fake upstream serves; see the module doc for the defaults.
pub struct Script {
    code: Code,
    /// `None`: each answer carries its request's payload.
    payload: Option<Vec<u8>>,
    delay: Duration,
    only: Option<Code>,
    default_rule: Option<Rule>,
    rules: Vec<(Vec<u8>, Rule)>,
    once_per_message: bool,
    on_request: Option<Hook>,
}

impl Script {
    pub fn new() -> Script {
        Script {
            code: Code::CONTENT,
            payload: Some(Vec::new()),
            delay: Duration::ZERO,
            only: None,
            default_rule: None,
            rules: Vec::new(),
            once_per_message: false,
            on_request: None,
        }
    }

    /// Answers with `code` instead of 2.05.
    pub fn code(mut self, code: Code) -> Script {
        self.code = code;
        self
    }

    /// Answers carry `payload`.
    pub fn payload(mut self, payload: &[u8]) -> Script {
        self.payload = Some(payload.to_vec());
        self
    }

    /// Answers carry their request's payload.
    pub fn echo(mut self) -> Script {
        self.payload = None;
        self
    }

    /// Every answer leaves `delay` after its request came (in order; requests keep coming).
    pub fn delay(mut self, delay: Duration) -> Script {
        self.delay = delay;
        self
    }

    /// Requests with another method are ignored (neither counted nor answered).
    pub fn only(mut self, method: Code) -> Script {
        self.only = Some(method);
        self
    }

    /// Every request gets `rule`, unless its path has one of its own.
    pub fn always(mut self, rule: Rule) -> Script {
        self.default_rule = Some(rule);
        self
    }

    /// Requests whose first Uri-Path segment is `path` get `rule`.
    pub fn on_path(mut self, path: &str, rule: Rule) -> Script {
        self.rules.push((path.as_bytes().to_vec(), rule));
        self
    }

    /// Each (source, Message ID) is executed once; a retransmission gets the first answer
    /// again (RFC 7252 §4.5).
    pub fn once_per_message(mut self) -> Script {
        self.once_per_message = true;
        self
    }

    /// Calls `hook` with each request executed.
    pub fn on_request(mut self, hook: impl FnMut(&Message<'_>) + Send + 'static) -> Script {
        self.on_request = Some(Box::new(hook));
        self
    }

    /// Binds a loopback port and serves on a thread until the handle drops.
    pub fn start(self) -> Upstream {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("a loopback port");
        let addr = socket.local_addr().expect("bound");
        let (stop, requests) = (Arc::new(AtomicBool::new(false)), Arc::default());
        let mut server = Server {
            script: self,
            socket,
            requests: Arc::clone(&requests),
            due: Vec::new(),
            next_mid: 0x7000,
            first_copies: HashSet::new(),
            answered: HashMap::new(),
        };
        let running = Arc::clone(&stop);
        let thread = thread::spawn(move || server.run(&running));
        Upstream {
            addr,
            requests,
            stop,
            thread: Some(thread),
        }
    }
}

impl Default for Script {
    fn default() -> Script {
        Script::new()
    }
}

/// A running fake upstream; stops when dropped.
pub struct Upstream {
    pub addr: SocketAddr,
    requests: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Upstream {
    /// Requests received so far (those [`Script::only`] lets through; retransmissions too).
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The upstream's thread state.
struct Server {
    script: Script,
    socket: UdpSocket,
    requests: Arc<AtomicUsize>,
    /// Datagrams to send at their time, in no particular order.
    due: Vec<(Instant, SocketAddr, Vec<u8>)>,
    next_mid: u16,
    /// Message IDs whose first copy a [`Rule::DropFirstCopy`] dropped.
    first_copies: HashSet<u16>,
    /// Answers by (source, Message ID), with [`Script::once_per_message`].
    answered: HashMap<(SocketAddr, u16), Vec<u8>>,
}

impl Server {
    fn run(&mut self, stop: &AtomicBool) {
        let mut buf = vec![0u8; 65_536];
        while !stop.load(Ordering::SeqCst) {
            self.send_due();
            let _ = self.socket.set_read_timeout(Some(self.idle_wait()));
            if let Ok((n, from)) = self.socket.recv_from(&mut buf) {
                let datagram = buf[..n].to_vec();
                if let Ok(request) = Message::parse(&datagram) {
                    self.serve(&request, from);
                }
            }
        }
    }

    /// How long to wait for a datagram: until the next due one, and briefly enough to see
    /// the stop flag soon.
    fn idle_wait(&self) -> Duration {
        let next = self.due.iter().map(|(at, _, _)| *at).min();
        let until = next.map_or(Duration::from_millis(5), |at| {
            at.saturating_duration_since(Instant::now())
        });
        until.clamp(Duration::from_micros(100), Duration::from_millis(5))
    }

    fn send_due(&mut self) {
        let now = Instant::now();
        let (ready, later) = self.due.drain(..).partition(|(at, _, _)| *at <= now);
        self.due = later;
        let mut ready: Vec<_> = ready;
        ready.sort_by_key(|(at, _, _)| *at);
        for (_, to, datagram) in ready {
            let _ = self.socket.send_to(&datagram, to);
        }
    }

    fn serve(&mut self, req: &Message<'_>, from: SocketAddr) {
        let wanted = self.script.only.is_none_or(|m| req.code() == m);
        if !req.code().is_request() || !wanted {
            return;
        }
        self.requests.fetch_add(1, Ordering::SeqCst);
        let key = (from, req.message_id());
        if let Some(answer) = self.answered.get(&key).cloned() {
            return self.send(answer, from, Duration::ZERO);
        }
        match self.rule(req) {
            Some(Rule::Silent) => {}
            Some(Rule::DropFirstCopy) if self.first_copies.insert(req.message_id()) => {}
            Some(Rule::Separate { after, payload }) => self.separate(req, from, after, &payload),
            _ => self.answer(req, from),
        }
    }

    fn rule(&self, req: &Message<'_>) -> Option<Rule> {
        let path = req.option(URI_PATH).unwrap_or_default();
        let own = self.script.rules.iter().find(|(p, _)| p == path);
        own.map(|(_, rule)| rule.clone())
            .or_else(|| self.script.default_rule.clone())
    }

    fn answer(&mut self, req: &Message<'_>, from: SocketAddr) {
        if let Some(hook) = &mut self.script.on_request {
            hook(req);
        }
        let (ty, mid) = match req.msg_type() {
            MessageType::Con => (MessageType::Ack, req.message_id()),
            _ => (MessageType::Non, self.fresh_mid()),
        };
        let payload = self.script.payload.as_deref().unwrap_or(req.payload());
        let answer = build(ty, self.script.code, mid, req.token(), payload);
        if self.script.once_per_message {
            self.answered
                .insert((from, req.message_id()), answer.clone());
        }
        self.send(answer, from, self.script.delay);
    }

    fn separate(&mut self, req: &Message<'_>, from: SocketAddr, after: Duration, payload: &[u8]) {
        let mut ack = Vec::new();
        empty_ack(&mut ack, req.message_id());
        self.send(ack, from, Duration::ZERO);
        let mid = self.fresh_mid();
        let answer = build(
            MessageType::Con,
            self.script.code,
            mid,
            req.token(),
            payload,
        );
        self.send(answer, from, after);
    }

    fn send(&mut self, datagram: Vec<u8>, to: SocketAddr, after: Duration) {
        if after.is_zero() {
            let _ = self.socket.send_to(&datagram, to);
        } else {
            self.due.push((Instant::now() + after, to, datagram));
        }
    }

    fn fresh_mid(&mut self) -> u16 {
        self.next_mid = self.next_mid.wrapping_add(1);
        self.next_mid
    }
}

fn build(ty: MessageType, code: Code, mid: u16, token: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(&mut out, ty, code, mid, token);
    b.payload(payload);
    b.finish().expect("an answer that fits");
    out
}
