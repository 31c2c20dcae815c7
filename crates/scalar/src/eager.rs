//! The eager reference: a [`BackwardExecutor`](tidu::eager::BackwardExecutor) for scalars
//! and a minimal eager frontend.
//!
//! - [`ScalarExecutor`] replays recorded graphs with compiled programs (cached by
//!   structure) and runs transposed graphs through the engine too
//!   ([`tidu::LinearizedGraph::eval_standalone_with_each`]: each compiled on its own, once
//!   per cached rule).
//! - [`Tape`] and [`Var`]: a frontend that evaluates each operation at once and records it
//!   on a [`Recorder`], one reused graph per operation kind; composites record a whole
//!   graph as one tape node. Used by tests and benches to check eager gradients against
//!   graph mode.
//!
//! These three live in the `tape` submodule (`eager/tape.rs`); this file adds
//! [`Tape::run_spec`] and [`SpecTape`].
//! - [`SpecTape`]: a frontend written the way `docs/SPEC.md` §6 describes one, which records every
//!   operation as a fresh one-operation graph built with `GraphBuilder::new()` (the
//!   process-wide interner) over fresh input keys; or, for comparison, one such graph per
//!   operation kind, reused. Used by the scale test and the eager benches (issue 23).

use std::collections::HashMap;
use std::sync::Arc;

use computegraph::{Graph, GraphBuilder, OperationRole, ValueKey, ValueRef};
use rustc_hash::FxHashMap;
use smallvec::SmallVec;
use tidu::eager::{EagerError, Recorder};
use tidu::{ADRuleError, ADRuleResult};

use crate::spec::GraphSpec;
use crate::{ScalarKey, ScalarOp};

mod tape;

use tape::{FIRST_USER_KEY, backward_from, new_recorder, next_user_key};
pub use tape::{Gradients, ScalarExecutor, Tape, Var};

impl Tape {
    /// Runs `spec` one operation at a time on `leaves` (one per spec input); returns every
    /// value of the spec, inputs first, so `values[spec.outputs[i]]` is output `i`.
    pub fn run_spec(&mut self, spec: &GraphSpec, leaves: &[Var]) -> ADRuleResult<Vec<Var>> {
        if leaves.len() != spec.inputs as usize {
            return Err(ADRuleError::Eager(EagerError::Arity {
                what: "inputs",
                expected: spec.inputs as usize,
                got: leaves.len(),
            }));
        }
        let mut values = Vec::with_capacity(spec.value_count());
        values.extend_from_slice(leaves);
        let mut at = 0;
        for &op in &spec.ops {
            let n = computegraph::GraphOperation::input_count(&op);
            let args: Vec<&Var> = spec
                .args
                .get(at..at + n)
                .into_iter()
                .flatten()
                .map(|&a| values.get(a as usize))
                .collect::<Option<_>>()
                .filter(|args: &Vec<&Var>| args.len() == n)
                .ok_or_else(|| {
                    ADRuleError::Graph(computegraph::GraphError::Invalid {
                        phase: "graph spec",
                        message: format!("node {op:?} at argument {at}: missing or later operands"),
                    })
                })?;
            at += n;
            let outs = self.apply(op, &args)?;
            values.extend(outs);
        }
        Ok(values)
    }
}

/// How [`SpecTape`] gets the graph it records for an operation.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum GraphPerOp {
    /// A fresh one-operation graph per invocation, its inputs keyed by fresh keys: what a
    /// frontend following `docs/SPEC.md` §6 to the letter does.
    Fresh,
    /// One graph per operation kind, built on first use and reused.
    Reused,
}

