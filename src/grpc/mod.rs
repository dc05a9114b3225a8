//! The protocol-independent parts of gRPC over HTTP/2 (doc/PROTOCOL-HTTP2.md): status codes,
//! message framing, timeouts, call headers, and the generated interop protobuf messages.
//! Nothing here depends on the HTTP/2 connection: headers are plain byte pairs.

pub mod call;
pub mod client;
pub mod message;
pub mod proto;
pub mod server;
pub mod status;
pub mod timeout;

pub use status::{Code, Status};
