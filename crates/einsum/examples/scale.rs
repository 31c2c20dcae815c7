//! Path search at scale (issue 37, item 5): lattices and random 3-regular graphs of 10^3
//! to 10^5 tensors, bonds of size 2, scalar outputs. For each network and finder (greedy,
//! then the hyper-optimizer at each budget): the seconds the search took, the process's
//! peak resident memory during it, and log10 of the path's multiply-adds; for the
//! hyper-optimizer also its trials and winning driver.
//!
//! `cargo run --release -p einsum --example scale [-- BUDGET_SECONDS ...]` (default 1)
//!
//! Each row runs in a process of its own (the example runs itself with `--row NETWORK
//! BUDGET`, budget 0 for greedy). The peak is the kernel's high-water mark (`VmHWM`),
//! reset before the search by writing 5 to `/proc/self/clear_refs` (Linux); elsewhere the
//! column reads `n/a`. It includes the network itself, which is built before the reset. CPU seconds are the process's
//! (every thread's) user and system time from `/proc/self/stat`, in 10 ms ticks: on a
//! machine shared with other work they are steadier than the wall time. Multiply-adds are
//! summed in the log domain (greedy paths on random regular graphs overflow `f64`).

use std::time::{Duration, Instant};

use einsum::hyper::{HyperOptions, hyper_path};
use einsum::{ContractionPath, FollowedPath, PathChoice, generate};

type Network = (String, Vec<Vec<u32>>, Vec<usize>);

fn random_regular(n: usize, seed: u64) -> Result<Network, einsum::EinsumError> {
    let net = generate::random_regular(n, 3, seed)?;
    Ok((format!("random 3-regular, {n}"), net.inputs, net.sizes))
}

fn lattice(side: usize) -> Result<Network, einsum::EinsumError> {
    let net = generate::lattice(&[side, side], 2..=2, 0)?;
    Ok((format!("{side}×{side} lattice"), net.inputs, net.sizes))
}

/// Resets the peak resident memory to the current one; whether it could.
fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// The peak resident memory since the last reset, in MiB.
fn peak_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// The process's CPU seconds (user and system, every thread), if the system says.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which is in parentheses and may hold spaces):
    // utime and stime are the 12th and 13th, in ticks of (almost always) 10 ms.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace().skip(11);
    let (u, s): (f64, f64) = (fields.next()?.parse().ok()?, fields.next()?.parse().ok()?);
    Some((u + s) / 100.0)
}

/// log10 of the path's multiply-adds over its pairwise steps (each the product of the
/// sizes of every label it loops over), summed in the log domain.
fn log10_cost(inputs: &[Vec<u32>], sizes: &[usize], path: &ContractionPath) -> Result<f64, einsum::EinsumError> {
    let followed = FollowedPath::new(inputs, &[], path)?;
    let logs: Vec<f64> = followed
        .steps()
        .iter()
        .map(|s| followed.loops(s).iter().map(|&c| (sizes[c as usize] as f64).log10()).sum())
        .collect();
    let top = logs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Ok(top + logs.iter().map(|l| 10f64.powf(l - top)).sum::<f64>().log10())
}

/// The network of index `i` of the table.
fn network(i: usize) -> Result<Network, Box<dyn std::error::Error>> {
    Ok(match i {
        0 => lattice(32),
        1 => random_regular(1000, 1),
        2 => lattice(100),
        3 => random_regular(10_000, 2),
        4 => lattice(300),
        5 => random_regular(100_000, 3),
        _ => return Err("no such network".into()),
    }?)
}

/// One row, in this process: network `i`, greedy (`budget` 0) or the hyper-optimizer.
fn row(i: usize, budget: f64) -> Result<(), Box<dyn std::error::Error>> {
    let (name, inputs, sizes) = network(i)?;
    let measured = reset_peak();
    let (t, cpu) = (Instant::now(), cpu_seconds());
    let (path, finder, note) = if budget == 0.0 {
        (einsum::search::find_path(PathChoice::Greedy, &inputs, &[], &sizes)?, "greedy".to_string(), String::new())
    } else {
        let opts = HyperOptions { max_time: Some(Duration::from_secs_f64(budget)), ..HyperOptions::default() };
        let found = hyper_path(&inputs, &[], &sizes, &opts)?;
        let note = format!("{} ({})", found.report.trials, found.report.method);
        (found.path, format!("hyper {budget} s"), note)
    };
    let secs = t.elapsed().as_secs_f64();
    let cpu = match (cpu, cpu_seconds()) {
        (Some(a), Some(b)) => format!("{:.2}", b - a),
        _ => "n/a".to_string(),
    };
    let peak = peak_mib().filter(|_| measured).map_or("n/a".to_string(), |m| format!("{m:.0}"));
    let cost = log10_cost(&inputs, &sizes, &path)?;
    println!("| {name} | {} | {finder} | {secs:.2} | {cpu} | {peak} | {cost:.2} | {note} |", inputs.len());
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, i, budget] = args.as_slice() {
        if flag == "--row" {
            return row(i.parse()?, budget.parse()?);
        }
    }
    let budgets: Vec<f64> = args.iter().map(|a| a.parse()).collect::<Result<_, _>>()?;
    let budgets = if budgets.is_empty() { vec![1.0] } else { budgets };
    println!(
        "| network | tensors | finder | seconds | CPU seconds | peak MiB | log10 multiply-adds | trials (driver) |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---|");
    // Each row in a process of its own, so that its peak memory is its own.
    let exe = std::env::current_exe()?;
    for i in 0..6 {
        for budget in std::iter::once(0.0).chain(budgets.iter().copied()) {
            let out = std::process::Command::new(&exe).args(["--row", &i.to_string(), &budget.to_string()]).output()?;
            if !out.status.success() {
                return Err(String::from_utf8_lossy(&out.stderr).into_owned().into());
            }
            print!("{}", String::from_utf8_lossy(&out.stdout));
        }
    }
    Ok(())
}
