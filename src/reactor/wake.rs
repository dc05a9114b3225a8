//! How the loop sleeps until the next deadline.
//!
//! mio's `Poll::poll` takes a `Duration` but hands `epoll_wait` whole milliseconds, rounded up, so
//! a loop that relies on it wakes up to 1 ms late. A `timerfd` armed with the absolute
//! `CLOCK_MONOTONIC` deadline in nanoseconds and registered in the same `Poll` wakes it on time;
//! the loop then blocks in `epoll_wait` with no timeout. The timerfd is re-armed only when the
//! earliest deadline changes, so a busy loop pays no syscall per iteration for it.

use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::str::FromStr;
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};

use crate::time::Timestamp;

/// Which mechanism wakes the loop for timers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum WakeMode {
    /// A `timerfd` with an absolute nanosecond deadline (Linux; the default).
    Timerfd,
    /// The `epoll_wait` timeout alone: millisecond granularity, rounded up by mio.
    Epoll,
}

impl fmt::Display for WakeMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WakeMode::Timerfd => "timerfd",
            WakeMode::Epoll => "epoll",
        })
    }
}

impl FromStr for WakeMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "timerfd" => Ok(WakeMode::Timerfd),
            "epoll" => Ok(WakeMode::Epoll),
            _ => Err(format!("expected timerfd or epoll, got {s:?}")),
        }
    }
}

/// The wake-up source of one reactor.
pub(crate) enum Waker {
    Timerfd(TimerFd),
    Epoll,
}

impl Waker {
    pub(crate) fn new(mode: WakeMode, registry: &Registry, token: Token) -> io::Result<Self> {
        Ok(match mode {
            WakeMode::Timerfd => Waker::Timerfd(TimerFd::new(registry, token)?),
            WakeMode::Epoll => Waker::Epoll,
        })
    }

    /// Prepares to sleep until `deadline` and returns the timeout to give `Poll::poll`.
    pub(crate) fn prepare(
        &mut self,
        deadline: Option<Timestamp>,
        now: Timestamp,
    ) -> io::Result<Option<Duration>> {
        match (deadline, self) {
            (Some(d), _) if d <= now => Ok(Some(Duration::ZERO)),
            (d, Waker::Timerfd(fd)) => fd.arm(d).map(|()| None),
            (d, Waker::Epoll) => Ok(d.map(|d| d - now)),
        }
    }

    /// The timerfd expired: consume its count so the next expiry signals readiness again.
    pub(crate) fn on_ready(&mut self) {
        if let Waker::Timerfd(fd) = self {
            fd.drain();
        }
    }
}

/// A non-blocking `CLOCK_MONOTONIC` timerfd that remembers what it is armed for.
pub(crate) struct TimerFd {
    fd: OwnedFd,
    armed: Option<Timestamp>,
}

impl TimerFd {
    fn new(registry: &Registry, token: Token) -> io::Result<Self> {
        // SAFETY: plain syscall; the result is checked before use.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        registry.register(&mut SourceFd(&fd.as_raw_fd()), token, Interest::READABLE)?;
        Ok(TimerFd { fd, armed: None })
    }

    /// Arms for an absolute deadline (`None` disarms); a no-op if already armed for it.
    fn arm(&mut self, deadline: Option<Timestamp>) -> io::Result<()> {
        if self.armed == deadline {
            return Ok(());
        }
        let zero = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // An all-zero it_value disarms, so deadline 0 is nudged to 1 ns (already past anyway).
        let value = deadline.map_or(zero, |d| d.max(Timestamp::from_nanos(1)).to_timespec());
        let spec = libc::itimerspec {
            it_interval: zero,
            it_value: value,
        };
        // SAFETY: valid fd and itimerspec; the old value is not requested.
        let rc = unsafe {
            libc::timerfd_settime(
                self.fd.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        self.armed = deadline;
        Ok(())
    }

    fn drain(&mut self) {
        let mut expirations = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a buffer of 8; EAGAIN is fine (non-blocking).
        unsafe {
            libc::read(
                self.fd.as_raw_fd(),
                expirations.as_mut_ptr().cast(),
                expirations.len(),
            )
        };
        // A one-shot timerfd is disarmed once it fired.
        self.armed = None;
    }
}
