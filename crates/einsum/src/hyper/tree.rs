//! The values every driver shares: [`Net`], a numbered network in the form the searches
//! read (distinct sorted labels per operand, each label's holder count); [`Legs`], the
//! labels a tensor of the tree keeps with how many inputs below it hold each; [`Tree`], a
//! binary contraction tree as child columns; and its [`TreeCost`].
//!
//! Invariants:
//! - Leaves are the inputs, ids `0..n`; a tree of `n ≥ 1` inputs has `n − 1` internal
//!   nodes, ids `n..2n − 1` in no particular order (reconfiguration reuses ids), each with
//!   two children; `root` reaches every node.
//! - A tensor's legs are the labels of its subtree's inputs that the output or an input
//!   outside the subtree still holds, so the legs of a node depend only on its set of
//!   leaves, never on the shape of the subtree below it. That is why a driver may rebuild
//!   a subtree and leave every node above it as it was.
//! - The cost of an internal node is the product of the sizes of every label its two
//!   children hold (the multiply-adds of the step's direct loop), as
//!   [`crate::search::path_cost`] counts a pairwise step.
//!
//! Traversals are iterative (explicit stacks): trees of `10^5` leaves are chains as often
//! as they are balanced.

use crate::path::{ContractionPath, positional_path};

use super::options::TreeCost;

/// A label and how many inputs of a subtree hold it.
pub(crate) type Leg = (u32, u32);

/// A tensor's legs, sorted by label.
pub(crate) type Legs = Vec<Leg>;

/// Marks a leaf's missing children.
pub(crate) const NONE: u32 = u32::MAX;

/// A numbered network as the drivers read it.
#[derive(Clone, Debug)]
pub(crate) struct Net {
    /// Each input's labels, distinct and sorted.
    pub(crate) inputs: Vec<Vec<u32>>,
    /// Each label's size.
    pub(crate) sizes: Vec<f64>,
    /// How many inputs hold each label.
    pub(crate) count: Vec<u32>,
    /// Whether the output holds each label.
    pub(crate) is_out: Vec<bool>,
    /// The multiply-adds of the sums done first (labels one input alone holds, summed out
    /// of it before any pairwise step, as the plan runs them): every tree pays them.
    pub(crate) first_sums: f64,
}

impl Net {
    /// The network as the drivers read it: the inputs after the sums done first
    /// (`crate::cost::sums_first`, the one cost model), so a tree's cost is
    /// [`crate::search::path_cost`] of its path less the final reordering.
    pub(crate) fn new(inputs: &[Vec<u32>], output: &[u32], sizes: &[usize]) -> Net {
        let (reduced, summed) = crate::cost::sums_first(inputs, output, sizes);
        let first_sums = inputs
            .iter()
            .zip(&summed)
            .filter(|(_, s)| **s)
            .map(|(l, _)| crate::path::distinct(l).iter().map(|&c| sizes[c as usize] as f64).product::<f64>())
            .sum();
        let mut count = vec![0u32; sizes.len()];
        let inputs: Vec<Vec<u32>> = reduced
            .iter()
            .map(|l| {
                let mut l = l.clone();
                l.sort_unstable();
                l.dedup();
                l.iter().for_each(|&c| count[c as usize] += 1);
                l
            })
            .collect();
        let mut is_out = vec![false; sizes.len()];
        output.iter().for_each(|&c| is_out[c as usize] = true);
        Net { inputs, sizes: sizes.iter().map(|&s| s as f64).collect(), count, is_out, first_sums }
    }

    pub(crate) fn n(&self) -> usize {
        self.inputs.len()
    }

    pub(crate) fn leaf_legs(&self, i: usize) -> Legs {
        self.inputs[i].iter().map(|&c| (c, 1)).collect()
    }

    /// The product of the sizes of `legs`' labels.
    pub(crate) fn size(&self, legs: &[Leg]) -> f64 {
        legs.iter().map(|&(c, _)| self.sizes[c as usize]).product()
    }

