//! The randomized greedy driver: contract, again and again, the pair of tensors sharing a
//! label with the lowest score `|ab| − α·(|a| + |b|)`, each score perturbed once by a
//! Gumbel draw scaled by the temperature (sampling the pair by a Boltzmann weight, the
//! Gumbel-max way, without rescanning the candidates). `α` and the temperature are the
//! driver's two parameters; `α = 1` and temperature 0 is the classic memory-removing
//! greedy.
//!
//! Candidates wait in a heap and are dropped lazily once either tensor is consumed; after
//! each merge only the new tensor's neighbours are scored. Tensors that share no label
//! (disconnected parts) are joined at the end, smallest first, by outer products.
//!
//! Complexity: `O(p log p)` for `p` candidate pairs scored, `p` being the pairs sharing a
//! label at the start plus the new tensor's neighbours at each merge: `O(n)` pairs for
//! networks of bounded degree, and at most `WIDE_LABEL` per tensor and label for labels
//! held widely (output labels of more than two tensors make none).

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use rustc_hash::{FxHashMap, FxHashSet};
use smallvec::SmallVec;

use super::tree::{Legs, Net};
use crate::rng::Rng;

/// The greedy driver's parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct GreedyParams {
    /// The weight of the operands' sizes in the score.
    pub(crate) alpha: f64,
    /// The Gumbel noise's scale, relative to each score's magnitude (0: deterministic).
    pub(crate) temperature: f64,
}

impl GreedyParams {
    /// The classic greedy: the pair that removes the most memory.
    pub(crate) const PLAIN: GreedyParams = GreedyParams { alpha: 1.0, temperature: 0.0 };
}

/// A scored candidate pair; the heap pops the lowest key, ties by ids.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    key: f64,
    a: u32,
    b: u32,
}

impl PartialEq for Candidate {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Candidate {
    fn cmp(&self, o: &Self) -> Ordering {
        self.key.total_cmp(&o.key).then(self.a.cmp(&o.a)).then(self.b.cmp(&o.b))
    }
}

/// Contracts `items` greedily into one tensor. Returns the merges in SSA form: items are
/// ids `0..k`, merge `m` makes id `k + m` (`k − 1` merges).
pub(crate) fn greedy(net: &Net, items: Vec<Legs>, params: GreedyParams, rng: &mut Rng) -> Vec<[u32; 2]> {
    let k = items.len();
    let mut merges = Vec::with_capacity(k.saturating_sub(1));
    if k < 2 {
        return merges;
    }
    let local = Local::new(net, &items);
    let mut state = State {
        sizes: items.iter().map(|l| net.size(l)).collect(),
        legs: items,
        alive: vec![true; k],
        holders: vec![SmallVec::new(); local.labels()],
        local,
        heap: BinaryHeap::new(),
        compacted: 0,
        scratch: Legs::new(),
        acc: vec![(1.0, 1.0, false); k],
        touched: Vec::new(),
    };
    for (i, legs) in state.legs.iter().enumerate() {
        for &(c, n) in legs {
            state.holders[state.local.of(c)].push((i as u32, n));
        }
    }
    let mut seen: FxHashSet<(u32, u32)> = FxHashSet::default();
    let mut pairs = Vec::new();
    for (c, l) in state.local.pairs() {
        let h: SmallVec<[u32; 4]> = state.holders[l].iter().map(|&(x, _)| x).collect();
        for (a, b) in candidate_pairs(net, c, &h) {
            if seen.insert((a.min(b), a.max(b))) {
                pairs.push((a.min(b), a.max(b)));
            }
        }
    }
    drop(seen);
    // Scored in a fixed order: the hash map's iteration order must not reach the draws.
    pairs.sort_unstable();
    for (a, b) in pairs {
        state.push(net, params, rng, a, b);
    }
    let mut live = k;
    while let Some(Reverse(c)) = state.heap.pop() {
        if !state.alive[c.a as usize] || !state.alive[c.b as usize] {
            continue;
        }
        let r = state.contract(net, c.a, c.b);
        merges.push([c.a, c.b]);
        live -= 1;
        state.push_neighbours(net, params, rng, r);
        if state.heap.len() > 2 * COMPACT_SLACK.max(state.compacted) {
            // Stale pairs dropped once the heap has doubled: amortized O(1) per push, and
            // the heap stays proportional to the live pairs.
            let alive = &state.alive;
            state.heap.retain(|Reverse(c)| alive[c.a as usize] && alive[c.b as usize]);
            state.compacted = state.heap.len();
        }
    }
    // Disconnected parts: outer products, the two smallest first.
    let mut rest: BinaryHeap<Reverse<Candidate>> = (0..state.legs.len())
        .filter(|&i| state.alive[i])
        .map(|i| Reverse(Candidate { key: state.sizes[i], a: i as u32, b: 0 }))
        .collect();
    while live > 1 {
        let Reverse(x) = rest.pop().expect("two live tensors");
        let Reverse(y) = rest.pop().expect("two live tensors");
        let r = state.contract(net, x.a, y.a);
        merges.push([x.a, y.a]);
        rest.push(Reverse(Candidate { key: state.sizes[r as usize], a: r, b: 0 }));
        live -= 1;
    }
    merges
}

/// The items' labels numbered densely for the per-label columns: through a column over
/// the network's labels when the items are a good part of the network (no hash per
/// lookup), through a hash map for a small group of a partition (a column would cost the
/// network's size per group).
enum Local {
    Column(Vec<u32>, usize),
    Map(FxHashMap<u32, u32>),
}

impl Local {
    fn new(net: &Net, items: &[Legs]) -> Local {
        if 4 * items.len() >= net.n() {
            let mut ids = vec![u32::MAX; net.sizes.len()];
            let mut next = 0;
            for &(c, _) in items.iter().flatten() {
                if ids[c as usize] == u32::MAX {
                    ids[c as usize] = next;
                    next += 1;
                }
            }
            Local::Column(ids, next as usize)
        } else {
            let mut map: FxHashMap<u32, u32> = FxHashMap::default();
            for &(c, _) in items.iter().flatten() {
                let next = map.len() as u32;
                map.entry(c).or_insert(next);
            }
            Local::Map(map)
        }
    }

