//! The primitive AD contract (seeds 001 and 002): [`ADKey`], [`Primitive`],
//! [`PrimitiveBuilder`] and [`PrimitiveValue`].

use std::fmt;
use std::hash::Hash;

use computegraph::{GraphBuilder, GraphOperation, Id, LocalValueId, OperationRole, ValueKey, ValueRef};

use crate::error::{ADRuleError, ADRuleResult};

/// Identifies one differentiation pass (one call of `linearize` or `linear_transpose`).
pub type DiffPassId = u64;

/// Input keys usable for AD: a key can derive a fresh tangent key for a pass.
///
/// `k.tangent_of(p)` must differ from every key the user can write, from `k`, and from
/// `k.tangent_of(q)` for `q != p`; it must be deterministic (equal inputs, equal key).
pub trait ADKey: Clone + fmt::Debug + Hash + Eq + Send + Sync + 'static {
    /// The key of the tangent (or cotangent seed) of `self` in pass `pass`.
    fn tangent_of(&self, pass: DiffPassId) -> Self;
}

/// An operand of an operation a rule emits: `External(key)`, a value of the source graph
/// by key (a primal input or output), or `Local(id)`, a value the rule (or an earlier rule
/// of the same transform) just produced through the builder.
///
/// It is the engine's [`ValueRef`] under the name of the AD contract, so rules pass
/// operands to the builder without conversion.
pub type PrimitiveValue<Op> = ValueRef<Op>;

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
/// operations of the same set, and only in `OperationRole::Linearized` roles: operands a
/// rule treats as fixed get `false` in the active mask; a computation on primal values
/// alone (say `cos x` inside `sin`'s JVP) gets an all-`false` mask.
///
/// `None` is a symbolic zero: a rule receives `None` for inactive inputs and returns
/// `None` for outputs whose tangent is zero. Rules should emit nothing for `None`s;
/// `linearize` never calls a rule whose tangents are all `None`.
///
/// The `try_` forms report a missing or failing rule as an [`ADRuleError`] naming the
/// operation and the rule. Each rule and its `try_` form default to each other: implement
/// the infallible form, or the `try_` form (the infallible one then panics with the
/// error's message), or both — not neither. The transforms call the `_into` forms
/// ([`Primitive::try_jvp_rule_into`], [`Primitive::try_linear_transpose_rule_into`]), which
/// default to the `try_` forms; a set that overrides them implements the `try_` forms
/// through them.
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
    ) -> Vec<Option<LocalValueId>> {
        self.try_jvp_rule(builder, primal_inputs, primal_outputs, tangent_inputs, ctx).unwrap_or_else(|e| panic!("{e}"))
    }

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
    ) -> Vec<Option<LocalValueId>> {
        self.try_linear_transpose_rule(builder, cotangent_outputs, inputs, role, ctx).unwrap_or_else(|e| panic!("{e}"))
    }

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
