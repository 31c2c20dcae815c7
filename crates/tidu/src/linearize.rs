//! `linearize`: the JVP transform (like `jax.linearize`).
//!
//! Input: a resolved view, the primal outputs to differentiate and the input keys to
//! differentiate with respect to. Output: a [`LinearizedGraph`] whose inputs are one
//! tangent per `wrt` key (key `wrt.tangent_of(pass)`) and whose outputs are the tangents of
//! the requested outputs.
//!
//! Algorithm: materialize the reachable primal graph (one topological order, CSE), then
//! walk it once in that order, keeping the tangent of each primal value (`None` is a
//! symbolic zero). An operation whose tangents are all `None` is skipped: no rule call, no
//! emitted work. Otherwise its JVP rule emits tangent operations into a fresh builder,
//! referencing primal values by key (`External`). Complexity: `O(primal nodes)` plus the
//! rules' output.
//!
//! Output invariants: the linear graph lists the view's graphs as parents; it passes
//! [`LinearizedGraph::check_linear`] (checked in debug builds and by the `try_` forms' tests).

use std::sync::Arc;

use computegraph::stop::Poll;
use computegraph::{GraphBuilder, LocalValueId, ResolvedView, ValueKey, try_materialize_merge};
use rustc_hash::FxHashMap;

use crate::error::{ADRuleError, ADRuleResult, RuleKind};
use crate::linearized::LinearizedGraph;
use crate::primitive::{ADKey, DiffPassId, Primitive, fresh_pass_id};

/// Linearizes `outputs` of `view` with respect to the inputs `wrt` (a fresh pass id and a
/// default rule context).
///
/// # Panics
/// On a missing rule or an unresolved key; see [`try_linearize`].
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{resolve, GraphBuilder, OperationRole::Primary, ValueRef::Local};
/// use scalar::{ScalarOp, ScalarKey};
///
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// let y = b.add_operation(ScalarOp::Sin, vec![Local(x)], Primary)[0];
/// let f = Arc::new(b.build());
/// let lin = tidu::linearize(&resolve(vec![f.clone()]), &[f.global_key(y)], &[ScalarKey::var(0)]);
/// assert_eq!(lin.tangent_inputs().len(), 1);
/// assert!(lin.tangent_outputs()[0].is_some());
/// ```
pub fn linearize<Op: Primitive>(
    view: &ResolvedView<Op>,
    outputs: &[ValueKey<Op>],
    wrt: &[Op::InputKey],
) -> LinearizedGraph<Op> {
    try_linearize(view, outputs, wrt).unwrap_or_else(|e| panic!("{e}"))
}

/// Fallible [`linearize`]: a missing rule, a rule that breaks its contract or an
/// unresolved key is an [`ADRuleError`](crate::ADRuleError).
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{resolve, GraphBuilder, GraphError, OperationRole::Primary, ValueRef::Local};
/// use scalar::{ScalarKey, ScalarOp};
/// use tidu::{try_linearize, ADRuleError};
///
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// let y = b.add_operation(ScalarOp::Exp, vec![Local(x)], Primary)[0];
/// let f = Arc::new(b.build());
/// let key = f.global_key(y);
///
/// assert!(try_linearize(&resolve(vec![f]), &[key.clone()], &[ScalarKey::var(0)]).is_ok());
/// // A view that does not hold the graph defining `key`:
/// let empty = resolve(vec![Arc::new(GraphBuilder::<ScalarOp>::new().build())]);
/// let err = try_linearize(&empty, &[key], &[ScalarKey::var(0)]).unwrap_err();
/// assert!(matches!(err, ADRuleError::Graph(GraphError::UnresolvedKey { .. })), "{err}");
/// ```
pub fn try_linearize<Op: Primitive>(
    view: &ResolvedView<Op>,
    outputs: &[ValueKey<Op>],
    wrt: &[Op::InputKey],
) -> ADRuleResult<LinearizedGraph<Op>> {
    try_linearize_with(view, outputs, wrt, &mut Op::ADContext::default(), fresh_pass_id())
}

/// [`linearize`] with the caller's rule context and pass id.
///
/// The pass id decides the tangent keys (`ADKey::tangent_of`), so linearizing the same
/// graph twice with one pass id gives the same keys (a deterministic cache key), and with
/// two ids two independent sets of tangents.
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{resolve, GraphBuilder, OperationRole::Primary, ValueRef::Local};
/// use scalar::{ScalarKey, ScalarOp};
/// use tidu::{fresh_pass_id, linearize_with};
///
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// let y = b.add_operation(ScalarOp::Cos, vec![Local(x)], Primary)[0];
/// let f = Arc::new(b.build());
/// let view = resolve(vec![f.clone()]);
/// let lin = |pass| linearize_with(&view, &[f.global_key(y)], &[ScalarKey::var(0)], &mut (), pass);
///
/// let pass = fresh_pass_id();
/// assert_eq!(lin(pass).tangent_output_keys(), lin(pass).tangent_output_keys());
/// assert_ne!(lin(pass).tangent_output_keys(), lin(fresh_pass_id()).tangent_output_keys());
/// ```
///
/// # Panics
/// On a missing rule or an unresolved key; see [`try_linearize_with`].
pub fn linearize_with<Op: Primitive>(
    view: &ResolvedView<Op>,
    outputs: &[ValueKey<Op>],
    wrt: &[Op::InputKey],
    ctx: &mut Op::ADContext,
    pass: DiffPassId,
) -> LinearizedGraph<Op> {
    try_linearize_with(view, outputs, wrt, ctx, pass).unwrap_or_else(|e| panic!("{e}"))
}

