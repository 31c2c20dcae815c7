//! Choosing between the level-parallel and the sequential evaluator by timing both, for
//! programs whose static estimate cannot tell ([`SplitLevels::choice`](crate::schedule::SplitLevels::choice)
//! says [`ParChoice::Measure`]).
//!
//! Why measure: on this project's machine the same binary's level evaluator moves 2.3×
//! between processes a minute apart with the host's placement of the two cores
//! (`docs/PERFORMANCE.md`, "Two threads against sequential"). A static estimate that must
//! never lose to the sequential evaluator has to pick it for cheap scalar levels, and so
//! gives up the 1.3-1.4× that two threads give when the host is in a good state. Timing
//! both, on the caller's own program and host, keeps that gain where it exists and the
//! sequential evaluator where it does not.
//!
//! The policy, per [`EvalState`](crate::EvalState) (one per caller, so no atomics):
//! - the first call runs sequentially and is not timed: it sizes and faults the slot file;
//! - the next [`PROBE_CALLS`] calls alternate the parallel and the sequential evaluator,
//!   timed;
//! - then each call runs the evaluator whose latest time is lower, and every `interval`-th
//!   call runs the other one once. `interval` starts at [`REPROBE_MIN`] and doubles, up
//!   to [`REPROBE_MAX`], each time that other evaluator is confirmed slower, and falls
//!   back to [`REPROBE_MIN`] when the choice flips. So a change of the host's state is
//!   noticed within at most [`REPROBE_MAX`] calls, and once the choice is stable the
//!   slower evaluator runs at most once per [`REPROBE_MAX`] calls.
//!
//! A state moved to another program starts over (the program is named by its address:
//! a new program at a freed one's address inherits its times, which the next probes
//! correct). Results do not depend on the choice: both evaluators are bit-identical
//! (`eval.rs`).
//!
//! Complexity: `O(1)` per call, one clock read around the call.

/// What parallel evaluation does with a program, from its schedule's estimate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ParChoice {
    /// The sequential evaluator: nothing to split, one thread, or too little work for a
    /// measurement to be worth its clock reads and its slower calls.
    Sequential,
    /// The level evaluator: estimated to win by a margin.
    Parallel,
    /// Time both ([`ParProbe`]).
    Measure,
}

/// Which evaluator a call runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Sequential = 0,
    Parallel = 1,
}

impl Mode {
    fn other(self) -> Mode {
        match self {
            Mode::Sequential => Mode::Parallel,
            Mode::Parallel => Mode::Sequential,
        }
    }
}

/// Timed calls alternating the two evaluators after the warm-up.
pub(crate) const PROBE_CALLS: u64 = 4;
/// The first re-probe interval, in calls.
pub(crate) const REPROBE_MIN: u64 = 16;
/// The longest re-probe interval, in calls.
pub(crate) const REPROBE_MAX: u64 = 1024;

/// One caller's measurements of one program (module docs).
#[derive(Clone, Debug)]
pub(crate) struct ParProbe {
    /// The program measured, by address; 0 before the first call.
    program: usize,
    /// Calls made for it.
    calls: u64,
    /// The latest time of each evaluator, in nanoseconds, indexed by [`Mode`]; `u64::MAX`
    /// before its first timed call.
    latest: [u64; 2],
    /// The evaluator chosen at the last comparison.
    chosen: Mode,
    /// Calls between re-probes of the other evaluator.
    interval: u64,
    /// The call at which the other evaluator runs next.
    next_probe: u64,
}

impl Default for ParProbe {
    fn default() -> Self {
        ParProbe {
            program: 0,
            calls: 0,
            latest: [u64::MAX; 2],
            chosen: Mode::Sequential,
            interval: REPROBE_MIN,
            next_probe: 0,
        }
    }
}

