//! How the loop sleeps until the next deadline.
//!
//! mio's `Poll::poll` takes a `Duration` but hands `epoll_wait` whole milliseconds, rounded up, so
//! a loop that relies on it wakes up to 1 ms late. Two ways around that:
//!
//! - A `timerfd` armed with the absolute `CLOCK_MONOTONIC` deadline in nanoseconds and registered
//!   in the same `Poll` wakes it on time; the loop then blocks in `epoll_wait` with no timeout.
//!   The timerfd is re-armed only when the earliest deadline changes, so a busy loop pays no
//!   syscall per iteration for it, and its expiry count is read only before the next re-arm, so
//!   that read is not between the wake-up and the timers' dispatch.
//! - `epoll_pwait2` (Linux 5.11+) takes a nanosecond timeout. mio does not call it, so the loop
//!   sleeps in it on a second epoll instance that watches mio's (an epoll fd is itself
//!   pollable), and asks mio for events only when that one reports some. A pure timer wake-up
//!   is then one syscall: no timerfd to read or re-arm. Where the kernel lacks it (`ENOSYS`, or
//!   a seccomp filter's `EPERM`), [`Waker::new`] says so and the reactor falls back to timerfd.

use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::str::FromStr;
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token};

use crate::time::Timestamp;

/// Which mechanism wakes the loop for timers.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum WakeMode {
    /// A `timerfd` with an absolute nanosecond deadline (Linux; the default).
    Timerfd,
    /// The `epoll_wait` timeout alone: millisecond granularity, rounded up by mio.
    Epoll,
    /// `epoll_pwait2` with a nanosecond timeout (Linux 5.11+; otherwise the reactor uses timerfd).
    Pwait2,
}

impl fmt::Display for WakeMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WakeMode::Timerfd => "timerfd",
            WakeMode::Epoll => "epoll",
            WakeMode::Pwait2 => "pwait2",
        })
    }
}

impl FromStr for WakeMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "timerfd" => Ok(WakeMode::Timerfd),
            "epoll" => Ok(WakeMode::Epoll),
            "pwait2" => Ok(WakeMode::Pwait2),
            _ => Err(format!("expected timerfd, epoll or pwait2, got {s:?}")),
        }
    }
}

/// The wake-up source of one reactor.
pub(crate) enum Waker {
    Timerfd(TimerFd),
    Epoll,
    Pwait2(OuterEpoll),
}

impl Waker {
    /// The source for `mode`; `Err(Unsupported)` if this kernel lacks it (only `Pwait2` can be).
    pub(crate) fn new(mode: WakeMode, poll: &Poll, token: Token) -> io::Result<Self> {
        Ok(match mode {
            WakeMode::Timerfd => Waker::Timerfd(TimerFd::new(poll.registry(), token)?),
            WakeMode::Epoll => Waker::Epoll,
            WakeMode::Pwait2 => Waker::Pwait2(OuterEpoll::new(poll)?),
        })
    }

    /// Which mode this is.
    pub(crate) fn mode(&self) -> WakeMode {
        match self {
            Waker::Timerfd(_) => WakeMode::Timerfd,
            Waker::Epoll => WakeMode::Epoll,
            Waker::Pwait2(_) => WakeMode::Pwait2,
        }
    }

    /// Sleeps until an event or `deadline` (`None`: no timer), then leaves this turn's events in
    /// `events`. An interrupted wait returns with no events: the loop just goes round again.
    pub(crate) fn wait(
        &mut self,
        poll: &mut Poll,
        events: &mut Events,
        deadline: Option<Timestamp>,
        now: Timestamp,
    ) -> io::Result<()> {
        let due = deadline.is_some_and(|d| d <= now);
        let result = match self {
            _ if due => poll.poll(events, Some(Duration::ZERO)),
            Waker::Timerfd(fd) => fd.arm(deadline).and_then(|()| poll.poll(events, None)),
            Waker::Epoll => poll.poll(events, deadline.map(|d| d - now)),
            // The timeout is relative: taken from a fresh clock reading, it ends at the
            // deadline and not later by however long ago `now` was read.
            Waker::Pwait2(outer) => match outer.wait(deadline.map(|d| d - Timestamp::now())) {
                Ok(true) => poll.poll(events, Some(Duration::ZERO)),
                Ok(false) => {
                    events.clear();
                    Ok(())
                }
                Err(e) => Err(e),
            },
        };
        match result {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                events.clear();
                Ok(())
            }
            other => other,
        }
    }

    /// The timerfd expired. Its count is read before the next re-arm, not now: the timers it
    /// woke the loop for are dispatched first.
    pub(crate) fn on_ready(&mut self) {
        if let Waker::Timerfd(fd) = self {
            fd.expired = true;
        }
    }
}

/// An epoll instance that watches mio's, so the loop can sleep in `epoll_pwait2`.
pub(crate) struct OuterEpoll {
    fd: OwnedFd,
}

impl OuterEpoll {
    fn new(poll: &Poll) -> io::Result<Self> {
        // SAFETY: plain syscall; the result is checked before use.
        let raw = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // Level-triggered: it reports mio's epoll readable for as long as mio has events.
        let mut event = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: 0,
        };
        // SAFETY: both descriptors are valid; `event` outlives the call.
        let rc = unsafe { libc::epoll_ctl(raw, libc::EPOLL_CTL_ADD, poll.as_raw_fd(), &mut event) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        let outer = OuterEpoll { fd };
        match outer.wait(Some(Duration::ZERO)) {
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)) => Err(
                io::Error::new(io::ErrorKind::Unsupported, "epoll_pwait2 is not available"),
            ),
            Err(e) => Err(e),
            Ok(_) => Ok(outer),
        }
    }

    /// Sleeps at most `timeout` (`None`: until an event); whether mio's epoll has events.
    fn wait(&self, timeout: Option<Duration>) -> io::Result<bool> {
        let spec = timeout.map(|t| libc::timespec {
            tv_sec: t.as_secs() as libc::time_t,
            tv_nsec: t.subsec_nanos() as libc::c_long,
        });
        let spec_ptr = spec.as_ref().map_or(std::ptr::null(), |s| s as *const _);
        let mut event = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: a valid epoll fd, room for one event, a valid or null timespec, no sigmask.
        let n = unsafe {
            libc::syscall(
                libc::SYS_epoll_pwait2,
                self.fd.as_raw_fd(),
                &mut event as *mut libc::epoll_event,
                1,
                spec_ptr,
                std::ptr::null::<libc::sigset_t>(),
                0,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(n > 0)
    }
}

/// A non-blocking `CLOCK_MONOTONIC` timerfd that remembers what it is armed for.
pub(crate) struct TimerFd {
    fd: OwnedFd,
    armed: Option<Timestamp>,
    /// It fired since it was armed; its count is still to be read.
    expired: bool,
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
        Ok(TimerFd {
            fd,
            armed: None,
            expired: false,
        })
    }

    /// Arms for an absolute deadline (`None` disarms); a no-op if already armed for it.
    fn arm(&mut self, deadline: Option<Timestamp>) -> io::Result<()> {
        if self.expired {
            self.drain();
        }
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
        self.expired = false;
    }
}
