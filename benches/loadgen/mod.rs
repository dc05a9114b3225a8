//! A CoAP load generator for benchmarks, and the fast upstream it is paired with.
//!
//! One thread drives both ([`run`]): the generator keeps a window of requests outstanding
//! (closed loop, to find the peak rate) or sends at a fixed rate (open loop, for latency at a
//! given load), matches answers by token and records each request's round trip; the upstream
//! answers everything at once. Both use batched system calls (`batch.rs`) so that, pinned to one
//! core, they outrun whatever runs on the other core: the proxy, the relay, or a peer.
//! `benches/proxy_throughput.rs` builds the published comparison on it.

mod batch;
mod upstream;

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use batch::Batch;
pub use upstream::{FastUpstream, MidCounts};

use backoffd::coap::{empty_ack, peek_header, Code, MessageBuilder, MessageType};
use backoffd::stats::Summary;
use backoffd::time::Timestamp;

/// How requests are offered.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Offered {
    /// Keep this many requests outstanding (closed loop): the rate the target sustains.
    Window(usize),
    /// Send this many requests per second whatever comes back (open loop): latency at a load.
    Rate(f64),
}

/// One measurement.
#[derive(Clone, Debug)]
pub struct LoadSpec {
    /// Where requests go (the upstream itself, or something in front of it).
    pub target: SocketAddr,
    /// CON (answered piggybacked in an ACK) or NON requests.
    pub confirmable: bool,
    /// Options every request carries, in ascending number order (e.g. Proxy-Uri for a
    /// forward proxy; Uri-Path otherwise).
    pub options: Vec<(u16, Vec<u8>)>,
    /// Closed or open loop.
    pub offered: Offered,
    /// Time to run before measuring (fills caches and windows).
    pub warmup: Duration,
    /// The measured period: requests *sent* in it are counted.
    pub duration: Duration,
    /// An answer later than this counts the request as lost (the generator never retransmits).
    pub timeout: Duration,
    /// Most datagrams per system call, for the generator and the upstream alike (1..=64).
    /// Batches make the harness cheap but reach the target as bursts it must queue; latency
    /// runs use a small value so the target sees requests spread out as the rate says.
    pub burst: usize,
}

/// What happened to the requests sent in the measured period.
#[derive(Clone, Debug)]
pub struct LoadReport {
    /// Requests answered with a 2.xx code.
    pub answered: u64,
    /// Requests answered with another code (a 5.03 from an overloaded proxy, say).
    pub errors: u64,
    /// Requests not answered within the timeout.
    pub lost: u64,
    /// Length of the measured period in seconds.
    pub seconds: f64,
    /// Round trips of the 2.xx answers (send to receive, as this thread saw them).
    pub latency: Summary,
}

impl LoadReport {
    /// 2.xx answers per second of the measured period.
    pub fn rate(&self) -> f64 {
        self.answered as f64 / self.seconds
    }

    /// Share of the measured requests that got no 2.xx answer.
    pub fn failure_share(&self) -> f64 {
        let total = self.answered + self.errors + self.lost;
        if total == 0 {
            return 0.0;
        }
        (self.errors + self.lost) as f64 / total as f64
    }
}

/// Runs one measurement, serving `upstream` (if given) on the same thread between sends.
pub fn run(spec: &LoadSpec, mut upstream: Option<&mut FastUpstream>) -> io::Result<LoadReport> {
    let mut generator = Generator::new(spec)?;
    let start = Timestamp::now();
    let measure_until = generator.measure_from + spec.duration;
    let give_up = measure_until + spec.timeout + Duration::from_millis(100);
    let mut pace = Pace::new(spec.offered, start);
    loop {
        let now = Timestamp::now();
        if let Some(up) = upstream.as_deref_mut() {
            up.serve(spec.burst)?;
        }
        generator.receive(now)?;
        generator.expire(now);
        if now < measure_until {
            generator.send(now, &mut pace)?;
        } else if generator.measured_pending == 0 || now >= give_up {
            break;
        }
    }
    let seconds = spec.duration.as_secs_f64();
    Ok(LoadReport {
        answered: generator.answered,
        errors: generator.errors,
        lost: generator.lost + generator.measured_pending,
        seconds,
        latency: Summary::from_nanos(&mut generator.round_trips),
    })
}

