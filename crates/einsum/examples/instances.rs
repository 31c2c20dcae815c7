//! Runs the bundled benchmark instances (`einsum::BUNDLED_DIR`) at full size (`docs/SPEC.md` §8.3): builds and
//! compiles each with its `opt_flops` path, `opt_size` path and the greedy finder, fills
//! seeded random operands, times evaluation, checks that the paths agree, and checks the
//! one-step instances against the plain reference. With `--grad`, also builds and times the
//! gradient with respect to every operand (cotangent of ones) and checks it against an exact
//! one-operand difference (`⟨c, f(x + t eᵢ) - f(x)⟩ = ⟨∇ᵢ, t⟩`, the network being linear in
//! each operand).
//!
//! The gradient is timed like the forward evaluation, best of `--reps` (default 5), the two
//! alternating in one process so that the ratio sees one machine load; thread CPU times are
//! printed beside wall times (on a shared machine they leave out the time spent waiting for
//! a core). The first, cold gradient evaluation is printed apart: it pays for fresh pages.
//!
//! With `--complex`, runs in complex `f64` (`c64`) instead of `f64`; "GF/s" counts
//! multiply-adds times two in either case.
//!
//! `cargo run --release -p einsum --example instances [-- [--grad] [--complex] [--reps N] file.json ...]`

use std::time::Instant;

use einsum::{Einsum, Elem, Instance, PathChoice, Tensor, c64, reference_einsum};

/// Best of `reps` evaluations, in milliseconds (wall).
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

/// Thread CPU time in milliseconds: unlike wall time, it leaves out the time this thread
/// waits while other processes run, which on a shared machine is most of the noise.
#[allow(unsafe_code)] // the crate denies it; this call has no safe form in std
fn cpu_ms() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid `timespec` to write to; the clock id is a constant.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    t.tv_sec as f64 * 1e3 + t.tv_nsec as f64 * 1e-6
}

/// Best wall and thread-CPU milliseconds over the calls timed with [`Best::time`].
#[derive(Clone, Copy)]
struct Best {
    wall: f64,
    cpu: f64,
}

impl Best {
    fn new() -> Self {
        Best { wall: f64::INFINITY, cpu: f64::INFINITY }
    }

    fn time<R>(&mut self, f: impl FnOnce() -> R) -> R {
        let (w, c) = (Instant::now(), cpu_ms());
        let r = f();
        self.cpu = self.cpu.min(cpu_ms() - c);
        self.wall = self.wall.min(w.elapsed().as_secs_f64() * 1e3);
        r
    }
}

fn gradient<T: Elem>(
    inst: &Instance,
    e: &Einsum<T>,
    ops: &[Tensor<T>],
    reps: usize,
) -> Result<String, einsum::EinsumError> {
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
    // Forward and gradient alternate, so both see the same machine load; each keeps its
    // previous result until the next one is computed, as a caller updating operands would.
    let (mut fwd, mut grad) = (Best::new(), Best::new());
    let (mut last_f, mut last_g) = (None, None);
    for _ in 0..reps {
        last_f = Some(fwd.time(|| e.eval(&refs))?);
        last_g = Some(grad.time(|| g.eval(&refs, &c))?);
    }
    drop(last_f);
    if last_g.is_some_and(|l| l != grads) {
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
        "    gradient wrt {} operands: build+compile {build:.2} ms, first eval {first:.2} ms | best of {reps}, \
         alternating: forward {:.3} ms, gradient {:.3} ms, gradient/forward {:.2} (thread CPU: {:.3} / {:.3} ms, \
         {:.2}) | exact-difference check on operand {i}: {rel:.1e}",
        ops.len(),
        fwd.wall,
        grad.wall,
        grad.wall / fwd.wall,
        fwd.cpu,
        grad.cpu,
        grad.cpu / fwd.cpu,
    ))
}

fn run<T: Elem>(path: &str, grad: Option<usize>) -> Result<(), einsum::EinsumError> {
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
    if let Some(reps) = grad {
        let e = inst.einsum::<T>(inst.opt_flops.clone().map_or(PathChoice::Greedy, PathChoice::Explicit))?;
        println!("{}", gradient(&inst, &e, &ops, reps)?);
    }
    if !finite || agree > 1e-8 {
        return Err(einsum::EinsumError::Instance(format!("{}: results are not finite or paths disagree", inst.name)));
    }
    Ok(())
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let complex = args.iter().any(|a| a == "--complex");
    let reps = match args.iter().position(|a| a == "--reps") {
        Some(p) if p + 1 < args.len() => {
            let r = args.remove(p + 1).parse().unwrap_or_else(|e| panic!("--reps: {e}"));
            args.remove(p);
            r
        }
        Some(_) => panic!("--reps takes a number"),
        None => 5,
    };
    let grad = args.iter().any(|a| a == "--grad").then_some(reps);
    args.retain(|a| a != "--grad" && a != "--complex");
    let files: Vec<String> = if args.is_empty() {
        let names = Instance::bundled_names().unwrap_or_else(|e| panic!("{e}"));
        names.iter().map(|n| Instance::bundled_file(n).display().to_string()).collect()
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
