//! `LinearizedGraph::eval_standalone`: a JVP and its transpose, each compiled on its own
//! with the primal values it reads bound by key, give what `DerivativeProgram` gives by
//! recomputing the primal graph, on random graphs of one to three fragments.

use std::collections::HashMap;
use std::sync::Arc;

use computegraph::{GraphError, KeyInterner, LocalValueId, ValueKey, materialize_merge, resolve};
use proptest::prelude::*;
use scalar::{ScalarKey, ScalarOp};
use tidu::{DerivativeProgram, LinearizedGraph, linear_transpose, linearize};

use crate::properties::{make_spec, node_choice};

/// Every value of every graph the map's view holds but the map's own, by key: what a
/// runtime holding the primal computation (and the linearization's own primal values)
/// would supply. Input keys are bound from `inputs`, other input keys to zero.
fn held_values(lin: &LinearizedGraph<ScalarOp>, inputs: &HashMap<ScalarKey, f64>) -> HashMap<ValueKey<ScalarOp>, f64> {
    let view = resolve(vec![lin.graph().clone()]);
    let keys: Vec<ValueKey<ScalarOp>> = (view.graphs().iter())
        .filter(|g| !Arc::ptr_eq(g, lin.graph()))
        .flat_map(|g| (0..g.value_count()).map(|v| g.global_key(LocalValueId::new(v))))
        .collect();
    let program = computegraph::compile(&materialize_merge(&view, &keys));
    // The tangent inputs of a map that a transposed one reads from are bound to zero: its
    // active values are not read (a transposed graph reads only primal values).
    let values = program.try_eval_by_key(&mut (), |k| inputs.get(k).or(Some(&0.0))).expect("inputs bound");
    keys.into_iter().zip(values).collect()
}

/// `eval_standalone` of `lin` with `tangents`, against its `DerivativeProgram`.
fn check(lin: &LinearizedGraph<ScalarOp>, tangents: &[f64], inputs: &HashMap<ScalarKey, f64>) {
    let mut bound = inputs.clone();
    bound.extend(lin.tangent_input_keys().cloned().zip(tangents.iter().copied()));
    let expected = DerivativeProgram::new(lin).unwrap().eval(&mut (), |k| bound.get(k)).unwrap();
    let held = held_values(lin, &bound);
    let refs: Vec<&f64> = tangents.iter().collect();
    let got = lin
        .eval_standalone(&mut (), &refs, |k| match k {
            ValueKey::Input(i) => inputs.get(i),
            derived => held.get(derived),
        })
        .unwrap();
    assert_eq!(got.len(), expected.len());
    for (g, e) in got.iter().zip(&expected) {
        match (g, e) {
            (Some(g), Some(e)) => assert!((g - e).abs() <= 1e-12 * (1.0 + e.abs()), "{g} != {e}\n{lin}"),
            (None, None) => {}
            _ => panic!("zero pattern differs: {got:?} against {expected:?}\n{lin}"),
        }
    }
    // Twice (the program compiled on the first call is reused), and on a clone.
    assert_eq!(
        lin.clone()
            .eval_standalone(&mut (), &refs, |k| match k {
                ValueKey::Input(i) => inputs.get(i),
                derived => held.get(derived),
            })
            .unwrap(),
        got
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn standalone_eval_matches_the_derivative_program(
        n_inputs in 1u32..=3,
        nodes in prop::collection::vec(node_choice(), 1..=10),
        outs in prop::collection::vec(any::<u32>(), 0..=2),
        fragments in 1usize..=3,
        values in prop::collection::vec(0.5f64..1.5, 3),
        tangents in prop::collection::vec(-1.0f64..1.0, 8),
    ) {
        let spec = make_spec(n_inputs, &nodes, &outs);
        let built = spec.build(&KeyInterner::new(), fragments).expect("valid spec");
        let inputs: HashMap<ScalarKey, f64> = (0..n_inputs).map(|i| (ScalarKey::var(i), values[i as usize])).collect();
        let wrt: Vec<ScalarKey> = (0..n_inputs).map(ScalarKey::var).collect();
        let lin = linearize(&resolve(built.graphs.clone()), &built.outputs, &wrt);
        check(&lin, &tangents[..lin.tangent_inputs().len()], &inputs);
        let vjp = linear_transpose(&lin);
        check(&vjp, &tangents[..vjp.tangent_inputs().len()], &inputs);
    }
}

/// A primal value the caller does not hold, and a wrong number of tangents, are errors.
#[test]
fn missing_primal_values_and_wrong_tangent_counts_are_errors() {
    let mut b = crate::support::builder();
    let x = b.add_input(ScalarKey::var(0));
    let y = crate::support::op(&mut b, ScalarOp::Sin, &[x]);
    let f = Arc::new(b.build());
    let lin = linearize(&resolve(vec![f.clone()]), &[f.global_key(y)], &[ScalarKey::var(0)]);
    let vjp = linear_transpose(&lin);
    let err = vjp.eval_standalone(&mut (), &[&1.0], |_| None).unwrap_err();
    assert!(matches!(err, GraphError::UnboundInput { .. }), "{err}");
    let err = vjp.eval_standalone(&mut (), &[], |_| Some(&1.0)).unwrap_err();
    assert_eq!(err, GraphError::InputCountMismatch { expected: 1, found: 0 });
}
