//! `balance`: a contraction tree re-associated so that two threads can share its work, for
//! [`Plan::balanced_for`](crate::Plan::balanced_for).
//!
//! Why: a path that contracts a chain one operand at a time (an MPS inner product, most of
//! a matrix chain's optimal order) is a tree whose every step waits for the one before, so
//! the parallel evaluator has nothing to run at once, and steps too small for their kernel
//! to split leave a second thread idle. Contracting the same chain from both ends and
//! joining in the middle does about the same multiply-adds (each half follows the original
//! order or its mirror image) with half the critical path.
//!
//! Input: a pairwise path followed over the reduced network ([`FollowedPath`]), the label
//! sizes and a thread count. The tree's *spine* runs from the last step down, each time into
//! the operand whose subtree has the longer critical path (in multiply-adds); the other
//! operands met on the way (and both operands of the deepest spine step) are the spine's
//! *units* `u0, u1, …, u(m-1)`, bottom up, each a subtree kept as it is. The path contracts
//! them as `((u0·u1)·u2)·…`; a split at `k` contracts `u0…uk` in that order, `u(m-1)…u(k+1)`
//! in the mirrored order, and joins the two.
//!
//! Output: the split path ([`ContractionPath`], pairwise: the half `u0…uk`, then the
//! other, then the join, each unit's own steps, in their order, just before its use) for
//! the `k` of the smallest estimated time on `threads` threads, `max(critical path, total
//! ÷ threads)`, when that time is at most `1 / MIN_GAIN` of the original's (the better of
//! that bound and its steps in order with each GEMM large enough to split divided
//! between the threads, as `threads.rs` estimates), its
//! multiply-adds at most `1 + FLOP_SLACK` times the original's and none of its
//! intermediates larger than the original's largest; `None`
//! otherwise (or for one thread). The result is the same contraction to rounding: the
//! order of sums changes.
//!
//! Complexity: `O(steps · labels per step)` for the costs of every split (one pass from
//! each end), plus `O(steps log steps)` to write the chosen path in opt_einsum's positional form.

use crate::elem::PAR_GEMM_MIN_MACS;
use crate::path::{ContractionPath, FollowedPath, PathOperand, distinct, positional_path};
use crate::threads::SPLIT_EFFICIENCY;

/// The estimated speed-up below which the original path is kept (as in `threads.rs`:
/// the estimate ignores the fixed costs of threads).
const MIN_GAIN: f64 = 1.25;

/// How many more multiply-adds than the original a balanced path may do: a re-association
/// that costs more work than a second thread saves would be slower on one.
const FLOP_SLACK: f64 = 1.0 / 32.0;

