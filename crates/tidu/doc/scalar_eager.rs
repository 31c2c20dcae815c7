//! The reference set of `scalar.rs` with a small eager frontend, for the doc examples of
//! `tidu::eager`. They declare this file as their `scalar` module on a hidden line
//! (`#[path = "../../doc/scalar_eager.rs"] mod scalar;` from `src/eager/`), so they read
//! like programs using the `scalar` crate, without a dev-dependency on it.
//!
//! [`eager`] is a stand-in for `scalar::eager`: the same names (`Tape`, `Var`,
//! `ScalarExecutor`) and the same results for the methods the examples call, in fewer
//! lines and without the real one's caches (the executor compiles each replay afresh). The
//! `scalar` crate's `ad` tests run it beside the real one (`doc_sets.rs`).

#[path = "scalar.rs"]
mod set;

pub use set::{ScalarKey, ScalarOp};

/// The eager frontend and executor of the doc examples (a stand-in for `scalar::eager`).
pub mod eager {
    use std::collections::HashMap;
    use std::sync::Arc;

    use computegraph::{
        EvaluableGraphOperation, Graph, GraphBuilder, GraphError, GraphOperation, OperationRole, Outputs, ValueKey,
        ValueRef, try_compile, try_materialize_merge,
    };
    use tidu::eager::{BackwardExecutor, EagerError, EagerInput, PrimitiveGraph, Recorder, Trace, try_backward};
    use tidu::{ADRuleResult, LinearizedGraph};

    use super::{ScalarKey, ScalarOp};

    /// Cotangents by user-visible key, as `try_backward` returns them.
    pub type Gradients = HashMap<ValueKey<ScalarOp>, Arc<f64>>;

    /// A `BackwardExecutor` for `ScalarOp`: replays by compiling, runs transposed graphs
    /// one operation at a time.
    #[derive(Default)]
    pub struct ScalarExecutor;

    impl ScalarExecutor {
        /// An executor.
        pub fn new() -> Self {
            ScalarExecutor
        }
    }

    impl BackwardExecutor<ScalarOp> for ScalarExecutor {
        fn execute_forward(
            &mut self,
            graph: PrimitiveGraph<'_, ScalarOp>,
            initial_data: &HashMap<ValueKey<ScalarOp>, Arc<f64>>,
        ) -> HashMap<ValueKey<ScalarOp>, Arc<f64>> {
            let values =
                try_materialize_merge(graph.view(), graph.required()).and_then(|m| try_compile(&m)).and_then(|p| {
                    p.try_eval_by_key(&mut (), |k| initial_data.get(&ValueKey::Input(k.clone())).map(|d| &**d))
                });
            // A replay that cannot run produces nothing; `try_backward` names what is missing.
            let values = values.unwrap_or_default();
            graph.required().iter().cloned().zip(values.into_iter().map(Arc::new)).collect()
        }

        fn run_transposed_linear(
            &mut self,
            linear: &LinearizedGraph<ScalarOp>,
            cotangent_out: &[Option<Arc<f64>>],
            external_data: &HashMap<ValueKey<ScalarOp>, Arc<f64>>,
            _: &mut (),
        ) -> ADRuleResult<Vec<Option<Arc<f64>>>> {
            if cotangent_out.len() != linear.tangent_inputs().len() {
                return Err(EagerError::executor("one seed per input of the transposed map"));
            }
            let g = linear.as_graph();
            let mut value = vec![0.0; g.value_count()];
            for ((_, v), c) in linear.tangent_inputs().iter().zip(cotangent_out) {
                value[v.index()] = c.as_deref().copied().unwrap_or(0.0);
            }
            let mut out = Vec::new();
            for op in g.operations() {
                let mut args = Vec::new();
                for r in op.inputs() {
                    args.push(match r {
                        ValueRef::Local(v) => value[v.index()],
                        ValueRef::External(k) => {
                            **external_data.get(&k).ok_or_else(|| EagerError::executor(format!("no data for {k:?}")))?
                        }
                    });
                }
                let args: Vec<&f64> = args.iter().collect();
                out.clear();
                op.operation().eval_into(&mut (), &args, &mut Outputs::vec(&mut out));
                for (v, x) in op.outputs().zip(&out) {
                    value[v.index()] = *x;
                }
            }
            Ok(linear.tangent_outputs().iter().map(|o| o.map(|v| Arc::new(value[v.index()]))).collect())
        }

