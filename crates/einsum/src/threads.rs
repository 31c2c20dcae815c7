//! `threads`: how an evaluation given a pool of several threads uses it, decided by
//! estimated cost ([`PoolUse`]), for [`Einsum::eval_parallel`](crate::Einsum::eval_parallel),
//! [`EinsumGradient::eval_with_value_parallel`](crate::EinsumGradient::eval_with_value_parallel)
//! and the plain evaluations called inside a pool.
//!
//! Why: a second thread helps in two ways, by running independent steps at once (the
//! evaluator's levels or dataflow) and by splitting one large step's kernel (its GEMM, its
//! permutation copies, its element-wise chunks). Both have fixed costs (waking a sleeping
//! worker, forking and joining, a step's operands moving to the other core's cache), the
//! parallel evaluator's the larger: a program that offers neither kind of parallelism
//! pays them for nothing (a chain of 199 small steps, an MPS inner product, ran slower on
//! two threads than on one), and one that offers only split kernels (one lone GEMM, a
//! batch of 32 products of `64³`) ran slower through the parallel evaluator and faster as
//! its steps in order inside the pool.
//!
//! Input: the program's operations in program order (a topological order), each with its
//! [`GraphOperation::cost_hint`] and the operations that make its operands
//! ([`Step`]). Output: [`PoolUse::Pool`] when the program's summed cost reaches
//! [`POOL_MIN_COST`], some steps are independent, and the estimated time on the pool's
//! threads is at most `1 / MIN_GAIN` of the one-thread time; else [`PoolUse::Kernels`]
//! when its splitting kernels alone promise that gain and save at least [`WAKE_COST`]
//! (a call of well under a millisecond gains less from a split than the hand-off to a
//! sleeping worker and back costs); else [`PoolUse::OneThread`].
//!
//! The estimate on `t` threads is the better of two bounds: independent steps at once,
//! `max(critical path, total / t)`, no step split; and the steps in order with each step
//! that its kernel would split ([`splits_in_pool`]) taking `1 / (SPLIT_EFFICIENCY · t)` of
//! its time. Inside the parallel evaluator, which of the two happens is left to it and to
//! rayon's work stealing (an idle thread steals a ready step or the blocks of a running
//! step's kernel, whichever appears first).
//!
//! Complexity: `O(operations + operands)`, once per call.

use computegraph::{Graph, GraphOperation, LocalValueDef, MaterializedGraph, MaterializedValueDef};
use smallvec::SmallVec;

use crate::elem::{Elem, PAR_GEMM_MIN_MACS};
use crate::elementwise::PAR_ELEMENTWISE_MIN_ELEMENTS;
use crate::op::TensorOp;
use crate::permute::PAR_PERMUTE_MIN_ELEMENTS;

/// Programs whose summed cost hint is below this run on one thread whatever the pool: about
/// 2 ms of one core's work (a cost hint is about a quarter of the multiply-adds plus the
/// output's elements). A lone `256³` GEMM (cost `2^22`) lost to its fork and join on two
/// threads (0.59 → 0.64 ms, an idle machine), the 100-matrix chain (about 10 ms) gained.
pub(crate) const POOL_MIN_COST: u64 = 1 << 24;

/// What entering a pool whose workers sleep costs, in cost-hint units: the hand-off of the
/// call to a worker, the second worker's wake-up for the split, the hand-back, and the
/// spread of those wake-ups on a host whose cores other work shares. Set by measurement
/// on the machine of `docs/PERFORMANCE.md`'s latest tables: the lone `256³` GEMM and the
/// batch of 32 GEMMs of `64³`, whose kernels alone split, are let in, and gained there
/// as whole calls handed to the pool (*The GEMM cut that keeps every block's kernel*);
/// on an older host the hand-off had cost more than they saved. Steps at once
/// ([`PoolUse::Pool`]) start from [`POOL_MIN_COST`], far above it.
pub(crate) const WAKE_COST: u64 = 1 << 19;

