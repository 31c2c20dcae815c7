//! The worked example of `docs/SPEC.md` §4.4, f(x) = (x + x)·x, through JVP, VJP, FoF, FoR,
//! RoF and RoR; an HVP of exp(a·x); and primal computations in rules sharing the primal
//! graph's nodes.

use std::collections::HashMap;
use std::sync::Arc;

use computegraph::{
    Graph, GraphBuilder, OperationRole::Primary, ValueKey, ValueRef::Local, materialize_merge, resolve,
};
use spec_user::{Key, Op};
use tidu::{linear_transpose, linearize};

use crate::{eval_keys, eval_linear, input_key, output_key};

/// f(x) = (x + x)·x, as `docs/SPEC.md` §4.4 builds it.
fn worked() -> (Arc<Graph<Op>>, ValueKey<Op>) {
    let mut b = GraphBuilder::<Op>::new();
    let x = b.add_input(Key::User(0));
    let p1 = b.add_operation(Op::Add, vec![Local(x), Local(x)], Primary)[0];
    let p2 = b.add_operation(Op::Mul, vec![Local(p1), Local(x)], Primary)[0];
    b.set_outputs(vec![p2]);
    let g = Arc::new(b.build());
    let y = g.global_key(p2);
    (g, y)
}

fn count(g: &Graph<Op>, op: Op) -> usize {
    g.operations().filter(|o| *o.operation() == op).count()
}

#[test]
fn worked_example_in_every_pipeline() {
    let (f, y) = worked();
    let x = Key::User(0);
    let at = |extra: &[(Key, f64)]| -> HashMap<Key, f64> {
        let mut m = HashMap::from([(x.clone(), 3.0)]);
        m.extend(extra.iter().cloned());
        m
    };
    assert_eq!(eval_keys(vec![f.clone()], std::slice::from_ref(&y), &at(&[])), vec![18.0]);

    // JVP: f'(3)·dx = 12·dx.
    let l1 = linearize(&resolve(vec![f.clone()]), std::slice::from_ref(&y), std::slice::from_ref(&x));
    let dx = input_key(&l1, 0);
    assert_eq!(eval_linear(&l1, &at(&[(dx.clone(), 1.0)])), vec![Some(12.0)]);

    // VJP: the transpose, with exactly two accumulation adds for x's fan-out (`docs/SPEC.md` §4.4).
    let t1 = linear_transpose(&l1);
    assert_eq!(count(t1.as_graph(), Op::Add), 2, "{t1}");
    let ct = input_key(&t1, 0);
    assert_eq!(eval_linear(&t1, &at(&[(ct.clone(), 1.0)])), vec![Some(12.0)]);

    // FoF: linearize the JVP again: f''·dx·dx2 = 4.
    let fof = linearize(&resolve(vec![l1.graph().clone()]), &[output_key(&l1, 0)], std::slice::from_ref(&x));
    let dx2 = input_key(&fof, 0);
    assert_eq!(eval_linear(&fof, &at(&[(dx.clone(), 1.0), (dx2.clone(), 1.0)])), vec![Some(4.0)]);

    // FoR: linearize the transpose: f''·ct·dx2 = 4.
    let t1_graph = t1.graph().clone();
    let f_or = linearize(&resolve(vec![t1_graph]), &[output_key(&t1, 0)], std::slice::from_ref(&x));
    let dx3 = input_key(&f_or, 0);
    assert_eq!(eval_linear(&f_or, &at(&[(ct.clone(), 1.0), (dx3, 1.0)])), vec![Some(4.0)]);

    // RoF and RoR: transpose those, seeds at 1.
    let rof = linear_transpose(&fof);
    let s = input_key(&rof, 0);
    assert_eq!(eval_linear(&rof, &at(&[(dx, 1.0), (s, 1.0)])), vec![Some(4.0)]);
    let ror = linear_transpose(&f_or);
    let s = input_key(&ror, 0);
    assert_eq!(eval_linear(&ror, &at(&[(ct, 1.0), (s, 1.0)])), vec![Some(4.0)]);
}

/// g(x, a) = exp(a·x): the Hessian-vector product in x is a²·exp(a·x)·v (`docs/SPEC.md` §7.3).
#[test]
fn hessian_vector_product_of_exp() {
    let mut b = GraphBuilder::<Op>::new();
    let (x, a) = (b.add_input(Key::User(0)), b.add_input(Key::User(1)));
    let ax = b.add_operation(Op::Mul, vec![Local(a), Local(x)], Primary)[0];
    let e = b.add_operation(Op::Exp, vec![Local(ax)], Primary)[0];
    let g = Arc::new(b.build());
    let y = g.global_key(e);
    let (xk, ak) = (Key::User(0), Key::User(1));

    // Reverse for the gradient in x, then forward along v: jvp(vjp(g)).
    let lin = linearize(&resolve(vec![g.clone()]), &[y], std::slice::from_ref(&xk));
    let grad = linear_transpose(&lin);
    let hvp = linearize(&resolve(vec![grad.graph().clone()]), &[output_key(&grad, 0)], std::slice::from_ref(&xk));
    let (xv, av, v) = (0.3, -1.7, 0.6);
    let values = HashMap::from([(xk, xv), (ak, av), (input_key(&grad, 0), 1.0), (input_key(&hvp, 0), v)]);
    let got = eval_linear(&hvp, &values)[0].expect("a non-zero HVP");
    let want = av * av * f64::exp(av * xv) * v;
    assert!((got - want).abs() <= 1e-12 * want.abs(), "{got} vs {want}");
}

