//! `tidu::eager` through the scalar reference frontend (`scalar::eager::Tape`): eager
//! gradients against graph mode (`vjp`) of the same functions, the recompute path, the
//! rule cache, errors, a 10^5-long chain and memory over 10^5 steps.

use std::collections::HashMap;
use std::sync::Arc;

use computegraph::{GraphBuilder, KeyInterner, OperationRole, ValueKey, ValueRef, resolve};
use proptest::prelude::*;
use scalar::eager::{Gradients, ScalarExecutor, Tape, Var};
use scalar::spec::GraphSpec;
use scalar::{ScalarKey, ScalarOp};
use tidu::eager::{BackwardExecutor, EagerError, EagerInput, PrimitiveGraph, Recorder, try_backward};
use tidu::{ADRuleError, ADRuleResult, DerivativeProgram, LinearizedGraph, vjp};

use crate::properties::{make_spec, node_choice};

fn close(got: f64, want: f64) -> bool {
    (got - want).abs() <= 1e-10 * (1.0 + want.abs())
}

/// Graph mode: the gradient of `sum(outputs)` with respect to the inputs in `wrt` (by
/// index), through `vjp`; `0.0` where it is a symbolic zero.
fn graph_mode_gradient(spec: &GraphSpec, values: &[f64], wrt: &[u32]) -> Vec<f64> {
    let built = spec.build(&KeyInterner::new(), 1).expect("valid spec");
    let keys: Vec<ScalarKey> = wrt.iter().map(|&i| ScalarKey::var(i)).collect();
    let lin = vjp(&resolve(built.graphs), &built.outputs, &keys).expect("rules exist");
    let program = DerivativeProgram::new(&lin).expect("compiles");
    let primal: HashMap<ScalarKey, f64> = (0..spec.inputs).map(|i| (ScalarKey::var(i), values[i as usize])).collect();
    let out = program.eval(&mut (), |k| Some(primal.get(k).unwrap_or(&1.0))).expect("inputs bound");
    out.into_iter().map(|g| g.unwrap_or(0.0)).collect()
}

/// Eager mode: runs `spec` one operation at a time on `tape` and sums the outputs.
/// Returns the leaves and the sum.
fn run_eagerly(tape: &mut Tape, spec: &GraphSpec, values: &[f64], requires_grad: &[bool]) -> (Vec<Var>, Var) {
    let leaves: Vec<Var> = (0..spec.inputs as usize).map(|i| tape.leaf(values[i], requires_grad[i]).unwrap()).collect();
    let vars = tape.run_spec(spec, &leaves).expect("eager ops");
    let mut sum = vars[spec.outputs[0] as usize].clone();
    for &o in &spec.outputs[1..] {
        sum = tape.apply(ScalarOp::Add, &[&sum, &vars[o as usize]]).expect("add").remove(0);
    }
    (leaves, sum)
}

fn gradient_of(grads: &Gradients, leaf: &Var) -> f64 {
    grads.get(&leaf.key).map_or(0.0, |g| **g)
}

