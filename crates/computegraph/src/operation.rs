//! The operation traits: what the engine needs to know about a user's operations.
//!
//! The engine is generic over [`GraphOperation`] and never names a concrete operation.
//! Evaluation is opt-in through [`EvaluableGraphOperation`].

use std::fmt;
use std::hash::Hash;
use std::mem::MaybeUninit;

use crate::error::{GraphError, GraphResult};

/// An operation node: arity and associated types, no behaviour.
///
/// Implemented by a downstream operation set (usually an enum). Equality and hashing
/// are structural: two operations that compare equal on the same inputs with the same
/// role are the same computation, and the engine deduplicates them. Equal operations must
/// also be interchangeable in evaluation, on any operands and context: parallel
/// evaluation runs one representative of each set of equal operations in place of the
/// others (`docs/adr/0007-compact-parallel-steps.md`), so `Eq` must compare everything
/// that evaluation uses (a field it ignores may make parallel results differ from
/// sequential ones).
///
/// ```
/// use computegraph::GraphOperation;
///
/// #[derive(Clone, Debug, Hash, PartialEq, Eq)]
/// enum Op { Add, Neg }
///
/// impl GraphOperation for Op {
///     type Operand = f64;
///     type Context = ();
///     type InputKey = &'static str;
///     fn input_count(&self) -> usize { match self { Op::Add => 2, Op::Neg => 1 } }
///     fn output_count(&self) -> usize { 1 }
/// }
/// assert_eq!(Op::Add.input_count(), 2);
/// ```
pub trait GraphOperation: Clone + fmt::Debug + Hash + Eq + Send + Sync + 'static {
    /// Runtime value type. The engine imposes nothing beyond moving and cloning it.
    type Operand: Clone + Send + Sync + 'static;
    /// Backend execution state passed to evaluation.
    type Context;
    /// Key naming a graph input.
    type InputKey: Clone + fmt::Debug + Hash + Eq + Send + Sync + 'static;

    /// Number of operands the operation consumes.
    fn input_count(&self) -> usize;
    /// Number of values the operation produces.
    fn output_count(&self) -> usize;

    /// Writes the operation's name for text dumps and DOT export (`mul` in `v3 = mul v1, v2`).
    /// Defaults to the `Debug` representation.
    fn fmt_label(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }

    /// Relative evaluation cost, used by schedulers to decide what is worth running in
    /// parallel, and by compile to keep the materialized order of costly programs rather
    /// than group operations by variant (`dispatch.rs`). The unit is roughly "nanoseconds
    /// of work"; the default, 1, means cheap.
    fn cost_hint(&self) -> u64 {
        1
    }
}

