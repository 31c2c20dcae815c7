//! The recursive-bisection driver: split the network's inputs in two groups that share
//! as little as possible (METIS's multilevel bisection of the graph whose vertices are the
//! inputs and whose edges are their shared summed labels, each weighted by the log of its
//! size), split each group again, and so on down to groups of at most `cutoff` inputs,
//! which the greedy driver contracts; then each pair of sibling groups is one contraction.
//! A cut label is one that stays open until the siblings meet, so a bisection with a small
//! cut keeps the intermediates small, and balanced halves keep the tree shallow.
//!
//! Parameters: the imbalance METIS may allow, the cutoff, the greedy parameters of the
//! small groups, and METIS's seed (drawn per trial).
//!
//! Why METIS (the `metis` crate, its C source vendored and built by `cc`): a multilevel
//! partitioner (coarsen, bisect, refine back up) finds far smaller cuts than a flat
//! Kernighan–Lin or Fiduccia–Mattheyses pass on graphs of hundreds of vertices and more,
//! and it is the partitioner tensor-network planners use where KaHyPar is missing. Labels
//! held by more than two inputs become cliques (or, past [`CLIQUE_MAX`] holders, a chain),
//! as METIS partitions graphs, not hypergraphs.
//!
//! Groups wait on an explicit stack, and the tree is assembled bottom-up over the groups
//! in reverse creation order, so nothing recurses.

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use super::greedy::{GreedyParams, greedy};
use super::rng::Rng;
use super::tree::{NONE, Net, Tree};

/// Labels held by more than this many inputs of a group join them by a chain of edges,
/// not a clique (a clique of `k` vertices has `k(k − 1)/2` edges).
const CLIQUE_MAX: usize = 16;

/// The bisection driver's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct PartitionParams {
    /// The load imbalance METIS may allow, as a fraction (0.01 to 0.9).
    pub(crate) imbalance: f64,
    /// Groups of at most this many inputs are contracted by the greedy driver.
    pub(crate) cutoff: usize,
    /// The greedy driver's parameters within small groups.
    pub(crate) greedy: GreedyParams,
}

/// A group of inputs: its members, or the two groups it was split into.
struct Group {
    members: Vec<u32>,
    halves: Option<[usize; 2]>,
}

/// A tree by recursive bisection (see the module docs).
pub(crate) fn partition_tree(net: &Net, params: PartitionParams, rng: &mut Rng) -> Tree {
    let n = net.n();
    let cutoff = params.cutoff.max(2);
    let mut groups = vec![Group { members: (0..n as u32).collect(), halves: None }];
    let mut stack = vec![0usize];
    while let Some(g) = stack.pop() {
        if groups[g].members.len() <= cutoff {
            continue;
        }
        let members = std::mem::take(&mut groups[g].members);
        let seed = rng.next_u64();
        match bisect(net, &members, params.imbalance, seed) {
            Some((a, b)) => {
                let first = groups.len();
                groups.push(Group { members: a, halves: None });
                groups.push(Group { members: b, halves: None });
                groups[g].halves = Some([first, first + 1]);
                stack.push(first);
                stack.push(first + 1);
            }
            None => groups[g].members = members,
        }
    }
    // Children come after their parent: assemble in reverse creation order.
    let mut kids: Vec<[u32; 2]> = vec![[NONE, NONE]; n];
    kids.reserve(n.saturating_sub(1));
    let mut root_of = vec![NONE; groups.len()];
    for g in (0..groups.len()).rev() {
        root_of[g] = match groups[g].halves {
            Some([a, b]) => {
                kids.push([root_of[a], root_of[b]]);
                (kids.len() - 1) as u32
            }
            None => {
                let members = &groups[g].members;
                let items = members.iter().map(|&i| net.leaf_legs(i as usize)).collect();
                let mut ids: Vec<u32> = members.clone();
                for [a, b] in greedy(net, items, params.greedy, rng) {
                    kids.push([ids[a as usize], ids[b as usize]]);
                    ids.push((kids.len() - 1) as u32);
                }
                *ids.last().unwrap_or(&NONE)
            }
        };
    }
    Tree::from_kids(n, kids, root_of[0])
}

