//! SIGINT and SIGTERM as an ordinary readable source in the loop's `Poll`.
//!
//! The signals are blocked for the calling thread and read from a `signalfd`, so no handler runs
//! asynchronously and no global state is needed: the loop learns of a signal exactly like it
//! learns of a datagram, and can let every component say goodbye before exiting.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};

/// A non-blocking signalfd for SIGINT and SIGTERM.
pub(crate) struct Signals {
    fd: OwnedFd,
}

impl Signals {
    /// Blocks SIGINT/SIGTERM for this thread and registers a signalfd for them.
    pub(crate) fn new(registry: &Registry, token: Token) -> io::Result<Self> {
        // SAFETY: the sigset is initialised by sigemptyset before use; all calls are checked.
        unsafe {
            let mut set = MaybeUninit::<libc::sigset_t>::uninit();
            libc::sigemptyset(set.as_mut_ptr());
            let mut set = set.assume_init();
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::sigaddset(&mut set, libc::SIGTERM);
            if libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
            let raw = libc::signalfd(-1, &set, libc::SFD_NONBLOCK | libc::SFD_CLOEXEC);
            if raw < 0 {
                return Err(io::Error::last_os_error());
            }
            let fd = OwnedFd::from_raw_fd(raw);
            registry.register(&mut SourceFd(&fd.as_raw_fd()), token, Interest::READABLE)?;
            Ok(Signals { fd })
        }
    }

    /// Reads every pending signal; returns how many arrived.
    pub(crate) fn drain(&mut self) -> usize {
        let mut count = 0;
        loop {
            let mut info = MaybeUninit::<libc::signalfd_siginfo>::uninit();
            let size = std::mem::size_of::<libc::signalfd_siginfo>();
            // SAFETY: reads at most `size` bytes into a buffer of that size.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), info.as_mut_ptr().cast(), size) };
            if n != size as isize {
                return count;
            }
            count += 1;
        }
    }
}
