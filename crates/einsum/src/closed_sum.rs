//! [`Einsum::gradient_of_sum`] and the way it takes: beside the reverse pass over the open
//! network's tree (`sum_seed.rs`), the gradient of the sum along the closed network's own
//! path, whichever the estimated cost finds cheaper ([`SumGradient`]).
//!
//! Why: `s = Σ f(x)` is itself a tensor network, the same operands with every output
//! label summed, and its gradient with respect to each operand is that closed network's.
//! The closed network has its own best path, often far cheaper than the open one: a
//! matrix chain `A₁A₂…Aₙ` costs `n d³` open, while `1ᵀA₁A₂…Aₙ1` is a chain of
//! matrix-vector products, `n d²`. Its reverse pass then costs about twice that, so the
//! value (the open forward pass) and the gradients (the closed network's forward and
//! reverse passes) cost little more than the forward pass alone, where the open tree's
//! reverse pass costs about twice the forward pass again.
//!
//! Input: an [`Einsum`] whose output is not a scalar. Output: the closed network's plan
//! (its path found by [`PathChoice::Auto`] for the closed equation, on the squeezed
//! network, so broadcast axes are size-1 labels summed like any other), not taken by
//! [`SumGradient::Cheaper`] when it needs at least the open path's multiply-adds (then it
//! cannot win).
//!
//! Invariants: the closed network has the open one's operands in order, with the same
//! shapes (checked: a mismatch is an error, never a wrong gradient), and its graph's inputs
//! are the open graph's (`TensorKey::Var(i)` on the same interner), so one program may
//! hold both. [`SumGradient::Cheaper`] compares the two ways by [`estimated_cost`] of
//! their plans, before either reverse graph is built: only the winner's is built (and,
//! for the closed way, its forward graph), unless it does not fit the memory limit. A
//! stop request during the closed path's search is the call's error, whichever way.
//!
//! Complexity: the closed path's search ([`PathChoice::Auto`] bounds its time by the cost
//! of the path it finds) and one graph build; [`estimated_cost`] is linear in the steps.

use crate::elem::Elem;
use crate::error::{EinsumError, EinsumResult};
use crate::memory::{MemoryLimit, tensor_bytes};
use crate::network::{Einsum, EinsumGradient, ReverseGraph};
use crate::op::{TensorKey, contraction_cost, elements, one_operand_cost};
use crate::path::PathChoice;
use crate::plan::Plan;
use crate::sum_seed::{SumFragment, sum_of_output};

/// The plan of `open`'s closed network (module docs): its path found for the closed
/// equation, checked to take `open`'s operands with the same shapes.
fn closed_plan<T: Elem>(open: &Einsum<T>) -> EinsumResult<Plan> {
    let plan = open.plan();
    let net = plan.network();
    // A plan without a limit of its own: the memory of the closed way is checked by the
    // caller, against the open plan's limit, with the open forward pass alive beside it.
    // The search reads the evaluation's stop flag (Ctrl-C in the command line and Python).
    let closed = Plan::from_network_until(
        net.inputs.clone(),
        Vec::new(),
        net.sizes.clone(),
        PathChoice::Auto,
        MemoryLimit::Unlimited,
        &crate::stop::requested,
    )?;
    if closed.shapes() != plan.shapes() {
        return Err(EinsumError::Shape(format!(
            "the closed network of `{}` has operand shapes {:?}, the open one {:?}",
            plan.name(),
            closed.shapes(),
            plan.shapes()
        )));
    }
    Ok(closed)
}

