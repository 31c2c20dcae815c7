//! The primitive AD contract (`docs/SPEC.md` §3): [`ADKey`], [`Primitive`],
//! [`PrimitiveBuilder`] and [`PrimitiveValue`].

use std::fmt;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};

use computegraph::{GraphBuilder, GraphOperation, Id, LocalValueId, OperationRole, ValueKey};

use crate::error::{ADRuleError, ADRuleResult};

/// Identifies one differentiation pass (one call of `linearize` or `linear_transpose`).
pub type DiffPassId = u64;

static NEXT_PASS: AtomicU64 = AtomicU64::new(1);

/// A fresh, process-unique pass id.
///
/// ```
/// assert_ne!(tidu::fresh_pass_id(), tidu::fresh_pass_id());
/// ```
pub fn fresh_pass_id() -> DiffPassId {
    fresh_pass_ids(1)
}

/// The first of `n` consecutive fresh pass ids.
pub(crate) fn fresh_pass_ids(n: u64) -> DiffPassId {
    NEXT_PASS.fetch_add(n.max(1), Ordering::Relaxed)
}

/// Input keys usable for AD: a key can derive a fresh tangent key for a pass.
///
/// `k.tangent_of(p)` must differ from every key the user can write, from `k`, and from
/// `k.tangent_of(q)` for `q != p`; it must be deterministic (equal inputs, equal key).
///
/// ```
/// use tidu::{ADKey, DiffPassId};
///
/// // Keys as (name, passes): a tangent appends its pass.
/// #[derive(Clone, Debug, Hash, PartialEq, Eq)]
/// struct Key(&'static str, Vec<DiffPassId>);
/// impl ADKey for Key {
///     fn tangent_of(&self, pass: DiffPassId) -> Self {
///         let mut passes = self.1.clone();
///         passes.push(pass);
///         Key(self.0, passes)
///     }
/// }
/// let x = Key("x", vec![]);
/// assert_eq!(x.tangent_of(3), Key("x", vec![3]));
/// assert_ne!(x.tangent_of(3), x.tangent_of(4));
/// ```
pub trait ADKey: Clone + fmt::Debug + Hash + Eq + Send + Sync + 'static {
    /// The key of the tangent (or cotangent seed) of `self` in pass `pass`.
    fn tangent_of(&self, pass: DiffPassId) -> Self;
}

/// An operand of an operation a rule emits: `External(key)`, a value of the source graph
/// by key (a primal input or output), or `Local(id)`, a value the rule (or an earlier rule
/// of the same transform) just produced through the builder.
///
/// It is the engine's [`ValueRef`](computegraph::ValueRef) under the name of the AD
/// contract (a re-export, not an alias, so its variants import by this name too), and rules
/// pass operands to the builder without conversion.
///
/// ```
/// use tidu::PrimitiveValue::{External, Local};
/// # use computegraph::{LocalValueId, Id, ValueKey};
/// let v: tidu::PrimitiveValue<scalar::ScalarOp> = Local(LocalValueId::new(0));
/// assert!(matches!(v, Local(_)));
/// assert!(!matches!(v, External(ValueKey::Input(_))));
/// ```
pub use computegraph::ValueRef as PrimitiveValue;

/// Where rules emit operations.
pub trait PrimitiveBuilder<Op: GraphOperation> {
    /// Emits `op(inputs)` in `role`, or reports why it cannot (wrong arity, unknown value...).
    fn try_add_primitive(
        &mut self,
        op: Op,
        inputs: Vec<PrimitiveValue<Op>>,
        role: OperationRole,
    ) -> ADRuleResult<Vec<LocalValueId>>;

    /// Allocation-free form: borrows the operands and the role, and returns the first
    /// output (an operation's outputs are consecutive local ids). An operation without
    /// outputs is an error here.
    fn try_add_primitive_from(
        &mut self,
        op: Op,
        inputs: &[PrimitiveValue<Op>],
        role: &OperationRole,
    ) -> ADRuleResult<LocalValueId>;