/// Requests in flight are tracked in a ring indexed by sequence number (the token).
const RING: usize = 1 << 18;

#[derive(Clone, Copy, Default, PartialEq)]
enum SlotState {
    #[default]
    Free,
    Waiting,
    Done,
}

#[derive(Clone, Copy, Default)]
struct Slot {
    seq: u64,
    sent: Timestamp,
    state: SlotState,
}

/// When the next request may go.
struct Pace {
    offered: Offered,
    /// Open loop: the next send time in (fractional) nanoseconds.
    next_ns: f64,
}

impl Pace {
    fn new(offered: Offered, start: Timestamp) -> Pace {
        Pace {
            offered,
            next_ns: start.as_nanos() as f64,
        }
    }

    /// May one more request go now, with `outstanding` in flight?
    fn admit(&mut self, now: Timestamp, outstanding: usize) -> bool {
        match self.offered {
            Offered::Window(w) => outstanding < w,
            Offered::Rate(per_second) => {
                let (now, interval) = (now.as_nanos() as f64, 1e9 / per_second);
                if self.next_ns > now {
                    return false;
                }
                // Behind by more than two sends (this thread was busy or preempted): skip
                // ahead rather than fire the backlog at the target as one burst. The achieved
                // rate is what the report shows.
                self.next_ns = self.next_ns.max(now - 2.0 * interval) + interval;
                true
            }
        }
    }
}

/// The client side: one connected socket, a request template, the in-flight ring.
struct Generator {
    socket: UdpSocket,
    template: Vec<u8>,
    next_mid: u16,
    ring: Vec<Slot>,
    next_seq: u64,
    oldest: u64,
    outstanding: usize,
    tx: Batch,
    rx: Batch,
    acks: Batch,
    measure_from: Timestamp,
    timeout: Duration,
    burst: usize,
    /// Requests sent in the measured period and still unanswered.
    measured_pending: u64,
    answered: u64,
    errors: u64,
    lost: u64,
    round_trips: Vec<i64>,
}

/// The token is 8 bytes (the sequence number) and starts after the 4-byte header.
const TOKEN_AT: usize = 4;
const TOKEN_LEN: usize = 8;

impl Generator {
    fn new(spec: &LoadSpec) -> io::Result<Generator> {
        let local: SocketAddr = if spec.target.is_ipv4() {
            (std::net::Ipv4Addr::LOCALHOST, 0).into()
        } else {
            (std::net::Ipv6Addr::LOCALHOST, 0).into()
        };
        let socket = UdpSocket::bind(local)?;
        socket.connect(spec.target)?;
        socket.set_nonblocking(true)?;
        Ok(Generator {
            socket,
            template: request_template(spec)?,
            next_mid: 0,
            ring: vec![Slot::default(); RING],
            next_seq: 0,
            oldest: 0,
            outstanding: 0,
            tx: Batch::default(),
            rx: Batch::default(),
            acks: Batch::default(),
            measure_from: Timestamp::now() + spec.warmup,
            timeout: spec.timeout,
            burst: spec.burst.clamp(1, batch::BATCH),
            measured_pending: 0,
            answered: 0,
            errors: 0,
            lost: 0,
            round_trips: Vec::new(),
        })
    }

    fn measured(&self, sent: Timestamp) -> bool {
        sent >= self.measure_from
    }

