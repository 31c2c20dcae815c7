//! Slice finding: which labels to fix, one value at a time, so that a contraction fits a
//! memory target ([`SlicePlan::for_plan`], on a [`Plan`]'s network, first sums and walk).
//!
//! Slicing a label `k` of size `d` splits a contraction into `d` contractions of the same
//! expression with `k` fixed: every tensor holding `k` shrinks by the factor `d`, and the
//! results are summed (`k` summed) or placed side by side (`k` in the output). Slicing
//! labels `S` gives `∏_{k∈S} d_k` slices addressed by a linear index, the last sliced
//! label varying fastest.
//!
//! The greedy finder (in the manner of cotengra's slice finder, written from its
//! description) follows the path once over label lists, then repeatedly adds one label,
//! trading memory against work: the measure (the estimated peak bytes of one slice, or its
//! largest intermediate in elements) minus its floor (its value with every label sliced:
//! what slicing cannot remove, such as the operands and the output held whole), times the
//! multiply-adds of all slices, smallest first; ties go to the smaller measure, then to
//! the smaller sum of the slice's intermediates, then to the lower label number. Picking
//! by the measure alone (flops only breaking ties) sliced MERA open 26 under 360 MiB into
//! 1782 slices with 15.5 times the work; the product gives 135 slices and 4.6 times.
//! It stops when the target is met, then drops any label the target no longer needs
//! (last added first). Explicit labels (cotengra's `sliced_inds`) are taken as given.
//!
//! Invariants:
//! - a plan's labels are distinct labels of the expression, each of size > 1 when found
//!   greedily; its slice count is their product and fits a `u64`;
//! - its estimates ([`SlicePlan::peak_bytes`]) count every tensor a sliced evaluation
//!   holds: the caller's operands, the copies of the sliced operands, the intermediates
//!   alive together at each step (as [`crate::Einsum`]'s memory check counts them) and,
//!   when sliced, the accumulator of the output's full shape; for the reverse pass, the
//!   caller's cotangent (the output's full shape), the forward intermediates and their
//!   cotangents, the gradients of every operand and their accumulators (not the value's
//!   accumulator of `eval_slices_with_value` and the like, one more tensor of the
//!   output's shape).
//!   For a Hessian-vector product ([`SlicePlan::hvp_peak_bytes`]), also the directions
//!   and their slice copies, and the tangents of the forward intermediates and of their
//!   cotangents.
//!
//! Complexity: following the path is `O(Σ labels per step)`; the greedy finder evaluates
//! `O(L)` candidates per added label, `O(L² · Σ labels per step)` in all for `L` labels.

use crate::error::{EinsumError, EinsumResult};
use crate::memory::MemoryLimit;
use crate::path::{ContractionPath, PathChoice, distinct};
use crate::plan::Plan;
use crate::subscripts::Subscripts;

/// How to slice a contraction ([`crate::SlicedEinsum::new`]).
///
/// ```
/// use einsum::{Einsum, EinsumOptions, MemoryLimit, PathChoice, SlicedEinsum, Slicing};
///
/// // A chain whose middle intermediate ("il", 64x64 doubles: 32 KiB) is too large for 20 KiB.
/// let shapes = [vec![64, 4], vec![4, 64], vec![64, 4]];
/// let options = EinsumOptions::default().memory_limit(MemoryLimit::Bytes(20 << 10));
/// let path = PathChoice::Explicit(einsum::ContractionPath::new(vec![[0, 1], [0, 1]]));
/// assert!(Einsum::<f64>::with_options("ij,jk,kl->il", &shapes, path.clone(), &options).is_err());
/// let s = SlicedEinsum::<f64>::new("ij,jk,kl->il", &shapes, path, &options, &Slicing::Memory { gradient: false }).unwrap();
/// assert!(s.plan().n_slices() > 1);
/// assert!(s.plan().peak_bytes() <= 20 << 10);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Slicing {
    /// No slicing: one slice, the plain contraction (and its memory check).
    None,
    /// Slice greedily until one slice fits the options' memory limit: the forward pass,
    /// and with `gradient` also the reverse pass with respect to every operand. Nothing is
    /// sliced when the contraction fits as it is.
    Memory {
        /// Whether the reverse pass must fit too.
        gradient: bool,
    },
    /// Slice greedily until one slice's Hessian-vector product (forward over reverse,
    /// with respect to every operand) fits the options' memory limit
    /// ([`crate::SlicedEinsum::hvp`]).
    MemoryHvp,
    /// Slice greedily until the largest intermediate of a slice has at most this many
    /// elements (cotengra's `target_size`, opt_einsum's `memory_limit`). The output, held
    /// whole, must fit it too.
    LargestIntermediate(u64),
    /// Exactly these labels (cotengra's `sliced_inds`), in this order.
    Labels(Vec<char>),
}

