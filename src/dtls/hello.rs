//! The one DTLS message read before any state exists: a ClientHello in a plaintext record
//! (RFC 6347 §4.1, §4.2.2, §4.2.1), and the two messages made from it: the stateless
//! HelloVerifyRequest that asks for the cookie, and the cookie-less copy the DTLS library
//! is shown first so that it expects the real one ([`super::server`] says why).
//!
//! Every length is checked against what is left; nothing here allocates before the checks
//! pass. A ClientHello split over several fragments is refused: a first flight fits one
//! datagram in every stack we know of (libcoap, tinydtls, OpenSSL, GnuTLS, rtc-dtls), and
//! reassembly is per-peer state that must not exist before the cookie.

use std::ops::Range;

/// Record header: type, version, epoch, sequence number (48 bits), length (RFC 6347 §4.1).
pub const RECORD_HEADER: usize = 13;
/// Handshake header: type, length, message_seq, fragment_offset, fragment_length (§4.2.2).
pub const HANDSHAKE_HEADER: usize = 12;
const CONTENT_HANDSHAKE: u8 = 22;
const CLIENT_HELLO: u8 = 1;
const HELLO_VERIFY_REQUEST: u8 = 3;
/// DTLS 1.0's wire version, which §4.2.1 asks a HelloVerifyRequest to carry whatever is
/// negotiated later.
const DTLS_1_0: [u8; 2] = [0xfe, 0xff];
/// The longest cookie DTLS 1.2 allows (§4.2.1: `opaque cookie<0..2^8-1>`).
pub const MAX_COOKIE: usize = 255;

/// Whether `datagram` is one or more whole DTLS records (RFC 6347 §4.1: a known content
/// type, a DTLS version, a length that fits) and nothing else. What is not cannot be from a
/// DTLS peer; it is dropped before the library sees it, so that a stray or forged datagram
/// cannot fail a handshake in progress.
pub fn frames_records(mut datagram: &[u8]) -> bool {
    while !datagram.is_empty() {
        let Some(header) = datagram.get(..RECORD_HEADER) else {
            return false;
        };
        let known_type = (20..=25).contains(&header[0]);
        let len = usize::from(u16::from_be_bytes([header[11], header[12]]));
        let Some(rest) = datagram.get(RECORD_HEADER + len..) else {
            return false;
        };
        if !known_type || header[1] != 0xfe {
            return false;
        }
        datagram = rest;
    }
    true
}

/// Moves the record number of every epoch-0 record in `datagram` up by `by` (RFC 6347
/// §4.1: epoch 0 is plaintext, so no MAC covers the number). A datagram that is not whole
/// records is left as it is.
pub fn shift_plaintext_seqs(datagram: &mut [u8], by: u64) {
    const MAX_SEQ: u64 = (1 << 48) - 1;
    if by == 0 || !frames_records(datagram) {
        return;
    }
    let mut at = 0;
    while at < datagram.len() {
        let header = &mut datagram[at..at + RECORD_HEADER];
        let len = usize::from(u16::from_be_bytes([header[11], header[12]]));
        if header[3..5] == [0, 0] {
            let mut seq = [0u8; 8];
            seq[2..].copy_from_slice(&header[5..11]);
            let shifted = u64::from_be_bytes(seq).saturating_add(by).min(MAX_SEQ);
            header[5..11].copy_from_slice(&shifted.to_be_bytes()[2..]);
        }
        at += RECORD_HEADER + len;
    }
}

/// Why a datagram is not a ClientHello this front can answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HelloError {
    /// Shorter than its headers say.
    Truncated,
    /// Not a handshake record of epoch 0 carrying a ClientHello.
    NotClientHello,
    /// A ClientHello in more than one fragment.
    Fragmented,
    /// A field's length runs past the message, or a DTLS version below 1.0.
    Malformed,
}

/// A ClientHello, as offsets into the datagram it came in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientHello<'a> {
    datagram: &'a [u8],
    /// The record's sequence number (§4.1), echoed by the HelloVerifyRequest.
    pub record_seq: u64,
    /// The handshake message_seq: 0 for a first ClientHello, 1 for the one with the cookie.
    pub message_seq: u16,
    /// Where the body (client_version onwards) is in the datagram.
    body: Range<usize>,
    /// Where the cookie's bytes (after its length byte) are in the datagram.
    cookie: Range<usize>,
}

