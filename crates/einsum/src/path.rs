//! Contraction paths: [`ContractionPath`] in opt_einsum's format (each step contracts
//! some positions of the current operand list, removes them and appends the result), its
//! validation, its lowering to pairwise steps, and a greedy path finder; [`PathChoice`],
//! how a network picks its path (`crate::search` runs the searches); [`FollowedPath`],
//! the one walk of a pairwise path over label lists that every user of a path reads (its
//! invariants are in its docs).
//!
//! A step may name one operand (it is reduced: labels it alone holds are summed, then it
//! moves to the end of the list), two (a pairwise contraction) or more. [`ContractionPath::pairwise`]
//! lowers a path to the pairwise steps the graph is built from: a step of k operands becomes
//! k − 1 pairwise contractions among them, in the order given, each keeping the labels still
//! needed by the step's other operands, the rest of the list or the output, so a label
//! shared only by the step's operands and needed nowhere after is summed within the step;
//! a one-operand step only moves its operand (its labels are summed by its next contraction,
//! or by the final reduction to the output).
//!
//! The greedy finder (`crate::greedy`, which has its algorithm and complexity) gives its
//! path as merges of operand ids; [`ContractionPath::greedy`] turns them into positions
//! through a Fenwick tree of the live list, in `O(n log n)`.

use rustc_hash::FxHashMap;

use crate::error::{EinsumError, EinsumResult};

/// How to pick the contraction path (see [`crate::search`] for the searches).
///
/// ```
/// use einsum::{ContractionPath, Einsum, PathChoice};
///
/// let shapes = [vec![2, 30], vec![30, 40], vec![40, 2]];
/// let greedy = Einsum::<f64>::new("ij,jk,kl->il", &shapes, PathChoice::Greedy).unwrap();
/// // opt_einsum's format: contract operands 1 and 2 first, then the result with operand 0.
/// let path = PathChoice::Explicit(ContractionPath::new(vec![[1, 2], [0, 1]]));
/// let explicit = Einsum::<f64>::new("ij,jk,kl->il", &shapes, path).unwrap();
/// assert_eq!(greedy.output_shape(), explicit.output_shape());
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum PathChoice {
    /// [`ContractionPath::greedy`].
    Greedy,
    /// An explicit path (opt_einsum format; steps of one, two or more operands).
    Explicit(ContractionPath),
    /// The cheapest pairwise path in flops, by dynamic programming over all subsets
    /// ([`crate::search::optimal`]). Networks of more than
    /// [`crate::search::OPTIMAL_MAX_OPERANDS`] operands (or
    /// [`crate::search::OPTIMAL_MAX_LABELS`] labels) fall back to [`PathChoice::Auto`]'s
    /// path, without an error: not necessarily the cheapest path then.
    Optimal,
    /// Dynamic programming over connected subsets with a growing cost cap
    /// ([`crate::search::dp`], opt_einsum's `dp`); past its work or time bound
    /// ([`crate::search::DP_MAX_TIME`]), the hyper-optimizer with its default budget.
    Dp,
    /// The best of `trials` randomized greedy paths, the greedy path among them
    /// ([`crate::search::random_greedy`]), drawn from `seed`.
    RandomGreedy {
        /// Paths tried.
        trials: u32,
        /// The random stream's seed.
        seed: u64,
    },
    /// [`crate::search::optimal`] for small networks, else [`crate::search::dp`] within a
    /// work and a time bound, else the hyper-optimizer with a trial and a time bound:
    /// bounded time for every network (see [`crate::search::auto`]).
    Auto,
    /// The hyper-optimizer ([`crate::hyper::hyper_path`]): randomized greedy and recursive
    /// partitioning trials with tuned parameters and subtree reconfiguration, within the
    /// options' time and trial budgets. Only the path is taken: sliced labels that
    /// [`crate::hyper::HyperOptions::slice_target`] chooses reach a contraction through
    /// [`crate::hyper::hyper_path`]'s report (as the command line and Python pass them).
    Hyper(crate::hyper::HyperOptions),
}

/// A contraction path in opt_einsum's format: `steps[s]` lists the positions contracted
/// at step `s` in the operand list left by step `s - 1` (usually two positions; one or
/// more than two are allowed, as in opt_einsum).
///
/// ```
/// use einsum::ContractionPath;
/// let p = ContractionPath::new(vec![[0, 1], [0, 1]]);
/// assert!(p.validate(3).is_ok());
/// let e = p.validate(2).unwrap_err().to_string();
/// assert!(e.contains("step 1"), "{e}");
/// // One step of three operands: the same contraction, lowered to two pairwise steps.
/// let p = ContractionPath::from_steps(vec![vec![2, 0, 1]]);
/// assert_eq!(p.pairwise(3).unwrap(), vec![[2, 0], [1, 0]]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ContractionPath {
    steps: Vec<Vec<usize>>,
}

impl ContractionPath {
    /// A pairwise path from its steps (validated when used, against the operand count).
    pub fn new(steps: Vec<[usize; 2]>) -> Self {
        ContractionPath { steps: steps.into_iter().map(|s| s.to_vec()).collect() }
    }

