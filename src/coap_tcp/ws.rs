//! WebSocket under CoAP (coap+ws, RFC 8323 §4): the server side of RFC 6455 over bytes.
//!
//! The opening handshake (§4.1 of RFC 8323): a GET of `/.well-known/coap` asking for the
//! `coap` subprotocol is upgraded (101, `Sec-WebSocket-Accept`, RFC 6455 §4.2.2); anything
//! else gets an HTTP error and the connection closes. Then each binary message carries one
//! CoAP message (RFC 8323 §4.4). Client frames must be masked (RFC 6455 §5.1); ours are not.
//! Text messages are refused (1003), a message past the CoAP bound too (1009), a Ping gets
//! its Pong, and a Close is echoed.

use super::sha1::sha1;
use crate::base64::base64;

/// The path RFC 8323 §8.3 gives the CoAP resource of a WebSocket server.
pub const WELL_KNOWN_PATH: &str = "/.well-known/coap";
/// The subprotocol RFC 8323 §11.5 registers.
pub const SUBPROTOCOL: &str = "coap";
/// The longest opening handshake taken.
pub const MAX_HEAD: usize = 8 * 1024;
/// RFC 6455 §1.3's GUID for `Sec-WebSocket-Accept`.
const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

const OP_CONTINUATION: u8 = 0;
const OP_TEXT: u8 = 1;
const OP_BINARY: u8 = 2;
const OP_CLOSE: u8 = 8;
const OP_PING: u8 = 9;
const OP_PONG: u8 = 10;

/// Where a session is.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Phase {
    /// Reading the opening handshake.
    Handshake,
    /// Upgraded: frames both ways. `message` gathers a fragmented message.
    Open { message: Option<Vec<u8>> },
    /// Over: the handshake failed, or a Close was sent (and echoed, or in answer).
    Closed(&'static str),
}

/// One WebSocket server session over bytes. No socket, no clock.
pub struct WsSession {
    phase: Phase,
    input: Vec<u8>,
    output: Vec<u8>,
    max_message: usize,
}

impl WsSession {
    /// A session waiting for the opening handshake; messages past `max_message` bytes are
    /// refused.
    pub fn new(max_message: usize) -> Self {
        WsSession {
            phase: Phase::Handshake,
            input: Vec::new(),
            output: Vec::new(),
            max_message,
        }
    }

    /// Bytes from the socket; each whole binary message goes to `on_message`.
    pub fn handle_input(&mut self, data: &[u8], mut on_message: impl FnMut(&[u8])) {
        if matches!(self.phase, Phase::Closed(_)) {
            return;
        }
        self.input.extend_from_slice(data);
        if self.phase == Phase::Handshake {
            self.read_handshake();
        }
        while matches!(self.phase, Phase::Open { .. }) {
            match self.next_frame(&mut on_message) {
                Ok(true) => {}
                Ok(false) => break,
                Err((code, why)) => self.close(code, why),
            }
        }
    }

    /// Whether the upgrade is done and the session not closed.
    pub fn is_open(&self) -> bool {
        matches!(self.phase, Phase::Open { .. })
    }