/// The estimated time of what a way adds to the open forward pass, which both run for
/// the value: the reverse pass along `plan` with respect to the operands `wrt`, after the
/// forward pass along it when `closed` (the closed network's, which only that reverse
/// pass reads). Open (`closed` false), a last pairwise step is seeded by the sum
/// (`sum_seed.rs`): each of its transposes is a sum of the other operand and a broadcast,
/// not a contraction; a final reduction is seeded by the scalar broadcast to the output.
/// Counted from the plan alone, in the units of [`TensorOp::cost_hint`](crate::TensorOp)
/// ([`contraction_cost`], [`one_operand_cost`]): a step's transpose loops over the step's
/// labels and writes the operand's shape; a sum done first, or a final reduction, is
/// transposed by a broadcast of the same loop. The reverse graph's rewrites (`reassoc.rs`,
/// `fuse.rs`) and element-wise operations are left out.
fn estimated_cost(plan: &Plan, wrt: &[usize], closed: bool) -> u64 {
    let sizes = &plan.network().sizes;
    let size = |l: &[u32]| l.iter().fold(1u64, |a, &c| a.saturating_mul(sizes[c as usize] as u64));
    let followed = plan.followed();
    let (steps, reduction) = (followed.steps(), followed.final_reduction());
    // Per path operand (the inputs, then each step's result): whether a gradient flows
    // back through it.
    let mut needed = vec![false; plan.shapes().len()];
    for &i in wrt {
        if let Some(n) = needed.get_mut(i) {
            *n = true;
        }
    }
    for step in steps {
        let flows = step.operands.iter().any(|o| needed[o.index()]);
        needed.push(flows);
    }
    let mut total = 0u64;
    let mut add = |c: u64| total = total.saturating_add(c);
    for (i, shape) in plan.shapes().iter().enumerate().filter(|&(i, _)| plan.summed_first(i)) {
        let work = one_operand_cost(elements(shape));
        if closed {
            add(work);
        }
        if needed[i] {
            add(work);
        }
    }
    for (s, step) in steps.iter().enumerate() {
        let loops = size(&followed.loops(step));
        if closed {
            add(contraction_cost(loops, size(followed.labels(step.result))));
        }
        if !needed[step.result.index()] {
            continue;
        }
        let seeded = !closed && s + 1 == steps.len() && reduction.is_none();
        for (k, o) in step.operands.iter().enumerate().filter(|(_, o)| needed[o.index()]) {
            let written = size(followed.labels(*o));
            if seeded {
                let other = size(followed.labels(step.operands[1 - k]));
                add(one_operand_cost(other).saturating_add(one_operand_cost(written)));
            } else {
                add(contraction_cost(loops, written));
            }
        }
    }
    if let Some((_, loops)) = reduction {
        let work = one_operand_cost(size(&loops));
        if closed {
            add(work);
        }
        if needed[followed.last().index()] {
            if !closed {
                add(one_operand_cost(size(&plan.network().output)));
            }
            add(work);
        }
    }
    total
}

impl<T: Elem> Einsum<T> {
    /// The gradient of the sum of the output's entries times a constant `c`: the
    /// [`Self::gradient`] that a cotangent of the output's shape filled with `c` gives,
    /// evaluated with `c` alone, a scalar tensor ([`Tensor::scalar`](crate::Tensor::scalar)), as its cotangent.
    /// It takes the cheaper of two ways by the estimated cost ([`SumGradient::Cheaper`]):
    /// the closed network's own path (the operands with every output label summed, see
    /// [`Self::gradient_of_sum_by`]), or the reverse pass over the open tree, which follows.
    /// The two agree to rounding (the example's integers are exact either way).
    /// Over the open tree, when the last step is a contraction, no cotangent of the output's shape is read or
    /// made for it: after the last step `y = Σ A·B`, `Σ y` is `Σ A'·B'` with `A'` and `B'`
    /// the operands summed over the labels the other lacks, so its transposes are
    /// broadcasts of `c·B'` and `c·A'`, not contractions of the full cotangent
    /// (`sum_seed.rs`); another last step takes `c` broadcast to the output's shape. Steps
    /// before the last one are [`Self::gradient`]'s. Complex: the adjoint of
    /// `Re(conj(c)·Σ y)`.
    ///
    /// ```
    /// use einsum::{Einsum, PathChoice, Tensor};
    ///
    /// let e = Einsum::<f64>::new("ij,jk->ik", &[vec![2, 2], vec![2, 2]], PathChoice::Greedy).unwrap();
    /// let a = Tensor::new(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
    /// let b = Tensor::new(vec![2, 2], vec![5.0, 6.0, 7.0, 8.0]).unwrap();
    /// let ones = Tensor::new(vec![2, 2], vec![2.0; 4]).unwrap();
    /// let full = e.gradient(&[0, 1]).unwrap().eval_with_value(&[&a, &b], &ones).unwrap();
    /// let sum = e.gradient_of_sum(&[0, 1]).unwrap();
    /// assert_eq!(sum.cotangent_shape(), &[] as &[usize]);
    /// let (value, grads) = sum.eval_with_value(&[&a, &b], &Tensor::scalar(2.0)).unwrap();
    /// assert_eq!(value.data(), full.0.data());
    /// assert_eq!((grads[0].data(), grads[1].data()), (full.1[0].data(), full.1[1].data()));
    /// // A cotangent of the output's shape is the other gradient's: an error here.
    /// assert!(sum.eval(&[&a, &b], &ones).is_err());
    /// ```
    pub fn gradient_of_sum(&self, wrt: &[usize]) -> EinsumResult<EinsumGradient<T>> {
        self.gradient_of_sum_by(wrt, SumGradient::Cheaper)
    }

