//! The crate's one seeded random stream: `rand_xoshiro`'s SplitMix64 behind the draws the
//! path searches and the instances' operands need (the same stream as the workspace's
//! `tidu::testing::CheckRng`, seeded the same way). The einsum crate keeps its own so that
//! production code takes nothing from a testing module; every hyper-optimizer trial
//! derives its stream from the search's seed and its index, so a seeded search is
//! reproducible whatever the number of threads.

use rand_core::{Rng as _, SeedableRng};
use rand_xoshiro::SplitMix64;

/// A seeded generator.
#[derive(Clone, Debug)]
pub(crate) struct Rng(SplitMix64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(SplitMix64::seed_from_u64(seed))
    }

    /// The stream of trial `index` of a search seeded with `seed`.
    pub(crate) fn for_trial(seed: u64, index: u64) -> Self {
        let mut mix = Rng::new(seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        Rng::new(mix.next_u64())
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A uniform float in `[0, 1)`.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A uniform integer in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }

    /// A standard Gumbel draw: `-ln(-ln u)`, `u` in `(0, 1)`.
    pub(crate) fn gumbel(&mut self) -> f64 {
        let u = self.unit().max(f64::MIN_POSITIVE);
        -(-u.ln()).max(f64::MIN_POSITIVE).ln()
    }

    /// A standard normal draw (Box–Muller).
    pub(crate) fn normal(&mut self) -> f64 {
        let u = self.unit().max(f64::MIN_POSITIVE);
        let v = self.unit();
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}