    /// Sends what the pace admits, one batch at most.
    fn send(&mut self, now: Timestamp, pace: &mut Pace) -> io::Result<()> {
        while self.tx.len() < self.burst
            && self.next_seq - self.oldest < RING as u64
            && pace.admit(now, self.outstanding)
        {
            let seq = self.next_seq;
            let (template, mid) = (&self.template, self.next_mid);
            self.tx.push(None, |out| {
                let out = &mut out[..template.len()];
                out.copy_from_slice(template);
                out[2..4].copy_from_slice(&mid.to_be_bytes());
                out[TOKEN_AT..TOKEN_AT + TOKEN_LEN].copy_from_slice(&seq.to_be_bytes());
                template.len()
            });
            self.ring[seq as usize % RING] = Slot {
                seq,
                sent: now,
                state: SlotState::Waiting,
            };
            self.next_seq += 1;
            self.next_mid = self.next_mid.wrapping_add(1);
            self.outstanding += 1;
            if self.measured(now) {
                self.measured_pending += 1;
            }
        }
        self.tx.send(self.socket.as_raw_fd()).map(drop)
    }

    /// Takes in one batch of answers; ACKs separate (CON) responses.
    fn receive(&mut self, now: Timestamp) -> io::Result<()> {
        if self.rx.recv(self.socket.as_raw_fd(), self.burst)? == 0 {
            return Ok(());
        }
        for i in 0..self.rx.len() {
            let (datagram, _) = self.rx.get(i);
            let Some((ty, mid, token)) = peek_header(datagram) else {
                continue;
            };
            let code = Code(datagram[1]);
            if !code.is_response() {
                continue;
            }
            if ty == MessageType::Con {
                let mut ack = Vec::with_capacity(4);
                empty_ack(&mut ack, mid);
                self.acks.push(None, |out| {
                    out[..ack.len()].copy_from_slice(&ack);
                    ack.len()
                });
            }
            if let Ok(seq) = <[u8; TOKEN_LEN]>::try_from(token) {
                self.complete(now, u64::from_be_bytes(seq), code);
            }
        }
        if !self.acks.is_empty() {
            self.acks.send(self.socket.as_raw_fd())?;
        }
        Ok(())
    }

    fn complete(&mut self, now: Timestamp, seq: u64, code: Code) {
        let slot = &mut self.ring[seq as usize % RING];
        if slot.seq != seq || slot.state != SlotState::Waiting {
            return; // a duplicate, or an answer after the timeout
        }
        slot.state = SlotState::Done;
        let sent = slot.sent;
        self.outstanding -= 1;
        if !self.measured(sent) {
            return;
        }
        self.measured_pending -= 1;
        if code.class() == 2 {
            self.answered += 1;
            self.round_trips.push(now.signed_nanos_since(sent));
        } else {
            self.errors += 1;
        }
    }

    /// Retires answered slots and gives up on those older than the timeout.
    fn expire(&mut self, now: Timestamp) {
        while self.oldest < self.next_seq {
            let slot = &mut self.ring[self.oldest as usize % RING];
            match slot.state {
                SlotState::Waiting if now.saturating_since(slot.sent) < self.timeout => return,
                SlotState::Waiting => {
                    slot.state = SlotState::Free;
                    self.outstanding -= 1;
                    if slot.sent >= self.measure_from {
                        self.measured_pending -= 1;
                        self.lost += 1;
                    }
                }
                SlotState::Done | SlotState::Free => slot.state = SlotState::Free,
            }
            self.oldest += 1;
        }
    }
}

/// The request every send copies: MID and token are patched in per request.
fn request_template(spec: &LoadSpec) -> io::Result<Vec<u8>> {
    let ty = if spec.confirmable {
        MessageType::Con
    } else {
        MessageType::Non
    };
    let mut out = Vec::new();
    let mut b = MessageBuilder::new(&mut out, ty, Code::GET, 0, &[0; TOKEN_LEN]);
    for (number, value) in &spec.options {
        b.option(*number, value);
    }
    b.finish()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{e:?}")))?;
    if out.len() > batch::SLOT {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "request too large",
        ));
    }
    Ok(out)
}

