//! The gradient under a memory target: the reverse pass reads the forward intermediates it
//! can keep within the target and recomputes the others (checkpointing).
//!
//! [`Einsum::gradient`] keeps every forward intermediate for the reverse pass, and its
//! memory check refuses a network whose intermediates and their cotangents do not fit.
//! [`Einsum::gradient_within`] plans which intermediates to keep instead: the reverse pass
//! of a contraction step reads the step's two operands (each for the other's cotangent);
//! an operand that was kept is read, one that was not is computed again from its subtree
//! of the path (down to the caller's operands and the kept values) just before the step,
//! and dropped after it.
//!
//! Input: an [`Einsum`] (its plan's steps, as `scaled.rs` runs them), the operands `wrt`
//! and a [`MemoryLimit`]. Output: a [`CheckpointedGradient`] that evaluates the value and
//! the vector-Jacobian products with the same kernels and transposed specs as the AD rules
//! (`ad.rs`), so the gradients equal [`Einsum::gradient`]'s to rounding.
//!
//! The choice: the peak of a plan (which values are kept) is simulated step by step, the
//! forward pass and the reverse pass with its recomputations, counting every tensor alive
//! (the operands, the cotangent given, the kept values, the cotangents in flight and the
//! gradients made so far) plus each step's result and kernel scratch (taken as one more
//! copy of the step's operands and result: packed operands and a result before its
//! permutation). Starting from every intermediate kept, the largest are dropped one by one
//! until the simulated peak is within the limit; if none fits even with nothing kept, the
//! target is refused ([`EinsumError::Memory`]). Dropping the largest first frees the most
//! per recomputation; a dropped value is recomputed once per step that reads a value of
//! its subtree that was dropped too, so the extra work grows with the depth of dropped
//! chains (quadratic in the worst case, a chain with nothing kept).
//!
//! Complexity of the choice: `O(k · s · d)` for `k` candidate values, `s` steps and `d`
//! the largest subtree, on sizes only (no tensor is touched).

use crate::elem::Elem;
use crate::error::{EinsumError, EinsumResult};
use crate::kernel;
use crate::memory::MemoryLimit;
use crate::network::{Einsum, check_operand_shapes};
use crate::scaled::{Step, Steps, adjoint, check_wrt};
use crate::tensor::Tensor;

/// A vector-Jacobian product of an [`Einsum`] planned to keep its tensors within a memory
/// target ([`Einsum::gradient_within`]).
///
/// ```
/// use einsum::{ContractionPath, Einsum, MemoryLimit, PathChoice, Tensor};
///
/// // A chain whose intermediates (8x8) are larger than its operands (8x2 and 2x8).
/// let shapes = [vec![8, 2], vec![8, 2], vec![8, 2], vec![8, 2]];
/// let path = PathChoice::Explicit(ContractionPath::new(vec![[0, 1], [0, 2], [0, 1]]));
/// let e = Einsum::<f64>::new("ai,bi,bj,aj->", &shapes, path).unwrap();
/// let ops: Vec<Tensor<f64>> = (0..4).map(|k| Tensor::from_fn(vec![8, 2], |i| (i[0] + k) as f64 - i[1] as f64 * 0.5).unwrap()).collect();
/// let refs: Vec<&Tensor<f64>> = ops.iter().collect();
/// let one = Tensor::scalar(1.0);
/// let all = e.gradient_within(&[0, 1, 2, 3], MemoryLimit::Unlimited).unwrap();
/// // Within the simulated peak of keeping everything: every intermediate is kept. (On so
/// // small a network recomputing saves nothing: a tighter limit is refused.)
/// let tight = e.gradient_within(&[0, 1, 2, 3], MemoryLimit::Bytes(all.peak_bytes())).unwrap();
/// assert!(tight.kept() == all.kept() && tight.peak_bytes() <= all.peak_bytes());
/// assert!(e.gradient_within(&[0], MemoryLimit::Bytes(64)).is_err());
/// let (want_v, want) = e.gradient(&[0, 1, 2, 3]).unwrap().eval_with_value(&refs, &one).unwrap();
/// let (v, got) = tight.eval_with_value(&refs, &one).unwrap();
/// assert!(v.max_abs_diff(&want_v).unwrap() <= 1e-12 * (1.0 + want_v.max_abs()));
/// for (g, w) in got.iter().zip(&want) {
///     assert!(g.max_abs_diff(w).unwrap() <= 1e-12 * (1.0 + w.max_abs()));
/// }
/// ```
pub struct CheckpointedGradient<T: Elem> {
    steps: Steps,
    /// Per value (operands, then step results): whether the forward pass keeps it for the
    /// reverse pass.
    kept: Vec<bool>,
    /// Per value: whether its cotangent is needed (it leads to an operand in `wrt`).
    needed: Vec<bool>,
    wrt: Vec<usize>,
    shapes: Vec<Vec<usize>>,
    output_shape: Vec<usize>,
    name: String,
    peak_bytes: u64,
    multiply_adds: f64,
    _elem: std::marker::PhantomData<fn() -> T>,
}

