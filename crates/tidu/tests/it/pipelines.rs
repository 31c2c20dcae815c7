//! The pipelines of `docs/SPEC.md` §5.3, end to end through materialize_merge, compile and
//! eval, against closed forms (`docs/SPEC.md` §7.3).

use std::collections::HashMap;
use std::sync::Arc;

use computegraph::{Graph, LocalValueId, ValueKey, resolve};
use scalar::{ScalarKey, ScalarOp};
use tidu::{LinearizedGraph, grad, hvp, jvp, linear_transpose, linearize};

use crate::support::{builder, eval, op};

fn x() -> ScalarKey {
    ScalarKey::var(0)
}

/// `x^n` as a chain of multiplications.
fn power(n: usize) -> (Arc<Graph<ScalarOp>>, LocalValueId) {
    let mut b = builder();
    let xv = b.add_input(x());
    let mut y = xv;
    for _ in 1..n {
        y = op(&mut b, ScalarOp::Mul, &[y, xv]);
    }
    (Arc::new(b.build()), y)
}

/// Linearizes `n` times w.r.t. x; evaluates with x = `at` and every tangent set to one.
fn nth_derivative(g: &Arc<Graph<ScalarOp>>, y: LocalValueId, n: usize, at: f64) -> f64 {
    let mut key: ValueKey<ScalarOp> = g.global_key(y);
    let mut roots = vec![g.clone()];
    let mut values = HashMap::from([(x(), at)]);
    let mut last: Option<LinearizedGraph<ScalarOp>> = None;
    for _ in 0..n {
        let lin = linearize(&resolve(roots.clone()), &[key.clone()], &[x()]);
        values.insert(lin.tangent_inputs()[0].0.clone(), 1.0);
        key = lin.tangent_output_keys()[0].clone().expect("non-zero derivative");
        roots = vec![lin.graph().clone()];
        last = Some(lin);
    }
    eval(&last.unwrap(), &values)[0].unwrap()
}

#[test]
fn jvp_pipeline_matches_the_closed_form() {
    // f(x, y) = exp(x)·sin(y); J·(tx, ty) = exp(x)·sin(y)·tx + exp(x)·cos(y)·ty
    let mut b = builder();
    let xv = b.add_input(ScalarKey::var(0));
    let yv = b.add_input(ScalarKey::var(1));
    let e = op(&mut b, ScalarOp::Exp, &[xv]);
    let s = op(&mut b, ScalarOp::Sin, &[yv]);
    let f = op(&mut b, ScalarOp::Mul, &[e, s]);
    let g = Arc::new(b.build());
    let lin = jvp(&resolve(vec![g.clone()]), &[g.global_key(f)], &[ScalarKey::var(0), ScalarKey::var(1)]).unwrap();
    let (a, c, tx, ty): (f64, f64, f64, f64) = (0.3, 1.1, 0.7, -1.9);
    let values = HashMap::from([
        (ScalarKey::var(0), a),
        (ScalarKey::var(1), c),
        (lin.tangent_inputs()[0].0.clone(), tx),
        (lin.tangent_inputs()[1].0.clone(), ty),
    ]);
    let want = a.exp() * c.sin() * tx + a.exp() * c.cos() * ty;
    let got = eval(&lin, &values)[0].unwrap();
    assert!((got - want).abs() < 1e-12, "{got} vs {want}");
}

#[test]
fn vjp_pipeline_matches_the_closed_form() {
    // f(x, y) = x·y + sin(x): ∇f = (y + cos x, x)
    let mut b = builder();
    let xv = b.add_input(ScalarKey::var(0));
    let yv = b.add_input(ScalarKey::var(1));
    let p = op(&mut b, ScalarOp::Mul, &[xv, yv]);
    let s = op(&mut b, ScalarOp::Sin, &[xv]);
    let f = op(&mut b, ScalarOp::Add, &[p, s]);
    let g = Arc::new(b.build());
    let t = grad(&resolve(vec![g.clone()]), &g.global_key(f), &[ScalarKey::var(0), ScalarKey::var(1)]).unwrap();
    let (a, c): (f64, f64) = (0.4, -2.5);
    let values =
        HashMap::from([(ScalarKey::var(0), a), (ScalarKey::var(1), c), (t.tangent_inputs()[0].0.clone(), 1.0)]);
    let got = eval(&t, &values);
    assert!((got[0].unwrap() - (c + a.cos())).abs() < 1e-12);
    assert_eq!(got[1], Some(a));
}

