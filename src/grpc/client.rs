//! Unary gRPC calls on one client-side HTTP/2 connection, sans-IO (doc/PROTOCOL-HTTP2.md).
//!
//! [`ClientConnection::call`] sends a request (headers, one length-prefixed message,
//! END_STREAM); the response's headers, message and trailers are collected per stream and
//! come out of [`ClientConnection::poll_event`] as one `Result<Vec<u8>, Status>` per call.
//! Failures map the way gRPC clients map them: Trailers-Only and trailers by `grpc-status` and
//! the percent-decoded `grpc-message`; a non-200 `:status` without `grpc-status` by
//! doc/http-grpc-status-mapping.md; RST_STREAM codes by PROTOCOL-HTTP2.md's table; a call whose
//! `timeout` passes is DEADLINE_EXCEEDED (and its stream is cancelled); a connection that ends
//! fails its calls with UNAVAILABLE.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use super::call::is_grpc_content_type;
use super::message::{encode_message, MessageDecoder, DEFAULT_MAX_MESSAGE_LEN};
use super::status::{Code, Status};
use super::timeout::{expired, format_timeout, next_wake};
use crate::http2::error::ErrorCode;
use crate::http2::hpack::{Field, Header};
use crate::http2::{Config, Connection, Event, Role, SendError};
use crate::time::Timestamp;

/// Sent as `user-agent` on every call (gRPC's `grpc-<language>-<implementation>/<version>`).
pub const USER_AGENT: &str = concat!("grpc-rust-backoffd/", env!("CARGO_PKG_VERSION"));

/// What the application learns from the connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClientEvent {
    /// The server's SETTINGS arrived: the connection is up (a gRPC client resets its backoff).
    SettingsReceived,
    /// A call finished: its single response message, or why it failed.
    Response {
        /// The stream id [`ClientConnection::call`] returned.
        stream: u32,
        /// The response message (protobuf bytes), or the call's non-OK status.
        result: Result<Vec<u8>, Status>,
    },
}

/// Where a call's response is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Nothing received yet (1xx headers do not count).
    AwaitingHeaders,
    /// `:status 200` and a gRPC content-type: messages, then trailers.
    Body,
}

struct Call {
    phase: Phase,
    decoder: MessageDecoder,
    message: Option<Vec<u8>>,
    /// A protocol problem found in the body: reported when the call ends, or at once on reset.
    failure: Option<Status>,
    deadline: Option<Timestamp>,
}

/// One HTTP/2 connection making unary gRPC calls. See the module docs.
pub struct ClientConnection {
    h2: Connection,
    scheme: &'static [u8],
    authority: Vec<u8>,
    calls: BTreeMap<u32, Call>,
    events: VecDeque<ClientEvent>,
    settings_received: bool,
}

impl ClientConnection {
    /// A connection to `authority` (`host:port`, sent as `:authority`); the client preface and
    /// SETTINGS are queued at once. `tls` selects `:scheme` `https` over `http`.
    pub fn new(now: Timestamp, authority: &str, tls: bool, config: Config) -> Self {
        ClientConnection {
            h2: Connection::new(Role::Client, config, now),
            scheme: if tls { b"https" } else { b"http" },
            authority: authority.as_bytes().to_vec(),
            calls: BTreeMap::new(),
            events: VecDeque::new(),
            settings_received: false,
        }
    }