/// Opt-in evaluation for a [`GraphOperation`].
///
/// One method is required, [`eval_into`](Self::eval_into): evaluate the operation and
/// push its outputs to [`Outputs`], which the evaluator points at the values' destination,
/// so evaluating a graph of cheap operations allocates nothing and copies nothing per node.
/// The specification's form, [`eval`](Self::eval), which returns a new `Vec`, is provided
/// on top of it; an implementation that writes only `eval` does not compile, and the
/// compiler names `eval_into` as the method to write.
///
/// Mark `eval_into` `#[inline(always)]`, as below. The evaluator calls it once per node, and
/// without the attribute the compiler does not inline a function of another crate into the
/// evaluator's loop: a call per node then costs about as much as cheap scalar arithmetic
/// itself (on the add/mul/neg DAG of the `eval_arithmetic` bench, evaluation is about 3.7×
/// slower; `docs/PERFORMANCE.md`, *The specification's user*).
///
/// ```
/// use computegraph::{EvaluableGraphOperation, GraphOperation, Outputs};
///
/// #[derive(Clone, Debug, Hash, PartialEq, Eq)]
/// struct Double;
/// impl GraphOperation for Double {
///     type Operand = f64;
///     type Context = ();
///     type InputKey = u32;
///     fn input_count(&self) -> usize { 1 }
///     fn output_count(&self) -> usize { 1 }
/// }
/// impl EvaluableGraphOperation for Double {
///     #[inline(always)]
///     fn eval_into(&self, _: &mut (), inputs: &[&f64], out: &mut Outputs<'_, f64>) {
///         out.push(2.0 * inputs[0]);
///     }
/// }
/// assert_eq!(Double.eval(&mut (), &[&3.0]), vec![6.0]);
/// ```
///
/// Writing only the `Vec` form is a compile error:
///
/// ```compile_fail,E0046
/// # use computegraph::{EvaluableGraphOperation, GraphOperation};
/// # #[derive(Clone, Debug, Hash, PartialEq, Eq)]
/// # struct Double;
/// # impl GraphOperation for Double {
/// #     type Operand = f64;
/// #     type Context = ();
/// #     type InputKey = u32;
/// #     fn input_count(&self) -> usize { 1 }
/// #     fn output_count(&self) -> usize { 1 }
/// # }
/// impl EvaluableGraphOperation for Double {
///     fn eval(&self, _: &mut (), inputs: &[&f64]) -> Vec<f64> {
///         vec![2.0 * inputs[0]]
///     }
/// }
/// ```
pub trait EvaluableGraphOperation: GraphOperation {
    /// Evaluates the operation, pushing exactly `output_count()` operands to `out`, in
    /// output order. The one required method.
    fn eval_into(&self, ctx: &mut Self::Context, inputs: &[&Self::Operand], out: &mut Outputs<'_, Self::Operand>);

    /// Evaluates the operation, returning one operand per output: the specification's
    /// form, provided through [`Self::eval_into`].
    fn eval(&self, ctx: &mut Self::Context, inputs: &[&Self::Operand]) -> Vec<Self::Operand> {
        let mut out = Vec::with_capacity(self.output_count());
        self.eval_into(ctx, inputs, &mut Outputs::vec(&mut out));
        out
    }
}

/// Where [`EvaluableGraphOperation::eval_into`] puts an operation's outputs: `push` them
/// in order (or `extend` with several).
///
/// Evaluators point it at the outputs' destination, with room for exactly the operation's
/// output count: a value pushed beyond it is dropped, and the evaluator reports the wrong
/// count as [`GraphError::OutputCountMismatch`](crate::GraphError::OutputCountMismatch)
/// (as it does for too few). [`Outputs::vec`] appends to a `Vec` instead, for calling
/// `eval_into` directly.
///
/// ```
/// use computegraph::Outputs;
///
/// let mut v = Vec::new();
/// {
///     let mut out = Outputs::vec(&mut v);
///     out.push(1.0);
///     out.extend([2.0, 3.0]);
///     assert_eq!(out.len(), 3);
/// }
/// assert_eq!(v, [1.0, 2.0, 3.0]);
/// ```
pub struct Outputs<'a, T> {
    inner: Inner<'a, T>,
}

enum Inner<'a, T> {
    /// A destination of fixed size; `len` counts every value pushed, written or not.
    Slots {
        buf: &'a mut [MaybeUninit<T>],
        len: usize,
    },
    Vec {
        vec: &'a mut Vec<T>,
        start: usize,
    },
}

impl<'a, T> Outputs<'a, T> {
    /// Outputs appended to `vec` (after what it holds).
    pub fn vec(vec: &'a mut Vec<T>) -> Self {
        let start = vec.len();
        Outputs { inner: Inner::Vec { vec, start } }
    }

    /// Outputs written to `buf`, whose length is the expected output count.
    #[inline(always)]
    pub(crate) fn slots(buf: &'a mut [MaybeUninit<T>]) -> Self {
        Outputs { inner: Inner::Slots { buf, len: 0 } }
    }

    /// Appends an output.
    #[inline(always)]
    pub fn push(&mut self, value: T) {
        match &mut self.inner {
            Inner::Slots { buf, len } => {
                if let Some(slot) = buf.get_mut(*len) {
                    slot.write(value);
                }
                *len += 1;
            }
            Inner::Vec { vec, .. } => vec.push(value),
        }
    }

    /// Number of outputs pushed so far.
    #[inline(always)]
    pub fn len(&self) -> usize {
        match &self.inner {
            Inner::Slots { len, .. } => *len,
            Inner::Vec { vec, start } => vec.len() - start,
        }
    }

    /// Whether no output was pushed yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// For evaluators: `Ok` if exactly the destination's size was pushed, which then
    /// holds the values (now the caller's); otherwise the count pushed, the values written
    /// having been dropped.
    #[inline(always)]
    pub(crate) fn finish(self) -> Result<(), usize> {
        let this = std::mem::ManuallyDrop::new(self);
        match &this.inner {
            Inner::Slots { buf, len } if *len == buf.len() => Ok(()),
            _ => {
                let found = this.len();
                drop(std::mem::ManuallyDrop::into_inner(this));
                Err(found)
            }
        }
    }
}

