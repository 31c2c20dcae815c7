//! JVP, `docs/SPEC.md` §5.3: build → resolve → linearize → materialize_merge → compile → eval.
//!
//! The directional derivative ∇f(x, y)·v of f(x, y) = sin(x)·y + exp(x·y), for one
//! direction v, in one forward pass.
//!
//! ```text
//! cargo run -p examples --example jvp
//! ```

use std::collections::HashMap;

use computegraph::resolve;
use examples::{assert_close, build_f, gradient, materialize_compile_eval};
use scalar::ScalarKey;
use tidu::linearize;

fn main() {
    let (f, y) = build_f();
    let wrt = [ScalarKey::var(0), ScalarKey::var(1)];
    // linearize: one tangent input per `wrt` key, one tangent output per output.
    let lin = linearize(&resolve(vec![f.clone()]), std::slice::from_ref(&y), &wrt);
    println!("the linear graph (primal values enter as external references):\n{lin}");

    let (at, v) = ([0.7, -0.4], [1.0, 2.0]);
    let mut values: HashMap<ScalarKey, f64> = wrt.iter().cloned().zip(at).collect();
    for ((tangent, _), vi) in lin.tangent_inputs().iter().zip(v) {
        values.insert(tangent.clone(), vi);
    }
    let dy = lin.tangent_output_keys()[0].clone().expect("f depends on x and y");
    let jvp = materialize_compile_eval(lin.graph(), &[dy], &values)[0];

    let g = gradient(at[0], at[1]);
    println!("∇f·v at {at:?}, v = {v:?}: {jvp:.12} (closed form {:.12})", g[0] * v[0] + g[1] * v[1]);
    assert_close(jvp, g[0] * v[0] + g[1] * v[1]);
}
