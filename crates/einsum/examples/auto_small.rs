//! `auto` on small networks (13 to 40 tensors, the sizes opt_einsum's tests use, and the
//! bundled MERA): its search time (the median of five runs, in milliseconds) and log10 of
//! its path's multiply-adds. With `--export FILE` it also writes the networks as JSON
//! (`[{"name", "inputs", "sizes"}]`) for `python/bench/auto_small.py`, which runs
//! opt_einsum's `auto` on the same networks and counts its paths the same way.
//!
//! `cargo run --release -p einsum --example auto_small [-- --export networks.json]`

use std::time::Instant;

use einsum::search::{auto, path_cost};
use einsum::{Instance, Subscripts, generate};

/// A network with its name.
type Network = (String, Vec<Vec<u32>>, Vec<u32>, Vec<usize>);

fn named(name: String, net: generate::Network) -> Network {
    (name, net.inputs, net.output, net.sizes)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let export = match args.as_slice() {
        [] => None,
        [flag, file] if flag == "--export" => Some(file.clone()),
        _ => return Err("usage: auto_small [--export FILE]".into()),
    };
    let mut networks = Vec::new();
    for (n, seed) in [(14, 1), (20, 2), (30, 3), (40, 4)] {
        networks.push(named(format!("random 3-regular, {n}"), generate::random_regular(n, 3, seed)?));
    }
    for (dims, seed) in [(&[4, 4][..], 5), (&[5, 5], 6), (&[3, 3, 3], 7)] {
        let name = dims.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("×");
        networks.push(named(format!("{name} lattice, bonds 2–3"), generate::lattice(dims, 2..=3, seed)?));
    }
    for (n, seed) in [(20, 8), (40, 9)] {
        networks.push(named(format!("matrix chain, {n}"), generate::chain(n, 2..=40, seed)?));
    }
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