    /// How many distinct labels the items hold.
    fn labels(&self) -> usize {
        match self {
            Local::Column(_, n) => *n,
            Local::Map(m) => m.len(),
        }
    }

    /// The local id of a label the items hold.
    fn of(&self, c: u32) -> usize {
        match self {
            Local::Column(ids, _) => ids[c as usize] as usize,
            Local::Map(m) => m[&c] as usize,
        }
    }

    /// Every (label, local id), in no particular order.
    fn pairs(&self) -> Vec<(u32, usize)> {
        match self {
            Local::Column(ids, _) => {
                ids.iter().enumerate().filter(|e| *e.1 != u32::MAX).map(|(c, &l)| (c as u32, l as usize)).collect()
            }
            Local::Map(m) => m.iter().map(|(&c, &l)| (c, l as usize)).collect(),
        }
    }
}

/// The heap is rebuilt without stale pairs once it is twice this or twice its size after
/// the last rebuild.
const COMPACT_SLACK: usize = 1 << 15;

/// A label held by more than this many tensors makes no more than this many candidate
/// pairs per tensor (a chain of its holders at the start, the new tensor with the first of
/// them after a merge): pairing all of them would be quadratic in the holders, and a
/// label so widely held is summed last anyway.
const WIDE_LABEL: usize = 32;

/// Whether a label held by `holders` tensors makes candidate pairs: a summed label always,
/// an output label only between two tensors (it is never summed, so pairing every holder of
/// a batch label would score every pair of the network at every step).
fn pairs_on(net: &Net, label: u32, holders: usize) -> bool {
    !net.is_out[label as usize] || holders <= 2
}

/// The candidate pairs a label makes among its holders at the start.
fn candidate_pairs<'a>(net: &Net, label: u32, h: &'a [u32]) -> Box<dyn Iterator<Item = (u32, u32)> + 'a> {
    if !pairs_on(net, label, h.len()) {
        Box::new(std::iter::empty())
    } else if h.len() > WIDE_LABEL {
        Box::new(h.windows(2).map(|w| (w[0], w[1])))
    } else {
        Box::new(h.iter().enumerate().flat_map(move |(x, &a)| h[x + 1..].iter().map(move |&b| (a, b))))
    }
}

/// The greedy loop's columns: each tensor's legs, size and liveness (by SSA id), each
/// label's live holders (by local label id, with how many inputs below each holder hold
/// it), and the candidate heap.
///
/// Invariant: `acc` is `(1, 1, false)` for every tensor outside `push_neighbours`.
struct State {
    legs: Vec<Legs>,
    sizes: Vec<f64>,
    alive: Vec<bool>,
    local: Local,
    holders: Vec<SmallVec<[(u32, u32); 4]>>,
    heap: BinaryHeap<Reverse<Candidate>>,
    /// The heap's size after its last rebuild.
    compacted: usize,
    scratch: Legs,
    /// Per tensor, while the new tensor's neighbours are scored: the product of the labels
    /// they share, of those the pair alone holds (summed by the merge), and whether it
    /// was reached.
    acc: Vec<(f64, f64, bool)>,
    touched: Vec<u32>,
}

impl State {
    /// Scores the pair `a < b` by merging their legs (the first fill, of input-sized
    /// tensors) and queues it.
    fn push(&mut self, net: &Net, params: GreedyParams, rng: &mut Rng, a: u32, b: u32) {
        let (la, lb) = (&self.legs[a as usize], &self.legs[b as usize]);
        net.merge(la, lb, &mut self.scratch);
        let merged = net.size(&self.scratch);
        self.queue(params, rng, a, b, merged);
    }

