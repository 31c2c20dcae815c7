//! A chain a million operations deep, linearized, transposed, compiled and evaluated on a
//! thread with a 256 KiB stack: every pass must be iterative (an invariant of
//! `docs/ARCHITECTURE.md`). The derivatives are checked against a hand-written forward-mode
//! loop over the same chain.
//!
//! Depth: 10^6 in optimized builds; 10^5 in debug builds, where 10^6 takes about 35 s
//! (build 3 s, linearize 8 s, transpose 6 s, compile and evaluate the JVP and the VJP
//! 17 s). `TIDU_DEEP_CHAIN=1000000 cargo test -p tidu --test it deep` runs any depth.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use computegraph::{GraphBuilder, KeyInterner, OperationRole, ValueRef, resolve};
use scalar::{ScalarKey, ScalarOp};
use tidu::{DerivativeProgram, linear_transpose, linearize};

/// Operations in the chain (see the module docs).
fn depth() -> usize {
    let default = if cfg!(debug_assertions) { 100_000 } else { 1_000_000 };
    std::env::var("TIDU_DEEP_CHAIN").ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}
/// The stack of the thread that runs the passes.
const STACK: usize = 256 * 1024;

/// The chain's step `k`: neg, mul by the input `a`, sin, repeating.
fn step(k: usize) -> ScalarOp {
    [ScalarOp::Neg, ScalarOp::Mul, ScalarOp::Sin][k % 3]
}

/// `(y, ∂y/∂x, ∂y/∂a)` of the chain by forward mode, by hand.
fn by_hand(depth: usize, x: f64, a: f64) -> (f64, f64, f64) {
    let (mut y, mut dx, mut da) = (x, 1.0, 0.0);
    for k in 0..depth {
        match step(k) {
            ScalarOp::Neg => (y, dx, da) = (-y, -dx, -da),
            ScalarOp::Mul => (y, dx, da) = (y * a, dx * a, da * a + y),
            _ => (y, dx, da) = (y.sin(), y.cos() * dx, y.cos() * da),
        }
    }
    (y, dx, da)
}

fn close(got: f64, want: f64) -> bool {
    (got - want).abs() <= 1e-9 * want.abs()
}

#[test]
fn a_deep_chain_on_a_small_stack() {
    let run = || {
        let depth = depth();
        let t0 = Instant::now();
        let (xk, ak) = (ScalarKey::var(0), ScalarKey::var(1));
        let mut b = GraphBuilder::<ScalarOp>::with_interner(KeyInterner::new());
        b.reserve(depth + 2, depth, 2 * depth);
        let x = b.add_input(xk.clone());
        let a = b.add_input(ak.clone());
        let mut y = x;
        for k in 0..depth {
            let op = step(k);
            let args = if op == ScalarOp::Mul {
                vec![ValueRef::Local(y), ValueRef::Local(a)]
            } else {
                vec![ValueRef::Local(y)]
            };
            y = b.add_operation(op, args, OperationRole::Primary)[0];
        }
        b.set_outputs(vec![y]);
        let f = Arc::new(b.build());
        let out = f.global_key(y);
        let built = t0.elapsed();

        let wrt = [xk.clone(), ak.clone()];
        let lin = linearize(&resolve(vec![f.clone()]), std::slice::from_ref(&out), &wrt);
        let linearized = t0.elapsed();
        let tr = linear_transpose(&lin);
        let transposed = t0.elapsed();

        let (xv, av) = (0.7, 1.0);
        // JVP along x, then along a.
        let jvp = DerivativeProgram::new(&lin).expect("the JVP compiles");
        let (dx, da) = (lin.tangent_inputs()[0].0.clone(), lin.tangent_inputs()[1].0.clone());
        let mut values = HashMap::from([(xk.clone(), xv), (ak.clone(), av), (dx.clone(), 1.0), (da.clone(), 0.0)]);
        let jx = jvp.eval(&mut (), |k| values.get(k)).expect("bound")[0].expect("non-zero");
        values.insert(dx, 0.0);
        values.insert(da, 1.0);
        let ja = jvp.eval(&mut (), |k| values.get(k)).expect("bound")[0].expect("non-zero");
        // The gradient.
        let vjp = DerivativeProgram::new(&tr).expect("the VJP compiles");
        values.insert(tr.tangent_inputs()[0].0.clone(), 1.0);
        let g = vjp.eval(&mut (), |k| values.get(k)).expect("bound");
        let evaluated = t0.elapsed();

        let (_, want_x, want_a) = by_hand(depth, xv, av);
        assert!(want_x != 0.0 && want_a != 0.0, "the chain's derivatives do not underflow");
        assert!(close(jx, want_x), "JVP along x: {jx} vs {want_x}");
        assert!(close(ja, want_a), "JVP along a: {ja} vs {want_a}");
        assert!(close(g[0].unwrap(), want_x), "∂y/∂x: {:?} vs {want_x}", g[0]);
        assert!(close(g[1].unwrap(), want_a), "∂y/∂a: {:?} vs {want_a}", g[1]);
        eprintln!(
            "deep chain of {depth}: build {built:.2?}, linearize {:.2?}, transpose {:.2?}, compile and eval {:.2?}",
            linearized - built,
            transposed - linearized,
            evaluated - transposed
        );
    };
    std::thread::Builder::new()
        .name("deep-chain".into())
        .stack_size(STACK)
        .spawn(run)
        .expect("spawn")
        .join()
        .expect("the passes run on a 256 KiB stack");
}
