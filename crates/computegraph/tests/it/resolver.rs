//! User resolvers: `resolve_with` gathers the fragments a `Resolver` supplies for keys
//! that the roots and their parents leave undefined, and the rest of the pipeline runs
//! over them unchanged. Expected values are closed forms of the graphs built here.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use computegraph::{
    Graph, GraphBuilder, GraphError, KeyInterner, LocalValueId, OperationRole::Primary, Resolver, ValueDef, ValueKey,
    ValueRef::External, ValueRef::Local, resolve, resolve_with, try_materialize_merge, try_resolve_with,
};
use scalar::{ScalarKey, ScalarOp};

use crate::support::{compile_checked, eval_vars, fresh};

/// A fragment store: the declared outputs of the graphs put in it, by key. It counts the
/// questions it is asked.
#[derive(Default)]
struct Store {
    values: HashMap<ValueKey<ScalarOp>, (Arc<Graph<ScalarOp>>, LocalValueId)>,
    asked: AtomicUsize,
}

impl Store {
    fn insert(&mut self, graph: &Arc<Graph<ScalarOp>>) {
        for &v in graph.outputs() {
            self.values.insert(graph.global_key(v), (Arc::clone(graph), v));
        }
    }
}

impl Resolver<ScalarOp> for Store {
    fn resolve_value(&self, key: &ValueKey<ScalarOp>) -> Option<ValueDef<'_, ScalarOp>> {
        self.asked.fetch_add(1, Relaxed);
        let (graph, value) = self.values.get(key)?;
        ValueDef::local(graph, *value)
    }
}

/// A resolver that answers every key with one output of one graph, right or wrong.
struct Always(Arc<Graph<ScalarOp>>, LocalValueId);

impl Resolver<ScalarOp> for Always {
    fn resolve_value(&self, _: &ValueKey<ScalarOp>) -> Option<ValueDef<'_, ScalarOp>> {
        ValueDef::local(&self.0, self.1)
    }
}

/// `x0 → op`, declared as the output; returns the graph and the output's key.
fn unary(
    interner: &Arc<KeyInterner<ScalarOp>>,
    op: ScalarOp,
    input: u32,
) -> (Arc<Graph<ScalarOp>>, ValueKey<ScalarOp>) {
    let mut b = GraphBuilder::with_interner(Arc::clone(interner));
    let x = b.add_input(ScalarKey::var(input));
    let y = b.add_operation(op, vec![Local(x)], Primary)[0];
    b.set_outputs(vec![y]);
    let g = Arc::new(b.build());
    let k = g.global_key(y);
    (g, k)
}

/// `key · x0`, with `key` external and no parent; returns the graph and its output's key.
fn times_x(
    interner: &Arc<KeyInterner<ScalarOp>>,
    key: ValueKey<ScalarOp>,
) -> (Arc<Graph<ScalarOp>>, ValueKey<ScalarOp>) {
    let mut b = GraphBuilder::with_interner(Arc::clone(interner));
    let x = b.add_input(ScalarKey::var(0));
    let y = b.add_operation(ScalarOp::Mul, vec![External(key), Local(x)], Primary)[0];
    b.set_outputs(vec![y]);
    let g = Arc::new(b.build());
    let k = g.global_key(y);
    (g, k)
}

#[test]
fn a_store_supplies_a_fragment_that_is_not_a_parent() {
    let interner = fresh();
    let (sin, sin_x) = unary(&interner, ScalarOp::Sin, 0);
    let (root, y) = times_x(&interner, sin_x.clone());
    let mut store = Store::default();
    store.insert(&sin);

    // Without the store, the root alone cannot be materialized.
    let alone = try_materialize_merge(&resolve(vec![Arc::clone(&root)]), std::slice::from_ref(&y));
    assert!(matches!(alone, Err(GraphError::UnresolvedKey { .. })), "{alone:?}");

    let view = resolve_with(vec![Arc::clone(&root)], &store);
    assert_eq!(store.asked.load(Relaxed), 1);
    assert_eq!(view.roots().len(), 1);
    assert_eq!(view.graphs().len(), 2);
    assert!(Arc::ptr_eq(&view.graphs()[1], &sin));
    match view.resolve_value(&sin_x) {
        Some(ValueDef::Operation { graph, output_slot: 0, .. }) => assert!(Arc::ptr_eq(graph, &sin)),
        other => panic!("sin(x) resolves to {other:?}"),
    }
    let (m, program) = compile_checked(&view, std::slice::from_ref(&y));
    assert_eq!(m.operation_count(), 2);
    for x in [-1.25, 0.0, 0.5, 3.0] {
        assert_eq!(eval_vars(&program, &[x]), vec![x.sin() * x]);
    }

    // The specification's shape, `Arc<dyn Resolver>`, is a resolver too; so is a view.
    let shared: Arc<dyn Resolver<ScalarOp> + Send + Sync> = Arc::new(store);
    assert_eq!(resolve_with(vec![Arc::clone(&root)], &shared).graphs().len(), 2);
    let by_view = resolve_with(vec![Arc::clone(&root)], &resolve(vec![sin]));
    assert_eq!(by_view.graphs().len(), 2);
}

