//! Path searches better than greedy, and the cost they minimise.
//!
//! Cost: the multiply-adds of a path as the graph runs it ([`path_cost`]): each pairwise
//! step costs the product of the sizes of all labels of its two operands (an operand's
//! labels are all of them for an input, the labels still needed for an intermediate),
//! plus the final one-operand reduction when the last result is not yet the output. Flops
//! are twice this.
//!
//! Searches, all on numbered networks (labels `0..sizes.len()`):
//! - [`optimal`]: dynamic programming over every subset of the operands (a bitmask), each
//!   split of a subset into two tried: the cheapest of all pairwise paths, outer products
//!   included. `O(3^n)` splits, so only for `n ≤` [`OPTIMAL_MAX_OPERANDS`] (and at most
//!   [`OPTIMAL_MAX_LABELS`] labels).
//! - [`dp`]: dynamic programming over *connected* subsets only, grown by size, pairs of
//!   disjoint subsets that share a summed label, keeping only subsets whose cost is within
//!   a cap that starts at the output's size and grows by the smallest label size until the
//!   whole network is reached (the method of Kourtis et al., 2019, that opt_einsum's `dp`
//!   implements). Disconnected parts are joined by outer products at the end, smallest
//!   first. The work (pairs of subsets examined) is bounded by [`DP_MAX_PAIRS`]: past it
//!   the search gives up (`None`), as it does at once past [`DP_MAX_TABLE_BITS`]; [`PathChoice::Dp`] also gives up after [`DP_MAX_TIME`]
//!   and then runs the hyper-optimizer ([`crate::hyper`]) with its default budget.
//! - [`random_greedy`]: greedy paths with Boltzmann sampling among the best candidate
//!   pairs at each step and a randomised weight of the operands' sizes in the score, the
//!   plain greedy path being trial 0; the cheapest path wins, so it is never worse than
//!   greedy.
//! - [`auto`]: `optimal` for at most [`AUTO_EXACT_OPERANDS`] operands; else `dp` within
//!   2^18 pairs of subsets (milliseconds: chains, trees and other narrow networks end
//!   there, with the best connected path); else the hyper-optimizer (at most
//!   [`AUTO_HYPER_TRIALS`] trials), then, up to 1024 operands, `dp` again, told the
//!   hyper-optimizer's cost, within `n^5/4` pairs (at most 2^28): it gives up as soon as
//!   its cost cap passes that cost, or when the growth of its rounds predicts it cannot
//!   get there within the pairs left; the cheaper of the two paths wins. Each stage also
//!   ends once the search has taken as long as the best path found so far would take to
//!   contract at [`AUTO_RATE`] ([`auto_allowance`], from [`AUTO_MIN_TIME`] to
//!   [`AUTO_MAX_TIME`]): a network of 10^7 multiply-adds is planned in about a
//!   millisecond, as opt_einsum plans it, while one of 10^13 may take seconds that its
//!   contraction repays. The DP stays because it reaches the best known paths of bundled
//!   instances (the 84-operand `lm_batch`, the 26-operand MERA) that the hyper-optimizer
//!   misses; the hyper-optimizer is what answers on networks of large width (random
//!   regular graphs, lattices), where the DP would run for minutes.
//!
//! [`find_path_until`] runs any of them with a caller's `stop` test, asked once per
//! [`STOP_CHECK_WORK`] units of work (pairs of subsets, splits, or once per random-greedy
//! trial): a search that `stop` ends returns [`EinsumError::Interrupted`]. That is how
//! the Python package answers Ctrl-C during a long search.
//!
//! Invariant: every path returned is valid for the network's operand count.

use crate::rng::Rng;
use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use std::time::{Duration, Instant};

use crate::error::{EinsumError, EinsumResult};
use crate::hyper::HyperOptions;
use crate::path::{ContractionPath, PathChoice, distinct};

/// [`optimal`] searches networks of at most this many operands (3^16 ≈ 4·10^7 splits).
pub const OPTIMAL_MAX_OPERANDS: usize = 16;

/// [`optimal`] searches networks of at most this many labels (its table holds a label set
/// per subset: 2^16 × 512 bytes at most).
pub const OPTIMAL_MAX_LABELS: usize = 4096;

/// [`auto`] uses the exact search up to this many operands (3^12 ≈ 5·10^5 splits).
pub const AUTO_EXACT_OPERANDS: usize = 12;

/// [`dp`] gives up after examining this many pairs of subsets: most networks finish far
/// sooner, but a hard one takes the whole budget (an 8×8 grid of operands: about 47 s,
/// then [`PathChoice::Dp`] falls back to random-greedy). [`find_path_until`] can end it
/// earlier.
pub const DP_MAX_PAIRS: u64 = 4_000_000_000;

/// [`dp`] gives up at once (`None`) on networks whose operand count times label count
/// passes this (its bitset tables would pass 64 MiB): 10^4 tensors of a graph of degree 3
/// and more.
pub const DP_MAX_TABLE_BITS: u64 = 1 << 28;

/// [`auto`] runs no DP on networks of more operands than this (its tables grow as the
/// square of the network, and on networks this large it does not finish in its budget).
const AUTO_DP_MAX_OPERANDS: usize = 1024;

/// The trials of the Python package's and the command line's `random-greedy`.
pub const RANDOM_GREEDY_TRIALS: u32 = 64;

/// [`auto`]'s DP, after the hyper-optimizer, gets at most this many pairs of subsets (and
/// at most [`auto_allowance`]): enough for the bundled instances' DP paths (the 84-operand
/// `lm_batch` needs the most), which the hyper-optimizer does not always reach.
const AUTO_DP_MAX_PAIRS: u64 = 1 << 28;