impl ParProbe {
    /// The evaluator for the next call on `program`, and whether to time it.
    pub(crate) fn next(&mut self, program: usize) -> (Mode, bool) {
        if self.program != program {
            *self = ParProbe { program, ..ParProbe::default() };
        }
        let call = self.calls;
        self.calls += 1;
        if call == 0 {
            return (Mode::Sequential, false);
        }
        if call <= PROBE_CALLS {
            let mode = if call % 2 == 1 { Mode::Parallel } else { Mode::Sequential };
            return (mode, true);
        }
        if call == PROBE_CALLS + 1 {
            self.next_probe = call + self.interval;
        }
        if call == self.next_probe { (self.chosen.other(), true) } else { (self.chosen, true) }
    }

    /// Records that a call of `mode` took `nanos`, and chooses again.
    pub(crate) fn record(&mut self, mode: Mode, nanos: u64) {
        self.latest[mode as usize] = nanos;
        let faster = if self.latest[Mode::Parallel as usize] < self.latest[Mode::Sequential as usize] {
            Mode::Parallel
        } else {
            Mode::Sequential
        };
        let probed = self.calls > PROBE_CALLS + 1 && mode != self.chosen;
        if faster != self.chosen {
            self.chosen = faster;
            self.interval = REPROBE_MIN;
        } else if probed {
            self.interval = (self.interval * 2).min(REPROBE_MAX);
        }
        if probed || faster != mode {
            self.next_probe = self.calls.saturating_sub(1) + self.interval;
        }
    }

    /// Calls made on the current program.
    #[cfg(test)]
    pub(crate) fn calls(&self) -> u64 {
        self.calls
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `calls` calls where the parallel evaluator takes `par(call)` and the
    /// sequential one `seq(call)`; returns the modes run.
    fn drive(calls: u64, par: impl Fn(u64) -> u64, seq: impl Fn(u64) -> u64) -> Vec<Mode> {
        let mut p = ParProbe::default();
        (0..calls)
            .map(|c| {
                let (mode, timed) = p.next(1);
                if timed {
                    p.record(mode, if mode == Mode::Parallel { par(c) } else { seq(c) });
                }
                mode
            })
            .collect()
    }

    #[test]
    fn the_faster_evaluator_runs_and_the_slower_one_rarely() {
        for (par, seq, winner) in [(60, 100, Mode::Parallel), (150, 100, Mode::Sequential)] {
            let modes = drive(4000, |_| par, |_| seq);
            assert_eq!(modes[0], Mode::Sequential, "the warm-up is sequential");
            assert_eq!(&modes[1..5], &[Mode::Parallel, Mode::Sequential, Mode::Parallel, Mode::Sequential]);
            let losers = modes[5..].iter().filter(|&&m| m != winner).count();
            // Intervals 16, 32, ..., 1024 and then every 1024: at most 7 + 4000/1024.
            assert!(losers <= 11, "{losers} calls of the slower evaluator ({par} against {seq})");
            assert!(modes[5..].iter().filter(|&&m| m == winner).count() >= 3980);
        }
    }

    #[test]
    fn a_change_of_host_state_is_followed_within_the_longest_interval() {
        let after = 3000 + REPROBE_MAX as usize + 1;
        let count = |modes: &[Mode], m: Mode| modes.iter().filter(|&&x| x == m).count();
        // Parallel wins until call 3000, then takes twice the sequential time: it is left at
        // once (its own latest time shows it) and only probed after.
        let modes = drive(6000, |c| if c < 3000 { 60 } else { 200 }, |_| 100);
        assert!(count(&modes[2000..3000], Mode::Parallel) >= 995);
        assert!(count(&modes[3001..], Mode::Parallel) <= 8, "parallel after it lost");
        // Parallel loses until call 3000, then wins: found at the next probe.
        let modes = drive(6000, |c| if c < 3000 { 200 } else { 60 }, |_| 100);
        assert!(count(&modes[2000..3000], Mode::Sequential) >= 995);
        assert!(count(&modes[after..], Mode::Sequential) <= 8, "sequential after parallel won");
    }

    #[test]
    fn another_program_starts_over() {
        let mut p = ParProbe::default();
        for _ in 0..10 {
            let (mode, _) = p.next(1);
            p.record(mode, 5);
        }
        assert_eq!(p.calls(), 10);
        assert_eq!(p.next(2), (Mode::Sequential, false));
        assert_eq!(p.calls(), 1);
    }
}
