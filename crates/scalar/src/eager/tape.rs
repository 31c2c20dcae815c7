//! The reference set's eager frontend and executor: [`Tape`], [`Var`] and
//! [`ScalarExecutor`], the core of `scalar::eager`.
//!
//! `eager.rs` re-exports them and adds what needs the rest of the crate ([`GraphSpec`]
//! replay, `SpecTape`); tidu's eager doc examples use them through `scalar::eager`.
//!
//! [`GraphSpec`]: crate::spec::GraphSpec
//!
//! - [`ScalarExecutor`] replays recorded graphs with compiled programs (cached by
//!   structure) and runs transposed graphs with the engine too
//!   ([`LinearizedGraph::eval_standalone_with_each`]: compiled on its own once per cached rule).
//! - [`Tape`] and [`Var`]: a frontend that evaluates each operation at once and records it
//!   on a [`Recorder`], one reused graph per operation kind; composites record a whole
//!   graph as one tape node.

use std::collections::HashMap;
use std::sync::Arc;

use computegraph::{
    CompileCache, EvalState, Graph, GraphBuilder, KeyInterner, OperationRole, StructuralKey, ValueKey, ValueRef,
    try_resolve,
};
use rustc_hash::FxHashMap;
use smallvec::SmallVec;
use tidu::eager::{BackwardExecutor, EagerError, EagerInput, PrimitiveGraph, Recorder, Trace, try_backward};
use tidu::{ADRuleError, ADRuleResult, LinearizedGraph};

use crate::{ScalarKey, ScalarOp};

/// Cotangents by user-visible key, as [`try_backward`] returns them.
pub type Gradients = HashMap<ValueKey<ScalarOp>, Arc<f64>>;

/// The reference [`BackwardExecutor`] for [`ScalarOp`].
pub struct ScalarExecutor {
    programs: CompileCache<ScalarOp, StructuralKey>,
    state: EvalState<f64>,
    forward_calls: u64,
}

impl Default for ScalarExecutor {
    fn default() -> Self {
        Self::new()
    }
}

impl ScalarExecutor {
    /// An executor caching up to 1024 replay programs.
    pub fn new() -> Self {
        ScalarExecutor { programs: CompileCache::new(1024), state: EvalState::new(), forward_calls: 0 }
    }

    /// How many times `execute_forward` ran (a replay of a recorded graph).
    pub fn forward_calls(&self) -> u64 {
        self.forward_calls
    }

    /// Compiled replay programs held.
    pub fn cached_programs(&self) -> usize {
        self.programs.stats().entries
    }
}

impl BackwardExecutor<ScalarOp> for ScalarExecutor {
    fn execute_forward(
        &mut self,
        graph: PrimitiveGraph<'_, ScalarOp>,
        initial_data: &HashMap<ValueKey<ScalarOp>, Arc<f64>>,
    ) -> HashMap<ValueKey<ScalarOp>, Arc<f64>> {
        self.forward_calls += 1;
        let mut produced = HashMap::new();
        // A replay that cannot run returns nothing; try_backward names the missing value.
        let Ok(program) = self.programs.get_or_compile(graph.view(), graph.required()) else { return produced };
        let mut key = ValueKey::Input(ScalarKey::Var(0));
        let Ok(values) = program.try_eval_by_key(&mut (), |k| {
            key = ValueKey::Input(k.clone());
            initial_data.get(&key).map(|d| &**d)
        }) else {
            return produced;
        };
        for (k, v) in graph.required().iter().zip(values) {
            produced.insert(k.clone(), Arc::new(v));
        }
        produced
    }

    fn run_transposed_linear(
        &mut self,
        linear: &LinearizedGraph<ScalarOp>,
        cotangent_out: &[Option<Arc<f64>>],
        external_data: &HashMap<ValueKey<ScalarOp>, Arc<f64>>,
        _ctx: &mut (),
    ) -> ADRuleResult<Vec<Option<Arc<f64>>>> {
        if cotangent_out.len() != linear.tangent_inputs().len() {
            return Err(EagerError::executor(format!(
                "{} seeds for a map with {} inputs",
                cotangent_out.len(),
                linear.tangent_inputs().len()
            )));
        }
        // The transposed graph is compiled once, on its first run, and kept with the rule.
        let seeds: SmallVec<[&f64; 4]> = cotangent_out.iter().map(|c| c.as_deref().unwrap_or(&0.0)).collect();
        let mut out = Vec::with_capacity(linear.tangent_outputs().len());
        let primal = |k: &ValueKey<ScalarOp>| external_data.get(k).map(|d| &**d);
        linear.eval_standalone_with_each(&mut self.state, &mut (), &seeds, primal, |x| out.push(x.map(Arc::new)))?;
        Ok(out)
    }