#[test]
fn forward_over_forward_gives_higher_derivatives_of_powers() {
    let (g3, y3) = power(3);
    assert_eq!(nth_derivative(&g3, y3, 1, 2.0), 12.0); // 3x²
    assert_eq!(nth_derivative(&g3, y3, 2, 2.0), 12.0); // 6x
    assert_eq!(nth_derivative(&g3, y3, 3, 2.0), 6.0); // the third derivative of x³ is 6
    let (g4, y4) = power(4);
    assert_eq!(nth_derivative(&g4, y4, 4, -1.3), 24.0); // the fourth derivative of x⁴ is 24
}

#[test]
fn hvp_of_exp_ax_is_a_squared_exp_ax_v() {
    for a in [0.5, -1.5, 2.0] {
        let mut b = builder();
        let xv = b.add_input(x());
        let c = b.add_operation(ScalarOp::constant(a), vec![], computegraph::OperationRole::Primary)[0];
        let ax = op(&mut b, ScalarOp::Mul, &[c, xv]);
        let e = op(&mut b, ScalarOp::Exp, &[ax]);
        let g = Arc::new(b.build());
        let h = hvp(&resolve(vec![g.clone()]), &g.global_key(e), &[x()]).unwrap();
        let program = tidu::DerivativeProgram::new(&h).unwrap();
        let (xval, v) = (0.8, 1.7);
        let out = program
            .eval(&mut (), |k| {
                if *k == x() {
                    Some(&xval)
                } else if *k == h.tangent_inputs()[0].0 {
                    Some(&v)
                } else {
                    Some(&1.0) // the gradient's cotangent seed
                }
            })
            .unwrap();
        let want = a * a * (a * xval).exp() * v;
        let got = out[0].unwrap();
        assert!((got - want).abs() <= 1e-12 * want.abs(), "a = {a}: {got} vs {want}");
    }
}

#[test]
fn hvp_of_a_two_variable_function_is_the_hessian_times_v() {
    // f(x, y) = x²·y: H = [[2y, 2x], [2x, 0]]
    let mut b = builder();
    let xv = b.add_input(ScalarKey::var(0));
    let yv = b.add_input(ScalarKey::var(1));
    let xx = op(&mut b, ScalarOp::Mul, &[xv, xv]);
    let f = op(&mut b, ScalarOp::Mul, &[xx, yv]);
    let g = Arc::new(b.build());
    let wrt = [ScalarKey::var(0), ScalarKey::var(1)];
    let h = hvp(&resolve(vec![g.clone()]), &g.global_key(f), &wrt).unwrap();
    let (a, c, v0, v1) = (1.5, -0.5, 2.0, 3.0);
    let mut values = HashMap::from([(wrt[0].clone(), a), (wrt[1].clone(), c)]);
    values.insert(h.tangent_inputs()[0].0.clone(), v0);
    values.insert(h.tangent_inputs()[1].0.clone(), v1);
    let program = tidu::DerivativeProgram::new(&h).unwrap();
    let out = program.eval(&mut (), |k| values.get(k).or(Some(&1.0))).unwrap();
    assert_eq!(out[0], Some(2.0 * c * v0 + 2.0 * a * v1));
    assert_eq!(out[1], Some(2.0 * a * v0));
}

#[test]
fn reverse_over_reverse_of_x_cubed() {
    // grad of x³ = 3x²·c; transposing its linearization w.r.t. x gives 6x·c·s.
    let (g, y) = power(3);
    let t = grad(&resolve(vec![g.clone()]), &g.global_key(y), &[x()]).unwrap();
    let c = t.tangent_inputs()[0].0.clone();
    let l2 = linearize(&resolve(vec![t.graph().clone()]), &[t.tangent_output_keys()[0].clone().unwrap()], &[x()]);
    let ror = linear_transpose(&l2);
    let s = ror.tangent_inputs()[0].0.clone();
    let values = HashMap::from([(x(), 2.0), (c, 0.5), (s, 3.0)]);
    assert_eq!(eval(&ror, &values), vec![Some(6.0 * 2.0 * 0.5 * 3.0)]);
}

#[test]
fn multi_output_sincos_with_one_output_seeded() {
    // y = sincos(x); only cos is requested: d cos / dx = -sin x.
    let mut b = builder();
    let xv = b.add_input(x());
    let sc = b.add_operation(
        ScalarOp::SinCos,
        vec![computegraph::ValueRef::Local(xv)],
        computegraph::OperationRole::Primary,
    );
    let g = Arc::new(b.build());
    let t = grad(&resolve(vec![g.clone()]), &g.global_key(sc[1]), &[x()]).unwrap();
    let values = HashMap::from([(x(), 0.9), (t.tangent_inputs()[0].0.clone(), 1.0)]);
    assert_eq!(eval(&t, &values), vec![Some(-(0.9f64.sin()))]);
}