/// Fallible [`linearize_with`].
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{resolve, GraphBuilder, OperationRole::Primary, ValueRef::Local};
/// use scalar::{ScalarKey, ScalarOp};
/// use tidu::{fresh_pass_id, try_linearize_with};
///
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// let y = b.add_operation(ScalarOp::Neg, vec![Local(x)], Primary)[0];
/// let f = Arc::new(b.build());
/// let pass = fresh_pass_id();
/// let lin = try_linearize_with(&resolve(vec![f.clone()]), &[f.global_key(y)], &[ScalarKey::var(0)], &mut (), pass)
///     .unwrap();
/// use tidu::ADKey;
/// assert_eq!(lin.tangent_inputs()[0].0, ScalarKey::var(0).tangent_of(pass)); // x's tangent in this pass
/// ```
pub fn try_linearize_with<Op: Primitive>(
    view: &ResolvedView<Op>,
    outputs: &[ValueKey<Op>],
    wrt: &[Op::InputKey],
    ctx: &mut Op::ADContext,
    pass: DiffPassId,
) -> ADRuleResult<LinearizedGraph<Op>> {
    let primal = try_materialize_merge(view, outputs)?;
    let mut builder = GraphBuilder::with_interner(Arc::clone(view.interner()));
    // JVP rules emit about two operations per primal operation.
    let n = primal.operation_count();
    builder.reserve(2 * n + wrt.len(), 2 * n, 4 * n);
    for g in view.graphs() {
        builder.try_add_parent(Arc::clone(g))?;
    }
    let mut tangent: Vec<Option<LocalValueId>> = vec![None; primal.value_count()];
    let mut tangent_inputs = Vec::with_capacity(wrt.len());
    let input_of: FxHashMap<&Op::InputKey, computegraph::ValueId> =
        primal.input_keys().iter().zip(primal.inputs().iter().copied()).collect();
    for key in wrt {
        let tkey = key.tangent_of(pass);
        let local = builder.try_add_input(tkey.clone())?;
        tangent_inputs.push((tkey, local));
        // Seed the primal input with this key, if the outputs depend on it.
        if let Some(v) = input_of.get(key) {
            tangent[v.index()] = Some(local);
        }
    }

    let mut primal_inputs: Vec<ValueKey<Op>> = Vec::new();
    let mut primal_outputs: Vec<ValueKey<Op>> = Vec::new();
    let mut tangent_in: Vec<Option<LocalValueId>> = Vec::new();
    let mut result: Vec<Option<LocalValueId>> = Vec::new();
    let mut poll = Poll::new();
    for op in primal.operations() {
        poll.tick()?;
        tangent_in.clear();
        tangent_in.extend(op.inputs().iter().map(|v| tangent[v.index()]));
        if tangent_in.iter().all(Option::is_none) {
            continue; // symbolic zero in, symbolic zero out: no rule call
        }
        primal_inputs.clear();
        primal_inputs.extend(op.inputs().iter().map(|&v| primal.value_key(v)));
        primal_outputs.clear();
        primal_outputs.extend(op.outputs().map(|v| primal.value_key(v)));
        let operation = op.operation();
        result.clear();
        operation.try_jvp_rule_into(&mut builder, &primal_inputs, &primal_outputs, &tangent_in, ctx, &mut result)?;
        if result.len() != primal_outputs.len() {
            return Err(ADRuleError::RuleContract {
                operation: format!("{operation:?}"),
                rule: RuleKind::Jvp,
                message: format!("returned {} tangents for {} outputs", result.len(), primal_outputs.len()),
            });
        }
        let bound = builder.value_count();
        if let Some(bad) = result.iter().flatten().find(|v| v.index() >= bound) {
            return Err(ADRuleError::RuleContract {
                operation: format!("{operation:?}"),
                rule: RuleKind::Jvp,
                message: format!("returned {bad:?}, which the builder did not produce"),
            });
        }
        for (v, &t) in op.outputs().zip(&result) {
            tangent[v.index()] = t;
        }
    }

    let tangent_outputs: Vec<Option<LocalValueId>> = primal.outputs().iter().map(|v| tangent[v.index()]).collect();
    builder.try_set_outputs(tangent_outputs.iter().flatten().copied().collect())?;
    let lin = LinearizedGraph::from_parts(Arc::new(builder.try_build()?), tangent_inputs, tangent_outputs, pass);
    lin.check_linear()?;
    Ok(lin)
}
