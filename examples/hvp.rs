//! The Hessian-vector product (forward over reverse), `docs/SPEC.md` §5.3:
//! build → resolve → linearize → linear_transpose → resolve → linearize →
//! materialize_merge → compile → eval.
//!
//! Linearizing the gradient graph of f(x, y) = sin(x)·y + exp(x·y) in a direction w gives
//! H·w at the cost of a few gradients, without forming H.
//!
//! ```text
//! cargo run -p examples --example hvp
//! ```

use std::collections::HashMap;

use computegraph::resolve;
use examples::{assert_close, build_f, hessian, materialize_compile_eval};
use scalar::ScalarKey;
use tidu::{linear_transpose, linearize};

fn main() {
    let (f, y) = build_f();
    let wrt = [ScalarKey::var(0), ScalarKey::var(1)];
    let lin = linearize(&resolve(vec![f.clone()]), &[y], &wrt);
    let t = linear_transpose(&lin);
    let grad: Vec<_> = t.tangent_output_keys().iter().map(|k| k.clone().expect("f depends on x and y")).collect();
    // Forward over reverse: the tangent of the gradient in direction w.
    let hv = linearize(&resolve(vec![t.graph().clone()]), &grad, &wrt);
    let hw: Vec<_> = hv.tangent_output_keys().iter().map(|k| k.clone().expect("f is not linear")).collect();

    let (at, w) = ([0.7, -0.4], [-0.5, 3.0]);
    let mut values: HashMap<ScalarKey, f64> = wrt.iter().cloned().zip(at).collect();
    values.insert(t.tangent_inputs()[0].0.clone(), 1.0);
    for ((tangent, _), wi) in hv.tangent_inputs().iter().zip(w) {
        values.insert(tangent.clone(), wi);
    }
    let got = materialize_compile_eval(hv.graph(), &hw, &values);

    let h = hessian(at[0], at[1]);
    let want = [h[0][0] * w[0] + h[0][1] * w[1], h[1][0] * w[0] + h[1][1] * w[1]];
    println!("H·w at {at:?}, w = {w:?}: {got:.12?} (closed form {want:.12?})");
    for (g, w) in got.iter().zip(want) {
        assert_close(*g, w);
    }
}