    /// A path whose steps may contract any number of operands (validated when used).
    pub fn from_steps(steps: Vec<Vec<usize>>) -> Self {
        ContractionPath { steps }
    }

    /// The steps.
    pub fn steps(&self) -> &[Vec<usize>] {
        &self.steps
    }

    /// Whether every step contracts exactly two operands.
    pub fn is_pairwise(&self) -> bool {
        self.steps.iter().all(|s| s.len() == 2)
    }

    /// Checks the path against `n` operands: every step names at least one position,
    /// positions in range and distinct within a step (a position past the end names an
    /// operand an earlier step consumed), and exactly one operand left at the end.
    pub fn validate(&self, n: usize) -> EinsumResult<()> {
        let mut live = n;
        for (s, step) in self.steps.iter().enumerate() {
            let err = |message: String| EinsumError::Path { step: Some(s), message };
            if step.is_empty() {
                return Err(err("names no operand (a step contracts one or more positions)".into()));
            }
            for (k, &p) in step.iter().enumerate() {
                if step[..k].contains(&p) {
                    return Err(err(format!("names position {p} twice")));
                }
                if p >= live {
                    return Err(err(format!(
                        "position {p} is out of range: {live} operands remain ({n} given, and each earlier step \
                         replaced its operands by one result)"
                    )));
                }
            }
            live -= step.len() - 1;
        }
        match (n, live) {
            (0, _) => Err(EinsumError::Path { step: None, message: "there are no operands".into() }),
            (_, 1) => Ok(()),
            _ => Err(EinsumError::Path {
                step: None,
                message: format!(
                    "the path leaves {live} operands uncontracted (it has {} steps for {n} operands)",
                    self.steps.len()
                ),
            }),
        }
    }

    /// The pairwise steps (opt_einsum's format) doing the same contraction on `n` operands:
    /// a step of k operands becomes k − 1 pairwise steps among them in the order listed,
    /// a step of one operand none (see the module docs). Validates first.
    pub fn pairwise(&self, n: usize) -> EinsumResult<Vec<[usize; 2]>> {
        self.validate(n)?;
        if self.is_pairwise() {
            return Ok(self.steps.iter().map(|s| [s[0], s[1]]).collect());
        }
        // `list`: this path's operand list, as slot ids; `pairs`: the pairwise path's list.
        let mut list: Vec<usize> = (0..n).collect();
        let mut pairs: Vec<usize> = (0..n).collect();
        let mut next = n;
        let mut out = Vec::with_capacity(n.saturating_sub(1));
        for step in &self.steps {
            let slots: Vec<usize> = step.iter().map(|&p| list[p]).collect();
            let mut sorted = step.clone();
            sorted.sort_unstable();
            for &p in sorted.iter().rev() {
                list.remove(p);
            }
            let mut acc = slots[0];
            for &other in &slots[1..] {
                let i = pairs.iter().position(|&x| x == acc).expect("live slot");
                let j = pairs.iter().position(|&x| x == other).expect("live slot");
                out.push([i, j]);
                pairs.remove(i.max(j));
                pairs.remove(i.min(j));
                pairs.push(next);
                acc = next;
                next += 1;
            }
            list.push(acc);
        }
        Ok(out)
    }

    /// opt_einsum's printed form: `[(0, 1), (0, 1)]`, a one-operand step as `(0,)`.
    ///
    /// ```
    /// use einsum::ContractionPath;
    /// let p = ContractionPath::from_steps(vec![vec![1], vec![0, 1, 2], vec![0, 1]]);
    /// assert_eq!(p.to_string(), "[(1,), (0, 1, 2), (0, 1)]");
    /// ```
    fn fmt_steps(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[")?;
        for (s, step) in self.steps.iter().enumerate() {
            if s > 0 {
                f.write_str(", ")?;
            }
            let items: Vec<String> = step.iter().map(usize::to_string).collect();
            if items.len() == 1 { write!(f, "({},)", items[0])? } else { write!(f, "({})", items.join(", "))? }
        }
        f.write_str("]")
    }

    /// A greedy path for operands with label lists `inputs`, output labels `output` and
    /// label sizes `size(label)`: repeatedly the pair sharing a summed label that removes the most
    /// memory, else the outer product of the two smallest operands (see the module docs).
    pub fn greedy(inputs: &[Vec<u32>], output: &[u32], size: impl Fn(u32) -> usize) -> ContractionPath {
        greedy_path(inputs, output, size).0
    }
}

/// The greedy path as opt_einsum's positions (each merge's two ids looked up in the live
/// list), and the pairs the finder scored.
fn greedy_path(inputs: &[Vec<u32>], output: &[u32], size: impl Fn(u32) -> usize) -> (ContractionPath, usize) {
    let n = inputs.len();
    let (merges, scored) = crate::greedy::greedy_merges(inputs, output, size);
    let mut list = LiveList::new(n, n + merges.len());
    let mut steps = Vec::with_capacity(merges.len());
    for (k, &[i, j]) in merges.iter().enumerate() {
        let (i, j) = (i as usize, j as usize);
        steps.push([list.prefix(i) - 1, list.prefix(j) - 1]);
        list.remove(i);
        list.remove(j);
        list.push(n + k);
    }
    (ContractionPath::new(steps), scored)
}

impl std::fmt::Display for ContractionPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.fmt_steps(f)
    }
}