        fn add_operands(&mut self, a: &Arc<f64>, b: &Arc<f64>) -> Arc<f64> {
            Arc::new(**a + **b)
        }
    }

    /// A value of the frontend.
    #[derive(Clone, Debug)]
    pub struct Var {
        /// Its user-visible key.
        pub key: ValueKey<ScalarOp>,
        /// The tape node that produced it (`None` for leaves and untracked values).
        pub trace: Option<Trace<ScalarOp>>,
        /// Whether gradients flow through it.
        pub requires_grad: bool,
        /// Its value.
        pub value: Arc<f64>,
    }

    /// An eager frontend: runs each operation at once and records it on a [`Recorder`] as
    /// a one-operation graph (one per operation kind, reused).
    pub struct Tape {
        recorder: Recorder<ScalarOp>,
        graphs: HashMap<ScalarOp, Arc<Graph<ScalarOp>>>,
        next_key: u32,
    }

    impl Default for Tape {
        fn default() -> Self {
            Self::new()
        }
    }

    impl Tape {
        /// An empty tape. User keys count up from 2^30, the recorder's keys down from
        /// `u32::MAX`, graph inputs are `var(0)` and `var(1)`: the three never meet.
        pub fn new() -> Self {
            let mut next = u32::MAX;
            let recorder = Recorder::new(move || {
                next -= 1;
                ScalarKey::var(next + 1)
            });
            Tape { recorder, graphs: HashMap::new(), next_key: 1 << 30 }
        }

        /// The recorder.
        pub fn recorder(&self) -> &Recorder<ScalarOp> {
            &self.recorder
        }

        fn fresh_key(&mut self) -> ValueKey<ScalarOp> {
            self.next_key += 1;
            ValueKey::Input(ScalarKey::var(self.next_key))
        }

        /// A leaf value.
        pub fn leaf(&mut self, value: f64, requires_grad: bool) -> ADRuleResult<Var> {
            Ok(Var { key: self.fresh_key(), trace: None, requires_grad, value: Arc::new(value) })
        }

        /// Applies `op` now and records it; its outputs are retained, so backward never
        /// replays it.
        pub fn apply(&mut self, op: ScalarOp, args: &[&Var]) -> ADRuleResult<Vec<Var>> {
            let operands: Vec<f64> = args.iter().map(|a| *a.value).collect();
            if operands.len() != op.input_count() {
                let (operation, expected, found) = (format!("{op:?}"), op.input_count(), operands.len());
                return Err(GraphError::ArityMismatch { operation, expected, found }.into());
            }
            let results = op.apply(&operands);
            if args.is_empty() {
                return results.into_iter().map(|x| self.leaf(x, false)).collect();
            }
            let graph = match self.graphs.get(&op) {
                Some(g) => Arc::clone(g),
                None => {
                    let mut b = GraphBuilder::<ScalarOp>::new();
                    let inputs = (0..op.input_count()).map(|i| ValueRef::Local(b.add_input(ScalarKey::var(i as u32))));
                    let inputs = inputs.collect();
                    let outputs = b.try_add_operation(op, inputs, OperationRole::Primary)?;
                    b.try_set_outputs(outputs.to_vec())?;
                    let g = Arc::new(b.try_build()?);
                    self.graphs.insert(op, Arc::clone(&g));
                    g
                }
            };
            let keys: Vec<_> = results.iter().map(|_| self.fresh_key()).collect();
            let values: Vec<Arc<f64>> = results.into_iter().map(Arc::new).collect();
            let retained = keys.iter().cloned().zip(values.iter().cloned()).collect();
            let inputs = args
                .iter()
                .map(|a| EagerInput {
                    key: a.key.clone(),
                    trace: a.trace.clone(),
                    requires_grad: a.requires_grad,
                    data: Arc::clone(&a.value),
                })
                .collect();
            let outputs = self.recorder.record_graph(&graph, inputs, keys, retained)?;
            Ok(outputs
                .into_iter()
                .zip(values)
                .map(|(o, value)| Var { key: o.key, trace: o.trace, requires_grad: o.requires_grad, value })
                .collect())
        }

        /// Reverse mode from `y` with cotangent `seed`: the gradients of the leaves.
        pub fn backward(&self, y: &Var, seed: f64, executor: &mut ScalarExecutor) -> ADRuleResult<Gradients> {
            try_backward(&y.key, y.trace.as_ref(), Arc::new(seed), executor, &mut ())
        }
    }
}