/// The estimated speed-up below which the pool is not entered: the estimate ignores the
/// fixed costs of threads, so a small predicted gain is none.
const MIN_GAIN: f64 = 1.25;

/// The share of `t` threads' speed-up that a split kernel reaches (large GEMMs of MERA:
/// 1.86× on two threads).
pub(crate) const SPLIT_EFFICIENCY: f64 = 0.9;

/// How an evaluation given a pool of several threads runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PoolUse {
    /// Outside the pool, as [`Einsum::eval`](crate::Einsum::eval) outside any: no kernel
    /// would split and no steps would run at once.
    OneThread,
    /// The steps in program order on the calling thread, inside the pool, so that each
    /// large kernel splits over its threads: a chain of large steps, where running steps
    /// at once has nothing to add and its evaluator's fork and join cost.
    Kernels,
    /// The parallel evaluator in the pool: independent steps at once and large kernels
    /// split.
    Pool,
}
/// One operation of a program: its cost hint, whether its kernel splits over a pool's
/// threads, and the operations (by position in the program) that make its operands.
#[derive(Debug)]
pub(crate) struct Step {
    pub(crate) cost: u64,
    pub(crate) splits: bool,
    pub(crate) after: SmallVec<[usize; 2]>,
}

impl Step {
    /// The step of `op`, made after the operations `after`.
    pub(crate) fn of<T: Elem>(op: &TensorOp<T>, after: SmallVec<[usize; 2]>) -> Self {
        Step { cost: op.cost_hint(), splits: splits_in_pool(op), after }
    }
}

/// Whether `op`'s kernel gains from the threads of a pool it runs in: a contraction of at
/// least `PAR_GEMM_MIN_MACS` multiply-adds (one GEMM split, or a loop of smaller ones cut
/// into chunks) with at least [`MIN_SPLIT_INTENSITY`] of them per output element; or an
/// element-wise product or a broadcast of `PAR_ELEMENTWISE_MIN_ELEMENTS` (`2^17`), or a
/// thinner GEMM or a permutation of `2^20`, up to [`MAX_STREAMING_SPLIT`] elements. Larger
/// ones stream memory: two threads gave them no gain here (the element-wise product of two `2048 × 2048` matrices ran at 0.95 to 0.98
/// of its one-thread speed, its value+gradient 0.83 to 0.87; `docs/PERFORMANCE.md`), while
/// the queens network's broadcast products of up to `3^13` elements (within the last-level
/// cache) gained. Approximate (a looped GEMM whose leading label is not the output's is
/// not cut), which is what an estimate needs.
pub(crate) fn splits_in_pool<T: Elem>(op: &TensorOp<T>) -> bool {
    match op {
        TensorOp::Contract(s) => {
            let out = s.out_shape().iter().product::<usize>();
            let macs = s.multiply_adds();
            let summed = macs > out as u64;
            let intense = macs >= PAR_GEMM_MIN_MACS as u64 && macs >= MIN_SPLIT_INTENSITY * out as u64;
            let streaming = (macs >= PAR_GEMM_MIN_MACS as u64 || (!summed && out >= PAR_ELEMENTWISE_MIN_ELEMENTS))
                && out <= MAX_STREAMING_SPLIT;
            intense || streaming
        }
        TensorOp::Unary(s) => {
            let n = s.multiply_adds();
            n >= PAR_PERMUTE_MIN_ELEMENTS as u64 && n <= MAX_STREAMING_SPLIT as u64
        }
        // Cut as the element-wise kernel is (`pair.rs`); a triple's one pass runs on one
        // thread.
        TensorOp::ContractPair(p) => {
            p.z().is_none()
                && (PAR_ELEMENTWISE_MIN_ELEMENTS..=MAX_STREAMING_SPLIT).contains(&p.x().out_shape().iter().product())
        }
        _ => false,
    }
}

/// Multiply-adds per output element from which a split GEMM counts as a gain whatever its
/// size ([`splits_in_pool`]): below it, the output's traffic dominates the arithmetic.
const MIN_SPLIT_INTENSITY: u64 = 8;

