//! Socket helpers: dual-stack TCP listeners (set-up the standard library cannot express),
//! connected UDP sockets, and flushing a sans-IO core's output into a non-blocking socket.

// I/O module: Socket helpers: the one place sockets are made.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::io::{self, Write};
use std::mem;
use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::time::Timestamp;

/// Receive buffer size for UDP: one byte more than the largest UDP payload, so no datagram is
/// ever truncated.
pub const MAX_UDP_DATAGRAM: usize = 65_536;

/// A non-blocking UDP socket on an ephemeral port, *connected* to `peer`: it receives only
/// from `peer`, and the kernel reports an ICMP port unreachable from it as `ECONNREFUSED`.
pub fn connected_udp(peer: SocketAddr) -> io::Result<mio::net::UdpSocket> {
    let local: SocketAddr = if peer.is_ipv4() {
        (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = std::net::UdpSocket::bind(local)?;
    socket.connect(peer)?;
    socket.set_nonblocking(true)?;
    Ok(mio::net::UdpSocket::from_std(socket))
}

/// Asks for a receive buffer of `bytes` (`SO_RCVBUF`; the kernel doubles it and caps it at
/// `net.core.rmem_max`).
pub fn set_receive_buffer(socket: &impl AsRawFd, bytes: usize) -> io::Result<()> {
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    set_int_option(socket, libc::SOL_SOCKET, libc::SO_RCVBUF, value)
}

/// Listens on `[::]:port` with `IPV6_V6ONLY` off, so IPv4 clients arrive as v4-mapped
/// addresses on the same socket (clients dialing `localhost` may try `::1` or `127.0.0.1`).
/// Falls back to `0.0.0.0:port` where IPv6 is unavailable. Non-blocking, `SO_REUSEADDR`.
pub fn listen_dual_stack(port: u16) -> io::Result<TcpListener> {
    match listen_v6_any(port) {
        Ok(l) => Ok(l),
        Err(e) if e.raw_os_error() == Some(libc::EAFNOSUPPORT) => listen_v4_any(port),
        Err(e) => Err(e),
    }
}

fn listen_v6_any(port: u16) -> io::Result<TcpListener> {
    let fd = socket(libc::AF_INET6)?;
    set_int_option(&fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    set_int_option(&fd, libc::IPPROTO_IPV6, libc::IPV6_V6ONLY, 0)?;
    // SAFETY: sockaddr_in6 is plain data; all-zero is the unspecified address `::`.
    let mut addr: libc::sockaddr_in6 = unsafe { mem::zeroed() };
    addr.sin6_family = libc::AF_INET6 as libc::sa_family_t;
    addr.sin6_port = port.to_be();
    bind_and_listen(fd, &addr)
}

fn listen_v4_any(port: u16) -> io::Result<TcpListener> {
    let fd = socket(libc::AF_INET)?;
    set_int_option(&fd, libc::SOL_SOCKET, libc::SO_REUSEADDR, 1)?;
    // SAFETY: sockaddr_in is plain data; all-zero is 0.0.0.0.
    let mut addr: libc::sockaddr_in = unsafe { mem::zeroed() };
    addr.sin_family = libc::AF_INET as libc::sa_family_t;
    addr.sin_port = port.to_be();
    bind_and_listen(fd, &addr)
}

fn socket(family: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall; the result is checked.
    let raw = unsafe {
        libc::socket(
            family,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

fn set_int_option(
    fd: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: passes a pointer to a live c_int and its size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const libc::c_int).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn bind_and_listen<A>(fd: OwnedFd, addr: &A) -> io::Result<TcpListener> {
    // SAFETY: `addr` is a sockaddr_in or sockaddr_in6 matching the socket's family.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (addr as *const A).cast(),
            mem::size_of::<A>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: plain syscall on our socket.
    if unsafe { libc::listen(fd.as_raw_fd(), 1024) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(TcpListener::from(fd))
}

/// What [`raise_fd_limit`] found and did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FdLimit {
    /// The soft limit already allows the descriptors wanted.
    Enough,
    /// The soft limit was raised from `from` to `to` (at least what was wanted).
    Raised {
        /// The soft limit before.
        from: u64,
        /// The soft limit now.
        to: u64,
    },
    /// The hard limit is below what was wanted; the soft limit was raised to it.
    Short {
        /// The hard limit, now also the soft one.
        hard: u64,
    },
}

/// Makes sure this process may hold `wanted` open files (`RLIMIT_NOFILE`), raising the soft
/// limit towards the hard one if needed; an unprivileged process cannot go past the hard one.
pub fn raise_fd_limit(wanted: u64) -> io::Result<FdLimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let (soft, hard): (u64, u64) = (limit.rlim_cur, limit.rlim_max);
    if soft >= wanted {
        return Ok(FdLimit::Enough);
    }
    let to = wanted.min(hard);
    limit.rlim_cur = to;
    // SAFETY: setrlimit reads the struct we pass.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(match to < wanted {
        true => FdLimit::Short { hard },
        false => FdLimit::Raised { from: soft, to },
    })
}

/// A sans-IO core that queues bytes for its socket (an HTTP/2 connection, a TLS session).
pub trait Outbox {
    /// Bytes waiting to be written to the socket, oldest first.
    fn pending_output(&self) -> &[u8];
    /// The caller wrote the first `n` octets of `pending_output` at `now`; more may move in
    /// behind them (and a stream whose last octets went out may end, which starts idle clocks).
    fn consume_output(&mut self, now: Timestamp, n: usize);
}

/// Writes as much of `outbox`'s pending output as the non-blocking `stream` takes.
///
/// A write that takes nothing of a non-empty buffer (`Ok(0)`) is [`io::ErrorKind::WriteZero`]:
/// the socket will never take more, and retrying would spin the loop.
pub fn flush(now: Timestamp, stream: &mut impl Write, outbox: &mut impl Outbox) -> io::Result<()> {
    loop {
        let out = outbox.pending_output();
        if out.is_empty() {
            return Ok(());
        }
        match stream.write(out) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => outbox.consume_output(now, n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// The address without the v4-mapped IPv6 disguise, for logs and host comparisons.
pub fn unmap(addr: SocketAddr) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::new(v4.into(), v6.port()),
            None => addr,
        },
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;

    fn receive_buffer(socket: &impl AsRawFd) -> usize {
        let mut value: libc::c_int = 0;
        let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: a live c_int and its size, on a socket the test owns.
        let rc = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&mut value as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0);
        value as usize
    }

    /// The kernel takes the request, doubled, up to `net.core.rmem_max` (at least the
    /// default's 208 KiB, which every Linux allows): more than a socket gets by default.
    #[test]
    fn a_receive_buffer_is_enlarged_as_asked() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let before = receive_buffer(&socket);
        set_receive_buffer(&socket, 2 << 20).unwrap();
        let after = receive_buffer(&socket);
        let max = std::fs::read_to_string("/proc/sys/net/core/rmem_max")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok());
        match max {
            Some(max) if max > before => assert_eq!(after, 2 * max.min(2 << 20), "{before}"),
            _ => assert!(after >= before),
        }
    }

    /// A sink that takes nothing, as a closed pipe might report.
    struct TakesNothing;

    impl Write for TakesNothing {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Ok(0)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    struct Bytes(Vec<u8>);

    impl Outbox for Bytes {
        fn pending_output(&self) -> &[u8] {
            &self.0
        }
        fn consume_output(&mut self, _: Timestamp, n: usize) {
            self.0.drain(..n);
        }
    }

    #[test]
    fn flush_reports_a_write_of_zero_instead_of_spinning() {
        let err = flush(
            Timestamp::ZERO,
            &mut TakesNothing,
            &mut Bytes(b"hello".to_vec()),
        )
        .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WriteZero);
        assert!(flush(Timestamp::ZERO, &mut TakesNothing, &mut Bytes(Vec::new())).is_ok());
    }

    #[test]
    fn dual_stack_listener_accepts_ipv4_and_ipv6() {
        let l = listen_dual_stack(0).unwrap();
        let port = l.local_addr().unwrap().port();
        TcpStream::connect(("127.0.0.1", port)).unwrap();
        if TcpStream::connect(("::1", port)).is_ok() {
            // IPv6 loopback exists here: both families reached one socket.
        }
        l.set_nonblocking(false).unwrap();
        let (_, peer) = l.accept().unwrap();
        assert_eq!(
            unmap(peer).ip(),
            "127.0.0.1".parse::<std::net::IpAddr>().unwrap()
        );
    }
}
