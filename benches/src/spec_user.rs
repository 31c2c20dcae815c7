//! The `spec-user` operation set (written from the specification alone, as a new user
//! writes one) on the same workloads as the project's own `scalar` set, for the `build`,
//! `eval` and `gradient_eval` groups of `benches/pipeline.rs`.

use std::sync::Arc;

use computegraph::{
    CompiledProgram, EvalState, EvaluableGraphOperation, Graph, GraphBuilder, GraphOperation, KeyInterner,
    LocalValueId, MaterializedGraph, OperationRole, Outputs, ValueKey, ValueRef, compile, materialize_merge, resolve,
};
use scalar::ScalarOp;
use scalar::spec::GraphSpec;
use scalar::workloads::{self, Operands};
use spec_user::{Dag, Key, Op};

/// The spec's DAG in the spec-user set (the same nodes, operands and outputs).
///
/// # Panics
/// On a constant (the workloads emit none; the spec-user set has no constants).
pub fn to_dag(spec: &GraphSpec) -> Dag {
    let mut dag = Dag { inputs: spec.inputs, nodes: Vec::with_capacity(spec.ops.len()), outputs: spec.outputs.clone() };
    let mut a = 0;
    for op in &spec.ops {
        let n = op.input_count();
        let args = &spec.args[a..a + n];
        a += n;
        let op = match op {
            ScalarOp::Add => Op::Add,
            ScalarOp::Mul => Op::Mul,
            ScalarOp::Neg => Op::Neg,
            ScalarOp::Exp => Op::Exp,
            ScalarOp::Sin => Op::Sin,
            ScalarOp::Cos => Op::Cos,
            ScalarOp::SinCos => Op::SinCos,
            ScalarOp::Const(_) => panic!("the spec-user set has no constants"),
        };
        dag.nodes.push((op, [args[0], args[n - 1]]));
    }
    dag
}

/// Builds the DAG the specification's way ([`Dag::build`]: `add_operation` with an array
/// of operands per node, as the README's first example), on a fresh interner like `benches::build`.
pub fn build(dag: &Dag) -> (Arc<Graph<Op>>, Vec<ValueKey<Op>>) {
    dag.build(GraphBuilder::with_interner(KeyInterner::new()))
}

/// [`build`] with the builder's room reserved first (`GraphBuilder::reserve`, as the
/// project's own `scalar` set builds), which the docs' first example does not do: the
/// difference between the two is what growing the fragment's columns and the interner's
/// table costs that example.
pub fn build_reserved(dag: &Dag) -> (Arc<Graph<Op>>, Vec<ValueKey<Op>>) {
    let mut b = GraphBuilder::with_interner(KeyInterner::new());
    let operands = dag.nodes.iter().map(|(op, _)| op.input_count()).sum();
    b.reserve(dag.value_count(), dag.nodes.len(), operands);
    dag.build(b)
}

/// The compiled program of the DAG's outputs.
pub fn program(dag: &Dag) -> CompiledProgram<Op> {
    compile(&materialized(dag))
}

/// The spec-user set's DAG built and materialized the specification's way (`resolve`,
/// `materialize_merge`): what `compile` takes.
pub fn materialized(dag: &Dag) -> MaterializedGraph<Op> {
    let (g, outputs) = build(dag);
    materialize_merge(&resolve(vec![g]), &outputs)
}

/// The spec-user set with `eval_into` kept out of line (`#[inline(never)]`): what an
/// operation set of another crate costs when its `eval_into` lacks the `#[inline(always)]`
/// the docs ask for, and the compiler does not inline it into the evaluator's loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NotInlined(pub Op);

impl GraphOperation for NotInlined {
    type Operand = f64;
    type Context = ();
    type InputKey = Key;
    fn input_count(&self) -> usize {
        self.0.input_count()
    }
    fn output_count(&self) -> usize {
        self.0.output_count()
    }
}

impl EvaluableGraphOperation for NotInlined {
    #[inline(never)]
    fn eval_into(&self, ctx: &mut (), x: &[&f64], out: &mut Outputs<'_, f64>) {
        self.0.eval_into(ctx, x, out)
    }
}

/// The compiled program of the DAG's outputs in [`NotInlined`] operations.
pub fn program_not_inlined(dag: &Dag) -> CompiledProgram<NotInlined> {
    let mut b = GraphBuilder::with_interner(KeyInterner::new());
    for i in 0..dag.inputs {
        b.add_input(Key::User(i));
    }
    for &(op, [a, c]) in &dag.nodes {
        let operands = [ValueRef::Local(LocalValueId::new(a as usize)), ValueRef::Local(LocalValueId::new(c as usize))];
        b.add_operation_from(NotInlined(op), &operands[..op.input_count()], &OperationRole::Primary);
    }
    let outputs: Vec<LocalValueId> = dag.outputs.iter().map(|&o| LocalValueId::new(o as usize)).collect();
    b.set_outputs(outputs.clone());
    let g = Arc::new(b.build());
    let keys: Vec<_> = outputs.iter().map(|&o| g.global_key(o)).collect();
    compile(&materialize_merge(&resolve(vec![g]), &keys))
}

