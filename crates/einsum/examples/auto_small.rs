//! `auto` on small networks (13 to 40 tensors, the sizes opt_einsum's tests use, and the
//! bundled MERA): its search time (the median of five runs, in milliseconds) and log10 of
//! its path's multiply-adds. With `--export FILE` it also writes the networks as JSON
//! (`[{"name", "inputs", "sizes"}]`) for `python/bench/auto_small.py`, which runs
//! opt_einsum's `auto` on the same networks and counts its paths the same way.
//!
//! `cargo run --release -p einsum --example auto_small [-- --export networks.json]`

use std::time::Instant;

use einsum::search::{auto, path_cost};
use einsum::{Instance, Subscripts};

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

/// (name, inputs, output, sizes).
type Network = (String, Vec<Vec<u32>>, Vec<u32>, Vec<usize>);

/// A random 3-regular graph on `n` vertices (pairing model, redrawn until simple), one
/// label of size 2 per edge.
fn random_regular(n: usize, seed: u64) -> Network {
    let mut s = Stream(seed);
    loop {
        let mut stubs: Vec<usize> = (0..n).flat_map(|v| std::iter::repeat_n(v, 3)).collect();
        for i in (1..stubs.len()).rev() {
            stubs.swap(i, s.below(i + 1));
        }
        let mut edges: Vec<(usize, usize)> = stubs.chunks(2).map(|p| (p[0].min(p[1]), p[0].max(p[1]))).collect();
        edges.sort_unstable();
        if edges.windows(2).any(|w| w[0] == w[1]) || edges.iter().any(|e| e.0 == e.1) {
            continue;
        }
        let mut inputs = vec![Vec::new(); n];
        for (c, &(a, b)) in edges.iter().enumerate() {
            inputs[a].push(c as u32);
            inputs[b].push(c as u32);
        }
        return (format!("random 3-regular, {n}"), inputs, vec![], vec![2; edges.len()]);
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
    (format!("{name} lattice, bonds 2–3"), inputs, vec![], sizes)
}

/// A chain of `n` matrices with sizes drawn from 2 to 40, open at both ends.
fn chain(n: usize, seed: u64) -> Network {
    let mut s = Stream(seed);
    let inputs = (0..n as u32).map(|i| vec![i, i + 1]).collect();
    let sizes = (0..=n).map(|_| 2 + s.below(39)).collect();
    (format!("matrix chain, {n}"), inputs, vec![0, n as u32], sizes)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let export = match args.as_slice() {
        [] => None,
        [flag, file] if flag == "--export" => Some(file.clone()),
        _ => return Err("usage: auto_small [--export FILE]".into()),
    };
    let mut networks = vec![
        random_regular(14, 1),
        random_regular(20, 2),
        random_regular(30, 3),
        random_regular(40, 4),
        lattice(&[4, 4], 5),
        lattice(&[5, 5], 6),
        lattice(&[3, 3, 3], 7),
        chain(20, 8),
        chain(40, 9),
    ];
    let mera = Instance::bundled("str_nw_mera_open_26")?;
    let shapes: Vec<&[usize]> = mera.shapes.iter().map(Vec::as_slice).collect();
    let net = Subscripts::parse(&mera.format_string)?.resolve(&shapes)?.squeeze_broadcast(&shapes);
    networks.push((mera.name.clone(), net.inputs, net.output, net.sizes));
    println!("| network | tensors | auto ms (median of 5) | log10 multiply-adds |");
    println!("|---|---:|---:|---:|");
    for (name, inputs, output, sizes) in &networks {
        let mut times = Vec::new();
        let mut path = None;
        for _ in 0..5 {
            let t = Instant::now();
            path = Some(auto(inputs, output, sizes));
            times.push(t.elapsed().as_secs_f64() * 1e3);
        }
        times.sort_by(f64::total_cmp);
        let cost = path_cost(inputs, output, sizes, &path.expect("five runs"))?;
        println!("| {name} | {} | {:.1} | {:.3} |", inputs.len(), times[2], cost.log10());
    }
    if let Some(file) = export {
        let json: Vec<serde_json::Value> = networks
            .iter()
            .map(|(name, inputs, output, sizes)| {
                serde_json::json!({ "name": name, "inputs": inputs, "output": output, "sizes": sizes })
            })
            .collect();
        std::fs::write(&file, serde_json::to_string(&json)?)?;
    }
    Ok(())
}
