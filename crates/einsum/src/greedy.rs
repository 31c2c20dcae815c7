//! The greedy path finder ([`crate::ContractionPath::greedy`]): repeatedly the pair of
//! operands sharing a summed label whose result removes the most memory
//! (`|result| - |a| - |b|`, smallest first; ties broken by fewer multiply-adds, then by
//! position), like opt_einsum's `greedy`; when no remaining pair shares a summed label,
//! pairs sharing any label; when none shares a label, the outer product of the two
//! smallest operands.
//!
//! Candidate pairs are scored in batches (one operand against all its neighbours), each
//! batch sorted into a run, and a priority queue holds the head of every run: popping
//! the best head and moving its run on is a merge of the runs, in the order one queue of
//! every pair would give, with the queue as small as the number of runs and most of the
//! work in sorts of small arrays rather than sifts through a large heap. A pair naming a
//! consumed operand is skipped when its run reaches it, and a run whose operand is
//! consumed is dropped whole. After each step only the result is scored against the
//! operands it shares a label with, found through an index from label to live operands.
//! Operands with equal label sets form one class of which only the first two members can
//! win a tie, so only they are paired (the invariants are on `Greedy`).
//!
//! Scoring without merging label lists: the result's labels are the union of the two
//! operands' less the labels they alone hold (and the output does not), so its size is
//! `|a|·|b| / |a ∩ b| / |dropped|`. Walking the new operand's labels through the index
//! accumulates, for every neighbour at once, the product of the shared labels and of the
//! shared labels no third operand holds; so a step costs the new operand's labels times
//! their holders, not the sum of every neighbour's labels (quadratic in the width of the
//! network, which made a 10^5-tensor random regular graph take 20 s). Sizes are `f64`
//! products of integer label sizes (each at least 1): exact, and so are the quotients,
//! while they stay below 2^53, where the keys equal the label-by-label products and
//! ties are exact; past that the finder stays a greedy heuristic over rounded keys.
//!
//! Labels are renumbered densely (in their order) at the start, so every per-label table
//! is a vector and no hash is computed per candidate.
//!
//! Complexity: `O(Σ_c k_c²)` pairs scored at first (`k_c` classes holding label `c`), then
//! per step the result's labels times their holders, each new pair pushed in `O(log q)`
//! for a batch of `q` pairs: `O(n log n)` for `n` operands of bounded degree, `O(n)` pairs
//! for `n` equal operands, `O(n²)` for a star of `n` distinct operands on one label.
//! Memory: linear in the operands' labels and the live pairs.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

/// A candidate pair, ordered so that a [`BinaryHeap`] pops the smallest key first: memory
/// removed (`|result| - |a| - |b|`), then multiply-adds, then the operands' ids `i < j`
/// (the order of their positions in the list). The outer-product phase reuses it with
/// `removed` the operand's size, `flops` 0 and `j` 0.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    removed: f64,
    flops: f64,
    i: u32,
    j: u32,
}

impl Candidate {
    fn key_cmp(&self, o: &Self) -> Ordering {
        self.removed
            .total_cmp(&o.removed)
            .then(self.flops.total_cmp(&o.flops))
            .then(self.i.cmp(&o.i))
            .then(self.j.cmp(&o.j))
    }
}

impl PartialEq for Candidate {
    fn eq(&self, o: &Self) -> bool {
        self.key_cmp(o) == Ordering::Equal
    }
}

impl Eq for Candidate {}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

impl Ord for Candidate {
    /// Reversed: the max-heap's top is the smallest key.
    fn cmp(&self, o: &Self) -> Ordering {
        o.key_cmp(self)
    }
}

/// The owner of the first fill's run, which no consumed operand ends.
const NO_OWNER: u32 = u32::MAX;

/// Operands with the same label set: their live members in id order (the front two are
/// the only ones the finder pairs, see [`Greedy`]).
struct Class {
    labels: Vec<u32>,
    members: VecDeque<u32>,
}

