//! Unary gRPC over HTTP/2 (doc/PROTOCOL-HTTP2.md), sans-IO: status codes, message framing,
//! timeouts, call headers and the generated interop protobuf messages, which know nothing of
//! the connection, and the client and server call layers over [`crate::http2::Connection`].

pub mod call;
pub mod client;
pub mod message;
pub mod proto;
pub mod server;
pub mod status;
pub mod timeout;
