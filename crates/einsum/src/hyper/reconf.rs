//! Subtree reconfiguration: take an internal node of a tree and the subtree below it down
//! to a frontier of at most `k` tensors (opened breadth first), find the best way to
//! contract that frontier into the node by dynamic programming over its subsets, and
//! rebuild the subtree that way when it is cheaper. Nodes are taken most expensive step
//! first, again and again as rebuilds change the tree, since a tree's cost is dominated by
//! its few most expensive steps; a frontier already solved is not solved twice.
//! The node's legs depend only on its leaves (`tree.rs`), so nothing above it changes,
//! and a rebuild is never accepted unless it lowers the objective: reconfiguration never
//! makes a tree worse.
//!
//! The DP works on the frontier's own labels, renumbered into a 256-bit set (a frontier
//! over more labels is skipped), each label with the frontier tensors holding it and
//! whether the node keeps it.
//!
//! Complexity: `O(3^k)` subset splits per node, each a union of two label sets and its
//! size; `k = 8` (6 561 splits) is the default, as in the literature's reconfiguration.

use super::options::Objective;
use super::tree::{Legs, Net, Tree};

/// Subtrees a trial's reconfiguration solves, at most: one per node of the tree up to
/// this many. Every trial is reconfigured, however poor its raw tree: raw trees that
/// differ by 10^3 in flops often swap places once reconfigured, so the tuner must see the
/// reconfigured costs.
pub(crate) const RECONF_TRIES: usize = 1024;

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

/// Reconfigures the most expensive nodes first: pops the node whose step costs most,
/// rebuilds its subtree when a better order exists, and puts the rebuilt nodes and the
/// ancestors whose subtrees may now differ back in line; a frontier already optimized is
/// not solved again. At most `max_tries` subtrees are solved.
pub(crate) fn reconfigure(
    net: &Net,
    tree: &mut Tree,
    k: usize,
    objective: Objective,
    max_tries: usize,
    give_up: &dyn Fn() -> bool,
) -> bool {
    use std::hash::{Hash, Hasher};
    let k = k.clamp(3, 12);
    let mut legs = tree.legs(net);
    let total = legs.len();
    let mut parent = vec![super::tree::NONE; total];
    let order = tree.post_order();
    for &x in &order {
        for c in tree.kids(x) {
            parent[c as usize] = x;
        }
    }
    let mut scratch = Legs::new();
    let cost_of = |tree: &Tree, legs: &[Legs], x: u32, scratch: &mut Legs| {
        let [a, b] = tree.kids(x);
        let t = net.merge(&legs[a as usize], &legs[b as usize], scratch);
        objective.step_cost(t, net.size(&legs[x as usize]))
    };
    // Each internal node's step cost, kept as rebuilds change it: a popped entry whose key
    // differs is stale (the node was rebuilt and queued again), found without a merge.
    let mut cost = vec![0.0; legs.len()];
    for &x in &order {
        cost[x as usize] = cost_of(tree, &legs, x, &mut scratch);
    }
    let mut heap: std::collections::BinaryHeap<(Key, u32)> =
        order.iter().map(|&x| (Key(cost[x as usize]), x)).collect();
    let mut seen: rustc_hash::FxHashSet<u64> = rustc_hash::FxHashSet::default();
    let mut dp = Dp::default();
    let mut tries = 0;
    let mut changed = false;
    while let Some((Key(c), node)) = heap.pop() {
        if tries >= max_tries || (tries % 32 == 31 && give_up()) {
            break;
        }
        if cost[node as usize] != c {
            continue;
        }
        let (frontier, inner) = frontier_of(tree, node, k);
        let mut key = frontier.clone();
        key.sort_unstable();
        let mut h = rustc_hash::FxHasher::default();
        key.hash(&mut h);
        if !seen.insert(h.finish()) {
            continue;
        }
        tries += 1;
        let Some(built) = optimize_subtree(net, tree, &mut legs, node, frontier, inner, objective, &mut dp) else {
            continue;
        };
        changed = true;
        for &x in &built {
            for c in tree.kids(x) {
                parent[c as usize] = x;
            }
        }
        for &x in &built {
            cost[x as usize] = cost_of(tree, &legs, x, &mut scratch);
            heap.push((Key(cost[x as usize]), x));
        }
        // Ancestors within reach: their frontiers may now open the rebuilt nodes (their
        // own steps, over the same leaves, cost what they did).
        let mut up = parent[node as usize];
        for _ in 0..k {
            if up == super::tree::NONE {
                break;
            }
            heap.push((Key(cost[up as usize]), up));
            up = parent[up as usize];
        }
    }
    changed
}