    /// Queues the pair `a < b` whose merge has `merged` elements.
    fn queue(&mut self, params: GreedyParams, rng: &mut Rng, a: u32, b: u32, merged: f64) {
        let score = merged - params.alpha * (self.sizes[a as usize] + self.sizes[b as usize]);
        let key = if params.temperature > 0.0 {
            score - params.temperature * score.abs().max(1.0) * rng.gumbel()
        } else {
            score
        };
        self.heap.push(Reverse(Candidate { key, a, b }));
    }

    /// Scores the new tensor `r` against its neighbours and queues the pairs, in the order
    /// of the neighbours' ids (the draws follow it). One pass over `r`'s labels and their
    /// holders gives, for every neighbour at once, the product of the shared labels and
    /// of those the pair alone holds, so the merge's size is `|r|·|x| / shared / summed`
    /// without merging label lists: a step costs `r`'s labels times their holders, not
    /// the sum of its neighbours' labels. Labels that make no pairs or too many (output
    /// labels of several tensors, labels of more than [`WIDE_LABEL`] tensors) are not
    /// walked; each neighbour looks them up in its own sorted legs.
    fn push_neighbours(&mut self, net: &Net, params: GreedyParams, rng: &mut Rng, r: u32) {
        let mut wide: SmallVec<[(u32, u32); 4]> = SmallVec::new();
        for &(c, kr) in &self.legs[r as usize] {
            let h = &self.holders[self.local.of(c)];
            let (makes_pairs, walked) = (pairs_on(net, c, h.len()), h.len() <= WIDE_LABEL);
            if !(makes_pairs && walked) {
                wide.push((c, kr));
            }
            if !makes_pairs {
                continue;
            }
            let s = net.sizes[c as usize];
            let count = net.count[c as usize];
            let out = net.is_out[c as usize];
            for &(x, kx) in h.iter().filter(|&&(x, _)| x != r).take(WIDE_LABEL) {
                let e = &mut self.acc[x as usize];
                if !e.2 {
                    e.2 = true;
                    self.touched.push(x);
                }
                if walked {
                    e.0 *= s;
                    if !out && kr + kx == count {
                        e.1 *= s;
                    }
                }
            }
        }
        let mut touched = std::mem::take(&mut self.touched);
        touched.sort_unstable();
        for &x in &touched {
            let (mut shared, mut summed, _) = std::mem::replace(&mut self.acc[x as usize], (1.0, 1.0, false));
            let lx = &self.legs[x as usize];
            for &(c, kr) in &wide {
                if let Ok(p) = lx.binary_search_by_key(&c, |&(l, _)| l) {
                    shared *= net.sizes[c as usize];
                    if !net.is_out[c as usize] && kr + lx[p].1 == net.count[c as usize] {
                        summed *= net.sizes[c as usize];
                    }
                }
            }
            let merged = self.sizes[r as usize] * self.sizes[x as usize] / shared / summed;
            self.queue(params, rng, x.min(r), x.max(r), merged);
        }
        touched.clear();
        self.touched = touched;
    }

    /// Contracts live tensors `a` and `b` into a new one; returns its id.
    fn contract(&mut self, net: &Net, a: u32, b: u32) -> u32 {
        let r = self.legs.len() as u32;
        let mut out = Legs::new();
        net.merge(&self.legs[a as usize], &self.legs[b as usize], &mut out);
        for x in [a, b] {
            self.alive[x as usize] = false;
            // A consumed tensor's legs are read no more: dropped, so the memory is that of
            // the live tensors.
            for &(l, _) in &std::mem::take(&mut self.legs[x as usize]) {
                let h = &mut self.holders[self.local.of(l)];
                // In order: a wide label pairs the new tensor with its first holders.
                if let Some(p) = h.iter().position(|&(y, _)| y == x) {
                    h.remove(p);
                }
            }
        }
        for &(l, n) in &out {
            self.holders[self.local.of(l)].push((r, n));
        }
        self.sizes.push(net.size(&out));
        self.legs.push(out);
        self.alive.push(true);
        self.acc.push((1.0, 1.0, false));
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hyper::tree::Tree;

    #[test]
    fn plain_greedy_contracts_a_chain_and_joins_disconnected_parts() {
        // Two chains of two matrices each, no label between them.
        let inputs = vec![vec![0, 1], vec![1, 2], vec![3, 4], vec![4, 5]];
        let net = Net::new(&inputs, &[0, 2, 3, 5], &[2, 3, 4, 5, 6, 7]);
        let items = (0..4).map(|i| net.leaf_legs(i)).collect();
        let merges = greedy(&net, items, GreedyParams::PLAIN, &mut Rng::new(0));
        assert_eq!(merges.len(), 3);
        let tree = Tree::from_ssa(4, &merges);
        // The two chains first (2·3·4 and 5·6·7), then their outer product (8·35).
        assert_eq!(tree.cost(&net).multiply_adds, 24.0 + 210.0 + 280.0);
    }
}