impl std::str::FromStr for ContractionPath {
    type Err = EinsumError;

    /// opt_einsum's printed form, the inverse of `Display`: `[(0,1),(0,1)]`,
    /// `[[0,1,2],[0,1]]` or `[(1,),(0,1)]`, whitespace ignored; `[]` is the empty path (one
    /// operand). Validated when used, against the operand count.
    ///
    /// ```
    /// use einsum::ContractionPath;
    /// let p: ContractionPath = "[(1,), (0, 1, 2), (0, 1)]".parse().unwrap();
    /// assert_eq!(p.to_string(), "[(1,), (0, 1, 2), (0, 1)]");
    /// assert!("[(0,1]".parse::<ContractionPath>().unwrap_err().to_string().contains("not closed"));
    /// ```
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why: &str| EinsumError::Path {
            step: None,
            message: format!("`{s}` is not a path like [(0,1),(0,1)]: {why}"),
        };
        let t: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        let mut rest = t.strip_prefix('[').and_then(|t| t.strip_suffix(']')).ok_or_else(|| bad("no enclosing [ ]"))?;
        let mut steps = Vec::new();
        while !rest.is_empty() {
            let close = match rest.chars().next() {
                Some('(') => ')',
                Some('[') => ']',
                _ => return Err(bad(&format!("step {} does not start with ( or [", steps.len()))),
            };
            let end = rest.find(close).ok_or_else(|| bad(&format!("step {} is not closed", steps.len())))?;
            let positions = rest[1..end]
                .split(',')
                .filter(|x| !x.is_empty())
                .map(|x| x.parse::<usize>().map_err(|_| bad(&format!("`{x}` is not an operand position"))))
                .collect::<Result<Vec<usize>, EinsumError>>()?;
            if positions.is_empty() {
                return Err(bad(&format!("step {} names no operand", steps.len())));
            }
            steps.push(positions);
            rest = &rest[end + 1..];
            if !rest.is_empty() {
                rest = rest.strip_prefix(',').ok_or_else(|| bad("steps must be separated by commas"))?;
            }
        }
        Ok(ContractionPath::from_steps(steps))
    }
}

/// The pairwise path in opt_einsum's format that contracts `pairs` of operand slots in
/// order, on `n` inputs: inputs are slots `0..n` and the result of pair `k` is slot
/// `n + k`, appended to the operand list as opt_einsum appends it. Positions come from a
/// Fenwick tree over the slots, so this is `O(steps log steps)`, not the `O(steps²)` of
/// searching the live list.
pub(crate) fn positional_path(n: usize, pairs: &[[usize; 2]]) -> ContractionPath {
    let mut fenwick = Fenwick::new(n + pairs.len());
    for i in 0..n {
        fenwick.add(i, 1);
    }
    let mut steps = Vec::with_capacity(pairs.len());
    for (k, &[a, b]) in pairs.iter().enumerate() {
        steps.push([fenwick.prefix(a), fenwick.prefix(b)]);
        fenwick.add(a, -1);
        fenwick.add(b, -1);
        fenwick.add(n + k, 1);
    }
    ContractionPath::new(steps)
}

/// Prefix counts of live slots.
struct Fenwick(Vec<i64>);

impl Fenwick {
    fn new(n: usize) -> Self {
        Fenwick(vec![0; n + 1])
    }

    fn add(&mut self, i: usize, delta: i64) {
        let mut i = i + 1;
        while i < self.0.len() {
            self.0[i] += delta;
            i += i & i.wrapping_neg();
        }
    }

    /// Live slots before slot `i`.
    fn prefix(&self, i: usize) -> usize {
        let (mut i, mut sum) = (i, 0);
        while i > 0 {
            sum += self.0[i];
            i &= i - 1;
        }
        sum as usize
    }
}

/// The distinct labels of a list, in order (the label lists the path searches, the
/// network builder and the slice finder follow).
pub(crate) fn distinct(l: &[u32]) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::with_capacity(l.len());
    if l.len() <= 32 {
        for &c in l {
            if !out.contains(&c) {
                out.push(c);
            }
        }
    } else {
        // Long lists (intermediates of networks of 10^4 tensors and more): a scan per
        // label would be quadratic.
        let mut seen = rustc_hash::FxHashSet::default();
        out.extend(l.iter().copied().filter(|&c| seen.insert(c)));
    }
    out
}

computegraph::define_id!(
    /// An entry of the operand list a pairwise path walks ([`FollowedPath`]): for a network
    /// of `n` operands, operand `i` is `po{i}` and the result of step `s` is `po{n + s}`.
    pub struct PathOperand = "po"
);

/// One pairwise step of a [`FollowedPath`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PairStep {
    /// The two positions contracted, in the operand list as it is before the step
    /// (opt_einsum's pair, as the lowered path gives it).
    pub positions: [usize; 2],
    /// The operands at those positions, in the same order.
    pub operands: [PathOperand; 2],
    /// The step's result, appended at the end of the list.
    pub result: PathOperand,
}

