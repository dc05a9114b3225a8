//! Unary gRPC calls on one server-side HTTP/2 connection, sans-IO.
//!
//! [`ServerConnection`] turns HTTP/2 events into complete requests (headers checked, exactly one
//! length-prefixed message, `grpc-timeout` tracked) and sends unary answers: headers, one
//! message and OK trailers, or a Trailers-Only error. A call whose stream is reset, or whose
//! deadline passes, is reported as [`ServerEvent::Cancelled`] so the application can forget
//! work it parked for it; one reset before the application polled its request is never
//! dispatched at all.
//!
//! What callers can make it hold is bounded by [`ServerLimits`]: each request message, and the
//! request bodies of all calls not yet dispatched. Flow control alone would not do: credit goes
//! back to the peer as soon as this layer takes the DATA.

use std::collections::{BTreeMap, VecDeque};

use super::call::{
    check_request, response_headers, trailers, trailers_only, RequestCheck, RequestHead,
};
use super::message::{encode_message, MessageDecoder};
use super::status::{Code, Status};
use super::timeout::{expired, next_wake};
use crate::http2::error::ErrorCode;
use crate::http2::hpack::{Field, Header};
use crate::http2::{AbuseStats, Config, Connection, Event, Role};
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

/// Limits on what the callers of one connection can make the server hold (issue 13). The
/// defaults suit small unary requests such as ReconnectService's (a few octets each); a
/// service with large requests raises them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerLimits {
    /// Largest request message: a larger one fails with RESOURCE_EXHAUSTED as soon as its
    /// length prefix arrives, before any of it is buffered, as grpc's max receive message
    /// size does (grpc's default is 4 MiB; 4 KiB here).
    pub max_request_message_len: usize,
    /// Request-body octets held across all streams for calls not yet dispatched. The call
    /// whose DATA would go past it fails with RESOURCE_EXHAUSTED, and only that call: the
    /// connection, and a Start parked on it, live on (64 KiB).
    pub max_buffered_request_bytes: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            max_request_message_len: 4 * 1024,
            max_buffered_request_bytes: 64 * 1024,
        }
    }
}

/// What one connection refused its callers, for the driver's metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ServerAbuse {
    /// The HTTP/2 connection's: the limit that ended it, streams dropped or reset.
    pub http2: AbuseStats,
    /// Calls failed with RESOURCE_EXHAUSTED for a message over `max_request_message_len`.
    pub oversized_messages: u64,
    /// Calls failed with RESOURCE_EXHAUSTED for going past `max_buffered_request_bytes`.
    pub over_budget: u64,
    /// Complete requests whose stream was reset (or whose connection failed) before the
    /// application polled them: never dispatched.
    pub reset_before_dispatch: u64,
}

/// Where a call is between its headers and its answer.
enum CallState {
    /// The request body is arriving; `held` octets of it are buffered.
    Receiving {
        decoder: MessageDecoder,
        message: Option<Vec<u8>>,
        held: usize,
    },
    /// Complete and queued as a [`ServerEvent::Request`] the application has not polled.
    Queued,
    /// The application has the request and owes an answer.
    Dispatched,
}

struct Call {
    head: RequestHead,
    deadline: Option<Timestamp>,
    state: CallState,
}

/// One HTTP/2 connection serving unary gRPC calls.
pub struct ServerConnection {
    h2: Connection,
    limits: ServerLimits,
    calls: BTreeMap<u32, Call>,
    events: VecDeque<ServerEvent>,
    /// Octets held by calls in [`CallState::Receiving`].
    held: usize,
    abuse: ServerAbuse,
}

impl ServerConnection {
    /// A server connection with the default [`ServerLimits`]; our SETTINGS are queued in the
    /// output at once.
    pub fn new(now: Timestamp, config: Config) -> Self {
        Self::with_limits(now, config, ServerLimits::default())
    }

    /// A server connection with its own limits on what callers can make it hold.
    pub fn with_limits(now: Timestamp, config: Config, limits: ServerLimits) -> Self {
        ServerConnection {
            h2: Connection::new(Role::Server, config, now),
            limits,
            calls: BTreeMap::new(),
            events: VecDeque::new(),
            held: 0,
            abuse: ServerAbuse::default(),
        }
    }

