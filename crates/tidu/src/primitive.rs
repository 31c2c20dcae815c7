//! The primitive AD contract (seeds 001 and 002): [`ADKey`], [`Primitive`],
//! [`PrimitiveBuilder`] and [`PrimitiveValue`].

use std::fmt;
use std::hash::Hash;

use computegraph::{GraphBuilder, GraphOperation, LocalValueId, OperationRole, ValueKey, ValueRef};
use smallvec::SmallVec;

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

/// An operand of an operation a rule emits: a value of the source graph by key, or a
/// value the rule (or an earlier rule of the same transform) just produced.
pub enum PrimitiveValue<Op: GraphOperation> {
    /// A value that exists outside the graph being built (a primal input or output).
    External(ValueKey<Op>),
    /// A value produced through the builder during this transform.
    Local(LocalValueId),
}

impl<Op: GraphOperation> Clone for PrimitiveValue<Op> {
    fn clone(&self) -> Self {
        match self {
            PrimitiveValue::External(k) => PrimitiveValue::External(k.clone()),
            PrimitiveValue::Local(v) => PrimitiveValue::Local(*v),
        }
    }
}

impl<Op: GraphOperation> PartialEq for PrimitiveValue<Op> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (PrimitiveValue::External(a), PrimitiveValue::External(b)) => a == b,
            (PrimitiveValue::Local(a), PrimitiveValue::Local(b)) => a == b,
            _ => false,
        }
    }
}

impl<Op: GraphOperation> fmt::Debug for PrimitiveValue<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PrimitiveValue::External(k) => write!(f, "External({k:?})"),
            PrimitiveValue::Local(v) => write!(f, "Local({v:?})"),
        }
    }
}

impl<Op: GraphOperation> From<PrimitiveValue<Op>> for ValueRef<Op> {
    fn from(v: PrimitiveValue<Op>) -> Self {
        match v {
            PrimitiveValue::External(k) => ValueRef::External(k),
            PrimitiveValue::Local(l) => ValueRef::Local(l),
        }
    }
}

/// Where rules emit operations.
pub trait PrimitiveBuilder<Op: GraphOperation> {
    /// Emits `op(inputs)` in `role`, or reports why it cannot (wrong arity, unknown value...).
    fn try_add_primitive(
        &mut self,
        op: Op,
        inputs: Vec<PrimitiveValue<Op>>,
        role: OperationRole,
    ) -> ADRuleResult<Vec<LocalValueId>>;

    /// Emits `op(inputs)` in `role` and returns its outputs.
    ///
    /// # Panics
    /// If the operation is malformed (a bug in the calling rule); rules that want an error
    /// value use [`PrimitiveBuilder::try_add_primitive`].
    fn add_primitive(&mut self, op: Op, inputs: Vec<PrimitiveValue<Op>>, role: OperationRole) -> Vec<LocalValueId> {
        self.try_add_primitive(op, inputs, role)
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
        let refs: SmallVec<[ValueRef<Op>; 4]> = inputs.into_iter().map(ValueRef::from).collect();
        let range = self.try_add_operation_from(op, &refs, &role).map_err(ADRuleError::Graph)?;
        Ok(range.map(LocalValueId::new).collect())
    }
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
/// operation and the rule; they default to the infallible forms.
pub trait Primitive: GraphOperation<InputKey: ADKey> {
    /// Rule state threaded through a transform (caches, options). Most sets use `()`.
    type ADContext: Default;

    /// The addition used to accumulate cotangents where a value fans out.
    fn add() -> Self;

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
    /// active ones (per the role's mask) are the unknowns and must not be referenced.
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
}