/// An eager frontend written as `docs/SPEC.md` §6 describes one: each operation is run at once and
/// recorded as a one-operation graph built with [`GraphBuilder::new`], so on the
/// process-wide interner, whose inputs get fresh keys ([`GraphPerOp::Fresh`]); or with one
/// graph per operation kind ([`GraphPerOp::Reused`]). Every value is retained, as a
/// frontend that keeps its outputs does.
///
/// ```
/// use scalar::{eager::{GraphPerOp, ScalarExecutor, SpecTape}, ScalarOp};
///
/// let mut tape = SpecTape::new(GraphPerOp::Fresh);
/// let x = tape.leaf(0.5, true).unwrap();
/// let y = tape.apply(ScalarOp::Exp, &[&x]).unwrap();
/// let g = tape.backward(&y, 1.0, &mut ScalarExecutor::new()).unwrap();
/// assert_eq!(*g[&x.key], 0.5f64.exp());
/// ```
pub struct SpecTape {
    recorder: Recorder<ScalarOp>,
    mode: GraphPerOp,
    templates: FxHashMap<ScalarOp, Arc<Graph<ScalarOp>>>,
    next_key: u32,
}

impl SpecTape {
    /// A tape recording graphs as `mode` says.
    pub fn new(mode: GraphPerOp) -> Self {
        SpecTape { recorder: new_recorder(), mode, templates: FxHashMap::default(), next_key: FIRST_USER_KEY }
    }

    /// The recorder.
    pub fn recorder(&self) -> &Recorder<ScalarOp> {
        &self.recorder
    }

    /// A key never handed out before: user-visible keys and graph input keys alike.
    fn fresh(&mut self) -> ADRuleResult<ScalarKey> {
        next_user_key(&mut self.next_key)
    }

    /// A leaf value.
    pub fn leaf(&mut self, value: f64, requires_grad: bool) -> ADRuleResult<Var> {
        Ok(Var { key: ValueKey::Input(self.fresh()?), trace: None, requires_grad, value: Arc::new(value) })
    }

    /// The one-operation graph of `op`: fresh, or the kind's reused one.
    fn graph(&mut self, op: ScalarOp) -> ADRuleResult<Arc<Graph<ScalarOp>>> {
        if self.mode == GraphPerOp::Reused
            && let Some(g) = self.templates.get(&op)
        {
            return Ok(Arc::clone(g));
        }
        let mut b = GraphBuilder::<ScalarOp>::new();
        let mut args = Vec::with_capacity(computegraph::GraphOperation::input_count(&op));
        for _ in 0..computegraph::GraphOperation::input_count(&op) {
            let key = self.fresh()?;
            args.push(ValueRef::Local(b.try_add_input(key)?));
        }
        let outs = b.try_add_operation(op, args, OperationRole::Primary)?;
        b.try_set_outputs(outs.to_vec())?;
        let g = Arc::new(b.try_build()?);
        if self.mode == GraphPerOp::Reused {
            self.templates.insert(op, Arc::clone(&g));
        }
        Ok(g)
    }

    /// Applies a one-output operation of one or more operands now and records it.
    pub fn apply(&mut self, op: ScalarOp, args: &[&Var]) -> ADRuleResult<Var> {
        let n = computegraph::GraphOperation::input_count(&op);
        if args.len() != n || n == 0 || computegraph::GraphOperation::output_count(&op) != 1 {
            return Err(ADRuleError::Graph(computegraph::GraphError::ArityMismatch {
                operation: format!("{op:?} (SpecTape records one-output operations of operands)"),
                expected: n,
                found: args.len(),
            }));
        }
        let values: SmallVec<[f64; 2]> = args.iter().map(|a| *a.value).collect();
        let value = Arc::new(op.apply(&values)[0]);
        let graph = self.graph(op)?;
        let key = ValueKey::Input(self.fresh()?);
        let retained = HashMap::from([(key.clone(), Arc::clone(&value))]);
        let inputs = args.iter().map(|a| a.input()).collect();
        let out = self.recorder.record_graph(&graph, inputs, vec![key], retained)?.remove(0);
        Ok(Var { key: out.key, trace: out.trace, requires_grad: out.requires_grad, value })
    }

    /// Reverse mode from `y` with cotangent `seed`: the gradients of the leaves.
    pub fn backward(&self, y: &Var, seed: f64, executor: &mut ScalarExecutor) -> ADRuleResult<Gradients> {
        backward_from(y, seed, executor)
    }
}