/// The greedy path as SSA merges (inputs are ids `0..n`, merge `m` makes id `n + m`; each
/// merge names its smaller id first) and the number of pairs scored (for the tests of
/// the finder's complexity).
pub(crate) fn greedy_merges(
    inputs: &[Vec<u32>],
    output: &[u32],
    size: impl Fn(u32) -> usize,
) -> (Vec<[u32; 2]>, usize) {
    let n = inputs.len();
    // Dense label ids, in the labels' order.
    let mut names: Vec<u32> = inputs.iter().flatten().chain(output).copied().collect();
    names.sort_unstable();
    names.dedup();
    let dense = |c: u32| names.binary_search(&c).expect("a listed label") as u32;
    let labels = names.len();
    let mut g = Greedy {
        size: names.iter().map(|&c| size(c).max(1) as f64).collect(),
        out: vec![false; labels],
        count: vec![0; labels],
        labels: Vec::with_capacity(2 * n),
        foot: Vec::with_capacity(2 * n),
        own: Vec::with_capacity(2 * n),
        outs: Vec::with_capacity(2 * n),
        class: Vec::with_capacity(2 * n),
        alive: Vec::with_capacity(2 * n),
        classes: Vec::new(),
        class_of: FxHashMap::default(),
        holders: vec![SmallVec::new(); labels],
        summed_only: true,
        heap: BinaryHeap::new(),
        runs: Vec::new(),
        free: Vec::new(),
        batch: Vec::new(),
        filling: false,
        merges: Vec::with_capacity(n.saturating_sub(1)),
        scored: 0,
        acc: Vec::new(),
        touched: Vec::new(),
    };
    output.iter().for_each(|&c| g.out[dense(c) as usize] = true);
    let lists: Vec<Vec<u32>> = inputs
        .iter()
        .map(|l| {
            let mut l: Vec<u32> = l.iter().map(|&c| dense(c)).collect();
            l.sort_unstable();
            l.dedup();
            l
        })
        .collect();
    for l in &lists {
        l.iter().for_each(|&c| g.count[c as usize] += 1);
    }
    for l in lists {
        g.add(l);
    }
    // Phase 1: pairs sharing a summed label; phase 2: pairs sharing any label. Once a
    // phase has no candidate it never gets one again (a label held by one operand only is
    // summed away or is an output label), as in an all-pairs rescan.
    for summed_only in [true, false] {
        g.summed_only = summed_only;
        g.holders.iter_mut().for_each(SmallVec::clear);
        for k in 0..g.classes.len() {
            if !g.classes[k].members.is_empty() {
                g.index(k as u32);
            }
        }
        // The first fill is one run, naming no single operand: one head in the queue
        // rather than one per class.
        g.filling = true;
        for k in 0..g.classes.len() {
            g.push_pairs(k as u32, true);
        }
        g.filling = false;
        g.flush(NO_OWNER);
        while let Some(c) = g.pop_live() {
            let (a, b) = (g.class[c.i as usize], g.class[c.j as usize]);
            let r = g.contract(c.i, c.j);
            for k in if a == b { vec![a] } else { vec![a, b] } {
                if !g.classes[k as usize].members.is_empty() {
                    g.push_pairs(k, false);
                }
            }
            let k = g.class[r as usize];
            match g.classes[k as usize].members.iter().position(|&m| m == r) {
                Some(0) => g.push_pairs(k, false),
                Some(1) => g.push_pairs_within(k),
                _ => {}
            }
        }
    }
    // Phase 3: no shared label left; outer products of the two smallest operands.
    let mut by_size: BinaryHeap<Candidate> = (0..g.labels.len())
        .filter(|&i| g.alive[i])
        .map(|i| Candidate { removed: g.foot[i], flops: 0.0, i: i as u32, j: 0 })
        .collect();
    while by_size.len() > 1 {
        let (x, y) = (by_size.pop().expect("two left").i, by_size.pop().expect("two left").i);
        let r = g.contract(x.min(y), x.max(y));
        by_size.push(Candidate { removed: g.foot[r as usize], flops: 0.0, i: r, j: 0 });
    }
    if std::env::var("GREEDY_DEBUG").is_ok() {
        eprintln!("scored {} runs {}", g.scored, g.runs.len());
    }
    (g.merges, g.scored)
}

