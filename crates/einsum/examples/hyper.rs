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

use einsum::ContractionPath;
use einsum::hyper::{HyperOptions, hyper_path};
use einsum::search::{RANDOM_GREEDY_TRIALS, auto, path_cost, random_greedy};

/// SplitMix64: the networks' seeded stream.
struct Stream(u64);

impl Stream {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        ((self.next() as u128 * n as u128) >> 64) as usize
    }
}

type Network = (String, Vec<Vec<u32>>, Vec<usize>);

/// A random `d`-regular graph on `n` vertices (pairing model, redrawn until simple), one
/// label of size 2 per edge.
fn random_regular(n: usize, d: usize, seed: u64) -> Network {
    let mut s = Stream(seed);
    'draw: loop {
        let mut stubs: Vec<usize> = (0..n).flat_map(|v| std::iter::repeat_n(v, d)).collect();
        for i in (1..stubs.len()).rev() {
            stubs.swap(i, s.below(i + 1));
        }
        let mut edges: Vec<(usize, usize)> = stubs.chunks(2).map(|p| (p[0].min(p[1]), p[0].max(p[1]))).collect();
        edges.sort_unstable();
        if edges.windows(2).any(|w| w[0] == w[1]) || edges.iter().any(|e| e.0 == e.1) {
            continue 'draw;
        }
        let mut inputs = vec![Vec::new(); n];
        for (c, &(a, b)) in edges.iter().enumerate() {
            inputs[a].push(c as u32);
            inputs[b].push(c as u32);
        }
        return (format!("random {d}-regular, {n} tensors"), inputs, vec![2; edges.len()]);
    }
}

/// A lattice of the given side lengths, bonds of size 2 or 3 drawn per edge.
fn lattice(dims: &[usize], seed: u64) -> Network {
    let mut s = Stream(seed);
    let n: usize = dims.iter().product();
    let mut inputs = vec![Vec::new(); n];
    let mut sizes = Vec::new();
    for v in 0..n {
        let mut stride = 1;
        for &len in dims.iter().rev() {
            if (v / stride) % len + 1 < len {
                let c = sizes.len() as u32;
                sizes.push(2 + s.below(2));
                inputs[v].push(c);
                inputs[v + stride].push(c);
            }
            stride *= len;
        }
    }
    let name = dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("×");
    (format!("{name} lattice, bonds 2–3"), inputs, sizes)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let budgets: Vec<f64> = std::env::args().skip(1).map(|a| a.parse()).collect::<Result<_, _>>()?;
    let budgets = if budgets.is_empty() { vec![1.0] } else { budgets };
    let networks = vec![
        random_regular(60, 3, 1),
        random_regular(120, 3, 2),
        random_regular(250, 3, 3),
        random_regular(500, 3, 4),
        random_regular(100, 4, 5),
        random_regular(200, 4, 6),
        lattice(&[12, 12], 7),
        lattice(&[20, 20], 8),
        lattice(&[5, 5, 5], 9),
    ];
    print!("| network | greedy | random-greedy (s) | auto (s) |");
    budgets.iter().for_each(|b| print!(" hyper {b} s (trials) |"));
    println!();
    println!("|---|---:|---:|---:|{}", "---:|".repeat(budgets.len()));
    for (name, inputs, sizes) in networks {
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