/// The labels a contraction is sliced on, the slice count and what slicing costs.
///
/// It is plain data: with the expression, the shapes and the path it rebuilds the same
/// sliced contraction anywhere (`Slicing::Labels(plan.labels().to_vec())`), which is how
/// a plan travels to another process.
#[derive(Clone, Debug, PartialEq)]
pub struct SlicePlan {
    labels: Vec<char>,
    /// The sliced labels as numbered in the plan's network.
    ids: Vec<u32>,
    sizes: Vec<usize>,
    n_slices: u64,
    unsliced_multiply_adds: f64,
    slice_multiply_adds: f64,
    peak_bytes: f64,
    gradient_peak_bytes: f64,
    hvp_peak_bytes: f64,
    largest_intermediate: f64,
}

impl SlicePlan {
    /// The sliced labels, in slice-index order (the last varies fastest).
    pub fn labels(&self) -> &[char] {
        &self.labels
    }
    /// The sliced labels as the plan's network numbers them ([`Plan::network`]), in the
    /// same order: what [`Plan::slice`] drops.
    pub fn label_ids(&self) -> &[u32] {
        &self.ids
    }
    /// The size of each sliced label.
    pub fn sizes(&self) -> &[usize] {
        &self.sizes
    }
    /// The number of slices (1 when nothing is sliced).
    pub fn n_slices(&self) -> u64 {
        self.n_slices
    }
    /// Multiply-adds of the unsliced contraction along the path.
    pub fn unsliced_multiply_adds(&self) -> f64 {
        self.unsliced_multiply_adds
    }
    /// Multiply-adds of one slice.
    pub fn slice_multiply_adds(&self) -> f64 {
        self.slice_multiply_adds
    }
    /// Multiply-adds of all slices.
    pub fn multiply_adds(&self) -> f64 {
        self.slice_multiply_adds * self.n_slices as f64
    }
    /// The slicing overhead: multiply-adds of all slices over the unsliced ones (1 when
    /// nothing is sliced or only output labels are).
    pub fn overhead(&self) -> f64 {
        if self.unsliced_multiply_adds > 0.0 { self.multiply_adds() / self.unsliced_multiply_adds } else { 1.0 }
    }
    /// Estimated peak bytes of a sliced forward evaluation (see the module docs).
    pub fn peak_bytes(&self) -> u64 {
        to_bytes(self.peak_bytes)
    }
    /// Estimated peak bytes of a sliced reverse pass with respect to every operand.
    pub fn gradient_peak_bytes(&self) -> u64 {
        to_bytes(self.gradient_peak_bytes)
    }
    /// Estimated peak bytes of a sliced Hessian-vector product with respect to every
    /// operand (see the module docs).
    pub fn hvp_peak_bytes(&self) -> u64 {
        to_bytes(self.hvp_peak_bytes)
    }
    /// Elements of the largest intermediate of one slice (its result included).
    pub fn largest_intermediate(&self) -> f64 {
        self.largest_intermediate
    }

    /// The values of the sliced labels in slice `index` (`index < n_slices`).
    pub fn slice_values(&self, index: u64) -> Vec<usize> {
        let mut v = vec![0; self.sizes.len()];
        let mut rest = index;
        for (x, &d) in v.iter_mut().zip(&self.sizes).rev() {
            let d = d.max(1) as u64;
            *x = (rest % d) as usize;
            rest /= d;
        }
        v
    }

    /// Chooses the labels to slice for `subscripts` with operand `shapes` along `path`,
    /// elements of `elem_bytes` bytes, within `limit` (see [`Slicing`]): a [`Plan`] of
    /// them, then [`SlicePlan::for_plan`].
    pub fn find(
        subscripts: &Subscripts,
        shapes: &[Vec<usize>],
        path: &ContractionPath,
        elem_bytes: usize,
        slicing: &Slicing,
        limit: MemoryLimit,
    ) -> EinsumResult<SlicePlan> {
        let plan = Plan::from_subscripts(subscripts.clone(), shapes, PathChoice::Explicit(path.clone()), limit)?;
        SlicePlan::for_plan(&plan, elem_bytes, slicing)
    }

