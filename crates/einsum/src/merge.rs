//! `merge`: the small factors that a path multiplies into one large intermediate one after
//! another, multiplied together first, for [`Plan::with_factors_merged`](crate::Plan::with_factors_merged).
//!
//! Why: a graphical model's path (the queens network of `docs/PERFORMANCE.md`) applies
//! `3 × 3` edge factors to a `3^13`-element intermediate one step at a time, and most of
//! those steps sum nothing: each is an element-wise product that reads and writes the whole
//! intermediate (25 MB) to multiply each entry by one factor entry. Memory bound, a run of
//! `k` of them costs `k` passes. Multiplying the factors together first (a few thousand
//! entries, in cache) and the intermediate by their product once costs one pass and fewer
//! multiply-adds, in the forward pass and in the reverse pass alike (one product's two
//! transposes instead of `k` pairs).
//!
//! Input: a pairwise path followed over the reduced network ([`FollowedPath`]) and the
//! label sizes. A step *absorbs* a factor when one operand (the *factor*: no repeated
//! label, at most [`FACTOR_MAX`] elements) has only labels of the other (the *carrier*,
//! no repeated label, at least [`CARRIER_RATIO`] times larger) and the result keeps every
//! label of the carrier: nothing is summed, nothing added. A *run* is a sequence of
//! absorbing steps each of whose carrier is the result of the one before.
//!
//! Output: the path with each run of two or more steps (cut where the factors' product
//! would pass [`FACTOR_MAX`] elements or `1 / CARRIER_RATIO` of the carrier) replaced by
//! the factors contracted together in the run's order, then the carrier with their
//! product, placed where the run's last step was; every other step as it was. `None` when
//! there is no such run. The result is the same contraction to rounding (the products
//! associate differently); the multiply-adds never grow.
//!
//! Complexity: `O(steps · labels per step)`.

use crate::path::{ContractionPath, FollowedPath, PathOperand, distinct, positional_path};

/// The most elements a factor, and the factors' product, may have: the product stays in
/// the first- and second-level caches while the carrier streams past it, and the reverse
/// pass fuses its two transposes (`pair.rs`'s `PAIR_MAX_SMALL` is as large).
pub(crate) const FACTOR_MAX: usize = 4096;

/// How much larger than the factors' product a carrier must be, so that the extra steps
/// among the factors are negligible against the passes over the carrier they save.
pub(crate) const CARRIER_RATIO: usize = 64;

