//! Products that sum nothing, with each result's range (`strip_exponent=None`'s test) as
//! the Python extension's checked calls need it, two ways in one binary, alternated per
//! round with the operands out of the caches (a 64 MiB copy before each call):
//! - `program`: the compiled program's call, then `RangeScan::of` of the result (the
//!   forward), or the gradient program with a `Range` step after each result
//!   (`eval_with_value_and_range`, the value+gradient for a cotangent of 1);
//! - `kernel`: `ElementwiseProduct` (or `Hadamard3` for three operands), which scans each
//!   result as it writes it.
//!
//! Printed: median and range of each, in milliseconds, per expression at `2^20` output
//! elements, on the calling thread, or inside a rayon pool of `--threads` threads.
//!
//! `cargo run --release -p einsum --example product_ranges -- [--reps N] [--threads T]`

use std::time::Instant;

use einsum::{Einsum, ElementwiseProduct, Hadamard3, MemoryLimit, PathChoice, Plan, RangeScan, Tensor};

fn cell(v: &mut [f64]) -> String {
    v.sort_by(f64::total_cmp);
    format!("{:.3} [{:.3}-{:.3}]", v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map_or(default, |v| v.parse().expect("a count"))
    };
    let (reps, threads) = (arg("--reps", 41), arg("--threads", 1));
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a pool");
    let run = |f: &mut (dyn FnMut() + Send)| if threads > 1 { pool.install(f) } else { f() };
    let src = vec![1.0f64; 8 << 20];
    let mut flush = vec![0.0f64; 8 << 20];
    let cases: [(&str, Vec<Vec<usize>>); 5] = [
        ("ij,j->ij", vec![vec![1024, 1024], vec![1024]]),
        ("ij,i->ij", vec![vec![1024, 1024], vec![1024]]),
        ("ijk,jk->ijk", vec![vec![128, 128, 64], vec![128, 64]]),
        ("ij,ji->ij", vec![vec![1024, 1024], vec![1024, 1024]]),
        ("ij,ij,ij->ij", vec![vec![1024, 1024]; 3]),
    ];
    for (eq, shapes) in cases {
        let e = Einsum::<f64>::new(eq, &shapes, PathChoice::Greedy).expect("an expression");
        let wrt: Vec<usize> = (0..shapes.len()).collect();
        let g = e.gradient_of_sum(&wrt).expect("a gradient");
        let plan = Plan::new(eq, &shapes, PathChoice::Greedy, MemoryLimit::Unlimited).expect("a plan");
        let (product, triple) = (ElementwiseProduct::for_plan(&plan), Hadamard3::for_plan(&plan));
        let ops: Vec<Tensor<f64>> = shapes
            .iter()
            .map(|s| {
                Tensor::from_fn(s.clone(), |ix| (ix.iter().sum::<usize>() % 7) as f64 * 0.25 + 0.5).expect("a tensor")
            })
            .collect();
        let refs: Vec<&Tensor<f64>> = ops.iter().collect();
        let one = Tensor::scalar(1.0);
        let mut t = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
        let mut time = |k: usize, f: &mut (dyn FnMut() + Send), record: bool| {
            flush.copy_from_slice(&src);
            let s = Instant::now();
            run(f);
            if record {
                t[k].push(s.elapsed().as_secs_f64() * 1e3);
            }
        };
        for r in 0..=reps {
            let record = r > 0; // the first round maps the buffers
            time(0, &mut || assert!(!RangeScan::of(e.eval(&refs).expect("a value").data()).left_range()), record);
            time(
                1,
                &mut || match (&product, &triple) {
                    (Some(p), _) => assert!(!p.value_with_range(refs[0], refs[1]).expect("a value").1.left_range()),
                    (_, Some(h)) => {
                        assert!(!h.value_with_range([refs[0], refs[1], refs[2]]).expect("a value").1.left_range())
                    }
                    _ => unreachable!("every case is a product"),
                },
                record,
            );
            time(
                2,
                &mut || {
                    let (_, _, ranges) = g.eval_with_value_and_range(&refs, &one).expect("value and gradients");
                    assert!(!ranges.iter().any(RangeScan::left_range));
                },
                record,
            );
            time(
                3,
                &mut || match (&product, &triple) {
                    (Some(p), _) => assert!(!p.value_and_grad(refs[0], refs[1], &one, &wrt).expect("v+g").left_range),
                    (_, Some(h)) => {
                        assert!(!h.value_and_grad([refs[0], refs[1], refs[2]], &one, &wrt).expect("v+g").left_range)
                    }
                    _ => unreachable!("every case is a product"),
                },
                record,
            );
        }
        let [mut a, mut b, mut c, mut d] = t;
        println!(
            "{eq:13} threads {threads}: fwd program {}  kernel {} | v+g program {}  kernel {}",
            cell(&mut a),
            cell(&mut b),
            cell(&mut c),
            cell(&mut d)
        );
    }
}
