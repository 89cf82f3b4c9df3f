//! A small seeded generator (SplitMix64): the same seed gives the same faults everywhere.

use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..bound` (`bound > 0`).
    pub fn below(&mut self, bound: u64) -> u64 {
        assert!(bound > 0, "an empty range has no values");
        ((u128::from(self.next_u64()) * u128::from(bound)) >> 64) as u64
    }

    /// True with probability `per_thousand / 1000`.
    pub fn chance(&mut self, per_thousand: u32) -> bool {
        self.below(1000) < u64::from(per_thousand)
    }

    /// Uniform in the open interval (0, 1), with 53 bits of precision.
    pub fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }

    /// A standard normal draw (Box-Muller), for log-normal latencies.
    pub fn normal(&mut self) -> f64 {
        let (first, second) = (self.unit(), self.unit());
        (-2.0 * first.ln()).sqrt() * (std::f64::consts::TAU * second).cos()
    }

    /// Uniform between two durations, at millisecond resolution.
    pub fn between(&mut self, low: Duration, high: Duration) -> Duration {
        let (low, high) = (low.as_millis() as u64, high.as_millis() as u64);
        if high <= low {
            return Duration::from_millis(low);
        }
        Duration::from_millis(low + self.below(high - low + 1))
    }
}
