//! The simulated network: per-datagram loss, duplication and delay. Delays are drawn
//! independently per copy, so datagrams overtake each other (reordering) whenever the spread
//! exceeds the gap between sends.

use std::fmt;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::Rng;

/// One direction-agnostic leg (client <-> proxy, or proxy <-> upstream).
#[derive(Clone, Copy, Debug)]
pub struct Leg {
    pub loss: f64,
    pub duplicate: f64,
    pub min_delay: Duration,
    pub max_delay: Duration,
}

impl Leg {
    /// Loss 0..20 %, duplication 0..5 %, delay 0.1 ms up to 1..50 ms.
    pub fn random(rng: &mut SmallRng) -> Leg {
        Leg {
            loss: rng.random_range(0.0..0.2),
            duplicate: rng.random_range(0.0..0.05),
            min_delay: Duration::from_micros(100),
            max_delay: Duration::from_micros(rng.random_range(1_000..=50_000)),
        }
    }

    /// No loss, no duplication, still reordering delays.
    pub fn clean() -> Leg {
        Leg {
            loss: 0.0,
            duplicate: 0.0,
            min_delay: Duration::from_micros(100),
            max_delay: Duration::from_millis(20),
        }
    }
}

impl fmt::Display for Leg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "loss {:.1} %, dup {:.1} %, delay {:?}..{:?}",
            self.loss * 100.0,
            self.duplicate * 100.0,
            self.min_delay,
            self.max_delay
        )
    }
}

/// Counts what the network did.
#[derive(Default, Debug)]
pub struct Network {
    pub sent: u64,
    pub lost: u64,
    pub duplicated: u64,
}

impl Network {
    /// The delays of the copies that arrive: none (lost), one, or two (duplicated).
    pub fn fate(&mut self, rng: &mut SmallRng, leg: &Leg) -> impl Iterator<Item = Duration> {
        self.sent += 1;
        let copies = if rng.random_bool(leg.loss) {
            self.lost += 1;
            0
        } else if rng.random_bool(leg.duplicate) {
            self.duplicated += 1;
            2
        } else {
            1
        };
        let (lo, hi) = (
            leg.min_delay.as_nanos() as u64,
            leg.max_delay.as_nanos() as u64,
        );
        let delays = [0; 2].map(|_| Duration::from_nanos(rng.random_range(lo..=hi)));
        delays.into_iter().take(copies)
    }
}