    /// Emits `op(inputs)` in `role` and returns its outputs.
    ///
    /// # Panics
    /// If the operation is malformed (a bug in the calling rule); rules that want an error
    /// value use [`PrimitiveBuilder::try_add_primitive`].
    fn add_primitive(&mut self, op: Op, inputs: Vec<PrimitiveValue<Op>>, role: OperationRole) -> Vec<LocalValueId> {
        self.try_add_primitive(op, inputs, role)
            .unwrap_or_else(|e| panic!("an AD rule emitted an invalid operation: {e}"))
    }

    /// Emits `op(inputs)` in `role` and returns its first output, without allocating.
    ///
    /// # Panics
    /// If the operation is malformed or has no output; see
    /// [`PrimitiveBuilder::try_add_primitive_from`].
    fn add_primitive_from(&mut self, op: Op, inputs: &[PrimitiveValue<Op>], role: &OperationRole) -> LocalValueId {
        self.try_add_primitive_from(op, inputs, role)
            .unwrap_or_else(|e| panic!("an AD rule emitted an invalid operation: {e}"))
    }
}

impl<Op: GraphOperation> PrimitiveBuilder<Op> for GraphBuilder<Op> {
    fn try_add_primitive(
        &mut self,
        op: Op,
        inputs: Vec<PrimitiveValue<Op>>,
        role: OperationRole,
    ) -> ADRuleResult<Vec<LocalValueId>> {
        let range = self.try_add_operation_from(op, &inputs, &role).map_err(ADRuleError::Graph)?;
        Ok(range.map(LocalValueId::new).collect())
    }

    fn try_add_primitive_from(
        &mut self,
        op: Op,
        inputs: &[PrimitiveValue<Op>],
        role: &OperationRole,
    ) -> ADRuleResult<LocalValueId> {
        let label = || format!("{op:?}");
        let no_output = op.output_count() == 0;
        if no_output {
            return Err(ADRuleError::RuleContract {
                operation: label(),
                rule: crate::RuleKind::Jvp,
                message: "add_primitive_from needs an operation with an output".into(),
            });
        }
        let range = self.try_add_operation_from(op, inputs, role).map_err(ADRuleError::Graph)?;
        Ok(LocalValueId::new(range.start))
    }
}

/// Writes the two required rules, [`Primitive::jvp_rule`] and [`Primitive::transpose_rule`],
/// for an operation set whose real rules are its fallible forms: each calls its `try_` form
/// and panics with the error's message. Use it inside an `impl Primitive` that overrides
/// `try_jvp_rule` and `try_linear_transpose_rule` (the provided `try_` forms call the
/// required ones, so without those overrides the two would call each other).
///
/// ```
/// use computegraph::{GraphOperation, LocalValueId, OperationRole, ValueKey};
/// use tidu::{ADRuleError, ADRuleResult, Primitive, PrimitiveBuilder, PrimitiveValue, RuleKind};
///
/// #[derive(Clone, Debug, Hash, PartialEq, Eq)]
/// struct Opaque;
/// impl GraphOperation for Opaque {
///     type Operand = f64;
///     type Context = ();
///     type InputKey = scalar::ScalarKey;
///     fn input_count(&self) -> usize { 1 }
///     fn output_count(&self) -> usize { 1 }
/// }
/// impl Primitive for Opaque {
///     type ADContext = ();
///     fn add() -> Self { Opaque }
///     tidu::rules_from_try_forms!();
///     fn try_jvp_rule(&self, _: &mut impl PrimitiveBuilder<Self>, _: &[ValueKey<Self>], _: &[ValueKey<Self>],
///                     _: &[Option<LocalValueId>], _: &mut ()) -> ADRuleResult<Vec<Option<LocalValueId>>> {
///         Err(ADRuleError::missing(self, RuleKind::Jvp, "not differentiable"))
///     }
///     fn try_linear_transpose_rule(&self, _: &mut impl PrimitiveBuilder<Self>, _: &[Option<LocalValueId>],
///                                  _: &[PrimitiveValue<Self>], _: &OperationRole, _: &mut ())
///                                  -> ADRuleResult<Vec<Option<LocalValueId>>> {
///         Err(ADRuleError::missing(self, RuleKind::Transpose, "not linear"))
///     }
/// }
/// let mut b = computegraph::GraphBuilder::<Opaque>::new();
/// assert!(Opaque.try_jvp_rule(&mut b, &[], &[], &[None], &mut ()).is_err());
/// ```
#[macro_export]
macro_rules! rules_from_try_forms {
    () => {
        fn jvp_rule(
            &self,
            builder: &mut impl $crate::PrimitiveBuilder<Self>,
            primal_inputs: &[$crate::__private::ValueKey<Self>],
            primal_outputs: &[$crate::__private::ValueKey<Self>],
            tangent_inputs: &[::core::option::Option<$crate::__private::LocalValueId>],
            ctx: &mut <Self as $crate::Primitive>::ADContext,
        ) -> ::std::vec::Vec<::core::option::Option<$crate::__private::LocalValueId>> {
            $crate::Primitive::try_jvp_rule(self, builder, primal_inputs, primal_outputs, tangent_inputs, ctx)
                .unwrap_or_else(|e| ::core::panic!("{e}"))
        }

        fn transpose_rule(
            &self,
            builder: &mut impl $crate::PrimitiveBuilder<Self>,
            cotangent_outputs: &[::core::option::Option<$crate::__private::LocalValueId>],
            inputs: &[$crate::PrimitiveValue<Self>],
            role: &$crate::__private::OperationRole,
            ctx: &mut <Self as $crate::Primitive>::ADContext,
        ) -> ::std::vec::Vec<::core::option::Option<$crate::__private::LocalValueId>> {
            $crate::Primitive::try_linear_transpose_rule(self, builder, cotangent_outputs, inputs, role, ctx)
                .unwrap_or_else(|e| ::core::panic!("{e}"))
        }
    };
}