/// [`auto`]'s hyper-optimizer runs at most this many trials.
pub const AUTO_HYPER_TRIALS: u32 = 128;

/// [`auto`] searches at most this long (see [`auto_allowance`]).
pub const AUTO_MAX_TIME: Duration = Duration::from_secs(2);

/// [`auto`] may always search this long (see [`auto_allowance`]): about what opt_einsum's
/// `auto` takes on networks of 10 to 40 tensors.
pub const AUTO_MIN_TIME: Duration = Duration::from_micros(500);

/// The contraction speed, in multiply-adds per second, by which [`auto_allowance`] turns a
/// path's cost into time: about one core's float64 rate on the bundled instances (5·10^9
/// to 1.5·10^10 measured).
pub const AUTO_RATE: f64 = 1e10;

/// [`PathChoice::Dp`] gives up after this long (or [`DP_MAX_PAIRS`] pairs, whichever
/// comes first) and turns to the hyper-optimizer with its default budget.
pub const DP_MAX_TIME: Duration = Duration::from_secs(5);

/// [`find_path_until`] asks its `stop` test once per this many units of search work
/// (about 0.2 to 1 ms of the DP).
pub const STOP_CHECK_WORK: u64 = 1 << 14;

/// The work a search may do: at most `max` units, asking `stop` every
/// [`STOP_CHECK_WORK`] units.
struct Work<'a> {
    /// Units counted so far, whole quotas included.
    done: u64,
    max: u64,
    stop: &'a dyn Fn() -> bool,
    /// Whether `stop` ended the search (rather than the budget).
    stopped: bool,
    /// The cost of a path already known ([`auto`]'s hyper-optimizer's; infinite if none):
    /// the DP stops when it cannot do better (see `dp_component`).
    known: f64,
}

impl<'a> Work<'a> {
    fn new(max: u64, stop: &'a dyn Fn() -> bool) -> Self {
        Work { done: 0, max, stop, stopped: false, known: f64::INFINITY }
    }

    /// Takes the next quota of units for a hot loop to count down locally (so the count
    /// stays in a register): asks `stop` first, and counts the whole quota as done (the
    /// loop gives back what it did not use, [`Work::give_back`]). `None` once the budget is
    /// spent or `stop` said so.
    fn quota(&mut self) -> Option<u64> {
        if self.done >= self.max || !self.poll() {
            return None;
        }
        let q = STOP_CHECK_WORK.min(self.max - self.done);
        self.done += q;
        Some(q)
    }

    /// Gives back the unused part of a quota.
    fn give_back(&mut self, unused: u64) {
        self.done -= unused;
    }

    /// Asks `stop` now (between random-greedy trials).
    fn poll(&mut self) -> bool {
        if !self.stopped && (self.stop)() {
            self.stopped = true;
        }
        !self.stopped
    }
}

/// A `stop` test that never stops.
fn never() -> bool {
    false
}

/// A bitset (operands or labels), 256 bits inline.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
struct Bits(SmallVec<[u64; 4]>);

impl Bits {
    fn new(bits: usize) -> Self {
        Bits(SmallVec::from_elem(0, bits.div_ceil(64).max(1)))
    }
    fn set(&mut self, i: usize) {
        self.0[i / 64] |= 1 << (i % 64);
    }
    fn has(&self, i: usize) -> bool {
        self.0[i / 64] >> (i % 64) & 1 == 1
    }
    fn or(&self, o: &Bits) -> Bits {
        Bits(self.0.iter().zip(&o.0).map(|(a, b)| a | b).collect())
    }
    fn meets(&self, o: &Bits) -> bool {
        self.0.iter().zip(&o.0).any(|(a, b)| a & b != 0)
    }
    /// Whether `self & o & !not` is non-empty.
    fn meets_outside(&self, o: &Bits, not: &Bits) -> bool {
        self.0.iter().zip(&o.0).zip(&not.0).any(|((a, b), n)| a & b & !n != 0)
    }
    fn subset_of(&self, o: &Bits) -> bool {
        self.0.iter().zip(&o.0).all(|(a, b)| a & !b == 0)
    }
    fn ones(&self) -> impl Iterator<Item = usize> + '_ {
        self.0.iter().enumerate().flat_map(|(w, &word)| {
            let mut x = word;
            std::iter::from_fn(move || {
                (x != 0).then(|| {
                    let b = x.trailing_zeros() as usize;
                    x &= x - 1;
                    w * 64 + b
                })
            })
        })
    }
}

/// The multiply-adds of `path` on the network (see the module docs): what
/// [`crate::Einsum::multiply_adds`] reports for the same network and path.
///
/// ```
/// use einsum::search::path_cost;
/// use einsum::ContractionPath;
/// // (2x30)(30x40)(40x2): left to right 2·30·40 + 2·40·2, right to left 30·40·2 + 2·30·2.
/// let inputs = vec![vec![0, 1], vec![1, 2], vec![2, 3]];
/// let sizes = [2, 30, 40, 2];
/// let left = path_cost(&inputs, &[0, 3], &sizes, &ContractionPath::new(vec![[0, 1], [0, 1]])).unwrap();
/// let right = path_cost(&inputs, &[0, 3], &sizes, &ContractionPath::new(vec![[1, 2], [0, 1]])).unwrap();
/// assert_eq!((left, right), (2560.0, 2520.0));
/// ```
pub fn path_cost(inputs: &[Vec<u32>], output: &[u32], sizes: &[usize], path: &ContractionPath) -> EinsumResult<f64> {
    crate::cost::path_cost(inputs, output, sizes, path)
}

/// The network as bitsets: each operand's labels, the output's, and each label's holders.
struct Sets {
    n: usize,
    ops: Vec<Bits>,
    output: Bits,
    holders: Vec<Bits>,
    sizes: Vec<f64>,
}

