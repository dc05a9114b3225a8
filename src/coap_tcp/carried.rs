//! A CoAP connection with what carries it: TCP as it is (coap+tcp), TLS (coaps+tcp) or a
//! WebSocket (coap+ws). The connection ([`StreamConn`], or [`UpstreamConn`] towards an
//! origin) speaks CoAP's framing; the carrier turns the socket's bytes into that framing and
//! back. Sans-IO, like both.

use std::sync::Arc;

use super::client::UpstreamConn;
use super::conn::{ConnCounters, ConnLimits, Ending, StreamConn};
use super::frame::Framing;
use super::tls::TlsSession;
use super::ws::WsSession;
use crate::time::Timestamp;

/// What carries a connection.
pub enum Carrier {
    /// The TCP byte stream itself (RFC 8323 §3).
    Tcp,
    /// TLS over TCP (§3, §9.2), carrying CoAP's stream framing or a WebSocket (coaps+ws,
    /// §4): the same port serves both.
    Tls(Box<TlsSession>, TlsUpper),
    /// A WebSocket over TCP (§4).
    Ws(Box<WsSession>),
}

/// What a TLS carrier carries. The client says it by ALPN (`coap`, or `http/1.1` for a
/// WebSocket, as browsers offer for `wss:`), or else by its first bytes: a CoAP client's first
/// message is its CSM (§5.3), a WebSocket client's a `GET` (RFC 6455 §4.1).
pub enum TlsUpper {
    /// Not known yet: nothing is written, our CSM waits.
    Undecided,
    /// CoAP's stream framing (coaps+tcp).
    Coap,
    /// A WebSocket (coaps+ws).
    Ws(Box<WsSession>),
}

impl Carrier {
    /// A TLS carrier for a new connection.
    pub fn tls(config: Arc<rustls::ServerConfig>) -> Result<Self, rustls::Error> {
        Ok(Carrier::Tls(
            Box::new(TlsSession::new(config)?),
            TlsUpper::Undecided,
        ))
    }

    /// A WebSocket carrier for a new connection, whose messages are at most `limits`'s.
    pub fn ws(limits: &ConnLimits) -> Self {
        Carrier::Ws(Box::new(WsSession::new(limits.max_message_size as usize)))
    }
}

/// A connection and its carrier. See the module docs.
pub struct Carried {
    carrier: Carrier,
    conn: StreamConn,
    limits: ConnLimits,
    /// When the connection was accepted: its CSM deadline counts from then.
    since: Timestamp,
    /// The carrier's close (close_notify, WebSocket Close) has been sent.
    carrier_closed: bool,
}

impl Carried {
    /// A new connection at `now`; its CSM goes out once the carrier is ready.
    pub fn new(now: Timestamp, carrier: Carrier, limits: ConnLimits) -> Self {
        let framing = match carrier {
            Carrier::Ws(_) => Framing::WebSocket,
            _ => Framing::Stream,
        };
        let mut carried = Carried {
            carrier,
            conn: StreamConn::new(now, framing, limits),
            limits,
            since: now,
            carrier_closed: false,
        };
        carried.seal();
        carried
    }

    /// Bytes from the socket.
    pub fn handle_input(&mut self, now: Timestamp, data: &[u8]) {
        let conn = &mut self.conn;
        match &mut self.carrier {
            Carrier::Tcp => conn.handle_input(now, data),
            Carrier::Tls(tls, upper) => {
                let mut plaintext = Vec::new();
                let read = tls.handle_input(data, &mut plaintext);
                if matches!(upper, TlsUpper::Undecided) {
                    *upper = decide(tls, &plaintext, self.limits);
                    if let TlsUpper::Ws(_) = upper {
                        *conn = StreamConn::new(self.since, Framing::WebSocket, self.limits);
                    }
                }
                match upper {
                    TlsUpper::Undecided => {}
                    TlsUpper::Coap => conn.handle_input(now, &plaintext),
                    TlsUpper::Ws(ws) => {
                        ws.handle_input(&plaintext, |m| conn.handle_ws_message(now, m));
                        conn.carrier_holds_part(ws.holds_part());
                        if let Some(why) = ws.closed() {
                            conn.cut_off(Ending::Transport(why));
                        }
                    }
                }
                if read.is_err() {
                    // rustls queued the alert; the connection ends once it is out.
                    self.carrier_closed = true;
                    conn.cut_off(Ending::Transport("a TLS error"));
                }
            }
            Carrier::Ws(ws) => {
                ws.handle_input(data, |message| conn.handle_ws_message(now, message));
                conn.carrier_holds_part(ws.holds_part());
                if let Some(why) = ws.closed() {
                    self.carrier_closed = true;
                    conn.cut_off(Ending::Transport(why));
                }
            }
        }
        self.seal();
    }