/// A pairwise path followed over label lists: the one walk of opt_einsum's shrinking
/// operand list that the cost model ([`crate::search::path_cost`]), the network builder
/// ([`crate::Einsum`]), the slice finder ([`crate::SlicePlan`]) and reports share.
///
/// Invariants, for a network of `n` operands with label lists `inputs` and output labels
/// `output`, and a path valid for it ([`ContractionPath::pairwise`] lowers and checks it):
/// - step `s` contracts the operands at `positions` of the list left by step `s - 1`
///   (operands `0..n` in order at first), removes both and appends its result
///   `PathOperand(n + s)`; each operand is contracted at most once, and exactly one
///   operand ([`FollowedPath::last`]) is left at the end;
/// - an operand's labels ([`FollowedPath::labels`]) are its input's list as given
///   (repeated labels included) or, for a result, the distinct labels of its two operands
///   that are still needed, by an operand left in the list or by the output, in order of
///   first appearance (the first operand's, then the second's); the last step's result
///   has the output's labels, in the output's order;
/// - a step loops over the distinct labels of its two operands ([`FollowedPath::loops`]).
///
/// Only label sets are fixed here: a builder that lays results out in another order
/// (the graph's batch, left, right) keeps the same labels.
///
/// Complexity: `O(n log n)` for the list (a Fenwick tree of live flags) plus the labels of
/// each step's two operands (hashed).
///
/// ```
/// use einsum::{ContractionPath, FollowedPath};
///
/// // ij,jk,kl->il: contract operands 1 and 2 (j and k stay needed), then 0 with that.
/// let (inputs, output) = (vec![vec![0, 1], vec![1, 2], vec![2, 3]], vec![0, 3]);
/// let f = FollowedPath::new(&inputs, &output, &ContractionPath::new(vec![[1, 2], [0, 1]])).unwrap();
/// let first = f.steps()[0];
/// assert_eq!(f.labels(first.result), &[1, 3]);
/// assert_eq!(f.loops(&first), vec![1, 2, 3]);
/// let second = f.steps()[1];
/// assert_eq!(second.operands[1], first.result);
/// assert_eq!((f.labels(second.result), f.last()), (&[0, 3][..], second.result));
/// assert!(f.final_reduction().is_none());
/// ```
#[derive(Clone, Debug)]
pub struct FollowedPath<'a> {
    inputs: &'a [Vec<u32>],
    output: &'a [u32],
    walk: std::borrow::Cow<'a, Walk>,
}

/// What following a path produces, without the label lists it was followed over: kept
/// by [`crate::Plan`] beside its network, and lent to a [`FollowedPath`] view of both.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Walk {
    steps: Vec<PairStep>,
    /// The labels of step `s`'s result.
    results: Vec<Vec<u32>>,
    last: PathOperand,
}

impl Walk {
    /// The pairwise steps, in order.
    pub(crate) fn steps(&self) -> &[PairStep] {
        &self.steps
    }
}

impl<'a> FollowedPath<'a> {
    /// Lowers `path` to pairwise steps ([`ContractionPath::pairwise`], which validates it
    /// against `inputs.len()` operands) and follows it.
    pub fn new(inputs: &'a [Vec<u32>], output: &'a [u32], path: &ContractionPath) -> EinsumResult<Self> {
        let pairs = path.pairwise(inputs.len())?;
        let n = inputs.len();
        // Per label: how many live operands hold it, and whether the output does.
        let mut labels: FxHashMap<u32, (usize, bool)> = FxHashMap::default();
        for l in inputs {
            for c in distinct(l) {
                labels.entry(c).or_default().0 += 1;
            }
        }
        for &c in output {
            labels.entry(c).or_default().1 = true;
        }
        let mut live = LiveList::new(n, n + pairs.len());
        let mut steps = Vec::with_capacity(pairs.len());
        let mut results: Vec<Vec<u32>> = Vec::with_capacity(pairs.len());
        for (s, &[i, j]) in pairs.iter().enumerate() {
            let operands = [PathOperand::new(live.nth(i)), PathOperand::new(live.nth(j))];
            live.remove(operands[0].index());
            live.remove(operands[1].index());
            let label_list =
                |o: PathOperand| if o.index() < n { &inputs[o.index()][..] } else { &results[o.index() - n][..] };
            let (a, b) = (label_list(operands[0]), label_list(operands[1]));
            for c in distinct(a).into_iter().chain(distinct(b)) {
                labels.get_mut(&c).expect("every operand's label is counted").0 -= 1;
            }
            let all = distinct(&[a, b].concat());
            let result: Vec<u32> = if s + 1 == pairs.len() {
                output.to_vec()
            } else {
                all.into_iter().filter(|c| labels[c].0 > 0 || labels[c].1).collect()
            };
            for c in &result {
                labels.get_mut(c).expect("a result's label is an operand's").0 += 1;
            }
            let id = PathOperand::new(n + s);
            live.push(id.index());
            steps.push(PairStep { positions: [i, j], operands, result: id });
            results.push(result);
        }
        let last = PathOperand::new(live.nth(0));
        let walk = std::borrow::Cow::Owned(Walk { steps, results, last });
        Ok(FollowedPath { inputs, output, walk })
    }

