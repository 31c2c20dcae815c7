//! Contraction paths: [`ContractionPath`] in opt_einsum's format (each step contracts
//! some positions of the current operand list, removes them and appends the result), its
//! validation, its lowering to pairwise steps, and a greedy path finder; [`PathChoice`],
//! how a network picks its path (`crate::search` runs the searches).
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
//! The greedy finder repeatedly contracts the pair of operands sharing a summed label whose
//! result removes the most memory (`|result| - |a| - |b|`, smallest first; ties broken by
//! fewer multiply-adds, then by position), like opt_einsum's `greedy`; when no remaining
//! pair shares a label it takes the outer product of the two smallest operands.
//! Complexity: per step, the pairs of operands that share a label (`O(n)` for chains and
//! lattices of bounded degree), so `O(n²)` for `n` operands of bounded degree.

use rustc_hash::FxHashSet;

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
    /// ([`crate::search::optimal`]); networks of more than
    /// [`crate::search::OPTIMAL_MAX_OPERANDS`] operands get [`PathChoice::Auto`]'s path.
    Optimal,
    /// Dynamic programming over connected subsets with a growing cost cap
    /// ([`crate::search::dp`], opt_einsum's `dp`); past its work bound, random-greedy.
    Dp,
    /// The best of `trials` randomized greedy paths, the greedy path among them
    /// ([`crate::search::random_greedy`]), drawn from `seed`.
    RandomGreedy {
        /// Paths tried.
        trials: u32,
        /// The random stream's seed.
        seed: u64,
    },
    /// [`PathChoice::Optimal`] for networks it can search in about a second (see
    /// [`crate::search::auto`]), else [`PathChoice::RandomGreedy`] with its defaults.
    Auto,
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
        let mut ops: Vec<FxHashSet<u32>> = inputs.iter().map(|l| l.iter().copied().collect()).collect();
        let out: FxHashSet<u32> = output.iter().copied().collect();
        let logsize = |s: &FxHashSet<u32>| s.iter().map(|&c| (size(c).max(1) as f64).ln()).sum::<f64>();
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
                            let (lr, la, lb) = (logsize(&r), logsize(&ops[i]), logsize(&ops[j]));
                            let removed = lr.exp() - la.exp() - lb.exp();
                            let all: FxHashSet<u32> = ops[i].union(&ops[j]).copied().collect();
                            let key = (removed, logsize(&all), i, j);
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
                    by_size.sort_by(|&a, &b| logsize(&ops[a]).total_cmp(&logsize(&ops[b])).then(a.cmp(&b)));
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
}

impl std::fmt::Display for ContractionPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.fmt_steps(f)
    }
}

/// The distinct labels of a list, in order (the label lists the path searches, the
/// network builder and the slice finder follow).
pub(crate) fn distinct(l: &[u32]) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::with_capacity(l.len());
    for &c in l {
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
