//! One thread against two on an instance, as the Python package runs a call (issue 40,
//! "every core"): the forward pass along the plan re-associated for the call's threads
//! (`Plan::balanced_for`, where it pays), value+gradient of the sum with each result's
//! range (`EinsumGradient::eval_with_value_and_range`, what `value_and_grad` with a
//! cotangent of 1 runs), each call inside a rayon pool of the thread count when
//! `uses_threads` says it pays and on the calling thread otherwise.
//!
//! Every round runs the four calls (forward 1t, forward Nt, value+gradient 1t, value+gradient
//! Nt), the order of the two thread counts swapped from round to round, so that a slow
//! stretch of a shared machine falls on both alike. Printed per instance: the median and
//! the range of each, the ratio of the medians, and the median of the rounds' own ratios.
//! With `--cpu`, the calling thread's CPU time is printed beside the one-thread wall time
//! (on a loaded machine, the one-thread call's own work).
//!
//! With `--operands`, each `F.json`'s operands are read from `F.f64` beside it (every
//! operand's float64 entries, little-endian, row-major, in operand order: what
//! `python/bench/two_threads.py --dump` writes of the operands the Python package is timed
//! on), instead of `Instance::random_operands(42)`.
//!
//! `cargo run --release -p einsum --example threads_ab -- [--reps N] [--threads N] [--operands] file.json ...`

use std::time::Instant;

use einsum::{Einsum, EinsumGradient, Instance, PathChoice, Tensor};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 { v[n / 2] } else { 0.5 * (v[n / 2 - 1] + v[n / 2]) }
}

fn cell(v: &[f64]) -> String {
    let (lo, hi) = v.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    format!("{:9.3} [{:.3}-{:.3}]", median(v.to_vec()), lo, hi)
}

/// Milliseconds of `f`.
fn ms<R>(f: impl FnOnce() -> R) -> f64 {
    let t = Instant::now();
    drop(f());
    t.elapsed().as_secs_f64() * 1e3
}

/// One instance's forward and value+gradient on 1 and `threads` threads.
struct Calls {
    one: Einsum<f64>,
    many: Einsum<f64>,
    grad: EinsumGradient<f64>,
    ops: Vec<Tensor<f64>>,
    pool: rayon::ThreadPool,
    threads: usize,
}

impl Calls {
    fn forward(&self, many: bool) -> f64 {
        let refs: Vec<&Tensor<f64>> = self.ops.iter().collect();
        let e = if many { &self.many } else { &self.one };
        if many && e.uses_threads(self.threads) {
            ms(|| self.pool.install(|| e.eval(&refs).unwrap()))
        } else {
            ms(|| e.eval(&refs).unwrap())
        }
    }

    fn value_and_grad(&self, many: bool) -> f64 {
        let refs: Vec<&Tensor<f64>> = self.ops.iter().collect();
        let one = Tensor::scalar(1.0);
        let g = &self.grad;
        if many && g.uses_threads(self.threads) {
            ms(|| self.pool.install(|| g.eval_with_value_and_range(&refs, &one).unwrap()))
        } else {
            ms(|| g.eval_with_value_and_range(&refs, &one).unwrap())
        }
    }
}

/// The operands written beside `file` (`F.json` → `F.f64`), in the instance's shapes.
fn operands_beside(file: &str, inst: &Instance) -> Vec<Tensor<f64>> {
    let raw = std::path::Path::new(file).with_extension("f64");
    let bytes = std::fs::read(&raw).unwrap_or_else(|e| panic!("cannot read {}: {e}", raw.display()));
    let want: usize = inst.shapes.iter().map(|s| s.iter().product::<usize>()).sum();
    assert_eq!(bytes.len(), 8 * want, "{}: {want} float64 operand entries expected", raw.display());
    let mut values = bytes.chunks_exact(8).map(|b| f64::from_le_bytes(b.try_into().expect("8 bytes")));
    inst.shapes
        .iter()
        .map(|s| Tensor::new(s.clone(), values.by_ref().take(s.iter().product()).collect()).unwrap())
        .collect()
}

fn run(file: &str, reps: usize, threads: usize, beside: bool) {
    let inst = Instance::from_file(file).unwrap_or_else(|e| panic!("{e}"));
    let choice = inst.opt_flops.clone().map_or(PathChoice::Greedy, PathChoice::Explicit);
    let one = inst.einsum::<f64>(choice).unwrap_or_else(|e| panic!("{e}"));
    // As the Python package: the balanced program only where it would use the threads.
    let balanced =
        one.plan().balanced_for(threads).map(|p| Einsum::from_plan(p).unwrap()).filter(|e| e.uses_threads(threads));
    let rebalanced = balanced.is_some();
    let many = balanced.unwrap_or_else(|| Einsum::from_plan(one.plan().clone()).unwrap());
    let all: Vec<usize> = (0..inst.shapes.len()).collect();
    let grad = one.gradient_of_sum(&all).unwrap();
    let ops = if beside { operands_beside(file, &inst) } else { inst.random_operands::<f64>(42).unwrap() };
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    let calls = Calls { one, many, grad, ops, pool, threads };
    // Warm the buffer pool and the lazily built schedules.
    for many in [false, true] {
        calls.forward(many);
        calls.value_and_grad(many);
    }
    let mut t: [Vec<f64>; 4] = Default::default();
    for r in 0..reps {
        let order = if r % 2 == 0 { [false, true] } else { [true, false] };
        for many in order {
            t[usize::from(many)].push(calls.forward(many));
        }
        for many in order {
            t[2 + usize::from(many)].push(calls.value_and_grad(many));
        }
    }
    let ratio = |a: &[f64], b: &[f64]| {
        let paired = median(a.iter().zip(b).map(|(x, y)| x / y).collect());
        (median(a.to_vec()) / median(b.to_vec()), paired)
    };
    let (rf, pf) = ratio(&t[0], &t[1]);
    let (rg, pg) = ratio(&t[2], &t[3]);
    println!(
        "{}{}: uses threads fwd {} v+g {}",
        inst.name,
        if rebalanced { " (balanced)" } else { "" },
        calls.many.uses_threads(threads),
        calls.grad.uses_threads(threads)
    );
    println!("  fwd  1t {}  {threads}t {}  ×{rf:.2} (paired {pf:.2})", cell(&t[0]), cell(&t[1]));
    println!("  v+g  1t {}  {threads}t {}  ×{rg:.2} (paired {pg:.2})", cell(&t[2]), cell(&t[3]));
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut take = |name: &str| {
        let p = args.iter().position(|a| a == name)?;
        let v = args.get(p + 1).cloned();
        args.drain(p..(p + 2).min(args.len()));
        v
    };
    let reps: usize = take("--reps").map_or(7, |r| r.parse().expect("--reps takes a number"));
    let threads: usize = take("--threads").map_or(2, |r| r.parse().expect("--threads takes a number"));
    let beside = args.iter().position(|a| a == "--operands").map(|p| args.remove(p)).is_some();
    for f in &args {
        run(f, reps, threads, beside);
    }
}