/// The finder's state. Operands are numbered in SSA order (inputs, then results), so
/// comparing ids compares positions in opt_einsum's operand list.
///
/// Invariants, between steps:
/// - `count[c]` is the number of live operands holding label `c`; a result's labels
///   that the output does not hold are held by another live operand too (`count ≥ 2`), so
///   only an input can hold a label alone (`own`, fixed from the start);
/// - `holders[c]`, for each label `c` of the phase (summed labels in the first phase, all
///   labels in the second), holds exactly the classes with live members that have `c`, in
///   no particular order;
/// - every pair an all-pairs rescan would consider *and could pick* is in a run (or is a
///   run's head, in `heap`) with its current key: among operands with equal label sets, only the lowest ids can win a
///   tie, so the candidates are, per class, its two first members and, per pair of
///   classes sharing a phase label, their first members. A key depends on the two label
///   sets and on whether each of their labels is held elsewhere; that changes only when a
///   contraction leaves a label to exactly two operands, and one of them is the new result,
///   whose pairs are scored after the step. Entries naming a consumed operand are stale and
///   skipped when popped;
/// - `acc` is `(1, 1, false)` for every class outside a scoring pass.
struct Greedy {
    /// Per dense label: its size (at least 1), whether the output holds it, its live holders.
    size: Vec<f64>,
    out: Vec<bool>,
    count: Vec<u32>,
    /// Per operand id: sorted distinct labels, size, the size of the labels it alone holds
    /// (not the output's), its output labels, its class, whether it is live.
    labels: Vec<Vec<u32>>,
    foot: Vec<f64>,
    own: Vec<f64>,
    outs: Vec<SmallVec<[u32; 2]>>,
    class: Vec<u32>,
    alive: Vec<bool>,
    classes: Vec<Class>,
    class_of: FxHashMap<Vec<u32>, u32>,
    holders: Vec<SmallVec<[u32; 4]>>,
    /// First phase: only summed labels make candidates.
    summed_only: bool,
    /// The head of every run, with the run's index.
    heap: BinaryHeap<(Candidate, u32)>,
    /// Sorted runs of candidates (best last, so a run moves on by `pop`), each with the
    /// operand all its pairs name (or [`NO_OWNER`]); `free` lists the emptied slots.
    runs: Vec<(Vec<Candidate>, u32)>,
    free: Vec<u32>,
    /// The batch being scored.
    batch: Vec<Candidate>,
    /// During the first fill: one batch for every class (`flush` waits).
    filling: bool,
    merges: Vec<[u32; 2]>,
    scored: usize,
    /// Per class, during a scoring pass: the product of the labels shared with the class
    /// scored, of those among them that no third operand holds, and whether it was reached.
    acc: Vec<(f64, f64, bool)>,
    touched: Vec<u32>,
}

impl Greedy {
    /// Adds a live operand with sorted distinct labels `l` (already counted); its id.
    fn add(&mut self, l: Vec<u32>) -> u32 {
        let id = self.labels.len() as u32;
        let k = match self.class_of.get(&l) {
            Some(&k) => k,
            None => {
                let k = self.classes.len() as u32;
                self.class_of.insert(l.clone(), k);
                self.classes.push(Class { labels: l.clone(), members: VecDeque::new() });
                self.acc.push((1.0, 1.0, false));
                k
            }
        };
        let (mut foot, mut own) = (1.0, 1.0);
        for &c in &l {
            foot *= self.size[c as usize];
            if self.count[c as usize] == 1 && !self.out[c as usize] {
                own *= self.size[c as usize];
            }
        }
        self.foot.push(foot);
        self.own.push(own);
        self.outs.push(l.iter().copied().filter(|&c| self.out[c as usize]).collect());
        self.labels.push(l);
        self.class.push(k);
        self.alive.push(true);
        let members = &mut self.classes[k as usize].members;
        members.push_back(id);
        if members.len() == 1 {
            self.index(k);
        }
        id
    }

