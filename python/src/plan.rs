//! [`Report`]: the einsum crate's [`einsum::Plan`] as Python reads it: labels as
//! characters, and per step the positions, the labels and sizes of the operands and of
//! the result, for `contract_path`'s report, the numpy fallback, shared intermediates and
//! the memory check that turns an intermediate too large to allocate into a
//! `MemoryError`. Sizes are `f64` so that no product of label sizes overflows.
//!
//! Nothing is parsed, numbered or followed here: the plan did it once. Its labels are
//! shown as their characters, or private-use characters for the unnamed ones (ellipsis
//! dimensions, broadcast axes).
//!
//! Steps, all in opt_einsum's format (the operands removed from the list, the result
//! appended): first the plan's first sums (labels held by one operand alone summed out of
//! it), each a one-operand step `(i, i)`; then the pairwise steps, their positions taken in
//! the list those moves left; then, for one operand, a final one-operand step `(0, 0)`
//! when it needs reordering or reducing.
//!
//! Complexity: linear in the plan's steps and labels; with first sums, the pairwise
//! positions are found again in the moved list, `O(n)` per step for `n` operands.

use std::collections::HashMap;

use einsum::Plan;

/// One step: positions in the current operand list and the labels involved.
pub struct Step {
    /// The two positions contracted (opt_einsum's format); equal for a one-operand step.
    pub positions: [usize; 2],
    /// Labels of the two operands (the second empty for a one-operand step) and of the
    /// result.
    pub labels: [Vec<char>; 3],
    /// Elements of the result.
    pub size: f64,
    /// Multiply-adds of the step's direct loop (the product of all its label sizes).
    pub multiply_adds: f64,
}

/// A plan as characters and step sizes.
pub struct Report {
    /// The subscripts as given.
    pub expression: String,
    /// Each operand's labels, one per axis.
    pub inputs: Vec<Vec<char>>,
    /// The output's labels.
    pub output: Vec<char>,
    /// The size of every label.
    pub sizes: HashMap<char, usize>,
    /// The steps (module docs).
    pub steps: Vec<Step>,
}

impl Report {
    /// The report of `plan`, made for `expression`.
    pub fn new(expression: &str, plan: &Plan) -> Report {
        let net = plan.network();
        let names = label_chars(&net.names);
        let sizes: HashMap<char, usize> = names.iter().copied().zip(net.sizes.iter().copied()).collect();
        let chars = |l: &[u32]| l.iter().map(|&c| names[c as usize]).collect::<Vec<char>>();
        let size = |labels: &[u32]| labels.iter().map(|&c| net.sizes[c as usize] as f64).product::<f64>();
        let distinct_size = |labels: &[u32]| {
            let mut d = labels.to_vec();
            d.sort_unstable();
            d.dedup();
            size(&d)
        };
        let output = chars(&net.output);
        let mut steps: Vec<Step> = Vec::new();
        for (i, kept) in plan.reduced_inputs().iter().enumerate().filter(|&(i, _)| plan.summed_first(i)) {
            steps.push(Step {
                positions: [i, i],
                multiply_adds: distinct_size(&net.inputs[i]),
                size: size(kept),
                labels: [chars(&net.inputs[i]), Vec::new(), chars(kept)],
            });
        }
        // The operand list after the sums moved their results to the end (operand and
        // step ids, `PathOperand` indices), when any did.
        let moved = !steps.is_empty();
        let mut list: Vec<usize> = Vec::new();
        if moved {
            list = (0..net.inputs.len()).filter(|&i| !plan.summed_first(i)).collect();
            list.extend((0..net.inputs.len()).filter(|&i| plan.summed_first(i)));
            for (before, s) in steps.iter_mut().enumerate() {
                // Earlier sums moved operands from before this one to the end.
                let i = s.positions[0];
                s.positions = [i - before, i - before];
            }
        }
        let followed = plan.followed();
        for step in followed.steps() {
            let [a, b] = step.operands.map(|o| followed.labels(o));
            let result = followed.labels(step.result);
            let positions = if moved {
                let at = |o: einsum::PathOperand| list.iter().position(|&x| x == o.index()).expect("a live operand");
                let p = step.operands.map(at);
                list.remove(p[0].max(p[1]));
                list.remove(p[0].min(p[1]));
                list.push(step.result.index());
                p
            } else {
                step.positions
            };
            steps.push(Step {
                positions,
                multiply_adds: size(&followed.loops(step)),
                size: size(result),
                labels: [chars(a), chars(b), chars(result)],
            });
        }
        if let Some((last, loops)) = followed.final_reduction() {
            steps.push(Step {
                positions: [0, 0],
                multiply_adds: size(&loops),
                size: size(&net.output),
                labels: [chars(last), Vec::new(), output.clone()],
            });
        }
        let inputs = net.inputs.iter().map(|l| chars(l)).collect();
        Report { expression: expression.to_string(), inputs, output, sizes, steps }
    }

    /// Elements of the largest step result (the output included), 0 without steps.
    pub fn largest_intermediate(&self) -> f64 {
        self.steps.iter().map(|s| s.size).fold(0.0, f64::max)
    }
}

/// A character per label: its own for a named label, else (ellipsis dimensions, broadcast
/// axes) the first private-use characters (U+E000 on) that no label uses.
fn label_chars(names: &[Option<char>]) -> Vec<char> {
    let used: Vec<char> = names.iter().flatten().copied().collect();
    let mut fresh = ('\u{E000}'..='\u{F8FF}').filter(|c| !used.contains(c));
    names.iter().map(|n| n.unwrap_or_else(|| fresh.next().unwrap_or('\u{FFFD}'))).collect()
}
