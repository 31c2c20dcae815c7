//! `linear_transpose`: reverse a linear graph (the VJP transform).
//!
//! Input: a [`LinearizedGraph`] (a linear map `L`). Output: a [`LinearizedGraph`] for `Lᵀ`:
//! one cotangent seed input per non-zero output of `L`, one output per input of `L`
//! (`None` where no cotangent reaches it).
//!
//! Algorithm (`docs/SPEC.md` §4.2 and §4.3): seed the cotangent environment, keyed by the
//! **global key** of each linear value, then walk `L`'s operations in reverse topological
//! order and call each one's transpose rule with the cotangents of its outputs;
//! contributions to the same key are summed with `Op::add()` operations in role
//! `Linearized { [true, true] }`.
//!
//! The walk reads `L` with one value per key, so its environment is a column over values:
//! - `L` itself when no two of its local values share a key ([`Graph::distinct_keys`]:
//!   one scan when keys increase with local ids, as in every graph `linearize` builds);
//! - otherwise `L`'s materialization ([`try_materialize_fragment`]), where materialize's
//!   CSE made the copies of an operation one operation, and the primal values `L` reads
//!   are external values. There is no other deduplication here.
//!
//! Hard cases, handled here and tested:
//! - two requested outputs that are the same value (same key): their seeds add up;
//! - structurally identical operations emitted twice into `L` (same key, two local
//!   copies): one operation of the materialization, transposed once, so consumers of
//!   either copy contribute exactly once;
//! - operations that receive no cotangent (or compute primal constants) are skipped, so
//!   no work is emitted for unreachable cotangent flow.
//!
//! Seed keys are `k.tangent_of(p)` for fresh pass ids `p` (one per seed) and `k` the key of
//! `L`'s first input, so two transposes of one function never share seeds.
//! Complexity: `O(linear nodes)` plus the rules' output; no table unless `L` has keys out
//! of local order, and no copy of `L` unless two of its values share a key.
//!
//! [`Graph::distinct_keys`]: computegraph::Graph::distinct_keys

use std::sync::Arc;

use computegraph::stop::Poll;
use computegraph::{
    DistinctKeys, GraphBuilder, Id, LocalValueId, MaterializedGraph, MaterializedOperation, OperationRole,
    OperationView, ValueId, ValueKey, ValueRef, try_materialize_fragment,
};

use crate::emit;
use crate::error::{ADRuleError, ADRuleResult, RuleKind};
use crate::linearized::LinearizedGraph;
use crate::primitive::fresh_pass_ids;
use crate::primitive::{ADKey, DiffPassId, Primitive, PrimitiveValue, unknown_operand};

/// Transposes a linear graph (default rule context).
///
/// # Panics
/// On a missing or failing transpose rule; see [`try_linear_transpose`].
pub fn linear_transpose<Op: Primitive>(linear: &LinearizedGraph<Op>) -> LinearizedGraph<Op> {
    try_linear_transpose(linear).unwrap_or_else(|e| panic!("{e}"))
}

/// Fallible [`linear_transpose`]: a missing or failing transpose rule, or a rule that
/// breaks linearity, is an [`ADRuleError`](crate::ADRuleError).
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{resolve, GraphBuilder, OperationRole::Primary, ValueRef::Local};
/// use scalar::{ScalarKey, ScalarOp};
/// use tidu::{try_linear_transpose, try_linearize, DerivativeProgram};
///
/// // f(x) = x·x: the transpose maps a seed c to 2x·c.
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// let y = b.add_operation(ScalarOp::Mul, vec![Local(x), Local(x)], Primary)[0];
/// let f = Arc::new(b.build());
/// let lin = try_linearize(&resolve(vec![f.clone()]), &[f.global_key(y)], &[ScalarKey::var(0)]).unwrap();
/// let t = try_linear_transpose(&lin).unwrap();
/// let seed = t.tangent_inputs()[0].0.clone();
/// let out = DerivativeProgram::new(&t).unwrap().eval(&mut (), |k| Some(if *k == seed { &0.5 } else { &3.0 })).unwrap();
/// assert_eq!(out, vec![Some(3.0)]);
/// ```
pub fn try_linear_transpose<Op: Primitive>(linear: &LinearizedGraph<Op>) -> ADRuleResult<LinearizedGraph<Op>> {
    try_linear_transpose_with(linear, &mut Op::ADContext::default())
}