impl Sets {
    fn new(inputs: &[Vec<u32>], output: &[u32], sizes: &[usize]) -> Self {
        let (n, labels) = (inputs.len(), sizes.len());
        let mut holders = vec![Bits::new(n); labels];
        let ops = inputs
            .iter()
            .enumerate()
            .map(|(i, l)| {
                let mut b = Bits::new(labels);
                for &c in l {
                    b.set(c as usize);
                    holders[c as usize].set(i);
                }
                b
            })
            .collect();
        let mut out = Bits::new(labels);
        output.iter().for_each(|&c| out.set(c as usize));
        Sets { n, ops, output: out, holders, sizes: sizes.iter().map(|&s| s as f64).collect() }
    }

    fn size(&self, labels: &Bits) -> f64 {
        labels.ones().map(|c| self.sizes[c]).product()
    }

    /// The labels of the union `legs` of subset `s` still needed outside it.
    fn kept(&self, legs: &Bits, s: &Bits) -> Bits {
        let mut k = Bits::new(self.sizes.len());
        for c in legs.ones() {
            if self.output.has(c) || !self.holders[c].subset_of(s) {
                k.set(c);
            }
        }
        k
    }
}

/// A contraction tree as SSA pairs (operands `0..n`, then results in order) → opt_einsum's
/// linear format.
fn ssa_to_path(n: usize, ssa: &[(usize, usize)]) -> ContractionPath {
    let mut list: Vec<usize> = (0..n).collect();
    let mut steps = Vec::with_capacity(ssa.len());
    for (k, &(a, b)) in ssa.iter().enumerate() {
        let i = list.iter().position(|&x| x == a).expect("live id");
        let j = list.iter().position(|&x| x == b).expect("live id");
        steps.push([i, j]);
        list.remove(i.max(j));
        list.remove(i.min(j));
        list.push(n + k);
    }
    ContractionPath::new(steps)
}

/// The cheapest pairwise path over all pairwise paths (outer products included), by
/// dynamic programming over subsets; `None` for more than [`OPTIMAL_MAX_OPERANDS`] operands
/// or [`OPTIMAL_MAX_LABELS`] labels.
///
/// ```
/// use einsum::search::{optimal, path_cost};
/// let inputs = vec![vec![0, 1], vec![1, 2], vec![2, 3]];
/// let sizes = [2, 30, 40, 2];
/// let p = optimal(&inputs, &[0, 3], &sizes).unwrap();
/// assert_eq!(path_cost(&inputs, &[0, 3], &sizes, &p).unwrap(), 2520.0);
/// ```
pub fn optimal(inputs: &[Vec<u32>], output: &[u32], sizes: &[usize]) -> Option<ContractionPath> {
    optimal_within(inputs, output, sizes, &mut Work::new(u64::MAX, &never))
}

/// [`optimal`] counting its splits in `work`; `None` also when `work` stops it.
fn optimal_within(inputs: &[Vec<u32>], output: &[u32], sizes: &[usize], work: &mut Work) -> Option<ContractionPath> {
    let n = inputs.len();
    if n > OPTIMAL_MAX_OPERANDS || sizes.len() > OPTIMAL_MAX_LABELS {
        return None;
    }
    if n <= 1 {
        return Some(ContractionPath::new(vec![]));
    }
    let sets = Sets::new(inputs, output, sizes);
    let full = (1u32 << n) - 1;
    let as_bits = |m: u32| {
        let mut b = Bits::new(n);
        (0..n).filter(|&i| m >> i & 1 == 1).for_each(|i| b.set(i));
        b
    };
    // legs[m]: the labels subset m's result keeps (all labels for one operand).
    let mut legs: Vec<Bits> = vec![Bits::new(sizes.len()); 1 << n];
    let mut best = vec![f64::INFINITY; 1 << n];
    let mut split = vec![0u32; 1 << n];
    for i in 0..n {
        legs[1 << i] = sets.ops[i].clone();
        best[1 << i] = 0.0;
    }
    // Splits this loop may still try before asking `work` again.
    let mut quota = 0u64;
    // Subsets in increasing order: every proper subset comes first.
    for m in 1..=full {
        if m.count_ones() < 2 {
            continue;
        }
        // Its splits, 2^(|m| - 1) - 1 of them, counted against the quota.
        let splits = 1u64 << (m.count_ones() - 1);
        while quota < splits {
            quota += work.quota()?;
        }
        quota -= splits;
        let union = (0..n).filter(|&i| m >> i & 1 == 1).fold(Bits::new(sizes.len()), |u, i| u.or(&sets.ops[i]));
        legs[m as usize] = if m == full { sets.output.clone() } else { sets.kept(&union, &as_bits(m)) };
        let low = m & m.wrapping_neg();
        // Splits (s, m ^ s) with s holding m's lowest operand: each unordered split once.
        let mut s = (m - 1) & m;
        while s > 0 {
            if s & low != 0 {
                let (a, b) = (s as usize, (m ^ s) as usize);
                let c = best[a] + best[b];
                if c < best[m as usize] {
                    let c = c + sets.size(&legs[a].or(&legs[b]));
                    if c < best[m as usize] {
                        best[m as usize] = c;
                        split[m as usize] = s;
                    }
                }
            }
            s = (s - 1) & m;
        }
    }
    work.give_back(quota);
    // Post-order of the tree: children before parents.
    let mut ssa = Vec::with_capacity(n - 1);
    let mut id: FxHashMap<u32, usize> = (0..n).map(|i| (1u32 << i, i)).collect();
    let mut stack = vec![(full, false)];
    while let Some((m, expanded)) = stack.pop() {
        if m.count_ones() == 1 {
            continue;
        }
        let (a, b) = (split[m as usize], m ^ split[m as usize]);
        if expanded {
            ssa.push((id[&a], id[&b]));
            id.insert(m, n + ssa.len() - 1);
        } else {
            stack.extend([(m, true), (b, false), (a, false)]);
        }
    }
    Some(ssa_to_path(n, &ssa))
}

