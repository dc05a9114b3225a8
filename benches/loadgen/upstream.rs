//! The benchmark's upstream: answers every CoAP request at once, in batches.
//!
//! A CON request gets a piggybacked ACK, a NON request a NON response, both 2.05 Content with
//! the request's token (RFC 7252 §5.2.1, §5.2.3). It keeps no state and executes nothing, so
//! it costs a fraction of what a proxy in front of it costs: the proxy stays the bottleneck.
//!
//! On request it also watches the Message IDs it is sent, as a deduplicating server would see
//! them (RFC 7252 §4.4): a (source, MID) that comes again with another token is a reuse, which
//! such a server would answer with the old request's answer.

use std::collections::{HashMap, HashSet};
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Instant;

use super::batch::Batch;
use backoffd::coap::params::EXCHANGE_LIFETIME;
use backoffd::coap::{peek_header, Code, MessageType, MAX_TOKEN_LEN};

/// The fast upstream's socket and batches.
pub struct FastUpstream {
    socket: UdpSocket,
    rx: Batch,
    tx: Batch,
    next_mid: u16,
    /// Requests answered.
    pub answered: u64,
    /// Datagrams that were not requests (ACKs, RSTs, pings, garbage): not answered.
    pub ignored: u64,
    /// Set by [`watch_message_ids`](Self::watch_message_ids).
    watch: Option<MidWatch>,
    /// Set by [`drop_first_of`](Self::drop_first_of).
    dropping: Option<FirstDrops>,
}

/// Drops the first transmission of every `every`-th new request, so that the
/// sender's retransmission timer has to bring it: how late those timers fire under load is
/// what the timer run measures. The retransmission (same source, MID and token) is answered.
struct FirstDrops {
    every: u64,
    seen: u64,
    waiting: HashSet<(SocketAddr, u16)>,
    dropped: u64,
}

