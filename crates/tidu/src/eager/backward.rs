//! [`try_backward`]: reverse mode over the tape.
//!
//! Input: an output's key and trace, a seed, an executor. Output: the cotangent of every
//! leaf (input without a trace) that requires a gradient and that a non-zero cotangent
//! reaches, by user-visible key.
//!
//! Algorithm: collect the nodes reachable from the output's trace through inputs that
//! require a gradient (iterative, each node once), order them by descending recording
//! number (a reverse topological order), then for each node take the cotangents of its
//! outputs out of the accumulator; skip it if none has one; otherwise fetch its backward
//! rule (cached by structure and masks), gather the primal values the rule reads (calling
//! `execute_forward` only when inputs and retained values do not cover them), run the
//! transposed graph and add each input cotangent into the accumulator under the input's
//! key. A node's cotangents are complete when it is reached, because every consumer of its
//! outputs was recorded after it. Complexity: `O(reachable nodes + edges)` plus the
//! executor's work; rule construction only on a cache miss.

use std::collections::HashMap;
use std::sync::{Arc, PoisonError};

use computegraph::ValueKey;
use rustc_hash::{FxHashMap, FxHashSet};

use super::recorder::Node;
use super::rules::{Rule, Source, build_rule, structure_hash};
use super::{BackwardExecutor, EagerError, PrimitiveGraph, Trace};
use crate::error::{ADRuleError, ADRuleResult};
use crate::primitive::Primitive;

/// Runs reverse mode from `output_key` (an output of `output_trace`'s node) with cotangent
/// `seed`, and returns the cotangents of the leaves that require a gradient, by key.
///
/// A leaf that no cotangent reaches (or only a symbolic zero) is absent from the result.
/// With `output_trace == None` the output is itself a leaf, and the result is the seed.
///
/// # Errors
/// A missing AD rule ([`ADRuleError::MissingRule`], naming the operation), an
/// `output_key` that is not an output of the trace, a primal value the transposed graph
/// needs that neither the tape nor `execute_forward` has, the executor's own errors (a
/// seed it rejects, say), or a wrong number of cotangents from it. Nothing is left half
/// done: the tape is unchanged and can be used again.
///
/// The example drives it through `scalar::eager::Tape`, whose `backward` is a call to
/// `try_backward` with the value's key and trace; see also [`Recorder`](crate::eager::Recorder).
///
/// ```
/// use scalar::{eager::{ScalarExecutor, Tape}, ScalarOp};
///
/// // y = sin(x)·w; dy/dx = cos(x)·w, dy/dw = sin(x)
/// let mut tape = Tape::new();
/// let (x, w) = (tape.leaf(0.5, true).unwrap(), tape.leaf(3.0, true).unwrap());
/// let s = tape.apply(ScalarOp::Sin, &[&x]).unwrap().remove(0);
/// let y = tape.apply(ScalarOp::Mul, &[&s, &w]).unwrap().remove(0);
/// let grads = tape.backward(&y, 1.0, &mut ScalarExecutor::new()).unwrap();
/// assert_eq!(*grads[&x.key], 0.5f64.cos() * 3.0);
/// assert_eq!(*grads[&w.key], 0.5f64.sin());
/// ```
pub fn try_backward<Op: Primitive, E: BackwardExecutor<Op> + ?Sized>(
    output_key: &ValueKey<Op>,
    output_trace: Option<&Trace<Op>>,
    seed: Arc<Op::Operand>,
    executor: &mut E,
    ctx: &mut Op::ADContext,
) -> ADRuleResult<HashMap<ValueKey<Op>, Arc<Op::Operand>>> {
    let Some(root) = output_trace else {
        return Ok(HashMap::from([(output_key.clone(), seed)]));
    };
    if !root.0.outputs.contains(output_key) {
        return Err(ADRuleError::Eager(EagerError::UnknownOutput { key: format!("{output_key:?}") }));
    }
    let nodes = reachable(&root.0);

    let mut cotangent: FxHashMap<ValueKey<Op>, Arc<Op::Operand>> = FxHashMap::default();
    cotangent.insert(output_key.clone(), seed);
    let mut scratch = Scratch::default();
    for node in nodes {
        step(node, &mut cotangent, &mut scratch, executor, ctx)?;
    }
    Ok(cotangent.into_iter().collect())
}

/// The nodes reachable from `root` through inputs that require a gradient, by descending
/// recording number.
fn reachable<Op: Primitive>(root: &Node<Op>) -> Vec<&Node<Op>> {
    let mut nodes = vec![root];
    let mut seen: FxHashSet<u64> = FxHashSet::default();
    seen.insert(root.seq);
    let mut next = 0;
    while let Some(&node) = nodes.get(next) {
        next += 1;
        for input in node.inputs.iter().filter(|i| i.requires_grad) {
            if let Some(trace) = &input.trace
                && seen.insert(trace.0.seq)
            {
                nodes.push(&trace.0);
            }
        }
    }
    nodes.sort_unstable_by_key(|n| std::cmp::Reverse(n.seq));
    nodes
}

/// Buffers reused across nodes.
struct Scratch<T> {
    slot_cotangents: Vec<Option<T>>,
    seeded: Vec<bool>,
    wrt: Vec<bool>,
}

impl<T> Default for Scratch<T> {
    fn default() -> Self {
        Scratch { slot_cotangents: Vec::new(), seeded: Vec::new(), wrt: Vec::new() }
    }
}