    /// Contracts `a` with `b`: writes the result's legs to `out` and returns the product
    /// of the sizes of every label either holds (the step's multiply-adds).
    pub(crate) fn merge(&self, a: &[Leg], b: &[Leg], out: &mut Legs) -> f64 {
        out.clear();
        let mut touched = 1.0;
        let (mut i, mut j) = (0, 0);
        let mut keep = |out: &mut Legs, c: u32, k: u32| {
            touched *= self.sizes[c as usize];
            if self.is_out[c as usize] || k < self.count[c as usize] {
                out.push((c, k));
            }
        };
        while i < a.len() && j < b.len() {
            let (ca, ka) = a[i];
            let (cb, kb) = b[j];
            if ca == cb {
                keep(out, ca, ka + kb);
                i += 1;
                j += 1;
            } else if ca < cb {
                keep(out, ca, ka);
                i += 1;
            } else {
                keep(out, cb, kb);
                j += 1;
            }
        }
        a[i..].iter().for_each(|&(c, k)| keep(out, c, k));
        b[j..].iter().for_each(|&(c, k)| keep(out, c, k));
        touched
    }
}

/// A binary contraction tree over a network's inputs (see the module's invariants).
#[derive(Clone, Debug)]
pub(crate) struct Tree {
    n: usize,
    kids: Vec<[u32; 2]>,
    root: u32,
}

impl Tree {
    /// The tree of SSA merges: merge `k` makes node `n + k` from two earlier nodes, and the
    /// last merge is the root (`n − 1` merges for `n` inputs).
    pub(crate) fn from_ssa(n: usize, merges: &[[u32; 2]]) -> Tree {
        debug_assert_eq!(merges.len(), n.saturating_sub(1));
        let mut kids = vec![[NONE, NONE]; n];
        kids.extend_from_slice(merges);
        let root = if n == 0 { NONE } else { (kids.len() - 1) as u32 };
        Tree { n, kids, root }
    }

    /// A tree from its child column (leaves `0..n` first, then internal nodes) and root.
    pub(crate) fn from_kids(n: usize, kids: Vec<[u32; 2]>, root: u32) -> Tree {
        debug_assert_eq!(kids.len(), (2 * n).saturating_sub(1));
        Tree { n, kids, root }
    }

    #[cfg(test)]
    pub(crate) fn root(&self) -> u32 {
        self.root
    }

    pub(crate) fn kids(&self, node: u32) -> [u32; 2] {
        self.kids[node as usize]
    }

    pub(crate) fn set_kids(&mut self, node: u32, kids: [u32; 2]) {
        self.kids[node as usize] = kids;
    }

    pub(crate) fn is_leaf(&self, node: u32) -> bool {
        (node as usize) < self.n
    }

    /// Internal nodes, children before parents (an iterative post-order from the root).
    pub(crate) fn post_order(&self) -> Vec<u32> {
        let mut order = Vec::with_capacity(self.n.saturating_sub(1));
        if self.n < 2 {
            return order;
        }
        let mut stack = vec![(self.root, false)];
        while let Some((node, expanded)) = stack.pop() {
            if self.is_leaf(node) {
                continue;
            }
            if expanded {
                order.push(node);
            } else {
                stack.push((node, true));
                let [a, b] = self.kids(node);
                stack.push((b, false));
                stack.push((a, false));
            }
        }
        order
    }

    /// Every node's legs (leaves included), indexed by node id.
    pub(crate) fn legs(&self, net: &Net) -> Vec<Legs> {
        let mut legs: Vec<Legs> =
            (0..self.kids.len()).map(|i| if i < self.n { net.leaf_legs(i) } else { Vec::new() }).collect();
        let mut out = Legs::new();
        for node in self.post_order() {
            let [a, b] = self.kids(node);
            net.merge(&legs[a as usize], &legs[b as usize], &mut out);
            legs[node as usize] = std::mem::take(&mut out);
        }
        legs
    }