    /// [`Self::gradient_of_sum`] by the reverse pass `way` names: over the open network's
    /// tree, along the closed network's own path (the operands with every output label
    /// summed, `closed_sum.rs`), or the cheaper of the two by the estimated cost, which is
    /// what [`Self::gradient_of_sum`] takes. The results agree to rounding (an example
    /// at [`SumGradient`]).
    pub fn gradient_of_sum_by(&self, wrt: &[usize], way: SumGradient) -> EinsumResult<EinsumGradient<T>> {
        if self.output_shape().is_empty() {
            // A scalar output is its own sum (its network is closed already), and its
            // cotangent already a scalar.
            return self.gradient(wrt);
        }
        let keys = self.wrt_keys(wrt)?;
        let chosen = reverse_of_sum(self, &keys, wrt, way)?;
        self.compile_reverse(chosen, wrt, Vec::new())
    }
}

/// Which reverse pass [`Einsum::gradient_of_sum_by`] takes for the gradient of the sum of
/// a non-scalar output.
///
/// ```
/// use einsum::{Einsum, PathChoice, SumGradient, Tensor};
///
/// // A chain: the closed network `1ᵀ·A·B·C·D·1` is matrix-vector products.
/// let shapes = vec![vec![40, 40]; 4];
/// let e = Einsum::<f64>::new("ij,jk,kl,lm->im", &shapes, PathChoice::Greedy).unwrap();
/// let open = e.gradient_of_sum_by(&[0, 1, 2, 3], SumGradient::OpenTree).unwrap();
/// let closed = e.gradient_of_sum_by(&[0, 1, 2, 3], SumGradient::ClosedNetwork).unwrap();
/// assert!(closed.multiply_adds() < 0.5 * open.multiply_adds());
/// let x: Vec<Tensor<f64>> = shapes.iter().map(|s| Tensor::from_fn(s.clone(), |i| (i[0] + 2 * i[1]) as f64 * 0.01).unwrap()).collect();
/// let x: Vec<&Tensor<f64>> = x.iter().collect();
/// let (v0, g0) = open.eval_with_value(&x, &Tensor::scalar(1.0)).unwrap();
/// let (v1, g1) = closed.eval_with_value(&x, &Tensor::scalar(1.0)).unwrap();
/// assert_eq!(v0, v1); // the value is the open forward pass's in both
/// assert!(g0[1].max_abs_diff(&g1[1]).unwrap() <= 1e-9 * g0[1].max_abs());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SumGradient {
    /// The cheaper of the other two by the estimated cost (multiply-adds and elements
    /// moved), among those whose tensors fit the memory limit:
    /// [`Einsum::gradient_of_sum`]'s choice.
    #[default]
    Cheaper,
    /// The reverse pass over the open network's tree, its last step's sum seeded by the
    /// scalar (`sum_seed.rs`).
    OpenTree,
    /// The value by the open network's forward pass, the gradients by the closed
    /// network's forward and reverse passes along its own path (module docs).
    ClosedNetwork,
}