impl<T> Extend<T> for Outputs<'_, T> {
    #[inline]
    fn extend<I: IntoIterator<Item = T>>(&mut self, values: I) {
        for v in values {
            self.push(v);
        }
    }
}

impl<T> Drop for Outputs<'_, T> {
    /// Drops the values written to a fixed destination that no evaluator took (a wrong
    /// count, or a panic in the operation).
    fn drop(&mut self) {
        if let Inner::Slots { buf, len } = &mut self.inner {
            let written = (*len).min(buf.len());
            for slot in &mut buf[..written] {
                // SAFETY: the first `written` entries were written by `push` and not taken.
                unsafe { slot.assume_init_drop() };
            }
        }
    }
}

/// Whether an operation is part of a primal computation or of a linear (tangent or
/// cotangent) map. The role is part of an operation's identity: the same operation on the
/// same inputs in two roles gives two different keys.
///
/// ```
/// use computegraph::{GraphBuilder, OperationRole, ValueRef::Local};
/// use scalar::{ScalarKey, ScalarOp};
///
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let a = b.add_input(ScalarKey::var(0));
/// let t = b.add_input(ScalarKey::var(1));
/// let primal = b.add_operation(ScalarOp::Mul, vec![Local(a), Local(t)], OperationRole::Primary)[0];
/// // The same product as a linear map of its second input (a tangent), the first fixed.
/// let linear = OperationRole::Linearized { active_mask: vec![false, true] };
/// let tangent = b.add_operation(ScalarOp::Mul, vec![Local(a), Local(t)], linear.clone())[0];
/// assert_ne!(b.global_key(primal), b.global_key(tangent));
/// assert_eq!(linear.active_mask(), Some(&[false, true][..]));
/// assert_eq!(linear.to_string(), "linear[fa]");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum OperationRole {
    /// A primal operation.
    #[default]
    Primary,
    /// An operation of a linearized graph; `active_mask[i]` says whether input `i`
    /// carries a tangent (is linear) or is a fixed primal value.
    Linearized {
        /// One flag per input.
        active_mask: Vec<bool>,
    },
}

impl OperationRole {
    /// The role of a linear operation whose every input is active.
    pub fn all_active(n: usize) -> Self {
        OperationRole::Linearized { active_mask: vec![true; n] }
    }

    /// Whether this is a `Linearized` role.
    pub fn is_linearized(&self) -> bool {
        matches!(self, OperationRole::Linearized { .. })
    }

    /// The active mask, if linearized.
    pub fn active_mask(&self) -> Option<&[bool]> {
        match self {
            OperationRole::Primary => None,
            OperationRole::Linearized { active_mask } => Some(active_mask),
        }
    }
}

impl fmt::Display for OperationRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OperationRole::Primary => Ok(()),
            OperationRole::Linearized { active_mask } => {
                f.write_str("linear[")?;
                for &a in active_mask {
                    f.write_str(if a { "a" } else { "f" })?;
                }
                f.write_str("]")
            }
        }
    }
}

/// Formats an operation through [`GraphOperation::fmt_label`].
pub(crate) struct Label<'a, Op>(pub(crate) &'a Op);

impl<Op: GraphOperation> fmt::Display for Label<'_, Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt_label(f)
    }
}

/// Checks an operation's arity, role mask and output count against its declaration, and
/// returns its output count (so that the builder asks the operation once).
pub(crate) fn check_operation<Op: GraphOperation>(op: &Op, inputs: usize, role: &OperationRole) -> GraphResult<usize> {
    let expected = op.input_count();
    if inputs != expected {
        return Err(GraphError::ArityMismatch { operation: format!("{}", Label(op)), expected, found: inputs });
    }
    if let OperationRole::Linearized { active_mask } = role {
        if active_mask.len() != expected {
            return Err(GraphError::ActiveMaskMismatch {
                operation: format!("{}", Label(op)),
                expected,
                found: active_mask.len(),
            });
        }
    }
    let outputs = op.output_count();
    if outputs > 256 {
        return Err(GraphError::TooManyOutputs { operation: format!("{}", Label(op)), outputs });
    }
    Ok(outputs)
}