/// One subset of [`dp`]: its operands, cost, the labels its result keeps, and the two
/// subsets (node indices) it was made of.
struct Node {
    set: Bits,
    cost: f64,
    legs: Bits,
    split: Option<(usize, usize)>,
}

/// The cheapest path among those that contract only operands sharing a summed label
/// (connected subsets), by dynamic programming with a growing cost cap (see the module
/// docs); `None` when the search examines more than `max_pairs` pairs of subsets, or when
/// its tables would pass [`DP_MAX_TABLE_BITS`].
///
/// ```
/// use einsum::search::{dp, path_cost, DP_MAX_PAIRS};
/// // A chain of five matrices.
/// let inputs: Vec<Vec<u32>> = (0..5).map(|i| vec![i, i + 1]).collect();
/// let sizes = [10, 2, 30, 3, 40, 5];
/// let p = dp(&inputs, &[0, 5], &sizes, DP_MAX_PAIRS).unwrap();
/// let best = einsum::search::optimal(&inputs, &[0, 5], &sizes).unwrap();
/// let cost = |p| path_cost(&inputs, &[0, 5], &sizes, p).unwrap();
/// assert_eq!(cost(&p), cost(&best));
/// ```
pub fn dp(inputs: &[Vec<u32>], output: &[u32], sizes: &[usize], max_pairs: u64) -> Option<ContractionPath> {
    dp_within(inputs, output, sizes, &mut Work::new(max_pairs, &never))
}

/// [`dp`] counting its pairs of subsets in `work`; `None` when `work` runs out or stops.
fn dp_within(inputs: &[Vec<u32>], output: &[u32], sizes: &[usize], work: &mut Work) -> Option<ContractionPath> {
    let n = inputs.len();
    if n <= 1 {
        return Some(ContractionPath::new(vec![]));
    }
    // Its tables hold a bitset of the labels per operand and of the operands per label:
    // quadratic, so a network of 10^5 tensors would need gigabytes before any search.
    if (n as u64).saturating_mul(sizes.len() as u64) > DP_MAX_TABLE_BITS {
        return None;
    }
    let sets = Sets::new(inputs, output, sizes);
    // Connected components through summed labels.
    let mut parent: Vec<usize> = (0..n).collect();
    fn root(p: &mut [usize], mut i: usize) -> usize {
        while p[i] != i {
            p[i] = p[p[i]];
            i = p[i];
        }
        i
    }
    for (c, h) in sets.holders.iter().enumerate() {
        if sets.output.has(c) {
            continue;
        }
        let mut it = h.ones();
        if let Some(first) = it.next() {
            for other in it {
                let (a, b) = (root(&mut parent, first), root(&mut parent, other));
                parent[a] = b;
            }
        }
    }
    let mut components: FxHashMap<usize, Vec<usize>> = FxHashMap::default();
    for i in 0..n {
        let r = root(&mut parent, i);
        components.entry(r).or_default().push(i);
    }
    let mut components: Vec<Vec<usize>> = components.into_values().collect();
    components.sort();
    let mut ssa: Vec<(usize, usize)> = Vec::with_capacity(n - 1);
    // (id, legs) of each component's result.
    let mut results: Vec<(usize, Bits)> = Vec::with_capacity(components.len());
    for comp in &components {
        let ((root, nodes), legs) = dp_component(&sets, comp, work)?;
        // Emit the tree in post-order; `id[node]`: its SSA id once emitted.
        let mut id: Vec<usize> = vec![usize::MAX; nodes.len()];
        let mut stack = vec![(root, false)];
        while let Some((v, expanded)) = stack.pop() {
            let Some((a, b)) = nodes[v].split else {
                id[v] = nodes[v].set.ones().next().expect("a leaf holds one operand");
                continue;
            };
            if expanded {
                ssa.push((id[a], id[b]));
                id[v] = n + ssa.len() - 1;
            } else {
                stack.extend([(v, true), (b, false), (a, false)]);
            }
        }
        results.push((id[root], legs));
    }
    // Outer products of the components, smallest results first.
    while results.len() > 1 {
        results.sort_by(|x, y| sets.size(&y.1).total_cmp(&sets.size(&x.1)));
        let (a, la) = results.pop().expect("two results");
        let (b, lb) = results.pop().expect("two results");
        ssa.push((a, b));
        results.push((n + ssa.len() - 1, la.or(&lb)));
    }
    Some(ssa_to_path(n, &ssa))
}

/// A component's tree: its root node and the nodes.
type Tree = (usize, Vec<Node>);

