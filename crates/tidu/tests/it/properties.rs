//! Property tests over random scalar graphs (`docs/SPEC.md` §7.5), through
//! `tidu::testing::check_graph`: JVP against finite differences, VJP by the dot-product
//! identity, the four second-order nestings agreeing (FoR against RoF among them) and
//! against finite differences, and HVP symmetry.
//!
//! Graphs are small [`GraphSpec`]s built into one to three fragments, with every scalar
//! operation (including the two-output `sincos`), repeated nodes (shared subexpressions
//! that CSE merges) and repeated outputs. Inputs lie in `[0.5, 1.5]`; an operation whose
//! value could exceed [`BOUND`] in magnitude is replaced by `sin`, so nothing blows up.

use computegraph::{GraphOperation, KeyInterner};
use proptest::prelude::*;
use scalar::spec::GraphSpec;
use scalar::{ScalarKey, ScalarOp};
use tidu::testing::{CheckKind, Checker, GraphCase, Tolerance};

/// No value of a generated graph exceeds this in magnitude.
const BOUND: f64 = 8.0;

/// One node of a generated graph: an operation kind and operand picks (taken modulo the
/// values available), or a copy of an earlier node.
#[derive(Clone, Debug)]
pub(crate) struct NodeChoice {
    kind: u8,
    a: u32,
    b: u32,
    copy: bool,
}

pub(crate) fn node_choice() -> impl Strategy<Value = NodeChoice> {
    (0u8..8, any::<u32>(), any::<u32>(), prop::bool::weighted(0.15)).prop_map(|(kind, a, b, copy)| NodeChoice {
        kind,
        a,
        b,
        copy,
    })
}

/// A bound on `|op(args)|` given bounds on the arguments.
fn bound_of(op: ScalarOp, args: &[f64]) -> f64 {
    match op {
        ScalarOp::Add => args[0] + args[1],
        ScalarOp::Mul => args[0] * args[1],
        ScalarOp::Neg => args[0],
        ScalarOp::Exp => args[0].exp(),
        ScalarOp::Sin | ScalarOp::Cos | ScalarOp::SinCos => 1.0,
        ScalarOp::Const(bits) => f64::from_bits(bits).abs(),
    }
}

/// The spec of the choices over `inputs` inputs, with outputs picked by `outs`.
pub(crate) fn make_spec(inputs: u32, nodes: &[NodeChoice], outs: &[u32]) -> GraphSpec {
    let mut spec = GraphSpec { inputs, ..Default::default() };
    let mut bound: Vec<f64> = vec![1.5; inputs as usize];
    let mut starts: Vec<usize> = Vec::new(); // where each node's args start in spec.args
    for n in nodes {
        let values = spec.value_count() as u32;
        let (op, args): (ScalarOp, Vec<u32>) = if n.copy && !spec.ops.is_empty() {
            let k = n.a as usize % spec.ops.len();
            let op = spec.ops[k];
            (op, spec.args[starts[k]..starts[k] + op.input_count()].to_vec())
        } else {
            let op = match n.kind {
                0 => ScalarOp::Add,
                1 => ScalarOp::Mul,
                2 => ScalarOp::Neg,
                3 => ScalarOp::Exp,
                4 => ScalarOp::Sin,
                5 => ScalarOp::Cos,
                6 => ScalarOp::SinCos,
                _ => ScalarOp::constant(0.25 + (n.b % 8) as f64 * 0.25),
            };
            let args = [n.a % values, n.b % values];
            (op, args[..op.input_count()].to_vec())
        };
        let arg_bounds: Vec<f64> = args.iter().map(|&a| bound[a as usize]).collect();
        let (op, args) = if bound_of(op, &arg_bounds) > BOUND { (ScalarOp::Sin, vec![args[0]]) } else { (op, args) };
        let arg_bounds: Vec<f64> = args.iter().map(|&a| bound[a as usize]).collect();
        let b = bound_of(op, &arg_bounds);
        starts.push(spec.args.len());
        spec.push(op, &args);
        bound.extend(std::iter::repeat_n(b, op.output_count()));
    }
    let first = inputs;
    let count = spec.value_count() as u32 - first;
    // The last value, and the picks (repeats allowed: their seeds add up in the transpose).
    spec.outputs.push(spec.value_count() as u32 - 1);
    spec.outputs.extend(outs.iter().map(|&o| first + o % count));
    spec
}

fn graph_case(spec: &GraphSpec, fragments: usize, values: &[f64]) -> GraphCase<ScalarOp> {
    let built = spec.build(&KeyInterner::new(), fragments).expect("valid spec");
    let inputs = (0..spec.inputs).map(|i| (ScalarKey::var(i), values[i as usize])).collect();
    GraphCase::new(format!("{spec:?}"), built.graphs, built.outputs, inputs)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_graphs_pass_every_graph_check(
        inputs in 1u32..=3,
        nodes in prop::collection::vec(node_choice(), 1..=10),
        outs in prop::collection::vec(any::<u32>(), 0..=2),
        fragments in 1usize..=3,
        values in prop::collection::vec(0.5f64..1.5, 3),
        seed in any::<u64>(),
    ) {
        let spec = make_spec(inputs, &nodes, &outs);
        let case = graph_case(&spec, fragments, &values);
        let report = Checker::new(Tolerance::F64).seed(seed).check_graph(&mut (), &case);
        prop_assert!(report.is_ok(), "{}", report.unwrap_err());
        let report = report.unwrap();
        for kind in [CheckKind::Jvp, CheckKind::Transpose, CheckKind::SecondOrder, CheckKind::HvpSymmetry] {
            prop_assert!(report.worst(kind).is_some(), "no {} comparison ran", kind);
        }
    }
}

#[test]
fn a_graph_with_shared_subexpressions_sincos_and_repeated_outputs() {
    // v3 = sincos(x0); v5 = mul(v3, x1); v6 = mul(v3, x1) (a copy); v7 = add(v5, v6);
    // v8 = exp(v4); outputs v7, v8, v7.
    let mut spec = GraphSpec { inputs: 2, ..Default::default() };
    let sc = spec.push(ScalarOp::SinCos, &[0]);
    let p = spec.push(ScalarOp::Mul, &[sc, 1]);
    let q = spec.push(ScalarOp::Mul, &[sc, 1]);
    let s = spec.push(ScalarOp::Add, &[p, q]);
    let e = spec.push(ScalarOp::Exp, &[sc + 1]);
    spec.outputs = vec![s, e, s];
    for fragments in 1..=3 {
        let case = graph_case(&spec, fragments, &[0.9, 1.2]);
        Checker::new(Tolerance::F64).directions(4).check_graph(&mut (), &case).unwrap_or_else(|f| panic!("{f}"));
    }
}

#[test]
fn generated_values_stay_bounded() {
    // The generator's bound holds on the reference evaluator at the corners of the box.
    let nodes: Vec<NodeChoice> = (0..10)
        .map(|i| NodeChoice { kind: [1, 3, 0, 1, 3, 6, 1, 0, 3, 1][i], a: i as u32 * 7 + 3, b: 5, copy: false })
        .collect();
    let spec = make_spec(2, &nodes, &[1, 4]);
    for x in [[0.5, 0.5], [1.5, 1.5], [0.5, 1.5]] {
        for v in spec.eval_reference(&x) {
            assert!(v.abs() <= BOUND, "{v} in {spec:?}");
        }
    }
}
