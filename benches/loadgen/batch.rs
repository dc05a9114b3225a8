//! Batched UDP I/O (`recvmmsg` / `sendmmsg`): up to [`BATCH`] datagrams per system call.
//!
//! The load generator and the benchmark upstream share one core, and the system under test
//! gets the other. Batching makes their side several times cheaper per datagram than the
//! one-call-per-datagram path of the proxy, so the system under test, not the harness, is the
//! bottleneck being measured.

use std::io;
use std::mem;
use std::os::fd::RawFd;
use std::ptr;

/// Datagrams per system call.
pub const BATCH: usize = 64;
/// Room per datagram: more than any benchmark message (they are tens of bytes).
pub const SLOT: usize = 1536;

/// A raw socket address as the kernel wrote it: copied back unchanged to answer a datagram.
#[derive(Clone, Copy)]
pub struct RawAddr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

impl RawAddr {
    /// The address as the standard library writes it (`None` if not IPv4 or IPv6).
    pub fn socket_addr(&self) -> Option<std::net::SocketAddr> {
        match i32::from(self.storage.ss_family) {
            libc::AF_INET => {
                // SAFETY: the family says the storage holds a sockaddr_in.
                let a = unsafe { &*(&self.storage as *const _ as *const libc::sockaddr_in) };
                let ip = std::net::Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
                Some((ip, u16::from_be(a.sin_port)).into())
            }
            libc::AF_INET6 => {
                // SAFETY: the family says the storage holds a sockaddr_in6.
                let a = unsafe { &*(&self.storage as *const _ as *const libc::sockaddr_in6) };
                let ip = std::net::Ipv6Addr::from(a.sin6_addr.s6_addr);
                Some((ip, u16::from_be(a.sin6_port)).into())
            }
            _ => None,
        }
    }

    fn empty() -> RawAddr {
        RawAddr {
            // SAFETY: sockaddr_storage is plain old data; all-zero is a valid (unspecified) value.
            storage: unsafe { mem::zeroed() },
            len: 0,
        }
    }
}

/// [`BATCH`] datagram buffers with their lengths and peer addresses.
pub struct Batch {
    data: Vec<u8>,
    lens: [usize; BATCH],
    addrs: [RawAddr; BATCH],
    count: usize,
}

impl Default for Batch {
    fn default() -> Self {
        Batch {
            data: vec![0; BATCH * SLOT],
            lens: [0; BATCH],
            addrs: [RawAddr::empty(); BATCH],
            count: 0,
        }
    }
}

impl Batch {
    /// Datagrams held.
    pub fn len(&self) -> usize {
        self.count
    }

    /// True if no datagram is held.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// True if no further datagram fits.
    pub fn is_full(&self) -> bool {
        self.count == BATCH
    }

    /// Datagram `i` and the address it came from.
    pub fn get(&self, i: usize) -> (&[u8], RawAddr) {
        (&self.data[i * SLOT..][..self.lens[i]], self.addrs[i])
    }

    /// Appends a datagram to `to` (`None` on a connected socket) written by `fill` into a
    /// [`SLOT`]-byte buffer, which returns its length. Panics if the batch is full.
    pub fn push(&mut self, to: Option<RawAddr>, fill: impl FnOnce(&mut [u8]) -> usize) {
        assert!(!self.is_full(), "batch full");
        let i = self.count;
        self.lens[i] = fill(&mut self.data[i * SLOT..][..SLOT]).min(SLOT);
        self.addrs[i] = to.unwrap_or_else(RawAddr::empty);
        self.count += 1;
    }

    /// Replaces the contents with up to `limit` (at most [`BATCH`]) datagrams `fd` has queued,
    /// without blocking: the count read.
    pub fn recv(&mut self, fd: RawFd, limit: usize) -> io::Result<usize> {
        self.count = 0;
        let limit = limit.clamp(1, BATCH);
        // SAFETY: iovec is plain old data.
        let mut iov: [libc::iovec; BATCH] = unsafe { mem::zeroed() };
        let mut msgs = self.headers(&mut iov, limit, true);
        // SAFETY: every header points at a live iovec, buffer and address of `self`, sized as
        // declared, for the duration of the call; the kernel writes at most those sizes.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                msgs.as_mut_ptr(),
                limit as libc::c_uint,
                libc::MSG_DONTWAIT,
                ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock {
                Ok(0)
            } else {
                Err(e)
            };
        }
        let n = n as usize;
        for (i, m) in msgs.iter().take(n).enumerate() {
            self.lens[i] = m.msg_len as usize;
            self.addrs[i].len = m.msg_hdr.msg_namelen;
        }
        self.count = n;
        Ok(n)
    }

    /// Sends everything held on `fd` and empties the batch. Returns the number the kernel
    /// took; the rest (a full send buffer) is dropped, as a UDP sender's would be.
    pub fn send(&mut self, fd: RawFd) -> io::Result<usize> {
        let count = mem::take(&mut self.count);
        // SAFETY: iovec is plain old data.
        let mut iov: [libc::iovec; BATCH] = unsafe { mem::zeroed() };
        let mut msgs = self.headers(&mut iov, count, false);
        let mut sent = 0;
        while sent < count {
            // SAFETY: as in `recv`; the kernel only reads the buffers and addresses.
            let n = unsafe {
                libc::sendmmsg(
                    fd,
                    msgs[sent..].as_mut_ptr(),
                    (count - sent) as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                return match e.kind() {
                    io::ErrorKind::WouldBlock => Ok(sent),
                    io::ErrorKind::Interrupted => continue,
                    _ => Err(e),
                };
            }
            sent += n as usize;
        }
        Ok(sent)
    }

    /// One header per datagram, each pointing at its slot, its length and (if any) its
    /// address; `iov` is filled alongside and must outlive the call that uses the headers.
    /// Built on the stack per call: the headers hold pointers into `self`, which may move.
    fn headers(
        &mut self,
        iov: &mut [libc::iovec; BATCH],
        count: usize,
        receiving: bool,
    ) -> [libc::mmsghdr; BATCH] {
        // SAFETY: mmsghdr is plain old data; zero is "no name, no control data, no flags".
        let mut headers: [libc::mmsghdr; BATCH] = unsafe { mem::zeroed() };
        let base = self.data.as_mut_ptr();
        for (i, (h, v)) in headers
            .iter_mut()
            .zip(iov.iter_mut())
            .take(count)
            .enumerate()
        {
            // SAFETY: i < BATCH, so the slot lies inside `data`.
            v.iov_base = unsafe { base.add(i * SLOT) }.cast();
            v.iov_len = if receiving { SLOT } else { self.lens[i] };
            let addr = &mut self.addrs[i];
            if receiving {
                addr.len = mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            }
            if addr.len > 0 {
                h.msg_hdr.msg_name = (&mut addr.storage as *mut libc::sockaddr_storage).cast();
                h.msg_hdr.msg_namelen = addr.len;
            }
            h.msg_hdr.msg_iov = v;
            h.msg_hdr.msg_iovlen = 1;
        }
        headers
    }
}
