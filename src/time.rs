//! Monotonic timestamps in nanoseconds.
//!
//! Every protocol core takes `now: Timestamp` as an argument instead of reading a clock, so tests
//! can drive it in virtual time. The reactor produces real values from `CLOCK_MONOTONIC`, which is
//! also the clock `timerfd` arms against, so a deadline needs no conversion on its way to the kernel.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};
use std::time::Duration;

/// A point on a monotonic clock, in nanoseconds since that clock's (arbitrary) origin.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The clock's origin; virtual-time tests usually start here.
    pub const ZERO: Timestamp = Timestamp(0);
    /// Later than any reachable instant (584 years of nanoseconds).
    pub const MAX: Timestamp = Timestamp(u64::MAX);

    /// The instant `ns` nanoseconds after the clock's origin.
    pub const fn from_nanos(ns: u64) -> Self {
        Timestamp(ns)
    }

    /// Nanoseconds since the clock's origin.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Reads `CLOCK_MONOTONIC`. Only the reactor (and benchmarks) should call this.
    pub fn now() -> Self {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        Timestamp(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64)
    }

    /// Time elapsed from `earlier` to `self`, or zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Timestamp) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// Signed difference `self - other` in nanoseconds (for lateness statistics).
    pub fn signed_nanos_since(self, other: Timestamp) -> i64 {
        (self.0 as i128 - other.0 as i128).clamp(i64::MIN as i128, i64::MAX as i128) as i64
    }

    /// This instant as the absolute `CLOCK_MONOTONIC` timespec that `timerfd_settime` and
    /// `clock_nanosleep(TIMER_ABSTIME)` take.
    pub fn to_timespec(self) -> libc::timespec {
        libc::timespec {
            tv_sec: (self.0 / 1_000_000_000) as libc::time_t,
            tv_nsec: (self.0 % 1_000_000_000) as libc::c_long,
        }
    }
}

impl Add<Duration> for Timestamp {
    type Output = Timestamp;
    /// Saturates instead of overflowing: a deadline too far away is simply "never".
    fn add(self, d: Duration) -> Timestamp {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_add(ns))
    }
}

impl AddAssign<Duration> for Timestamp {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Timestamp> for Timestamp {
    type Output = Duration;
    fn sub(self, earlier: Timestamp) -> Duration {
        self.saturating_since(earlier)
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:09}s",
            self.0 / 1_000_000_000,
            self.0 % 1_000_000_000
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adding_a_huge_duration_saturates() {
        assert_eq!(Timestamp::from_nanos(5) + Duration::MAX, Timestamp::MAX);
    }

    #[test]
    fn subtraction_never_goes_negative() {
        let a = Timestamp::from_nanos(10);
        let b = Timestamp::from_nanos(20);
        assert_eq!(a - b, Duration::ZERO);
        assert_eq!(b - a, Duration::from_nanos(10));
        assert_eq!(a.signed_nanos_since(b), -10);
    }

    #[test]
    fn clock_is_monotonic() {
        let a = Timestamp::now();
        let b = Timestamp::now();
        assert!(b >= a);
    }
}

/// Parses a human duration: `500ms`, `2s`, `1.5s`, `250us`, `100ns`, `2m`, `1h`.
///
/// A unit is required (a bare `2` is ambiguous between seconds and milliseconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(|| format!("{s:?} has no unit (use ns, us, ms, s, m or h)"))?;
    let (number, unit) = s.split_at(split);
    let scale = match unit {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        _ => {
            return Err(format!(
                "{s:?} has an unknown unit {unit:?} (use ns, us, ms, s, m or h)"
            ))
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a number followed by a unit"))?;
    Duration::try_from_secs_f64(value * scale).map_err(|_| format!("{s:?} is out of range"))
}

#[cfg(test)]
mod parse_tests {
    use super::*;

    #[test]
    fn parses_the_documented_forms() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
    }

    #[test]
    fn rejects_missing_or_unknown_units_and_garbage() {
        for bad in ["2", "", "s", "1.2.3s", "5 parsecs", "-1s", "1e400s"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
