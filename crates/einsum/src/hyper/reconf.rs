//! Subtree reconfiguration: for each internal node of a tree, take the subtree below it
//! down to a frontier of at most `k` tensors (grown by opening the most expensive node
//! first), find the best way to contract that frontier into the node by dynamic
//! programming over its subsets, and rebuild the subtree that way when it is cheaper.
//! The node's legs depend only on its leaves (`tree.rs`), so nothing above it changes,
//! and a rebuild is never accepted unless it lowers the objective: reconfiguration never
//! makes a tree worse.
//!
//! The DP works on the frontier's own labels, renumbered into a 256-bit set (a frontier
//! over more labels is skipped), each label with the frontier tensors holding it and
//! whether the node keeps it.
//!
//! A sweep visits the nodes children before parents, or, on trees of at least
//! `MOST_EXPENSIVE_FIRST` nodes (where a sweep rarely ends within a budget), the most
//! expensive node first.
//!
//! Complexity: `O(3^k)` subset splits per node, each a union of two label sets and its
//! size; `k = 8` (6 561 splits) is the default, as in the literature's reconfiguration.

use super::options::Objective;
use super::tree::{Legs, Net, Tree};

/// Trees of at least this many internal nodes are swept most expensive node first, not
/// children before parents.
const MOST_EXPENSIVE_FIRST: usize = 4096;

/// A set of up to 256 local labels.
type Set = [u64; 4];

fn or(a: &Set, b: &Set) -> Set {
    [a[0] | b[0], a[1] | b[1], a[2] | b[2], a[3] | b[3]]
}

/// A partial score: the objective's value and, for ties, the multiply-adds.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Score {
    key: f64,
    flops: f64,
}

impl Score {
    const ZERO: Score = Score { key: 0.0, flops: 0.0 };
    const INFINITE: Score = Score { key: f64::INFINITY, flops: f64::INFINITY };

    fn better(&self, o: &Score) -> bool {
        self.key < o.key || (self.key == o.key && self.flops < o.flops)
    }

    /// Joins two children's scores with a step touching `touched` elements whose result
    /// has `result` elements.
    fn join(objective: Objective, a: Score, b: Score, touched: f64, result: f64) -> Score {
        let flops = a.flops + b.flops + touched;
        let key = match objective {
            Objective::Flops => flops,
            Objective::Size => a.key.max(b.key).max(result),
            Objective::Write => a.key + b.key + result,
            Objective::Combo { factor } => a.key + b.key + touched + factor * result,
        };
        Score { key, flops }
    }
}

/// Reconfigures `tree` in place (see the module docs), at most `passes` sweeps over its
/// nodes or until a sweep improves nothing or `give_up` says so (asked every 64 nodes).
/// Returns whether anything changed.
pub(crate) fn reconfigure(
    net: &Net,
    tree: &mut Tree,
    k: usize,
    objective: Objective,
    passes: usize,
    give_up: &dyn Fn() -> bool,
) -> bool {
    let k = k.clamp(3, 12);
    let mut legs = tree.legs(net);
    let mut changed = false;
    let mut dp = Dp::default();
    for _ in 0..passes {
        let mut improved = false;
        let mut order = tree.post_order();
        if order.len() >= MOST_EXPENSIVE_FIRST {
            // A pass over a large tree rarely ends within a budget: the nodes that cost
            // the most come first, where a rebuild saves the most.
            let mut scratch = Legs::new();
            let mut keyed: Vec<(f64, u32)> = order
                .iter()
                .map(|&x| {
                    let [a, b] = tree.kids(x);
                    (net.merge(&legs[a as usize], &legs[b as usize], &mut scratch), x)
                })
                .collect();
            keyed.sort_unstable_by(|p, q| q.0.total_cmp(&p.0).then(p.1.cmp(&q.1)));
            order = keyed.into_iter().map(|(_, x)| x).collect();
        }
        for (i, node) in order.into_iter().enumerate() {
            if i % 64 == 0 && give_up() {
                return changed;
            }
            improved |= reconfigure_node(net, tree, &mut legs, node, k, objective, &mut dp);
        }
        changed |= improved;
        if !improved {
            break;
        }
    }
    changed
}