/// An `f64` ordered for the heap (costs are never NaN).
#[derive(Clone, Copy, PartialEq)]
struct Key(f64);
impl Eq for Key {}
impl PartialOrd for Key {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Key {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}

/// The DP's tables, kept between nodes.
#[derive(Default)]
struct Dp {
    legs: Vec<Set>,
    best: Vec<Score>,
    split: Vec<u32>,
    /// Per byte of a label set, the product of the sizes of each byte value's labels: a
    /// set's size is one lookup per byte in use, not one multiplication per label (the
    /// size of a split's labels is the DP's innermost work).
    bytes: Vec<[f64; 256]>,
}

/// The frontier below `node`: internal nodes opened breadth first (their children join the
/// end of the line, tensors of the network stay) until it holds `k` nodes or only tensors.
/// Returns the frontier and the opened nodes (`node` first). Breadth first gives balanced
/// subtrees: opening the most expensive node instead dives down one branch, and the
/// reconfigured orders improve far less (32.6 → 27.8 against 26.0 log10 flops on a random
/// 4-regular network of 250 tensors).
fn frontier_of(tree: &Tree, node: u32, k: usize) -> (Vec<u32>, Vec<u32>) {
    let mut frontier = vec![node];
    let mut inner: Vec<u32> = Vec::new();
    let mut next = 0;
    while frontier.len() < k {
        while next < frontier.len() && tree.is_leaf(frontier[next]) {
            next += 1;
        }
        if next == frontier.len() {
            break;
        }
        let x = frontier.remove(next);
        inner.push(x);
        frontier.extend(tree.kids(x));
    }
    (frontier, inner)
}

/// Rebuilds the subtree of `node` over `frontier` (its opened nodes `inner`) in the best
/// order, when that beats the current one; returns the rebuilt nodes.
#[allow(clippy::too_many_arguments)]
fn optimize_subtree(
    net: &Net,
    tree: &mut Tree,
    legs: &mut [Legs],
    node: u32,
    frontier: Vec<u32>,
    inner: Vec<u32>,
    objective: Objective,
    dp: &mut Dp,
) -> Option<Vec<u32>> {
    let mut scratch = Legs::new();
    let touched = |x: u32, scratch: &mut Legs| {
        let [a, b] = tree.kids(x);
        net.merge(&legs[a as usize], &legs[b as usize], scratch)
    };
    let m = frontier.len();
    if m < 3 {
        return None;
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
        return None;
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
    let used = local.len().div_ceil(8);
    dp.bytes.clear();
    dp.bytes.resize(used, [1.0; 256]);
    for (i, table) in dp.bytes.iter_mut().enumerate() {
        for v in 1..256usize {
            let low = v.trailing_zeros() as usize;
            let size = local.get(8 * i + low).map_or(1.0, |&c| net.sizes[c as usize]);
            table[v] = table[v & (v - 1)] * size;
        }
    }
    let bytes = std::mem::take(&mut dp.bytes);
    let size = |s: &Set| -> f64 {
        let mut p = 1.0;
        for (i, table) in bytes.iter().enumerate() {
            p *= table[(s[i / 8] >> (8 * (i % 8))) as usize & 0xff];
        }
        p
    };
    let full = (1u32 << m) - 1;
    let exhaustive = m == net.n();
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
        // Splits whose first part holds the lowest member, so each pair is seen once,
        // and whose parts share a label: a subset that cannot be split so stays
        // infeasible. Outer products are rarely best, and skipping them spares about a
        // third of the DP's time on a random regular network. They are allowed when the
        // frontier is the whole network, where the answer must be exact, and for the
        // whole frontier when it has no other split.
        let rest = s ^ low;
        for outer in [exhaustive, true] {
            let mut sub = rest;
            loop {
                let a = sub | low;
                let b = s ^ a;
                if b != 0 {
                    let (sa, sb) = (dp.best[a as usize], dp.best[b as usize]);
                    let (la, lb) = (&dp.legs[a as usize], &dp.legs[b as usize]);
                    let shared = (la[0] & lb[0]) | (la[1] & lb[1]) | (la[2] & lb[2]) | (la[3] & lb[3]) != 0;
                    // A step touches at least its result's labels: a bound that spares
                    // the size of the split's labels when it cannot win (exact, ties kept).
                    let bound = Score::join(objective, sa, sb, result, result);
                    if (shared || outer)
                        && sa.key.is_finite()
                        && sb.key.is_finite()
                        && bound.key <= dp.best[s as usize].key
                    {
                        let t = size(&or(la, lb));
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
            if outer || s != full || dp.best[s as usize].key.is_finite() {
                break;
            }
        }
    }
    dp.bytes = bytes;
    let best = dp.best[full as usize];
    if !(best.key < now.key * (1.0 - 1e-12) || (best.key <= now.key && best.flops < now.flops * (1.0 - 1e-12))) {
        return None;
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
    Some(built)
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
        assert!(reconfigure(&net, &mut tree, 8, Objective::Flops, 16, &|| false));
        let after = tree.cost(&net).multiply_adds;
        assert!(after < before, "{after} !< {before}");
        // The best order: A·B (2·10·10), then ·C (2·10·10), then ·D (2·10·2).
        assert_eq!(after, 440.0);
        assert_eq!(tree.post_order().len(), 3);
    }
}