/// [`dp`] on one connected component; the tree and the result's legs.
fn dp_component(sets: &Sets, comp: &[usize], work: &mut Work) -> Option<(Tree, Bits)> {
    let n = sets.n;
    // x[k]: the nodes of k operands found so far.
    let mut x: Vec<Vec<usize>> = vec![Vec::new(); comp.len() + 1];
    let mut nodes: Vec<Node> = Vec::new();
    let mut index: FxHashMap<Bits, usize> = FxHashMap::default();
    for &i in comp {
        let mut b = Bits::new(n);
        b.set(i);
        x[1].push(nodes.len());
        index.insert(b.clone(), nodes.len());
        nodes.push(Node { set: b, cost: 0.0, legs: sets.ops[i].clone(), split: None });
    }
    let comp_labels = comp.iter().fold(Bits::new(sets.sizes.len()), |u, &i| u.or(&sets.ops[i]));
    let out_here = Bits(comp_labels.0.iter().zip(&sets.output.0).map(|(a, b)| a & b).collect());
    let mut cap = sets.size(&out_here).max(1.0);
    let step = comp_labels.ones().map(|c| sets.sizes[c]).fold(f64::INFINITY, f64::min).max(2.0);
    // Pairs this loop may still examine before asking `work` again.
    let mut quota = 0u64;
    // Where the work stood when this round and the one before it began.
    let (mut previous_start, mut round_start) = (work.done, work.done);
    while x[comp.len()].is_empty() {
        for m in 2..=comp.len() {
            let (head, tail) = x.split_at_mut(m);
            let xm = &mut tail[0];
            for k in 1..=m / 2 {
                let (lo, hi) = (&head[k], &head[m - k]);
                for &i1 in lo {
                    for &i2 in hi {
                        if quota == 0 {
                            quota = work.quota()?;
                        }
                        quota -= 1;
                        let (a, b) = (&nodes[i1], &nodes[i2]);
                        if (k == m - k && i1 >= i2) || a.set.meets(&b.set) {
                            continue;
                        }
                        if !a.legs.meets_outside(&b.legs, &sets.output) {
                            continue;
                        }
                        let union = a.legs.or(&b.legs);
                        let cost = a.cost + b.cost + sets.size(&union);
                        if cost > cap {
                            continue;
                        }
                        let set = a.set.or(&b.set);
                        match index.get(&set) {
                            Some(&j) if nodes[j].cost <= cost => {}
                            Some(&j) => {
                                nodes[j].cost = cost;
                                nodes[j].split = Some((i1, i2));
                            }
                            None => {
                                let legs = sets.kept(&union, &set);
                                xm.push(nodes.len());
                                index.insert(set.clone(), nodes.len());
                                nodes.push(Node { set, cost, legs, split: Some((i1, i2)) });
                            }
                        }
                    }
                }
            }
        }
        if x[comp.len()].is_empty() && work.known.is_finite() {
            // A path of cost `known` is already in hand (auto's hyper-optimizer): past that
            // cap the DP cannot do better, and a round costs several times the one before
            // it, so when the rounds left to reach it would take more than twice the work
            // left, it gives up now rather than at the end of its budget.
            let done = work.done - quota;
            let (round, before) = (done - round_start, round_start - previous_start);
            if cap >= work.known {
                return None;
            }
            if round >= STOP_CHECK_WORK {
                // The growth of a round over the last, within what rounds were seen to grow
                // by (2 to 8 times on the bundled instances, lattices and random regular
                // graphs; a round after a tiny one would otherwise predict hundreds).
                let growth = (round as f64 / before.max(1) as f64).clamp(2.0, 8.0);
                // The rounds left raise the cap by `step` each, the last only up to `known`:
                // a round's work grows with the cap's ratio, `growth` per `step`.
                let exponent = (work.known / cap).ln() / step.ln();
                let rounds = exponent.ceil().max(1.0) as i32;
                let predicted: f64 = (1..=rounds).map(|r| round as f64 * growth.powf(exponent.min(r as f64))).sum();
                if predicted > 2.0 * work.max.saturating_sub(done) as f64 {
                    return None;
                }
            }
            (previous_start, round_start) = (round_start, done);
            cap = (cap * step).min(work.known);
            continue;
        }
        cap *= step;
    }
    work.give_back(quota);
    let root = x[comp.len()][0];
    let legs = nodes[root].legs.clone();
    Some(((root, nodes), legs))
}

/// The cheapest of `trials` greedy paths: trial 0 is [`ContractionPath::greedy`], the others
/// sample each step among the eight best candidate pairs with Boltzmann weights
/// `exp(-(score - best) / (t·max(1, |best|)))`, the score being `|result| - α(|a| + |b|)`
/// with `α` uniform in [0.1, 4] and `t` in [0.001, 1] drawn per trial from `seed`.
///
/// ```
/// use einsum::search::{path_cost, random_greedy};
/// use einsum::ContractionPath;
/// let inputs: Vec<Vec<u32>> = (0..6).map(|i| vec![i, i + 1]).collect();
/// let sizes = [10, 2, 30, 3, 40, 5, 8];
/// let cost = |p| path_cost(&inputs, &[0, 6], &sizes, p).unwrap();
/// let greedy = ContractionPath::greedy(&inputs, &[0, 6], |c| sizes[c as usize]);
/// assert!(cost(&random_greedy(&inputs, &[0, 6], &sizes, 16, 7)) <= cost(&greedy));
/// ```
pub fn random_greedy(inputs: &[Vec<u32>], output: &[u32], sizes: &[usize], trials: u32, seed: u64) -> ContractionPath {
    random_greedy_within(inputs, output, sizes, trials, seed, &mut Work::new(u64::MAX, &never))
}

/// [`random_greedy`], asking `work` between trials; the best path so far when it stops.
fn random_greedy_within(
    inputs: &[Vec<u32>],
    output: &[u32],
    sizes: &[usize],
    trials: u32,
    seed: u64,
    work: &mut Work,
) -> ContractionPath {
    let greedy = ContractionPath::greedy(inputs, output, |c| sizes[c as usize]);
    let cost = |p: &ContractionPath| path_cost(inputs, output, sizes, p).unwrap_or(f64::INFINITY);
    let mut best = (cost(&greedy), greedy);
    let mut rng = Rng::new(seed);
    for _ in 1..trials {
        if !work.poll() {
            break;
        }
        let alpha = 0.1 + 3.9 * rng.unit();
        let temperature = 0.001 + 0.999 * rng.unit();
        let p = sampled_greedy(inputs, output, sizes, alpha, temperature, &mut rng);
        let c = cost(&p);
        if c < best.0 {
            best = (c, p);
        }
    }
    best.1
}

