//! Per-step timing of an instance's forward program: each contraction alone on seeded
//! operands (median of `--reps`, default 7), printed slowest first with the sum, so that
//! a kernel change can be attributed to the steps it moves.
//!
//! `cargo run --release -p einsum --example fwd_steps -- [--reps N] [--only TEXT] [--threads N] file.json`
//!
//! With `--threads N` (N > 1) each step is also timed inside a rayon pool of `N` threads,
//! its one-thread and `N`-thread runs alternated, and the rows show both and their ratio,
//! so that the steps which gain little from the second thread stand out.

mod steps;

use einsum::TensorOp;
use steps::{forward_steps, median_ms, seeded, take_option, take_reps};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let reps = take_reps(&mut args, 7);
    // `--only TEXT` times only the steps whose spec contains TEXT (for a profiler).
    let only = take_option(&mut args, "--only").unwrap_or_default();
    let threads: usize =
        take_option(&mut args, "--threads").map_or(1, |t| t.parse().expect("--threads takes a number"));
    let (inst, _, mut specs) = forward_steps(&args[0]);
    specs.retain(|s| format!("{s:?}").contains(&only));
    if threads > 1 {
        return compare(&inst.name, &specs, reps, threads);
    }
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

/// Each step on one thread and inside a pool of `threads`, alternated rep by rep (so a
/// change of the machine's load falls on both), printed by the time the pool leaves
/// unsaved (`N`-thread time minus one-thread time over `N`), largest first.
fn compare(name: &str, specs: &[einsum::ContractSpec], reps: usize, threads: usize) {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a rayon pool");
    let mut rows = Vec::new();
    let (mut one, mut many) = (0.0, 0.0);
    for (i, s) in specs.iter().enumerate() {
        let (a, b) = (seeded(s.a_shape()), seeded(s.b_shape()));
        let run = || TensorOp::contract(s.clone()).apply(&[&a, &b]);
        let (mut t1, mut tn) = (Vec::with_capacity(reps), Vec::with_capacity(reps));
        for _ in 0..reps {
            t1.push(median_ms(1, run));
            tn.push(pool.install(|| median_ms(1, run)));
        }
        let (f1, fn_) = (median(&mut t1), median(&mut tn));
        one += f1;
        many += fn_;
        let out: usize = s.out_shape().iter().product();
        rows.push((fn_ - f1 / threads as f64, i, f1, fn_, out, format!("{s:?}")));
    }
    rows.sort_by(|x, y| y.0.total_cmp(&x.0));
    println!(
        "{name}: {} steps, forward {one:.3} ms on 1 thread, {many:.3} ms on {threads} ({:.2}x; sums of step medians)",
        specs.len(),
        one / many
    );
    for (_, i, f1, fn_, out, s) in &rows {
        println!("  #{i:<4} {f1:8.4} ms  {fn_:8.4} ms  {:5.2}x  out {out:>9}  {s}", f1 / fn_);
    }
}

/// The median of `v` (sorted in place).
fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}
