//! gRPC's connection-backoff interop test (doc/connection-backoff-interop-test-description.md)
//! as sans-IO cores: the server's Verify and ReconnectService sessions, and the client's
//! backoff connector.

mod attempt;
pub mod backoff;
pub mod client;
pub mod retry;
pub mod server;
pub mod service;
pub mod tls;
pub mod verify;

pub use backoff::{AttemptRecord, Backoff, BackoffConfig, Step};
pub use service::{CallId, ReconnectService, ServiceConfig, Session, StartOutcome, StopOutcome};
pub use verify::{verify, verify_intervals, Verdict};