fn assert_matches_graph_mode(
    spec: &GraphSpec,
    values: &[f64],
    requires_grad: &[bool],
    grads: &Gradients,
    leaves: &[Var],
) {
    let wrt: Vec<u32> = (0..spec.inputs).filter(|&i| requires_grad[i as usize]).collect();
    let want = graph_mode_gradient(spec, values, &wrt);
    for (&i, w) in wrt.iter().zip(&want) {
        let got = gradient_of(grads, &leaves[i as usize]);
        assert!(close(got, *w), "input {i}: eager {got}, graph mode {w}\n{spec:?}");
    }
    for (i, leaf) in leaves.iter().enumerate() {
        if !requires_grad[i] {
            assert!(!grads.contains_key(&leaf.key), "input {i} does not require a gradient but got one");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// One tape node per operation: fan-out, `sincos` with one output used, repeated
    /// nodes, inactive inputs.
    #[test]
    fn eager_gradients_equal_graph_mode(
        inputs in 1u32..=3,
        nodes in prop::collection::vec(node_choice(), 1..=12),
        outs in prop::collection::vec(any::<u32>(), 0..=2),
        values in prop::collection::vec(0.5f64..1.5, 3),
        requires_grad in prop::collection::vec(any::<bool>(), 3),
    ) {
        let spec = make_spec(inputs, &nodes, &outs);
        let mut tape = Tape::new();
        let (leaves, y) = run_eagerly(&mut tape, &spec, &values, &requires_grad);
        let grads = tape.backward(&y, 1.0, &mut ScalarExecutor::new()).expect("backward");
        assert_matches_graph_mode(&spec, &values, &requires_grad, &grads, &leaves);
    }

    /// The whole function as one composite tape node, with and without its outputs
    /// retained (without: the executor replays the graph for the intermediates).
    #[test]
    fn composite_nodes_equal_graph_mode(
        inputs in 1u32..=3,
        nodes in prop::collection::vec(node_choice(), 1..=10),
        outs in prop::collection::vec(any::<u32>(), 0..=2),
        values in prop::collection::vec(0.5f64..1.5, 3),
        requires_grad in prop::collection::vec(any::<bool>(), 3),
        retain in any::<bool>(),
    ) {
        let spec = make_spec(inputs, &nodes, &outs);
        let mut tape = Tape::new();
        let built = spec.build_single(tape.interner()).expect("valid spec");
        let graph = built.graphs.last().expect("one graph").clone();
        let leaves: Vec<Var> = (0..spec.inputs as usize).map(|i| tape.leaf(values[i], requires_grad[i]).unwrap()).collect();
        let args: Vec<&Var> = leaves.iter().collect();
        let outputs = tape.apply_graph(&graph, &args, retain).expect("composite");
        let mut y = outputs[0].clone();
        for o in &outputs[1..] {
            y = tape.apply(ScalarOp::Add, &[&y, o]).expect("add").remove(0);
        }
        let grads = tape.backward(&y, 1.0, &mut ScalarExecutor::new()).expect("backward");
        assert_matches_graph_mode(&spec, &values, &requires_grad, &grads, &leaves);
    }
}

/// `y = sin(x)·x` through `sincos`, whose cosine output is never used: only slot 0 of the
/// two-output node is seeded.
#[test]
fn a_multi_output_node_with_one_output_seeded() {
    let mut tape = Tape::new();
    let x = tape.leaf(0.7, true).unwrap();
    let sc = tape.apply(ScalarOp::SinCos, &[&x]).unwrap();
    let y = tape.apply(ScalarOp::Mul, &[&sc[0], &x]).unwrap().remove(0);
    let g = tape.backward(&y, 1.0, &mut ScalarExecutor::new()).unwrap();
    assert!(close(*g[&x.key], 0.7f64.sin() + 0.7 * 0.7f64.cos()));
    // And with both outputs used: d(sin x · cos x)/dx = cos 2x.
    let z = tape.apply(ScalarOp::Mul, &[&sc[0], &sc[1]]).unwrap().remove(0);
    let g = tape.backward(&z, 1.0, &mut ScalarExecutor::new()).unwrap();
    assert!(close(*g[&x.key], 1.4f64.cos()));
}

/// The seed scales the result; a leaf output returns the seed; an untracked value (no
/// input requires a gradient) records nothing.
#[test]
fn seeds_leaves_and_untracked_values() {
    let mut tape = Tape::new();
    let x = tape.leaf(2.0, true).unwrap();
    let c = tape.leaf(3.0, false).unwrap();
    let y = tape.apply(ScalarOp::Mul, &[&x, &c]).unwrap().remove(0);
    let g = tape.backward(&y, 0.5, &mut ScalarExecutor::new()).unwrap();
    assert_eq!(*g[&x.key], 1.5);
    assert_eq!(g.len(), 1);

    let g = tape.backward(&x, 4.0, &mut ScalarExecutor::new()).unwrap();
    assert_eq!((g.len(), *g[&x.key]), (1, 4.0));

    let before = tape.recorder().stats().live_nodes;
    let d = tape.apply(ScalarOp::Exp, &[&c]).unwrap().remove(0);
    assert!(d.trace.is_none() && !d.requires_grad);
    assert_eq!(tape.recorder().stats().live_nodes, before);
}

/// Primal values the transpose needs are taken from the tape when kept and recomputed by
/// the executor when not.
#[test]
fn intermediates_are_recomputed_only_when_not_kept() {
    let mut tape = Tape::new();
    let x = tape.leaf(0.3, true).unwrap();
    // exp's rule reads its output, which the frontend retains: no replay.
    let e = tape.apply(ScalarOp::Exp, &[&x]).unwrap().remove(0);
    let mut exec = ScalarExecutor::new();
    let g = tape.backward(&e, 1.0, &mut exec).unwrap();
    assert!(close(*g[&x.key], 0.3f64.exp()));
    assert_eq!(exec.forward_calls(), 0);

    // sin's rule reads cos x, which nobody kept: the executor computes it.
    let s = tape.apply(ScalarOp::Sin, &[&x]).unwrap().remove(0);
    let g = tape.backward(&s, 1.0, &mut exec).unwrap();
    assert!(close(*g[&x.key], 0.3f64.cos()));
    assert_eq!(exec.forward_calls(), 1);

    // A composite exp(x)·sin(x) with nothing retained: its intermediates are replayed.
    let mut b = GraphBuilder::with_interner(Arc::clone(tape.interner()));
    let i = b.add_input(ScalarKey::var(0));
    let ex = b.add_operation(ScalarOp::Exp, vec![ValueRef::Local(i)], OperationRole::Primary)[0];
    let sn = b.add_operation(ScalarOp::Sin, vec![ValueRef::Local(i)], OperationRole::Primary)[0];
    let p = b.add_operation(ScalarOp::Mul, vec![ValueRef::Local(ex), ValueRef::Local(sn)], OperationRole::Primary)[0];
    b.set_outputs(vec![p]);
    let f = Arc::new(b.build());
    let y = tape.apply_graph(&f, &[&x], false).unwrap().remove(0);
    let mut exec = ScalarExecutor::new();
    let g = tape.backward(&y, 1.0, &mut exec).unwrap();
    let want = 0.3f64.exp() * (0.3f64.sin() + 0.3f64.cos());
    assert!(close(*g[&x.key], want), "{} vs {want}", g[&x.key]);
    assert_eq!(exec.forward_calls(), 1);
}

/// A graph of one `mul`, built with the given input keys.
fn mul_graph(interner: &Arc<KeyInterner<ScalarOp>>, a: u32, b: u32) -> Arc<computegraph::Graph<ScalarOp>> {
    let mut g = GraphBuilder::with_interner(Arc::clone(interner));
    let x = g.add_input(ScalarKey::var(a));
    let y = g.add_input(ScalarKey::var(b));
    let p = g.add_operation(ScalarOp::Mul, vec![ValueRef::Local(x), ValueRef::Local(y)], OperationRole::Primary)[0];
    g.set_outputs(vec![p]);
    Arc::new(g.build())
}

fn recorder() -> Recorder<ScalarOp> {
    let mut next = u32::MAX;
    Recorder::new(move || {
        next -= 1;
        ScalarKey::var(next + 1)
    })
}

fn leaf(i: u32, x: f64, requires_grad: bool) -> EagerInput<ScalarOp> {
    EagerInput::leaf(ValueKey::Input(ScalarKey::var(i)), Arc::new(x), requires_grad)
}

/// Graphs of one structure hit one cached rule whatever their input keys (and
/// interners); other masks are other rules.
#[test]
fn rules_are_cached_by_structure_not_by_keys() {
    let mut rec = recorder();
    let mut exec = ScalarExecutor::new();
    for step in 0..20u32 {
        // A fresh graph with fresh input keys on a fresh interner each time.
        let g = mul_graph(&KeyInterner::new(), 1000 + 2 * step, 1001 + 2 * step);
        let (x, y) = (leaf(10 * step, 2.0, true), leaf(10 * step + 1, 5.0, step % 2 == 0));
        let key = ValueKey::Input(ScalarKey::var(10 * step + 2));
        let out = rec.record_graph(&g, vec![x.clone(), y.clone()], vec![key.clone()], HashMap::new()).unwrap();
        let grads = try_backward(&key, out[0].trace.as_ref(), Arc::new(1.0), &mut exec, &mut ()).unwrap();
        assert_eq!(*grads[&x.key], 5.0);
        assert_eq!(grads.get(&y.key).map(|g| **g), (step % 2 == 0).then_some(2.0));
    }
    let stats = rec.stats();
    // Two masks (y requires a gradient or not): two rules, built once each.
    assert_eq!((stats.rule_misses, stats.rule_hits, stats.cached_rules), (2, 18, 2));
    assert_eq!(stats.canonical_keys, 2);
}

/// A bounded cache evicts the least recently used rule and rebuilds it when needed.
#[test]
fn the_rule_cache_is_bounded() {
    let mut next = 1u32 << 31;
    let mut rec = Recorder::<ScalarOp>::with_rule_capacity(
        move || {
            next += 1;
            ScalarKey::var(next)
        },
        2,
    );
    let interner = KeyInterner::new();
    let mut exec = ScalarExecutor::new();
    let ops = [ScalarOp::Sin, ScalarOp::Exp, ScalarOp::Neg, ScalarOp::Sin];
    for (i, op) in ops.into_iter().enumerate() {
        let mut b = GraphBuilder::with_interner(Arc::clone(&interner));
        let x = b.add_input(ScalarKey::var(0));
        let y = b.add_operation(op, vec![ValueRef::Local(x)], OperationRole::Primary)[0];
        b.set_outputs(vec![y]);
        let g = Arc::new(b.build());
        let key = ValueKey::Input(ScalarKey::var(100 + i as u32));
        let out = rec.record_graph(&g, vec![leaf(i as u32, 0.5, true)], vec![key.clone()], HashMap::new()).unwrap();
        let grads = try_backward(&key, out[0].trace.as_ref(), Arc::new(1.0), &mut exec, &mut ()).unwrap();
        let want = [0.5f64.cos(), 0.5f64.exp(), -1.0, 0.5f64.cos()][i];
        assert!(close(*grads[&ValueKey::Input(ScalarKey::var(i as u32))], want));
    }
    let stats = rec.stats();
    assert_eq!(stats.cached_rules, 2);
    // sin was evicted by neg (capacity 2: sin, exp → exp, neg), so the last sin missed.
    assert_eq!((stats.rule_misses, stats.rule_hits), (4, 0));
}

#[test]
fn record_errors_are_values_and_record_nothing() {
    let interner = KeyInterner::new();
    let g = mul_graph(&interner, 0, 1);
    let mut a = recorder();
    let mut b = recorder();
    let k = |i| ValueKey::Input(ScalarKey::var(i));
    let out = a.record_graph(&g, vec![leaf(0, 1.0, true), leaf(1, 2.0, true)], vec![k(2)], HashMap::new()).unwrap();
    let foreign = out[0].input(Arc::new(2.0));

    let err = |r: ADRuleResult<_>| match r {
        Err(ADRuleError::Eager(e)) => e,
        Err(e) => panic!("not an eager error: {e}"),
        Ok(_) => panic!("accepted"),
    };
    let e = err(b.record_graph(&g, vec![foreign.clone(), leaf(3, 1.0, true)], vec![k(4)], HashMap::new()));
    assert_eq!(e, EagerError::ForeignTrace { input: 0 });
    assert!(e.to_string().contains("another recorder"), "{e}");

    let e = err(a.record_graph(&g, vec![leaf(3, 1.0, true)], vec![k(4)], HashMap::new()));
    assert_eq!(e, EagerError::Arity { what: "inputs", expected: 2, got: 1 });
    let e = err(a.record_graph(&g, vec![leaf(3, 1.0, true), leaf(5, 1.0, true)], vec![], HashMap::new()));
    assert_eq!(e, EagerError::Arity { what: "outputs", expected: 1, got: 0 });

    let retained = HashMap::from([(k(99), Arc::new(0.0))]);
    let e = err(a.record_graph(&g, vec![leaf(3, 1.0, true), leaf(5, 1.0, true)], vec![k(4)], retained));
    assert!(matches!(e, EagerError::UnknownRetainedValue { .. }), "{e}");

    // A graph that reads a value of another graph is not self-contained.
    let mut child = GraphBuilder::with_interner(Arc::clone(&interner));
    child.add_parent(Arc::clone(&g));
    let s = child.add_operation(
        ScalarOp::Sin,
        vec![ValueRef::External(g.global_key(g.outputs()[0]))],
        OperationRole::Primary,
    )[0];
    child.set_outputs(vec![s]);
    let child = Arc::new(child.build());
    let e = err(a.record_graph(&child, vec![], vec![k(6)], HashMap::new()));
    assert!(matches!(e, EagerError::NotSelfContained { .. }), "{e}");

    // An input whose trace did not produce its key.
    let mut forged = foreign.clone();
    forged.key = k(50);
    let e = err(a.record_graph(&g, vec![forged, leaf(3, 1.0, true)], vec![k(51)], HashMap::new()));
    assert_eq!(e, EagerError::TraceMismatch { input: 0 });
    // An output key given twice, or equal to an input's key.
    let sincos = {
        let mut b = GraphBuilder::with_interner(Arc::clone(&interner));
        let x = b.add_input(ScalarKey::var(0));
        let sc = b.add_operation(ScalarOp::SinCos, vec![ValueRef::Local(x)], OperationRole::Primary);
        b.set_outputs(sc.to_vec());
        Arc::new(b.build())
    };
    let e = err(a.record_graph(&sincos, vec![leaf(60, 1.0, true)], vec![k(61), k(61)], HashMap::new()));
    assert_eq!(e, EagerError::DuplicateKey { key: format!("{:?}", k(61)) });
    let e = err(a.record_graph(&sincos, vec![leaf(60, 1.0, false)], vec![k(62), k(60)], HashMap::new()));
    assert!(matches!(e, EagerError::DuplicateKey { .. }), "{e}");
    assert!(e.to_string().contains("unique per value"), "{e}");
    // A bad retained key is an error even when nothing would be recorded.
    let retained = HashMap::from([(k(99), Arc::new(0.0))]);
    let e = err(a.record_graph(&g, vec![leaf(3, 1.0, false), leaf(5, 1.0, false)], vec![k(4)], retained));
    assert!(matches!(e, EagerError::UnknownRetainedValue { .. }), "{e}");

    // Nothing was recorded by the failures: one live node (the first record).
    assert_eq!(a.stats().live_nodes + b.stats().live_nodes, 1);
    assert!(a.owns(foreign.trace.as_ref().unwrap()) && !b.owns(foreign.trace.as_ref().unwrap()));
}

/// Wraps the reference executor and breaks one hook.
struct Faulty {
    inner: ScalarExecutor,
    reject_seeds: bool,
    forget_forward: bool,
    extra_cotangent: bool,
}

impl Faulty {
    fn new() -> Self {
        Faulty { inner: ScalarExecutor::new(), reject_seeds: false, forget_forward: false, extra_cotangent: false }
    }
}

impl BackwardExecutor<ScalarOp> for Faulty {
    fn execute_forward(
        &mut self,
        graph: PrimitiveGraph<'_, ScalarOp>,
        initial: &HashMap<ValueKey<ScalarOp>, Arc<f64>>,
    ) -> HashMap<ValueKey<ScalarOp>, Arc<f64>> {
        if self.forget_forward { HashMap::new() } else { self.inner.execute_forward(graph, initial) }
    }
    fn run_transposed_linear(
        &mut self,
        linear: &LinearizedGraph<ScalarOp>,
        seeds: &[Option<Arc<f64>>],
        external: &HashMap<ValueKey<ScalarOp>, Arc<f64>>,
        ctx: &mut (),
    ) -> ADRuleResult<Vec<Option<Arc<f64>>>> {
        if self.reject_seeds && seeds.iter().flatten().any(|s| s.is_nan()) {
            return Err(EagerError::executor("seed NaN does not have the output's shape"));
        }
        let mut out = self.inner.run_transposed_linear(linear, seeds, external, ctx)?;
        if self.extra_cotangent {
            out.push(None);
        }
        Ok(out)
    }
    fn add_operands(&mut self, a: &Arc<f64>, b: &Arc<f64>) -> Arc<f64> {
        self.inner.add_operands(a, b)
    }
}

#[test]
fn backward_errors_are_values_and_leave_the_tape_usable() {
    let mut tape = Tape::new();
    let x = tape.leaf(0.4, true).unwrap();
    let s = tape.apply(ScalarOp::Sin, &[&x]).unwrap().remove(0);
    let y = tape.apply(ScalarOp::Mul, &[&s, &s]).unwrap().remove(0);
    let run = |exec: &mut Faulty, seed: f64| try_backward(&y.key, y.trace.as_ref(), Arc::new(seed), exec, &mut ());
    let eager = |r: ADRuleResult<Gradients>| match r {
        Err(ADRuleError::Eager(e)) => e,
        other => panic!("expected an eager error, got {other:?}"),
    };

    let mut exec = Faulty { reject_seeds: true, ..Faulty::new() };
    let e = eager(run(&mut exec, f64::NAN));
    assert!(e.to_string().contains("does not have the output's shape"), "{e}");

    let mut exec = Faulty { forget_forward: true, ..Faulty::new() };
    let e = eager(run(&mut exec, 1.0));
    assert!(matches!(e, EagerError::MissingPrimal { .. }) && e.to_string().contains("cos"), "{e}");

    let mut exec = Faulty { extra_cotangent: true, ..Faulty::new() };
    assert_eq!(eager(run(&mut exec, 1.0)), EagerError::CotangentCount { expected: 2, got: 3 });

    let e = eager(try_backward(&x.key, y.trace.as_ref(), Arc::new(1.0), &mut Faulty::new(), &mut ()));
    assert!(matches!(e, EagerError::UnknownOutput { .. }), "{e}");

    // The tape is intact: a correct executor now gets d(sin² x)/dx = sin 2x.
    let g = run(&mut Faulty::new(), 1.0).unwrap();
    assert!(close(*g[&x.key], 0.8f64.sin()));
}

/// An operation set whose one operation has no AD rules.
mod norule {
    use computegraph::{GraphOperation, LocalValueId, OperationRole, ValueKey};
    use scalar::ScalarKey;
    use tidu::{ADRuleError, ADRuleResult, Primitive, PrimitiveBuilder, PrimitiveValue, RuleKind};

    #[derive(Clone, Debug, PartialEq, Eq, Hash)]
    pub struct Opaque;

    impl GraphOperation for Opaque {
        type Operand = f64;
        type Context = ();
        type InputKey = ScalarKey;
        fn input_count(&self) -> usize {
            1
        }
        fn output_count(&self) -> usize {
            1
        }
    }

    impl Primitive for Opaque {
        type ADContext = ();
        fn add() -> Self {
            Opaque
        }
        tidu::rules_from_try_forms!();

        fn try_jvp_rule(
            &self,
            _: &mut impl PrimitiveBuilder<Self>,
            _: &[ValueKey<Self>],
            _: &[ValueKey<Self>],
            _: &[Option<LocalValueId>],
            _: &mut (),
        ) -> ADRuleResult<Vec<Option<LocalValueId>>> {
            Err(ADRuleError::missing(self, RuleKind::Jvp, "opaque on purpose"))
        }
        fn try_linear_transpose_rule(
            &self,
            _: &mut impl PrimitiveBuilder<Self>,
            _: &[Option<LocalValueId>],
            _: &[PrimitiveValue<Self>],
            _: &OperationRole,
            _: &mut (),
        ) -> ADRuleResult<Vec<Option<LocalValueId>>> {
            Err(ADRuleError::missing(self, RuleKind::Transpose, "opaque on purpose"))
        }
    }
}

/// Never asked to do anything: backward fails before running a graph.
struct Unused;

impl BackwardExecutor<norule::Opaque> for Unused {
    fn execute_forward(
        &mut self,
        _: PrimitiveGraph<'_, norule::Opaque>,
        _: &HashMap<ValueKey<norule::Opaque>, Arc<f64>>,
    ) -> HashMap<ValueKey<norule::Opaque>, Arc<f64>> {
        HashMap::new()
    }
    fn run_transposed_linear(
        &mut self,
        _: &LinearizedGraph<norule::Opaque>,
        _: &[Option<Arc<f64>>],
        _: &HashMap<ValueKey<norule::Opaque>, Arc<f64>>,
        _: &mut (),
    ) -> ADRuleResult<Vec<Option<Arc<f64>>>> {
        Err(EagerError::executor("not reached"))
    }
    fn add_operands(&mut self, a: &Arc<f64>, b: &Arc<f64>) -> Arc<f64> {
        Arc::new(**a + **b)
    }
}

#[test]
fn a_missing_rule_is_an_error_naming_the_operation() {
    let mut b = GraphBuilder::<norule::Opaque>::with_interner(KeyInterner::new());
    let x = b.add_input(ScalarKey::var(0));
    let y = b.add_operation(norule::Opaque, vec![ValueRef::Local(x)], OperationRole::Primary)[0];
    b.set_outputs(vec![y]);
    let g = Arc::new(b.build());
    let mut next = u32::MAX;
    let mut rec = Recorder::new(move || {
        next -= 1;
        ScalarKey::var(next)
    });
    let key = ValueKey::Input(ScalarKey::var(7));
    let input = EagerInput::leaf(ValueKey::Input(ScalarKey::var(6)), Arc::new(1.0), true);
    let out = rec.record_graph(&g, vec![input], vec![key.clone()], HashMap::new()).unwrap();
    let e = try_backward(&key, out[0].trace.as_ref(), Arc::new(1.0), &mut Unused, &mut ()).unwrap_err();
    assert!(matches!(e, ADRuleError::MissingRule { .. }), "{e}");
    assert_eq!(e.to_string(), "operation `Opaque` has no JVP rule: opaque on purpose");
}

/// `x_{k+1} = sin(x_k) · a_k` over a 10^5-long chain (a fresh leaf `a_k` per step, not
/// requiring a gradient), recorded and run backward on a small stack, against the
/// derivative by hand and graph mode's `vjp` of the same chain; then the chain is dropped
/// on the small stack.
/// Depth: 10^5, or `TIDU_EAGER_CHAIN`.
#[test]
fn a_long_chain() {
    let depth: usize = std::env::var("TIDU_EAGER_CHAIN").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let a = |k: usize| 0.5 + (k % 7) as f64 * 0.1;
    let eager = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || {
            let mut tape = Tape::new();
            let x0 = tape.leaf(0.9, true).unwrap();
            let mut x = x0.clone();
            let (mut value, mut slope) = (0.9f64, 1.0f64);
            for k in 0..depth {
                let c = tape.leaf(a(k), false).unwrap();
                let s = tape.apply(ScalarOp::Sin, &[&x]).unwrap().remove(0);
                x = tape.apply(ScalarOp::Mul, &[&s, &c]).unwrap().remove(0);
                slope *= value.cos() * a(k);
                value = value.sin() * a(k);
            }
            assert!(close(*x.value, value));
            let g = tape.backward(&x, 1.0, &mut ScalarExecutor::new()).unwrap();
            let got = *g[&x0.key];
            assert!((got - slope).abs() <= 1e-12 * (1.0 + slope.abs()), "{got} vs {slope}");
            assert_eq!(tape.recorder().stats().live_nodes, 2 * depth);
            drop((x, x0));
            assert_eq!(tape.recorder().stats().live_nodes, 0);
            got
        })
        .unwrap()
        .join()
        .unwrap();
    // Graph mode: the same chain as a spec, constants as operations.
    let mut spec = GraphSpec { inputs: 1, ..Default::default() };
    let mut x = 0;
    for k in 0..depth {
        let c = spec.push(ScalarOp::constant(a(k)), &[]);
        let s = spec.push(ScalarOp::Sin, &[x]);
        x = spec.push(ScalarOp::Mul, &[s, c]);
    }
    spec.outputs = vec![x];
    let want = graph_mode_gradient(&spec, &[0.9], &[0])[0];
    assert!((eager - want).abs() <= 1e-12 * (1.0 + want.abs()), "eager {eager}, graph mode {want}");
}

/// 10^5 record/backward steps of a 10-operation function: the memory held by the
/// recorder (rule cache, keys), the interner and the executor's program cache is the same
/// after the last step as after the first ones, and no tape node outlives its step.
#[test]
fn memory_stays_bounded_over_many_steps() {
    const STEPS: usize = 100_000;
    let mut tape = Tape::new();
    let mut exec = ScalarExecutor::new();
    let step = |tape: &mut Tape, exec: &mut ScalarExecutor, i: usize| {
        let x = tape.leaf(0.5 + (i % 100) as f64 * 0.01, true).unwrap();
        let w = tape.leaf(1.5, true).unwrap();
        let c = tape.leaf(0.25, false).unwrap();
        // f(x, w) = exp(sin(x·w) + cos(x)·c) · (x + w) · (-x) ... ten operations.
        let p = tape.apply(ScalarOp::Mul, &[&x, &w]).unwrap().remove(0);
        let s = tape.apply(ScalarOp::Sin, &[&p]).unwrap().remove(0);
        let k = tape.apply(ScalarOp::Cos, &[&x]).unwrap().remove(0);
        let kc = tape.apply(ScalarOp::Mul, &[&k, &c]).unwrap().remove(0);
        let t = tape.apply(ScalarOp::Add, &[&s, &kc]).unwrap().remove(0);
        let e = tape.apply(ScalarOp::Exp, &[&t]).unwrap().remove(0);
        let sum = tape.apply(ScalarOp::Add, &[&x, &w]).unwrap().remove(0);
        let q = tape.apply(ScalarOp::Mul, &[&e, &sum]).unwrap().remove(0);
        let n = tape.apply(ScalarOp::Neg, &[&x]).unwrap().remove(0);
        let y = tape.apply(ScalarOp::Mul, &[&q, &n]).unwrap().remove(0);
        let g = tape.backward(&y, 1.0, exec).unwrap();
        assert_eq!(g.len(), 2);
        assert!(g.values().all(|v| v.is_finite()));
    };
    let footprint = |tape: &Tape, exec: &ScalarExecutor| {
        let interner = tape.interner();
        (
            tape.recorder().heap_bytes(),
            interner.heap_bytes(),
            interner.value_count(),
            interner.operation_count(),
            exec.cached_programs(),
            tape.recorder().stats().cached_rules,
        )
    };
    for i in 0..100 {
        step(&mut tape, &mut exec, i);
    }
    let warm = footprint(&tape, &exec);
    for i in 100..STEPS {
        step(&mut tape, &mut exec, i);
    }
    let end = footprint(&tape, &exec);
    assert_eq!(warm, end, "(recorder bytes, interner bytes, interned values, interned operations, programs, rules)");
    assert_eq!(tape.recorder().stats().live_nodes, 0);
    let stats = tape.recorder().stats();
    assert_eq!(stats.rule_hits + stats.rule_misses, 10 * STEPS as u64);
    eprintln!(
        "eager memory after {STEPS} steps: recorder {} B, interner {} B ({} values, {} operations), {} rules, {} programs",
        end.0, end.1, end.2, end.3, end.5, end.4
    );
}

#[test]
fn a_key_source_that_repeats_itself_is_an_error() {
    let mut rec = Recorder::<ScalarOp>::new(|| ScalarKey::var(999));
    let g = mul_graph(&KeyInterner::new(), 0, 1);
    let r = rec.record_graph(
        &g,
        vec![leaf(0, 2.0, true), leaf(1, 5.0, true)],
        vec![ValueKey::Input(ScalarKey::var(2))],
        HashMap::new(),
    );
    match r {
        Err(ADRuleError::Eager(EagerError::KeySourceRepeated { key })) => assert_eq!(key, "x999"),
        other => panic!("expected KeySourceRepeated, got {other:?}"),
    }
    assert_eq!(rec.stats().live_nodes, 0);
}

/// Two composites with the same operations but different operand positions share a
/// recorder: each must get its own rule (operand positions are part of the cache key).
#[test]
fn operand_positions_are_part_of_the_rule_key() {
    let mut tape = Tape::new();
    let graph = |swap: bool, tape: &Tape| {
        // mul(sin(in0), in1), or mul(sin(in1), in0)
        let mut b = GraphBuilder::with_interner(Arc::clone(tape.interner()));
        let i0 = b.add_input(ScalarKey::var(0));
        let i1 = b.add_input(ScalarKey::var(1));
        let (p, q) = if swap { (i1, i0) } else { (i0, i1) };
        let s = b.add_operation(ScalarOp::Sin, vec![ValueRef::Local(p)], OperationRole::Primary)[0];
        let y = b.add_operation(ScalarOp::Mul, vec![ValueRef::Local(s), ValueRef::Local(q)], OperationRole::Primary)[0];
        b.set_outputs(vec![y]);
        Arc::new(b.build())
    };
    let (g1, g2) = (graph(false, &tape), graph(true, &tape));
    let (a, c) = (0.4f64, 1.3f64);
    let mut exec = ScalarExecutor::new();
    for (g, da, dc) in [(&g1, a.cos() * c, a.sin()), (&g2, c.sin(), a * c.cos())] {
        let x = tape.leaf(a, true).unwrap();
        let y = tape.leaf(c, true).unwrap();
        let out = tape.apply_graph(g, &[&x, &y], false).unwrap().remove(0);
        let grads = tape.backward(&out, 1.0, &mut exec).unwrap();
        assert!(
            close(*grads[&x.key], da) && close(*grads[&y.key], dc),
            "{} {} vs {da} {dc}",
            grads[&x.key],
            grads[&y.key]
        );
    }
    assert_eq!(tape.recorder().stats().rule_misses, 2);
}

/// A composite whose intermediate is retained by its graph key needs no replay.
#[test]
fn an_intermediate_retained_by_its_graph_key_is_used() {
    let interner = KeyInterner::new();
    let mut b = GraphBuilder::with_interner(Arc::clone(&interner));
    let i = b.add_input(ScalarKey::var(0));
    let e = b.add_operation(ScalarOp::Exp, vec![ValueRef::Local(i)], OperationRole::Primary)[0];
    let y = b.add_operation(ScalarOp::Mul, vec![ValueRef::Local(e), ValueRef::Local(i)], OperationRole::Primary)[0];
    b.set_outputs(vec![y]);
    let g = Arc::new(b.build());
    let x = 0.6f64;
    for keep in [true, false] {
        let mut rec = recorder();
        let mut exec = ScalarExecutor::new();
        let retained = if keep { HashMap::from([(g.global_key(e), Arc::new(x.exp()))]) } else { HashMap::new() };
        let key = ValueKey::Input(ScalarKey::var(1));
        let out = rec.record_graph(&g, vec![leaf(0, x, true)], vec![key.clone()], retained).unwrap();
        let grads = try_backward(&key, out[0].trace.as_ref(), Arc::new(1.0), &mut exec, &mut ()).unwrap();
        assert!(close(*grads[&ValueKey::Input(ScalarKey::var(0))], x.exp() * (1.0 + x)));
        assert_eq!(exec.forward_calls(), if keep { 0 } else { 1 }, "kept: {keep}");
    }
}

/// A cache of one rule, two structures alternating: every step rebuilds a rule, and the
/// rebuilt graphs reuse their first keys, so the interner does not grow.
#[test]
fn rebuilding_evicted_rules_does_not_grow_the_interner() {
    let mut next = u32::MAX;
    let mut rec = Recorder::<ScalarOp>::with_rule_capacity(
        move || {
            next -= 1;
            ScalarKey::var(next + 1)
        },
        1,
    );
    let interner = KeyInterner::new();
    let unary = |op| {
        let mut b = GraphBuilder::with_interner(Arc::clone(&interner));
        let x = b.add_input(ScalarKey::var(0));
        let y = b.add_operation(op, vec![ValueRef::Local(x)], OperationRole::Primary)[0];
        b.set_outputs(vec![y]);
        Arc::new(b.build())
    };
    let (sin, exp) = (unary(ScalarOp::Sin), unary(ScalarOp::Exp));
    let mut exec = ScalarExecutor::new();
    let mut counts = Vec::new();
    for step in 0..40u32 {
        let g = if step % 2 == 0 { &sin } else { &exp };
        let key = ValueKey::Input(ScalarKey::var(1));
        let out = rec.record_graph(g, vec![leaf(0, 0.5, true)], vec![key.clone()], HashMap::new()).unwrap();
        try_backward(&key, out[0].trace.as_ref(), Arc::new(1.0), &mut exec, &mut ()).unwrap();
        counts.push((interner.value_count(), interner.operation_count()));
    }
    assert_eq!(rec.stats().rule_misses, 40);
    assert!(counts[2..].iter().all(|c| *c == counts[1]), "{counts:?}");
}