    /// Chooses the labels to slice for `plan` (its network, its first sums and its path),
    /// elements of `elem_bytes` bytes, within the plan's memory budget (see [`Slicing`]).
    ///
    /// ```
    /// use einsum::{MemoryLimit, PathChoice, Plan, SlicePlan, Slicing};
    ///
    /// let plan = Plan::new("ab,bc->ac", &[vec![3, 5], vec![5, 7]], PathChoice::Greedy, MemoryLimit::Unlimited).unwrap();
    /// let s = SlicePlan::for_plan(&plan, 8, &Slicing::Labels(vec!['b'])).unwrap();
    /// assert_eq!((s.n_slices(), s.label_ids()), (5, &[1][..]));
    /// // The plan of one slice drops the label.
    /// assert_eq!(plan.slice(s.label_ids()).unwrap().shapes(), &[vec![3], vec![7]]);
    /// ```
    pub fn for_plan(plan: &Plan, elem_bytes: usize, slicing: &Slicing) -> EinsumResult<SlicePlan> {
        let net = Network::new(plan, elem_bytes);
        let name = plan.name();
        let limit_f = match plan.memory_limit() {
            MemoryLimit::Bytes(b) => b as f64,
            MemoryLimit::Unlimited => f64::INFINITY,
        };
        let chosen: Vec<u32> = match slicing {
            Slicing::None => Vec::new(),
            Slicing::Labels(labels) => {
                let mut ids = Vec::with_capacity(labels.len());
                for &c in labels {
                    let id = net.id(c).ok_or_else(|| {
                        EinsumError::Slice(format!(
                            "cannot slice label `{c}`: `{name}` has no such label (its labels are {})",
                            net.labels.iter().flatten().collect::<String>()
                        ))
                    })?;
                    if ids.contains(&id) {
                        return Err(EinsumError::Slice(format!("label `{c}` is listed twice in the sliced labels")));
                    }
                    ids.push(id);
                }
                ids
            }
            Slicing::Memory { gradient } => {
                let measure = |c: &Costs| if *gradient { c.gradient_peak } else { c.peak };
                let unit = if *gradient { "gradient bytes" } else { "bytes" };
                net.greedy(measure, limit_f, unit, &name)?
            }
            Slicing::MemoryHvp => net.greedy(|c| c.hvp_peak, limit_f, "hvp bytes", &name)?,
            Slicing::LargestIntermediate(t) => {
                net.greedy(|c| c.largest.max(c.output_if_sliced), *t as f64, "elements", &name)?
            }
        };
        // Sliced labels are named by their characters: an ellipsis's axes have none, so
        // such an expression runs unsliced (its `Einsum` checks the memory limit exactly)
        // and cannot be sliced yet.
        if plan.subscripts().is_none_or(Subscripts::has_ellipsis) && !chosen.is_empty() {
            return Err(EinsumError::Slice(format!(
                "`{name}` has an ellipsis or unnamed labels: only expressions with named labels can be sliced (for now)"
            )));
        }
        let c = net.costs(&chosen);
        let n_slices = chosen
            .iter()
            .try_fold(1u64, |acc, &l| acc.checked_mul(net.sizes[l as usize] as u64))
            .ok_or_else(|| EinsumError::Slice("the sliced labels make more than 2^64 slices".into()))?;
        Ok(SlicePlan {
            labels: chosen.iter().map(|&l| net.labels[l as usize].expect("a sliced label is named")).collect(),
            sizes: chosen.iter().map(|&l| net.sizes[l as usize]).collect(),
            ids: chosen,
            n_slices,
            unsliced_multiply_adds: net.costs(&[]).madds,
            slice_multiply_adds: c.madds,
            peak_bytes: c.peak,
            gradient_peak_bytes: c.gradient_peak,
            hvp_peak_bytes: c.hvp_peak,
            largest_intermediate: c.largest,
        })
    }
}

fn to_bytes(x: f64) -> u64 {
    if x >= u64::MAX as f64 { u64::MAX } else { x as u64 }
}

/// One step of the path over label ids: the distinct labels it loops over, its result's
/// labels, and the earlier steps whose results it consumes.
struct Step {
    all: Vec<u32>,
    result: Vec<u32>,
    consumes: Vec<usize>,
}