/// Fallible [`linear_transpose`] with the caller's rule context.
pub fn try_linear_transpose_with<Op: Primitive>(
    linear: &LinearizedGraph<Op>,
    ctx: &mut Op::ADContext,
) -> ADRuleResult<LinearizedGraph<Op>> {
    transpose_in_passes(linear, ctx, fresh_pass_ids(seed_pass_count(linear)))
}

/// [`try_linear_transpose_with`] in the passes `first_pass ..= first_pass + seeds` (the
/// transposed graph's pass, then one per seed), which the caller reserved with
/// [`seed_pass_count`]. The eager tape reuses them when it rebuilds a rule, so the rebuilt
/// graph has the same keys as before and the interner does not grow.
pub(crate) fn transpose_in_passes<Op: Primitive>(
    linear: &LinearizedGraph<Op>,
    ctx: &mut Op::ADContext,
    first_pass: DiffPassId,
) -> ADRuleResult<LinearizedGraph<Op>> {
    let lg = &linear.graph;
    let seeds = linear.tangent_outputs.iter().flatten();
    match lg.distinct_keys() {
        Some(walked) => walk(linear, ctx, first_pass, &walked, seeds.copied().collect()),
        None => {
            let keys: Vec<ValueKey<Op>> = seeds.map(|&v| lg.global_key(v)).collect();
            let m = Materialized { graph: try_materialize_fragment(lg, &keys)?, linear };
            walk(linear, ctx, first_pass, &m, m.graph.outputs().to_vec())
        }
    }
}