/// The largest output (elements) of a memory-bound step whose split counts as a gain
/// ([`splits_in_pool`]): `2^21` elements, 16 MB of `f64`, half the last-level cache of the
/// machine measured (32 MB).
const MAX_STREAMING_SPLIT: usize = 1 << 21;

/// The steps of an einsum's graph (one fragment, operations in program order).
pub(crate) fn graph_steps<T: Elem>(graph: &Graph<TensorOp<T>>) -> Box<[Step]> {
    graph
        .operations()
        .map(|op| {
            let after = op
                .local_inputs()
                .filter_map(|v| match graph.value_def(v?) {
                    Some(LocalValueDef::Output { operation, .. }) => Some(operation.index()),
                    _ => None,
                })
                .collect();
            Step::of(op.operation(), after)
        })
        .collect()
}

/// The steps of a materialized graph (a derivative's, its operations in program order).
pub(crate) fn materialized_steps<T: Elem>(graph: &MaterializedGraph<TensorOp<T>>) -> Box<[Step]> {
    graph
        .operations()
        .map(|op| {
            let after = op
                .inputs()
                .iter()
                .filter_map(|&v| match graph.value_def(v) {
                    Some(MaterializedValueDef::Output { operation, .. }) => Some(operation.index()),
                    _ => None,
                })
                .collect();
            Step::of(op.operation(), after)
        })
        .collect()
}

