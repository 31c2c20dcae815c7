//! The eager integration of `docs/SPEC.md` §6 with the spec-user set: a frontend records one
//! fresh one-operation graph per operation, and `try_backward` drives an executor written
//! from the specification (replay by compiling the graph `execute_forward` is handed; transposed
//! graphs run by walking their operations). The set's rules emit `cos x` in the Primary
//! role, so the tape must accept primal computations in linear graphs.

use std::collections::HashMap;
use std::sync::Arc;

use computegraph::{
    EvaluableGraphOperation, GraphBuilder, OperationRole, ValueKey, ValueRef, compile, materialize_merge,
};
use spec_user::{Key, Op};
use tidu::eager::{BackwardExecutor, EagerInput, EagerOutput, PrimitiveGraph, Recorder, try_backward};
use tidu::{ADRuleResult, LinearizedGraph};

/// Replays recorded graphs and runs transposed ones, for `f64`.
struct Executor;

impl BackwardExecutor<Op> for Executor {
    fn execute_forward(
        &mut self,
        graph: PrimitiveGraph<'_, Op>,
        initial_data: &HashMap<ValueKey<Op>, Arc<f64>>,
    ) -> HashMap<ValueKey<Op>, Arc<f64>> {
        let m = materialize_merge(graph.view(), graph.required());
        let inputs: Vec<&f64> = m.input_keys().iter().map(|k| &*initial_data[&ValueKey::Input(k.clone())]).collect();
        let values = compile(&m).eval(&mut (), &inputs);
        graph.required().iter().cloned().zip(values.into_iter().map(Arc::new)).collect()
    }

    fn run_transposed_linear(
        &mut self,
        linear: &LinearizedGraph<Op>,
        cotangent_out: &[Option<Arc<f64>>],
        external_data: &HashMap<ValueKey<Op>, Arc<f64>>,
        _: &mut (),
    ) -> ADRuleResult<Vec<Option<Arc<f64>>>> {
        // Walk the graph's operations in order; local values by id, others by key.
        let g = linear.as_graph();
        let mut values: Vec<Option<f64>> = vec![None; g.value_count()];
        for ((_, v), c) in linear.tangent_inputs().iter().zip(cotangent_out) {
            values[v.index()] = Some(c.as_deref().copied().unwrap_or(0.0));
        }
        for op in g.operations() {
            let args: Vec<f64> = op
                .inputs()
                .map(|r| match r {
                    ValueRef::Local(v) => values[v.index()].expect("operands come first"),
                    ValueRef::External(k) => *external_data[&k],
                })
                .collect();
            let refs: Vec<&f64> = args.iter().collect();
            for (v, x) in op.outputs().zip(op.operation().eval(&mut (), &refs)) {
                values[v.index()] = Some(x);
            }
        }
        Ok(linear.tangent_outputs().iter().map(|o| o.map(|v| Arc::new(values[v.index()].expect("computed")))).collect())
    }

    fn add_operands(&mut self, a: &Arc<f64>, b: &Arc<f64>) -> Arc<f64> {
        Arc::new(**a + **b)
    }
}

/// A minimal frontend: each operation runs at once and is recorded as a fresh graph.
struct Frontend {
    recorder: Recorder<Op>,
    next_key: u32,
}

/// A value of the frontend: data, and what the tape knows of it.
struct Value {
    data: f64,
    out: EagerOutput<Op>,
}

impl Frontend {
    fn new() -> Self {
        let mut fresh = 1_000_000u32;
        let source = move || {
            fresh += 1;
            Key::User(fresh)
        };
        Frontend { recorder: Recorder::new(source), next_key: 0 }
    }

    fn key(&mut self) -> ValueKey<Op> {
        self.next_key += 1;
        ValueKey::Input(Key::User(self.next_key))
    }

    fn leaf(&mut self, data: f64) -> (EagerInput<Op>, f64) {
        (EagerInput::leaf(self.key(), Arc::new(data), true), data)
    }

    /// Runs `op` on `args` and records it: a one-operation graph over fresh inputs.
    fn apply(&mut self, op: Op, args: &[EagerInput<Op>]) -> Value {
        let mut b = GraphBuilder::<Op>::new();
        let ins: Vec<ValueRef<Op>> = args.iter().map(|_| ValueRef::Local(b.add_input(self.fresh()))).collect();
        let y = b.add_operation(op, ins, OperationRole::Primary)[0];
        b.set_outputs(vec![y]);
        let graph = Arc::new(b.build());
        let refs: Vec<&f64> = args.iter().map(|a| &*a.data).collect();
        let data = op.eval(&mut (), &refs)[0];
        let key = self.key();
        let retained = HashMap::from([(key.clone(), Arc::new(data))]);
        let out = self.recorder.record_graph(&graph, args.to_vec(), vec![key], retained).expect("recorded");
        Value { data, out: out.into_iter().next().expect("one output") }
    }

    fn fresh(&mut self) -> Key {
        self.next_key += 1;
        Key::User(self.next_key)
    }
}

impl Value {
    fn input(&self) -> EagerInput<Op> {
        self.out.input(Arc::new(self.data))
    }
}

/// f(x, y) = sin(x)·y + cos(y): ∂f/∂x = cos(x)·y, ∂f/∂y = sin(x) - sin(y).
#[test]
fn eager_gradients_with_primal_computations_in_rules() {
    let mut f = Frontend::new();
    for (xv, yv) in [(0.3, -1.2), (1.1, 0.4)] {
        let (x, _) = f.leaf(xv);
        let (y, _) = f.leaf(yv);
        let s = f.apply(Op::Sin, std::slice::from_ref(&x));
        let sy = f.apply(Op::Mul, &[s.input(), y.clone()]);
        let c = f.apply(Op::Cos, std::slice::from_ref(&y));
        let out = f.apply(Op::Add, &[sy.input(), c.input()]);
        assert_eq!(out.data, xv.sin() * yv + yv.cos());
        let grads = try_backward(&out.out.key, out.out.trace.as_ref(), Arc::new(1.0), &mut Executor, &mut ())
            .expect("backward");
        let (gx, gy) = (*grads[&x.key], *grads[&y.key]);
        assert!((gx - xv.cos() * yv).abs() < 1e-15, "{gx}");
        assert!((gy - (xv.sin() - yv.sin())).abs() < 1e-15, "{gy}");
    }
}
