//! The second directional derivative (forward over forward), `docs/SPEC.md` §5.3:
//! build → resolve → linearize → resolve → linearize → materialize_merge → compile → eval.
//!
//! Linearizing the linear graph again, with respect to the same primal inputs, gives
//! vᵀ·H·w for f(x, y) = sin(x)·y + exp(x·y): v is the first pass's tangent, w the
//! second's. Operations common to both levels are shared through their structural keys.
//!
//! ```text
//! cargo run -p examples --example forward_over_forward
//! ```

use std::collections::HashMap;

use computegraph::resolve;
use examples::{assert_close, build_f, hessian, materialize_compile_eval};
use scalar::ScalarKey;
use tidu::linearize;

fn main() {
    let (f, y) = build_f();
    let wrt = [ScalarKey::var(0), ScalarKey::var(1)];
    let first = linearize(&resolve(vec![f.clone()]), &[y], &wrt);
    let dy = first.tangent_output_keys()[0].clone().expect("f depends on x and y");
    // The second pass sees the first linear graph (and, through it, the primal graph).
    let second = linearize(&resolve(vec![first.graph().clone()]), &[dy], &wrt);
    let d2y = second.tangent_output_keys()[0].clone().expect("f is not linear");

    let (at, v, w) = ([0.7, -0.4], [1.0, 2.0], [-0.5, 3.0]);
    let mut values: HashMap<ScalarKey, f64> = wrt.iter().cloned().zip(at).collect();
    for ((tangent, _), vi) in first.tangent_inputs().iter().zip(v) {
        values.insert(tangent.clone(), vi);
    }
    for ((tangent, _), wi) in second.tangent_inputs().iter().zip(w) {
        values.insert(tangent.clone(), wi);
    }
    let got = materialize_compile_eval(second.graph(), &[d2y], &values)[0];

    let h = hessian(at[0], at[1]);
    let want: f64 = (0..2).flat_map(|i| (0..2).map(move |j| (i, j))).map(|(i, j)| v[i] * h[i][j] * w[j]).sum();
    println!("vᵀHw at {at:?}, v = {v:?}, w = {w:?}: {got:.12} (closed form {want:.12})");
    assert_close(got, want);
}
