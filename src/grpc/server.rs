//! Unary gRPC calls on one server-side HTTP/2 connection, sans-IO.
//!
//! [`ServerConnection`] turns HTTP/2 events into complete requests (headers checked, exactly one
//! length-prefixed message, `grpc-timeout` tracked) and sends unary answers: headers, one
//! message and OK trailers, or a Trailers-Only error. A call whose stream is reset, or whose
//! deadline passes, is reported as [`ServerEvent::Cancelled`] so the application can forget
//! work it parked for it.

use std::collections::{BTreeMap, VecDeque};

use super::call::{
    check_request, response_headers, trailers, trailers_only, RequestCheck, RequestHead,
};
use super::message::{encode_message, MessageDecoder, DEFAULT_MAX_MESSAGE_LEN};
use super::status::{Code, Status};
use super::timeout::{expired, next_wake};
use crate::http2::error::ErrorCode;
use crate::http2::hpack::{Field, Header};
use crate::http2::{Config, Connection, Event, Role};
use crate::time::Timestamp;

/// A complete unary request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The HTTP/2 stream of the call; pass it to [`ServerConnection::respond`].
    pub stream: u32,
    /// The fully qualified service from `:path`, e.g. `grpc.testing.ReconnectService`.
    pub service: String,
    /// The method from `:path`, e.g. `Start`.
    pub method: String,
    /// The single request message (protobuf bytes).
    pub message: Vec<u8>,
}

/// What the application must act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerEvent {
    /// Answer it with [`ServerConnection::respond`], now or later.
    Request(Request),
    /// A dispatched call went away (stream reset or deadline passed): do not answer it.
    Cancelled {
        /// The stream of the cancelled call.
        stream: u32,
    },
}

struct Call {
    head: RequestHead,
    decoder: MessageDecoder,
    message: Option<Vec<u8>>,
    deadline: Option<Timestamp>,
    /// Handed to the application as a `Request`.
    dispatched: bool,
}

/// One HTTP/2 connection serving unary gRPC calls.
pub struct ServerConnection {
    h2: Connection,
    calls: BTreeMap<u32, Call>,
    events: VecDeque<ServerEvent>,
}

impl ServerConnection {
    /// A server connection; our SETTINGS are queued in the output at once.
    pub fn new(now: Timestamp, config: Config) -> Self {
        ServerConnection {
            h2: Connection::new(Role::Server, config, now),
            calls: BTreeMap::new(),
            events: VecDeque::new(),
        }
    }

    /// Bytes read from the socket.
    pub fn handle_input(&mut self, now: Timestamp, bytes: &[u8]) {
        self.h2.handle_input(now, bytes);
        self.process(now);
    }

