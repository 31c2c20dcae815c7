//! The worked example of `docs/SPEC.md` §4.4: f(x) = (x+x)·x, f' = 4x, f'' = 4, and exactly
//! two accumulation adds in the transposed graph.

use std::collections::HashMap;

use computegraph::resolve;
use scalar::{ScalarKey, ScalarOp};
use tidu::{linear_transpose, linearize};

use crate::support::{count_ops, eval, worked_example};

#[test]
fn linearize_emits_the_seed_graph_and_evaluates_to_4x() {
    let (f, y) = worked_example();
    let x = ScalarKey::var(0);
    let lin = linearize(&resolve(vec![f.clone()]), &[f.global_key(y)], std::slice::from_ref(&x));
    // t1 = add t0 t0; t2 = mul p1 t0; t3 = mul t1 p0; t4 = add t2 t3
    assert_eq!(lin.graph().operation_count(), 4, "{}", lin.graph());
    assert_eq!(count_ops(lin.graph(), ScalarOp::Add), 2);
    assert_eq!(count_ops(lin.graph(), ScalarOp::Mul), 2);
    for xv in [-2.0, 0.5, 3.0] {
        let dx = lin.tangent_inputs()[0].0.clone();
        let values = HashMap::from([(x.clone(), xv), (dx, 1.0)]);
        assert_eq!(eval(&lin, &values), vec![Some(4.0 * xv)]);
    }
}

#[test]
fn transpose_has_exactly_two_accumulation_adds_and_gives_4x() {
    let (f, y) = worked_example();
    let x = ScalarKey::var(0);
    let lin = linearize(&resolve(vec![f.clone()]), &[f.global_key(y)], std::slice::from_ref(&x));
    let t = linear_transpose(&lin);
    // c1 = mul p0 c0; c2 = mul p1 c0; c3 = add c2 c1; c4 = add c3 c1
    assert_eq!(count_ops(t.graph(), ScalarOp::Add), 2, "{}", t.graph());
    assert_eq!(count_ops(t.graph(), ScalarOp::Mul), 2, "{}", t.graph());
    for xv in [-2.0, 0.5, 3.0] {
        let seed = t.tangent_inputs()[0].0.clone();
        let values = HashMap::from([(x.clone(), xv), (seed, 1.0)]);
        assert_eq!(eval(&t, &values), vec![Some(4.0 * xv)]);
    }
}

#[test]
fn second_derivative_is_4_in_every_nesting() {
    let (f, y) = worked_example();
    let x = ScalarKey::var(0);
    let view = resolve(vec![f.clone()]);
    let lin = linearize(&view, &[f.global_key(y)], std::slice::from_ref(&x));
    let dx = lin.tangent_inputs()[0].0.clone();
    let xv = 1.7;

    // Forward over forward: linearize the JVP again w.r.t. x; the second-order output
    // is f''·dx·dx2.
    let fof = linearize(
        &resolve(vec![lin.graph().clone()]),
        &[lin.tangent_output_keys()[0].clone().unwrap()],
        std::slice::from_ref(&x),
    );
    let dx2 = fof.tangent_inputs()[0].0.clone();
    let v = HashMap::from([(x.clone(), xv), (dx.clone(), 1.0), (dx2.clone(), 1.0)]);
    assert_eq!(eval(&fof, &v), vec![Some(4.0)]);

    // Forward over reverse (`docs/SPEC.md` §5.1): linearize the transposed graph w.r.t. x.
    let t = linear_transpose(&lin);
    let ct = t.tangent_inputs()[0].0.clone();
    let t_out = t.tangent_output_keys()[0].clone().unwrap();
    let for_ =
        linearize(&resolve(vec![f.clone(), t.graph().clone()]), std::slice::from_ref(&t_out), std::slice::from_ref(&x));
    let dx3 = for_.tangent_inputs()[0].0.clone();
    let v = HashMap::from([(x.clone(), xv), (ct.clone(), 1.0), (dx3, 1.0)]);
    assert_eq!(eval(&for_, &v), vec![Some(4.0)]);

    // Reverse over forward: transpose the FoF graph's dx2-linear part.
    let rof = linear_transpose(&fof);
    let seed = rof.tangent_inputs()[0].0.clone();
    let v = HashMap::from([(x.clone(), xv), (dx, 1.0), (seed, 1.0)]);
    assert_eq!(eval(&rof, &v), vec![Some(4.0)]);

    // Reverse over reverse: transpose the FoR graph.
    let ror = linear_transpose(&for_);
    let seed = ror.tangent_inputs()[0].0.clone();
    let v = HashMap::from([(x, xv), (ct, 1.0), (seed, 1.0)]);
    assert_eq!(eval(&ror, &v), vec![Some(4.0)]);
}