/// The network as label ids, followed along the path once.
struct Network {
    /// Each label's character (`None` for an ellipsis dimension or a broadcast axis).
    labels: Vec<Option<char>>,
    sizes: Vec<usize>,
    operands: Vec<Vec<u32>>,
    output: Vec<u32>,
    steps: Vec<Step>,
    elem: f64,
}

/// What one slice costs under a set of sliced labels (sizes in elements or bytes, `f64`).
struct Costs {
    /// Estimated peak bytes of the forward pass.
    peak: f64,
    /// Estimated peak bytes of the reverse pass (all operands).
    gradient_peak: f64,
    /// Estimated peak bytes of a Hessian-vector product (all operands).
    hvp_peak: f64,
    /// Elements of the largest intermediate of one slice.
    largest: f64,
    /// Elements of the full output when anything is sliced (it is held whole), else 0.
    output_if_sliced: f64,
    /// Elements of all intermediates of one slice.
    sum: f64,
    /// Multiply-adds of one slice.
    madds: f64,
    /// Elements of the operands and of the output, whole.
    operands: f64,
    output: f64,
    /// The slice count.
    n: f64,
}

impl Network {
    fn new(plan: &Plan, elem: usize) -> Self {
        let net = plan.network();
        // The first sums are steps of their own (a tensor alive until a pairwise step
        // consumes it), as `Einsum` runs them; then the pairwise steps, whose operands of
        // index `i < n` are the first sum of operand `i` when it has one.
        let mut first: Vec<Option<usize>> = vec![None; net.inputs.len()];
        let mut steps: Vec<Step> = Vec::new();
        for (i, kept) in plan.reduced_inputs().iter().enumerate().filter(|&(i, _)| plan.summed_first(i)) {
            first[i] = Some(steps.len());
            steps.push(Step { all: distinct(&net.inputs[i]), result: kept.clone(), consumes: Vec::new() });
        }
        let offset = steps.len();
        // Steps of more than two operands run as pairwise contractions in the order listed
        // (as `Einsum` runs them), so the slices follow that lowering.
        let followed = plan.followed();
        for step in followed.steps() {
            let consumes = step
                .operands
                .iter()
                .filter_map(|&o| match followed.step_of(o) {
                    Some(s) => Some(offset + s),
                    None => first[o.index()],
                })
                .collect();
            steps.push(Step { all: followed.loops(step), result: followed.labels(step.result).to_vec(), consumes });
        }
        if let Some((_, loops)) = followed.final_reduction() {
            // One operand reordered or reduced (as `Einsum` adds a final one-operand step).
            steps.push(Step { all: loops, result: net.output.clone(), consumes: Vec::new() });
        }
        Network {
            labels: net.names.clone(),
            sizes: net.sizes.clone(),
            operands: net.inputs.clone(),
            output: net.output.clone(),
            steps,
            elem: elem as f64,
        }
    }

    fn id(&self, c: char) -> Option<u32> {
        self.labels.iter().position(|&l| l == Some(c)).map(|p| p as u32)
    }