/// The DP's tables, kept between nodes.
#[derive(Default)]
struct Dp {
    legs: Vec<Set>,
    best: Vec<Score>,
    split: Vec<u32>,
}

/// One node's reconfiguration; whether it rebuilt the subtree.
fn reconfigure_node(
    net: &Net,
    tree: &mut Tree,
    legs: &mut [Legs],
    node: u32,
    k: usize,
    objective: Objective,
    dp: &mut Dp,
) -> bool {
    // The frontier: open the most expensive internal node until k tensors.
    let mut frontier = vec![node];
    let mut inner: Vec<u32> = Vec::new();
    let mut scratch = Legs::new();
    let touched = |x: u32, scratch: &mut Legs| {
        let [a, b] = tree.kids(x);
        net.merge(&legs[a as usize], &legs[b as usize], scratch)
    };
    while frontier.len() < k {
        let open = frontier
            .iter()
            .enumerate()
            .filter(|&(_, &x)| !tree.is_leaf(x))
            .map(|(i, &x)| (i, touched(x, &mut scratch)))
            .max_by(|a, b| a.1.total_cmp(&b.1));
        let Some((i, _)) = open else { break };
        let x = frontier.swap_remove(i);
        inner.push(x);
        frontier.extend(tree.kids(x));
    }
    let m = frontier.len();
    if m < 3 {
        return false;
    }
    // The current subtree's score, children before parents (reverse of opening order).
    let mut current: Vec<(u32, Score)> = frontier.iter().map(|&x| (x, Score::ZERO)).collect();
    let score_of = |x: u32, current: &[(u32, Score)]| current.iter().find(|e| e.0 == x).map(|e| e.1);
    for &x in inner.iter().rev() {
        let [a, b] = tree.kids(x);
        let (sa, sb) = (score_of(a, &current).expect("child scored"), score_of(b, &current).expect("child scored"));
        let t = touched(x, &mut scratch);
        current.push((x, Score::join(objective, sa, sb, t, net.size(&legs[x as usize]))));
    }
    let now = score_of(node, &current).expect("node scored");
    // Local labels.
    let mut local: Vec<u32> = frontier.iter().flat_map(|&x| legs[x as usize].iter().map(|&(c, _)| c)).collect();
    local.sort_unstable();
    local.dedup();
    if local.len() > 256 {
        return false;
    }
    let index = |c: u32| local.binary_search(&c).expect("a frontier label");
    let mut holders = vec![0u32; local.len()];
    let mut item_sets = vec![[0u64; 4]; m];
    for (i, &x) in frontier.iter().enumerate() {
        for &(c, _) in &legs[x as usize] {
            let l = index(c);
            holders[l] |= 1 << i;
            item_sets[i][l / 64] |= 1 << (l % 64);
        }
    }
    let mut keep: Set = [0; 4];
    for &(c, _) in &legs[node as usize] {
        let l = index(c);
        keep[l / 64] |= 1 << (l % 64);
    }
    let sizes: Vec<f64> = local.iter().map(|&c| net.sizes[c as usize]).collect();
    let size = |s: &Set| -> f64 {
        let mut p = 1.0;
        for (w, &word) in s.iter().enumerate() {
            let mut x = word;
            while x != 0 {
                p *= sizes[w * 64 + x.trailing_zeros() as usize];
                x &= x - 1;
            }
        }
        p
    };
    let full = (1u32 << m) - 1;
    dp.legs.clear();
    dp.legs.resize(1 << m, [0; 4]);
    dp.best.clear();
    dp.best.resize(1 << m, Score::INFINITE);
    dp.split.clear();
    dp.split.resize(1 << m, 0);
    for (i, set) in item_sets.iter().enumerate() {
        dp.legs[1 << i] = *set;
        dp.best[1 << i] = Score::ZERO;
    }
    for s in 1..=full {
        if s.count_ones() < 2 {
            continue;
        }
        // The labels the subset keeps: held by it, and by the node or a tensor outside it.
        let low = s & s.wrapping_neg();
        let union = or(&dp.legs[low as usize], &dp.legs[(s ^ low) as usize]);
        let mut kept = union;
        for (w, word) in union.iter().enumerate() {
            let mut x = *word;
            while x != 0 {
                let l = w * 64 + x.trailing_zeros() as usize;
                if holders[l] & !s == 0 && keep[l / 64] >> (l % 64) & 1 == 0 {
                    kept[w] &= !(1 << (l % 64));
                }
                x &= x - 1;
            }
        }
        dp.legs[s as usize] = kept;
        let result = size(&kept);
        // Splits whose first part holds the lowest member, so each pair is seen once.
        let rest = s ^ low;
        let mut sub = rest;
        loop {
            let a = sub | low;
            let b = s ^ a;
            if b != 0 {
                let (sa, sb) = (dp.best[a as usize], dp.best[b as usize]);
                if sa.key.is_finite() && sb.key.is_finite() {
                    let t = size(&or(&dp.legs[a as usize], &dp.legs[b as usize]));
                    let cand = Score::join(objective, sa, sb, t, result);
                    if cand.better(&dp.best[s as usize]) {
                        dp.best[s as usize] = cand;
                        dp.split[s as usize] = a;
                    }
                }
            }
            if sub == 0 {
                break;
            }
            sub = (sub - 1) & rest;
        }
    }
    let best = dp.best[full as usize];
    if !(best.key < now.key * (1.0 - 1e-12) || (best.key <= now.key && best.flops < now.flops * (1.0 - 1e-12))) {
        return false;
    }
    // Rebuild: the node keeps its id, the other opened nodes' ids are reused.
    let mut spare = inner;
    spare.retain(|&x| x != node);
    let mut stack = vec![(full, node)];
    let mut built: Vec<u32> = Vec::new();
    while let Some((s, id)) = stack.pop() {
        let a = dp.split[s as usize];
        let b = s ^ a;
        let mut child = |part: u32, stack: &mut Vec<(u32, u32)>| {
            if part.count_ones() == 1 {
                frontier[part.trailing_zeros() as usize]
            } else {
                let c = spare.pop().expect("an opened node to reuse");
                stack.push((part, c));
                c
            }
        };
        let ca = child(a, &mut stack);
        let cb = child(b, &mut stack);
        tree.set_kids(id, [ca, cb]);
        built.push(id);
    }
    // Legs of the rebuilt nodes, children first (reverse of the build order).
    for &x in built.iter().rev() {
        let [a, b] = tree.kids(x);
        net.merge(&legs[a as usize], &legs[b as usize], &mut scratch);
        legs[x as usize] = std::mem::take(&mut scratch);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_chain_order_is_reconfigured_to_the_cheap_one() {
        // ((A·C)·B)·D on a chain A-B-C-D of bond 10 with a large middle: the outer product
        // A·C first is expensive; reconfiguration must find the chain order.
        let inputs = vec![vec![0, 1], vec![1, 2], vec![2, 3], vec![3, 4]];
        let net = Net::new(&inputs, &[0, 4], &[2, 10, 10, 10, 2]);
        let mut tree = Tree::from_ssa(4, &[[0, 2], [4, 1], [5, 3]]);
        let before = tree.cost(&net).multiply_adds;
        assert!(reconfigure(&net, &mut tree, 8, Objective::Flops, 4, &|| false));
        let after = tree.cost(&net).multiply_adds;
        assert!(after < before, "{after} !< {before}");
        // The best order: A·B (2·10·10), then ·C (2·10·10), then ·D (2·10·2).
        assert_eq!(after, 440.0);
        assert_eq!(tree.post_order().len(), 3);
    }
}
