//! The hyper-optimizer against the other finders on seeded networks that nobody tuned for:
//! random regular graphs (degrees 3 and 4) and 2D and 3D lattices, all with scalar
//! outputs. For each network: log10 of the multiply-adds of greedy, random-greedy (64
//! trials), `auto`, and the hyper-optimizer at each time budget, with search times.
//!
//! `cargo run --release -p einsum --example hyper [-- BUDGET_SECONDS ...]` (default 1)
//!
//! The Python benchmark `python/bench/paths_hyper.py` compares with cotengra and
//! opt_einsum on the same kinds of networks.

use std::time::{Duration, Instant};

use einsum::hyper::{HyperOptions, hyper_path};
use einsum::search::{RANDOM_GREEDY_TRIALS, auto, path_cost, random_greedy};
use einsum::{ContractionPath, generate};

type Network = (String, einsum::generate::Network);

fn random_regular(n: usize, d: usize, seed: u64) -> Result<Network, einsum::EinsumError> {
    Ok((format!("random {d}-regular, {n} tensors"), generate::random_regular(n, d, seed)?))
}

fn lattice(dims: &[usize], seed: u64) -> Result<Network, einsum::EinsumError> {
    let name = dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("×");
    Ok((format!("{name} lattice, bonds 2–3"), generate::lattice(dims, 2..=3, seed)?))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let budgets: Vec<f64> = std::env::args().skip(1).map(|a| a.parse()).collect::<Result<_, _>>()?;
    let budgets = if budgets.is_empty() { vec![1.0] } else { budgets };
    let networks = vec![
        random_regular(60, 3, 1)?,
        random_regular(120, 3, 2)?,
        random_regular(250, 3, 3)?,
        random_regular(500, 3, 4)?,
        random_regular(100, 4, 5)?,
        random_regular(200, 4, 6)?,
        lattice(&[12, 12], 7)?,
        lattice(&[20, 20], 8)?,
        lattice(&[5, 5, 5], 9)?,
    ];
    print!("| network | greedy | random-greedy (s) | auto (s) |");
    budgets.iter().for_each(|b| print!(" hyper {b} s (trials) |"));
    println!();
    println!("|---|---:|---:|---:|{}", "---:|".repeat(budgets.len()));
    for (name, einsum::generate::Network { inputs, sizes, .. }) in networks {
        let log = |p: &ContractionPath| path_cost(&inputs, &[], &sizes, p).map(f64::log10);
        let greedy = log(&ContractionPath::greedy(&inputs, &[], |c| sizes[c as usize]))?;
        let t = Instant::now();
        let rg = log(&random_greedy(&inputs, &[], &sizes, RANDOM_GREEDY_TRIALS, 0))?;
        let rg_s = t.elapsed().as_secs_f64();
        let t = Instant::now();
        let au = log(&auto(&inputs, &[], &sizes))?;
        let au_s = t.elapsed().as_secs_f64();
        print!("| {name} | {greedy:.2} | {rg:.2} ({rg_s:.2}) | {au:.2} ({au_s:.2}) |");
        for &b in &budgets {
            let opts = HyperOptions { max_time: Some(Duration::from_secs_f64(b)), ..HyperOptions::default() };
            let found = hyper_path(&inputs, &[], &sizes, &opts)?;
            print!(" {:.2} ({}, {}) |", log(&found.path)?, found.report.trials, found.report.method);
        }
        println!();
    }
    Ok(())
}