/// The transpose proper, over `L` read with one value per key (`walked`); `seed_values`
/// are the walked values of `L`'s non-zero outputs, in order.
fn walk<Op: Primitive, W: OneValuePerKey<Op>>(
    linear: &LinearizedGraph<Op>,
    ctx: &mut Op::ADContext,
    first_pass: DiffPassId,
    walked: &W,
    seed_values: Vec<W::Value>,
) -> ADRuleResult<LinearizedGraph<Op>> {
    let lg = &linear.graph;
    let mut builder = GraphBuilder::with_interner(Arc::clone(lg.interner()));
    // The transpose of a linear map has about as many operations as the map.
    builder.reserve(lg.value_count(), lg.operation_count(), 2 * lg.operation_count());
    builder.try_add_parent(Arc::clone(lg))?;
    // Cotangents by walked value (one per global key).
    let mut env: Vec<Option<LocalValueId>> = vec![None; walked.value_count()];

    // 1. Seeds: one cotangent input per non-zero output.
    let base = lg.input_keys().first().cloned();
    let mut seeds = Vec::with_capacity(seed_values.len());
    for (j, out) in seed_values.into_iter().enumerate() {
        let base = base.as_ref().ok_or_else(|| ADRuleError::NonLinear {
            operation: format!("output {:?}", walked.key(out)),
            message: "the linear graph has an output but no input".into(),
        })?;
        let key = base.tangent_of(first_pass + 1 + j as u64);
        let seed = builder.try_add_input(key.clone())?;
        seeds.push((key, seed));
        accumulate::<Op>(&mut builder, &mut env[out.index()], seed)?;
    }

    // 2. Reverse topological walk.
    let mut ct_out: Vec<Option<LocalValueId>> = Vec::new();
    let mut inputs: Vec<PrimitiveValue<Op>> = Vec::new();
    // The walked value of each active operand, `None` for the others.
    let mut active_values: Vec<Option<W::Value>> = Vec::new();
    let mut result: Vec<Option<LocalValueId>> = Vec::new();
    let mut poll = Poll::new();
    for op in walked.operations_rev() {
        poll.tick()?;
        ct_out.clear();
        let mut any = false;
        // A loop, not `extend` over a mapped iterator (which compiled to an out-of-line
        // call per operation).
        for v in op.outputs() {
            let ct = env[v.index()];
            any |= ct.is_some();
            ct_out.push(ct);
        }
        if !any {
            continue;
        }
        let role = op.role();
        let mask: &[bool] = match role {
            OperationRole::Linearized { active_mask } => active_mask,
            OperationRole::Primary => &[],
        };
        if !mask.iter().any(|&a| a) {
            continue; // a primal constant: no cotangent flows through it
        }
        inputs.clear();
        active_values.clear();
        for (i, operand) in op.operands().enumerate() {
            let active = mask.get(i) == Some(&true);
            let (input, value) = match operand {
                Operand::Value(v) if active && !Op::TRANSPOSE_READS_ACTIVE_INPUTS => (unknown_operand(), Some(v)),
                Operand::Value(v) => (PrimitiveValue::External(walked.key(v)), active.then_some(v)),
                Operand::External(k) => (PrimitiveValue::External(k), None),
            };
            inputs.push(input);
            active_values.push(value);
        }
        let operation = op.operation();
        result.clear();
        operation.try_linear_transpose_rule_into(&mut builder, &ct_out, &inputs, role, ctx, &mut result)?;
        if result.len() != inputs.len() {
            return Err(ADRuleError::RuleContract {
                operation: format!("{operation:?}"),
                rule: RuleKind::Transpose,
                message: format!("returned {} cotangents for {} inputs", result.len(), inputs.len()),
            });
        }
        let bound = builder.value_count();
        // An active operand is a value of `L` (the graph is linear, checked when built), so
        // `None` in `active_values` is an inactive operand, whose cotangent is dropped.
        for (&ct, &input) in result.iter().zip(&active_values) {
            let (Some(ct), Some(input)) = (ct, input) else { continue };
            if ct.index() >= bound {
                return Err(ADRuleError::RuleContract {
                    operation: format!("{operation:?}"),
                    rule: RuleKind::Transpose,
                    message: format!("returned {ct:?}, which the builder did not produce"),
                });
            }
            accumulate::<Op>(&mut builder, &mut env[input.index()], ct)?;
        }
    }

    // 3. Outputs: the cotangent of each input of the linear map (none for an input the
    // walked graph does not hold: no output reaches it).
    let tangent_outputs: Vec<Option<LocalValueId>> =
        linear.tangent_inputs.iter().map(|&(_, v)| env[walked.input(v)?.index()]).collect();
    builder.try_set_outputs(tangent_outputs.iter().flatten().copied().collect())?;
    let transposed = LinearizedGraph::from_parts(Arc::new(builder.try_build()?), seeds, tangent_outputs, first_pass);
    transposed.check_linear()?;
    Ok(transposed)
}

/// A linear graph read with one value per key: what the transpose walks.
trait OneValuePerKey<Op: Primitive> {
    /// Its value ids, dense from zero.
    type Value: Id;
    /// One of its operations.
    type Operation<'a>: LinearOperation<Op, Value = Self::Value>
    where
        Self: 'a;
    /// Number of values.
    fn value_count(&self) -> usize;
    /// The operations in reverse topological order.
    fn operations_rev(&self) -> impl Iterator<Item = Self::Operation<'_>>;
    /// The global key of a value.
    fn key(&self, v: Self::Value) -> ValueKey<Op>;
    /// The value of input `v` of `L`, if the walked graph holds it.
    fn input(&self, v: LocalValueId) -> Option<Self::Value>;
}

/// One operation of a [`OneValuePerKey`] graph.
trait LinearOperation<Op: Primitive> {
    /// The graph's value ids.
    type Value: Id;
    /// The operation.
    fn operation(&self) -> &Op;
    /// Its role.
    fn role(&self) -> &OperationRole;
    /// Its outputs.
    fn outputs(&self) -> impl Iterator<Item = Self::Value>;
    /// Its operands, in order.
    fn operands(&self) -> impl Iterator<Item = Operand<Self::Value, Op>>;
}

/// An operand: a value of the walked graph, or a key it reads from outside.
enum Operand<V, Op: Primitive> {
    Value(V),
    External(ValueKey<Op>),
}