    /// Bytes read from the socket.
    pub fn handle_input(&mut self, now: Timestamp, bytes: &[u8]) {
        self.h2.handle_input(now, bytes);
        self.process(now);
    }

    /// The next request or cancellation, in arrival order. A request polled is dispatched:
    /// from now on it is answered with [`respond`](Self::respond) or cancelled.
    pub fn poll_event(&mut self) -> Option<ServerEvent> {
        let event = self.events.pop_front()?;
        if let ServerEvent::Request(r) = &event {
            if let Some(call) = self.calls.get_mut(&r.stream) {
                call.state = CallState::Dispatched;
            }
        }
        Some(event)
    }

    /// Answers a dispatched call; ignored if the call was cancelled meanwhile.
    pub fn respond(&mut self, now: Timestamp, stream: u32, result: Result<Vec<u8>, Status>) {
        let dispatched = |c: &Call| matches!(c.state, CallState::Dispatched);
        if self.calls.get(&stream).is_some_and(dispatched) {
            self.calls.remove(&stream);
            self.send_answer(now, stream, result);
        }
    }

    /// Streams of calls handed to the application and not answered yet.
    pub fn dispatched(&self) -> impl Iterator<Item = u32> + '_ {
        self.calls
            .iter()
            .filter(|(_, c)| matches!(c.state, CallState::Dispatched))
            .map(|(&s, _)| s)
    }

    /// Bytes to write to the socket; report progress with [`ServerConnection::consume_output`].
    pub fn pending_output(&self) -> &[u8] {
        self.h2.pending_output()
    }

    /// The caller wrote `n` octets of [`ServerConnection::pending_output`] (0 when the socket
    /// took nothing: that too tells the connection its output was offered).
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
            let status = Status::new(Code::DeadlineExceeded, "deadline exceeded");
            match self.forget(stream) {
                Some(CallState::Receiving { .. }) => self.refuse(now, stream, status),
                Some(CallState::Dispatched) => {
                    self.events.push_back(ServerEvent::Cancelled { stream });
                    self.send_answer(now, stream, Err(status));
                }
                _ => self.send_answer(now, stream, Err(status)),
            }
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

    /// Octets held for this connection: the HTTP/2 buffers, and the request bodies of calls
    /// not yet dispatched (at most `max_buffered_request_bytes`).
    pub fn buffered_bytes(&self) -> usize {
        self.h2.buffered_bytes() + self.held
    }

    /// What this connection refused its callers, HTTP/2 cut-offs included.
    pub fn abuse(&self) -> ServerAbuse {
        ServerAbuse {
            http2: self.h2.abuse(),
            ..self.abuse
        }
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
                Event::StreamReset { stream, .. } => match self.forget(stream) {
                    Some(CallState::Dispatched) => {
                        self.events.push_back(ServerEvent::Cancelled { stream });
                    }
                    Some(CallState::Queued) => self.abuse.reset_before_dispatch += 1,
                    _ => {}
                },
                Event::SettingsReceived | Event::GoAway { .. } | Event::PingAcked { .. } => {}
            }
        }
        if self.h2.is_closed() {
            self.drop_undispatched();
        }
    }

    /// Removes a call: a queued request leaves the queue undispatched, buffered octets are
    /// released. Its state, so the caller can tell whether the application knew of it.
    fn forget(&mut self, stream: u32) -> Option<CallState> {
        let call = self.calls.remove(&stream)?;
        match &call.state {
            CallState::Receiving { held, .. } => self.held -= held,
            CallState::Queued => {
                let queued =
                    |e: &ServerEvent| matches!(e, ServerEvent::Request(r) if r.stream == stream);
                self.events.retain(|e| !queued(e));
            }
            CallState::Dispatched => {}
        }
        Some(call.state)
    }

    /// A failed connection dispatches nothing more: calls the application does not know of
    /// are dropped (it learns of the others from `is_closed`).
    fn drop_undispatched(&mut self) {
        let undispatched: Vec<u32> = (self.calls.iter())
            .filter(|(_, c)| !matches!(c.state, CallState::Dispatched))
            .map(|(&s, _)| s)
            .collect();
        for stream in undispatched {
            if let Some(CallState::Queued) = self.forget(stream) {
                self.abuse.reset_before_dispatch += 1;
            }
        }
    }

    fn on_headers(&mut self, now: Timestamp, stream: u32, headers: &[Header], end_stream: bool) {
        if self.forget(stream).is_some() {
            // Clients send no trailers on unary calls.
            self.h2.reset_stream(now, stream, ErrorCode::PROTOCOL_ERROR);
            return;
        }
        let fields = headers.iter().map(|h| (&h.name[..], &h.value[..]));
        let head = match check_request(fields) {
            RequestCheck::Accept(head) => head,
            RequestCheck::Reject(answer) => {
                self.send_headers(now, stream, &answer, true);
                return self.stop_receiving(now, stream, end_stream);
            }
        };
        let max_len = self.limits.max_request_message_len;
        let call = Call {
            state: CallState::Receiving {
                decoder: MessageDecoder::new(max_len, head.encoding.is_some()),
                message: None,
                held: 0,
            },
            deadline: head.timeout.map(|t| now + t),
            head,
        };
        self.calls.insert(stream, call);
        if end_stream {
            self.end_of_request(now, stream);
        }
    }

    fn on_data(&mut self, now: Timestamp, stream: u32, data: &[u8], end_stream: bool) {
        let over_budget = self.held + data.len() > self.limits.max_buffered_request_bytes;
        let Some(Call {
            state:
                CallState::Receiving {
                    decoder,
                    message,
                    held,
                },
            ..
        }) = self.calls.get_mut(&stream)
        else {
            return;
        };
        let failure = match over_budget {
            true => Some(Status::new(
                Code::ResourceExhausted,
                "request bodies over the connection's budget",
            )),
            false => receive(decoder, message, data),
        };
        *held += data.len();
        self.held += data.len();
        if let Some(status) = failure {
            match (over_budget, status.code) {
                (true, _) => self.abuse.over_budget += 1,
                (false, Code::ResourceExhausted) => self.abuse.oversized_messages += 1,
                _ => {}
            }
            self.forget(stream);
            self.send_answer(now, stream, Err(status));
            return self.stop_receiving(now, stream, end_stream);
        }
        if end_stream {
            self.end_of_request(now, stream);
        }
    }

    /// The client half-closed: the request is complete, queue it for the application or
    /// refuse it.
    fn end_of_request(&mut self, now: Timestamp, stream: u32) {
        let Some(call) = self.calls.get_mut(&stream) else {
            return;
        };
        let CallState::Receiving {
            decoder,
            message,
            held,
        } = std::mem::replace(&mut call.state, CallState::Queued)
        else {
            return;
        };
        self.held -= held;
        let outcome = decoder.finish().and_then(|()| {
            message.ok_or_else(|| Status::new(Code::Internal, "missing request message"))
        });
        match outcome {
            Ok(message) => {
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

    /// Answers a call still receiving (Trailers-Only, END_STREAM), then tells the client to
    /// stop sending: RST_STREAM(NO_ERROR) after a complete response, as RFC 9113 §8.1 allows
    /// and grpc-go does. Without it the stream would keep its slot while the client sends.
    fn refuse(&mut self, now: Timestamp, stream: u32, status: Status) {
        self.send_answer(now, stream, Err(status));
        self.stop_receiving(now, stream, false);
    }

    /// After an early answer: RST_STREAM(NO_ERROR) unless the client already finished.
    fn stop_receiving(&mut self, now: Timestamp, stream: u32, client_done: bool) {
        if !client_done {
            self.h2.reset_stream(now, stream, ErrorCode::NO_ERROR);
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

/// Feeds one DATA payload to a call's decoder: the failure, if the request is not one
/// acceptable uncompressed message.
fn receive(
    decoder: &mut MessageDecoder,
    message: &mut Option<Vec<u8>>,
    data: &[u8],
) -> Option<Status> {
    let mut failure = decoder.push(data).err();
    while let Some(msg) = decoder.pop() {
        if message.is_some() {
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
        *message = Some(msg.payload);
    }
    failure
}