impl<'a> ClientHello<'a> {
    /// Parses the first record of `datagram`.
    pub fn parse(datagram: &'a [u8]) -> Result<Self, HelloError> {
        let record = datagram.get(..RECORD_HEADER).ok_or(HelloError::Truncated)?;
        let epoch = u16::from_be_bytes([record[3], record[4]]);
        if record[0] != CONTENT_HANDSHAKE || record[1] != 0xfe || epoch != 0 {
            return Err(HelloError::NotClientHello);
        }
        let record_seq = u64::from_be_bytes([
            0, 0, record[5], record[6], record[7], record[8], record[9], record[10],
        ]);
        let record_len = usize::from(u16::from_be_bytes([record[11], record[12]]));
        let end = RECORD_HEADER + record_len;
        let fragment = datagram
            .get(RECORD_HEADER..end)
            .ok_or(HelloError::Truncated)?;
        let handshake = fragment
            .get(..HANDSHAKE_HEADER)
            .ok_or(HelloError::Truncated)?;
        if handshake[0] != CLIENT_HELLO {
            return Err(HelloError::NotClientHello);
        }
        let length = u24(&handshake[1..4]);
        let message_seq = u16::from_be_bytes([handshake[4], handshake[5]]);
        let (offset, fragment_len) = (u24(&handshake[6..9]), u24(&handshake[9..12]));
        if offset != 0 || fragment_len != length {
            return Err(HelloError::Fragmented);
        }
        let body_start = RECORD_HEADER + HANDSHAKE_HEADER;
        let body = body_start..body_start + length;
        let bytes = datagram.get(body.clone()).ok_or(HelloError::Truncated)?;
        let cookie = cookie_range(bytes)?;
        Ok(ClientHello {
            datagram,
            record_seq,
            message_seq,
            cookie: body.start + cookie.start..body.start + cookie.end,
            body,
        })
    }

    /// The cookie the client echoes (empty in a first ClientHello).
    pub fn cookie(&self) -> &'a [u8] {
        &self.datagram[self.cookie.clone()]
    }

    /// The client's random (§7.4.1.2 of RFC 5246): what tells a retransmitted ClientHello
    /// from a new handshake.
    pub fn random(&self) -> [u8; 32] {
        let at = self.body.start + 2;
        self.datagram[at..at + 32]
            .try_into()
            .expect("checked by parse")
    }

    /// The body's two parts around the cookie: what a cookie is computed over, so that a
    /// client's first and second ClientHello (which differ only there) give the same one.
    pub fn without_cookie(&self) -> [&'a [u8]; 2] {
        let before = &self.datagram[self.body.start..self.cookie.start - 1];
        let after = &self.datagram[self.cookie.end..self.body.end];
        [before, after]
    }

    /// The HelloVerifyRequest asking this client to repeat its hello with `cookie`
    /// (§4.2.1): epoch 0, the ClientHello's record sequence number, message_seq 0.
    pub fn verify_request(&self, cookie: &[u8]) -> Vec<u8> {
        let cookie = &cookie[..cookie.len().min(MAX_COOKIE)];
        let body_len = 2 + 1 + cookie.len();
        let mut out = Vec::with_capacity(RECORD_HEADER + HANDSHAKE_HEADER + body_len);
        push_record_header(&mut out, self.record_seq, HANDSHAKE_HEADER + body_len);
        push_handshake_header(&mut out, HELLO_VERIFY_REQUEST, 0, body_len);
        out.extend_from_slice(&DTLS_1_0);
        out.push(cookie.len() as u8);
        out.extend_from_slice(cookie);
        out
    }

    /// The client's first ClientHello as it must have been: this one without its cookie,
    /// message_seq 0, in the record before. `None` when there is no record before (a
    /// second ClientHello in record 0 is not one a client sends).
    pub fn as_first_hello(&self) -> Option<Vec<u8>> {
        let record_seq = self.record_seq.checked_sub(1)?;
        let [before, after] = self.without_cookie();
        let body_len = before.len() + 1 + after.len();
        let mut out = Vec::with_capacity(RECORD_HEADER + HANDSHAKE_HEADER + body_len);
        push_record_header(&mut out, record_seq, HANDSHAKE_HEADER + body_len);
        out[1..3].copy_from_slice(&self.datagram[1..3]);
        push_handshake_header(&mut out, CLIENT_HELLO, 0, body_len);
        out.extend_from_slice(before);
        out.push(0);
        out.extend_from_slice(after);
        Some(out)
    }

    /// The datagram's first record alone (what follows it is not part of the hello).
    pub fn record(&self) -> &'a [u8] {
        &self.datagram[..self.body.end]
    }
}

/// The cookie's bytes within a ClientHello body: after client_version (2), random (32) and
/// session_id (a length byte, at most 32).
fn cookie_range(body: &[u8]) -> Result<Range<usize>, HelloError> {
    if body.len() < 2 + 32 + 1 || body[0] != 0xfe {
        return Err(HelloError::Malformed);
    }
    let session_len = usize::from(body[34]);
    if session_len > 32 {
        return Err(HelloError::Malformed);
    }
    let at = 35 + session_len;
    let cookie_len = usize::from(*body.get(at).ok_or(HelloError::Malformed)?);
    let cookie = at + 1..at + 1 + cookie_len;
    // The cipher suites' length must follow: a body that ends in the cookie is not a hello.
    if cookie.end + 2 > body.len() {
        return Err(HelloError::Malformed);
    }
    Ok(cookie)
}

fn u24(b: &[u8]) -> usize {
    (usize::from(b[0]) << 16) | (usize::from(b[1]) << 8) | usize::from(b[2])
}

fn push_u24(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&(n as u32).to_be_bytes()[1..]);
}

