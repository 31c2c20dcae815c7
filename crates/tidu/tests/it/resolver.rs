//! The transforms over a user's resolver: a function whose fragments only a fragment
//! store reaches (no graph names them as parents) is linearized, transposed and
//! differentiated twice, against closed forms.

use std::collections::HashMap;
use std::sync::Arc;

use computegraph::{
    Graph, GraphBuilder, GraphError, KeyInterner, LocalValueId, OperationRole::Primary, Resolver, ValueDef, ValueKey,
    ValueRef::External, ValueRef::Local, resolve, resolve_with,
};
use scalar::{ScalarKey, ScalarOp};
use tidu::{ADRuleError, linear_transpose, linearize, try_linearize};

use crate::support::eval;

/// Fragments by the keys of their declared outputs.
#[derive(Default)]
struct Store(HashMap<ValueKey<ScalarOp>, (Arc<Graph<ScalarOp>>, LocalValueId)>);

impl Store {
    fn insert(&mut self, graph: &Arc<Graph<ScalarOp>>) {
        for &v in graph.outputs() {
            self.0.insert(graph.global_key(v), (Arc::clone(graph), v));
        }
    }
}

impl Resolver<ScalarOp> for Store {
    fn resolve_value(&self, key: &ValueKey<ScalarOp>) -> Option<ValueDef<'_, ScalarOp>> {
        let (graph, value) = self.0.get(key)?;
        ValueDef::local(graph, *value)
    }
}

/// One operation on one operand, declared as the output; returns the graph and its key.
fn fragment(
    interner: &Arc<KeyInterner<ScalarOp>>,
    op: ScalarOp,
    operand: impl FnOnce(&mut GraphBuilder<ScalarOp>) -> computegraph::ValueRef<ScalarOp>,
) -> (Arc<Graph<ScalarOp>>, ValueKey<ScalarOp>) {
    let mut b = GraphBuilder::with_interner(Arc::clone(interner));
    let a = operand(&mut b);
    let y = b.add_operation(op, vec![a], Primary)[0];
    b.set_outputs(vec![y]);
    let g = Arc::new(b.build());
    let k = g.global_key(y);
    (g, k)
}

/// `f(x) = x·e^{sin x}` in three fragments: `sin x` and `e^{sin x}` only in the store,
/// and the root `x · e^{sin x}`, which names no parent. Returns the root's output key.
fn stored_function(
    interner: &Arc<KeyInterner<ScalarOp>>,
    store: &mut Store,
) -> (Arc<Graph<ScalarOp>>, ValueKey<ScalarOp>) {
    let (sin, sin_x) = fragment(interner, ScalarOp::Sin, |b| Local(b.add_input(ScalarKey::var(0))));
    let (exp, exp_sin_x) = fragment(interner, ScalarOp::Exp, |_| External(sin_x));
    store.insert(&sin);
    store.insert(&exp);
    let mut b = GraphBuilder::with_interner(Arc::clone(interner));
    let x = b.add_input(ScalarKey::var(0));
    let y = b.add_operation(ScalarOp::Mul, vec![Local(x), External(exp_sin_x)], Primary)[0];
    b.set_outputs(vec![y]);
    let root = Arc::new(b.build());
    let y = root.global_key(y);
    (root, y)
}

fn close(found: f64, expected: f64) -> bool {
    (found - expected).abs() <= 1e-12 * expected.abs().max(1.0)
}

#[test]
fn linearize_and_transpose_a_function_whose_fragments_only_the_resolver_reaches() {
    let interner = KeyInterner::new();
    let mut store = Store::default();
    let (root, y) = stored_function(&interner, &mut store);
    let x = ScalarKey::var(0);

    // The root alone does not define e^{sin x}.
    let alone = try_linearize(&resolve(vec![Arc::clone(&root)]), std::slice::from_ref(&y), std::slice::from_ref(&x));
    assert!(matches!(alone, Err(ADRuleError::Graph(GraphError::UnresolvedKey { .. }))), "{alone:?}");

    let view = resolve_with(vec![root], &store);
    assert_eq!(view.graphs().len(), 3);
    let lin = linearize(&view, std::slice::from_ref(&y), std::slice::from_ref(&x));
    let t = linear_transpose(&lin);
    let dx = lin.tangent_inputs()[0].0.clone();
    let seed = t.tangent_inputs()[0].0.clone();
    for xv in [-1.5f64, -0.25, 0.0, 0.8, 2.0] {
        // f'(x) = e^{sin x}·(1 + x cos x)
        let expected = xv.sin().exp() * (1.0 + xv * xv.cos());
        let [Some(jvp)] = eval(&lin, &HashMap::from([(x.clone(), xv), (dx.clone(), 1.0)]))[..] else {
            panic!("one tangent output")
        };
        assert!(close(jvp, expected), "jvp at {xv}: {jvp} vs {expected}");
        let [Some(vjp)] = eval(&t, &HashMap::from([(x.clone(), xv), (seed.clone(), 1.0)]))[..] else {
            panic!("one cotangent output")
        };
        assert!(close(vjp, expected), "vjp at {xv}: {vjp} vs {expected}");
    }
}

#[test]
fn the_derivative_of_a_resolved_function_nests_like_any_other() {
    let interner = KeyInterner::new();
    let mut store = Store::default();
    let (root, y) = stored_function(&interner, &mut store);
    let x = ScalarKey::var(0);
    let lin = linearize(&resolve_with(vec![root], &store), std::slice::from_ref(&y), std::slice::from_ref(&x));
    // The linear graph lists the resolved fragments as parents: a plain `resolve` of it
    // is self-sufficient, so forward over forward needs no resolver.
    let dy = lin.tangent_output_keys()[0].clone().expect("f depends on x");
    let fof = linearize(&resolve(vec![lin.graph().clone()]), &[dy], std::slice::from_ref(&x));
    let dx = lin.tangent_inputs()[0].0.clone();
    let dx2 = fof.tangent_inputs()[0].0.clone();
    for xv in [-1.0f64, 0.3, 1.7] {
        // f''(x) = e^{sin x}·(cos x·(1 + x cos x) + cos x − x sin x)
        let (s, c) = xv.sin_cos();
        let expected = s.exp() * (c * (1.0 + xv * c) + c - xv * s);
        let values = HashMap::from([(x.clone(), xv), (dx.clone(), 1.0), (dx2.clone(), 1.0)]);
        let [Some(second)] = eval(&fof, &values)[..] else { panic!("one second-order output") };
        assert!(close(second, expected), "f'' at {xv}: {second} vs {expected}");
    }
}
