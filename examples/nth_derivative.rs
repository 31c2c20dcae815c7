//! The n-th derivative, `docs/SPEC.md` §5.3:
//! build → (resolve → linearize) × n → [linear_transpose] → materialize_merge → compile → eval.
//!
//! ∂ⁿf/∂xⁿ of f(x, y) = sin(x)·y + exp(x·y) for n = 1 to 6, twice: with n forward passes,
//! and with n − 1 forward passes whose last linear graph is transposed (one reverse pass
//! at the end). Closed form: sin(x + nπ/2)·y + yⁿ·exp(x·y).
//!
//! ```text
//! cargo run -p examples --example nth_derivative
//! ```

use std::collections::HashMap;
use std::f64::consts::FRAC_PI_2;

use computegraph::resolve;
use examples::{assert_close, build_f, materialize_compile_eval};
use scalar::ScalarKey;
use tidu::{linear_transpose, linearize};

fn main() {
    let (f, y) = build_f();
    let x = ScalarKey::var(0);
    let at = [0.7, -0.4];
    // Every tangent input and seed is 1; primal inputs are `at`.
    let mut values: HashMap<ScalarKey, f64> = [(x.clone(), at[0]), (ScalarKey::var(1), at[1])].into();

    println!("{:>2}  {:>16}  {:>16}  {:>16}", "n", "forward × n", "… + transpose", "closed form");
    let (mut graph, mut output) = (f, y);
    for n in 1..=6 {
        let lin = linearize(&resolve(vec![graph]), &[output], std::slice::from_ref(&x));
        values.insert(lin.tangent_inputs()[0].0.clone(), 1.0);
        // The transpose of the n-th linear graph: its seed is 1, its one cotangent the
        // derivative.
        let t = linear_transpose(&lin);
        values.insert(t.tangent_inputs()[0].0.clone(), 1.0);
        let reverse = t.tangent_output_keys()[0].clone().expect("depends on x");
        let by_reverse = materialize_compile_eval(t.graph(), &[reverse], &values)[0];

        output = lin.tangent_output_keys()[0].clone().expect("depends on x");
        graph = lin.graph().clone();
        let by_forward = materialize_compile_eval(&graph, std::slice::from_ref(&output), &values)[0];

        let want = (at[0] + n as f64 * FRAC_PI_2).sin() * at[1] + at[1].powi(n) * (at[0] * at[1]).exp();
        println!("{n:>2}  {by_forward:>16.12}  {by_reverse:>16.12}  {want:>16.12}");
        assert_close(by_forward, want);
        assert_close(by_reverse, want);
    }
}
