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
    let mut state = State {
        sizes: items.iter().map(|l| net.size(l)).collect(),
        legs: items,
        alive: vec![true; k],
        holders: FxHashMap::default(),
        heap: BinaryHeap::new(),
        scratch: Legs::new(),
    };
    for (i, legs) in state.legs.iter().enumerate() {
        for &(c, _) in legs {
            state.holders.entry(c).or_default().push(i as u32);
        }
    }
    let mut seen: FxHashSet<(u32, u32)> = FxHashSet::default();
    let mut pairs = Vec::new();
    for (&c, h) in &state.holders {
        for (a, b) in candidate_pairs(net, c, h) {
            if seen.insert((a.min(b), a.max(b))) {
                pairs.push((a.min(b), a.max(b)));
            }
        }
    }
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
        let mut neighbours: Vec<u32> = Vec::new();
        for &(l, _) in &state.legs[r as usize] {
            if let Some(h) = state.holders.get(&l) {
                if pairs_on(net, l, h.len()) {
                    neighbours.extend(h.iter().copied().filter(|&x| x != r).take(WIDE_LABEL));
                }
            }
        }
        neighbours.sort_unstable();
        neighbours.dedup();
        for x in neighbours {
            state.push(net, params, rng, x.min(r), x.max(r));
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
/// label's live holders, and the candidate heap.
struct State {
    legs: Vec<Legs>,
    sizes: Vec<f64>,
    alive: Vec<bool>,
    holders: FxHashMap<u32, SmallVec<[u32; 4]>>,
    heap: BinaryHeap<Reverse<Candidate>>,
    scratch: Legs,
}

impl State {
    fn push(&mut self, net: &Net, params: GreedyParams, rng: &mut Rng, a: u32, b: u32) {
        let (la, lb) = (&self.legs[a as usize], &self.legs[b as usize]);
        net.merge(la, lb, &mut self.scratch);
        let score = net.size(&self.scratch) - params.alpha * (self.sizes[a as usize] + self.sizes[b as usize]);
        let key = if params.temperature > 0.0 {
            score - params.temperature * score.abs().max(1.0) * rng.gumbel()
        } else {
            score
        };
        self.heap.push(Reverse(Candidate { key, a, b }));
    }

    /// Contracts live tensors `a` and `b` into a new one; returns its id.
    fn contract(&mut self, net: &Net, a: u32, b: u32) -> u32 {
        let r = self.legs.len() as u32;
        let mut out = Legs::new();
        net.merge(&self.legs[a as usize], &self.legs[b as usize], &mut out);
        for x in [a, b] {
            self.alive[x as usize] = false;
            for &(l, _) in &self.legs[x as usize] {
                if let Some(h) = self.holders.get_mut(&l) {
                    h.retain(|y| *y != x);
                }
            }
        }
        for &(l, _) in &out {
            self.holders.entry(l).or_default().push(r);
        }
        self.sizes.push(net.size(&out));
        self.legs.push(out);
        self.alive.push(true);
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