    /// The costs of one slice with `sliced` labels fixed.
    fn costs(&self, sliced: &[u32]) -> Costs {
        let full = |l: &[u32]| l.iter().map(|&c| self.sizes[c as usize] as f64).product::<f64>();
        let cut = |l: &[u32]| {
            l.iter().map(|&c| if sliced.contains(&c) { 1.0 } else { self.sizes[c as usize] as f64 }).product::<f64>()
        };
        let n: f64 = sliced.iter().map(|&c| self.sizes[c as usize] as f64).product();
        let is_sliced = !sliced.is_empty();
        let operands: f64 = self.operands.iter().map(|l| full(l)).sum();
        // Copies of the operands a slice fixes labels of.
        let copies: f64 = self.operands.iter().filter(|l| l.iter().any(|c| sliced.contains(c))).map(|l| cut(l)).sum();
        let output = full(&self.output);
        let (mut live, mut peak, mut sum, mut largest, mut madds) = (0.0f64, 0.0f64, 0.0, 0.0f64, 0.0);
        let sizes: Vec<f64> = self.steps.iter().map(|s| cut(&s.result)).collect();
        for (s, step) in self.steps.iter().enumerate() {
            live += sizes[s];
            peak = peak.max(live);
            live -= step.consumes.iter().map(|&c| sizes[c]).sum::<f64>();
            sum += sizes[s];
            largest = largest.max(sizes[s]);
            madds += cut(&step.all);
        }
        let e = self.elem;
        let reduced_operands: f64 = self.operands.iter().map(|l| cut(l)).sum();
        let (fwd, rev) = if is_sliced {
            // Operands, their slice copies, the output accumulator, the slice's tensors; in
            // reverse, the caller's cotangent of the whole output (held, like the operands,
            // for the whole pass), the slice's tensors and their cotangents (the cotangent's
            // slice among them), the slice's gradients and the accumulators. Value and
            // gradients in one pass hold one more tensor of the output's shape, the value's
            // accumulator, which this leaves out (counting it would slice every gradient
            // for it: MERA open 26 under 800 MiB went from 45 slices to 594).
            let fwd = operands + copies + output + peak;
            let rev = operands + copies + output + peak + 2.0 * sum + reduced_operands + operands;
            (fwd, rev)
        } else {
            (operands + peak, operands + peak + 2.0 * sum + operands)
        };
        // A Hessian-vector product (forward over reverse) holds what the reverse pass
        // holds, plus the directions (one per operand, as large as the operands) and their
        // slice copies, the tangents of the forward intermediates and of their cotangents,
        // and beside the slice's gradients their tangents (the products) and the kernels'
        // copies of both (counted once more: the test `peak` measures a slice's HVP above
        // the count without them).
        let hvp = rev + operands + copies + 2.0 * sum + 2.0 * reduced_operands;
        Costs {
            peak: fwd * e,
            gradient_peak: rev * e,
            hvp_peak: hvp * e,
            largest,
            output_if_sliced: if is_sliced { output } else { 0.0 },
            sum,
            madds,
            n,
            operands,
            output,
        }
    }

    /// The greedy finder (module docs): labels until `measure ≤ target`.
    fn greedy(&self, measure: impl Fn(&Costs) -> f64, target: f64, unit: &str, name: &str) -> EinsumResult<Vec<u32>> {
        let mut chosen: Vec<u32> = Vec::new();
        if measure(&self.costs(&chosen)) <= target {
            return Ok(chosen);
        }
        let candidates: Vec<u32> = (0..self.labels.len() as u32).filter(|&c| self.sizes[c as usize] > 1).collect();
        let every = self.costs(&candidates);
        if measure(&every) > target {
            return Err(self.impossible(&every, measure(&every), target, unit, name));
        }
        // What no slicing removes (the tensors held whole, roughly): the measure with
        // every label sliced.
        let floor = measure(&every).min(target) * (1.0 - 1e-12);
        while measure(&self.costs(&chosen)) > target {
            let mut best: Option<((f64, f64, f64), u32)> = None;
            for &c in &candidates {
                if chosen.contains(&c) {
                    continue;
                }
                chosen.push(c);
                let k = self.costs(&chosen);
                chosen.pop();
                // (what is left above the floor × multiply-adds of all slices, the measure,
                // the sum of the slice's intermediates): smallest wins.
                let key = ((measure(&k) - floor).max(f64::MIN_POSITIVE) * k.madds * k.n, measure(&k), k.sum);
                if best.is_none_or(|(b, _)| key.partial_cmp(&b) == Some(std::cmp::Ordering::Less)) {
                    best = Some((key, c));
                }
            }
            // Every candidate sliced meets the target (checked above), so one is left.
            let (_, c) = best.expect("a label is left to slice");
            chosen.push(c);
        }
        // Drop labels the target no longer needs, last added first.
        for p in (0..chosen.len()).rev() {
            let c = chosen.remove(p);
            if measure(&self.costs(&chosen)) > target {
                chosen.insert(p, c);
            }
        }
        Ok(chosen)
    }
}