/// `L` itself: no two of its local values share a key.
impl<Op: Primitive> OneValuePerKey<Op> for DistinctKeys<'_, Op> {
    type Value = LocalValueId;
    type Operation<'a>
        = OperationView<'a, Op>
    where
        Self: 'a;
    #[inline]
    fn value_count(&self) -> usize {
        (**self).value_count()
    }
    #[inline]
    fn operations_rev(&self) -> impl Iterator<Item = OperationView<'_, Op>> {
        self.operations().rev()
    }
    #[inline]
    fn key(&self, v: LocalValueId) -> ValueKey<Op> {
        self.global_key(v)
    }
    #[inline]
    fn input(&self, v: LocalValueId) -> Option<LocalValueId> {
        Some(v)
    }
}

impl<Op: Primitive> LinearOperation<Op> for OperationView<'_, Op> {
    type Value = LocalValueId;
    #[inline]
    fn operation(&self) -> &Op {
        OperationView::operation(self)
    }
    #[inline]
    fn role(&self) -> &OperationRole {
        OperationView::role(self)
    }
    #[inline]
    fn outputs(&self) -> impl Iterator<Item = LocalValueId> {
        OperationView::outputs(self)
    }
    #[inline]
    fn operands(&self) -> impl Iterator<Item = Operand<LocalValueId, Op>> {
        self.inputs().map(|r| match r {
            ValueRef::Local(v) => Operand::Value(v),
            ValueRef::External(k) => Operand::External(k),
        })
    }
}

/// `L`'s materialization: the copies of one key are one value.
struct Materialized<'l, Op: Primitive> {
    graph: MaterializedGraph<Op>,
    linear: &'l LinearizedGraph<Op>,
}

impl<Op: Primitive> OneValuePerKey<Op> for Materialized<'_, Op> {
    type Value = ValueId;
    type Operation<'a>
        = MaterializedOperation<'a, Op>
    where
        Self: 'a;
    #[inline]
    fn value_count(&self) -> usize {
        self.graph.value_count()
    }
    #[inline]
    fn operations_rev(&self) -> impl Iterator<Item = MaterializedOperation<'_, Op>> {
        self.graph.operations().rev()
    }
    #[inline]
    fn key(&self, v: ValueId) -> ValueKey<Op> {
        self.graph.value_key(v)
    }
    #[inline]
    fn input(&self, v: LocalValueId) -> Option<ValueId> {
        // The materialization's inputs are in key order.
        let key = self.linear.graph.key_id(v);
        let inputs = self.graph.inputs();
        inputs.binary_search_by_key(&key, |&i| self.graph.key_id(i)).ok().map(|at| inputs[at])
    }
}

impl<Op: Primitive> LinearOperation<Op> for MaterializedOperation<'_, Op> {
    type Value = ValueId;
    #[inline]
    fn operation(&self) -> &Op {
        MaterializedOperation::operation(self)
    }
    #[inline]
    fn role(&self) -> &OperationRole {
        MaterializedOperation::role(self)
    }
    #[inline]
    fn outputs(&self) -> impl Iterator<Item = ValueId> {
        MaterializedOperation::outputs(self)
    }
    #[inline]
    fn operands(&self) -> impl Iterator<Item = Operand<ValueId, Op>> {
        self.inputs().iter().map(|&v| Operand::Value(v))
    }
}

/// Adds `ct` to the cotangent `slot`, emitting an addition ([`emit::try_add`]) where one
/// already exists.
#[inline]
fn accumulate<Op: Primitive>(
    builder: &mut GraphBuilder<Op>,
    slot: &mut Option<LocalValueId>,
    ct: LocalValueId,
) -> ADRuleResult<()> {
    *slot = Some(match *slot {
        None => ct,
        Some(existing) => emit::try_add(builder, existing, ct)?,
    });
    Ok(())
}

/// How many pass ids a transpose of `linear` uses: its own, and one per seed.
pub(crate) fn seed_pass_count<Op: Primitive>(linear: &LinearizedGraph<Op>) -> u64 {
    linear.tangent_outputs.iter().flatten().count() as u64 + 1
}
