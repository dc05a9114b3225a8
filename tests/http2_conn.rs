//! The HTTP/2 connection state machine in virtual time: a client/server `Pair`
//! shuttling bytes in memory, and hand-made frames against one side.

use std::time::Duration;

use backoffd::http2::error::ErrorCode;
use backoffd::http2::frame::{self, Frame};
use backoffd::http2::hpack::{Encoder, Header};
use backoffd::http2::{Config, Connection, Event, Role, SendError};
use backoffd::time::Timestamp;

type Fields<'a> = &'a [(&'a [u8], &'a [u8])];

const T0: Timestamp = Timestamp::ZERO;
const REQUEST: Fields = &[
    (b":method", b"POST"),
    (b":scheme", b"http"),
    (b":path", b"/grpc.testing.ReconnectService/Start"),
    (b":authority", b"localhost"),
    (b"content-type", b"application/grpc"),
    (b"te", b"trailers"),
];
const RESPONSE: Fields = &[(b":status", b"200"), (b"content-type", b"application/grpc")];
const TRAILERS: Fields = &[(b"grpc-status", b"0")];

fn owned(fields: Fields) -> Vec<Header> {
    let header = |&(n, v): &(&[u8], &[u8])| Header {
        name: n.to_vec(),
        value: v.to_vec(),
        sensitive: false,
    };
    fields.iter().map(header).collect()
}

fn headers(stream: u32, fields: Fields, end_stream: bool) -> Event {
    let headers = owned(fields);
    Event::Headers {
        stream,
        headers,
        end_stream,
    }
}

fn data(stream: u32, data: &[u8], end_stream: bool) -> Event {
    let data = data.to_vec();
    Event::Data {
        stream,
        data,
        end_stream,
    }
}

/// Takes everything the connection wants to send.
fn drain(conn: &mut Connection) -> Vec<u8> {
    drain_at(conn, T0)
}

fn drain_at(conn: &mut Connection, now: Timestamp) -> Vec<u8> {
    let out = conn.pending_output().to_vec();
    conn.consume_output(now, out.len());
    out
}

fn events(conn: &mut Connection) -> Vec<Event> {
    std::iter::from_fn(|| conn.poll_event()).collect()
}

/// The frames in `out`, after the client preface if it starts with one.
fn frames(out: &[u8]) -> Vec<Frame<'_>> {
    let mut rest = out.strip_prefix(&frame::PREFACE[..]).unwrap_or(out);
    let mut frames = Vec::new();
    while let Some((f, n)) = frame::decode(rest, frame::MAX_ALLOWED_FRAME_SIZE).unwrap() {
        frames.push(f);
        rest = &rest[n..];
    }
    assert!(rest.is_empty(), "trailing partial frame");
    frames
}

fn goaway_code(out: &[u8]) -> Option<ErrorCode> {
    frames(out).into_iter().find_map(|f| match f {
        Frame::GoAway { code, .. } => Some(code),
        _ => None,
    })
}

fn resets(out: &[u8]) -> Vec<(u32, ErrorCode)> {
    let reset = |f| match f {
        Frame::RstStream { stream_id, code } => Some((stream_id, code)),
        _ => None,
    };
    frames(out).into_iter().filter_map(reset).collect()
}

fn data_sent(out: &[u8]) -> (usize, bool) {
    frames(out).iter().fold((0, false), |(n, end), f| match f {
        Frame::Data {
            data, end_stream, ..
        } => (n + data.len(), end || *end_stream),
        _ => (n, end),
    })
}

/// A server that has read a client preface, empty SETTINGS and an ACK, with
/// its output drained.
fn server_with(config: Config) -> Connection {
    let mut server = Connection::new(Role::Server, config, T0);
    let mut input = frame::PREFACE.to_vec();
    frame::encode_settings(&mut input, &[]);
    frame::encode_settings_ack(&mut input);
    server.handle_input(T0, &input);
    drain(&mut server);
    events(&mut server);
    server
}

fn server() -> Connection {
    server_with(Config::default())
}

