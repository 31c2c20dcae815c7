//! Shared fixtures: a proptest strategy for random [`GraphSpec`]s, the pipeline driver,
//! bitwise value comparison and reachability on a spec.

use std::sync::Arc;

use computegraph::{
    CompiledProgram, GraphBuilder, KeyInterner, MaterializedGraph, OperationRole, ResolvedView, ValueKey, ValueRef,
    materialize_merge, resolve, try_compile, try_materialize_merge,
};
use proptest::prelude::*;
use scalar::spec::GraphSpec;
use scalar::{ScalarKey, ScalarOp};

/// Constants the generator draws from: signed zeros, NaN, infinities, huge values.
pub const CONSTANTS: [f64; 8] = [0.0, -0.0, 1.5, -2.0, f64::NAN, f64::INFINITY, 1e308, 0.25];

/// One generated node: an operation kind, a constant choice, two operand seeds, and
/// optionally "repeat an earlier node exactly" (so CSE has work).
#[derive(Clone, Debug)]
pub struct NodeChoice {
    kind: u8,
    constant: usize,
    a: u32,
    b: u32,
    repeat: Option<u32>,
}

fn node_choice() -> impl Strategy<Value = NodeChoice> {
    (0u8..8, 0..CONSTANTS.len(), any::<u32>(), any::<u32>(), prop::option::weighted(0.25, any::<u32>()))
        .prop_map(|(kind, constant, a, b, repeat)| NodeChoice { kind, constant, a, b, repeat })
}

fn op_of(kind: u8, constant: usize) -> ScalarOp {
    match kind {
        0 => ScalarOp::Add,
        1 => ScalarOp::Mul,
        2 => ScalarOp::Neg,
        3 => ScalarOp::Exp,
        4 => ScalarOp::Sin,
        5 => ScalarOp::Cos,
        6 => ScalarOp::SinCos,
        _ => ScalarOp::constant(CONSTANTS[constant]),
    }
}

/// Turns generator choices into a valid spec: operands name earlier values only,
/// outputs may be inputs and may repeat.
pub fn make_spec(inputs: u32, nodes: &[NodeChoice], outputs: &[u32]) -> GraphSpec {
    use computegraph::GraphOperation;
    let mut spec = GraphSpec { inputs, ..Default::default() };
    let mut arg_start: Vec<usize> = Vec::with_capacity(nodes.len());
    for (i, n) in nodes.iter().enumerate() {
        let start = spec.args.len();
        match n.repeat {
            Some(r) if i > 0 => {
                let j = r as usize % i;
                let op = spec.ops[j];
                let args: Vec<u32> = spec.args[arg_start[j]..arg_start[j] + op.input_count()].to_vec();
                spec.push(op, &args);
            }
            _ => {
                let op = op_of(n.kind, n.constant);
                let avail = spec.value_count() as u32;
                let args = [n.a % avail, n.b % avail];
                spec.push(op, &args[..op.input_count()]);
            }
        }
        arg_start.push(start);
    }
    let values = spec.value_count() as u32;
    spec.outputs = outputs.iter().map(|o| o % values).collect();
    spec
}

/// Small random specs: 1-4 inputs, 0-60 nodes of every `ScalarOp`, 0-6 outputs.
pub fn spec_strategy() -> impl Strategy<Value = GraphSpec> {
    (1u32..=4, prop::collection::vec(node_choice(), 0..=60), prop::collection::vec(any::<u32>(), 0..=6))
        .prop_map(|(inputs, nodes, outputs)| make_spec(inputs, &nodes, &outputs))
}

/// Four input values (a spec uses the first `spec.inputs`), special values included.
pub fn inputs_strategy() -> impl Strategy<Value = Vec<f64>> {
    let value = prop_oneof![
        8 => -3.0..3.0f64,
        1 => Just(0.0),
        1 => Just(-0.0),
        1 => Just(f64::NAN),
        1 => Just(f64::INFINITY),
        1 => Just(f64::NEG_INFINITY),
    ];
    prop::collection::vec(value, 4)
}

