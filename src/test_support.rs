//! Test-only helpers shared by the unit tests of several modules.

use rand::rngs::SmallRng;
use rand::{Rng as _, SeedableRng};

/// Seeded randomness for robustness tests, with the two draws they all need.
pub struct Rng(SmallRng);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(SmallRng::seed_from_u64(seed))
    }

    pub fn next(&mut self) -> u64 {
        self.0.random()
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        self.0.random_range(0..n.max(1))
    }
}
