//! VJP (the gradient), `docs/SPEC.md` §5.3: build → resolve → linearize →
//! linear_transpose → materialize_merge → compile → eval.
//!
//! The whole gradient of f(x, y) = sin(x)·y + exp(x·y) from one reverse pass: the
//! transposed graph takes a cotangent seed for the output and returns one cotangent per
//! input.
//!
//! ```text
//! cargo run -p examples --example vjp
//! ```

use std::collections::HashMap;

use computegraph::resolve;
use examples::{assert_close, build_f, gradient, materialize_compile_eval};
use scalar::ScalarKey;
use tidu::{linear_transpose, linearize};

fn main() {
    let (f, y) = build_f();
    let wrt = [ScalarKey::var(0), ScalarKey::var(1)];
    let lin = linearize(&resolve(vec![f.clone()]), &[y], &wrt);
    // linear_transpose: the seeds are its tangent inputs, the cotangents its outputs.
    let t = linear_transpose(&lin);
    println!("the transposed graph:\n{t}");

    let at = [0.7, -0.4];
    let mut values: HashMap<ScalarKey, f64> = wrt.iter().cloned().zip(at).collect();
    values.insert(t.tangent_inputs()[0].0.clone(), 1.0);
    let cotangents: Vec<_> = t.tangent_output_keys().iter().map(|k| k.clone().expect("f depends on x and y")).collect();
    let grad = materialize_compile_eval(t.graph(), &cotangents, &values);

    let want = gradient(at[0], at[1]);
    println!("∇f at {at:?}: {grad:.12?} (closed form {want:.12?})");
    for (g, w) in grad.iter().zip(want) {
        assert_close(*g, w);
    }
}