    /// The view of a walk kept beside the network it was followed over (no work).
    pub(crate) fn from_walk(inputs: &'a [Vec<u32>], output: &'a [u32], walk: &'a Walk) -> Self {
        FollowedPath { inputs, output, walk: std::borrow::Cow::Borrowed(walk) }
    }

    /// The walk, to keep apart from the label lists.
    pub(crate) fn into_walk(self) -> Walk {
        self.walk.into_owned()
    }

    /// The pairwise steps, in order.
    pub fn steps(&self) -> &[PairStep] {
        &self.walk.steps
    }

    /// The labels of an operand or result of this path (see the invariants; an operand
    /// of another path may be out of range, which panics).
    pub fn labels(&self, operand: PathOperand) -> &[u32] {
        match self.step_of(operand) {
            Some(s) => &self.walk.results[s],
            None => &self.inputs[operand.index()],
        }
    }

    /// The step whose result `operand` is, or `None` for an input.
    pub fn step_of(&self, operand: PathOperand) -> Option<usize> {
        operand.index().checked_sub(self.inputs.len())
    }

    /// The distinct labels of a step's two operands, the first operand's first: what the
    /// step loops over.
    pub fn loops(&self, step: &PairStep) -> Vec<u32> {
        distinct(&[self.labels(step.operands[0]), self.labels(step.operands[1])].concat())
    }

    /// The one operand left after the last step (the only operand when there are no steps).
    pub fn last(&self) -> PathOperand {
        self.walk.last
    }

    /// When the operand left does not have the output's labels, a final one-operand step
    /// (reorder or reduce) must follow: its labels and the distinct labels it loops over.
    /// Only a path of no steps can need one.
    pub fn final_reduction(&self) -> Option<(&[u32], Vec<u32>)> {
        let l = self.labels(self.walk.last);
        (l != self.output).then(|| (l, distinct(l)))
    }
}

/// The operand list of a pairwise path as live flags over [`PathOperand`] indices
/// (operands, then results in order) in a Fenwick tree: the p-th live entry in
/// `O(log n)`, so a path of `n` steps is followed in `O(n log n)` rather than the `O(n²)`
/// of removing from a vector. Results are appended with increasing indices, so the order
/// of live indices is the list's order.
struct LiveList {
    tree: Vec<usize>,
    len: usize,
}

impl LiveList {
    /// Entries `0..live` live, room for `capacity` entries.
    fn new(live: usize, capacity: usize) -> Self {
        let mut l = LiveList { tree: vec![0; capacity.max(live) + 1], len: 0 };
        for i in 0..live {
            l.push(i);
        }
        l
    }

    fn add(&mut self, slot: usize, delta: isize) {
        let mut i = slot + 1;
        while i < self.tree.len() {
            self.tree[i] = self.tree[i].wrapping_add_signed(delta);
            i += i & i.wrapping_neg();
        }
    }

    /// Marks `slot` live (slots are pushed in increasing order).
    fn push(&mut self, slot: usize) {
        if slot + 1 >= self.tree.len() {
            // Rebuild with twice the room.
            let old: Vec<usize> = (0..self.tree.len() - 1).filter(|&s| self.is_live(s)).collect();
            *self = LiveList { tree: vec![0; 2 * (slot + 1) + 1], len: 0 };
            for s in old {
                self.push(s);
            }
        }
        self.add(slot, 1);
        self.len += 1;
    }

    fn remove(&mut self, slot: usize) {
        self.add(slot, -1);
        self.len -= 1;
    }

    fn prefix(&self, slot: usize) -> usize {
        let (mut i, mut sum) = (slot + 1, 0);
        while i > 0 {
            sum += self.tree[i];
            i &= i - 1;
        }
        sum
    }

    fn is_live(&self, slot: usize) -> bool {
        self.prefix(slot) - if slot == 0 { 0 } else { self.prefix(slot - 1) } == 1
    }