fn push_record_header(out: &mut Vec<u8>, seq: u64, len: usize) {
    out.push(CONTENT_HANDSHAKE);
    out.extend_from_slice(&DTLS_1_0);
    out.extend_from_slice(&[0, 0]);
    out.extend_from_slice(&seq.to_be_bytes()[2..]);
    out.extend_from_slice(&(len as u16).to_be_bytes());
}

fn push_handshake_header(out: &mut Vec<u8>, kind: u8, message_seq: u16, len: usize) {
    out.push(kind);
    push_u24(out, len);
    out.extend_from_slice(&message_seq.to_be_bytes());
    push_u24(out, 0);
    push_u24(out, len);
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A ClientHello record as a client builds it: `cookie`, one suite, no extensions.
    pub(crate) fn hello(record_seq: u64, message_seq: u16, cookie: &[u8], suite: u16) -> Vec<u8> {
        let mut body = vec![0xfe, 0xfd];
        body.extend_from_slice(&[7; 32]);
        body.push(0);
        body.push(cookie.len() as u8);
        body.extend_from_slice(cookie);
        body.extend_from_slice(&[0, 2]);
        body.extend_from_slice(&suite.to_be_bytes());
        body.extend_from_slice(&[1, 0]);
        let mut out = Vec::new();
        push_record_header(&mut out, record_seq, HANDSHAKE_HEADER + body.len());
        out[1..3].copy_from_slice(&[0xfe, 0xfd]);
        push_handshake_header(&mut out, CLIENT_HELLO, message_seq, body.len());
        out.extend_from_slice(&body);
        out
    }

    #[test]
    fn plaintext_record_numbers_move_up_and_encrypted_ones_stay() {
        let plain = hello(1, 1, &[], 0xc0a8);
        let mut encrypted = hello(0, 0, &[], 0xc0a8);
        encrypted[4] = 1;
        let mut datagram = [plain.clone(), encrypted.clone()].concat();
        shift_plaintext_seqs(&mut datagram, 4);
        assert_eq!(ClientHello::parse(&datagram).unwrap().record_seq, 5);
        assert_eq!(&datagram[plain.len()..], &encrypted[..]);
    }

    #[test]
    fn only_whole_records_frame() {
        let record = hello(0, 0, &[], 0xc0a8);
        assert!(frames_records(&record));
        assert!(frames_records(&[record.clone(), record.clone()].concat()));
        assert!(!frames_records(&record[..record.len() - 1]));
        assert!(!frames_records(&[&record[..], &[0x16]].concat()));
        let coap_ack = [0x60, 0x45, 0x12, 0x34];
        assert!(!frames_records(&coap_ack));
        let mut alien = record.clone();
        alien[0] = 0x17 + 10;
        assert!(!frames_records(&alien));
    }

    #[test]
    fn a_first_hello_is_answered_with_its_record_number_and_the_cookie() {
        let datagram = hello(5, 0, b"", 0xc0a8);
        let ch = ClientHello::parse(&datagram).unwrap();
        assert_eq!(
            (ch.record_seq, ch.message_seq, ch.cookie()),
            (5, 0, &b""[..])
        );
        let hvr = ch.verify_request(b"0123456789abcdefghij");
        assert_eq!(&hvr[..3], &[22, 0xfe, 0xff]);
        assert_eq!(&hvr[5..11], &[0, 0, 0, 0, 0, 5]);
        assert_eq!(hvr[RECORD_HEADER], HELLO_VERIFY_REQUEST);
        assert_eq!(&hvr[hvr.len() - 21..], b"\x140123456789abcdefghij");
        assert_eq!(hvr.len(), RECORD_HEADER + 12 + 3 + 20);
    }

    #[test]
    fn the_first_hello_rebuilt_from_the_second_is_what_the_client_sent() {
        let first = hello(0, 0, b"", 0xc0ae);
        let second = hello(1, 1, b"cookie-of-twenty-b..", 0xc0ae);
        let ch = ClientHello::parse(&second).unwrap();
        assert_eq!(ch.as_first_hello().unwrap(), first);
        let before = ClientHello::parse(&first).unwrap();
        assert_eq!(before.without_cookie(), ch.without_cookie());
        assert_eq!(ch.random(), [7; 32]);
    }

    #[test]
    fn anything_else_is_refused_without_panicking() {
        let good = hello(1, 1, b"abc", 0xc0a8);
        for n in 0..good.len() {
            assert!(ClientHello::parse(&good[..n]).is_err(), "prefix {n}");
        }
        let mut epoch1 = good.clone();
        epoch1[4] = 1;
        assert_eq!(ClientHello::parse(&epoch1), Err(HelloError::NotClientHello));
        let mut fragment = good.clone();
        fragment[RECORD_HEADER + 11] -= 1;
        assert_eq!(ClientHello::parse(&fragment), Err(HelloError::Fragmented));
        assert_eq!(
            ClientHello::parse(&hello(0, 1, b"x", 1))
                .unwrap()
                .as_first_hello(),
            None
        );
    }
}
