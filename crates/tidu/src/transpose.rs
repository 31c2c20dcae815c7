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
//! The environment is a column over `L`'s local values: a key's cotangent lives at the
//! first local value with that key (its canonical value). Keys of a graph built in one go
//! usually increase with local ids, and then every value is canonical; otherwise a key map
//! over `L`'s key range finds the first copies once.
//!
//! Hard cases, handled here and tested:
//! - two requested outputs that are the same value (same key): their seeds add up;
//! - structurally identical operations emitted twice into `L` (same key, two local
//!   copies): transposed once, at the first copy, so consumers of either copy contribute
//!   exactly once (both copies have the same canonical value);
//! - operations that receive no cotangent (or compute primal constants) are skipped, so
//!   no work is emitted for unreachable cotangent flow.
//!
//! Seed keys are `k.tangent_of(p)` for fresh pass ids `p` (one per seed) and `k` the key of
//! `L`'s first input, so two transposes of one function never share seeds.
//! Complexity: `O(linear nodes)` plus the rules' output; no hashing unless `L` has keys
//! out of local order.

use std::sync::Arc;

use computegraph::{Graph, GraphBuilder, GraphOperation, IdVec, LocalValueId, OperationRole, ValueRef};

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
    let mut builder = GraphBuilder::with_interner(Arc::clone(lg.interner()));
    // The transpose of a linear map has about as many operations as the map.
    builder.reserve(lg.value_count(), lg.operation_count(), 2 * lg.operation_count());
    builder.try_add_parent(Arc::clone(lg))?;
    let canon = Canonical::new(lg);
    // Cotangents by canonical local value (one per global key).
    let mut env: Vec<Option<LocalValueId>> = vec![None; lg.value_count()];

    // 1. Seeds: one cotangent input per non-zero output.
    let n_seeds = linear.tangent_outputs.iter().flatten().count();
    let base = lg.input_keys().first().cloned();
    let mut seeds = Vec::with_capacity(n_seeds);
    for (j, out) in linear.tangent_outputs.iter().flatten().enumerate() {
        let base = base.as_ref().ok_or_else(|| ADRuleError::NonLinear {
            operation: format!("output {out:?}"),
            message: "the linear graph has an output but no input".into(),
        })?;
        let key = base.tangent_of(first_pass + 1 + j as u64);
        let seed = builder.try_add_input(key.clone())?;
        seeds.push((key, seed));
        accumulate::<Op>(&mut builder, &mut env[canon.of(*out).index()], seed)?;
    }

    // 2. Reverse topological walk, over the first copy of each key only.
    let mut ct_out: Vec<Option<LocalValueId>> = Vec::new();
    let mut inputs: Vec<PrimitiveValue<Op>> = Vec::new();
    let mut result: Vec<Option<LocalValueId>> = Vec::new();
    for op in lg.operations().rev() {
        ct_out.clear();
        let mut outputs = op.outputs();
        match outputs.next() {
            // Consumers of every copy of this operation's outputs contributed to the
            // cotangents of its first copy, which is transposed in its place.
            Some(first) if canon.of(first) != first => continue,
            Some(first) => {
                // A loop, not `extend` over a chained iterator (which compiled to an
                // out-of-line call per operation).
                ct_out.push(env[first.index()]);
                for v in outputs {
                    ct_out.push(env[v.index()]);
                }
            }
            None => continue,
        }
        if ct_out.iter().all(Option::is_none) {
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
        inputs.extend(op.inputs().enumerate().map(|(i, r)| match r {
            ValueRef::Local(_) if !Op::TRANSPOSE_READS_ACTIVE_INPUTS && mask.get(i) == Some(&true) => unknown_operand(),
            ValueRef::Local(v) => PrimitiveValue::External(lg.global_key(v)),
            ValueRef::External(k) => PrimitiveValue::External(k),
        }));
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
        for ((&ct, input), &active) in result.iter().zip(op.local_inputs()).zip(mask) {
            let (Some(ct), true) = (ct, active) else { continue };
            if ct.index() >= bound {
                return Err(ADRuleError::RuleContract {
                    operation: format!("{operation:?}"),
                    rule: RuleKind::Transpose,
                    message: format!("returned {ct:?}, which the builder did not produce"),
                });
            }
            // An active operand is a local value (the graph is linear, checked when built).
            let input = input.expect("an active operand of a linear graph is local");
            accumulate::<Op>(&mut builder, &mut env[canon.of(input).index()], ct)?;
        }
    }

    // 3. Outputs: the cotangent of each input of the linear map.
    let tangent_outputs: Vec<Option<LocalValueId>> =
        linear.tangent_inputs.iter().map(|(_, v)| env[canon.of(*v).index()]).collect();
    builder.try_set_outputs(tangent_outputs.iter().flatten().copied().collect())?;
    let transposed = LinearizedGraph::from_parts(Arc::new(builder.try_build()?), seeds, tangent_outputs, first_pass);
    transposed.check_linear()?;
    Ok(transposed)
}

/// The first local value of the linear graph with each value's global key: cotangents are
/// kept once per key, at that value ([`Graph::first_values_by_key`]; `None` is the
/// identity, the usual case of a graph built in one go).
struct Canonical {
    first: Option<IdVec<LocalValueId, LocalValueId>>,
}

impl Canonical {
    fn new<Op: GraphOperation>(lg: &Graph<Op>) -> Self {
        Canonical { first: lg.first_values_by_key() }
    }

    #[inline]
    fn of(&self, v: LocalValueId) -> LocalValueId {
        match &self.first {
            None => v,
            Some(first) => first[v],
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doc_scalar::{ScalarKey, ScalarOp};
    use computegraph::KeyInterner;

    fn neg(b: &mut GraphBuilder<ScalarOp>, v: LocalValueId) -> LocalValueId {
        b.add_operation(ScalarOp::Neg, vec![ValueRef::Local(v)], OperationRole::all_active(1))[0]
    }

    #[test]
    fn canonical_values_are_the_first_local_value_of_each_key() {
        let interner = KeyInterner::new();
        // Fresh keys increase with local ids: the identity, without a table.
        let mut b = GraphBuilder::with_interner(interner.clone());
        let t = b.add_input(ScalarKey::var(0));
        neg(&mut b, t);
        let g = b.build();
        assert!(Canonical::new(&g).first.is_none());
        // Keys out of local order (the second neg's key existed already), one repeated.
        let mut b = GraphBuilder::with_interner(interner);
        let t = b.add_input(ScalarKey::var(0));
        let e = b.add_operation(ScalarOp::Exp, vec![ValueRef::Local(t)], OperationRole::all_active(1))[0];
        let a2 = neg(&mut b, t);
        let a3 = neg(&mut b, t);
        let g = b.build();
        assert!(g.key_id(e) > g.key_id(a2) && g.key_id(a2) == g.key_id(a3));
        let c = Canonical::new(&g);
        assert!(c.first.is_some());
        assert_eq!([t, e, a2, a3].map(|v| c.of(v)), [t, e, a2, a2]);
    }
}