    /// The next request or cancellation, in arrival order.
    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        self.events.pop_front()
    }

    /// Answers a dispatched call; ignored if the call was cancelled meanwhile.
    pub fn respond(&mut self, now: Timestamp, stream: u32, result: Result<Vec<u8>, Status>) {
        if self.calls.get(&stream).is_some_and(|c| c.dispatched) {
            self.calls.remove(&stream);
            self.send_answer(now, stream, result);
        }
    }

    /// Streams of calls handed to the application and not answered yet.
    pub fn dispatched(&self) -> impl Iterator<Item = u32> + '_ {
        self.calls
            .iter()
            .filter(|(_, c)| c.dispatched)
            .map(|(&s, _)| s)
    }

    /// Bytes to write to the socket; report progress with [`ServerConnection::consume_output`].
    pub fn pending_output(&self) -> &[u8] {
        self.h2.pending_output()
    }

    /// The caller wrote `n` octets of [`ServerConnection::pending_output`].
    pub fn consume_output(&mut self, now: Timestamp, n: usize) {
        self.h2.consume_output(now, n);
    }

    /// The earliest of the connection's own timers and the calls' deadlines.
    pub fn poll_timeout(&self) -> Option<Timestamp> {
        next_wake(
            self.calls.values().map(|c| c.deadline),
            self.h2.poll_timeout(),
        )
    }

    /// Handshake/idle timers of the connection, and `grpc-timeout` deadlines of calls.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.h2.handle_timeout(now);
        let expired = expired(self.calls.iter().map(|(s, c)| (s, c.deadline)), now);
        for stream in expired {
            let call = self.calls.remove(&stream).expect("listed above");
            if call.dispatched {
                self.events.push_back(ServerEvent::Cancelled { stream });
            }
            self.send_answer(
                now,
                stream,
                Err(Status::new(Code::DeadlineExceeded, "deadline exceeded")),
            );
        }
        self.process(now);
    }

    /// Graceful goodbye: GOAWAY now, close once the open streams are answered.
    pub fn go_away(&mut self, now: Timestamp) {
        self.h2.go_away(now, ErrorCode::NO_ERROR, b"");
    }

    /// The connection is over: flush the output, then close the socket.
    pub fn is_closed(&self) -> bool {
        self.h2.is_closed()
    }

    /// Why the HTTP/2 connection failed, if it did (for the driver's log).
    pub fn error(&self) -> Option<crate::http2::error::H2Error> {
        self.h2.error()
    }

    fn process(&mut self, now: Timestamp) {
        while let Some(event) = self.h2.poll_event() {
            match event {
                Event::Headers {
                    stream,
                    headers,
                    end_stream,
                } => self.on_headers(now, stream, &headers, end_stream),
                Event::Data {
                    stream,
                    data,
                    end_stream,
                } => self.on_data(now, stream, &data, end_stream),
                Event::StreamReset { stream, .. } => {
                    if self.calls.remove(&stream).is_some_and(|c| c.dispatched) {
                        self.events.push_back(ServerEvent::Cancelled { stream });
                    }
                }
                Event::SettingsReceived | Event::GoAway { .. } | Event::PingAcked { .. } => {}
            }
        }
    }

    fn on_headers(&mut self, now: Timestamp, stream: u32, headers: &[Header], end_stream: bool) {
        if self.calls.contains_key(&stream) {
            // Clients send no trailers on unary calls.
            self.calls.remove(&stream);
            self.h2.reset_stream(now, stream, ErrorCode::PROTOCOL_ERROR);
            return;
        }
        let fields = headers.iter().map(|h| (&h.name[..], &h.value[..]));
        let head = match check_request(fields) {
            RequestCheck::Accept(head) => head,
            RequestCheck::Reject(answer) => return self.send_headers(now, stream, &answer, true),
        };
        let call = Call {
            decoder: MessageDecoder::new(DEFAULT_MAX_MESSAGE_LEN, head.encoding.is_some()),
            deadline: head.timeout.map(|t| now + t),
            head,
            message: None,
            dispatched: false,
        };
        self.calls.insert(stream, call);
        if end_stream {
            self.end_of_request(now, stream);
        }
    }

    fn on_data(&mut self, now: Timestamp, stream: u32, data: &[u8], end_stream: bool) {
        let Some(call) = self.calls.get_mut(&stream) else {
            return;
        };
        if call.dispatched {
            return;
        }
        let mut failure = call.decoder.push(data).err();
        while let Some(msg) = call.decoder.pop() {
            if call.message.is_some() {
                failure = Some(Status::new(
                    Code::Unimplemented,
                    "more than one request message on a unary call",
                ));
            } else if msg.compressed {
                failure = Some(Status::new(
                    Code::Unimplemented,
                    "compressed messages are not supported",
                ));
            }
            call.message = Some(msg.payload);
        }
        if let Some(status) = failure {
            self.calls.remove(&stream);
            return self.send_answer(now, stream, Err(status));
        }
        if end_stream {
            self.end_of_request(now, stream);
        }
    }

    /// The client half-closed: the request is complete, hand it over or refuse it.
    fn end_of_request(&mut self, now: Timestamp, stream: u32) {
        let Some(call) = self.calls.get_mut(&stream) else {
            return;
        };
        let outcome = call.decoder.finish().and_then(|()| {
            call.message
                .take()
                .ok_or_else(|| Status::new(Code::Internal, "missing request message"))
        });
        match outcome {
            Ok(message) => {
                call.dispatched = true;
                self.events.push_back(ServerEvent::Request(Request {
                    stream,
                    service: call.head.service.clone(),
                    method: call.head.method.clone(),
                    message,
                }));
            }
            Err(status) => {
                self.calls.remove(&stream);
                self.send_answer(now, stream, Err(status));
            }
        }
    }

    fn send_answer(&mut self, now: Timestamp, stream: u32, result: Result<Vec<u8>, Status>) {
        let mut framed = Vec::new();
        let result = result.and_then(|m| encode_message(&mut framed, &m).map(|()| framed));
        match result {
            Ok(body) => {
                self.send_headers(now, stream, &response_headers(), false);
                let _ = self.h2.send_data(now, stream, &body, false);
                self.send_headers(now, stream, &trailers(&Status::ok()), true);
            }
            Err(status) => self.send_headers(now, stream, &trailers_only(&status), true),
        }
    }

    fn send_headers(&mut self, now: Timestamp, stream: u32, headers: &[Header], end_stream: bool) {
        let fields: Vec<Field<'_>> = headers.iter().map(Header::field).collect();
        // A stream the peer already reset is simply gone: nothing to answer.
        let _ = self.h2.send_headers(now, stream, &fields, end_stream);
    }
}