/// One randomised greedy path (see [`random_greedy`]).
fn sampled_greedy(
    inputs: &[Vec<u32>],
    output: &[u32],
    sizes: &[usize],
    alpha: f64,
    temperature: f64,
    rng: &mut Rng,
) -> ContractionPath {
    let n = inputs.len();
    let is_out: Vec<bool> = {
        let mut v = vec![false; sizes.len()];
        output.iter().for_each(|&c| v[c as usize] = true);
        v
    };
    // Operands by SSA id (None once consumed), and each label's live holders.
    let mut ops: Vec<Option<Vec<u32>>> = inputs.iter().map(|l| Some(distinct(l))).collect();
    let mut holders: Vec<Vec<usize>> = vec![Vec::new(); sizes.len()];
    for (i, l) in ops.iter().enumerate() {
        for &c in l.as_ref().expect("live") {
            holders[c as usize].push(i);
        }
    }
    let size = |l: &[u32]| l.iter().map(|&c| sizes[c as usize] as f64).product::<f64>();
    let mut ssa: Vec<(usize, usize)> = Vec::with_capacity(n.saturating_sub(1));
    for _ in 1..n {
        let result = |a: &[u32], b: &[u32], holders: &[Vec<usize>]| -> Vec<u32> {
            let mut r: Vec<u32> = a.to_vec();
            r.extend(b.iter().filter(|c| !a.contains(c)));
            r.retain(|&c| {
                is_out[c as usize] || holders[c as usize].len() > a.contains(&c) as usize + b.contains(&c) as usize
            });
            r
        };
        let mut seen: FxHashMap<(usize, usize), ()> = FxHashMap::default();
        let mut cands: Vec<(f64, usize, usize)> = Vec::new();
        for (c, h) in holders.iter().enumerate() {
            if is_out[c] && h.len() > 2 {
                continue;
            }
            for (x, &i) in h.iter().enumerate() {
                for &j in &h[x + 1..] {
                    let key = (i.min(j), i.max(j));
                    if seen.insert(key, ()).is_some() {
                        continue;
                    }
                    let (a, b) = (ops[key.0].as_deref().expect("live"), ops[key.1].as_deref().expect("live"));
                    let score = size(&result(a, b, &holders)) - alpha * (size(a) + size(b));
                    cands.push((score, key.0, key.1));
                }
            }
        }
        let (i, j) = if cands.is_empty() {
            // No shared labels: the two smallest operands.
            let mut live: Vec<usize> = (0..ops.len()).filter(|&i| ops[i].is_some()).collect();
            live.sort_by(|&a, &b| {
                size(ops[a].as_deref().expect("live")).total_cmp(&size(ops[b].as_deref().expect("live")))
            });
            (live[0], live[1])
        } else {
            cands.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)).then(x.2.cmp(&y.2)));
            cands.truncate(8);
            let best = cands[0].0;
            let t = temperature * best.abs().max(1.0);
            let weights: Vec<f64> = cands.iter().map(|c| (-(c.0 - best) / t).exp()).collect();
            let mut r = rng.unit() * weights.iter().sum::<f64>();
            let mut pick = 0;
            while pick + 1 < cands.len() && r >= weights[pick] {
                r -= weights[pick];
                pick += 1;
            }
            (cands[pick].1, cands[pick].2)
        };
        let (a, b) = (ops[i].take().expect("live"), ops[j].take().expect("live"));
        let r = result(&a, &b, &holders);
        for c in a.iter().chain(&b) {
            holders[*c as usize].retain(|&h| h != i && h != j);
        }
        let id = ops.len();
        for &c in &r {
            holders[c as usize].push(id);
        }
        ops.push(Some(r));
        ssa.push((i, j));
    }
    ssa_to_path(n, &ssa)
}

/// [`optimal`] for at most [`AUTO_EXACT_OPERANDS`] operands, else a quick [`dp`], else
/// the hyper-optimizer ([`crate::hyper::hyper_path`]), then [`dp`] bounded by the
/// hyper-optimizer's cost (see the module docs). Every stage ends once the search has
/// taken as long as the best path so far would take to contract ([`auto_allowance`]):
/// a cheap network is planned in about a millisecond, a costly one gets up to
/// [`AUTO_MAX_TIME`] (the hyper-optimizer's batch under way aside).
///
/// ```
/// use einsum::search::auto;
/// let p = auto(&[vec![0, 1], vec![1, 2], vec![2, 0]], &[], &[2, 3, 4]);
/// assert!(p.validate(3).is_ok());
/// ```
pub fn auto(inputs: &[Vec<u32>], output: &[u32], sizes: &[usize]) -> ContractionPath {
    auto_within(inputs, output, sizes, AUTO_DP_MAX_PAIRS)
}

/// [`auto`] with the DP's budget as a parameter (tests give it a small one).
fn auto_within(inputs: &[Vec<u32>], output: &[u32], sizes: &[usize], dp_max_pairs: u64) -> ContractionPath {
    auto_until(inputs, output, sizes, dp_max_pairs, &never)
}

