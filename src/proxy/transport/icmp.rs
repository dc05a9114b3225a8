//! ICMP errors on an unconnected UDP socket (`ip(7)`, `ipv6(7)`): with `IP_RECVERR` set, the
//! kernel queues each with the destination of the datagram that caused it, read with
//! `recvmsg(MSG_ERRQUEUE)`.

// I/O module: socket options and the error queue of the proxy's client socket.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

use std::io;
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

/// Asks the kernel to queue ICMP errors for the unconnected client socket (`ip(7)`,
/// `ipv6(7)`: `IP_RECVERR`, `IPV6_RECVERR`). A dual-stack socket takes both: IPv4 clients'
/// errors come through the IPv4 option.
pub(super) fn enable_recverr(fd: RawFd, ipv6: bool) -> io::Result<()> {
    let on: libc::c_int = 1;
    let set = |level, name| {
        // SAFETY: `fd` is an open socket; the option value is a c_int that outlives the call.
        let r = unsafe {
            libc::setsockopt(
                fd,
                level,
                name,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        match r {
            0 => Ok(()),
            _ => Err(io::Error::last_os_error()),
        }
    };
    if ipv6 {
        set(libc::IPPROTO_IPV6, libc::IPV6_RECVERR)?;
        // An IPv6-only socket may refuse the IPv4 option; it has no IPv4 clients then.
        let _ = set(libc::IPPROTO_IP, libc::IP_RECVERR);
        Ok(())
    } else {
        set(libc::IPPROTO_IP, libc::IP_RECVERR)
    }
}

/// One entry of a socket's error queue.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum IcmpError {
    /// ICMP (or ICMPv6) port unreachable for a datagram sent to this address.
    PortUnreachable(SocketAddr),
    /// Anything else (host unreachable, fragmentation needed, ...): not a sign that the
    /// client has gone.
    Other,
}

/// Reads one entry of `fd`'s error queue without blocking; `None` when it is empty.
pub(super) fn read_icmp_error(fd: RawFd) -> io::Result<Option<IcmpError>> {
    // SAFETY: all-zero is a valid sockaddr_storage and msghdr.
    let mut name: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut data = [0u8; 64];
    let mut control = [0u64; 64];
    let mut iov = libc::iovec {
        iov_base: data.as_mut_ptr().cast(),
        iov_len: data.len(),
    };
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_name = (&mut name as *mut libc::sockaddr_storage).cast();
    msg.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    // SAFETY: every pointer in `msg` points at a live buffer of the length it states.
    let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
    if n < 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::WouldBlock => Ok(None),
            _ => Err(e),
        };
    }
    let mut refused = false;
    // SAFETY: `msg` was filled by recvmsg; the CMSG macros walk its control buffer.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            let c = &*cmsg;
            let ours = (c.cmsg_level == libc::IPPROTO_IP && c.cmsg_type == libc::IP_RECVERR)
                || (c.cmsg_level == libc::IPPROTO_IPV6 && c.cmsg_type == libc::IPV6_RECVERR);
            if ours {
                let ee = std::ptr::read_unaligned(
                    libc::CMSG_DATA(cmsg).cast::<libc::sock_extended_err>(),
                );
                let icmp = ee.ee_origin == libc::SO_EE_ORIGIN_ICMP
                    || ee.ee_origin == libc::SO_EE_ORIGIN_ICMP6;
                refused |= icmp && ee.ee_errno == libc::ECONNREFUSED as u32;
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok(Some(match (refused, sockaddr_to_std(&name)) {
        (true, Some(addr)) => IcmpError::PortUnreachable(addr),
        _ => IcmpError::Other,
    }))
}

/// The address in a `sockaddr_storage` filled by the kernel, as `recv_from` gives it.
fn sockaddr_to_std(s: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match libc::c_int::from(s.ss_family) {
        libc::AF_INET => {
            // SAFETY: the family says it holds a sockaddr_in, which fits in the storage.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = u32::from_be(a.sin_addr.s_addr);
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip.into(),
                u16::from_be(a.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, a sockaddr_in6.
            let a = unsafe { &*(s as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                a.sin6_addr.s6_addr.into(),
                u16::from_be(a.sin6_port),
                a.sin6_flowinfo,
                a.sin6_scope_id,
            )))
        }
        _ => None,
    }
}
