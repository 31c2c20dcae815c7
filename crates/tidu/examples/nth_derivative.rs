//! The n-th derivative pipeline of seed 000 §IV: build → (resolve → linearize) × n →
//! materialize_merge → compile → eval, on f(x) = exp(2x)·sin(x), checked against the closed
//! form of every derivative up to the sixth.
//!
//! ```text
//! cargo run --release -p tidu --example nth_derivative
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use computegraph::{GraphBuilder, OperationRole::Primary, ValueRef::Local, resolve};
use scalar::{ScalarKey, ScalarOp};
use tidu::{DerivativeProgram, linearize};

/// f^(n)(x) for f = exp(2x)·sin(x): the imaginary part of (2 + i)^n · exp((2 + i)x).
fn closed_form(n: u32, x: f64) -> f64 {
    let (mut re, mut im) = (1.0f64, 0.0f64);
    for _ in 0..n {
        (re, im) = (2.0 * re - im, re + 2.0 * im);
    }
    let (s, c) = x.sin_cos();
    (2.0 * x).exp() * (re * s + im * c)
}

fn main() {
    let x = ScalarKey::var(0);
    let mut b = GraphBuilder::<ScalarOp>::new();
    let p = b.add_input(x.clone());
    let two = b.add_operation(ScalarOp::constant(2.0), vec![], Primary)[0];
    let tx = b.add_operation(ScalarOp::Mul, vec![Local(two), Local(p)], Primary)[0];
    let e = b.add_operation(ScalarOp::Exp, vec![Local(tx)], Primary)[0];
    let s = b.add_operation(ScalarOp::Sin, vec![Local(p)], Primary)[0];
    let y = b.add_operation(ScalarOp::Mul, vec![Local(e), Local(s)], Primary)[0];
    let f = Arc::new(b.build());

    let at = 0.3;
    println!("f(x) = exp(2x)·sin(x) at x = {at}");
    println!("{:>2}  {:>14}  {:>14}  {:>10}", "n", "pipeline", "closed form", "operations");
    let (mut graph, mut output) = (f.clone(), f.global_key(y));
    for n in 1..=6 {
        // One more (resolve → linearize): the tangent of the previous level's output.
        let lin = linearize(&resolve(vec![graph]), &[output], std::slice::from_ref(&x));
        output = lin.tangent_output_keys()[0].clone().expect("every derivative depends on x");
        graph = lin.graph().clone();
        let program = DerivativeProgram::new(&lin).expect("compiles");
        // Every tangent input (one per level) is 1, so the output is f^(n)(x).
        let values: HashMap<ScalarKey, f64> =
            program.program().input_keys().iter().map(|k| (k.clone(), if *k == x { at } else { 1.0 })).collect();
        let got = program.eval(&mut (), |k| values.get(k)).expect("inputs bound")[0].expect("non-zero");
        let want = closed_form(n, at);
        println!("{n:>2}  {got:>14.6}  {want:>14.6}  {:>10}", program.program().instruction_count());
        assert!((got - want).abs() <= 1e-9 * (1.0 + want.abs()), "f^({n}) = {got}, expected {want}");
    }
}
