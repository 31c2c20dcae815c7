//! Parameter tuning across trials: each driver's parameters are a point of the unit box,
//! mapped to their ranges by `Method::from_unit`. A driver's first [`EXPLORE`] trials sample
//! the box uniformly; after that a trial perturbs one of the driver's [`ELITE`] best points
//! by a Gaussian step (or, one time in four, samples afresh), so the search narrows around
//! what works on this network while it keeps looking elsewhere. The driver is drawn with a
//! preference (three times in four) for the one whose best tree is best so far.
//!
//! Trial 0 is the plain greedy path, trial 1 a bisection and trial 2 an annealing with
//! middling parameters, so even a one-trial search is never worse than greedy.
//!
//! The tuner is sequential: the search asks it for a whole batch before running the batch
//! and reports the results in trial order, so its choices depend only on the seed and the
//! results, never on thread timing.

use super::anneal::AnnealParams;
use super::greedy::GreedyParams;
use super::partition::PartitionParams;
use crate::rng::Rng;

/// Trials of a driver sampled uniformly before its best points are refined.
const EXPLORE: usize = 8;

/// How many of a driver's best points a refining trial may start from.
const ELITE: usize = 5;

/// The standard deviation of a refining step, in units of the box.
const STEP: f64 = 0.12;

/// A driver with its parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Method {
    Greedy(GreedyParams),
    Partition(PartitionParams),
    Anneal(AnnealParams),
}

/// The drivers, in the order of `Tuner::history`.
const DRIVERS: usize = 3;

impl Method {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Method::Greedy(_) => "greedy",
            Method::Partition(_) => "partition",
            Method::Anneal(_) => "anneal",
        }
    }

    /// The driver's index in `Tuner::history`.
    fn driver(&self) -> usize {
        match self {
            Method::Greedy(_) => 0,
            Method::Partition(_) => 1,
            Method::Anneal(_) => 2,
        }
    }

    /// Driver `d`'s parameters at point `u` of its unit box.
    fn from_unit(d: usize, u: &[f64]) -> Method {
        // α from 0 to 2; the temperature log-uniform from 10^-3 to 1.
        let greedy = |a: f64, t: f64| GreedyParams { alpha: 2.0 * a, temperature: 10f64.powf(-3.0 + 3.0 * t) };
        match d {
            0 => Method::Greedy(greedy(u[0], u[1])),
            1 => Method::Partition(PartitionParams {
                imbalance: 0.01 + 0.98 * u[0],
                cutoff: 2 + (u[1] * 14.0).round() as usize,
                parts: 2 + (u[4] * 4.0).round() as usize,
                greedy: greedy(u[2], u[3]),
            }),
            // β from 0.05–2 to 2–50 per bit, log-uniform; 10 to 500 sweeps, log-uniform.
            _ => Method::Anneal(AnnealParams {
                beta_start: 0.05 * 40f64.powf(u[0]),
                beta_end: 2.0 * 25f64.powf(u[1]),
                sweeps: (10.0 * 50f64.powf(u[2])).round() as usize,
                greedy: greedy(u[3], u[4]),
            }),
        }
    }

    fn dims(d: usize) -> usize {
        if d == 0 { 2 } else { 5 }
    }
}

/// The tuner's memory: per driver, the points tried and their scores (log2 of the
/// objective).
pub(crate) struct Tuner {
    rng: Rng,
    history: [Vec<(Vec<f64>, f64)>; DRIVERS],
    /// Points suggested and not yet reported, in trial order.
    pending: Vec<(usize, Vec<f64>)>,
}

impl Tuner {
    pub(crate) fn new(seed: u64) -> Tuner {
        Tuner { rng: Rng::new(seed ^ 0x7475_6e65), history: [Vec::new(), Vec::new(), Vec::new()], pending: Vec::new() }
    }

    /// The method of trial `t`.
    pub(crate) fn suggest(&mut self, t: u32) -> Method {
        let (d, u) = match t {
            0 => return self.remember(0, vec![0.5, 0.0], Method::Greedy(GreedyParams::PLAIN)),
            1 => (1, vec![0.1, 0.3, 0.5, 0.3, 0.0]),
            2 => (2, vec![0.3, 0.5, 0.5, 0.5, 0.3]),
            _ => {
                let d = self.driver();
                (d, self.point(d))
            }
        };
        let method = Method::from_unit(d, &u);
        self.remember(d, u, method)
    }

    fn remember(&mut self, d: usize, u: Vec<f64>, method: Method) -> Method {
        self.pending.push((d, u));
        method
    }

    /// Reports the score of the oldest suggestion not yet reported.
    pub(crate) fn report(&mut self, method: Method, score: f64) {
        let (d, u) = self.pending.remove(0);
        debug_assert_eq!(d, method.driver());
        self.history[d].push((u, score.max(f64::MIN_POSITIVE).log2()));
    }

    fn driver(&mut self) -> usize {
        let seen = |d: usize, s: &Self| s.history[d].len() + s.pending.iter().filter(|p| p.0 == d).count();
        if let Some(d) = (0..DRIVERS).find(|&d| seen(d, self) < EXPLORE) {
            return d;
        }
        let best = |d: usize| self.history[d].iter().map(|h| h.1).fold(f64::INFINITY, f64::min);
        let leader = (0..DRIVERS).min_by(|&a, &b| best(a).total_cmp(&best(b))).unwrap_or(0);
        if self.rng.unit() < 0.75 { leader } else { self.rng.below(DRIVERS) }
    }

    fn point(&mut self, d: usize) -> Vec<f64> {
        let dims = Method::dims(d);
        let h = &self.history[d];
        if h.len() < EXPLORE || self.rng.unit() < 0.25 {
            return (0..dims).map(|_| self.rng.unit()).collect();
        }
        let mut order: Vec<usize> = (0..h.len()).collect();
        order.sort_by(|&a, &b| h[a].1.total_cmp(&h[b].1));
        let from = order[self.rng.below(order.len().min(ELITE))];
        let base = h[from].0.clone();
        base.iter().map(|&x| (x + STEP * self.rng.normal()).clamp(0.0, 1.0)).collect()
    }
}