/// Propagates the cotangents of one node's outputs to its inputs.
fn step<Op: Primitive, E: BackwardExecutor<Op> + ?Sized>(
    node: &Node<Op>,
    cotangent: &mut FxHashMap<ValueKey<Op>, Arc<Op::Operand>>,
    scratch: &mut Scratch<Arc<Op::Operand>>,
    executor: &mut E,
    ctx: &mut Op::ADContext,
) -> ADRuleResult<()> {
    let slots = &mut scratch.slot_cotangents;
    slots.clear();
    slots.extend(node.outputs.iter().map(|k| cotangent.remove(k)));
    if slots.iter().all(Option::is_none) {
        return Ok(());
    }
    scratch.seeded.clear();
    scratch.seeded.extend(slots.iter().map(Option::is_some));
    scratch.wrt.clear();
    scratch.wrt.extend(node.inputs.iter().map(|i| i.requires_grad));
    let rule = rule_for(node, &scratch.seeded, &scratch.wrt, ctx)?;
    if rule.seed_slots.is_empty() || rule.wrt_inputs.is_empty() {
        return Ok(()); // the seeded outputs do not depend on any input that requires a gradient
    }

    let external = primal_data(node, &rule, executor)?;
    let seeds: Vec<Option<Arc<Op::Operand>>> = rule.seed_slots.iter().map(|&s| slots[s].clone()).collect();
    let result = executor.run_transposed_linear(&rule.transposed, &seeds, &external, ctx)?;
    if result.len() != rule.wrt_inputs.len() {
        return Err(ADRuleError::Eager(EagerError::CotangentCount {
            expected: rule.wrt_inputs.len(),
            got: result.len(),
        }));
    }
    for (c, &i) in result.into_iter().zip(rule.wrt_inputs.iter()) {
        let Some(c) = c else { continue };
        let key = &node.inputs[i].key;
        match cotangent.get_mut(key) {
            Some(acc) => *acc = executor.add_operands(acc, &c),
            None => {
                cotangent.insert(key.clone(), c);
            }
        }
    }
    Ok(())
}

/// The node's backward rule, from its recorder's cache or built now.
fn rule_for<Op: Primitive>(
    node: &Node<Op>,
    seeded: &[bool],
    wrt: &[bool],
    ctx: &mut Op::ADContext,
) -> ADRuleResult<Arc<Rule<Op>>> {
    let hash = structure_hash(&node.graph, seeded, wrt);
    let shared = &node.shared;
    let passes = {
        let mut rules = shared.rules.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(rule) = rules.get(hash, &node.graph, seeded, wrt) {
            return Ok(rule);
        }
        rules.passes(hash)
    };
    // Built outside the lock: rules run user code and may take a while.
    let keys = shared.canonical_keys.read().unwrap_or_else(PoisonError::into_inner).clone();
    let (rule, passes) = build_rule(&node.graph, seeded, wrt, &keys, ctx, passes)?;
    let rule = Arc::new(rule);
    let mut rules = shared.rules.lock().unwrap_or_else(PoisonError::into_inner);
    // Another thread may have built the same rule meanwhile; keep the first.
    if let Some(existing) = rules.get(hash, &node.graph, seeded, wrt) {
        return Ok(existing);
    }
    rules.insert(hash, Arc::clone(&rule), passes);
    Ok(rule)
}

/// The primal values the rule's transposed graph reads, by canonical key: from the node's
/// inputs and retained values when they cover them, otherwise with `execute_forward`.
fn primal_data<Op: Primitive, E: BackwardExecutor<Op> + ?Sized>(
    node: &Node<Op>,
    rule: &Rule<Op>,
    executor: &mut E,
) -> ADRuleResult<HashMap<ValueKey<Op>, Arc<Op::Operand>>> {
    let mut external = HashMap::with_capacity(rule.required.len());
    let mut complete = true;
    for (key, source) in rule.required.iter().zip(rule.required_source.iter()) {
        let data = match *source {
            Source::Input(i) => Some(&node.inputs[i].data),
            Source::Value(v) => node.retained.iter().find(|(l, _)| *l == v).map(|(_, d)| d),
            Source::Derived => None,
        };
        match data {
            Some(d) => {
                external.insert(key.clone(), Arc::clone(d));
            }
            None => complete = false,
        }
    }
    if complete {
        return Ok(external);
    }

    let mut initial = HashMap::with_capacity(node.inputs.len() + node.retained.len());
    for (input, v) in node.inputs.iter().zip(node.graph.inputs()) {
        initial.insert(rule.keys[v.index()].clone(), Arc::clone(&input.data));
    }
    for (v, d) in node.retained.iter() {
        initial.insert(rule.keys[v.index()].clone(), Arc::clone(d));
    }
    let graph = PrimitiveGraph { graph: &rule.canonical, view: &rule.view, required: &rule.required };
    let produced = executor.execute_forward(graph, &initial);
    for key in rule.required.iter() {
        if !external.contains_key(key) {
            let d = produced
                .get(key)
                .or_else(|| initial.get(key))
                .ok_or_else(|| ADRuleError::Eager(EagerError::MissingPrimal { key: describe(&rule.view, key) }))?;
            external.insert(key.clone(), Arc::clone(d));
        }
    }
    Ok(external)
}

/// A key for messages: its definition when it is an operation output (`ok9 = cos(x4)`).
/// Never interns anything.
fn describe<Op: Primitive>(view: &computegraph::ResolvedView<Op>, key: &ValueKey<Op>) -> String {
    match key {
        ValueKey::Derived { .. } => match view.interner().intern_key(key) {
            Ok(id) => view.interner().describe(id),
            Err(_) => format!("{key:?}"),
        },
        ValueKey::Input(k) => format!("{k:?}"),
    }
}