/// The reverse pass of the gradient of `open`'s sum with respect to `keys` (the operands
/// `wrt`'), with `open`'s value as output 0, the way `way` says. For
/// [`SumGradient::Cheaper`], a way whose tensors exceed the memory limit is not taken;
/// when neither fits, the open tree's error is returned.
pub(crate) fn reverse_of_sum<T: Elem>(
    open: &Einsum<T>,
    keys: &[TensorKey],
    wrt: &[usize],
    way: SumGradient,
) -> EinsumResult<ReverseGraph<T>> {
    // The sum's fragment and the memory check of the open tree's reverse pass: no graph
    // of the reverse pass yet.
    let open_fits = || -> EinsumResult<SumFragment<T>> {
        let sum = sum_of_output(open.graph(), open.output_shape())?;
        open.check_reverse("the gradient of the sum", wrt, &sum.made)?;
        Ok(sum)
    };
    let by_open = |sum: SumFragment<T>| open.reverse_graph(keys, vec![open.graph().clone(), sum.graph], &sum.sum);
    match way {
        SumGradient::OpenTree => by_open(open_fits()?),
        SumGradient::ClosedNetwork => by_closed(open, keys, wrt, closed_plan(open)?),
        SumGradient::Cheaper => {
            // Only a memory error of the open tree leaves the closed network to try.
            let fits = match open_fits() {
                Err(e) if !matches!(e, EinsumError::Memory { .. }) => return Err(e),
                fits => fits,
            };
            let closed = match closed_plan(open) {
                // Ctrl-C during the search stops the call, not only the closed way.
                Err(EinsumError::Interrupted) => return Err(EinsumError::Interrupted),
                Err(e) => return fits.map_or(Err(e), by_open),
                Ok(closed) => closed,
            };
            let Ok(sum) = fits else {
                // The open tree does not fit: the closed network at any cost, and when
                // neither fits, the open tree's error.
                return match by_closed(open, keys, wrt, closed) {
                    Err(EinsumError::Memory { .. }) => fits.and_then(by_open),
                    r => r,
                };
            };
            // A closed path of no fewer multiply-adds cannot win. The closed network's
            // plan is estimated as it is built (`Einsum::from_plan` merges small factors
            // first); the open one's was merged when it was built.
            let merged = closed.with_factors_merged();
            let built = merged.as_ref().unwrap_or(&closed);
            if built.multiply_adds() >= open.plan().multiply_adds() {
                return by_open(sum);
            }
            let closed_cost = estimated_cost(built, wrt, true);
            if closed_cost >= estimated_cost(open.plan(), wrt, false) {
                return by_open(sum);
            }
            // Nor is the closed way taken when its tensors do not fit.
            match by_closed(open, keys, wrt, closed) {
                Err(EinsumError::Memory { .. }) => by_open(sum),
                r => r,
            }
        }
    }
}

/// The reverse pass along the closed network's path `plan`, after the memory check of its
/// tensors beside the open forward pass's.
fn by_closed<T: Elem>(
    open: &Einsum<T>,
    keys: &[TensorKey],
    wrt: &[usize],
    plan: Plan,
) -> EinsumResult<ReverseGraph<T>> {
    let closed = Einsum::from_plan(plan.with_memory_limit(open.plan().memory_limit()))?;
    // The open forward pass (the value) runs in the same program: its intermediates are
    // alive beside the closed network's tensors; the operands are counted once.
    let elem = std::mem::size_of::<T>();
    let operands = open.shapes().iter().fold(0u64, |a, s| a.saturating_add(tensor_bytes(s, elem).unwrap_or(u64::MAX)));
    let beside = open.peak_bytes().saturating_sub(operands);
    closed.check_reverse_beside("the gradient of the sum along the closed network", wrt, &[], beside)?;
    open.reverse_graph(keys, vec![open.graph().clone(), closed.graph().clone()], closed.output_key())
}