/// A client that has read a server's SETTINGS (plus `settings`) and an ACK.
fn client_with_peer_settings(settings: &[(u16, u32)]) -> Connection {
    let mut client = Connection::new(Role::Client, Config::default(), T0);
    let mut input = Vec::new();
    frame::encode_settings(&mut input, settings);
    frame::encode_settings_ack(&mut input);
    client.handle_input(T0, &input);
    drain(&mut client);
    events(&mut client);
    client
}

fn block(encoder: &mut Encoder, fields: Fields) -> Vec<u8> {
    let mut block = Vec::new();
    encoder.encode(fields.iter().copied(), &mut block);
    block
}

/// A HEADERS frame carrying `fields`, as a fresh client encoder would send it.
fn request_frame(stream_id: u32, fields: Fields, end_stream: bool) -> Vec<u8> {
    let mut out = Vec::new();
    let block = block(&mut Encoder::new(), fields);
    frame::encode_headers(&mut out, stream_id, &block, end_stream, 16_384);
    out
}

/// Raw frame bytes, for frames the encoders refuse to make.
fn raw(kind: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream_id.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// A client and a server connected in memory, in virtual time.
struct Pair {
    now: Timestamp,
    client: Connection,
    server: Connection,
    client_events: Vec<Event>,
    server_events: Vec<Event>,
    /// Deliver input one octet per `handle_input` call.
    trickle: bool,
}

impl Pair {
    fn new() -> Self {
        Self::with(Config::default(), Config::default(), false)
    }

    /// Connects and completes the handshake; its events are dropped.
    fn with(client: Config, server: Config, trickle: bool) -> Self {
        let mut pair = Pair {
            now: T0,
            client: Connection::new(Role::Client, client, T0),
            server: Connection::new(Role::Server, server, T0),
            client_events: Vec::new(),
            server_events: Vec::new(),
            trickle,
        };
        pair.drive();
        pair.client_events.clear();
        pair.server_events.clear();
        pair
    }

    /// Shuttles bytes both ways, polling events as an application would,
    /// until nothing moves.
    fn drive(&mut self) {
        loop {
            self.client_events.extend(events(&mut self.client));
            self.server_events.extend(events(&mut self.server));
            let (now, trickle) = (self.now, self.trickle);
            let moved = transfer(&mut self.client, &mut self.server, now, trickle)
                + transfer(&mut self.server, &mut self.client, now, trickle);
            if moved == 0 {
                return;
            }
        }
    }

    fn request(&mut self, body: &[u8]) -> u32 {
        let now = self.now;
        let id = self.client.open_stream(now).unwrap();
        self.client.send_headers(now, id, REQUEST, false).unwrap();
        self.client.send_data(now, id, body, true).unwrap();
        self.drive();
        id
    }

    fn respond(&mut self, id: u32, body: &[u8]) {
        let now = self.now;
        self.server.send_headers(now, id, RESPONSE, false).unwrap();
        self.server.send_data(now, id, body, false).unwrap();
        self.server.send_headers(now, id, TRAILERS, true).unwrap();
        self.drive();
    }
}

fn transfer(from: &mut Connection, to: &mut Connection, now: Timestamp, trickle: bool) -> usize {
    let out = drain_at(from, now);
    if trickle {
        out.chunks(1).for_each(|b| to.handle_input(now, b));
    } else {
        to.handle_input(now, &out);
    }
    out.len()
}

/// Joins the DATA of `stream` and tells whether it ended.
fn body(events: &[Event], stream: u32) -> (Vec<u8>, bool) {
    let mut joined = (Vec::new(), false);
    for e in events {
        if let Event::Data {
            stream: s,
            data,
            end_stream,
        } = e
        {
            if *s == stream {
                joined.0.extend_from_slice(data);
                joined.1 |= end_stream;
            }
        }
    }
    joined
}

#[path = "http2_conn/abuse.rs"]
mod abuse;
#[path = "http2_conn/exchange.rs"]
mod exchange;
#[path = "http2_conn/framing.rs"]
mod framing;
#[path = "http2_conn/fuzz.rs"]
mod fuzz;
#[path = "http2_conn/limits.rs"]
mod limits;
#[path = "http2_conn/streams.rs"]
mod streams;
