//! Generates the `grpc.testing` message types from `proto/` with a pure-Rust protobuf compiler
//! (protox), so building needs no system `protoc`. Service stubs are not generated: the
//! ReconnectService is a hand-written sans-IO state machine (`src/reconnect/service.rs`).

use std::io;

const PROTOS: &[&str] = &["grpc/testing/test.proto"];
const INCLUDES: &[&str] = &["proto"];

fn main() -> io::Result<()> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(PROTOS, INCLUDES).map_err(io::Error::other)?;
    prost_build::Config::new().compile_fds(fds)
}