/// A closed loop of CON GETs (`/x`, Message ID and token `n`) over plain UDP to `server` for
/// `seconds`, `window` outstanding, serving `upstream` in between: answers per second. The
/// baseline the transport benchmarks (coaps, CoAP over TCP) compare with.
pub fn udp_closed_loop(
    server: SocketAddr,
    upstream: &mut FastUpstream,
    window: u16,
    seconds: u64,
) -> f64 {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_nonblocking(true).unwrap();
    let mut next = 0u16;
    for _ in 0..window {
        socket.send_to(&udp_get(next), server).unwrap();
        next = next.wrapping_add(1);
    }
    let (start, mut answers, mut buf) = (Instant::now(), 0u64, [0u8; 2048]);
    let mut last_progress = Instant::now();
    while start.elapsed() < Duration::from_secs(seconds) {
        let _ = upstream.serve(64);
        let mut got = 0;
        while socket.recv(&mut buf).is_ok() {
            got += 1;
        }
        if got > 0 {
            last_progress = Instant::now();
        } else if last_progress.elapsed() > Duration::from_millis(50) {
            // A lost datagram loses its slot of the window: refill after 50 ms without answers.
            last_progress = Instant::now();
            got = window as usize;
        }
        answers += got as u64;
        for _ in 0..got {
            let _ = socket.send_to(&udp_get(next), server);
            next = next.wrapping_add(1);
        }
    }
    answers as f64 / start.elapsed().as_secs_f64()
}

/// A CON GET of `/x` with Message ID and token `n`.
pub fn udp_get(n: u16) -> Vec<u8> {
    let [a, b] = n.to_be_bytes();
    vec![0x42, 0x01, a, b, a, b, 0xb1, b'x']
}

#[cfg(test)]
mod tests {
    use super::*;
    use backoffd::coap::option::URI_PATH;
    use backoffd::coap::Message;

    fn spec(target: SocketAddr, confirmable: bool, offered: Offered) -> LoadSpec {
        LoadSpec {
            target,
            confirmable,
            options: vec![(URI_PATH, b"bench".to_vec())],
            offered,
            warmup: Duration::from_millis(20),
            duration: Duration::from_millis(200),
            timeout: Duration::from_millis(500),
            burst: batch::BATCH,
        }
    }

    #[test]
    fn the_template_is_a_valid_request_with_an_eight_byte_token() {
        let t = request_template(&spec(
            "127.0.0.1:1".parse().unwrap(),
            true,
            Offered::Window(1),
        ))
        .unwrap();
        let m = Message::parse(&t).unwrap();
        assert_eq!(m.msg_type(), MessageType::Con);
        assert_eq!(m.token().len(), TOKEN_LEN);
        assert_eq!(m.option(URI_PATH), Some(&b"bench"[..]));
    }

    /// Closed and open loop, CON and NON, against the fast upstream over loopback: every
    /// measured request is answered, and the counts add up.
    #[test]
    fn every_request_to_the_fast_upstream_is_answered() {
        let mut up = FastUpstream::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = up.local_addr().unwrap();
        for offered in [Offered::Window(16), Offered::Rate(2000.0)] {
            for confirmable in [true, false] {
                let report = run(&spec(addr, confirmable, offered), Some(&mut up)).unwrap();
                assert!(report.answered > 0, "{offered:?} {confirmable}: {report:?}");
                assert_eq!(report.errors + report.lost, 0, "{report:?}");
                assert_eq!(report.latency.samples as u64, report.answered);
                assert_eq!(report.latency.early, 0);
            }
        }
        assert_eq!(up.ignored, 0);
    }

    /// A target that never answers: every measured request is counted lost, none answered.
    #[test]
    fn requests_to_a_silent_target_are_counted_lost() {
        let silent = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut s = spec(silent.local_addr().unwrap(), true, Offered::Rate(500.0));
        s.timeout = Duration::from_millis(50);
        let report = run(&s, None).unwrap();
        assert_eq!(report.answered, 0);
        assert!(report.lost > 0, "{report:?}");
        assert_eq!(report.failure_share(), 1.0);
    }
}
