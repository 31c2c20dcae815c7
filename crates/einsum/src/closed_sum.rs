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
//! hold both. [`estimated_cost`] is the one estimate both ways are compared by.
//!
//! Complexity: the closed path's search ([`PathChoice::Auto`] bounds its time by the cost
//! of the path it finds) and one graph build; [`estimated_cost`] is linear in the
//! operations.

use computegraph::MaterializedGraph;

use crate::elem::Elem;
use crate::error::{EinsumError, EinsumResult};
use crate::kernel::ContractSpec;
use crate::memory::{MemoryLimit, tensor_bytes};
use crate::network::{Einsum, EinsumGradient, ReverseGraph};
use crate::op::{TensorKey, TensorOp};
use crate::path::PathChoice;
use crate::plan::Plan;
use crate::sum_seed::sum_of_output;

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

/// Elements of a shape, as a float (no overflow: an estimate).
fn elements(shape: &[usize]) -> f64 {
    shape.iter().map(|&d| d as f64).product()
}

/// The estimated time of one contraction in the units of [`estimated_cost`].
fn contract_cost(s: &ContractSpec) -> f64 {
    s.multiply_adds() as f64 / MULTIPLY_ADDS_PER_ELEMENT
        + elements(&s.a_shape())
        + elements(&s.b_shape())
        + elements(&s.out_shape())
}

/// Multiply-adds that take as long as reading or writing one element: a GEMM does about
/// four per cycle on one core, a pass over memory moves about one element per cycle.
/// The same weight as [`TensorOp`]'s cost hint gives multiply-adds against the elements
/// written.
const MULTIPLY_ADDS_PER_ELEMENT: f64 = 4.0;

/// The estimated time of a program, in elements moved: each contraction's and one-operand
/// einsum's multiply-adds (at [`MULTIPLY_ADDS_PER_ELEMENT`]) plus the elements it reads and
/// writes. Element-wise operations (a cotangent's sum, a scale) carry no shape and are
/// left out; a program has few of them beside its contractions.
fn estimated_cost<T: Elem>(program: &MaterializedGraph<TensorOp<T>>) -> f64 {
    program
        .operations()
        .map(|op| match op.operation() {
            TensorOp::Contract(s) => contract_cost(s),
            TensorOp::ContractPair(p) => contract_cost(p.x()) + contract_cost(p.y()),
            TensorOp::Unary(s) => {
                s.multiply_adds() as f64 / MULTIPLY_ADDS_PER_ELEMENT + elements(&s.a_shape()) + elements(&s.out_shape())
            }
            _ => 0.0,
        })
        .sum()
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
    let by_open = || -> EinsumResult<ReverseGraph<T>> {
        let sum = sum_of_output(open.graph(), open.output_shape())?;
        open.check_reverse("the gradient of the sum", wrt, &sum.made)?;
        open.reverse_graph(keys, vec![open.graph().clone(), sum.graph], &sum.sum)
    };
    match way {
        SumGradient::OpenTree => by_open(),
        SumGradient::ClosedNetwork => by_closed(open, keys, wrt, closed_plan(open)?),
        SumGradient::Cheaper => {
            let by_open = by_open();
            if let Err(e) = &by_open {
                if !matches!(e, EinsumError::Memory { .. }) {
                    return by_open;
                }
            }
            let closed = closed_plan(open);
            // A closed path of no fewer multiply-adds cannot win; when the open tree does
            // not fit, the closed network is tried at any cost.
            if by_open.is_ok() && closed.as_ref().is_ok_and(|c| c.multiply_adds() >= open.plan().multiply_adds()) {
                return by_open;
            }
            let by_closed = closed.and_then(|plan| by_closed(open, keys, wrt, plan));
            match (by_open, by_closed) {
                (Ok(o), Ok(c)) if estimated_cost(&c.merged) < estimated_cost(&o.merged) => Ok(c),
                (Ok(o), _) => Ok(o),
                (Err(_), Ok(c)) => Ok(c),
                (Err(o), Err(EinsumError::Memory { .. })) => Err(o),
                (Err(_), Err(c)) => Err(c),
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