    /// Whether label `c` makes candidates in the current phase.
    fn of_phase(&self, c: u32) -> bool {
        !self.summed_only || !self.out[c as usize]
    }

    /// Enters class `k` (which just got live members) in `holders`.
    fn index(&mut self, k: u32) {
        for x in 0..self.classes[k as usize].labels.len() {
            let c = self.classes[k as usize].labels[x];
            if self.of_phase(c) {
                self.holders[c as usize].push(k);
            }
        }
    }

    /// Removes class `k` (which just lost its last live member) from `holders`.
    fn unindex(&mut self, k: u32) {
        for &c in &self.classes[k as usize].labels {
            let h = &mut self.holders[c as usize];
            if let Some(p) = h.iter().position(|&d| d == k) {
                h.swap_remove(p);
            }
        }
    }

    /// Queues the pair `i`, `j` whose shared labels have product `shared` and whose shared
    /// labels no third operand holds have product `dropped`, over the phase's labels.
    fn push(&mut self, i: u32, j: u32, shared: f64, dropped: f64) {
        let (i, j) = (i.min(j), i.max(j));
        let (iu, ju) = (i as usize, j as usize);
        // Output labels are never dropped; in the first phase the index skips them, so
        // their shared part is found here (operands hold few of them).
        let mut shared = shared;
        if self.summed_only {
            let (a, b) = (&self.outs[iu], &self.outs[ju]);
            for &c in a {
                if b.contains(&c) {
                    shared *= self.size[c as usize];
                }
            }
        }
        let all = self.foot[iu] * self.foot[ju] / shared;
        let result = all / (dropped * self.own[iu] * self.own[ju]);
        self.scored += 1;
        self.batch.push(Candidate { removed: result - self.foot[iu] - self.foot[ju], flops: all, i, j });
    }

    /// Sorts the batch of `owner`'s pairs into a run and queues its head.
    fn flush(&mut self, owner: u32) {
        if self.batch.is_empty() || self.filling {
            return;
        }
        // `Candidate`'s order is reversed (the heap's top is the smallest key): sorted
        // ascending by it, the smallest key is last.
        self.batch.sort_unstable();
        let head = self.batch.pop().expect("a non-empty batch");
        let run = match self.free.pop() {
            Some(r) => {
                let slot = &mut self.runs[r as usize];
                std::mem::swap(&mut slot.0, &mut self.batch);
                slot.1 = owner;
                r
            }
            None => {
                self.runs.push((std::mem::take(&mut self.batch), owner));
                (self.runs.len() - 1) as u32
            }
        };
        self.heap.push((head, run));
    }

    /// Queues the pair of class `k`'s first two members, if they share a phase label.
    fn push_pairs_within(&mut self, k: u32) {
        let cl = &self.classes[k as usize];
        if cl.members.len() >= 2 && cl.labels.iter().any(|&c| self.of_phase(c)) {
            let (i, j) = (cl.members[0], cl.members[1]);
            let (mut shared, mut dropped) = (1.0, 1.0);
            for &c in &cl.labels {
                let c = c as usize;
                // In the first phase `push` adds the output labels.
                if !self.summed_only || !self.out[c] {
                    shared *= self.size[c];
                }
                if !self.out[c] && self.count[c] == 2 {
                    dropped *= self.size[c];
                }
            }
            self.push(i, j, shared, dropped);
            self.flush(i);
        }
    }

