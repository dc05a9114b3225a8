//! The integration tests' harness, shared by every test binary (and the benches, which include
//! it by path): one free-port finder, one process guard ([`Proc`]), one launcher of the real
//! binary ([`daemon`], with the proxy's), one scriptable fake CoAP upstream ([`upstream`]).

#![allow(dead_code)]

pub mod daemon;
pub mod exposition;
pub mod http;
pub mod proc;
pub mod upstream;

use std::net::{TcpListener, UdpSocket};

pub use proc::Proc;

/// `N` distinct ports on `host` that were free a moment ago for both UDP and TCP (bound and
/// released): some servers, libcoap's among them, bind both.
pub fn free_ports_on<const N: usize>(host: &str) -> [u16; N] {
    let mut held: Vec<UdpSocket> = Vec::new();
    while held.len() < N {
        let udp = UdpSocket::bind((host, 0)).expect("a free port");
        let port = udp.local_addr().expect("bound").port();
        if TcpListener::bind((host, port)).is_ok() {
            held.push(udp);
        }
    }
    std::array::from_fn(|i| held[i].local_addr().expect("bound").port())
}

/// A loopback port free a moment ago (see [`free_ports_on`]).
pub fn free_port() -> u16 {
    free_port_on("127.0.0.1")
}

/// A port free a moment ago on `host`, such as `::1` (see [`free_ports_on`]).
pub fn free_port_on(host: &str) -> u16 {
    let [port] = free_ports_on(host);
    port
}

/// `N` distinct ports free a moment ago on the wildcard address, both families where the
/// host has IPv6 (the reconnect server listens dual-stack).
pub fn free_wildcard_ports<const N: usize>() -> [u16; N] {
    match UdpSocket::bind("[::]:0") {
        Ok(_) => free_ports_on("::"),
        Err(_) => free_ports_on("0.0.0.0"),
    }
}
