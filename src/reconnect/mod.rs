//! gRPC's connection-backoff interop test (doc/connection-backoff-interop-test-description.md)
//! as sans-IO cores: the server's Verify and ReconnectService sessions, and later the client's
//! backoff connector.

pub mod service;
pub mod verify;

pub use service::{CallId, ReconnectService, ServiceConfig, Session, StartOutcome, StopOutcome};
pub use verify::{verify, Verdict};
