//! The value+gradient ÷ forward ratio of Einsum Benchmark instances (issue 40, item 2),
//! counted two ways:
//!
//! - **flops**, analytically: the multiply-adds of every contraction and one-operand
//!   einsum of the forward program ([`einsum::Einsum::multiply_adds`]) and of the
//!   value-and-gradient program ([`einsum::EinsumGradient::multiply_adds`]), gradients
//!   with respect to every operand. This figure does not move with the machine's load.
//! - **time**, in interleaved pairs: one forward evaluation, then one value-and-gradient
//!   evaluation ([`einsum::EinsumGradient::eval_with_value`]), `--reps` times (default 7);
//!   the ratio of each pair is taken, and the median pair ratio is printed with the
//!   smallest and largest, beside the median times. Thread CPU time is printed too (it
//!   leaves out the time spent waiting for a core on a shared machine).
//!
//! Each instance runs on its `opt_flops` path (greedy when it has none) in `f64`, operands
//! seeded with 42, the cotangent all ones. The gradient is checked against an exact
//! one-operand difference (the network is linear in each operand) before timing.
//! `--sum` takes the gradient of the sum instead ([`einsum::Einsum::gradient_of_sum`], the
//! scalar cotangent 1: the same gradient, without the tensor of ones); `--threads N` runs
//! both evaluations inside a pool of `N` threads (default: on the calling thread).
//!
//! `cargo run --release -p einsum --example grad_ratio -- [--reps N] [--sum] [--threads N] file.json ...`

use std::time::Instant;

use einsum::{Einsum, EinsumGradient, Instance, PathChoice, Tensor};

/// Thread CPU time in milliseconds.
#[allow(unsafe_code)] // the crate denies it; this call has no safe form in std
fn cpu_ms() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid `timespec` to write to; the clock id is a constant.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    t.tv_sec as f64 * 1e3 + t.tv_nsec as f64 * 1e-6
}

/// Wall and thread-CPU milliseconds of `f`.
fn timed<R>(f: impl FnOnce() -> R) -> (R, f64, f64) {
    let (w, c) = (Instant::now(), cpu_ms());
    let r = f();
    (r, w.elapsed().as_secs_f64() * 1e3, cpu_ms() - c)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { 0.5 * (v[n / 2 - 1] + v[n / 2]) }
}

fn spread(v: &[f64]) -> (f64, f64) {
    v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| (lo.min(x), hi.max(x)))
}

/// Checks the gradient of the middle operand by an exact difference.
/// `seed` is what `g` takes (`c`, or the scalar 1 of the sum's gradient), `c` the
/// cotangent of ones it stands for.
fn check(
    e: &Einsum<f64>,
    g: &EinsumGradient<f64>,
    ops: &[Tensor<f64>],
    seed: &Tensor<f64>,
    c: &Tensor<f64>,
) -> Result<f64, String> {
    let refs: Vec<&Tensor<f64>> = ops.iter().collect();
    let (f, grads) = g.eval_with_value(&refs, seed).map_err(|e| e.to_string())?;
    let i = ops.len() / 2;
    let dir = ops[i].map(|&x| 0.5 * x);
    let moved = ops[i].zip_with(&dir, |a, b| a + b).map_err(|e| e.to_string())?;
    let mut shifted = refs.clone();
    shifted[i] = &moved;
    let df = e.eval(&shifted).map_err(|e| e.to_string())?.zip_with(&f, |a, b| a - b).map_err(|e| e.to_string())?;
    let (lhs, rhs) = (c.inner(&df).unwrap_or(f64::NAN), grads[i].inner(&dir).unwrap_or(f64::NAN));
    let rel = (lhs - rhs).abs() / lhs.abs().max(rhs.abs()).max(f64::MIN_POSITIVE);
    if rel.is_nan() || rel > 1e-8 {
        return Err(format!("gradient check failed: ⟨c, Δf⟩ = {lhs:e} but ⟨∇, t⟩ = {rhs:e}"));
    }
    Ok(rel)
}

fn run(path: &str, reps: usize, sum: bool) -> Result<(), String> {
    let inst = Instance::from_file(path).map_err(|e| e.to_string())?;
    let ops = inst.random_operands::<f64>(42).map_err(|e| e.to_string())?;
    let refs: Vec<&Tensor<f64>> = ops.iter().collect();
    let choice = inst.opt_flops.clone().map_or(PathChoice::Greedy, PathChoice::Explicit);
    let e = inst.einsum::<f64>(choice).map_err(|e| e.to_string())?;
    let all: Vec<usize> = (0..ops.len()).collect();
    let c = Tensor::ones(e.output_shape().to_vec()).map_err(|e| e.to_string())?;
    let (g, seed) = if sum {
        (e.gradient_of_sum(&all).map_err(|e| e.to_string())?, Tensor::scalar(1.0))
    } else {
        (e.gradient(&all).map_err(|e| e.to_string())?, c.clone())
    };
    let rel = check(&e, &g, &ops, &seed, &c)?;
    // The tensor of ones is not an argument of the sum's gradient: gone before timing.
    drop(c);
    let (mut fw, mut vw, mut ratio, mut cpu_ratio) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..reps {
        let (r, w1, c1) = timed(|| e.eval(&refs));
        drop(r.map_err(|e| e.to_string())?);
        let (r, w2, c2) = timed(|| g.eval_with_value(&refs, &seed));
        drop(r.map_err(|e| e.to_string())?);
        fw.push(w1);
        vw.push(w2);
        ratio.push(w2 / w1);
        cpu_ratio.push(c2 / c1);
    }
    let (lo, hi) = spread(&ratio);
    println!(
        "{:<44} {:>4} steps | multiply-adds: forward {:.3e}, value+grad {:.3e}, ratio {:.2} | \
         time (median of {reps} pairs): forward {:.3} ms, value+grad {:.3} ms, ratio {:.2} [{lo:.2}, {hi:.2}], \
         CPU ratio {:.2} | check {rel:.0e}",
        inst.name,
        e.path().steps().len(),
        e.multiply_adds(),
        g.multiply_adds(),
        g.multiply_adds() / e.multiply_adds(),
        median(fw),
        median(vw),
        median(ratio),
        median(cpu_ratio),
    );
    Ok(())
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut reps = 7;
    if let Some(p) = args.iter().position(|a| a == "--reps") {
        reps = args.get(p + 1).and_then(|r| r.parse().ok()).unwrap_or_else(|| panic!("--reps takes a number"));
        args.drain(p..p + 2);
    }
    let mut threads = 0;
    if let Some(p) = args.iter().position(|a| a == "--threads") {
        threads = args.get(p + 1).and_then(|r| r.parse().ok()).unwrap_or_else(|| panic!("--threads takes a number"));
        args.drain(p..p + 2);
    }
    let sum = args.iter().any(|a| a == "--sum");
    args.retain(|a| a != "--sum");
    let pool = (threads > 0).then(|| rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a pool"));
    let mut failed = false;
    for f in &args {
        let r = match &pool {
            Some(pool) => pool.install(|| run(f, reps.max(1), sum)),
            None => run(f, reps.max(1), sum),
        };
        if let Err(e) = r {
            eprintln!("{f}: {e}");
            failed = true;
        }
    }
    if failed {
        std::process::exit(1);
    }
}