impl FirstDrops {
    /// Whether to drop this request.
    fn drops(&mut self, from: SocketAddr, mid: u16) -> bool {
        if self.waiting.remove(&(from, mid)) {
            return false;
        }
        self.seen += 1;
        if self.seen % self.every != 0 {
            return false;
        }
        self.waiting.insert((from, mid));
        self.dropped += 1;
        true
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Per source and Message ID, a one-byte fingerprint of the token it came with (1..=255;
/// 0 = never seen) and the second it came, in one `u32`: 256 KiB per source. A MID seen again
/// more than EXCHANGE_LIFETIME later is not a reuse: a deduplicating server has forgotten it.
struct MidWatch {
    started: Instant,
    by_source: HashMap<SocketAddr, Box<[u32]>>,
    new_sources: HashSet<SocketAddr>,
    reused: u64,
    repeated: u64,
}

impl MidWatch {
    fn new() -> Self {
        MidWatch {
            started: Instant::now(),
            by_source: HashMap::new(),
            new_sources: HashSet::new(),
            reused: 0,
            repeated: 0,
        }
    }

    fn saw(&mut self, from: SocketAddr, mid: u16, token: &[u8]) {
        let secs = self.started.elapsed().as_secs() as u32 & 0x00ff_ffff;
        self.saw_at(secs, from, mid, token);
    }

    fn saw_at(&mut self, secs: u32, from: SocketAddr, mid: u16, token: &[u8]) {
        let fingerprint = 1 + (fnv1a(token) % 255) as u32;
        let seen = self.by_source.entry(from).or_insert_with(|| {
            self.new_sources.insert(from);
            vec![0; 65_536].into_boxed_slice()
        });
        let old = std::mem::replace(&mut seen[usize::from(mid)], fingerprint << 24 | secs);
        let within = secs.saturating_sub(old & 0x00ff_ffff) < EXCHANGE_LIFETIME.as_secs() as u32;
        match old >> 24 {
            0 => {}
            _ if !within => {}
            f if f == fingerprint => self.repeated += 1,
            _ => self.reused += 1,
        }
    }
}

/// What [`FastUpstream::watch_message_ids`] saw so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MidCounts {
    /// A (source, MID) seen again within EXCHANGE_LIFETIME with another token: reused (a
    /// deduplicating server would answer it with the earlier request's answer).
    pub reused: u64,
    /// A (source, MID) seen again within EXCHANGE_LIFETIME with the same token: a
    /// retransmission.
    pub repeated: u64,
    /// Sources seen.
    pub sources: usize,
}

impl FastUpstream {
    /// Binds a non-blocking UDP socket at `addr` (port 0 picks one).
    pub fn bind(addr: SocketAddr) -> io::Result<FastUpstream> {
        let socket = UdpSocket::bind(addr)?;
        socket.set_nonblocking(true)?;
        Ok(FastUpstream {
            socket,
            rx: Batch::default(),
            tx: Batch::default(),
            next_mid: 0,
            answered: 0,
            ignored: 0,
            watch: None,
            dropping: None,
        })
    }

    /// From now on, drops the first transmission of one request in `every` (`None`: none);
    /// see [`FirstDrops`].
    pub fn drop_first_of(&mut self, every: Option<u64>) {
        self.dropping = every.map(|every| FirstDrops {
            every: every.max(1),
            seen: 0,
            waiting: HashSet::new(),
            dropped: 0,
        });
    }

    /// First transmissions dropped since [`drop_first_of`](Self::drop_first_of).
    pub fn first_drops(&self) -> u64 {
        self.dropping.as_ref().map_or(0, |d| d.dropped)
    }

    /// From now on, remembers which Message ID each source used with which token, and when
    /// (256 KiB per source).
    pub fn watch_message_ids(&mut self) {
        self.watch.get_or_insert_with(MidWatch::new);
    }

    /// Reuses and retransmissions seen so far (zero when not watching).
    pub fn mid_counts(&self) -> MidCounts {
        self.watch
            .as_ref()
            .map_or(MidCounts::default(), |w| MidCounts {
                reused: w.reused,
                repeated: w.repeated,
                sources: w.by_source.len(),
            })
    }

    /// Sources first seen since the last call.
    pub fn take_new_sources(&mut self) -> HashSet<SocketAddr> {
        self.watch
            .as_mut()
            .map(|w| std::mem::take(&mut w.new_sources))
            .unwrap_or_default()
    }

    /// Where requests should go.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Answers up to `burst` requests queued on the socket now, with one `recvmmsg` and one
    /// `sendmmsg`; returns how many were answered.
    pub fn serve(&mut self, burst: usize) -> io::Result<usize> {
        let fd = self.socket.as_raw_fd();
        if self.rx.recv(fd, burst)? == 0 {
            return Ok(0);
        }
        for i in 0..self.rx.len() {
            let (request, from) = self.rx.get(i);
            let header = peek_header(request).filter(|_| Code(request[1]).is_request());
            if let (Some(source), Some((_, mid, token))) = (from.socket_addr(), header) {
                if let Some(w) = self.watch.as_mut() {
                    w.saw(source, mid, token);
                }
                if self.dropping.as_mut().is_some_and(|d| d.drops(source, mid)) {
                    continue;
                }
            }
            let mut reply = [0u8; 4 + MAX_TOKEN_LEN];
            match answer(request, self.next_mid, &mut reply) {
                0 => self.ignored += 1,
                n => {
                    self.tx.push(Some(from), |out| {
                        out[..n].copy_from_slice(&reply[..n]);
                        n
                    });
                    self.next_mid = self.next_mid.wrapping_add(1);
                }
            }
        }
        let answered = self.tx.len();
        self.tx.send(fd)?;
        self.answered += answered as u64;
        Ok(answered)
    }
}

/// Writes the 2.05 answer to `request` into `out`; 0 if `request` is not a request.
/// `non_mid` is the Message ID a NON answer carries (a CON one echoes the request's).
pub fn answer(request: &[u8], non_mid: u16, out: &mut [u8]) -> usize {
    let Some((ty, mid, token)) = peek_header(request) else {
        return 0;
    };
    let code = Code(request[1]);
    if !code.is_request() || token.len() + 4 > out.len() {
        return 0;
    }
    let (answer_type, answer_mid) = match ty {
        MessageType::Con => (MessageType::Ack, mid),
        MessageType::Non => (MessageType::Non, non_mid),
        _ => return 0,
    };
    // RFC 7252 §3: version 1, type, token length; code; Message ID; token. No options.
    out[0] = 0x40 | (answer_type as u8) << 4 | token.len() as u8;
    out[1] = Code::CONTENT.0;
    out[2..4].copy_from_slice(&answer_mid.to_be_bytes());
    out[4..4 + token.len()].copy_from_slice(token);
    4 + token.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use backoffd::coap::{Message, MessageBuilder};

    fn request(ty: MessageType, code: Code, mid: u16, token: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut b = MessageBuilder::new(&mut out, ty, code, mid, token);
        b.option(backoffd::coap::option::URI_PATH, b"x");
        b.finish().unwrap();
        out
    }

    #[test]
    fn a_con_request_gets_a_piggybacked_ack_with_its_mid_and_token() {
        let mut out = [0u8; 64];
        let n = answer(
            &request(MessageType::Con, Code::GET, 0x1234, b"tok"),
            7,
            &mut out,
        );
        let m = Message::parse(&out[..n]).unwrap();
        assert_eq!(m.msg_type(), MessageType::Ack);
        assert_eq!(m.code(), Code::CONTENT);
        assert_eq!(m.message_id(), 0x1234);
        assert_eq!(m.token(), b"tok");
    }

    #[test]
    fn a_non_request_gets_a_non_answer_with_the_upstreams_mid() {
        let mut out = [0u8; 64];
        let n = answer(
            &request(MessageType::Non, Code::POST, 0x1234, b"12345678"),
            7,
            &mut out,
        );
        let m = Message::parse(&out[..n]).unwrap();
        assert_eq!(m.msg_type(), MessageType::Non);
        assert_eq!(m.message_id(), 7);
        assert_eq!(m.token(), b"12345678");
    }

    #[test]
    fn a_message_id_again_with_another_token_is_a_reuse_with_the_same_one_a_retransmission() {
        let mut w = MidWatch::new();
        let a: SocketAddr = "127.0.0.1:1000".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:1001".parse().unwrap();
        w.saw_at(0, a, 7, b"one");
        w.saw_at(1, a, 7, b"one");
        w.saw_at(2, b, 7, b"two");
        w.saw_at(3, a, 7, b"two");
        assert_eq!((w.reused, w.repeated, w.by_source.len()), (1, 1, 2));
        w.saw_at(3 + 247, a, 7, b"three");
        assert_eq!(w.reused, 1, "a lifetime later the ID is free again");
    }

    #[test]
    fn responses_empty_messages_and_garbage_are_not_answered() {
        let mut out = [0u8; 64];
        let response = request(MessageType::Ack, Code::CONTENT, 1, b"t");
        assert_eq!(answer(&response, 0, &mut out), 0);
        let mut ping = Vec::new();
        backoffd::coap::empty_ack(&mut ping, 9);
        assert_eq!(answer(&ping, 0, &mut out), 0);
        assert_eq!(answer(&[0x40], 0, &mut out), 0);
        assert_eq!(answer(&[], 0, &mut out), 0);
    }
}