    /// The `p`-th live entry (`p < len`, checked by path validation).
    fn nth(&self, p: usize) -> usize {
        debug_assert!(p < self.len);
        let (mut pos, mut rest) = (0, p + 1);
        let mut step = (self.tree.len() - 1).next_power_of_two();
        while step > 0 {
            let next = pos + step;
            if next < self.tree.len() && self.tree[next] < rest {
                pos = next;
                rest -= self.tree[next];
            }
            step /= 2;
        }
        pos
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustc_hash::FxHashSet;

    #[test]
    fn validation_errors() {
        let msg = |steps: Vec<Vec<usize>>, n| ContractionPath::from_steps(steps).validate(n).unwrap_err().to_string();
        assert!(msg(vec![vec![0, 0]], 2).contains("step 0: names position 0 twice"));
        assert!(msg(vec![vec![0, 1], vec![1, 2]], 3).contains("step 1: position 2 is out of range: 2 operands remain"));
        assert!(msg(vec![vec![0, 1]], 3).contains("leaves 2 operands uncontracted"));
        assert!(msg(vec![], 0).contains("no operands"));
        assert!(msg(vec![vec![]], 1).contains("step 0: names no operand"));
        assert!(
            msg(vec![vec![0, 1, 2], vec![0, 1]], 3).contains("step 1: position 1 is out of range: 1 operands remain")
        );
        assert!(msg(vec![vec![0], vec![0]], 2).contains("leaves 2 operands uncontracted"));
        assert!(ContractionPath::new(vec![]).validate(1).is_ok());
        assert!(ContractionPath::from_steps(vec![vec![0]]).validate(1).is_ok());
        assert!(ContractionPath::from_steps(vec![vec![1], vec![0, 2, 1]]).validate(3).is_ok());
    }

    #[test]
    fn lowering_follows_the_operand_list() {
        let lower = |steps: Vec<Vec<usize>>, n| ContractionPath::from_steps(steps).pairwise(n).unwrap();
        // (1,) moves operand 1 to the end: [0, 2, 1]; then (0, 2) contracts operands 0 and 1.
        assert_eq!(lower(vec![vec![1], vec![0, 2], vec![0, 1]], 3), vec![[0, 1], [0, 1]]);
        assert_eq!(lower(vec![vec![1], vec![1, 2], vec![0, 1]], 3), vec![[2, 1], [0, 1]]);
        // (0, 1, 2) on four operands: 0·1 first (list [2, 3, r]), then r with 2.
        assert_eq!(lower(vec![vec![0, 1, 2], vec![0, 1]], 4), vec![[0, 1], [2, 0], [0, 1]]);
        assert_eq!(lower(vec![vec![3, 1, 0], vec![0, 1]], 4), vec![[3, 1], [2, 0], [0, 1]]);
        assert_eq!(lower(vec![vec![0]], 1), Vec::<[usize; 2]>::new());
        assert!(ContractionPath::from_steps(vec![vec![0, 3]]).pairwise(3).is_err());
    }

    /// The greedy finder as it was before the candidate queue: every candidate pair rescored
    /// at every step (`O(n³)` when many operands share a label). Sizes are exact products
    /// (each label at least 1) as in the queue version, instead of `exp` of summed logarithms.
    fn all_pairs_greedy(inputs: &[Vec<u32>], output: &[u32], size: impl Fn(u32) -> usize) -> ContractionPath {
        let mut ops: Vec<FxHashSet<u32>> = inputs.iter().map(|l| l.iter().copied().collect()).collect();
        let out: FxHashSet<u32> = output.iter().copied().collect();
        let fp = |s: &FxHashSet<u32>| {
            let mut l: Vec<u32> = s.iter().copied().collect();
            l.sort_unstable();
            l.iter().map(|&c| size(c).max(1) as f64).product::<f64>()
        };
        let mut steps = Vec::with_capacity(ops.len().saturating_sub(1));
        while ops.len() > 1 {
            // How many live operands hold each label.
            let mut count: rustc_hash::FxHashMap<u32, usize> = Default::default();
            for o in &ops {
                for &c in o {
                    *count.entry(c).or_default() += 1;
                }
            }
            let result = |i: usize, j: usize| -> FxHashSet<u32> {
                ops[i]
                    .union(&ops[j])
                    .copied()
                    .filter(|c| {
                        let inside = ops[i].contains(c) as usize + ops[j].contains(c) as usize;
                        out.contains(c) || count[c] > inside
                    })
                    .collect()
            };
            // Candidate pairs: operands sharing a summed label; if there are none, operands
            // sharing any label. (A batch label shared by many operands would otherwise make
            // every pair of them a candidate, most of them outer products in disguise.)
            let mut best: Option<(f64, f64, usize, usize)> = None;
            for summed_only in [true, false] {
                let mut holders: rustc_hash::FxHashMap<u32, Vec<usize>> = Default::default();
                for (i, o) in ops.iter().enumerate() {
                    for &c in o.iter().filter(|c| !summed_only || !out.contains(c)) {
                        holders.entry(c).or_default().push(i);
                    }
                }
                let mut seen: FxHashSet<(usize, usize)> = FxHashSet::default();
                let mut labels: Vec<&u32> = holders.keys().collect();
                labels.sort_unstable();
                for c in labels {
                    let h = &holders[c];
                    for (x, &i) in h.iter().enumerate() {
                        for &j in &h[x + 1..] {
                            if !seen.insert((i, j)) {
                                continue;
                            }
                            // (memory removed, log multiply-adds, i, j): smallest wins.
                            let r = result(i, j);
                            let removed = fp(&r) - fp(&ops[i]) - fp(&ops[j]);
                            let all: FxHashSet<u32> = ops[i].union(&ops[j]).copied().collect();
                            let key = (removed, fp(&all), i, j);
                            if best.is_none_or(|b| key < b) {
                                best = Some(key);
                            }
                        }
                    }
                }
                if best.is_some() {
                    break;
                }
            }
            let (i, j) = match best {
                Some((_, _, i, j)) => (i, j),
                None => {
                    // No shared labels: outer product of the two smallest.
                    let mut by_size: Vec<usize> = (0..ops.len()).collect();
                    by_size.sort_by(|&a, &b| fp(&ops[a]).total_cmp(&fp(&ops[b])).then(a.cmp(&b)));
                    (by_size[0].min(by_size[1]), by_size[0].max(by_size[1]))
                }
            };
            let r = result(i, j);
            ops.remove(j);
            ops.remove(i);
            ops.push(r);
            steps.push([i, j]);
        }
        ContractionPath::new(steps)
    }

    #[test]
    fn greedy_contracts_a_chain_along_the_chain() {
        // a-b-c-d chain of matrices with a large middle bond: never an outer product.
        let inputs = vec![vec![0, 1], vec![1, 2], vec![2, 3]];
        let p = ContractionPath::greedy(&inputs, &[0, 3], |c| [2, 10, 10, 2][c as usize]);
        assert_eq!(p.steps().len(), 2);
        assert!(p.validate(3).is_ok());
        // A batch label (4, in every operand and the output) does not make (0, 2) a candidate.
        let inputs = vec![vec![4, 0, 1], vec![4, 1, 2], vec![4, 2, 3]];
        let p = ContractionPath::greedy(&inputs, &[4, 0, 3], |c| [2, 10, 10, 2, 10][c as usize]);
        assert_ne!(p.steps()[0], [0, 2]);
        // Only output labels shared: still a complete path.
        let p = ContractionPath::greedy(&[vec![0, 1], vec![0, 1], vec![1]], &[0, 1], |_| 3);
        assert!(p.validate(3).is_ok());
        // Disconnected operands still get a complete path.
        let p = ContractionPath::greedy(&[vec![0], vec![1], vec![2]], &[0, 1, 2], |_| 2);
        assert!(p.validate(3).is_ok());
    }

    proptest::proptest! {
        /// The queue finder gives the all-pairs finder's path (same keys, same ties), valid.
        #[test]
        fn greedy_matches_the_all_pairs_rescan(
            inputs in proptest::collection::vec(proptest::collection::vec(0u32..8, 0..4), 1..10),
            out_mask in 0u32..256,
            sizes in proptest::collection::vec(1usize..5, 8),
        ) {
            let mut output: Vec<u32> = Vec::new();
            for l in &inputs {
                for &c in l {
                    if out_mask >> c & 1 == 1 && !output.contains(&c) {
                        output.push(c);
                    }
                }
            }
            let size = |c: u32| sizes[c as usize];
            let p = ContractionPath::greedy(&inputs, &output, size);
            proptest::prop_assert!(p.validate(inputs.len()).is_ok());
            proptest::prop_assert_eq!(p, all_pairs_greedy(&inputs, &output, size));
        }
    }

    #[test]
    fn greedy_scores_few_pairs_when_many_operands_share_a_label() {
        // 1000 operands `a` (`a,a,...->a`): equal label sets, so one candidate per step.
        let n = 1000;
        let (p, scored) = greedy_path(&vec![vec![0]; n], &[0], |_| 3);
        assert!(p.validate(n).is_ok());
        assert!(scored <= 2 * n, "{scored} pairs scored");
        assert_eq!(&p.steps()[..2], &[vec![0, 1], vec![0, 1]]);
        // A 400-operand star (`za,zb,...->`): the first fill scores the n²/2 pairs sharing
        // z, then each step only the result's pairs (the all-pairs rescan: n³/6).
        let n = 400;
        let star: Vec<Vec<u32>> = (1..=n as u32).map(|i| vec![0, i]).collect();
        let (p, scored) = greedy_path(&star, &[], |c| 2 + c as usize % 3);
        assert!(p.validate(n).is_ok());
        assert!(scored <= n * n, "{scored} pairs scored");
        // A chain: each step scores the result against its two neighbours.
        let chain: Vec<Vec<u32>> = (0..n as u32).map(|i| vec![i, i + 1]).collect();
        let (p, scored) = greedy_path(&chain, &[0, n as u32], |c| 2 + c as usize % 5);
        assert!(p.validate(n).is_ok());
        assert!(scored <= 4 * n, "{scored} pairs scored");
        // A 100×100 lattice: each step scores the result against its few neighbours.
        let side = 100u32;
        let mut lattice = vec![Vec::new(); (side * side) as usize];
        let mut label = 0;
        for v in 0..side * side {
            for (w, ok) in [(v + 1, v % side + 1 < side), (v + side, v + side < side * side)] {
                if ok {
                    lattice[v as usize].push(label);
                    lattice[w as usize].push(label);
                    label += 1;
                }
            }
        }
        let (p, scored) = greedy_path(&lattice, &[], |_| 2);
        assert!(p.validate(lattice.len()).is_ok());
        assert!(scored <= 8 * lattice.len(), "{scored} pairs scored");
    }

    /// opt_einsum's list as a plain vector of (operand, labels), needed labels found by
    /// scanning it: per step (positions, operands, result, loops, result labels), and the
    /// operand left with its labels.
    #[allow(clippy::type_complexity)]
    fn reference(
        inputs: &[Vec<u32>],
        output: &[u32],
        pairs: &[[usize; 2]],
    ) -> (Vec<([usize; 2], [usize; 2], usize, Vec<u32>, Vec<u32>)>, (usize, Vec<u32>)) {
        let n = inputs.len();
        let mut live: Vec<(usize, Vec<u32>)> = inputs.iter().cloned().enumerate().collect();
        let mut steps = Vec::new();
        for (s, &[i, j]) in pairs.iter().enumerate() {
            let (a, b) = (live[i].clone(), live[j].clone());
            live.retain(|(id, _)| *id != a.0 && *id != b.0);
            let mut all: Vec<u32> = Vec::new();
            for &c in a.1.iter().chain(&b.1) {
                if !all.contains(&c) {
                    all.push(c);
                }
            }
            let result: Vec<u32> = if s + 1 == pairs.len() {
                output.to_vec()
            } else {
                all.iter().copied().filter(|c| output.contains(c) || live.iter().any(|l| l.1.contains(c))).collect()
            };
            steps.push(([i, j], [a.0, b.0], n + s, all, result.clone()));
            live.push((n + s, result));
        }
        assert_eq!(live.len(), 1);
        (steps, live.pop().unwrap())
    }

    /// A path of steps of one to three operands drawn from `draws` (then pairs), valid for
    /// `n` operands; sometimes a one-operand step after the last contraction.
    fn random_path(n: usize, draws: &[u64]) -> ContractionPath {
        let (mut m, mut k, mut steps) = (n, 0, Vec::new());
        while m > 1 || (k < draws.len() && draws[k] % 5 == 0) {
            let d = draws[k % draws.len()];
            let len = if k < draws.len() { 1 + (d % 3) as usize } else { 2 }.min(m);
            let mut free: Vec<usize> = (0..m).collect();
            let mut r = d / 3;
            let step: Vec<usize> = (0..len)
                .map(|_| {
                    let p = free.remove(r as usize % free.len());
                    r = r / 7 + 1;
                    p
                })
                .collect();
            m -= len - 1;
            k += 1;
            steps.push(step);
        }
        ContractionPath::from_steps(steps)
    }

    proptest::proptest! {
        #[test]
        fn the_follower_agrees_with_a_plain_list(
            inputs in proptest::collection::vec(proptest::collection::vec(0u32..7, 0..4), 1..9),
            out_mask in 0u32..128,
            draws in proptest::collection::vec(proptest::prelude::any::<u64>(), 1..12),
        ) {
            let mut output: Vec<u32> = Vec::new();
            for l in &inputs {
                for &c in l {
                    if out_mask >> c & 1 == 1 && !output.contains(&c) {
                        output.push(c);
                    }
                }
            }
            let path = random_path(inputs.len(), &draws);
            let pairs = path.pairwise(inputs.len()).unwrap();
            let f = FollowedPath::new(&inputs, &output, &path).unwrap();
            let (want, (last, last_labels)) = reference(&inputs, &output, &pairs);
            proptest::prop_assert_eq!(f.steps().len(), want.len());
            for (step, (positions, operands, result, loops, labels)) in f.steps().iter().zip(&want) {
                proptest::prop_assert_eq!(step.positions, *positions);
                proptest::prop_assert_eq!(step.operands.map(PathOperand::index), *operands);
                proptest::prop_assert_eq!(step.result.index(), *result);
                proptest::prop_assert_eq!(&f.loops(step), loops);
                proptest::prop_assert_eq!(f.labels(step.result), &labels[..]);
                proptest::prop_assert_eq!(f.step_of(step.result), Some(result - inputs.len()));
            }
            proptest::prop_assert_eq!(f.last().index(), last);
            proptest::prop_assert_eq!(f.labels(f.last()), &last_labels[..]);
            let reduction = (last_labels != output).then(|| (&last_labels[..], distinct(&last_labels)));
            proptest::prop_assert_eq!(f.final_reduction(), reduction);
        }
    }

    #[test]
    fn a_network_of_one_operand_has_no_steps_and_may_need_a_reduction() {
        let inputs = vec![vec![0, 1, 1]];
        let f = FollowedPath::new(&inputs, &[1], &ContractionPath::new(vec![])).unwrap();
        assert!(f.steps().is_empty());
        assert_eq!((f.last().index(), f.step_of(f.last())), (0, None));
        assert_eq!(f.final_reduction(), Some((&[0, 1, 1][..], vec![0, 1])));
        assert!(FollowedPath::new(&inputs, &[0, 1], &ContractionPath::new(vec![[0, 1]])).is_err());
        assert_eq!(PathOperand::new(3).to_string(), "po3");
    }

    #[test]
    fn live_list_follows_a_vector_model() {
        // The opt_einsum semantics on a plain vector, against the Fenwick list (capacity 4,
        // so it grows).
        let n = 37;
        let mut model: Vec<usize> = (0..n).collect();
        let mut live = LiveList::new(n, 4);
        let mut next = n;
        let mut seed = 12345u64;
        while model.len() > 1 {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let i = (seed >> 33) as usize % model.len();
            let j = (i + 1 + (seed >> 13) as usize % (model.len() - 1)) % model.len();
            let (si, sj) = (live.nth(i), live.nth(j));
            assert_eq!((si, sj), (model[i], model[j]));
            live.remove(si);
            live.remove(sj);
            model.retain(|&x| x != si && x != sj);
            live.push(next);
            model.push(next);
            next += 1;
        }
        assert_eq!(live.nth(0), model[0]);
    }
}