#[test]
fn a_supplied_fragment_brings_its_parents_and_keys_defined_in_the_view_are_not_asked() {
    let interner = fresh();
    let (exp, exp_x) = unary(&interner, ScalarOp::Exp, 0);
    // neg(exp(x)), with exp as its parent; only it goes into the store.
    let mut b = GraphBuilder::with_interner(Arc::clone(&interner));
    b.add_parent(Arc::clone(&exp));
    let n = b.add_operation(ScalarOp::Neg, vec![External(exp_x.clone())], Primary)[0];
    b.set_outputs(vec![n]);
    let neg = Arc::new(b.build());
    let neg_key = neg.global_key(n);
    let mut store = Store::default();
    store.insert(&neg);

    // exp(x) · x and neg(exp(x)) · x added: the root reads exp(x) twice.
    let mut b = GraphBuilder::with_interner(Arc::clone(&interner));
    let x = b.add_input(ScalarKey::var(0));
    let p = b.add_operation(ScalarOp::Mul, vec![External(neg_key), Local(x)], Primary)[0];
    let q = b.add_operation(ScalarOp::Mul, vec![External(exp_x.clone()), Local(x)], Primary)[0];
    let r = b.add_operation(ScalarOp::Mul, vec![External(exp_x), Local(x)], Primary)[0];
    let s = b.add_operation(ScalarOp::Add, vec![Local(p), Local(q)], Primary)[0];
    let t = b.add_operation(ScalarOp::Add, vec![Local(s), Local(r)], Primary)[0];
    let root = Arc::new(b.build());

    let view = resolve_with(vec![Arc::clone(&root)], &store);
    // The root's first external is asked; exp(x) is then defined by neg's parent, so
    // neither of the root's two references to it (nor neg's own) is asked.
    assert_eq!(store.asked.load(Relaxed), 1);
    assert_eq!(view.graphs().len(), 3);
    let (_, program) = compile_checked(&view, &[root.global_key(t)]);
    for x in [-0.5f64, 0.75, 2.0] {
        // -e^x·x + e^x·x + e^x·x, in that order of adds.
        let e = x.exp();
        assert_eq!(eval_vars(&program, &[x]), vec![(-e * x + e * x) + e * x]);
    }
}

/// `N` fragments; fragment 0 is `x + x`, fragment `i` is `y_{i-1} + x`, each naming no
/// parent, so only the store reaches them: the last is `(N + 1)·x`.
#[test]
fn a_chain_of_fragments_reachable_only_through_the_resolver() {
    const N: usize = 10_000;
    let result = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(|| {
            let interner = fresh();
            let mut store = Store::default();
            let mut previous: Option<ValueKey<ScalarOp>> = None;
            let mut last = None;
            for _ in 0..N {
                let mut b = GraphBuilder::with_interner(Arc::clone(&interner));
                let x = b.add_input(ScalarKey::var(0));
                let operand = previous.take().map_or(Local(x), External);
                let y = b.add_operation(ScalarOp::Add, vec![operand, Local(x)], Primary)[0];
                b.set_outputs(vec![y]);
                let g = Arc::new(b.build());
                previous = Some(g.global_key(y));
                store.insert(&g);
                last = Some(g);
            }
            let root = last.expect("N > 0");
            let view = try_resolve_with(vec![Arc::clone(&root)], &store).expect("one interner");
            let asked = store.asked.load(Relaxed);
            let graphs = view.graphs().len();
            let (m, program) = compile_checked(&view, &[previous.expect("N > 0")]);
            (asked, graphs, m.operation_count(), eval_vars(&program, &[0.5]))
        })
        .expect("spawn")
        .join()
        .expect("small-stack thread");
    let (asked, graphs, operations, values) = result;
    assert_eq!(asked, N - 1, "each fragment but the root is asked for once");
    assert_eq!(graphs, N);
    assert_eq!(operations, N);
    assert_eq!(values, vec![(N + 1) as f64 * 0.5]);
}

