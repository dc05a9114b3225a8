//! The loop's clock against the DTLS library's: rtc-dtls counts in `Instant`s, the cores in
//! [`Timestamp`]s. One pair, read together by the driver, converts between the two, so that
//! the cores never read a clock themselves.

use std::time::Instant;

use crate::time::Timestamp;

/// `Timestamp` (the loop's clock) to `Instant` (the library's), from one pair read together.
#[derive(Clone, Copy)]
pub struct Clock {
    instant: Instant,
    at: Timestamp,
}

impl Clock {
    /// The pair: an `Instant` and the `Timestamp` read with it.
    pub fn new((instant, at): (Instant, Timestamp)) -> Self {
        Clock { instant, at }
    }

    /// `now` as the library's instant.
    pub fn instant(self, now: Timestamp) -> Instant {
        self.instant + now.saturating_since(self.at)
    }

    /// The library's `instant` on the loop's clock.
    pub fn timestamp(self, instant: Instant) -> Timestamp {
        self.at + instant.saturating_duration_since(self.instant)
    }
}