/// How long [`auto`] may search once its best path costs `multiply_adds`: as long as that
/// path would take to contract at [`AUTO_RATE`], from [`AUTO_MIN_TIME`] to
/// [`AUTO_MAX_TIME`]. A search longer than the contraction it could save cannot pay for
/// itself.
///
/// ```
/// use einsum::search::{auto_allowance, AUTO_MAX_TIME, AUTO_MIN_TIME};
/// use std::time::Duration;
/// assert_eq!(auto_allowance(1e3), AUTO_MIN_TIME);
/// assert_eq!(auto_allowance(5e7), Duration::from_millis(5));
/// assert_eq!(auto_allowance(1e30), AUTO_MAX_TIME);
/// assert_eq!(auto_allowance(f64::INFINITY), AUTO_MAX_TIME);
/// ```
pub fn auto_allowance(multiply_adds: f64) -> Duration {
    let seconds = multiply_adds / AUTO_RATE;
    if seconds.is_nan() || seconds >= AUTO_MAX_TIME.as_secs_f64() {
        return AUTO_MAX_TIME;
    }
    Duration::from_secs_f64(seconds).max(AUTO_MIN_TIME)
}

/// [`auto_within`] with a `stop` test: the path found so far when it stops (the caller
/// reports the stop).
fn auto_until(
    inputs: &[Vec<u32>],
    output: &[u32],
    sizes: &[usize],
    dp_max_pairs: u64,
    stop: &dyn Fn() -> bool,
) -> ContractionPath {
    let start = Instant::now();
    let cost = |p: &ContractionPath| path_cost(inputs, output, sizes, p).unwrap_or(f64::INFINITY);
    // The best cost so far sets how long the search may go on; until a path is known, the
    // longest allowance.
    let best = std::cell::Cell::new(f64::INFINITY);
    let out_of_time = || stop() || start.elapsed() >= auto_allowance(best.get());
    let small = inputs.len() <= AUTO_DP_MAX_OPERANDS;
    if small {
        // The greedy path (microseconds to find) sets the first allowance. On a large
        // network the longest allowance holds until the hyper-optimizer's first batch,
        // whose first trial is that same path.
        best.set(cost(&ContractionPath::greedy(inputs, output, |c| sizes[c as usize])));
    }
    if inputs.len() <= AUTO_EXACT_OPERANDS {
        if let Some(p) = optimal_within(inputs, output, sizes, &mut Work::new(u64::MAX, &out_of_time)) {
            return p;
        }
    }
    // A quick DP first: on chains, trees and other narrow networks it finishes at once,
    // with the best connected path.
    if small && !out_of_time() {
        // Within half the allowance, leaving the rest to the hyper-optimizer.
        let first_half = || stop() || start.elapsed() >= auto_allowance(best.get()) / 2;
        let mut work = Work::new(AUTO_DP_FIRST_PAIRS.min(dp_max_pairs), &first_half);
        if let Some(p) = dp_within(inputs, output, sizes, &mut work) {
            return p;
        }
    }
    // Then the hyper-optimizer. It reports its best cost after each batch of trials, so
    // the allowance shrinks as it finds cheaper paths, and its path bounds what the DP
    // must beat, which lets the DP give up early where it cannot finish.
    // Its budget is what the allowance leaves (a trial's reconfiguration stops at the
    // deadline), but at least a first short batch.
    let left = auto_allowance(best.get()).saturating_sub(start.elapsed());
    let opts = HyperOptions {
        max_time: Some(left.max(AUTO_MIN_TIME / 2)),
        max_trials: Some(AUTO_HYPER_TRIALS),
        ..HyperOptions::default()
    };
    let mut report = |p: &crate::hyper::HyperProgress| best.set(p.best.multiply_adds);
    let hyper = hyper_fallback(inputs, output, sizes, &opts, &out_of_time, stop(), &mut report);
    let known = cost(&hyper);
    best.set(known);
    if !small || out_of_time() {
        return hyper;
    }
    let mut work = Work::new(auto_dp_pairs(inputs.len(), dp_max_pairs), &out_of_time);
    work.known = known;
    match dp_within(inputs, output, sizes, &mut work) {
        Some(p) if cost(&p) < known => p,
        _ => hyper,
    }
}

/// [`auto`]'s DP budget in pairs of subsets for `n` operands, after the hyper-optimizer:
/// `n^5 / 4`, at most `max`. Steep, so that small networks stay within milliseconds (the
/// hyper-optimizer reaches the DP's paths on the random regular graphs and lattices of 14
/// to 40 tensors measured, where the DP would take 10^7 to 10^9 pairs) while the 84-operand
/// `lm_batch` and the 26-operand MERA, whose DP paths the hyper-optimizer misses, get the
/// 1.5·10^8 and 2·10^6 they need.
fn auto_dp_pairs(n: usize, max: u64) -> u64 {
    let n = n.min(1 << 12) as u64;
    (n.pow(5) / 4).min(max)
}

/// [`auto`] first gives the DP this many pairs of subsets (a few milliseconds): enough for
/// chains, trees and the other networks of small width it solves exactly.
const AUTO_DP_FIRST_PAIRS: u64 = 1 << 18;

/// The hyper-optimizer after a DP gave up (`dp` and `auto`), calling `progress` after each
/// batch, or the greedy path when the caller already said stop (it reports the stop).
fn hyper_fallback(
    inputs: &[Vec<u32>],
    output: &[u32],
    sizes: &[usize],
    opts: &HyperOptions,
    stop: &dyn Fn() -> bool,
    stopped: bool,
    progress: &mut dyn FnMut(&crate::hyper::HyperProgress),
) -> ContractionPath {
    let greedy = || ContractionPath::greedy(inputs, output, |c| sizes[c as usize]);
    if stopped {
        return greedy();
    }
    match crate::hyper::hyper_path_until(inputs, output, sizes, opts, stop, progress) {
        Ok(found) => found.path,
        Err(_) => greedy(),
    }
}