/// Splits `members` in two non-empty groups, or `None` when METIS cannot (then the group
/// is contracted greedily as a whole).
fn bisect(net: &Net, members: &[u32], imbalance: f64, seed: u64) -> Option<(Vec<u32>, Vec<u32>)> {
    let m = members.len();
    let mut holders: FxHashMap<u32, SmallVec<[u32; 4]>> = FxHashMap::default();
    for (local, &i) in members.iter().enumerate() {
        for &c in &net.inputs[i as usize] {
            if !net.is_out[c as usize] {
                holders.entry(c).or_default().push(local as u32);
            }
        }
    }
    let mut edges: FxHashMap<(u32, u32), i32> = FxHashMap::default();
    let mut add = |a: u32, b: u32, w: i32| *edges.entry((a.min(b), a.max(b))).or_default() += w;
    for (&c, h) in &holders {
        if h.len() < 2 {
            continue;
        }
        let w = (net.sizes[c as usize].log2() * 16.0).round().max(1.0) as i32;
        if h.len() <= CLIQUE_MAX {
            for (x, &a) in h.iter().enumerate() {
                h[x + 1..].iter().for_each(|&b| add(a, b, w));
            }
        } else {
            h.windows(2).for_each(|p| add(p[0], p[1], w));
        }
    }
    // Both directions, each vertex's neighbours sorted: METIS's CSR input, built in a fixed
    // order so the hash map's order never reaches the result.
    let mut adj: Vec<(u32, u32, i32)> = Vec::with_capacity(2 * edges.len());
    for (&(a, b), &w) in &edges {
        adj.push((a, b, w));
        adj.push((b, a, w));
    }
    adj.sort_unstable();
    let mut xadj = vec![0 as metis::Idx; m + 1];
    adj.iter().for_each(|&(a, _, _)| xadj[a as usize + 1] += 1);
    for i in 0..m {
        xadj[i + 1] += xadj[i];
    }
    let adjncy: Vec<metis::Idx> = adj.iter().map(|&(_, b, _)| b as metis::Idx).collect();
    let adjwgt: Vec<metis::Idx> = adj.iter().map(|&(_, _, w)| w as metis::Idx).collect();
    let mut part = vec![0 as metis::Idx; m];
    let ufactor = (imbalance * 1000.0).round().clamp(1.0, 999.0) as metis::Idx;
    let graph = metis::Graph::new(1, 2, &xadj, &adjncy).ok()?;
    graph
        .set_adjwgt(&adjwgt)
        .set_option(metis::option::Seed((seed >> 33) as metis::Idx))
        .set_option(metis::option::UFactor(ufactor))
        .part_recursive(&mut part)
        .ok()?;
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for (local, &p) in part.iter().enumerate() {
        if p == 0 { a.push(members[local]) } else { b.push(members[local]) }
    }
    (!a.is_empty() && !b.is_empty()).then_some((a, b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bisected_ring_is_a_full_tree_that_cuts_two_bonds() {
        // A ring of 16 matrices of bond 4: the best bisection cuts two bonds.
        let n = 16u32;
        let inputs: Vec<Vec<u32>> = (0..n).map(|i| vec![i, (i + 1) % n]).collect();
        let net = Net::new(&inputs, &[], &[4; 16]);
        let params = PartitionParams { imbalance: 0.05, cutoff: 4, greedy: GreedyParams::PLAIN };
        let tree = partition_tree(&net, params, &mut Rng::new(3));
        assert_eq!(tree.post_order().len(), 15);
        let mut leaves = vec![0u32; 16];
        let mut stack = vec![tree.root()];
        while let Some(x) = stack.pop() {
            if tree.is_leaf(x) {
                leaves[x as usize] += 1;
            } else {
                stack.extend(tree.kids(x));
            }
        }
        assert!(leaves.iter().all(|&k| k == 1), "{leaves:?}");
        // Two open bonds at most at the top: the root's children are matrices (16 elements).
        let legs = tree.legs(&net);
        let [a, b] = tree.kids(tree.root());
        assert_eq!((net.size(&legs[a as usize]), net.size(&legs[b as usize])), (16.0, 16.0));
    }
}