    /// Why the session closed, once it has.
    pub fn closed(&self) -> Option<&'static str> {
        match self.phase {
            Phase::Closed(why) => Some(why),
            _ => None,
        }
    }

    /// One CoAP message as a binary frame.
    pub fn send(&mut self, message: &[u8]) {
        if self.is_open() {
            frame(&mut self.output, OP_BINARY, message);
        }
    }

    /// Sends Close with `code` (1000: normal) and ends the session.
    pub fn close(&mut self, code: u16, why: &'static str) {
        if self.is_open() {
            frame(&mut self.output, OP_CLOSE, &code.to_be_bytes());
        }
        self.phase = Phase::Closed(why);
        self.input.clear();
    }

    /// Bytes for the socket.
    pub fn pending_output(&self) -> &[u8] {
        &self.output
    }

    /// The first `n` of them were written.
    pub fn consume_output(&mut self, n: usize) {
        self.output.drain(..n.min(self.output.len()));
    }

    /// Whether part of a message has come and not the rest: a frame short of its bytes, or
    /// the first fragments of a message (RFC 6455 §5.4).
    pub fn holds_part(&self) -> bool {
        match &self.phase {
            Phase::Open { message } => message.is_some() || !self.input.is_empty(),
            _ => false,
        }
    }

    /// Input not yet a whole frame, and output not yet written.
    pub fn buffered(&self) -> usize {
        let message = match &self.phase {
            Phase::Open { message: Some(m) } => m.len(),
            _ => 0,
        };
        self.input.len() + self.output.len() + message
    }

    fn read_handshake(&mut self) {
        let Some(end) = find(&self.input, b"\r\n\r\n") else {
            if self.input.len() > MAX_HEAD {
                self.refuse("431 Request Header Fields Too Large", "handshake too long");
            }
            return;
        };
        match accept_key(&self.input[..end + 4]) {
            Ok(key) => {
                let accept = base64(&sha1(format!("{key}{GUID}").as_bytes()));
                self.output.extend_from_slice(
                    format!(
                        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\
                         Connection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\
                         Sec-WebSocket-Protocol: {SUBPROTOCOL}\r\n\r\n"
                    )
                    .as_bytes(),
                );
                self.input.drain(..end + 4);
                self.phase = Phase::Open { message: None };
            }
            Err((status, why)) => self.refuse(status, why),
        }
    }

    fn refuse(&mut self, status: &str, why: &'static str) {
        let extra = match status.starts_with("426") {
            true => "Sec-WebSocket-Version: 13\r\n",
            false => "",
        };
        self.output.extend_from_slice(
            format!("HTTP/1.1 {status}\r\n{extra}Connection: close\r\nContent-Length: 0\r\n\r\n")
                .as_bytes(),
        );
        self.phase = Phase::Closed(why);
        self.input.clear();
    }

    /// Takes one whole frame from the input, if there is one (true).
    fn next_frame(
        &mut self,
        on_message: &mut impl FnMut(&[u8]),
    ) -> Result<bool, (u16, &'static str)> {
        let Some(head) = parse_head(&self.input)? else {
            return Ok(false);
        };
        if head.len > self.max_message as u64 {
            return Err((1009, "frame past the CoAP message bound"));
        }
        let len = head.len as usize;
        if self.input.len() < head.size + len {
            return Ok(false);
        }
        let mut payload: Vec<u8> = self.input[head.size..head.size + len].to_vec();
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= head.mask[i % 4];
        }
        self.input.drain(..head.size + len);
        self.take_frame(head.fin, head.opcode, payload, on_message)?;
        Ok(true)
    }

    fn take_frame(
        &mut self,
        fin: bool,
        opcode: u8,
        payload: Vec<u8>,
        on_message: &mut impl FnMut(&[u8]),
    ) -> Result<(), (u16, &'static str)> {
        let Phase::Open { message } = &mut self.phase else {
            return Ok(());
        };
        match (opcode, message.as_mut()) {
            (OP_PING, _) => frame(&mut self.output, OP_PONG, &payload),
            (OP_PONG, _) => {}
            (OP_CLOSE, _) => {
                let code = match payload.get(..2) {
                    Some(c) => u16::from_be_bytes([c[0], c[1]]),
                    None => 1000,
                };
                self.close(code, "the peer closed the WebSocket");
            }
            (OP_TEXT, _) => return Err((1003, "a text message (CoAP is binary)")),
            (OP_BINARY, None) if fin => on_message(&payload),
            (OP_BINARY, None) => *message = Some(payload),
            (OP_CONTINUATION, Some(m)) => {
                if m.len() + payload.len() > self.max_message {
                    return Err((1009, "message past the CoAP message bound"));
                }
                m.extend_from_slice(&payload);
                if fin {
                    let whole = message.take().unwrap_or_default();
                    on_message(&whole);
                }
            }
            _ => return Err((1002, "a frame out of sequence")),
        }
        Ok(())
    }
}

