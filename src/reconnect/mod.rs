//! gRPC's connection-backoff interop test (doc/connection-backoff-interop-test-description.md)
//! as sans-IO cores: the server's Verify, and later the ReconnectService sessions and the
//! client's backoff connector.

pub mod verify;