impl Network {
    /// Why no slicing meets the target: the tensors held whole (the operands, the output,
    /// the gradients) or, if they fit, one slice with every label sliced.
    fn impossible(&self, every: &Costs, measured: f64, target: f64, unit: &str, name: &str) -> EinsumError {
        let expr = short(name);
        let shape: Vec<usize> = self.output.iter().map(|&c| self.sizes[c as usize]).collect();
        let e = self.elem;
        if unit == "elements" {
            let what = if every.output > target {
                format!("the output of `{expr}` of shape {shape:?} has {} elements, held whole", every.output)
            } else {
                format!(
                    "the largest intermediate of one slice of `{expr}`, even with every label sliced, has {}",
                    every.largest
                )
            };
            return EinsumError::Slice(format!("{what}: more than the target of {target} elements"));
        }
        let (bytes, what) = if unit == "hvp bytes" && 3.0 * every.operands * e > target {
            (
                3.0 * every.operands * e,
                format!(
                    "the Hessian-vector product of `{expr}`: the operands, the directions and the products, held whole whatever is sliced,"
                ),
            )
        } else if unit == "gradient bytes" && 2.0 * every.operands * e > target {
            (
                2.0 * every.operands * e,
                format!("the gradient of `{expr}`: the operands and their gradients, held whole whatever is sliced,"),
            )
        } else if every.output * e > target {
            (every.output * e, format!("the output of `{expr}` of shape {shape:?}, held whole whatever is sliced,"))
        } else if (every.operands + every.output) * e > target {
            (
                (every.operands + every.output) * e,
                format!("the operands and the output of `{expr}`, held whole whatever is sliced,"),
            )
        } else {
            (measured, format!("one slice of `{expr}` even with every label sliced ({} slices)", every.n))
        };
        EinsumError::Memory { what, bytes: Some(to_bytes(bytes)), limit: target.is_finite().then_some(target as u64) }
    }
}

/// An expression for a message: at most 60 characters.
fn short(s: &str) -> String {
    if s.chars().count() <= 60 { s.to_string() } else { format!("{}…", s.chars().take(60).collect::<String>()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(expr: &str, shapes: &[Vec<usize>], steps: Vec<[usize; 2]>, slicing: Slicing, limit: u64) -> SlicePlan {
        let s = Subscripts::parse(expr).unwrap();
        SlicePlan::find(&s, shapes, &ContractionPath::new(steps), 8, &slicing, MemoryLimit::Bytes(limit)).unwrap()
    }

    #[test]
    fn nothing_is_sliced_when_the_contraction_fits() {
        let p =
            plan("ij,jk->ik", &[vec![4, 4], vec![4, 4]], vec![[0, 1]], Slicing::Memory { gradient: false }, 1 << 20);
        assert_eq!((p.labels(), p.n_slices(), p.overhead()), (&[][..], 1, 1.0));
        // operands 2·16, result 16 elements of 8 bytes
        assert_eq!(p.peak_bytes(), 48 * 8);
    }

    #[test]
    fn the_greedy_finder_slices_the_bond_of_the_largest_intermediate() {
        // ij,jk,kl->il along ((0,1),(0,1)): the intermediate ik is 64x64; slicing k (in it,
        // summed) or i (in it, in the output) shrinks it. Slicing i costs no extra flops.
        let shapes = [vec![64, 2], vec![2, 64], vec![64, 2]];
        let p = plan("ij,jk,kl->il", &shapes, vec![[0, 1], [0, 1]], Slicing::LargestIntermediate(1024), u64::MAX);
        assert!(p.largest_intermediate() <= 1024.0, "{p:?}");
        assert_eq!(p.labels(), &['i']);
        assert_eq!(p.n_slices(), 64);
        assert!((p.overhead() - 1.0).abs() < 1e-12, "{}", p.overhead());
        assert_eq!(p.slice_values(63), vec![63]);
    }

    #[test]
    fn summed_labels_cost_overhead_and_values_index_row_major() {
        let shapes = [vec![3, 5], vec![5, 7]];
        let p = plan("ab,bc->ac", &shapes, vec![[0, 1]], Slicing::Labels(vec!['b', 'a']), u64::MAX);
        assert_eq!(p.n_slices(), 15);
        assert_eq!(p.slice_values(7), vec![2, 1]); // b = 7 / 3, a = 7 % 3
        assert_eq!((p.unsliced_multiply_adds(), p.slice_multiply_adds()), (105.0, 7.0));
        assert!((p.overhead() - 1.0).abs() < 1e-12);
        // A summed label outside the step with the most work still adds work: ab,bc,cd->ad
        // sliced on b along ((0,1),(0,1)): step 2 (ac,cd) is repeated per value of b.
        let p = plan(
            "ab,bc,cd->ad",
            &[vec![2, 4], vec![4, 8], vec![8, 2]],
            vec![[0, 1], [0, 1]],
            Slicing::Labels(vec!['b']),
            u64::MAX,
        );
        assert!(p.overhead() > 1.0, "{p:?}");
    }
}
