//! Shared by the examples in this directory (`cargo run -p examples --example NAME`): the
//! function they differentiate, f(x, y) = sin(x)·y + exp(x·y), its closed-form derivatives,
//! and the last three phases of every pipeline (materialize_merge → compile → eval).

#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::sync::Arc;

use computegraph::{
    Graph, GraphBuilder, OperationRole::Primary, ValueKey, ValueRef::Local, compile, materialize_merge, resolve,
};
use scalar::{ScalarKey, ScalarOp};

/// The primal graph of f(x, y) = sin(x)·y + exp(x·y) and the key of its output.
pub fn build_f() -> (Arc<Graph<ScalarOp>>, ValueKey<ScalarOp>) {
    let mut b = GraphBuilder::<ScalarOp>::new();
    let x = b.add_input(ScalarKey::var(0));
    let y = b.add_input(ScalarKey::var(1));
    let s = b.add_operation(ScalarOp::Sin, vec![Local(x)], Primary)[0];
    let sy = b.add_operation(ScalarOp::Mul, vec![Local(s), Local(y)], Primary)[0];
    let xy = b.add_operation(ScalarOp::Mul, vec![Local(x), Local(y)], Primary)[0];
    let e = b.add_operation(ScalarOp::Exp, vec![Local(xy)], Primary)[0];
    let f = b.add_operation(ScalarOp::Add, vec![Local(sy), Local(e)], Primary)[0];
    b.set_outputs(vec![f]);
    let graph = Arc::new(b.build());
    let key = graph.global_key(f);
    (graph, key)
}

/// ∇f(x, y) = (cos(x)·y + y·exp(xy), sin(x) + x·exp(xy)).
pub fn gradient(x: f64, y: f64) -> [f64; 2] {
    let e = (x * y).exp();
    [x.cos() * y + y * e, x.sin() + x * e]
}

/// The Hessian of f at (x, y), row by row.
pub fn hessian(x: f64, y: f64) -> [[f64; 2]; 2] {
    let e = (x * y).exp();
    let fxy = x.cos() + e + x * y * e;
    [[-x.sin() * y + y * y * e, fxy], [fxy, x * x * e]]
}

/// The last phases of every pipeline: materializes `outputs` from `graph` (and the graphs
/// it references), compiles, and evaluates with each input key bound from `values`.
///
/// # Panics
/// If an input of the program has no value in `values` (the examples bind them all).
pub fn materialize_compile_eval(
    graph: &Arc<Graph<ScalarOp>>,
    outputs: &[ValueKey<ScalarOp>],
    values: &HashMap<ScalarKey, f64>,
) -> Vec<f64> {
    let view = resolve(vec![graph.clone()]);
    let flat = materialize_merge(&view, outputs);
    let program = compile(&flat);
    let inputs = program.bind_inputs(|k| values.get(k)).unwrap_or_else(|e| panic!("{e}"));
    program.eval(&mut (), &inputs)
}

/// Asserts that `got` is `want` to 1e-12, relative.
#[track_caller]
pub fn assert_close(got: f64, want: f64) {
    assert!((got - want).abs() <= 1e-12 * (1.0 + want.abs()), "got {got}, expected {want}");
}