/// What a transpose rule gets for an active operand when its set does not read them
/// ([`Primitive::TRANSPOSE_READS_ACTIVE_INPUTS`] is `false`): a local value that no builder
/// has, so a rule that emits it anyway gets an error instead of a wrong graph.
///
/// ```
/// use computegraph::{GraphBuilder, OperationRole};
/// use scalar::ScalarOp;
///
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let e = b.try_add_operation(ScalarOp::Neg, vec![tidu::unknown_operand()], OperationRole::all_active(1));
/// assert!(e.is_err());
/// ```
pub fn unknown_operand<Op: GraphOperation>() -> PrimitiveValue<Op> {
    PrimitiveValue::Local(LocalValueId::new(<LocalValueId as Id>::MAX_INDEX))
}

/// An operation set with automatic-differentiation rules.
///
/// `jvp_rule` emits the tangent of the outputs as a linear function of the tangents of
/// the inputs; `transpose_rule` emits the transpose of a linear operation (one this
/// primitive's JVP or transpose rules emitted in a `Linearized` role). Both emit only
/// operations of the same set. An operation that reads a tangent is emitted in
/// `OperationRole::Linearized`, with `false` in the active mask for the operands the rule
/// treats as fixed; a computation on primal values alone (say `cos x` inside `sin`'s JVP)
/// is emitted in `OperationRole::Primary` (or, equally accepted, `Linearized` with an
/// all-`false` mask).
///
/// `None` is a symbolic zero: a rule receives `None` for inactive inputs and returns
/// `None` for outputs whose tangent is zero. Rules should emit nothing for `None`s;
/// `linearize` never calls a rule whose tangents are all `None`.
///
/// Required: [`add`](Primitive::add), [`jvp_rule`](Primitive::jvp_rule) and
/// [`transpose_rule`](Primitive::transpose_rule), with the specification's signatures.
/// Everything else is provided, and every provided method calls down this chain, never
/// back: `try_jvp_rule_into` → `try_jvp_rule` → `jvp_rule` (the same for transposes). So
/// a forgotten rule is a compile error, never a recursion.
///
/// The `try_` forms report a missing or failing rule as an [`ADRuleError`] naming the
/// operation and the rule; the transforms call the `_into` forms, which append to one
/// reused buffer. A set that wants error values overrides the `try_` forms too (and its
/// infallible forms then usually call them and panic on an error); a set whose rules run
/// on cheap operations overrides the `_into` forms so a transform allocates nothing per
/// rule call.
///
/// A rule may also emit primal computations in [`OperationRole::Primary`] (`cos x` inside
/// `sin`'s JVP), as long as every operand is fixed: a primal value, or the result of
/// another such operation. They share their key with the same computation in the primal
/// graph, so `materialize_merge` evaluates it once, and `linear_transpose` forwards them
/// (it transposes only the operations that read a tangent). A `Primary` operation that
/// reads a tangent is an [`ADRuleError::NonLinear`].
///
/// A two-operation set (`Add`, and `Twice`, x ↦ 2x), differentiated to the second order.
/// A fuller walk-through, with nonlinear operations, is `docs/guide-primitives.md`.
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{GraphBuilder, GraphOperation, LocalValueId, OperationRole, ValueKey, ValueRef::Local};
/// use scalar::ScalarKey;
/// use tidu::{linear_transpose, linearize, Primitive, PrimitiveBuilder, PrimitiveValue};
///
/// #[derive(Clone, Debug, Hash, PartialEq, Eq)]
/// enum Op { Add, Twice }
/// impl GraphOperation for Op {
///     type Operand = f64;
///     type Context = ();
///     type InputKey = ScalarKey;
///     fn input_count(&self) -> usize { if *self == Op::Add { 2 } else { 1 } }
///     fn output_count(&self) -> usize { 1 }
/// }
/// impl Primitive for Op {
///     type ADContext = ();
///     fn add() -> Self { Op::Add }
///     // Both operations are linear: the tangent is the operation on the tangents.
///     fn jvp_rule(&self, b: &mut impl PrimitiveBuilder<Self>, _: &[ValueKey<Self>], _: &[ValueKey<Self>],
///                 t: &[Option<LocalValueId>], _: &mut ()) -> Vec<Option<LocalValueId>> {
///         let lin = |n| OperationRole::all_active(n);
///         vec![Some(match (self, t) {
///             (Op::Twice, [Some(dx)]) => b.add_primitive(Op::Twice, vec![Local(*dx)], lin(1))[0],
///             (Op::Add, [Some(a), Some(c)]) => b.add_primitive(Op::Add, vec![Local(*a), Local(*c)], lin(2))[0],
///             (Op::Add, [Some(a), None] | [None, Some(a)]) => *a,
///             _ => unreachable!("never called with only symbolic zeros"),
///         })]
///     }
///     // Transposes: Twice is its own; Add hands the cotangent to both operands.
///     fn transpose_rule(&self, b: &mut impl PrimitiveBuilder<Self>, ct: &[Option<LocalValueId>],
///                       _: &[PrimitiveValue<Self>], _: &OperationRole, _: &mut ()) -> Vec<Option<LocalValueId>> {
///         match (self, ct) {
///             (_, [None]) => vec![None; self.input_count()],
///             (Op::Twice, [Some(c)]) => vec![Some(b.add_primitive(Op::Twice, vec![Local(*c)], OperationRole::all_active(1))[0])],
///             (Op::Add, [Some(c)]) => vec![Some(*c), Some(*c)],
///             _ => unreachable!(),
///         }
///     }
/// }
///
/// // f(x) = 2x + x; f' = 3, and the transpose of that linear map is 3 too.
/// let mut b = GraphBuilder::<Op>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// let t = b.add_operation(Op::Twice, vec![Local(x)], OperationRole::Primary)[0];
/// let y = b.add_operation(Op::Add, vec![Local(t), Local(x)], OperationRole::Primary)[0];
/// let f = Arc::new(b.build());
/// let lin = linearize(&computegraph::resolve(vec![f.clone()]), &[f.global_key(y)], &[ScalarKey::var(0)]);
/// let tr = linear_transpose(&lin);
/// assert_eq!(tr.tangent_outputs().len(), 1);
/// assert!(tr.tangent_outputs()[0].is_some());
/// ```
pub trait Primitive: GraphOperation<InputKey: ADKey> {
    /// Rule state threaded through a transform (caches, options). Most sets use `()`.
    type ADContext: Default;

