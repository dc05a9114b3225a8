//! The benchmark's upstream: answers every CoAP request at once, in batches.
//!
//! A CON request gets a piggybacked ACK, a NON request a NON response, both 2.05 Content with
//! the request's token (RFC 7252 §5.2.1, §5.2.3). It keeps no state and executes nothing, so
//! it costs a fraction of what a proxy in front of it costs: the proxy stays the bottleneck.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use super::batch::Batch;
use crate::coap::{peek_header, Code, MessageType, MAX_TOKEN_LEN};

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
        })
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
    use crate::coap::{Message, MessageBuilder};

    fn request(ty: MessageType, code: Code, mid: u16, token: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut b = MessageBuilder::new(&mut out, ty, code, mid, token);
        b.option(crate::coap::option::URI_PATH, b"x");
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
    fn responses_empty_messages_and_garbage_are_not_answered() {
        let mut out = [0u8; 64];
        let response = request(MessageType::Ack, Code::CONTENT, 1, b"t");
        assert_eq!(answer(&response, 0, &mut out), 0);
        let mut ping = Vec::new();
        crate::coap::empty_ack(&mut ping, 9);
        assert_eq!(answer(&ping, 0, &mut out), 0);
        assert_eq!(answer(&[0x40], 0, &mut out), 0);
        assert_eq!(answer(&[], 0, &mut out), 0);
    }
}
