//! HTTP/2 (RFC 9113) as sans-IO pieces: frame codec, HPACK, and the connection state machine.

mod conn;
pub mod error;
mod flow;
pub mod frame;
mod headers;
pub mod hpack;
mod stream;

pub use conn::{
    AbuseBudgets, AbuseStats, Config, Connection, Cutoff, Event, Rate, Role, SendError,
};