    /// The addition used to accumulate cotangents where a value fans out.
    fn add() -> Self;

    /// Whether transpose rules read the operands they transpose for, the active entries
    /// of their `inputs` (by default they get those operands' keys, like the fixed ones).
    ///
    /// A set whose rules never look at them (they must not be referenced anyway) sets this
    /// to `false`: `linear_transpose` then passes [`unknown_operand`] there and skips
    /// computing those keys, one read of several cold columns of the linear graph per
    /// operand on large graphs. A set whose rules inspect them (say, to look a shape up
    /// by key) keeps the default.
    const TRANSPOSE_READS_ACTIVE_INPUTS: bool = true;

    /// The JVP rule: tangents of the outputs from tangents of the inputs.
    fn jvp_rule(
        &self,
        builder: &mut impl PrimitiveBuilder<Self>,
        primal_inputs: &[ValueKey<Self>],
        primal_outputs: &[ValueKey<Self>],
        tangent_inputs: &[Option<LocalValueId>],
        ctx: &mut Self::ADContext,
    ) -> Vec<Option<LocalValueId>>;

    /// The transpose rule of a linear operation in `role`: cotangents of the active inputs
    /// from cotangents of the outputs. `inputs` are the operation's operands by key; the
    /// active ones (per the role's mask) are the unknowns and must not be referenced (they
    /// are [`unknown_operand`] if [`Primitive::TRANSPOSE_READS_ACTIVE_INPUTS`] is `false`).
    fn transpose_rule(
        &self,
        builder: &mut impl PrimitiveBuilder<Self>,
        cotangent_outputs: &[Option<LocalValueId>],
        inputs: &[PrimitiveValue<Self>],
        role: &OperationRole,
        ctx: &mut Self::ADContext,
    ) -> Vec<Option<LocalValueId>>;

