//! Runs the six benchmark instances at full size (BENCHMARKS.md section C): builds and
//! compiles each with its `opt_flops` path, `opt_size` path and the greedy finder, fills
//! seeded random operands, times evaluation, checks that the paths agree, and checks the
//! one-step instances against the plain reference. With `--grad`, also builds and times the
//! gradient with respect to every operand (cotangent of ones) and checks it against an exact
//! one-operand difference (`⟨c, f(x + t eᵢ) - f(x)⟩ = ⟨∇ᵢ, t⟩`, the network being linear in
//! each operand).
//!
//! With `--complex`, runs in complex `f64` (`c64`) instead of `f64`; "GF/s" counts
//! multiply-adds times two in either case.
//!
//! `cargo run --release -p einsum --example instances [-- [--grad] [--complex] file.json ...]`

use std::time::Instant;

use einsum::{Einsum, Elem, Instance, PathChoice, Tensor, c64, reference_einsum};

const DEFAULT: [&str; 6] = [
    "bin_matmul_256",
    "bin_batched_matmul_b32_m64_n64_k64",
    "str_matrix_chain_multiplication_100",
    "str_mps_varying_inner_product_200",
    "lm_batch_likelihood_brackets_4_4d",
    "str_nw_mera_open_26",
];

/// Best of `reps` evaluations, in milliseconds.
fn time_eval<T: Elem>(e: &Einsum<T>, ops: &[&Tensor<T>], reps: usize) -> Result<(f64, Tensor<T>), einsum::EinsumError> {
    let mut best = f64::INFINITY;
    let mut last = None;
    for _ in 0..reps {
        let t = Instant::now();
        let r = e.eval(ops)?;
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
        last = Some(r);
    }
    Ok((best, last.expect("reps > 0")))
}

fn rel_diff<T: Elem>(a: &Tensor<T>, b: &Tensor<T>) -> f64 {
    a.max_abs_diff(b).unwrap_or(f64::INFINITY) / b.max_abs().max(f64::MIN_POSITIVE)
}

fn gradient<T: Elem>(inst: &Instance, e: &Einsum<T>, ops: &[Tensor<T>]) -> Result<String, einsum::EinsumError> {
    let refs: Vec<&Tensor<T>> = ops.iter().collect();
    let f = e.eval(&refs)?;
    let c = f.map(|_| T::one());
    let t = Instant::now();
    let all: Vec<usize> = (0..ops.len()).collect();
    let g = e.gradient(&all)?;
    let build = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let grads = g.eval(&refs, &c)?;
    let first = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let grads2 = g.eval(&refs, &c)?;
    let warm = t.elapsed().as_secs_f64() * 1e3;
    if grads != grads2 {
        return Err(einsum::EinsumError::Instance(format!("{}: two gradient evaluations differ", inst.name)));
    }
    // One operand (the middle one), direction t = its own values scaled.
    let i = ops.len() / 2;
    let dir = ops[i].map(|&x| T::from_f64(0.5) * x);
    let mut shifted = refs.clone();
    let moved = ops[i].zip_with(&dir, |a, b| a + b)?;
    shifted[i] = &moved;
    let df = e.eval(&shifted)?.zip_with(&f, |a, b| a - b)?;
    let (lhs, rhs) = (c.inner(&df).unwrap_or(f64::NAN), grads[i].inner(&dir).unwrap_or(f64::NAN));
    let rel = (lhs - rhs).abs() / lhs.abs().max(rhs.abs()).max(f64::MIN_POSITIVE);
    if rel.is_nan() || rel > 1e-8 {
        return Err(einsum::EinsumError::Instance(format!(
            "{}: gradient check failed: ⟨c, Δf⟩ = {lhs:e} but ⟨∇, t⟩ = {rhs:e}",
            inst.name
        )));
    }
    Ok(format!(
        "    gradient wrt {} operands: build+compile {build:.2} ms, eval {first:.2} ms (then {warm:.2} ms), \
         exact-difference check on operand {i}: {rel:.1e}",
        ops.len()
    ))
}

fn run<T: Elem>(path: &str, grad: bool) -> Result<(), einsum::EinsumError> {
    let inst = Instance::from_file(path)?;
    let ops = inst.random_operands::<T>(42)?;
    let refs: Vec<&Tensor<T>> = ops.iter().collect();
    let mut line = format!("{:<38}", format!("{} ({})", inst.name, T::NAME));
    let mut results = Vec::new();
    for (label, choice) in [
        ("opt_flops", inst.opt_flops.clone().map(PathChoice::Explicit)),
        ("opt_size", inst.opt_size.clone().map(PathChoice::Explicit)),
        ("greedy", Some(PathChoice::Greedy)),
    ] {
        let Some(choice) = choice else { continue };
        let t = Instant::now();
        let e = inst.einsum::<T>(choice)?;
        let build = t.elapsed().as_secs_f64() * 1e3;
        let (ms, r) = time_eval(&e, &refs, 5)?;
        let gflops = 2.0 * e.multiply_adds() / (ms * 1e6);
        if label == "opt_flops" {
            line += &format!(" {:>4} steps", e.path().steps().len());
        }
        line += &format!(" | {label}: build {build:6.2} ms, eval {ms:8.3} ms ({gflops:5.1} GF/s)");
        results.push((label, r));
    }
    let (_, first) = &results[0];
    let finite = first.data().iter().all(|x| x.modulus().is_finite());
    let agree = results.iter().map(|(_, r)| rel_diff(r, first)).fold(0.0, f64::max);
    line += &format!(" | finite {finite}, paths agree to {agree:.1e}");
    let assignments: f64 = {
        let s = inst.subscripts()?;
        let sizes = s.label_sizes(&inst.shapes.iter().map(Vec::as_slice).collect::<Vec<_>>())?;
        sizes.values().map(|&d| d as f64).product()
    };
    if assignments <= 1e8 {
        let want = reference_einsum(&inst.format_string, &refs)?;
        line += &format!(", reference {:.1e}", rel_diff(first, &want));
    }
    println!("{line}");
    if grad {
        let e = inst.einsum::<T>(inst.opt_flops.clone().map_or(PathChoice::Greedy, PathChoice::Explicit))?;
        println!("{}", gradient(&inst, &e, &ops)?);
    }
    if !finite || agree > 1e-8 {
        return Err(einsum::EinsumError::Instance(format!("{}: results are not finite or paths disagree", inst.name)));
    }
    Ok(())
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let grad = args.iter().any(|a| a == "--grad");
    let complex = args.iter().any(|a| a == "--complex");
    args.retain(|a| a != "--grad" && a != "--complex");
    let files: Vec<String> = if args.is_empty() {
        DEFAULT.iter().map(|n| format!("{}/tests/data/{n}.json", env!("CARGO_MANIFEST_DIR"))).collect()
    } else {
        args
    };
    let mut failed = false;
    for f in &files {
        let r = if complex { run::<c64>(f, grad) } else { run::<f64>(f, grad) };
        if let Err(e) = r {
            eprintln!("{f}: {e}");
            failed = true;
        }
    }
    if failed {
        std::process::exit(1);
    }
}