    /// The peer closed its side.
    pub fn handle_eof(&mut self) {
        self.conn.handle_eof();
    }

    /// A message the engine sent this peer, framed for it (see [`StreamConn::deliver`]):
    /// nothing goes back to the engine.
    pub fn deliver(&mut self, datagram: &[u8]) {
        self.conn.deliver(datagram);
        self.seal();
    }

    /// The next request for the engine, if the output bound lets one be taken (see
    /// [`StreamConn::poll_to_engine`]).
    pub fn poll_to_engine(&mut self) -> Option<Vec<u8>> {
        let request = self.conn.poll_to_engine();
        // Taking a request can have let signals through (a Pong to write).
        self.seal();
        request
    }

    /// The engine queued `bytes` because of the request just taken (see
    /// [`StreamConn::queued_by_engine`]).
    pub fn queued_by_engine(&mut self, bytes: usize) {
        self.conn.queued_by_engine(bytes);
    }

    /// Everything the engine had queued has gone to its transports.
    pub fn engine_queue_emptied(&mut self) {
        self.conn.engine_queue_emptied();
        self.seal();
    }

    /// Whether a request waits that only the engine's queue keeps from being taken (see
    /// [`StreamConn::has_work`]).
    pub fn has_work(&self) -> bool {
        self.conn.has_work()
    }

    /// When the peer last sent anything.
    pub fn last_input(&self) -> Timestamp {
        self.conn.last_input()
    }

    /// Whether to read now: the connection takes input (its output, the carrier's
    /// included, is not backed up; no message waits for its turn).
    pub fn wants_input(&self) -> bool {
        self.conn.wants_input()
    }

    /// The connection's next deadline.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.conn.poll_timeout()
    }

    /// Runs the connection's deadlines.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.conn.handle_timeout(now);
        self.seal();
    }

    /// Sends Release and ends (shutdown).
    pub fn release(&mut self) {
        self.conn.release();
        self.seal();
    }

    /// Why the connection ended, once it has.
    pub fn ended(&self) -> Option<&Ending> {
        self.conn.ended()
    }

    /// Whether the peer's CSM has come.
    pub fn is_open(&self) -> bool {
        self.conn.is_open()
    }

    /// Bytes for the socket.
    pub fn pending_output(&self) -> &[u8] {
        self.carrier_output()
    }

    /// The first `n` of them were written.
    pub fn consume_output(&mut self, n: usize) {
        match &mut self.carrier {
            Carrier::Tcp => self.conn.consume_output(n),
            Carrier::Tls(tls, _) => tls.consume_output(n),
            Carrier::Ws(ws) => ws.consume_output(n),
        }
        self.seal();
    }

    /// What the connection counted.
    pub fn counters(&self) -> ConnCounters {
        self.conn.counters()
    }

    /// Bytes held: the connection's and the carrier's.
    pub fn buffered(&self) -> usize {
        let carrier = match &self.carrier {
            Carrier::Tcp => 0,
            Carrier::Tls(tls, TlsUpper::Ws(ws)) => tls.buffered() + ws.buffered(),
            Carrier::Tls(tls, _) => tls.buffered(),
            Carrier::Ws(ws) => ws.buffered(),
        };
        self.conn.buffered() + carrier
    }

    fn carrier_output(&self) -> &[u8] {
        match &self.carrier {
            Carrier::Tcp => self.conn.pending_output(),
            Carrier::Tls(tls, _) => tls.pending_output(),
            Carrier::Ws(ws) => ws.pending_output(),
        }
    }

    /// Moves what the connection wrote into the carrier, and closes the carrier after the
    /// connection's last words.
    fn seal(&mut self) {
        let ended = self.conn.ended().is_some();
        match &mut self.carrier {
            Carrier::Tcp => {}
            Carrier::Tls(tls, upper) => {
                match upper {
                    // Nothing goes out before the framing is known.
                    TlsUpper::Undecided => {}
                    TlsUpper::Coap => {
                        let n = self.conn.pending_output().len();
                        if n > 0 {
                            tls.send(self.conn.pending_output());
                            self.conn.consume_output(n);
                        }
                    }
                    TlsUpper::Ws(ws) => {
                        while let Some(message) =
                            ws.is_open().then(|| self.conn.pop_message()).flatten()
                        {
                            ws.send(&message);
                        }
                        if ended && ws.closed().is_none() {
                            ws.close(1000, "the CoAP connection ended");
                        }
                        let n = ws.pending_output().len();
                        if n > 0 {
                            tls.send(ws.pending_output());
                            ws.consume_output(n);
                        }
                    }
                }
                if ended && !self.carrier_closed {
                    tls.close();
                    self.carrier_closed = true;
                }
            }
            Carrier::Ws(ws) if ws.is_open() => {
                while let Some(message) = self.conn.pop_message() {
                    ws.send(&message);
                }
                if ended && !self.carrier_closed {
                    ws.close(1000, "the CoAP connection ended");
                    self.carrier_closed = true;
                }
            }
            Carrier::Ws(_) => {}
        }
        let held = match &self.carrier {
            Carrier::Tcp => 0,
            Carrier::Tls(tls, _) => tls.pending_output().len(),
            Carrier::Ws(ws) => ws.pending_output().len(),
        };
        self.conn.carrier_holds(held);
    }
}

