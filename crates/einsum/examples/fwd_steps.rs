//! Per-step timing of an instance's forward program: each contraction alone on seeded
//! operands (median of `--reps`, default 7), printed slowest first with the sum, so that
//! a kernel change can be attributed to the steps it moves.
//!
//! `cargo run --release -p einsum --example fwd_steps -- [--reps N] [--only TEXT] file.json`

mod steps;

use einsum::TensorOp;
use steps::{forward_steps, median_ms, seeded, take_option, take_reps};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let reps = take_reps(&mut args, 7);
    // `--only TEXT` times only the steps whose spec contains TEXT (for a profiler).
    let only = take_option(&mut args, "--only").unwrap_or_default();
    let (inst, _, mut specs) = forward_steps(&args[0]);
    specs.retain(|s| format!("{s:?}").contains(&only));
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