    /// Queues class `k`'s candidate pairs: its first two members, and its first member
    /// with the first member of each class sharing a phase label (only classes numbered
    /// below `k` if `lower_only`, for the initial fill).
    fn push_pairs(&mut self, k: u32, lower_only: bool) {
        let Some(&f) = self.classes[k as usize].members.front() else { return };
        self.push_pairs_within(k);
        // Each run names one operand (`flush`): the within-class pair is its own run.
        // One pass over k's labels and their holders scores every neighbouring class.
        for &c in &self.classes[k as usize].labels {
            if !self.of_phase(c) {
                continue;
            }
            let s = self.size[c as usize];
            let dropped = !self.out[c as usize] && self.count[c as usize] == 2;
            for &d in &self.holders[c as usize] {
                if d == k || (lower_only && d > k) {
                    continue;
                }
                let e = &mut self.acc[d as usize];
                if !e.2 {
                    e.2 = true;
                    self.touched.push(d);
                }
                e.0 *= s;
                if dropped {
                    e.1 *= s;
                }
            }
        }
        let touched = std::mem::take(&mut self.touched);
        for &d in &touched {
            let (shared, dropped, _) = std::mem::replace(&mut self.acc[d as usize], (1.0, 1.0, false));
            let g = self.classes[d as usize].members[0];
            self.push(f, g, shared, dropped);
        }
        self.touched = touched;
        self.touched.clear();
        self.flush(f);
    }

    /// The queued pair with the smallest key whose operands are both live.
    fn pop_live(&mut self) -> Option<Candidate> {
        while let Some((c, run)) = self.heap.pop() {
            // Move the run on to its next live pair, or drop it.
            let (items, owner) = &mut self.runs[run as usize];
            let mut queued = false;
            if *owner == NO_OWNER || self.alive[*owner as usize] {
                while let Some(next) = items.pop() {
                    if self.alive[next.i as usize] && self.alive[next.j as usize] {
                        self.heap.push((next, run));
                        queued = true;
                        break;
                    }
                }
            }
            if !queued {
                items.clear();
                self.free.push(run);
            }
            if self.alive[c.i as usize] && self.alive[c.j as usize] {
                return Some(c);
            }
        }
        None
    }

    /// Contracts the live operands `i < j`: records the merge, retires them and adds the
    /// result; its id.
    fn contract(&mut self, i: u32, j: u32) -> u32 {
        self.merges.push([i, j]);
        let r = {
            let (a, b) = (&self.labels[i as usize], &self.labels[j as usize]);
            let mut r = Vec::with_capacity(a.len() + b.len());
            let (mut x, mut y) = (0, 0);
            loop {
                let (c, inside) = match (a.get(x), b.get(y)) {
                    (Some(&p), Some(&q)) if p == q => {
                        (x, y) = (x + 1, y + 1);
                        (p, 2)
                    }
                    (Some(&p), Some(&q)) if p < q => {
                        x += 1;
                        (p, 1)
                    }
                    (_, Some(&q)) => {
                        y += 1;
                        (q, 1)
                    }
                    (Some(&p), None) => {
                        x += 1;
                        (p, 1)
                    }
                    (None, None) => break,
                };
                if self.out[c as usize] || self.count[c as usize] > inside {
                    r.push(c);
                }
            }
            r
        };
        for x in [i, j] {
            self.alive[x as usize] = false;
            // A consumed operand's labels are read no more: dropped, so the memory is that
            // of the live operands.
            for &c in &std::mem::take(&mut self.labels[x as usize]) {
                self.count[c as usize] -= 1;
            }
            let k = self.class[x as usize];
            let members = &mut self.classes[k as usize].members;
            match members.iter().position(|&m| m == x) {
                Some(p) => {
                    members.remove(p);
                }
                None => unreachable!("a live operand is in its class"),
            }
            if members.is_empty() {
                // An emptied class is done with (an operand with its labels later starts a
                // new one): its labels are dropped with it.
                self.unindex(k);
                let labels = std::mem::take(&mut self.classes[k as usize].labels);
                self.class_of.remove(&labels);
            }
        }
        r.iter().for_each(|&c| self.count[c as usize] += 1);
        self.add(r)
    }
}