    fn add_operands(&mut self, a: &Arc<f64>, b: &Arc<f64>) -> Arc<f64> {
        Arc::new(**a + **b)
    }
}

/// A value of the eager frontend.
#[derive(Clone, Debug)]
pub struct Var {
    /// Its user-visible key (`ValueKey::Input` of a frontend counter: never interned).
    pub key: ValueKey<ScalarOp>,
    /// The tape node that produced it (`None` for leaves and untracked values).
    pub trace: Option<Trace<ScalarOp>>,
    /// Whether gradients flow through it.
    pub requires_grad: bool,
    /// Its value.
    pub value: Arc<f64>,
}

impl Var {
    pub(super) fn input(&self) -> EagerInput<ScalarOp> {
        EagerInput {
            key: self.key.clone(),
            trace: self.trace.clone(),
            requires_grad: self.requires_grad,
            data: Arc::clone(&self.value),
        }
    }
}

/// The frontend's keys are `FIRST_USER_KEY..LAST_USER_KEY`; the recorder's canonical keys
/// count down from `u32::MAX` (one per input of the widest recorded graph).
pub(super) const FIRST_USER_KEY: u32 = 1 << 30;
const LAST_USER_KEY: u32 = u32::MAX - (1 << 20);

/// A frontend's next key from its counter `next` (which starts at [`FIRST_USER_KEY`]), or
/// an error once it has handed out all of them (about 3·10^9). Keys are never reused: a
/// reused key would merge two values' cotangents.
pub(super) fn next_user_key(next: &mut u32) -> ADRuleResult<ScalarKey> {
    let key = *next;
    if key >= LAST_USER_KEY {
        return Err(ADRuleError::Graph(computegraph::GraphError::IdSpaceExhausted { space: "eager frontend key" }));
    }
    *next += 1;
    Ok(ScalarKey::Var(key))
}

/// A recorder whose canonical keys count down from `u32::MAX`, below which the frontends'
/// keys stay.
pub(super) fn new_recorder() -> Recorder<ScalarOp> {
    let mut next_canonical = u32::MAX;
    Recorder::new(move || {
        next_canonical -= 1;
        ScalarKey::Var(next_canonical + 1)
    })
}

/// Reverse mode from `y` with cotangent `seed` (both frontends' `backward`).
pub(super) fn backward_from(y: &Var, seed: f64, executor: &mut ScalarExecutor) -> ADRuleResult<Gradients> {
    try_backward(&y.key, y.trace.as_ref(), Arc::new(seed), executor, &mut ())
}

/// A minimal eager frontend over [`ScalarOp`]: evaluates at once, records on a tape.
///
/// ```
/// use scalar::{eager::{Tape, ScalarExecutor}, ScalarOp};
///
/// let mut tape = Tape::new();
/// let x = tape.leaf(0.5, true).unwrap();
/// let s = tape.apply(ScalarOp::Sin, &[&x]).unwrap().remove(0);
/// let y = tape.apply(ScalarOp::Mul, &[&s, &x]).unwrap().remove(0); // x sin x
/// let g = tape.backward(&y, 1.0, &mut ScalarExecutor::new()).unwrap();
/// assert!((*g[&x.key] - (0.5f64.sin() + 0.5 * 0.5f64.cos())).abs() < 1e-15);
/// ```
pub struct Tape {
    recorder: Recorder<ScalarOp>,
    interner: Arc<KeyInterner<ScalarOp>>,
    /// One graph per operation kind, reused by every invocation.
    templates: FxHashMap<ScalarOp, Arc<Graph<ScalarOp>>>,
    /// Forward programs of composite graphs.
    programs: CompileCache<ScalarOp, StructuralKey>,
    next_key: u32,
}

impl Default for Tape {
    fn default() -> Self {
        Self::new()
    }
}

impl Tape {
    /// A tape on a fresh interner.
    pub fn new() -> Self {
        Tape {
            recorder: new_recorder(),
            interner: KeyInterner::new(),
            templates: FxHashMap::default(),
            programs: CompileCache::new(1024),
            next_key: FIRST_USER_KEY,
        }
    }

    /// The interner of the tape's graphs (for graphs passed to [`Tape::apply_graph`]).
    pub fn interner(&self) -> &Arc<KeyInterner<ScalarOp>> {
        &self.interner
    }

    /// The recorder.
    pub fn recorder(&self) -> &Recorder<ScalarOp> {
        &self.recorder
    }