/// The path a [`PathChoice`] gives for a numbered network ([`crate::Einsum::new`] calls
/// this): the explicit path as given, or the search's.
pub fn find_path(
    choice: PathChoice,
    inputs: &[Vec<u32>],
    output: &[u32],
    sizes: &[usize],
) -> EinsumResult<ContractionPath> {
    find_path_until(choice, inputs, output, sizes, &never)
}

/// [`find_path`], asking `stop` once per [`STOP_CHECK_WORK`] units of search work (and
/// between random-greedy trials): when it answers `true` the search ends with
/// [`EinsumError::Interrupted`]. The greedy finder and explicit paths never ask.
///
/// ```
/// use std::cell::Cell;
/// use einsum::search::find_path_until;
/// use einsum::{EinsumError, PathChoice};
///
/// // An 8×8 grid of operands, one label per edge: `dp` asks, and is told to stop on the
/// // second question.
/// let edge = |a: u32, b: u32| a.min(b) * 64 + a.max(b);
/// let grid: Vec<Vec<u32>> = (0..64u32)
///     .map(|v| [v.wrapping_sub(8), v + 8, v.wrapping_sub(1), v + 1]
///         .into_iter()
///         .filter(|&w| w < 64 && (w / 8 == v / 8 || w % 8 == v % 8))
///         .map(|w| edge(v, w))
///         .collect())
///     .collect();
/// let sizes = vec![2; 64 * 64];
/// let asked = Cell::new(0);
/// let stop = || { asked.set(asked.get() + 1); asked.get() == 2 };
/// let err = find_path_until(PathChoice::Dp, &grid, &[], &sizes, &stop).unwrap_err();
/// assert_eq!((err, asked.get()), (EinsumError::Interrupted, 2));
/// // The greedy finder never asks.
/// assert!(find_path_until(PathChoice::Greedy, &grid, &[], &sizes, &|| true).is_ok());
/// ```
pub fn find_path_until(
    choice: PathChoice,
    inputs: &[Vec<u32>],
    output: &[u32],
    sizes: &[usize],
    stop: &dyn Fn() -> bool,
) -> EinsumResult<ContractionPath> {
    let stopped = std::cell::Cell::new(false);
    let stop = || {
        let s = stopped.get() || stop();
        stopped.set(s);
        s
    };
    let path = match choice {
        PathChoice::Explicit(p) => p,
        PathChoice::Greedy => ContractionPath::greedy(inputs, output, |c| sizes[c as usize]),
        PathChoice::Optimal => match optimal_within(inputs, output, sizes, &mut Work::new(u64::MAX, &stop)) {
            Some(p) => p,
            None => auto_until(inputs, output, sizes, AUTO_DP_MAX_PAIRS, &stop),
        },
        PathChoice::Dp => {
            // The DP's time bound ends it as a `stop` would, without counting as the
            // caller's stop.
            let deadline = Instant::now() + DP_MAX_TIME;
            let bounded = || stop() || Instant::now() >= deadline;
            let mut work = Work::new(DP_MAX_PAIRS, &bounded);
            match dp_within(inputs, output, sizes, &mut work) {
                Some(p) => p,
                None => {
                    hyper_fallback(inputs, output, sizes, &HyperOptions::default(), &stop, stopped.get(), &mut |_| {})
                }
            }
        }
        PathChoice::RandomGreedy { trials, seed } => {
            random_greedy_within(inputs, output, sizes, trials.max(1), seed, &mut Work::new(u64::MAX, &stop))
        }
        PathChoice::Auto => auto_until(inputs, output, sizes, AUTO_DP_MAX_PAIRS, &stop),
        PathChoice::Hyper(opts) => {
            crate::hyper::hyper_path_until(inputs, output, sizes, &opts, &stop, &mut |_| {})?.path
        }
    };
    if stopped.get() {
        return Err(EinsumError::Interrupted);
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `auto` on networks far past the DP's reach returns a valid path (its time is bounded
    /// by work bounds, which this checks structurally: the fallback's trial count). The DP
    /// gets 10^6 pairs here, not `AUTO_DP_MAX_PAIRS` (minutes in a debug build); the
    /// `plan_scaling` example runs `auto` itself on the same chain.
    #[test]
    fn auto_handles_large_networks() {
        let n = 300u32;
        let chain: Vec<Vec<u32>> = (0..n).map(|i| vec![i, i + 1]).collect();
        let sizes: Vec<usize> = (0..=n as usize).map(|i| 2 + (i * 7) % 5).collect();
        let p = auto_within(&chain, &[0, n], &sizes, 1_000_000);
        assert!(p.validate(n as usize).is_ok());
        assert!(
            path_cost(&chain, &[0, n], &sizes, &p).unwrap()
                <= path_cost(&chain, &[0, n], &sizes, &ContractionPath::greedy(&chain, &[0, n], |c| sizes[c as usize]))
                    .unwrap()
        );
        // 200 operands of two to four labels among 150, drawn from a fixed stream.
        let mut rng = Rng::new(7);
        let random: Vec<Vec<u32>> = (0..200)
            .map(|_| (0..2 + (rng.unit() * 3.0) as usize).map(|_| (rng.unit() * 150.0) as u32).collect())
            .collect();
        let sizes: Vec<usize> = (0..150).map(|c| 2 + c % 3).collect();
        let p = auto_within(&random, &[0, 1], &sizes, 1_000_000);
        assert!(p.validate(200).is_ok());
        // A star of 400 operands on one label.
        let star: Vec<Vec<u32>> = (1..=400).map(|i| vec![0, i]).collect();
        let sizes: Vec<usize> = (0..=400).map(|i| 2 + i % 3).collect();
        let p = auto_within(&star, &[], &sizes, 1_000_000);
        assert!(p.validate(400).is_ok());
    }
}