impl<T: Elem> std::fmt::Debug for CheckpointedGradient<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckpointedGradient")
            .field("expression", &self.name)
            .field("wrt", &self.wrt)
            .field("kept", &self.kept())
            .field("peak_bytes", &self.peak_bytes)
            .field("multiply_adds", &self.multiply_adds)
            .finish()
    }
}

/// Per value, its size in bytes; per step, its multiply-adds.
struct Sizes {
    bytes: Vec<u64>,
    work: Vec<f64>,
}

impl Sizes {
    fn new<T: Elem>(steps: &Steps, shapes: &[Vec<usize>]) -> Self {
        let elem = std::mem::size_of::<T>() as u64;
        let len = |s: &[usize]| s.iter().map(|&d| d as u64).product::<u64>() * elem;
        let mut bytes: Vec<u64> = shapes.iter().map(|s| len(s)).collect();
        let mut work = Vec::with_capacity(steps.steps.len());
        for step in &steps.steps {
            let (out, w) = match step {
                Step::Unary { spec, .. } => (spec.out_shape(), spec.multiply_adds()),
                Step::Contract { spec, .. } => (spec.out_shape(), spec.multiply_adds()),
            };
            bytes.push(len(&out));
            work.push(w as f64);
        }
        Sizes { bytes, work }
    }

    /// The transient bytes of running step `s` beyond its operands: its result and the
    /// kernel's scratch (one more copy of its operands and result).
    fn transient(&self, steps: &Steps, s: usize) -> u64 {
        let out = self.bytes[steps.n + s];
        match &steps.steps[s] {
            Step::Unary { a, .. } => 2 * out + self.bytes[*a],
            Step::Contract { a, b, .. } => 2 * out + self.bytes[*a] + self.bytes[*b],
        }
    }

    /// The transient bytes of a reverse product `x·y` of result size `out`.
    fn product(out: u64, x: u64, y: u64) -> u64 {
        2 * out + x + y
    }
}

/// The steps of the subtree that makes value `v` from the values `available` (operands
/// always are), in path order.
fn subtree(steps: &Steps, v: usize, available: &[bool]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut stack = vec![v];
    while let Some(x) = stack.pop() {
        if x < steps.n || (x != v && available[x]) {
            continue;
        }
        let s = x - steps.n;
        out.push(s);
        stack.extend(inputs(&steps.steps[s]));
    }
    out.sort_unstable();
    out
}

/// The peak bytes above what is alive of computing `v` again from `available` values (its
/// result included), and the multiply-adds it takes.
fn recompute_cost(steps: &Steps, sizes: &Sizes, v: usize, available: &[bool]) -> (u64, f64) {
    let (mut live, mut peak, mut work) = (0u64, 0u64, 0.0);
    for s in subtree(steps, v, available) {
        peak = peak.max(live + sizes.transient(steps, s));
        live += sizes.bytes[steps.n + s];
        work += sizes.work[s];
        for x in inputs(&steps.steps[s]) {
            if x >= steps.n && !available[x] {
                live -= sizes.bytes[x];
            }
        }
    }
    (peak, work)
}

