//! Broadcast products at `2^20` output elements (`ij,j->ij`, `ij,i->ij`, `ijk,jk->ijk`,
//! `bi,bj->bij`): each call's time with its operands out of the caches (a 64 MiB copy
//! before each call evicts them), the range scan of its result right after (what a Python call's `strip_exponent=None`
//! test reads), and a plain copy of the output's size as the
//! bandwidth bar. Printed: the median and range of each, in milliseconds.
//!
//! `cargo run --release -p einsum --example broadcast_fwd -- [--reps N]`

use std::time::Instant;

use einsum::{Einsum, PathChoice, RangeScan, Tensor};

fn cell(v: &mut [f64]) -> String {
    v.sort_by(f64::total_cmp);
    format!("{:.3} [{:.3}-{:.3}]", v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let reps = args
        .iter()
        .position(|a| a == "--reps")
        .and_then(|i| args.get(i + 1))
        .map_or(41, |v| v.parse().expect("a count"));
    let src = vec![1.0f64; 8 << 20];
    let mut flush = vec![0.0f64; 8 << 20];
    let cases: [(&str, Vec<Vec<usize>>); 4] = [
        ("ij,j->ij", vec![vec![1024, 1024], vec![1024]]),
        ("ij,i->ij", vec![vec![1024, 1024], vec![1024]]),
        ("ijk,jk->ijk", vec![vec![128, 128, 64], vec![128, 64]]),
        ("bi,bj->bij", vec![vec![256, 64], vec![256, 64]]),
    ];
    for (eq, shapes) in cases {
        let e = Einsum::<f64>::new(eq, &shapes, PathChoice::Greedy).expect("an expression");
        let ops: Vec<Tensor<f64>> = shapes
            .iter()
            .map(|s| Tensor::from_fn(s.clone(), |ix| (ix.iter().sum::<usize>() % 7) as f64 - 3.0).expect("a tensor"))
            .collect();
        let refs: Vec<&Tensor<f64>> = ops.iter().collect();
        let mut copy_src = vec![0.5f64; 1 << 20];
        let mut copy_dst = vec![0.0f64; 1 << 20];
        let (mut call, mut scan, mut copy) = (Vec::new(), Vec::new(), Vec::new());
        drop(e.eval(&refs).expect("a product"));
        for _ in 0..reps {
            flush.copy_from_slice(&src);
            let t = Instant::now();
            let out = e.eval(&refs).expect("a product");
            call.push(t.elapsed().as_secs_f64() * 1e3);
            let t = Instant::now();
            let s = RangeScan::of(out.data());
            scan.push(t.elapsed().as_secs_f64() * 1e3);
            assert!(!s.left_range());
            drop(out);
            flush.copy_from_slice(&src);
            let t = Instant::now();
            copy_dst.copy_from_slice(&copy_src);
            copy.push(t.elapsed().as_secs_f64() * 1e3);
            copy_src[0] += copy_dst[1];
        }
        println!("{eq:12} call {}  scan after {}  copy {}", cell(&mut call), cell(&mut scan), cell(&mut copy));
    }
}