    /// Fallible JVP rule; defaults to [`Primitive::jvp_rule`].
    fn try_jvp_rule(
        &self,
        builder: &mut impl PrimitiveBuilder<Self>,
        primal_inputs: &[ValueKey<Self>],
        primal_outputs: &[ValueKey<Self>],
        tangent_inputs: &[Option<LocalValueId>],
        ctx: &mut Self::ADContext,
    ) -> ADRuleResult<Vec<Option<LocalValueId>>> {
        Ok(self.jvp_rule(builder, primal_inputs, primal_outputs, tangent_inputs, ctx))
    }

    /// The JVP rule as `linearize` calls it: appends the tangents of the outputs to `out`
    /// (which the caller passes empty) instead of returning a new `Vec`. Defaults to
    /// [`Primitive::try_jvp_rule`]; see [`Primitive::try_linear_transpose_rule_into`].
    fn try_jvp_rule_into(
        &self,
        builder: &mut impl PrimitiveBuilder<Self>,
        primal_inputs: &[ValueKey<Self>],
        primal_outputs: &[ValueKey<Self>],
        tangent_inputs: &[Option<LocalValueId>],
        ctx: &mut Self::ADContext,
        out: &mut Vec<Option<LocalValueId>>,
    ) -> ADRuleResult<()> {
        out.extend(self.try_jvp_rule(builder, primal_inputs, primal_outputs, tangent_inputs, ctx)?);
        Ok(())
    }

    /// Fallible transpose rule; defaults to [`Primitive::transpose_rule`].
    fn try_linear_transpose_rule(
        &self,
        builder: &mut impl PrimitiveBuilder<Self>,
        cotangent_outputs: &[Option<LocalValueId>],
        inputs: &[PrimitiveValue<Self>],
        role: &OperationRole,
        ctx: &mut Self::ADContext,
    ) -> ADRuleResult<Vec<Option<LocalValueId>>> {
        Ok(self.transpose_rule(builder, cotangent_outputs, inputs, role, ctx))
    }

    /// The transpose rule as `linear_transpose` calls it: appends the cotangents of the
    /// inputs to `out` (which the caller passes empty) instead of returning a new `Vec`.
    /// Defaults to [`Primitive::try_linear_transpose_rule`]; a set whose rules run on cheap
    /// operations overrides it (and implements the `Vec` forms through it) so that a
    /// transpose allocates nothing per rule call.
    fn try_linear_transpose_rule_into(
        &self,
        builder: &mut impl PrimitiveBuilder<Self>,
        cotangent_outputs: &[Option<LocalValueId>],
        inputs: &[PrimitiveValue<Self>],
        role: &OperationRole,
        ctx: &mut Self::ADContext,
        out: &mut Vec<Option<LocalValueId>>,
    ) -> ADRuleResult<()> {
        out.extend(self.try_linear_transpose_rule(builder, cotangent_outputs, inputs, role, ctx)?);
        Ok(())
    }
}
