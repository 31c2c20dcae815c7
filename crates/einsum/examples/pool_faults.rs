//! Page faults and resident memory per call when forward passes and value+gradient passes
//! alternate on one instance, as a benchmark harness that interleaves them does: which
//! calls find their buffers in the pool (`buffer.rs`) and which map fresh pages.
//!
//! `cargo run --release -p einsum --example pool_faults -- [--seq fgfgfg] [--threads N] file.json`
//! (`f`: a forward evaluation, `g`: a value+gradient evaluation, the cotangent all ones).

use std::time::Instant;

use einsum::{Instance, PathChoice, Tensor};

/// Minor page faults of the process so far.
#[allow(unsafe_code)] // the crate denies it; this call has no safe form in std
fn minor_faults() -> i64 {
    // SAFETY: an all-zero `rusage` is a valid value to write into.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid `rusage` to write to; the target is a constant.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    assert_eq!(rc, 0, "getrusage");
    u.ru_minflt
}

/// Resident and peak resident memory in MiB, from `/proc/self/status`.
fn rss() -> (f64, f64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        s.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (kib("VmRSS:") / 1024.0, kib("VmHWM:") / 1024.0)
}

fn main() -> Result<(), String> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut take = |flag: &str, default: &str| -> String {
        match args.iter().position(|a| a == flag) {
            Some(p) if p + 1 < args.len() => {
                let v = args[p + 1].clone();
                args.drain(p..p + 2);
                v
            }
            _ => default.to_string(),
        }
    };
    let seq = take("--seq", "fgfgfgfg");
    let threads: usize = take("--threads", "1").parse().map_err(|_| "--threads takes a number")?;
    let path = args.first().ok_or("give an instance file")?;
    let inst = Instance::from_file(path).map_err(|e| e.to_string())?;
    let ops = inst.random_operands::<f64>(42).map_err(|e| e.to_string())?;
    let refs: Vec<&Tensor<f64>> = ops.iter().collect();
    let choice = inst.opt_flops.clone().map_or(PathChoice::Greedy, PathChoice::Explicit);
    let e = inst.einsum::<f64>(choice).map_err(|e| e.to_string())?;
    let all: Vec<usize> = (0..ops.len()).collect();
    let g = e.gradient(&all).map_err(|e| e.to_string())?;
    let c = Tensor::ones(e.output_shape().to_vec()).map_err(|e| e.to_string())?;
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().map_err(|e| e.to_string())?;
    let pool = (threads > 1).then_some(&pool);
    for call in seq.chars() {
        let f0 = minor_faults();
        let t = Instant::now();
        match call {
            'f' => drop(e.eval_parallel(pool, &refs).map_err(|e| e.to_string())?),
            'g' => drop(g.eval_with_value_parallel(pool, &refs, &c).map_err(|e| e.to_string())?),
            _ => return Err(format!("unknown call {call:?}: f or g")),
        }
        let ms = t.elapsed().as_secs_f64() * 1e3;
        let (now, peak) = rss();
        println!("{call} {ms:8.1} ms  faults {:8}  rss {now:7.0} MiB  peak {peak:7.0} MiB", minor_faults() - f0);
    }
    Ok(())
}