/// The balanced path of `followed` (a pairwise path over `n` operands to the labels
/// `output`, labels of sizes `sizes`) for `threads` threads, when it pays (module docs).
pub(crate) fn balance(
    followed: &FollowedPath<'_>,
    n: usize,
    output: &[u32],
    sizes: &[usize],
    threads: usize,
) -> Option<ContractionPath> {
    let steps = followed.steps();
    if threads < 2 || steps.len() < 4 {
        return None;
    }
    let size = |labels: &[u32]| labels.iter().map(|&c| sizes[c as usize] as f64).product::<f64>();
    let step_of = |v: PathOperand| v.index().checked_sub(n);
    let t = threads as f64;
    // Each operand's critical path (multiply-adds); the total; the largest intermediate;
    // the time of the steps in order with each large enough GEMM split over the threads.
    let mut crit = vec![0.0f64; n + steps.len()];
    let (mut total, mut largest, mut split) = (0.0f64, 0.0f64, 0.0f64);
    for (s, step) in steps.iter().enumerate() {
        let cost = size(&followed.loops(step));
        let [a, b] = step.operands;
        crit[n + s] = crit[a.index()].max(crit[b.index()]) + cost;
        total += cost;
        split += if cost >= PAR_GEMM_MIN_MACS as f64 { cost / (SPLIT_EFFICIENCY * t) } else { cost };
        largest = largest.max(size(followed.labels(step.result)));
    }
    // The spine, from the last step down (iteratively), and its units, bottom up.
    let mut on_spine = vec![false; steps.len()];
    let mut units: Vec<PathOperand> = Vec::new();
    // Per unit, whether its spine step put the running result first.
    let mut result_first: Vec<bool> = Vec::new();
    let mut spine_cost = 0.0;
    let mut v = followed.last();
    while let Some(s) = step_of(v) {
        on_spine[s] = true;
        spine_cost += size(&followed.loops(&steps[s]));
        let [a, b] = steps[s].operands;
        let (heavy, light) = if crit[a.index()] >= crit[b.index()] { (a, b) } else { (b, a) };
        units.push(light);
        result_first.push(a == heavy);
        if step_of(heavy).is_none() {
            units.push(heavy);
            result_first.push(true);
            break;
        }
        v = heavy;
    }
    units.reverse();
    result_first.reverse();
    let m = units.len();
    if m < 4 {
        return None;
    }
    let labels: Vec<Vec<u32>> = units.iter().map(|&u| distinct(followed.labels(u))).collect();
    let mut holders = vec![0u32; sizes.len()];
    for l in &labels {
        for &c in l {
            holders[c as usize] += 1;
        }
    }
    let mut in_output = vec![false; sizes.len()];
    for &c in output {
        in_output[c as usize] = true;
    }
    let left = Half::contract(&labels, &units, &crit, &holders, &in_output, sizes, (0..m).collect());
    let right = Half::contract(&labels, &units, &crit, &holders, &in_output, sizes, (0..m).rev().collect());
    let estimate = |total: f64, crit: f64| crit.max(total / t);
    // The original path on the threads: independent steps at once or its large steps
    // split, whichever is faster (as `threads::choose` weighs them). A chain of steps
    // that split already has its threads busy: re-associating it would only change the
    // order of its sums.
    let original = estimate(total, crit[followed.last().index()]).min(split);
    // Splits after `k`: at least two units on each side, so both halves have a step.
    let mut best: Option<(f64, usize)> = None;
    for k in 1..m - 2 {
        let (l, r) = (&left.at[k], &right.at[m - 1 - (k + 1)]);
        let join = size(&union(&l.labels, &r.labels));
        let new_total = total - spine_cost + l.cost + r.cost + join;
        let new_crit = l.crit.max(r.crit) + join;
        let fits = l.largest.max(r.largest) <= largest;
        let time = estimate(new_total, new_crit);
        if fits && new_total <= total * (1.0 + FLOP_SLACK) && best.is_none_or(|(b, _)| time < b) {
            best = Some((time, k));
        }
    }
    let (time, k) = best?;
    if time * MIN_GAIN > original {
        return None;
    }
    // Each off-spine step's unit (steps come after their operands' steps, so one pass
    // from the end finds every subtree), to write a unit's steps just before its use and
    // hold no more results at once than the original order did.
    let mut owner: Vec<Option<usize>> = vec![None; steps.len()];
    for (j, &u) in units.iter().enumerate() {
        if let Some(s) = step_of(u) {
            owner[s] = Some(j);
        }
    }
    for s in (0..steps.len()).rev() {
        if let Some(j) = owner[s] {
            for o in steps[s].operands {
                if let Some(p) = step_of(o) {
                    owner[p] = Some(j);
                }
            }
        }
    }
    let mut by_unit: Vec<Vec<usize>> = vec![Vec::new(); m];
    for (s, o) in owner.iter().enumerate() {
        if let Some(j) = *o {
            by_unit[j].push(s);
        }
    }
    // The pairs of the new path, by operand id: off-spine steps keep their results' ids,
    // the new steps take ids past the original ones.
    let mut pairs: Vec<[usize; 2]> = Vec::with_capacity(steps.len());
    let mut ids: Vec<usize> = Vec::with_capacity(steps.len());
    let unit_steps = |j: usize, pairs: &mut Vec<[usize; 2]>, ids: &mut Vec<usize>| {
        for &s in &by_unit[j] {
            pairs.push([steps[s].operands[0].index(), steps[s].operands[1].index()]);
            ids.push(n + s);
        }
    };
    // The operands of each step in the order its unit's original spine step had them, in
    // both halves: the order fixes the result's label order, and the MPS's mirrored half
    // with its operands the other way round took 1.2 times as long on one thread
    // (permutation copies; `docs/PERFORMANCE.md`).
    let mut fresh = n + steps.len();
    let mut chain = |order: &mut dyn Iterator<Item = usize>, pairs: &mut Vec<[usize; 2]>, ids: &mut Vec<usize>| {
        let first = order.next().expect("a half has units");
        unit_steps(first, pairs, ids);
        let mut acc = units[first].index();
        for j in order {
            unit_steps(j, pairs, ids);
            let u = units[j].index();
            pairs.push(if result_first[j] { [acc, u] } else { [u, acc] });
            ids.push(fresh);
            acc = fresh;
            fresh += 1;
        }
        acc
    };
    let l = chain(&mut (0..=k), &mut pairs, &mut ids);
    let r = chain(&mut (k + 1..m).rev(), &mut pairs, &mut ids);
    pairs.push([l, r]);
    ids.push(fresh);
    // opt_einsum's positions: pair `k`'s result is slot `n + k` of the operand list.
    let mut slot_of = vec![usize::MAX; fresh + 1];
    (0..n).for_each(|i| slot_of[i] = i);
    let slots: Vec<[usize; 2]> = pairs
        .iter()
        .zip(&ids)
        .enumerate()
        .map(|(k, (&[a, b], &id))| {
            slot_of[id] = n + k;
            [slot_of[a], slot_of[b]]
        })
        .collect();
    Some(positional_path(n, &slots))
}

