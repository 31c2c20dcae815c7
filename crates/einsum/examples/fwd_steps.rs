//! Per-step timing of an instance's forward program: each contraction alone on seeded
//! operands (median of `--reps`, default 7), printed slowest first with the sum, so that
//! a kernel change can be attributed to the steps it moves.
//!
//! `cargo run --release -p einsum --example fwd_steps -- [--reps N] [--only TEXT] file.json`

use std::time::Instant;

use computegraph::{materialize_merge, resolve};
use einsum::{ContractSpec, Instance, PathChoice, Tensor, TensorOp};

fn median_ms(reps: usize, mut f: impl FnMut() -> Tensor<f64>) -> f64 {
    let mut v: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            drop(f());
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn seeded(shape: Vec<usize>) -> Tensor<f64> {
    let mut x = 0.0f64;
    Tensor::from_fn(shape, |_| {
        x += 1.0;
        (x * 0.37).sin()
    })
    .expect("a shape of the instance")
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut reps = 7;
    if let Some(p) = args.iter().position(|a| a == "--reps") {
        reps = args.get(p + 1).and_then(|r| r.parse().ok()).unwrap_or_else(|| panic!("--reps takes a number"));
        args.drain(p..p + 2);
    }
    // `--only TEXT` times only the steps whose spec contains TEXT (for a profiler).
    let mut only = String::new();
    if let Some(p) = args.iter().position(|a| a == "--only") {
        only = args.get(p + 1).cloned().unwrap_or_else(|| panic!("--only takes a spec"));
        args.drain(p..p + 2);
    }
    let inst = Instance::from_file(&args[0]).unwrap_or_else(|e| panic!("{e}"));
    let choice = inst.opt_flops.clone().map_or(PathChoice::Greedy, PathChoice::Explicit);
    let e = inst.einsum::<f64>(choice).unwrap_or_else(|e| panic!("{e}"));
    let m = materialize_merge(&resolve(vec![e.graph().clone()]), std::slice::from_ref(e.output_key()));
    let specs: Vec<ContractSpec> = m
        .operations()
        .filter_map(|op| match op.operation() {
            TensorOp::Contract(s) => Some((**s).clone()),
            _ => None,
        })
        .filter(|s| format!("{s:?}").contains(&only))
        .collect();
    let mut rows = Vec::new();
    let mut total = 0.0;
    for s in &specs {
        let (a, b) = (seeded(s.a_shape()), seeded(s.b_shape()));
        let f = median_ms(reps, || TensorOp::contract(s.clone()).apply(&[&a, &b]));
        total += f;
        rows.push((f, format!("{s:?}")));
    }
    rows.sort_by(|x, y| y.0.total_cmp(&x.0));
    println!("{}: {} steps, forward {total:.3} ms (sum of step medians)", inst.name, specs.len());
    for (f, s) in &rows {
        println!("  {f:8.4} ms  {s}");
    }
}