/// How a program of `steps` (in program order) uses a pool of `threads` threads.
pub(crate) fn choose(steps: &[Step], threads: usize) -> PoolUse {
    // Before the sum over the steps: every one-thread evaluation asks.
    if threads < 2 {
        return PoolUse::OneThread;
    }
    let total: u64 = steps.iter().map(|s| s.cost).fold(0, u64::saturating_add);
    let t = threads as f64;
    // The longest chain of dependent steps, in program order (operands come first), and
    // the steps in order with each one that splits taking its split time.
    let mut finish: Vec<f64> = Vec::with_capacity(steps.len());
    let mut split_time = 0.0;
    for s in steps {
        let start = s.after.iter().map(|&p| finish[p]).fold(0.0, f64::max);
        finish.push(start + s.cost as f64);
        split_time += if s.splits { s.cost as f64 / (SPLIT_EFFICIENCY * t).max(1.0) } else { s.cost as f64 };
    }
    let critical = finish.iter().copied().fold(0.0, f64::max);
    let by_steps = critical.max(total as f64 / t);
    let total = total as f64;
    if total >= POOL_MIN_COST as f64 && total >= MIN_GAIN * by_steps.min(split_time) && critical < total {
        // Steps at once (the parallel evaluator, whose kernels split too) wherever there
        // are independent steps to run at once.
        PoolUse::Pool
    } else if total >= MIN_GAIN * split_time && total - split_time >= WAKE_COST as f64 {
        PoolUse::Kernels
    } else {
        PoolUse::OneThread
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(cost: u64, splits: bool, after: &[usize]) -> Step {
        Step { cost, splits, after: after.iter().copied().collect() }
    }

    #[test]
    fn small_programs_stay_on_one_thread() {
        // Independent steps: the evaluator's pool from POOL_MIN_COST on.
        let pair = |c: u64| [step(c / 2, false, &[]), step(c / 2, false, &[]), step(1, false, &[0, 1])];
        assert_eq!(choose(&pair(POOL_MIN_COST - 4), 2), PoolUse::OneThread);
        assert_eq!(choose(&pair(POOL_MIN_COST), 2), PoolUse::Pool);
        // A lone step: its kernel if it splits and saves more than the wake-up, else
        // nothing; one thread never enters a pool.
        assert_eq!(choose(&[step(POOL_MIN_COST, true, &[])], 2), PoolUse::Kernels);
        // A split step whose saving is below the wake-up's cost stays on the caller.
        assert_eq!(choose(&[step(1000, true, &[])], 2), PoolUse::OneThread);
        assert_eq!(choose(&[step(4 * WAKE_COST, true, &[])], 2), PoolUse::Kernels);
        assert_eq!(choose(&[step(POOL_MIN_COST, false, &[])], 2), PoolUse::OneThread);
        assert_eq!(choose(&[step(POOL_MIN_COST, true, &[])], 1), PoolUse::OneThread);
        assert_eq!(choose(&pair(POOL_MIN_COST), 1), PoolUse::OneThread);
    }

    /// `n` steps of cost `c`, each after the one before, the first at position `first`.
    fn chain(n: usize, first: usize, c: u64, splits: bool) -> Vec<Step> {
        (first..first + n).map(|i| Step { cost: c, splits, after: (first..i).last().into_iter().collect() }).collect()
    }

    #[test]
    fn chains_need_a_split_and_independent_steps_need_none() {
        let c = POOL_MIN_COST;
        // A chain of unsplit steps: nothing for a second thread; split steps: their
        // kernels, the steps in order (no evaluator's fork and join).
        assert_eq!(choose(&chain(8, 0, c, false), 2), PoolUse::OneThread);
        assert_eq!(choose(&chain(8, 0, c, true), 2), PoolUse::Kernels);
        // Two independent halves joined at the end.
        let mut two = chain(4, 0, c, false);
        two.extend(chain(4, 4, c, false));
        two.push(step(1, false, &[3, 7]));
        assert_eq!(choose(&two, 2), PoolUse::Pool);
        // A long chain beside one short branch: too little to share.
        let mut lopsided = chain(8, 0, c, false);
        lopsided.push(step(c, false, &[]));
        lopsided.push(step(1, false, &[7, 8]));
        assert_eq!(choose(&lopsided, 2), PoolUse::OneThread);
    }

    /// The longest chain of dependent steps, by relaxing every step's finish time until
    /// nothing moves (the reference for the one pass in program order that `choose` makes).
    fn critical_path(steps: &[Step]) -> f64 {
        let mut finish = vec![0.0f64; steps.len()];
        loop {
            let mut moved = false;
            for (i, s) in steps.iter().enumerate() {
                let f = s.after.iter().map(|&p| finish[p]).fold(0.0, f64::max) + s.cost as f64;
                if f > finish[i] {
                    finish[i] = f;
                    moved = true;
                }
            }
            if !moved {
                return finish.into_iter().fold(0.0, f64::max);
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(300))]

        /// On random programs (costs from a few multiply-adds to milliseconds, each step
        /// after up to two earlier ones): one thread never enters a pool; the pool is
        /// entered only where the estimate saves at least the wake-up's cost; the steps'
        /// kernels in order are chosen exactly where they promise `MIN_GAIN` and that saving.
        #[test]
        fn the_pool_pays_its_wake_up(
            raw in proptest::collection::vec((0u64..(1 << 23), proptest::bool::ANY, 0usize..64, 0usize..64), 1..12),
        ) {
            let steps: Vec<Step> = raw
                .iter()
                .enumerate()
                .map(|(i, &(cost, splits, a, b))| {
                    let mut after: Vec<usize> = [a, b].into_iter().filter(|&p| p < i).collect();
                    after.dedup();
                    step(cost, splits, &after)
                })
                .collect();
            proptest::prop_assert_eq!(choose(&steps, 1), PoolUse::OneThread);
            let total: f64 = steps.iter().map(|s| s.cost as f64).sum();
            let split: f64 =
                steps.iter().map(|s| if s.splits { s.cost as f64 / (2.0 * SPLIT_EFFICIENCY) } else { s.cost as f64 }).sum();
            let by_steps = critical_path(&steps).max(total / 2.0);
            let best = by_steps.min(split);
            let kernels = total >= MIN_GAIN * split && total - split >= WAKE_COST as f64;
            match choose(&steps, 2) {
                PoolUse::OneThread => proptest::prop_assert!(!kernels),
                PoolUse::Kernels => proptest::prop_assert!(kernels),
                PoolUse::Pool => proptest::prop_assert!(
                    total >= POOL_MIN_COST as f64 && total >= MIN_GAIN * best && total - best >= WAKE_COST as f64
                ),
            }
        }
    }
}
