//! The recursive-partition driver: split the network's inputs into `parts` groups that
//! share as little as possible (METIS's multilevel partitioning of the graph whose vertices
//! are the inputs and whose edges are their shared summed labels, each weighted by the log
//! of its size), split each group again, and so on down to groups of at most `cutoff`
//! inputs, which the greedy driver contracts; then the greedy driver also joins each
//! group's parts. A cut label is one that stays open until its parts meet, so a split with
//! a small cut keeps the intermediates small, and balanced parts keep the tree shallow.
//!
//! Parameters: the imbalance METIS may allow, the cutoff, the number of parts (2 to 6), the
//! greedy parameters of the small groups, and METIS's seed (drawn per trial).
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

use std::time::Instant;

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use super::greedy::{GreedyParams, greedy};
use super::tree::{Legs, NONE, Net, Tree};
use crate::rng::Rng;

/// Held while METIS runs (see `split`).
static METIS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Labels held by more than this many inputs of a group join them by a chain of edges,
/// not a clique (a clique of `k` vertices has `k(k − 1)/2` edges).
const CLIQUE_MAX: usize = 16;

/// The partition driver's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct PartitionParams {
    /// The load imbalance METIS may allow, as a fraction (0.01 to 0.99).
    pub(crate) imbalance: f64,
    /// Groups of at most this many inputs are contracted by the greedy driver.
    pub(crate) cutoff: usize,
    /// How many parts each group is split into (2: bisection).
    pub(crate) parts: usize,
    /// The greedy driver's parameters within small groups and across a group's parts.
    pub(crate) greedy: GreedyParams,
}

/// A group of inputs: its members, or the groups it was split into.
struct Group {
    members: Vec<u32>,
    parts: Option<Vec<usize>>,
}

/// A tree by recursive partitioning (see the module docs). Once `deadline` passes, no
/// group is split further: the groups still waiting are contracted greedily as they are,
/// so a trial on a network of 10^5 tensors ends soon after its search's budget.
pub(crate) fn partition_tree(net: &Net, params: PartitionParams, rng: &mut Rng, deadline: Option<Instant>) -> Tree {
    let n = net.n();
    let cutoff = params.cutoff.max(2);
    let mut groups = vec![Group { members: (0..n as u32).collect(), parts: None }];
    let mut stack = vec![0usize];
    while let Some(g) = stack.pop() {
        if groups[g].members.len() <= cutoff || deadline.is_some_and(|d| Instant::now() >= d) {
            continue;
        }
        let members = std::mem::take(&mut groups[g].members);
        let seed = rng.next_u64();
        let k = params.parts.clamp(2, members.len());
        match split(net, &members, k, params.imbalance, seed) {
            Some(parts) => {
                let first = groups.len();
                let count = parts.len();
                groups.extend(parts.into_iter().map(|members| Group { members, parts: None }));
                groups[g].parts = Some((first..first + count).collect());
                stack.extend(first..first + count);
            }
            None => groups[g].members = members,
        }
    }
    // Children come after their parent: assemble in reverse creation order. Each node's
    // legs are kept as it is made, for the greedy merge of a group's parts.
    let mut kids: Vec<[u32; 2]> = vec![[NONE, NONE]; n];
    kids.reserve(n.saturating_sub(1));
    let mut legs: Vec<Legs> = (0..n).map(|i| net.leaf_legs(i)).collect();
    let mut root_of = vec![NONE; groups.len()];
    for g in (0..groups.len()).rev() {
        let mut ids: Vec<u32> = match &groups[g].parts {
            Some(parts) => parts.iter().map(|&p| root_of[p]).collect(),
            None => groups[g].members.clone(),
        };
        let items = ids.iter().map(|&x| legs[x as usize].clone()).collect();
        for [a, b] in greedy(net, items, params.greedy, rng) {
            let (x, y) = (ids[a as usize], ids[b as usize]);
            let mut out = Legs::new();
            net.merge(&legs[x as usize], &legs[y as usize], &mut out);
            // Each node is merged once: its legs are not needed again (on a wide tree,
            // keeping every node's would take memory far beyond the network's).
            legs[x as usize] = Legs::new();
            legs[y as usize] = Legs::new();
            kids.push([x, y]);
            legs.push(out);
            ids.push((kids.len() - 1) as u32);
        }
        root_of[g] = *ids.last().unwrap_or(&NONE);
    }
    Tree::from_kids(n, kids, root_of[0])
}

/// Splits `members` in `k` groups, dropping empty ones, or `None` when METIS cannot or
/// leaves fewer than two (then the group is contracted greedily as a whole).
fn split(net: &Net, members: &[u32], k: usize, imbalance: f64, seed: u64) -> Option<Vec<Vec<u32>>> {
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
    let graph = metis::Graph::new(1, k as metis::Idx, &xadj, &adjncy).ok()?;
    // METIS draws from one process-wide random state (GKlib's), seeded per call: two calls
    // at once would race on it, and the seeded trials would not be reproducible.
    let _only_one = METIS.lock().unwrap_or_else(|p| p.into_inner());
    graph
        .set_adjwgt(&adjwgt)
        .set_option(metis::option::Seed((seed >> 33) as metis::Idx))
        .set_option(metis::option::UFactor(ufactor))
        .part_recursive(&mut part)
        .ok()?;
    let mut parts = vec![Vec::new(); k];
    for (local, &p) in part.iter().enumerate() {
        parts.get_mut(p as usize)?.push(members[local]);
    }
    parts.retain(|p| !p.is_empty());
    (parts.len() >= 2).then_some(parts)
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
        let params = PartitionParams { imbalance: 0.05, cutoff: 4, parts: 2, greedy: GreedyParams::PLAIN };
        let tree = partition_tree(&net, params, &mut Rng::new(3), None);
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