    /// The tree's cost on `net`. Each node's legs are dropped once its parent is made, so
    /// the memory is that of the tensors alive at once, not of every node's legs (which on
    /// a wide tree of 10^4 leaves is hundreds of megabytes).
    pub(crate) fn cost(&self, net: &Net) -> TreeCost {
        let mut legs: Vec<Legs> =
            (0..self.kids.len()).map(|i| if i < self.n { net.leaf_legs(i) } else { Vec::new() }).collect();
        let mut cost = TreeCost { multiply_adds: net.first_sums, ..TreeCost::default() };
        let mut out = Legs::new();
        for node in self.post_order() {
            let [a, b] = self.kids(node);
            cost.multiply_adds += net.merge(&legs[a as usize], &legs[b as usize], &mut out);
            let size = net.size(&out);
            cost.largest_intermediate = cost.largest_intermediate.max(size);
            cost.written += size;
            legs[a as usize] = Vec::new();
            legs[b as usize] = Vec::new();
            legs[node as usize] = std::mem::take(&mut out);
        }
        cost
    }

    /// The tree's cost given every node's legs.
    pub(crate) fn cost_with_legs(&self, net: &Net, legs: &[Legs]) -> TreeCost {
        let mut cost = TreeCost { multiply_adds: net.first_sums, ..TreeCost::default() };
        let mut union = Legs::new();
        for node in self.post_order() {
            let [a, b] = self.kids(node);
            cost.multiply_adds += net.merge(&legs[a as usize], &legs[b as usize], &mut union);
            let size = net.size(&legs[node as usize]);
            cost.largest_intermediate = cost.largest_intermediate.max(size);
            cost.written += size;
        }
        cost
    }

    /// The tree as a path in opt_einsum's format: the internal nodes in post-order, each
    /// naming its children's positions in the operand list as it stands (inputs first,
    /// each result appended; [`positional_path`]).
    pub(crate) fn to_path(&self) -> ContractionPath {
        let order = self.post_order();
        let mut slot = vec![u32::MAX; self.kids.len()];
        (0..self.n).for_each(|i| slot[i] = i as u32);
        let mut pairs = Vec::with_capacity(order.len());
        for (k, &node) in order.iter().enumerate() {
            let [a, b] = self.kids(node);
            pairs.push([slot[a as usize] as usize, slot[b as usize] as usize]);
            slot[node as usize] = (self.n + k) as u32;
        }
        positional_path(self.n, &pairs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::search::path_cost;

    #[test]
    fn a_chain_tree_has_path_cost_s_count_and_its_positions() {
        // (2x30)(30x40)(40x2): right to left is 30·40·2 + 2·30·2 = 2520.
        let inputs = vec![vec![0, 1], vec![1, 2], vec![2, 3]];
        let sizes = [2, 30, 40, 2];
        let net = Net::new(&inputs, &[0, 3], &sizes);
        let tree = Tree::from_ssa(3, &[[1, 2], [0, 3]]);
        let path = tree.to_path();
        assert_eq!(path, ContractionPath::new(vec![[1, 2], [0, 1]]));
        let cost = tree.cost(&net);
        assert_eq!(cost.multiply_adds, path_cost(&inputs, &[0, 3], &sizes, &path).unwrap());
        assert_eq!((cost.largest_intermediate, cost.written), (60.0, 64.0));
    }

    #[test]
    fn legs_keep_output_labels_and_labels_held_outside() {
        let net = Net::new(&[vec![0, 1], vec![1, 2], vec![2, 0]], &[0], &[2, 3, 4]);
        let mut out = Legs::new();
        let touched = net.merge(&net.leaf_legs(0), &net.leaf_legs(1), &mut out);
        assert_eq!(touched, 24.0);
        // Label 1 is held by both and nowhere else: summed; 0 is in the output; 2 is held by input 2.
        assert_eq!(out, vec![(0, 1), (2, 1)]);
    }
}
