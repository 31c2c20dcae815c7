//! [`Plan`]: what a contraction will do before any data exists: the parsed subscripts,
//! the size of every label, the pairwise path (given, or the einsum crate's greedy
//! finder) and, per step, the labels and sizes of the operands and of the result.
//!
//! The einsum crate checks subscripts, shapes and paths but does not report intermediate
//! sizes, so this module follows the path over label lists itself, keeping at each step
//! the labels still needed by a remaining operand or the output, as
//! `einsum::Einsum::new` does. The sizes give `contract_path`'s report and the memory
//! check that turns an intermediate too large to allocate into a `MemoryError` instead of
//! an aborted process. Sizes are `f64` so that no product of label sizes overflows.
//!
//! Labels: the crate's numbered network (`Subscripts::resolve`, ellipses expanded, broadcast
//! axes given labels of their own), each number shown as its character, or a private-use
//! character for the unnamed ones.
//!
//! Complexity: `O(steps · operands)` (operands are removed from a `Vec`).

use std::collections::HashMap;

use einsum::{ContractionPath, EinsumError, EinsumResult, Subscripts};

/// One pairwise step: positions in the current operand list and the labels involved.
pub struct Step {
    /// The two positions contracted (opt_einsum's format).
    pub positions: [usize; 2],
    /// Labels of the two operands and of the result.
    pub labels: [Vec<char>; 3],
    /// Elements of the result.
    pub size: f64,
    /// Multiply-adds of the step's direct loop (the product of all its label sizes).
    pub multiply_adds: f64,
}

/// A checked contraction: subscripts, label sizes, path and steps.
pub struct Plan {
    /// The subscripts as given.
    pub expression: String,
    /// Each operand's labels, one per axis (ellipsis axes and broadcast axes of size 1 get
    /// private-use characters).
    pub inputs: Vec<Vec<char>>,
    /// The output's labels.
    pub output: Vec<char>,
    /// The operand shapes.
    pub shapes: Vec<Vec<usize>>,
    /// The size of every label.
    pub sizes: HashMap<char, usize>,
    /// The path (pairwise: the Python side lowers longer steps).
    pub path: ContractionPath,
    /// One entry per path step, plus a final one-operand step when the last result still
    /// needs reordering or reducing (its positions are `[0, 0]`).
    pub steps: Vec<Step>,
    /// The output's shape.
    pub output_shape: Vec<usize>,
}

impl Plan {
    /// Parses, checks shapes, finds or checks the path and follows it.
    pub fn new(expression: &str, shapes: Vec<Vec<usize>>, path: Option<Vec<[usize; 2]>>) -> EinsumResult<Plan> {
        let subscripts = Subscripts::parse(expression)?;
        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        // Numbered as `einsum::Einsum::new` numbers them, so the greedy path is the same.
        let net = subscripts.resolve(&refs)?.squeeze_broadcast(&refs);
        let names = label_chars(&net.names);
        let sizes: HashMap<char, usize> = names.iter().copied().zip(net.sizes.iter().copied()).collect();
        let path = match path {
            Some(steps) => ContractionPath::new(steps),
            None => ContractionPath::greedy(&net.inputs, &net.output, |c| net.sizes[c as usize]),
        };
        let pairs = path.pairwise(net.inputs.len())?;
        let chars = |l: &[u32]| l.iter().map(|&c| names[c as usize]).collect::<Vec<char>>();
        let size = |labels: &[char]| labels.iter().map(|c| sizes[c] as f64).product::<f64>();
        let output = chars(&net.output);
        let mut live: Vec<Vec<char>> = net.inputs.iter().map(|l| chars(l)).collect();
        let inputs = live.clone();
        let mut steps = Vec::with_capacity(pairs.len() + 1);
        for (s, &[i, j]) in pairs.iter().enumerate() {
            // Validated above: `i != j`, both in range.
            let (a, b) = if i < j {
                let b = live.remove(j);
                (live.remove(i), b)
            } else {
                let a = live.remove(i);
                (a, live.remove(j))
            };
            let result: Vec<char> = if s + 1 == pairs.len() {
                output.clone()
            } else {
                let needed = |c: &char| output.contains(c) || live.iter().any(|l| l.contains(c));
                let mut r: Vec<char> = Vec::new();
                for &c in a.iter().chain(&b) {
                    if needed(&c) && !r.contains(&c) {
                        r.push(c);
                    }
                }
                r
            };
            let all: Vec<char> = distinct(a.iter().chain(&b));
            steps.push(Step {
                positions: [i, j],
                multiply_adds: size(&all),
                size: size(&result),
                labels: [a, b, result.clone()],
            });
            live.push(result);
        }
        let last = live.pop().ok_or_else(|| EinsumError::Shape("no operands".into()))?;
        if last != output {
            let all = distinct(last.iter());
            steps.push(Step {
                positions: [0, 0],
                multiply_adds: size(&all),
                size: size(&output),
                labels: [last, Vec::new(), output.clone()],
            });
        }
        let output_shape = output.iter().map(|c| sizes[c]).collect();
        Ok(Plan { expression: expression.to_string(), inputs, output, shapes, sizes, path, steps, output_shape })
    }

    /// Elements of the largest step result (the output included), 0 without steps.
    pub fn largest_intermediate(&self) -> f64 {
        self.steps.iter().map(|s| s.size).fold(0.0, f64::max)
    }

    /// Multiply-adds of all steps.
    pub fn multiply_adds(&self) -> f64 {
        self.steps.iter().map(|s| s.multiply_adds).sum()
    }
}

/// A character per label: its own for a named label, else (ellipsis dimensions, broadcast
/// axes) the first private-use characters (U+E000 on) that no label uses.
fn label_chars(names: &[Option<char>]) -> Vec<char> {
    let used: Vec<char> = names.iter().flatten().copied().collect();
    let mut fresh = ('\u{E000}'..='\u{F8FF}').filter(|c| !used.contains(c));
    names.iter().map(|n| n.unwrap_or_else(|| fresh.next().unwrap_or('\u{FFFD}'))).collect()
}

/// The distinct labels, in order of first appearance.
fn distinct<'a>(labels: impl Iterator<Item = &'a char>) -> Vec<char> {
    let mut out = Vec::new();
    for &c in labels {
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}
