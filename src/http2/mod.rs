//! HTTP/2 (RFC 9113) as sans-IO pieces: frame codec, HPACK, and the connection state machine.

pub mod error;
pub mod frame;
pub mod hpack;