/// A frame's header.
struct Head {
    fin: bool,
    opcode: u8,
    mask: [u8; 4],
    len: u64,
    /// Header bytes.
    size: usize,
}

/// The header at the start of `input`, if it is all there (RFC 6455 §5.2).
fn parse_head(input: &[u8]) -> Result<Option<Head>, (u16, &'static str)> {
    let [b0, b1, rest @ ..] = input else {
        return Ok(None);
    };
    if b0 & 0x70 != 0 {
        return Err((1002, "reserved bits set"));
    }
    if b1 & 0x80 == 0 {
        return Err((1002, "an unmasked client frame (RFC 6455 §5.1)"));
    }
    let (fin, opcode) = (b0 & 0x80 != 0, b0 & 0x0F);
    let (len, ext) = match b1 & 0x7F {
        126 if rest.len() >= 2 => (u64::from(u16::from_be_bytes([rest[0], rest[1]])), 2),
        127 if rest.len() >= 8 => (
            u64::from_be_bytes(rest[..8].try_into().unwrap_or_default()),
            8,
        ),
        126 | 127 => return Ok(None),
        n => (u64::from(n), 0),
    };
    if opcode >= 8 && (!fin || len > 125) {
        return Err((1002, "a fragmented or long control frame"));
    }
    let Some(mask) = rest.get(ext..ext + 4) else {
        return Ok(None);
    };
    Ok(Some(Head {
        fin,
        opcode,
        mask: [mask[0], mask[1], mask[2], mask[3]],
        len,
        size: 2 + ext + 4,
    }))
}

/// Appends an unmasked frame (a server's, RFC 6455 §5.1).
fn frame(out: &mut Vec<u8>, opcode: u8, payload: &[u8]) {
    out.push(0x80 | opcode);
    match payload.len() {
        n @ 0..=125 => out.push(n as u8),
        n @ 126..=0xFFFF => {
            out.push(126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
}

/// The `Sec-WebSocket-Key` of a valid CoAP opening handshake, or the status to refuse it with.
fn accept_key(head: &[u8]) -> Result<String, (&'static str, &'static str)> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return Err(("400 Bad Request", "a malformed handshake")),
    }
    if req.method != Some("GET") {
        return Err(("405 Method Not Allowed", "not a GET"));
    }
    if req.path.map(|p| p.split('?').next()) != Some(Some(WELL_KNOWN_PATH)) {
        return Err(("404 Not Found", "not /.well-known/coap"));
    }
    let field = |name: &str| {
        (req.headers.iter())
            .filter(|h| h.name.eq_ignore_ascii_case(name))
            .filter_map(|h| std::str::from_utf8(h.value).ok())
            .collect::<Vec<_>>()
            .join(",")
    };
    let tokens = |name: &str, want: &str| {
        (field(name).split(',')).any(|t| t.trim().eq_ignore_ascii_case(want))
    };
    if !tokens("upgrade", "websocket") || !tokens("connection", "upgrade") {
        return Err(("400 Bad Request", "not a WebSocket upgrade"));
    }
    if field("sec-websocket-version").trim() != "13" {
        return Err(("426 Upgrade Required", "not WebSocket version 13"));
    }
    if !tokens("sec-websocket-protocol", SUBPROTOCOL) {
        return Err((
            "400 Bad Request",
            "the coap subprotocol not asked for (RFC 8323 §4.1)",
        ));
    }
    let key = field("sec-websocket-key").trim().to_string();
    match key.len() {
        24 => Ok(key),
        _ => Err(("400 Bad Request", "no valid Sec-WebSocket-Key")),
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
#[path = "ws_tests.rs"]
mod tests;
