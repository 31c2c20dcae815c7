//! The worked example of `docs/SPEC.md` §4.4, f(x) = (x + x)·x, through every pipeline of
//! §5.3: prints the primal, linear and transposed graphs and the derivatives they compute.
//!
//! ```text
//! cargo run -p examples --example worked_example
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use computegraph::{GraphBuilder, OperationRole::Primary, ValueRef::Local, resolve};
use scalar::{ScalarKey, ScalarOp};
use tidu::{DerivativeProgram, LinearizedGraph, linear_transpose, linearize};

fn eval(lin: &LinearizedGraph<ScalarOp>, values: &HashMap<ScalarKey, f64>) -> f64 {
    let program = DerivativeProgram::new(lin).expect("compiles");
    program.eval(&mut (), |k| values.get(k)).expect("inputs bound")[0].expect("non-zero")
}

fn main() {
    let x = ScalarKey::var(0);
    let mut b = GraphBuilder::<ScalarOp>::new();
    let p0 = b.add_input(x.clone());
    let p1 = b.add_operation(ScalarOp::Add, vec![Local(p0), Local(p0)], Primary)[0];
    let p2 = b.add_operation(ScalarOp::Mul, vec![Local(p1), Local(p0)], Primary)[0];
    b.set_outputs(vec![p2]);
    let f = Arc::new(b.build());
    println!("primal F0, f(x) = (x + x)·x\n{f}");

    let at = 3.0;
    let lin = linearize(&resolve(vec![f.clone()]), &[f.global_key(p2)], std::slice::from_ref(&x));
    println!("JVP (build → resolve → linearize), L1\n{lin}");
    let dx = lin.tangent_inputs()[0].0.clone();
    let jvp = eval(&lin, &HashMap::from([(x.clone(), at), (dx.clone(), 1.0)]));
    println!("f'({at}) by JVP = {jvp}   (4x = {})\n", 4.0 * at);
    assert_eq!(jvp, 4.0 * at);

    let t = linear_transpose(&lin);
    println!("VJP (… → linear_transpose), T1: two accumulation adds\n{t}");
    let ct = t.tangent_inputs()[0].0.clone();
    let vjp = eval(&t, &HashMap::from([(x.clone(), at), (ct.clone(), 1.0)]));
    println!("f'({at}) by VJP = {vjp}\n");
    assert_eq!(vjp, 4.0 * at);

    let fof = linearize(
        &resolve(vec![lin.graph().clone()]),
        &[lin.tangent_output_keys()[0].clone().expect("non-zero")],
        std::slice::from_ref(&x),
    );
    let dx2 = fof.tangent_inputs()[0].0.clone();
    let d2 = eval(&fof, &HashMap::from([(x.clone(), at), (dx, 1.0), (dx2, 1.0)]));
    println!("f'' by forward over forward = {d2}");
    assert_eq!(d2, 4.0);

    let for_ = linearize(
        &resolve(vec![f.clone(), t.graph().clone()]),
        &[t.tangent_output_keys()[0].clone().expect("non-zero")],
        std::slice::from_ref(&x),
    );
    println!("\nHVP (… → linear_transpose → resolve → linearize), FoR\n{for_}");
    let dx3 = for_.tangent_inputs()[0].0.clone();
    let h = eval(&for_, &HashMap::from([(x.clone(), at), (ct, 1.0), (dx3, 1.0)]));
    println!("f'' by forward over reverse = {h}   (expected 4)");
    assert_eq!(h, 4.0);
}