/// Bitwise equality, except that any NaN equals any NaN: Rust leaves the sign and
/// payload of NaN results unspecified (and LLVM may commute `fadd`/`fmul` operands),
/// so two correct evaluations may produce NaNs with different bits.
pub fn same_value(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Asserts `got` equals `expected` value by value under [`same_value`].
#[track_caller]
pub fn assert_same(got: &[f64], expected: &[f64]) {
    assert_eq!(got.len(), expected.len(), "output count: got {got:?}, expected {expected:?}");
    for (i, (&g, &e)) in got.iter().zip(expected).enumerate() {
        assert!(
            same_value(g, e),
            "output {i}: got {g:?} ({:#018x}), expected {e:?} ({:#018x})",
            g.to_bits(),
            e.to_bits()
        );
    }
}

/// Materializes, compiles and runs every verifier on the way.
pub fn compile_checked(
    view: &ResolvedView<ScalarOp>,
    outputs: &[ValueKey<ScalarOp>],
) -> (MaterializedGraph<ScalarOp>, CompiledProgram<ScalarOp>) {
    let m = try_materialize_merge(view, outputs).unwrap_or_else(|e| panic!("materialize: {e}"));
    m.verify().unwrap_or_else(|e| panic!("materialized verify: {e}"));
    assert_eq!(m.output_keys(), outputs, "materialized output keys");
    let p = try_compile(&m).unwrap_or_else(|e| panic!("compile: {e}"));
    p.verify().unwrap_or_else(|e| panic!("program verify: {e}"));
    p.verify_against(&m).unwrap_or_else(|e| panic!("program verify_against: {e}"));
    // Instructions are the graph's operations, each once, none moved farther than the
    // regrouping window of `dispatch.rs` (256).
    let mut seen = vec![false; m.operation_count()];
    for i in 0..p.instruction_count() {
        let op = p.source_operation(i).index();
        assert!(!std::mem::replace(&mut seen[op], true), "operation {op} compiled twice");
        assert!(op.abs_diff(i) < 256, "instruction {i} computes operation {op}, outside its window");
    }
    (m, p)
}

/// Evaluates a program whose inputs are `ScalarKey::Var(i)`, binding `inputs[i]`.
pub fn eval_vars(program: &CompiledProgram<ScalarOp>, inputs: &[f64]) -> Vec<f64> {
    program
        .try_eval_by_key(&mut (), |k| match k {
            ScalarKey::Var(i) => inputs.get(*i as usize),
            ScalarKey::Tangent(_) => None,
        })
        .unwrap_or_else(|e| panic!("eval: {e}"))
}

/// Reachability on a spec, computed directly on its columns: the number of nodes with
/// at least one output reachable from the spec's outputs, and of reachable inputs.
pub fn reachable_counts(spec: &GraphSpec) -> (usize, usize) {
    use computegraph::GraphOperation;
    let mut first_output = Vec::with_capacity(spec.ops.len());
    let mut arg_start = Vec::with_capacity(spec.ops.len());
    let (mut v, mut a) = (spec.inputs as usize, 0);
    for op in &spec.ops {
        first_output.push(v);
        arg_start.push(a);
        v += op.output_count();
        a += op.input_count();
    }
    let mut live = vec![false; spec.value_count()];
    for &o in &spec.outputs {
        live[o as usize] = true;
    }
    let mut nodes = 0;
    for (i, op) in spec.ops.iter().enumerate().rev() {
        if (first_output[i]..first_output[i] + op.output_count()).any(|v| live[v]) {
            nodes += 1;
            for &arg in &spec.args[arg_start[i]..arg_start[i] + op.input_count()] {
                live[arg as usize] = true;
            }
        }
    }
    let inputs = live[..spec.inputs as usize].iter().filter(|&&l| l).count();
    (nodes, inputs)
}

/// Proptest settings for this binary: the default number of cases, and shrinking capped
/// at 30 s so that a failure reports in bounded time (an unbounded shrink of a failing
/// 60-node case can take many minutes in a debug build).
pub fn proptest_config() -> ProptestConfig {
    ProptestConfig { max_shrink_time: 30_000, ..ProptestConfig::default() }
}

/// A fresh scoped interner (tests never share the process-wide one unless they mean to).
pub fn fresh() -> Arc<KeyInterner<ScalarOp>> {
    KeyInterner::new()
}

/// Two materialized graphs of the same size that differ only in the operand order of
/// their second operation: `(x + y)·x` and `x·(x + y)`. For checking that a verifier
/// rejects a program or schedule checked against the wrong graph.
pub fn same_size_pair() -> (MaterializedGraph<ScalarOp>, MaterializedGraph<ScalarOp>) {
    let interner = fresh();
    let shape = |swap: bool| {
        let mut b = GraphBuilder::with_interner(interner.clone());
        let x = b.add_input(ScalarKey::var(0));
        let y = b.add_input(ScalarKey::var(1));
        let s = b.add_operation(ScalarOp::Add, vec![ValueRef::Local(x), ValueRef::Local(y)], OperationRole::Primary)[0];
        let operands = if swap {
            vec![ValueRef::Local(x), ValueRef::Local(s)]
        } else {
            vec![ValueRef::Local(s), ValueRef::Local(x)]
        };
        let t = b.add_operation(ScalarOp::Mul, operands, OperationRole::Primary)[0];
        let g = Arc::new(b.build());
        materialize_merge(&resolve(vec![g.clone()]), &[g.global_key(t)])
    };
    (shape(false), shape(true))
}
