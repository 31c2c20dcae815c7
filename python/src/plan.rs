//! [`Plan`]: what a contraction will do before any data exists: the parsed subscripts,
//! the size of every label, the pairwise path (given, or the einsum crate's greedy
//! finder) and, per step, the labels and sizes of the operands and of the result.
//!
//! The path is followed by the einsum crate's one follower (`einsum::FollowedPath`, as
//! `einsum::Einsum::new` follows it): at each step the labels still needed by a remaining
//! operand or the output. This module turns its steps into sizes and multiply-adds for
//! `contract_path`'s report and for the memory check that turns an intermediate too large
//! to allocate into a `MemoryError` instead of an aborted process. Sizes are `f64` so that
//! no product of label sizes overflows.
//!
//! Labels: the crate's numbered network (`Subscripts::resolve`, ellipses expanded, broadcast
//! axes given labels of their own), each number shown as its character, or a private-use
//! character for the unnamed ones.
//!
//! Complexity: the follower's (`O(n log n)` for `n` operands, plus the labels per step).

use std::collections::HashMap;

use einsum::{ContractionPath, EinsumResult, FollowedPath, Subscripts};

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
        let followed = FollowedPath::new(&net.inputs, &net.output, &path)?;
        let chars = |l: &[u32]| l.iter().map(|&c| names[c as usize]).collect::<Vec<char>>();
        let size = |labels: &[u32]| labels.iter().map(|&c| net.sizes[c as usize] as f64).product::<f64>();
        let output = chars(&net.output);
        let inputs: Vec<Vec<char>> = net.inputs.iter().map(|l| chars(l)).collect();
        let mut steps: Vec<Step> = followed
            .steps()
            .iter()
            .map(|step| {
                let [a, b] = step.operands.map(|o| followed.labels(o));
                let result = followed.labels(step.result);
                Step {
                    positions: step.positions,
                    multiply_adds: size(&followed.loops(step)),
                    size: size(result),
                    labels: [chars(a), chars(b), chars(result)],
                }
            })
            .collect();
        if let Some((last, loops)) = followed.final_reduction() {
            steps.push(Step {
                positions: [0, 0],
                multiply_adds: size(&loops),
                size: size(&net.output),
                labels: [chars(last), Vec::new(), output.clone()],
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
