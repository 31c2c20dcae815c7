//! One GEMM shape `m × n × k` under each of the eight layouts of its three tensors
//! (`a` as `ik` or `ki`, `b` as `kj` or `jk`, the result as `ij` or `ji`), each run
//! through the kernels as a contraction: what the GEMM path's rate depends on besides the
//! shape, so that a step's time can be set against the best layout of its own GEMM (and a
//! layout change against what it could gain). The layouts are alternated round by round
//! (`--rounds`, default 3, each the median of 9 runs) and the median round printed.
//!
//! `cargo run --release -p einsum --example gemm_layouts -- [--rounds N] M N K`

#[allow(dead_code, reason = "this example takes only the operands and the timer of the shared module")]
mod steps;

use einsum::{ContractSpec, TensorOp};
use steps::{median_ms, seeded, take_option};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let rounds: usize = take_option(&mut args, "--rounds").map_or(3, |r| r.parse().expect("--rounds takes a number"));
    let dims: Vec<usize> = args.iter().map(|a| a.parse().expect("M N K are numbers")).collect();
    let [m, n, k] = dims[..] else { panic!("usage: gemm_layouts [--rounds N] M N K") };
    // Labels: `i` (0) of size m, `j` (1) of size n, `l` (2) of size k.
    let sizes = [m, n, k];
    let name = |l: &[u32]| l.iter().map(|&c| ['i', 'j', 'k'][c as usize]).collect::<String>();
    let mut cases = Vec::new();
    for a in [[0u32, 2], [2, 0]] {
        for b in [[2u32, 1], [1, 2]] {
            for o in [[0u32, 1], [1, 0]] {
                let s = ContractSpec::new(&a, &b, &o, &sizes).expect("a valid spec");
                let operands = (seeded(s.a_shape()), seeded(s.b_shape()));
                cases.push((format!("{},{}->{}", name(&a), name(&b), name(&o)), s, operands, Vec::new()));
            }
        }
    }
    for _ in 0..rounds.max(1) {
        for (_, s, (x, y), times) in &mut cases {
            times.push(median_ms(9, || TensorOp::contract(s.clone()).apply(&[&*x, &*y])));
        }
    }
    println!("{m} × {n} × {k}: ms (median round of {rounds}) and multiply-adds per ns");
    for (label, _, _, times) in &mut cases {
        times.sort_by(f64::total_cmp);
        let t = times[times.len() / 2];
        println!("  {label}  {t:8.3} ms  {:5.1}", (m * n * k) as f64 / t / 1e6);
    }
}
