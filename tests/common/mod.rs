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
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

pub use proc::Proc;

/// `N` distinct ports on `host` that were free a moment ago for both UDP and TCP (bound and
/// released): some servers, libcoap's among them, bind both.
///
/// They are taken from below the kernel's ephemeral range (`ip_local_port_range`), so that no
/// socket bound to port 0 meanwhile (another test's client, say) can take one between this
/// pick and the server's bind: picked inside that range, a control port once was. Each
/// process walks the range from its own start, so that concurrent test binaries rarely try
/// the same ports.
pub fn free_ports_on<const N: usize>(host: &str) -> [u16; N] {
    let mut held: Vec<UdpSocket> = Vec::new();
    while held.len() < N {
        if let Some(udp) = hold(host, next_candidates(1)) {
            held.push(udp);
        }
    }
    std::array::from_fn(|i| held[i].local_addr().expect("bound").port())
}

/// The first of two consecutive ports, `P` and `P + 1`, free a moment ago on `host` for UDP
/// and TCP: libcoap's servers take coaps on the port after their plain one. Both are taken
/// from this process's walk at once, so a concurrent pick in this process gets neither.
pub fn free_port_pair_on(host: &str) -> u16 {
    loop {
        let Some(udp) = hold(host, next_candidates(2)) else {
            continue;
        };
        let port = udp.local_addr().expect("bound").port();
        if port < u16::MAX && hold(host, port + 1).is_some() {
            return port;
        }
    }
}

/// A UDP socket on `host:port` if both UDP and TCP could bind that port.
fn hold(host: &str, port: u16) -> Option<UdpSocket> {
    let udp = UdpSocket::bind((host, port)).ok()?;
    let port = udp.local_addr().expect("bound").port();
    TcpListener::bind((host, port)).ok().map(|_| udp)
}

/// The lowest port tried, and the ports tried per process before starting over.
const FIRST_CANDIDATE: u32 = 10_000;

/// The first of the next `count` ports to try: from a start drawn from the process id, in
/// turn, below the ephemeral range (or 0, the kernel's choice, where that range leaves no
/// room below it).
fn next_candidates(count: u32) -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    static EPHEMERAL: OnceLock<u32> = OnceLock::new();
    let ephemeral = *EPHEMERAL.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
            .unwrap_or(32_768)
    });
    let Some(span) = ephemeral
        .checked_sub(FIRST_CANDIDATE)
        .filter(|&s| s >= 1_000)
    else {
        return 0;
    };
    let start = std::process::id().wrapping_mul(2_654_435_761) % span;
    let n = NEXT.fetch_add(count, Ordering::Relaxed);
    let offset = (start + n) % span;
    // A run that would wrap past the range's end is skipped: its ports are not consecutive.
    if offset + count > span {
        return next_candidates(count);
    }
    (FIRST_CANDIDATE + offset) as u16
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

/// A TCP connection to `to` from `from` (a loopback address other than 127.0.0.1 stands for
/// another host: the per-source caps count addresses).
pub fn tcp_connect_from(from: std::net::Ipv4Addr, to: std::net::SocketAddr) -> std::net::TcpStream {
    let std::net::SocketAddr::V4(to) = to else {
        panic!("IPv4 only")
    };
    let sockaddr = |ip: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: a fresh socket; each sockaddr lives across the call that reads it, and the
    // descriptor is handed to the TcpStream that owns it from then on.
    unsafe {
        use std::os::fd::FromRawFd;
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0, "socket: {}", std::io::Error::last_os_error());
        let stream = std::net::TcpStream::from_raw_fd(fd);
        let local = sockaddr(from, 0);
        let r = libc::bind(fd, (&local as *const libc::sockaddr_in).cast(), len);
        assert_eq!(r, 0, "bind {from}: {}", std::io::Error::last_os_error());
        let remote = sockaddr(*to.ip(), to.port());
        let r = libc::connect(fd, (&remote as *const libc::sockaddr_in).cast(), len);
        assert_eq!(r, 0, "connect: {}", std::io::Error::last_os_error());
        stream
    }
}