/// The simulated peak bytes and multiply-adds of value and gradients with the values
/// `kept` (see the module docs), counting the operands and the cotangent given.
fn simulate(steps: &Steps, sizes: &Sizes, kept: &[bool], needed: &[bool]) -> (u64, f64) {
    let n = steps.n;
    let operands: u64 = sizes.bytes[..n].iter().sum();
    // The operands and the cotangent given (of the output's shape) are the caller's.
    let given = operands + sizes.bytes[steps.out];
    // Forward: each step's result lives until its reader ran, longer if kept.
    let (mut live, mut peak, mut work) = (given, 0u64, 0.0);
    for (s, step) in steps.steps.iter().enumerate() {
        peak = peak.max(live + sizes.transient(steps, s));
        live += sizes.bytes[n + s];
        work += sizes.work[s];
        for x in inputs(step) {
            if x >= n && !kept[x] {
                live -= sizes.bytes[x];
            }
        }
    }
    // Reverse: the output (the value returned) and the cotangent given are alive; the
    // kept values until their step's reverse ran.
    let mut available: Vec<bool> = (0..kept.len()).map(|v| v < n || kept[v]).collect();
    for (s, step) in steps.steps.iter().enumerate().rev() {
        let r = n + s;
        if !needed[r] {
            continue;
        }
        let c = sizes.bytes[r];
        match step {
            Step::Unary { a, .. } => {
                if needed[*a] {
                    peak = peak.max(live + Sizes::product(sizes.bytes[*a], c, 0));
                    live += sizes.bytes[*a];
                }
            }
            Step::Contract { a, b, .. } => {
                let mut held = 0;
                for (x, other) in [(*a, *b), (*b, *a)] {
                    // `x` is read for `other`'s cotangent.
                    if needed[other] && !available[x] {
                        let (p, w) = recompute_cost(steps, sizes, x, &available);
                        peak = peak.max(live + held + p);
                        work += w;
                        held += sizes.bytes[x];
                    }
                }
                for (x, other) in [(*a, *b), (*b, *a)] {
                    if needed[x] {
                        let cot = sizes.bytes[x];
                        peak = peak.max(live + held + Sizes::product(cot, c, sizes.bytes[other]));
                        live += cot;
                        work += sizes.work[s];
                    }
                }
                for x in [*a, *b] {
                    if x >= n && kept[x] {
                        live -= sizes.bytes[x];
                    }
                    if x >= n {
                        available[x] = false;
                    }
                }
            }
        }
        if r != steps.out {
            live -= c;
        }
    }
    (peak.max(live), work)
}

impl<T: Elem> Einsum<T> {
    /// The gradient (value and vector-Jacobian products) with respect to the operands
    /// `wrt`, planned so that its tensors stay within `limit`: the forward intermediates
    /// are kept for the reverse pass while they fit, the largest are recomputed otherwise
    /// (see [`CheckpointedGradient`]). With [`MemoryLimit::Unlimited`] every one is kept, as
    /// [`Einsum::gradient`] does. Errors: `wrt` out of range or repeated
    /// ([`EinsumError::Shape`]); a limit that even recomputing every intermediate cannot
    /// meet ([`EinsumError::Memory`]).
    pub fn gradient_within(&self, wrt: &[usize], limit: MemoryLimit) -> EinsumResult<CheckpointedGradient<T>> {
        let name = self.plan().name();
        check_wrt(&name, wrt, self.shapes().len())?;
        let steps = Steps::new(self.plan())?;
        let sizes = Sizes::new::<T>(&steps, self.shapes());
        let values = sizes.bytes.len();
        let mut needed = vec![false; values];
        wrt.iter().for_each(|&i| needed[i] = true);
        for (s, step) in steps.steps.iter().enumerate() {
            needed[steps.n + s] = match step {
                Step::Unary { a, .. } => needed[*a],
                Step::Contract { a, b, .. } => needed[*a] || needed[*b],
            };
        }
        // The values a reverse step reads: a contraction's operand whose partner needs a
        // cotangent. Intermediates only (operands are the caller's).
        let mut read = vec![false; values];
        for step in &steps.steps {
            if let Step::Contract { a, b, .. } = step {
                read[*a] |= needed[*b];
                read[*b] |= needed[*a];
            }
        }
        let mut candidates: Vec<usize> = (steps.n..values).filter(|&v| read[v]).collect();
        candidates.sort_by_key(|&v| std::cmp::Reverse(sizes.bytes[v]));
        let mut kept = vec![false; values];
        candidates.iter().for_each(|&v| kept[v] = true);
        let mut plan = simulate(&steps, &sizes, &kept, &needed);
        for &v in &candidates {
            if limit.allows(Some(plan.0)) {
                break;
            }
            kept[v] = false;
            plan = simulate(&steps, &sizes, &kept, &needed);
        }
        if !limit.allows(Some(plan.0)) {
            return Err(EinsumError::Memory {
                what: format!("the gradient of `{name}` with every intermediate recomputed"),
                bytes: Some(plan.0),
                limit: match limit {
                    MemoryLimit::Bytes(b) => Some(b),
                    MemoryLimit::Unlimited => None,
                },
            });
        }
        Ok(CheckpointedGradient {
            steps,
            kept,
            needed,
            wrt: wrt.to_vec(),
            shapes: self.shapes().to_vec(),
            output_shape: self.output_shape().to_vec(),
            name,
            peak_bytes: plan.0,
            multiply_adds: plan.1,
            _elem: std::marker::PhantomData,
        })
    }
}

impl<T: Elem> CheckpointedGradient<T> {
    /// The simulated peak bytes of one [`Self::eval_with_value`]: operands, cotangent and
    /// results included, kernel scratch bounded as the module docs say.
    pub fn peak_bytes(&self) -> u64 {
        self.peak_bytes
    }