/// The path `followed` (over `n` operands with label sizes `sizes`) with its runs of
/// element-wise factors merged (module docs), or `None` when it has no run to merge.
pub(crate) fn merge_factors(followed: &FollowedPath<'_>, n: usize, sizes: &[usize]) -> Option<ContractionPath> {
    let steps = followed.steps();
    let len = |o: PathOperand| followed.labels(o).iter().map(|&c| sizes[c as usize]).product::<usize>();
    let unique = |o: PathOperand| {
        let l = followed.labels(o);
        distinct(l).len() == l.len()
    };
    // Per step: the (carrier, factor) operands when it absorbs a factor.
    let absorbs: Vec<Option<(PathOperand, PathOperand)>> = steps
        .iter()
        .map(|s| {
            let [a, b] = s.operands;
            let (carrier, factor) = if len(a) >= len(b) { (a, b) } else { (b, a) };
            let (lc, lf) = (followed.labels(carrier), followed.labels(factor));
            let result = followed.labels(s.result);
            let absorbing = unique(carrier)
                && unique(factor)
                && len(factor) <= FACTOR_MAX
                && len(factor).saturating_mul(CARRIER_RATIO) <= len(carrier)
                && lf.iter().all(|c| lc.contains(c))
                && result.len() == lc.len()
                && lc.iter().all(|c| result.contains(c));
            absorbing.then_some((carrier, factor))
        })
        .collect();
    // The runs, as lists of step indices: a step joins the run of the step whose result is
    // its carrier, unless the factors' product would grow past the bounds.
    let mut run_of: Vec<Option<usize>> = vec![None; steps.len()];
    let mut runs: Vec<(Vec<usize>, Vec<u32>)> = Vec::new();
    for (s, absorbed) in absorbs.iter().enumerate() {
        let Some((carrier, factor)) = *absorbed else { continue };
        let lf = followed.labels(factor);
        let joined = followed.step_of(carrier).and_then(|p| run_of[p]).filter(|&r| {
            let mut labels = runs[r].1.clone();
            labels.extend(lf.iter().filter(|c| !runs[r].1.contains(c)));
            let product: usize = labels.iter().map(|&c| sizes[c as usize]).product();
            product <= FACTOR_MAX && product.saturating_mul(CARRIER_RATIO) <= len(carrier)
        });
        let r = joined.unwrap_or_else(|| {
            runs.push((Vec::new(), Vec::new()));
            runs.len() - 1
        });
        let (members, labels) = &mut runs[r];
        members.push(s);
        for &c in lf {
            if !labels.contains(&c) {
                labels.push(c);
            }
        }
        run_of[s] = Some(r);
    }
    if runs.iter().all(|(members, _)| members.len() < 2) {
        return None;
    }
    // The new path in slots: inputs `0..n`, then each emitted pair's result.
    let mut slot: Vec<usize> = (0..n).collect();
    slot.resize(n + steps.len(), usize::MAX);
    let mut pairs: Vec<[usize; 2]> = Vec::with_capacity(steps.len());
    for (s, step) in steps.iter().enumerate() {
        let run = run_of[s].map(|r| &runs[r].0).filter(|members| members.len() >= 2);
        let Some(members) = run else {
            let [a, b] = step.operands;
            pairs.push([slot[a.index()], slot[b.index()]]);
            slot[step.result.index()] = n + pairs.len() - 1;
            continue;
        };
        // A run is emitted at its last step, where every factor and its first carrier exist.
        if members.last() != Some(&s) {
            continue;
        }
        let factor = |m: usize| absorbs[m].expect("a run's steps absorb").1;
        let mut product = slot[factor(members[0]).index()];
        for &m in &members[1..] {
            pairs.push([product, slot[factor(m).index()]]);
            product = n + pairs.len() - 1;
        }
        let carrier = absorbs[members[0]].expect("a run's steps absorb").0;
        pairs.push([slot[carrier.index()], product]);
        slot[step.result.index()] = n + pairs.len() - 1;
    }
    Some(positional_path(n, &pairs))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryLimit;
    use crate::path::PathChoice;
    use crate::plan::Plan;

    /// `abcdefghij` times four `3 × 3` factors in a row, then summed to a scalar with a
    /// tensor of its labels (so that every label stays to the end): the four products
    /// become one.
    #[test]
    fn a_run_of_factors_is_multiplied_first() {
        let expr = "abcdefghij,ab,bc,ac,de,abcdefghij->";
        let mut shapes = vec![vec![3; 10]];
        shapes.extend(vec![vec![3, 3]; 4]);
        shapes.push(vec![3; 10]);
        // The carrier absorbs each factor in turn (its result goes to the end of the list).
        let path = ContractionPath::new(vec![[0, 1], [0, 4], [0, 3], [0, 2], [0, 1]]);
        let p = Plan::new(expr, &shapes, PathChoice::Explicit(path), MemoryLimit::Unlimited).unwrap();
        let f = p.followed();
        let merged = merge_factors(&f, 6, &p.network().sizes).expect("a run to merge");
        let q = Plan::new(expr, &shapes, PathChoice::Explicit(merged), MemoryLimit::Unlimited).unwrap();
        assert!(q.multiply_adds() < p.multiply_adds());
        // The factors `ab, bc, ac, de` first (three steps), then the carrier once, then the last.
        let carried: Vec<usize> = q
            .followed()
            .steps()
            .iter()
            .map(|s| s.operands.iter().map(|&o| q.followed().labels(o).len()).max().unwrap())
            .collect();
        assert_eq!(carried, vec![2, 3, 3, 10, 10], "{:?}", q.path());
    }
}