    fn fresh_key(&mut self) -> ADRuleResult<ValueKey<ScalarOp>> {
        next_user_key(&mut self.next_key).map(ValueKey::Input)
    }

    /// A leaf value; an error once the tape has handed out all of its keys (about 3·10^9).
    pub fn leaf(&mut self, value: f64, requires_grad: bool) -> ADRuleResult<Var> {
        Ok(Var { key: self.fresh_key()?, trace: None, requires_grad, value: Arc::new(value) })
    }

    /// Applies one operation now and records it as a one-operation graph.
    pub fn apply(&mut self, op: ScalarOp, args: &[&Var]) -> ADRuleResult<Vec<Var>> {
        let values: Vec<f64> = args.iter().map(|a| *a.value).collect();
        if values.len() != computegraph::GraphOperation::input_count(&op) {
            return Err(ADRuleError::Graph(computegraph::GraphError::ArityMismatch {
                operation: format!("{op:?}"),
                expected: computegraph::GraphOperation::input_count(&op),
                found: values.len(),
            }));
        }
        let results = op.apply(&values);
        if args.is_empty() {
            // A constant: nothing to differentiate, nothing to record.
            return results.into_iter().map(|x| self.leaf(x, false)).collect();
        }
        let graph = self.template(op)?;
        self.record(&graph, args, results, true)
    }

    /// Evaluates a self-contained graph (built on [`Tape::interner`]) now and records it as
    /// one tape node. With `retain_outputs == false` nothing but the inputs is kept, so the
    /// backward pass replays the graph.
    pub fn apply_graph(
        &mut self,
        graph: &Arc<Graph<ScalarOp>>,
        args: &[&Var],
        retain_outputs: bool,
    ) -> ADRuleResult<Vec<Var>> {
        if args.len() != graph.inputs().len() {
            return Err(ADRuleError::Eager(EagerError::Arity {
                what: "inputs",
                expected: graph.inputs().len(),
                got: args.len(),
            }));
        }
        let view = try_resolve(vec![Arc::clone(graph)])?;
        let outputs: Vec<ValueKey<ScalarOp>> = graph.outputs().iter().map(|&v| graph.global_key(v)).collect();
        let program = self.programs.get_or_compile(&view, &outputs)?;
        let by_key: FxHashMap<&ScalarKey, f64> =
            graph.input_keys().iter().zip(args).map(|(k, a)| (k, *a.value)).collect();
        let results = program.try_eval_by_key(&mut (), |k| by_key.get(k))?;
        self.record(graph, args, results, retain_outputs)
    }

    fn record(
        &mut self,
        graph: &Arc<Graph<ScalarOp>>,
        args: &[&Var],
        results: Vec<f64>,
        retain: bool,
    ) -> ADRuleResult<Vec<Var>> {
        let keys = results.iter().map(|_| self.fresh_key()).collect::<ADRuleResult<Vec<_>>>()?;
        let values: Vec<Arc<f64>> = results.into_iter().map(Arc::new).collect();
        let retained = if retain { keys.iter().cloned().zip(values.iter().cloned()).collect() } else { HashMap::new() };
        let inputs = args.iter().map(|a| a.input()).collect();
        let outputs = self.recorder.record_graph(graph, inputs, keys, retained)?;
        Ok(outputs
            .into_iter()
            .zip(values)
            .map(|(o, value)| Var { key: o.key, trace: o.trace, requires_grad: o.requires_grad, value })
            .collect())
    }

    fn template(&mut self, op: ScalarOp) -> ADRuleResult<Arc<Graph<ScalarOp>>> {
        if let Some(g) = self.templates.get(&op) {
            return Ok(Arc::clone(g));
        }
        let mut b = GraphBuilder::with_interner(Arc::clone(&self.interner));
        let args: Vec<ValueRef<ScalarOp>> = (0..computegraph::GraphOperation::input_count(&op))
            .map(|i| ValueRef::Local(b.add_input(ScalarKey::Var(i as u32))))
            .collect();
        let outs = b.try_add_operation(op, args, OperationRole::Primary)?;
        b.try_set_outputs(outs.to_vec())?;
        let g = Arc::new(b.try_build()?);
        // Constants never get here (no inputs), so the kinds are few.
        self.templates.insert(op, Arc::clone(&g));
        Ok(g)
    }

    /// Reverse mode from `y` with cotangent `seed`: the gradients of the leaves.
    pub fn backward(&self, y: &Var, seed: f64, executor: &mut ScalarExecutor) -> ADRuleResult<Gradients> {
        backward_from(y, seed, executor)
    }
}
