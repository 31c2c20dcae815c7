//! The simulated-annealing driver (TreeSA, Kalachev et al. 2021; Liu et al. 2023): start
//! from a randomized greedy tree and apply local rotations, each accepted by the
//! Metropolis rule at an inverse temperature that rises sweep by sweep.
//!
//! A rotation acts on a node `x = (a, y)` whose child `y = (b, c)` is internal: it swaps
//! `a` with one of `y`'s children, giving `x = (b, (a, c))` or `x = (c, (a, b))`. Only `y`
//! changes its set of leaves, so only `x` and `y` change their cost (legs depend on leaves
//! alone, `tree.rs`): a move is judged by the two steps' costs, in bits,
//! `Δ = log2(new x + new y) − log2(old x + old y)`, which is what makes the walk
//! scale-free: a rotation deep in the tree, among small tensors, weighs as much as one at
//! the top. Moves that lower the cost are always taken; others with probability
//! `2^(−β·Δ)`.
//!
//! Parameters: the greedy start's parameters, the first and last inverse temperatures
//! (β rises geometrically between them), and the number of sweeps, each one move tried at
//! every internal node.
//!
//! Complexity: `O(sweeps · n · d)` for `n` inputs of about `d` legs each; the deadline is
//! asked after every sweep.

use std::time::Instant;

use super::greedy::{GreedyParams, greedy};
use super::options::Objective;
use super::tree::{Legs, Net, Tree};
use crate::rng::Rng;

/// The annealing driver's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct AnnealParams {
    /// The inverse temperature of the first sweep, per bit of cost.
    pub(crate) beta_start: f64,
    /// The inverse temperature of the last sweep.
    pub(crate) beta_end: f64,
    /// Sweeps over the tree's internal nodes.
    pub(crate) sweeps: usize,
    /// The starting tree's greedy parameters.
    pub(crate) greedy: GreedyParams,
}

/// A tree annealed from a randomized greedy start (see the module docs), stopping early
/// at `deadline`.
pub(crate) fn anneal_tree(
    net: &Net,
    params: AnnealParams,
    objective: Objective,
    rng: &mut Rng,
    deadline: Option<Instant>,
) -> Tree {
    let n = net.n();
    let items = (0..n).map(|i| net.leaf_legs(i)).collect();
    let mut tree = Tree::from_ssa(n, &greedy(net, items, params.greedy, rng));
    if n < 3 {
        return tree;
    }
    let mut legs = tree.legs(net);
    let mut scratch = Legs::new();
    // Each internal node's own step cost, kept as moves change the tree.
    let mut cost = vec![0.0; legs.len()];
    for x in n..legs.len() {
        let [a, b] = tree.kids(x as u32);
        let touched = net.merge(&legs[a as usize], &legs[b as usize], &mut scratch);
        cost[x] = objective.step_cost(touched, net.size(&legs[x]));
    }
    let sweeps = params.sweeps.max(1);
    let ratio = (params.beta_end / params.beta_start).max(1.0);
    let mut joined = Legs::new();
    for sweep in 0..sweeps {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let beta = params.beta_start * ratio.powf(sweep as f64 / (sweeps - 1).max(1) as f64);
        for x in n as u32..legs.len() as u32 {
            let [p, q] = tree.kids(x);
            let (a, y) = match (tree.is_leaf(p), tree.is_leaf(q)) {
                (true, true) => continue,
                (true, false) => (p, q),
                (false, true) => (q, p),
                (false, false) => {
                    if rng.unit() < 0.5 {
                        (p, q)
                    } else {
                        (q, p)
                    }
                }
            };
            let [b, c] = tree.kids(y);
            // Keep one of y's children beside `a` under y, move the other up to x.
            let (up, stay) = if rng.unit() < 0.5 { (b, c) } else { (c, b) };
            let touched_y = net.merge(&legs[a as usize], &legs[stay as usize], &mut joined);
            let new_y = objective.step_cost(touched_y, net.size(&joined));
            let touched_x = net.merge(&legs[up as usize], &joined, &mut scratch);
            let new_x = objective.step_cost(touched_x, net.size(&legs[x as usize]));
            let old = cost[x as usize] + cost[y as usize];
            let delta = (new_x + new_y).log2() - old.log2();
            if delta <= 0.0 || rng.unit() < (-beta * delta).exp2() {
                tree.set_kids(y, [a, stay]);
                tree.set_kids(x, [up, y]);
                std::mem::swap(&mut legs[y as usize], &mut joined);
                cost[y as usize] = new_y;
                cost[x as usize] = new_x;
            }
        }
    }
    tree
}