#[test]
fn a_key_nobody_defines_fails_in_materialize_as_without_a_resolver() {
    let interner = fresh();
    let (_, sin_x) = unary(&interner, ScalarOp::Sin, 0);
    let (root, y) = times_x(&interner, sin_x);
    let store = Store::default();

    let view = try_resolve_with(vec![Arc::clone(&root)], &store).expect("an unknown key is not an error here");
    assert_eq!(store.asked.load(Relaxed), 1);
    assert_eq!(view.graphs().len(), 1);
    let with = try_materialize_merge(&view, std::slice::from_ref(&y)).unwrap_err();
    let without = try_materialize_merge(&resolve(vec![root]), std::slice::from_ref(&y)).unwrap_err();
    assert!(matches!(with, GraphError::UnresolvedKey { .. }), "{with}");
    assert_eq!(with, without);
}

#[test]
fn a_graph_from_another_interner_is_an_error_naming_the_key() {
    let (ours, theirs) = (fresh(), fresh());
    let (_, sin_x) = unary(&ours, ScalarOp::Sin, 0);
    let (root, _) = times_x(&ours, sin_x.clone());
    let (foreign, foreign_key) = unary(&theirs, ScalarOp::Sin, 0);
    let ValueKey::Derived { operation, .. } = &foreign_key else { unreachable!("sin is derived") };
    let foreign_out = foreign.outputs()[0];
    assert!(operation.interner_id() != ours.id());

    let err = try_resolve_with(vec![root], &Always(foreign, foreign_out)).unwrap_err();
    let GraphError::BadResolution { key, reason } = &err else { panic!("{err:?}") };
    let ValueKey::Derived { operation: ours_op, .. } = &sin_x else { unreachable!() };
    assert!(key.contains(&format!("{:?}", ours_op.id())), "{key}");
    assert!(reason.contains(&format!("#{}", theirs.id())) && reason.contains(&format!("#{}", ours.id())), "{reason}");
    assert!(err.to_string().contains("resolver"), "{err}");
}

#[test]
fn an_answer_that_does_not_define_the_key_is_an_error() {
    let interner = fresh();
    let (_, sin_x) = unary(&interner, ScalarOp::Sin, 0);
    let (root, _) = times_x(&interner, sin_x);
    // A graph on the right interner, but its output is cos(x), not sin(x).
    let (cos, _) = unary(&interner, ScalarOp::Cos, 0);
    let cos_out = cos.outputs()[0];
    let err = try_resolve_with(vec![Arc::clone(&root)], &Always(Arc::clone(&cos), cos_out)).unwrap_err();
    assert!(matches!(&err, GraphError::BadResolution { reason, .. } if reason.contains("does not define")), "{err}");

    // An input is no answer for an operation's output either.
    let x = cos.inputs()[0];
    let err = try_resolve_with(vec![root], &Always(cos, x)).unwrap_err();
    assert!(matches!(&err, GraphError::BadResolution { reason, .. } if reason.contains("input")), "{err}");
}

#[test]
fn a_view_as_resolver_answers_as_its_inherent_method() {
    let interner = fresh();
    let (sin, sin_x) = unary(&interner, ScalarOp::Sin, 0);
    let view = resolve(vec![sin]);
    fn ask<R: Resolver<ScalarOp> + ?Sized>(r: &R, key: &ValueKey<ScalarOp>) -> String {
        format!("{:?}", r.resolve_value(key))
    }
    let x = ValueKey::Input(ScalarKey::var(0));
    for key in [&sin_x, &x] {
        assert_eq!(ask(&view, key), format!("{:?}", view.resolve_value(key)));
    }
    assert!(view.resolve_value(&x).is_some());
    assert!(ask(&view, &sin_x).starts_with("Some(Operation"));
}