/// What a TLS connection carries (see [`TlsUpper`]), once the handshake or the first byte
/// says it.
fn decide(tls: &TlsSession, plaintext: &[u8], limits: ConnLimits) -> TlsUpper {
    let ws = || TlsUpper::Ws(Box::new(WsSession::new(limits.max_message_size as usize)));
    match tls.alpn() {
        Some(super::tls::ALPN_COAP) => return TlsUpper::Coap,
        Some(super::tls::ALPN_HTTP1) => return ws(),
        _ => {}
    }
    match plaintext.first() {
        // A CSM starts with Len and TKL (0 for a CSM without token, as clients send it); a
        // WebSocket handshake with `GET`.
        Some(b'G') => ws(),
        Some(_) => TlsUpper::Coap,
        None => TlsUpper::Undecided,
    }
}

/// A connection to an origin and its carrier: TCP as it is, or TLS.
pub struct CarriedUpstream {
    conn: UpstreamConn,
    tls: Option<Box<TlsSession>>,
    /// close_notify has been sent.
    tls_closed: bool,
    /// What TLS failed with, for the driver's log line.
    tls_error: Option<String>,
}

impl CarriedUpstream {
    /// A new connection at `now`, over `tls` if given; our CSM goes out first (after the
    /// TLS handshake).
    pub fn new(now: Timestamp, limits: ConnLimits, tls: Option<TlsSession>) -> Self {
        let mut carried = CarriedUpstream {
            conn: UpstreamConn::new(now, limits),
            tls: tls.map(Box::new),
            tls_closed: false,
            tls_error: None,
        };
        carried.seal();
        carried
    }

    /// A message the engine sends (see [`UpstreamConn::send`]).
    pub fn send(&mut self, datagram: &[u8]) {
        self.conn.send(datagram);
        self.seal();
    }

    /// Bytes from the socket.
    pub fn handle_input(&mut self, now: Timestamp, data: &[u8]) {
        match &mut self.tls {
            None => self.conn.handle_input(now, data),
            Some(tls) => {
                let mut plaintext = Vec::new();
                let read = tls.handle_input(data, &mut plaintext);
                self.conn.handle_input(now, &plaintext);
                if let Err(e) = read {
                    self.tls_closed = true;
                    self.tls_error = Some(e.to_string());
                    self.conn.fail("a TLS error");
                }
            }
        }
        self.seal();
    }

    /// The origin closed its side.
    pub fn handle_eof(&mut self) {
        self.conn.handle_eof();
    }

    /// The next response for the engine (see [`UpstreamConn::poll_to_engine`]).
    pub fn poll_to_engine(&mut self) -> Option<Vec<u8>> {
        self.conn.poll_to_engine()
    }

    /// Whether to read now.
    pub fn wants_input(&self) -> bool {
        self.conn.wants_input()
    }

    /// The connection's next deadline.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        self.conn.poll_timeout()
    }

    /// Runs the connection's deadlines.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.conn.handle_timeout(now);
        self.seal();
    }

    /// Sends Release and ends.
    pub fn release(&mut self) {
        self.conn.release();
        self.seal();
    }

    /// Why the connection ended, once it has.
    pub fn ended(&self) -> Option<&Ending> {
        self.conn.ended()
    }

    /// What TLS failed with, if it did.
    pub fn tls_error(&self) -> Option<&str> {
        self.tls_error.as_deref()
    }

    /// Bytes for the socket.
    pub fn pending_output(&self) -> &[u8] {
        match &self.tls {
            None => self.conn.pending_output(),
            Some(tls) => tls.pending_output(),
        }
    }

    /// The first `n` of them were written.
    pub fn consume_output(&mut self, n: usize) {
        match &mut self.tls {
            None => self.conn.consume_output(n),
            Some(tls) => tls.consume_output(n),
        }
    }

    /// Moves what the connection wrote into TLS; close_notify after its last words.
    fn seal(&mut self) {
        let Some(tls) = &mut self.tls else {
            return;
        };
        let n = self.conn.pending_output().len();
        if n > 0 {
            tls.send(self.conn.pending_output());
            self.conn.consume_output(n);
        }
        if self.conn.ended().is_some() && !self.tls_closed {
            tls.close();
            self.tls_closed = true;
        }
    }
}