/// Sin's JVP emits `cos x` in the Primary role: it is accepted, and after materialize_merge
/// it is the same node as the primal graph's `cos x`.
#[test]
fn primal_computations_of_rules_share_the_primal_nodes() {
    let mut b = GraphBuilder::<Op>::new();
    let x = b.add_input(Key::User(0));
    let s = b.add_operation(Op::Sin, vec![Local(x)], Primary)[0];
    let c = b.add_operation(Op::Cos, vec![Local(x)], Primary)[0];
    let f = b.add_operation(Op::Add, vec![Local(s), Local(c)], Primary)[0];
    let g = Arc::new(b.build());
    let (xk, yk) = (Key::User(0), g.global_key(f));

    let lin = linearize(&resolve(vec![g.clone()]), std::slice::from_ref(&yk), std::slice::from_ref(&xk));
    // The linear graph holds the rules' primal computations: cos x (sin's JVP), and sin x
    // and its negation (cos's JVP).
    assert_eq!(count(lin.as_graph(), Op::Cos), 1, "{lin}");
    assert_eq!(count(lin.as_graph(), Op::Sin), 1, "{lin}");
    let outputs = [yk, output_key(&lin, 0)];
    let m = materialize_merge(&resolve(vec![lin.graph().clone()]), &outputs);
    let ops: Vec<Op> = m.operations().map(|o| *o.operation()).collect();
    assert_eq!(ops.iter().filter(|&&o| o == Op::Cos).count(), 1, "{ops:?}");
    assert_eq!(ops.iter().filter(|&&o| o == Op::Sin).count(), 1, "{ops:?}");

    // f'(x) = cos x - sin x, by the JVP and by the transpose (which forwards the primal nodes).
    let xv: f64 = 0.4;
    let want = xv.cos() - xv.sin();
    let values = HashMap::from([(xk.clone(), xv), (input_key(&lin, 0), 1.0)]);
    let got = eval_linear(&lin, &values)[0].expect("non-zero");
    assert!((got - want).abs() < 1e-15, "{got} vs {want}");
    let t = linear_transpose(&lin);
    let values = HashMap::from([(xk, xv), (input_key(&t, 0), 1.0)]);
    let got = eval_linear(&t, &values)[0].expect("non-zero");
    assert!((got - want).abs() < 1e-15, "{got} vs {want}");
}

/// f(x) = x·sin x, whose rules emit Primary `cos x` (and, one level up, `sin x` and its
/// negation): f'' = 2 cos x - x sin x in all four nestings.
#[test]
fn second_derivatives_through_primal_computations_in_every_nesting() {
    let mut b = GraphBuilder::<Op>::new();
    let x = b.add_input(Key::User(0));
    let s = b.add_operation(Op::Sin, vec![Local(x)], Primary)[0];
    let y = b.add_operation(Op::Mul, vec![Local(x), Local(s)], Primary)[0];
    let f = Arc::new(b.build());
    let (xk, yk) = (Key::User(0), f.global_key(y));
    let xv: f64 = 0.8;
    let want = 2.0 * xv.cos() - xv * xv.sin();
    let close = |got: Option<f64>| {
        let got = got.expect("a non-zero second derivative");
        assert!((got - want).abs() < 1e-14, "{got} vs {want}");
    };

    let lin = linearize(&resolve(vec![f.clone()]), std::slice::from_ref(&yk), std::slice::from_ref(&xk));
    let tr = linear_transpose(&lin);
    let (dx, ct) = (input_key(&lin, 0), input_key(&tr, 0));
    let fof = linearize(&resolve(vec![lin.graph().clone()]), &[output_key(&lin, 0)], std::slice::from_ref(&xk));
    let f_or = linearize(&resolve(vec![tr.graph().clone()]), &[output_key(&tr, 0)], std::slice::from_ref(&xk));
    let (rof, ror) = (linear_transpose(&fof), linear_transpose(&f_or));
    let at = |pairs: &[(Key, f64)]| -> HashMap<Key, f64> {
        let mut m = HashMap::from([(xk.clone(), xv)]);
        m.extend(pairs.iter().cloned());
        m
    };
    close(eval_linear(&fof, &at(&[(dx.clone(), 1.0), (input_key(&fof, 0), 1.0)]))[0]);
    close(eval_linear(&f_or, &at(&[(ct.clone(), 1.0), (input_key(&f_or, 0), 1.0)]))[0]);
    close(eval_linear(&rof, &at(&[(dx, 1.0), (input_key(&rof, 0), 1.0)]))[0]);
    close(eval_linear(&ror, &at(&[(ct, 1.0), (input_key(&ror, 0), 1.0)]))[0]);
}
