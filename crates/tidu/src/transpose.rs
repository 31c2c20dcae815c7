//! `linear_transpose`: reverse a linear graph (the VJP transform).
//!
//! Input: a [`LinearizedGraph`] (a linear map `L`). Output: a [`LinearizedGraph`] for `Lᵀ`:
//! one cotangent seed input per non-zero output of `L`, one output per input of `L`
//! (`None` where no cotangent reaches it).
//!
//! Algorithm (`docs/SPEC.md` §4.2 and §4.3): materialize `L` alone
//! ([`try_materialize_fragment`], as `linearize` materializes the primal graph), seed the
//! cotangent environment, keyed by the **global key** of each linear value, then walk the
//! materialized operations in reverse topological order and call each one's transpose rule
//! with the cotangents of its outputs; contributions to the same key are summed with
//! `Op::add()` operations in role `Linearized { [true, true] }`. The environment is a column
//! over the materialized values, which are one per key: materialize's CSE is the only one.
//! The primal values `L` reads by key are its external values; rules read every fixed
//! operand by key. A graph `linearize` built has keys increasing with its local ids, and
//! takes the materialization's local-order path: in local order, without key tables.
//!
//! Hard cases, handled here and tested:
//! - two requested outputs that are the same value (same key): their seeds add up;
//! - structurally identical operations emitted twice into `L` (same key, two local
//!   copies): one materialized operation, transposed once, so consumers of either copy
//!   contribute exactly once;
//! - operations that receive no cotangent, and primal computations (`Primary` operations
//!   of fixed operands, such as a rule's `cos x`, possibly with the primal's own key) are
//!   skipped: no work is emitted for them, and the transposed graph reads their values by
//!   key.
//!
//! Output invariants: the transposed graph is a fragment whose parent is `L`; it passes
//! [`LinearizedGraph::check_linear`] (checked on every call).
//! Seed keys are `k.tangent_of(p)` for fresh pass ids `p` (one per seed) and `k` the key of
//! `L`'s first input, so two transposes of one function never share seeds.
//! Complexity: `O(linear nodes)` plus the rules' output; no hashing unless `L` has keys
//! out of local order.

use std::sync::Arc;

use computegraph::{GraphBuilder, LocalValueId, OperationRole, ValueKey, try_materialize_fragment};

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
/// # #[path = "../doc/scalar.rs"] mod scalar;
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
    // L materialized alone: one value per key (copies of an operation are one operation),
    // in a topological order; the primal values it reads are external values.
    let out_keys: Vec<ValueKey<Op>> = linear.tangent_outputs.iter().flatten().map(|&v| lg.global_key(v)).collect();
    let m = try_materialize_fragment(lg, &out_keys)?;
    let mut builder = GraphBuilder::with_interner(Arc::clone(lg.interner()));
    // The transpose of a linear map has about as many operations as the map.
    builder.reserve(m.value_count(), m.operation_count(), 2 * m.operation_count());
    builder.try_add_parent(Arc::clone(lg))?;
    // Cotangents by materialized value (one per global key).
    let mut env: Vec<Option<LocalValueId>> = vec![None; m.value_count()];

    // 1. Seeds: one cotangent input per non-zero output.
    let base = lg.input_keys().first().cloned();
    let mut seeds = Vec::with_capacity(out_keys.len());
    for (j, &out) in m.outputs().iter().enumerate() {
        let base = base.as_ref().ok_or_else(|| ADRuleError::NonLinear {
            operation: format!("output {:?}", linear.tangent_outputs.iter().flatten().nth(j)),
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
    let mut result: Vec<Option<LocalValueId>> = Vec::new();
    for op in m.operations().rev() {
        ct_out.clear();
        let mut any = false;
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
        let operands = op.inputs();
        inputs.clear();
        for (&v, &active) in operands.iter().zip(mask) {
            inputs.push(if active && !Op::TRANSPOSE_READS_ACTIVE_INPUTS {
                unknown_operand()
            } else {
                PrimitiveValue::External(m.value_key(v))
            });
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
        for (i, &active) in mask.iter().enumerate() {
            let (Some(ct), true) = (result[i], active) else { continue };
            if ct.index() >= bound {
                return Err(ADRuleError::RuleContract {
                    operation: format!("{operation:?}"),
                    rule: RuleKind::Transpose,
                    message: format!("returned {ct:?}, which the builder did not produce"),
                });
            }
            accumulate::<Op>(&mut builder, &mut env[operands[i].index()], ct)?;
        }
    }

    // 3. Outputs: the cotangent of each input of the linear map (inputs are in key order;
    // one the outputs do not reach has none).
    let tangent_outputs: Vec<Option<LocalValueId>> = (linear.tangent_inputs.iter())
        .map(|&(_, v)| {
            let key = lg.key_id(v);
            let at = m.inputs().binary_search_by_key(&key, |&i| m.key_id(i)).ok()?;
            env[m.inputs()[at].index()]
        })
        .collect();
    builder.try_set_outputs(tangent_outputs.iter().flatten().copied().collect())?;
    let transposed = LinearizedGraph::from_parts(Arc::new(builder.try_build()?), seeds, tangent_outputs, first_pass);
    transposed.check_linear()?;
    Ok(transposed)
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