    /// Starts a unary call to `path` (`/package.Service/Method`) with one request message.
    /// `timeout`, if any, is sent as `grpc-timeout` and enforced here too. Returns the call's
    /// stream id, which its [`ClientEvent::Response`] carries; a connection that cannot take
    /// the call (closed, going away, out of streams) is an UNAVAILABLE error right away.
    pub fn call(
        &mut self,
        now: Timestamp,
        path: &str,
        message: &[u8],
        timeout: Option<Duration>,
    ) -> Result<u32, Status> {
        let mut body = Vec::with_capacity(message.len() + 5);
        encode_message(&mut body, message)?;
        let stream = self.h2.open_stream(now).map_err(unavailable)?;
        let timeout_value = timeout.map(format_timeout);
        let mut headers: Vec<Field<'_>> = vec![
            (b":method", b"POST"),
            (b":scheme", self.scheme),
            (b":path", path.as_bytes()),
            (b":authority", &self.authority),
            (b"content-type", b"application/grpc"),
            (b"te", b"trailers"),
            (b"user-agent", USER_AGENT.as_bytes()),
        ];
        if let Some(value) = &timeout_value {
            headers.push((b"grpc-timeout", value.as_bytes()));
        }
        let sent = self
            .h2
            .send_headers(now, stream, &headers, false)
            .and_then(|()| self.h2.send_data(now, stream, &body, true));
        if let Err(e) = sent {
            self.h2.reset_stream(now, stream, ErrorCode::CANCEL);
            return Err(unavailable(e));
        }
        self.calls.insert(
            stream,
            Call {
                phase: Phase::AwaitingHeaders,
                decoder: MessageDecoder::new(DEFAULT_MAX_MESSAGE_LEN, false),
                message: None,
                failure: None,
                deadline: timeout.map(|t| now + t),
            },
        );
        Ok(stream)
    }

    /// Bytes read from the transport.
    pub fn handle_input(&mut self, now: Timestamp, bytes: &[u8]) {
        self.h2.handle_input(now, bytes);
        self.process(now);
    }

    /// The next event, in arrival order.
    pub fn poll_event(&mut self) -> Option<ClientEvent> {
        self.events.pop_front()
    }

    /// Bytes to write to the transport; report progress with [`ClientConnection::consume_output`].
    pub fn pending_output(&self) -> &[u8] {
        self.h2.pending_output()
    }

    /// The caller wrote `n` octets of [`ClientConnection::pending_output`].
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

    /// Fires the connection's timers and expires calls whose deadline passed (RST_STREAM
    /// CANCEL, DEADLINE_EXCEEDED). Spurious calls do nothing.
    pub fn handle_timeout(&mut self, now: Timestamp) {
        self.h2.handle_timeout(now);
        let expired = expired(self.calls.iter().map(|(s, c)| (s, c.deadline)), now);
        for stream in expired {
            self.h2.reset_stream(now, stream, ErrorCode::CANCEL);
            self.finish(
                stream,
                Err(Status::new(Code::DeadlineExceeded, "deadline exceeded")),
            );
        }
        self.process(now);
    }

    /// Whether the server's SETTINGS arrived.
    pub fn is_ready(&self) -> bool {
        self.settings_received
    }

    /// Calls still waiting for their response.
    pub fn calls_in_flight(&self) -> usize {
        self.calls.len()
    }

    /// Graceful goodbye: GOAWAY now; the connection closes once open streams are done.
    pub fn go_away(&mut self, now: Timestamp) {
        self.h2.go_away(now, ErrorCode::NO_ERROR, b"");
    }

    /// The HTTP/2 connection is over: flush the output, then close the transport.
    pub fn is_closed(&self) -> bool {
        self.h2.is_closed()
    }

    /// The transport ended (EOF, reset, I/O error): every call still open fails UNAVAILABLE.
    pub fn on_transport_closed(&mut self, why: &str) {
        let open: Vec<u32> = self.calls.keys().copied().collect();
        for stream in open {
            self.finish(
                stream,
                Err(Status::new(
                    Code::Unavailable,
                    format!("connection closed: {why}"),
                )),
            );
        }
    }

    fn process(&mut self, now: Timestamp) {
        while let Some(event) = self.h2.poll_event() {
            match event {
                Event::SettingsReceived => {
                    self.settings_received = true;
                    self.events.push_back(ClientEvent::SettingsReceived);
                }
                Event::Headers {
                    stream,
                    headers,
                    end_stream,
                } => self.on_headers(now, stream, &headers, end_stream),
                Event::Data {
                    stream,
                    data,
                    end_stream,
                } => self.on_data(stream, &data, end_stream),
                Event::StreamReset { stream, code } => {
                    let failure = self.calls.get_mut(&stream).and_then(|c| c.failure.take());
                    self.finish(stream, Err(failure.unwrap_or_else(|| reset_status(code))));
                }
                Event::GoAway { .. } | Event::PingAcked { .. } => {}
            }
        }
        if self.h2.is_closed() {
            let why = match self.h2.error() {
                Some(e) => format!("HTTP/2 connection error: {}", e.reason()),
                None => "HTTP/2 connection ended".to_owned(),
            };
            self.on_transport_closed(&why);
        }
    }

    fn on_headers(&mut self, now: Timestamp, stream: u32, headers: &[Header], end_stream: bool) {
        let Some(call) = self.calls.get_mut(&stream) else {
            return;
        };
        let fields = ResponseFields::collect(headers);
        match call.phase {
            Phase::AwaitingHeaders => {
                let status = fields.status.and_then(parse_http_status);
                if status.is_some_and(|s| (100..200).contains(&s)) {
                    return; // informational: the real headers follow
                }
                if end_stream {
                    // Trailers-Only, or an HTTP error without a body.
                    return self.finish(stream, Err(trailers_only_status(status, &fields)));
                }
                match status {
                    Some(200) if fields.content_type.is_some_and(is_grpc_content_type) => {
                        call.phase = Phase::Body;
                    }
                    Some(200) => {
                        call.failure = Some(Status::new(
                            Code::Unknown,
                            format!(
                                "response content-type {:?} is not gRPC",
                                String::from_utf8_lossy(fields.content_type.unwrap_or_default())
                            ),
                        ));
                        call.phase = Phase::Body;
                    }
                    other => {
                        let status = http_status(other);
                        self.h2.reset_stream(now, stream, ErrorCode::CANCEL);
                        self.finish(stream, Err(status));
                    }
                }
            }
            Phase::Body if end_stream => {
                let status = Status::from_trailers(fields.grpc_status, fields.grpc_message);
                let result = match call.failure.take() {
                    Some(failure) => Err(failure),
                    None if !status.is_ok() => Err(status),
                    None => call.decoder.finish().and_then(|()| {
                        call.message.take().ok_or_else(|| {
                            Status::new(Code::Internal, "no response message on a unary call")
                        })
                    }),
                };
                self.finish(stream, result);
            }
            Phase::Body => {
                // Trailers must end the stream (§8.1); the connection resets it as malformed.
                self.h2.reset_stream(now, stream, ErrorCode::PROTOCOL_ERROR);
                self.finish(
                    stream,
                    Err(Status::new(
                        Code::Internal,
                        "second HEADERS without END_STREAM",
                    )),
                );
            }
        }
    }

    fn on_data(&mut self, stream: u32, data: &[u8], end_stream: bool) {
        let Some(call) = self.calls.get_mut(&stream) else {
            return;
        };
        if call.phase == Phase::AwaitingHeaders {
            call.failure = Some(Status::new(Code::Internal, "DATA before response headers"));
        } else if call.failure.is_none() {
            if let Err(status) = call.decoder.push(data) {
                call.failure = Some(status);
            }
            while let Some(msg) = call.decoder.pop() {
                if call.message.is_some() {
                    call.failure = Some(Status::new(
                        Code::Internal,
                        "more than one response message on a unary call",
                    ));
                } else if msg.compressed {
                    call.failure = Some(Status::new(
                        Code::Internal,
                        "compressed response, but no compression was negotiated",
                    ));
                }
                call.message = Some(msg.payload);
            }
        }
        if end_stream {
            let failure = call
                .failure
                .take()
                .unwrap_or_else(|| Status::new(Code::Internal, "response ended without trailers"));
            self.finish(stream, Err(failure));
        }
    }

    /// Reports a call's outcome once and forgets it.
    fn finish(&mut self, stream: u32, result: Result<Vec<u8>, Status>) {
        if self.calls.remove(&stream).is_some() {
            self.events
                .push_back(ClientEvent::Response { stream, result });
        }
    }
}