/// The distinct labels of `a` and `b`.
fn union(a: &[u32], b: &[u32]) -> Vec<u32> {
    distinct(&[a, b].concat())
}

/// After contracting the first `j + 1` units of an order, one at a time: the result's
/// labels, the multiply-adds of the chain's steps, its critical path and its largest
/// intermediate (elements).
struct Prefix {
    labels: Vec<u32>,
    cost: f64,
    crit: f64,
    largest: f64,
}

/// A chain of units contracted in one order, every prefix of it ([`Prefix`]).
struct Half {
    at: Vec<Prefix>,
}

impl Half {
    /// The chain of `units` (with their `labels`) in `order`; a label is kept in a prefix's
    /// result while a unit outside the prefix or the output holds it.
    fn contract(
        labels: &[Vec<u32>],
        units: &[PathOperand],
        crit: &[f64],
        holders: &[u32],
        in_output: &[bool],
        sizes: &[usize],
        order: Vec<usize>,
    ) -> Half {
        let size = |labels: &[u32]| labels.iter().map(|&c| sizes[c as usize] as f64).product::<f64>();
        let mut held = vec![0u32; holders.len()];
        let first = order[0];
        for &c in &labels[first] {
            held[c as usize] += 1;
        }
        let mut at = Vec::with_capacity(order.len());
        at.push(Prefix { labels: labels[first].clone(), cost: 0.0, crit: crit[units[first].index()], largest: 0.0 });
        for &u in &order[1..] {
            let before = at.last().expect("the first unit is in");
            let loops = union(&before.labels, &labels[u]);
            let cost = size(&loops);
            for &c in &labels[u] {
                held[c as usize] += 1;
            }
            let kept: Vec<u32> = loops
                .into_iter()
                .filter(|&c| held[c as usize] < holders[c as usize] || in_output[c as usize])
                .collect();
            let largest = before.largest.max(size(&kept));
            let crit = before.crit.max(crit[units[u].index()]) + cost;
            at.push(Prefix { labels: kept, cost: before.cost + cost, crit, largest });
        }
        Half { at }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The chain `a0 a1, a1 a2, …` of `n` matrices `d × d`, contracted left to right.
    fn chain(n: usize) -> (Vec<Vec<u32>>, Vec<u32>, ContractionPath) {
        let inputs: Vec<Vec<u32>> = (0..n as u32).map(|i| vec![i, i + 1]).collect();
        let output = vec![0, n as u32];
        // opt_einsum's list: each result goes to the end, where the next step finds it.
        let mut path = vec![[0, 1]];
        for live in (2..n).rev() {
            path.push([live - 1, 0]);
        }
        (inputs, output, ContractionPath::new(path))
    }

    #[test]
    fn a_chain_splits_in_the_middle_with_the_same_work() {
        let (inputs, output, path) = chain(16);
        let sizes = vec![8; 17];
        let f = FollowedPath::new(&inputs, &output, &path).unwrap();
        assert!(balance(&f, 16, &output, &sizes, 1).is_none(), "one thread keeps the path");
        let b = balance(&f, 16, &output, &sizes, 2).expect("a chain balances");
        let before = crate::cost::path_cost(&inputs, &output, &sizes, &path).unwrap();
        let after = crate::cost::path_cost(&inputs, &output, &sizes, &b).unwrap();
        assert!(after <= before * (1.0 + FLOP_SLACK), "{after} against {before}");
        // The last step joins two results of about eight matrices each.
        let g = FollowedPath::new(&inputs, &output, &b).unwrap();
        let last = g.steps().last().unwrap();
        let depth = |v: PathOperand| {
            let mut d = 0usize;
            let mut v = v;
            while let Some(s) = g.step_of(v) {
                d += 1;
                v = g.steps()[s].operands[0];
            }
            d
        };
        let (l, r) = (depth(last.operands[0]), depth(last.operands[1]));
        assert!(l.abs_diff(r) <= 2 && l + r == 14, "halves of {l} and {r} steps");
    }

    #[test]
    fn a_balanced_tree_is_kept() {
        // ((01)(23))((45)(67)): already two halves.
        let inputs: Vec<Vec<u32>> = (0..8u32).map(|i| vec![i, i + 1]).collect();
        let output = vec![0, 8];
        let path = ContractionPath::new(vec![[0, 1], [0, 1], [0, 1], [0, 1], [0, 1], [0, 1], [0, 1]]);
        let f = FollowedPath::new(&inputs, &output, &path).unwrap();
        assert!(balance(&f, 8, &output, &[4; 9], 2).is_none());
    }
}
