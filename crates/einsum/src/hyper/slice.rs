//! Slicing chosen with the tree: until no intermediate of one slice exceeds the target,
//! slice the label that keeps the whole contraction cheapest (the multiply-adds of one
//! slice times the number of slices), then reconfigure the tree on the sliced network, so
//! the contraction order adapts to the labels that are no longer there. A sliced label
//! keeps its holders and has size 1 in the sliced network: every slice is the same
//! contraction with that label fixed.
//!
//! Candidates are the labels of the intermediates over the target (slicing any other label
//! cannot shrink them); each is scored by the tree's cost with it sliced, so one choice
//! costs one tree evaluation per candidate, and the candidates are capped at
//! [`CANDIDATES`], the most frequent among the oversized intermediates first.

use super::options::{Objective, TreeCost};
use super::reconf::{RECONF_TRIES, reconfigure};
use super::tree::{Net, Tree};

/// The most labels scored per choice.
const CANDIDATES: usize = 24;

/// A sliced tree: the labels sliced (in the order chosen), the slice count, and the cost of
/// one slice.
#[derive(Clone, Debug)]
pub(crate) struct Sliced {
    pub(crate) labels: Vec<u32>,
    pub(crate) slices: f64,
    pub(crate) per_slice: TreeCost,
}

impl Sliced {
    /// The whole contraction's cost: every slice's multiply-adds and writes; the largest
    /// intermediate is one slice's.
    pub(crate) fn total(&self) -> TreeCost {
        TreeCost {
            multiply_adds: self.per_slice.multiply_adds * self.slices,
            largest_intermediate: self.per_slice.largest_intermediate,
            written: self.per_slice.written * self.slices,
        }
    }
}

/// Slices `tree` (reconfiguring it in place) until one slice's largest intermediate has at
/// most `target` elements, or no label is left to slice. `None` when the target cannot be
/// met (an intermediate over it holds no label that can still be sliced).
pub(crate) fn slice_tree(
    net: &Net,
    tree: &mut Tree,
    target: f64,
    objective: Objective,
    reconf_size: usize,
    give_up: &dyn Fn() -> bool,
) -> Option<Sliced> {
    let mut sliced_net = net.clone();
    let mut labels = Vec::new();
    let mut slices = 1.0;
    loop {
        let legs = tree.legs(&sliced_net);
        let cost = tree.cost_with_legs(&sliced_net, &legs);
        if cost.largest_intermediate <= target {
            return Some(Sliced { labels, slices, per_slice: cost });
        }
        // Labels of the oversized intermediates, by how many of them hold each.
        let mut seen: rustc_hash::FxHashMap<u32, u32> = rustc_hash::FxHashMap::default();
        for node in tree.post_order() {
            let l = &legs[node as usize];
            if sliced_net.size(l) > target {
                for &(c, _) in l {
                    if sliced_net.sizes[c as usize] > 1.0 {
                        *seen.entry(c).or_default() += 1;
                    }
                }
            }
        }
        let mut candidates: Vec<(u32, u32)> = seen.into_iter().collect();
        candidates.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        candidates.truncate(CANDIDATES);
        let mut best: Option<(u32, f64, TreeCost)> = None;
        for (c, _) in candidates {
            let size = sliced_net.sizes[c as usize];
            sliced_net.sizes[c as usize] = 1.0;
            let per = tree.cost(&sliced_net);
            sliced_net.sizes[c as usize] = size;
            let whole = TreeCost {
                multiply_adds: per.multiply_adds * slices * size,
                largest_intermediate: per.largest_intermediate,
                written: per.written * slices * size,
            };
            let better = best.as_ref().is_none_or(|b| {
                let (x, y) = (objective.score(&whole), objective.score(&b.2));
                x < y || (x == y && whole.largest_intermediate < b.2.largest_intermediate)
            });
            if better {
                best = Some((c, size, whole));
            }
        }
        let (c, size, _) = best?;
        sliced_net.sizes[c as usize] = 1.0;
        slices *= size;
        labels.push(c);
        if reconf_size > 0 {
            reconfigure(&sliced_net, tree, reconf_size, objective, sliced_net.n().min(RECONF_TRIES), give_up);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hyper::greedy::{GreedyParams, greedy};
    use crate::rng::Rng;

    #[test]
    fn a_ring_is_sliced_to_its_target_and_the_slices_add_up() {
        // A ring of 12 matrices of bond 8: intermediates of 64 elements; slice to 8.
        let n = 12u32;
        let inputs: Vec<Vec<u32>> = (0..n).map(|i| vec![i, (i + 1) % n]).collect();
        let net = Net::new(&inputs, &[], &[8; 12]);
        let items = (0..12).map(|i| net.leaf_legs(i)).collect();
        let mut tree = Tree::from_ssa(12, &greedy(&net, items, GreedyParams::PLAIN, &mut Rng::new(0)));
        let whole = tree.cost(&net);
        let sliced = slice_tree(&net, &mut tree, 8.0, Objective::Flops, 8, &|| false).expect("a ring can be sliced");
        assert!(sliced.per_slice.largest_intermediate <= 8.0);
        assert_eq!(sliced.slices, 8f64.powi(sliced.labels.len() as i32));
        // Slicing never lowers the total work below the unsliced tree's.
        assert!(sliced.total().multiply_adds >= whole.multiply_adds);
        // One slice is the tree's cost with the sliced labels of size 1.
        let mut one = net.clone();
        sliced.labels.iter().for_each(|&c| one.sizes[c as usize] = 1.0);
        assert_eq!(tree.cost(&one), sliced.per_slice);
    }

    #[test]
    fn a_target_below_an_unsliceable_operand_is_none() {
        // The scalar result has one element whatever is sliced: a target below it is never met.
        let net = Net::new(&[vec![0, 1], vec![1, 2]], &[], &[8, 8, 8]);
        let mut tree = Tree::from_ssa(2, &[[0, 1]]);
        assert!(slice_tree(&net, &mut tree, 0.5, Objective::Flops, 8, &|| false).is_none());
    }
}
