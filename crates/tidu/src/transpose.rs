//! `linear_transpose`: reverse a linear graph (the VJP transform).
//!
//! Input: a [`LinearizedGraph`] (a linear map `L`). Output: a [`LinearizedGraph`] for `Lᵀ`:
//! one cotangent seed input per non-zero output of `L`, one output per input of `L`
//! (`None` where no cotangent reaches it).
//!
//! Algorithm (seed 000 §II): seed the cotangent environment, keyed by the **global key**
//! of each linear value, then walk `L`'s operations in reverse topological order and call
//! each one's transpose rule with the cotangents of its outputs; contributions to the same
//! key are summed with `Op::add()` operations in role `Linearized { [true, true] }`.
//!
//! Hard cases, handled here and tested:
//! - two requested outputs that are the same value (same key): their seeds add up;
//! - structurally identical operations emitted twice into `L` (same key, two local
//!   copies): transposed once, at the first copy, so consumers of either copy contribute
//!   exactly once (the environment is keyed by global key);
//! - operations that receive no cotangent (or compute primal constants) are skipped, so
//!   no work is emitted for unreachable cotangent flow.
//!
//! Seed keys are `k.tangent_of(p)` for fresh pass ids `p` (one per seed) and `k` the key of
//! `L`'s first input, so two transposes of one function never share seeds.
//! Complexity: `O(linear nodes)` plus the rules' output.

use std::sync::{Arc, LazyLock};

use computegraph::{GraphBuilder, KeyId, KeyMap, LocalValueId, OperationRole, ValueRef};

use crate::error::{ADRuleError, ADRuleResult, RuleKind};
use crate::linearize::fresh_pass_ids;
use crate::linearized::LinearizedGraph;
use crate::primitive::{ADKey, DiffPassId, Primitive, PrimitiveBuilder, PrimitiveValue};

/// Transposes a linear graph (default rule context).
///
/// # Panics
/// On a missing or failing transpose rule; see [`try_linear_transpose`].
pub fn linear_transpose<Op: Primitive>(linear: &LinearizedGraph<Op>) -> LinearizedGraph<Op> {
    try_linear_transpose(linear).unwrap_or_else(|e| panic!("{e}"))
}

/// Fallible [`linear_transpose`].
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
    // Cotangents by global key, dense over the linear graph's (mostly fresh) key range.
    let key_range = {
        let keys = (0..lg.value_count()).map(|v| lg.key_id(LocalValueId::new(v)).index());
        let (lo, hi) = keys.fold((usize::MAX, 0), |(lo, hi), k| (lo.min(k), hi.max(k + 1)));
        lo.min(hi)..hi
    };
    let mut env: KeyMap<LocalValueId> = KeyMap::with_range(key_range.clone(), lg.value_count());

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
        accumulate::<Op>(&mut builder, &mut env, lg.key_id(*out), seed)?;
    }

    // 2. Which local operations are the first copy of their key (by first output key).
    let mut seen: KeyMap<()> = KeyMap::with_range(key_range, lg.operation_count());
    let first_copy: Vec<bool> =
        lg.operations().map(|op| op.outputs().next().is_none_or(|v| seen.insert_if_absent(lg.key_id(v), ()))).collect();

    // 3. Reverse topological walk.
    let mut ct_out: Vec<Option<LocalValueId>> = Vec::new();
    let mut inputs: Vec<PrimitiveValue<Op>> = Vec::new();
    let mut result: Vec<Option<LocalValueId>> = Vec::new();
    for op in lg.operations().rev() {
        if !first_copy[op.id().index()] {
            continue;
        }
        ct_out.clear();
        ct_out.extend(op.outputs().map(|v| env.get(lg.key_id(v))));
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
        inputs.extend(op.inputs().map(|r| match r {
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
        for ((&ct, key), &active) in result.iter().zip(op.input_key_ids()).zip(mask) {
            let (Some(ct), true) = (ct, active) else { continue };
            if ct.index() >= bound {
                return Err(ADRuleError::RuleContract {
                    operation: format!("{operation:?}"),
                    rule: RuleKind::Transpose,
                    message: format!("returned {ct:?}, which the builder did not produce"),
                });
            }
            accumulate::<Op>(&mut builder, &mut env, key, ct)?;
        }
    }

    // 4. Outputs: the cotangent of each input of the linear map.
    let tangent_outputs: Vec<Option<LocalValueId>> =
        linear.tangent_inputs.iter().map(|(_, v)| env.get(lg.key_id(*v))).collect();
    builder.try_set_outputs(tangent_outputs.iter().flatten().copied().collect())?;
    let transposed = LinearizedGraph {
        graph: Arc::new(builder.try_build()?),
        tangent_inputs: seeds,
        tangent_outputs,
        pass: first_pass,
    };
    transposed.check_linear()?;
    Ok(transposed)
}

/// Adds `ct` to the cotangent of `key`, emitting an `add()` where one already exists.
fn accumulate<Op: Primitive>(
    builder: &mut GraphBuilder<Op>,
    env: &mut KeyMap<LocalValueId>,
    key: KeyId,
    ct: LocalValueId,
) -> ADRuleResult<()> {
    match env.get(key) {
        None => {
            env.insert(key, ct);
        }
        Some(existing) => {
            static BOTH_ACTIVE: LazyLock<OperationRole> =
                LazyLock::new(|| OperationRole::Linearized { active_mask: vec![true, true] });
            let sum = builder.try_add_primitive_from(
                Op::add(),
                &[PrimitiveValue::Local(existing), PrimitiveValue::Local(ct)],
                &BOTH_ACTIVE,
            )?;
            env.insert(key, sum);
        }
    }
    Ok(())
}

/// How many pass ids a transpose of `linear` uses: its own, and one per seed.
pub(crate) fn seed_pass_count<Op: Primitive>(linear: &LinearizedGraph<Op>) -> u64 {
    linear.tangent_outputs.iter().flatten().count() as u64 + 1
}