    /// Multiply-adds of one [`Self::eval_with_value`], the recomputations included.
    pub fn multiply_adds(&self) -> f64 {
        self.multiply_adds
    }

    /// How many forward intermediates are kept for the reverse pass (the others are
    /// recomputed).
    pub fn kept(&self) -> usize {
        self.kept.iter().filter(|&&k| k).count()
    }

    /// `(f(x), Jᵀ c)`: the value and one gradient per `wrt` operand (zeros where the output
    /// does not depend on it).
    pub fn eval_with_value(
        &self,
        operands: &[&Tensor<T>],
        cotangent: &Tensor<T>,
    ) -> EinsumResult<(Tensor<T>, Vec<Tensor<T>>)> {
        check_operand_shapes(&self.name, &self.shapes, operands)?;
        if cotangent.shape() != self.output_shape.as_slice() {
            return Err(EinsumError::Shape(format!(
                "cotangent 0 of `{}` has shape {:?}, expected {:?}",
                self.name,
                cotangent.shape(),
                self.output_shape
            )));
        }
        let _evaluation = crate::buffer::begin_evaluation();
        let (steps, n) = (&self.steps, self.steps.n);
        // Values: operands are the caller's (cloning a tensor shares its buffer).
        let mut values: Vec<Option<Tensor<T>>> = operands.iter().map(|&t| Some(t.clone())).collect();
        values.resize_with(n + steps.steps.len(), || None);
        for (s, step) in steps.steps.iter().enumerate() {
            let r = run_step(step, &values);
            for x in inputs(step) {
                if x >= n && !self.kept[x] {
                    values[x] = None;
                }
            }
            values[n + s] = Some(r);
        }
        let value = values[steps.out].take().expect("the output is made");
        crate::stop::check()?;
        let mut cot: Vec<Option<Tensor<T>>> = vec![None; values.len()];
        cot[steps.out] = Some(cotangent.clone());
        for (s, step) in steps.steps.iter().enumerate().rev() {
            let Some(c) = cot[n + s].take() else { continue };
            match step {
                Step::Unary { a, spec } if self.needed[*a] => cot[*a] = Some(kernel::unary(&spec.transpose(), &c)),
                Step::Unary { .. } => {}
                Step::Contract { a, b, spec } => {
                    let read = |x: usize, values: &Vec<Option<Tensor<T>>>| match &values[x] {
                        Some(t) => t.clone(),
                        None => self.recompute(x, values),
                    };
                    let va = self.needed[*b].then(|| read(*a, &values));
                    let vb = self.needed[*a].then(|| read(*b, &values));
                    if let Some(vb) = &vb {
                        cot[*a] = Some(kernel::contract(&adjoint::<T>(spec.transpose_a()), &c, vb));
                    }
                    if let Some(va) = &va {
                        cot[*b] = Some(kernel::contract(&adjoint::<T>(spec.transpose_b()), va, &c));
                    }
                    for x in [*a, *b] {
                        if x >= n {
                            values[x] = None;
                        }
                    }
                }
            }
            crate::stop::check()?;
        }
        let grads = self
            .wrt
            .iter()
            .map(|&i| cot[i].take().map_or_else(|| Tensor::zeros(self.shapes[i].clone()), Ok))
            .collect::<EinsumResult<_>>()?;
        Ok((value, grads))
    }

    /// Value `v` computed again from the values held now (operands and kept values not yet
    /// read by the reverse pass), its subtree's temporaries dropped as they are read.
    fn recompute(&self, v: usize, values: &[Option<Tensor<T>>]) -> Tensor<T> {
        let steps = &self.steps;
        let held: Vec<bool> = values.iter().map(Option::is_some).collect();
        let order = subtree(steps, v, &held);
        let mut temp: Vec<Option<Tensor<T>>> = values.to_vec();
        for s in order {
            let step = &steps.steps[s];
            let r = run_step(step, &temp);
            for x in inputs(step) {
                if !held[x] {
                    temp[x] = None;
                }
            }
            temp[steps.n + s] = Some(r);
        }
        temp[v].take().expect("the subtree makes the value")
    }
}

/// The values a step reads.
fn inputs(step: &Step) -> Vec<usize> {
    match step {
        Step::Unary { a, .. } => vec![*a],
        Step::Contract { a, b, .. } => vec![*a, *b],
    }
}

/// One forward step on the values it reads (present by construction).
fn run_step<T: Elem>(step: &Step, values: &[Option<Tensor<T>>]) -> Tensor<T> {
    let get = |x: usize| values[x].as_ref().expect("a step's operands are held when it runs");
    match step {
        Step::Unary { a, spec } => kernel::unary(spec, get(*a)),
        Step::Contract { a, b, spec } => kernel::contract(spec, get(*a), get(*b)),
    }
}
