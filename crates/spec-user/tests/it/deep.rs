//! A deep chain through every phase and both transforms on a small stack: no pass recurses.

use std::collections::HashMap;

use computegraph::GraphBuilder;
use spec_user::{Dag, Key, Op};
use tidu::{linear_transpose, linearize};

use crate::{eval_linear, input_key};

/// Depth: `SPEC_USER_DEEP_CHAIN`, or 10^5 (CI runs 10^6).
fn depth() -> usize {
    std::env::var("SPEC_USER_DEEP_CHAIN").ok().and_then(|s| s.parse().ok()).unwrap_or(100_000)
}

#[test]
fn deep_chain_on_a_small_stack() {
    let n = depth();
    let run = move || {
        // v ← sin(v)·x, n times, from v = x.
        let mut dag = Dag { inputs: 1, ..Default::default() };
        let mut v = 0u32;
        for i in 0..n as u32 {
            let sin = 1 + 2 * i;
            dag.nodes.push((Op::Sin, [v, 0]));
            dag.nodes.push((Op::Mul, [sin, 0]));
            v = sin + 1;
        }
        dag.outputs.push(v);
        let (g, y) = dag.build(GraphBuilder::new());
        let x = Key::User(0);
        let lin = linearize(&computegraph::resolve(vec![g]), &y, std::slice::from_ref(&x));
        let t = linear_transpose(&lin);
        let xv = 0.9;
        let values = HashMap::from([(x, xv), (input_key(&t, 0), 1.0)]);
        let got = eval_linear(&t, &values)[0].expect("non-zero");
        // Reference: forward mode with dual numbers, in a plain loop.
        let (mut v, mut dv) = (xv, 1.0);
        for _ in 0..n {
            let (s, ds) = (v.sin(), v.cos() * dv);
            (v, dv) = (s * xv, ds * xv + s);
        }
        assert!((got - dv).abs() <= 1e-9 * dv.abs().max(1.0), "{got} vs {dv}");
    };
    std::thread::Builder::new().stack_size(256 * 1024).spawn(run).expect("thread").join().expect("no stack overflow");
}
