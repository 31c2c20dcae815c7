//! The set-up time of [`einsum::Einsum::gradient_of_sum_by`] (issue 40): the call that
//! plans, builds and compiles the gradient of the sum, not its evaluation. Each instance
//! runs on its `opt_flops` path (greedy when it has none) in `f64`, gradients with respect
//! to every operand; each way ([`SumGradient::Cheaper`], then the two it chooses between)
//! is called `--reps` times (default 5) and the median and range are printed in
//! milliseconds, with the multiply-adds of the program each way made (which tells the way
//! `Cheaper` took).
//!
//! `cargo run --release -p einsum --example sum_setup -- [--reps N] file.json ...`

use std::time::Instant;

use einsum::{Instance, PathChoice, SumGradient};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { 0.5 * (v[n / 2 - 1] + v[n / 2]) }
}

fn run(path: &str, reps: usize) -> Result<(), Box<dyn std::error::Error>> {
    let inst = Instance::from_file(path)?;
    let choice = inst.opt_flops.clone().map_or(PathChoice::Greedy, PathChoice::Explicit);
    let e = inst.einsum::<f64>(choice)?;
    let all: Vec<usize> = (0..inst.shapes.len()).collect();
    for way in [SumGradient::Cheaper, SumGradient::OpenTree, SumGradient::ClosedNetwork] {
        let mut ms = Vec::with_capacity(reps);
        let mut macs = 0.0;
        for _ in 0..reps {
            let t = Instant::now();
            let g = e.gradient_of_sum_by(&all, way)?;
            ms.push(t.elapsed().as_secs_f64() * 1e3);
            macs = g.multiply_adds();
        }
        let (lo, hi) = ms.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &x| (l.min(x), h.max(x)));
        println!(
            "{:<40} {:<14} set-up {:>9.3} ms [{lo:.3}, {hi:.3}] | multiply-adds {macs:.4e}",
            inst.name,
            format!("{way:?}"),
            median(ms)
        );
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut reps = 5;
    if let Some(p) = args.iter().position(|a| a == "--reps") {
        reps = args.get(p + 1).and_then(|r| r.parse().ok()).ok_or("--reps takes a number")?;
        args.drain(p..p + 2);
    }
    for f in &args {
        run(f, reps.max(1))?;
    }
    Ok(())
}
