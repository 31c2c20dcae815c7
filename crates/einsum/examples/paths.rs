//! The path searches on the benchmark instances: for each, the flops (2 × multiply-adds,
//! [`einsum::search::path_cost`]) of the instance's stored `opt_flops` path, of the greedy
//! path, of `dp` (connected subsets, [`einsum::search::dp`]), of random-greedy
//! (64 trials, seed 0) and of `auto`, each search's time, and its flops over the stored
//! path's (the target: at most 1.10; the example fails if an instance misses it).
//!
//! `cargo run --release -p einsum --example paths [-- file.json ...]`

use std::time::Instant;

use einsum::search::{DP_MAX_PAIRS, RANDOM_GREEDY_TRIALS, auto, dp, path_cost, random_greedy};
use einsum::{ContractionPath, Instance, Subscripts};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let files: Vec<String> = if args.is_empty() {
        Instance::bundled_names()?.iter().map(|n| Instance::bundled_file(n).display().to_string()).collect()
    } else {
        args
    };
    println!(
        "| instance | operands | stored opt_flops | greedy | dp (s) | random-greedy (s) | auto (s) | best / stored |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut missed = Vec::new();
    for f in files {
        let inst = Instance::from_file(&f)?;
        let shapes: Vec<&[usize]> = inst.shapes.iter().map(Vec::as_slice).collect();
        let net = Subscripts::parse(&inst.format_string)?.resolve(&shapes)?.squeeze_broadcast(&shapes);
        let (ins, out, sizes) = (&net.inputs, &net.output, &net.sizes);
        let flops = |p: &ContractionPath| path_cost(ins, out, sizes, p).map(|c| 2.0 * c);
        let stored = match &inst.opt_flops {
            Some(p) => flops(p)?,
            None => f64::NAN,
        };
        let greedy = flops(&ContractionPath::greedy(ins, out, |c| sizes[c as usize]))?;
        let timed = |search: &dyn Fn() -> Option<ContractionPath>| -> Result<(f64, f64), einsum::EinsumError> {
            let t = Instant::now();
            let p = search();
            let secs = t.elapsed().as_secs_f64();
            Ok((p.map(|p| flops(&p)).transpose()?.unwrap_or(f64::NAN), secs))
        };
        let d = timed(&|| dp(ins, out, sizes, DP_MAX_PAIRS))?;
        let r = timed(&|| Some(random_greedy(ins, out, sizes, RANDOM_GREEDY_TRIALS, 0)))?;
        let a = timed(&|| Some(auto(ins, out, sizes)))?;
        println!(
            "| {} | {} | {stored:.4e} | {greedy:.4e} | {:.4e} ({:.2}) | {:.4e} ({:.2}) | {:.4e} ({:.2}) | {:.3} |",
            inst.name,
            ins.len(),
            d.0,
            d.1,
            r.0,
            r.1,
            a.0,
            a.1,
            a.0 / stored
        );
        if a.0 > 1.10 * stored {
            missed.push(inst.name.clone());
        }
    }
    if !missed.is_empty() {
        return Err(format!("auto is more than 10% above the stored opt_flops path on {}", missed.join(", ")).into());
    }
    Ok(())
}