/// The program's inputs, in its own order, from the spec's input values.
pub fn bind_inputs<'a, O: GraphOperation<InputKey = Key, Operand = f64>>(
    program: &CompiledProgram<O>,
    inputs: &'a [f64],
) -> Vec<&'a f64> {
    program
        .bind_inputs(|k| match k {
            Key::User(i) => inputs.get(*i as usize),
            Key::Tangent { .. } => None,
        })
        .expect("every program input is a spec input")
}

/// A compiled gradient program with its inputs bound: primal inputs from the workload,
/// the seed one.
pub struct Gradient<O: EvaluableGraphOperation<Operand = f64, Context = ()>> {
    program: CompiledProgram<O>,
    values: Vec<f64>,
}

impl<O: EvaluableGraphOperation<Operand = f64, Context = ()>> Gradient<O> {
    /// Evaluates the gradient.
    pub fn eval(&self, state: &mut EvalState<f64>) -> Vec<f64> {
        let refs: Vec<&f64> = self.values.iter().collect();
        self.program.eval_with(state, &mut (), &refs).expect("evaluates")
    }
}

/// The gradient workload of `benches::ad` (a window-1024 random DAG of `n` nodes, 30%
/// repeats, its first output), as a spec and its input values.
pub fn gradient_spec(n: usize) -> (GraphSpec, Vec<f64>) {
    let mut spec = workloads::random_dag(n, Operands::Window(1024), 0.3, 3);
    spec.outputs.truncate(1);
    let values = workloads::inputs_for(&spec, 5);
    (spec, values)
}

/// The gradient of the spec's output with respect to every input, compiled, in the
/// spec-user set.
pub fn spec_user_gradient(spec: &GraphSpec, inputs: &[f64]) -> Gradient<Op> {
    let (g, outputs) = build(&to_dag(spec));
    let wrt: Vec<Key> = (0..spec.inputs).map(Key::User).collect();
    let lin = tidu::linearize(&resolve(vec![g]), &outputs, &wrt);
    let t = tidu::linear_transpose(&lin);
    let keys: Vec<_> = t.tangent_output_keys().into_iter().flatten().collect();
    let program = compile(&materialize_merge(&resolve(vec![t.graph().clone()]), &keys));
    let values =
        program.input_keys().iter().map(|k| if let Key::User(i) = k { inputs[*i as usize] } else { 1.0 }).collect();
    Gradient { program, values }
}

/// The same gradient in the project's own `scalar` set.
pub fn scalar_gradient(spec: &GraphSpec, inputs: &[f64]) -> Gradient<ScalarOp> {
    let built = spec.build_single(&KeyInterner::new()).expect("valid spec");
    let wrt: Vec<scalar::ScalarKey> = (0..spec.inputs).map(scalar::ScalarKey::var).collect();
    let lin = tidu::linearize(&resolve(built.graphs.clone()), &built.outputs, &wrt);
    let t = tidu::linear_transpose(&lin);
    let keys: Vec<_> = t.tangent_output_keys().into_iter().flatten().collect();
    let program = compile(&materialize_merge(&resolve(vec![t.graph().clone()]), &keys));
    let values = program
        .input_keys()
        .iter()
        .map(|k| if let scalar::ScalarKey::Var(i) = k { inputs[*i as usize] } else { 1.0 })
        .collect();
    Gradient { program, values }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Shape, Workload};

    #[test]
    fn spec_user_set_evaluates_the_workloads_like_the_scalar_set() {
        for shape in Shape::ALL {
            let w = Workload::new(shape, 2_000);
            let ours = crate::materialize(&crate::build(&w.spec));
            let ours = compile(&ours);
            let want = ours.eval(&mut (), &crate::bind_inputs(&ours, &w.inputs));
            let p = program(&to_dag(&w.spec));
            let got = p.eval(&mut (), &bind_inputs(&p, &w.inputs));
            assert!(crate::same_values(&got, &want), "{shape:?}: {got:?} vs {want:?}");
            let p = program_not_inlined(&to_dag(&w.spec));
            let got = p.eval(&mut (), &bind_inputs(&p, &w.inputs));
            assert!(crate::same_values(&got, &want), "{shape:?} (not inlined): {got:?} vs {want:?}");
        }
    }

    /// Reserving changes nothing but the room: the same program and results.
    #[test]
    fn a_reserved_build_evaluates_like_the_docs_form() {
        for shape in Shape::ALL {
            let w = Workload::new(shape, 6_000);
            let dag = to_dag(&w.spec);
            let eval = |(g, outputs): (Arc<Graph<Op>>, Vec<ValueKey<Op>>)| {
                let p = compile(&materialize_merge(&resolve(vec![g]), &outputs));
                p.eval(&mut (), &bind_inputs(&p, &w.inputs))
            };
            let (got, want) = (eval(build_reserved(&dag)), eval(build(&dag)));
            assert!(crate::same_values(&got, &want), "{shape:?}: {got:?} vs {want:?}");
        }
    }

    #[test]
    fn both_sets_compute_the_same_gradient() {
        let (spec, inputs) = gradient_spec(3_000);
        let a = spec_user_gradient(&spec, &inputs).eval(&mut EvalState::new());
        let b = scalar_gradient(&spec, &inputs).eval(&mut EvalState::new());
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(&b) {
            assert!((x - y).abs() <= 1e-12 * (1.0 + y.abs()), "{x} vs {y}");
        }
    }
}
