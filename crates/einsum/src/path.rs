//! Pairwise contraction paths: [`ContractionPath`] in opt_einsum's format (each step
//! contracts two positions of the current operand list, removes them and appends the
//! result), its validation, and a greedy path finder.
//!
//! The greedy finder repeatedly contracts the pair of operands sharing a summed label whose
//! result removes the most memory (`|result| - |a| - |b|`, smallest first; ties broken by
//! fewer multiply-adds, then by position), like opt_einsum's `greedy`; when no remaining
//! pair shares a label it takes the outer product of the two smallest operands.
//! Complexity: per step, the pairs of operands that share a label (`O(n)` for chains and
//! lattices of bounded degree), so `O(n²)` for `n` operands of bounded degree.

use rustc_hash::FxHashSet;

use crate::error::{EinsumError, EinsumResult};

/// A pairwise contraction path: `steps[s] = [i, j]` contracts positions `i` and `j` of the
/// operand list after step `s - 1`.
///
/// ```
/// use einsum::ContractionPath;
/// let p = ContractionPath::new(vec![[0, 1], [0, 1]]);
/// assert!(p.validate(3).is_ok());
/// let e = p.validate(2).unwrap_err().to_string();
/// assert!(e.contains("step 1"), "{e}");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ContractionPath {
    steps: Vec<[usize; 2]>,
}

impl ContractionPath {
    /// A path from its steps (validated when used, against the operand count).
    pub fn new(steps: Vec<[usize; 2]>) -> Self {
        ContractionPath { steps }
    }

    /// The steps.
    pub fn steps(&self) -> &[[usize; 2]] {
        &self.steps
    }

    /// Checks the path against `n` operands: positions in range and distinct at each step
    /// (a position past the end names an operand an earlier step consumed), and exactly one
    /// operand left at the end.
    pub fn validate(&self, n: usize) -> EinsumResult<()> {
        let mut live = n;
        for (s, &[i, j]) in self.steps.iter().enumerate() {
            let err = |message: String| EinsumError::Path { step: Some(s), message };
            if i == j {
                return Err(err(format!("contracts position {i} with itself")));
            }
            if let Some(&bad) = [i, j].iter().find(|&&p| p >= live) {
                return Err(err(format!(
                    "position {bad} is out of range: {live} operands remain ({n} given, {s} steps each \
                     consumed two and appended one)"
                )));
            }
            live -= 1;
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
        ContractionPath { steps }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_errors() {
        let msg = |steps: Vec<[usize; 2]>, n| ContractionPath::new(steps).validate(n).unwrap_err().to_string();
        assert!(msg(vec![[0, 0]], 2).contains("step 0: contracts position 0 with itself"));
        assert!(msg(vec![[0, 1], [1, 2]], 3).contains("step 1: position 2 is out of range: 2 operands remain"));
        assert!(msg(vec![[0, 1]], 3).contains("leaves 2 operands uncontracted"));
        assert!(msg(vec![], 0).contains("no operands"));
        assert!(ContractionPath::new(vec![]).validate(1).is_ok());
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