/// The response headers a client looks at; later duplicates are ignored.
#[derive(Default)]
struct ResponseFields<'a> {
    status: Option<&'a [u8]>,
    content_type: Option<&'a [u8]>,
    grpc_status: Option<&'a [u8]>,
    grpc_message: Option<&'a [u8]>,
}

impl<'a> ResponseFields<'a> {
    fn collect(headers: &'a [Header]) -> Self {
        let mut f = ResponseFields::default();
        for h in headers {
            let slot = match &h.name[..] {
                b":status" => &mut f.status,
                b"content-type" => &mut f.content_type,
                b"grpc-status" => &mut f.grpc_status,
                b"grpc-message" => &mut f.grpc_message,
                _ => continue,
            };
            slot.get_or_insert(&h.value[..]);
        }
        f
    }
}

fn parse_http_status(value: &[u8]) -> Option<u16> {
    std::str::from_utf8(value).ok()?.parse().ok()
}

/// A one-HEADERS response: `grpc-status` wins when present (doc/http-grpc-status-mapping.md is
/// only for responses without it); otherwise the HTTP status decides.
fn trailers_only_status(http: Option<u16>, fields: &ResponseFields<'_>) -> Status {
    match (fields.grpc_status, http) {
        (Some(_), _) => {
            let status = Status::from_trailers(fields.grpc_status, fields.grpc_message);
            if status.is_ok() {
                // OK without a message is not a unary response.
                Status::new(Code::Internal, "no response message on a unary call")
            } else {
                status
            }
        }
        (None, Some(200)) => Status::new(Code::Unknown, "response ended without grpc-status"),
        (None, other) => http_status(other),
    }
}

/// doc/http-grpc-status-mapping.md: the code for a response whose `:status` is not 200.
fn http_status(status: Option<u16>) -> Status {
    match status {
        Some(s) => Status::new(Code::from_http_status(s), format!("HTTP status {s}")),
        None => Status::new(Code::Internal, "response without a valid :status"),
    }
}

/// doc/PROTOCOL-HTTP2.md, "Errors": RST_STREAM codes as the status a client reports.
fn reset_status(code: ErrorCode) -> Status {
    let grpc = match code {
        ErrorCode::REFUSED_STREAM => Code::Unavailable,
        ErrorCode::CANCEL => Code::Cancelled,
        ErrorCode::ENHANCE_YOUR_CALM => Code::ResourceExhausted,
        ErrorCode::INADEQUATE_SECURITY => Code::PermissionDenied,
        _ => Code::Internal,
    };
    Status::new(grpc, format!("stream reset: {code}"))
}

fn unavailable(e: SendError) -> Status {
    Status::new(Code::Unavailable, format!("cannot start the call: {e}"))
}

#[cfg(test)]
mod tests;
