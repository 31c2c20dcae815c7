//! The element-wise product `ij,ij->ij` (`Hadamard`): its value, and its value and both
//! gradients for a scalar cotangent (what `peers.py`'s `elementwise_2048x2048` row calls),
//! alternated per round on the calling thread, and inside a rayon pool of `--threads`
//! threads when that is above 1. Printed: the median and range of each, in milliseconds,
//! and their ratio.
//!
//! `cargo run --release -p einsum --example hadamard_vg -- [--reps N] [--side S] [--threads T]`

use std::time::Instant;

use einsum::{Hadamard, MemoryLimit, PathChoice, Plan, Tensor};

fn cell(v: &mut [f64]) -> (f64, String) {
    v.sort_by(f64::total_cmp);
    let m = v[v.len() / 2];
    (m, format!("{m:.3} [{:.3}-{:.3}]", v[0], v[v.len() - 1]))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let arg = |name: &str, default: usize| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .map_or(default, |v| v.parse().expect("a count"))
    };
    let (reps, side, threads) = (arg("--reps", 41), arg("--side", 2048), arg("--threads", 1));
    let shape = vec![side, side];
    let plan = Plan::new("ij,ij->ij", &[shape.clone(), shape.clone()], PathChoice::Greedy, MemoryLimit::Unlimited)
        .expect("a plan");
    let h = Hadamard::for_plan(&plan).expect("an element-wise product");
    let a = Tensor::from_fn(shape.clone(), |ix| ((ix[0] * 7 + ix[1] * 3) % 17) as f64 - 8.0).expect("a tensor");
    let b = Tensor::from_fn(shape, |ix| ((ix[0] * 5 + ix[1]) % 13) as f64 * 0.25).expect("a tensor");
    let c = Tensor::new(vec![], vec![1.0]).expect("a scalar");
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a pool");
    let run = |f: &mut (dyn FnMut() + Send)| if threads > 1 { pool.install(f) } else { f() };
    let mut times = [Vec::new(), Vec::new()];
    for r in 0..reps + 1 {
        let t = Instant::now();
        run(&mut || drop(h.value(&a, &b).expect("a value")));
        let fwd = t.elapsed().as_secs_f64() * 1e3;
        let t = Instant::now();
        run(&mut || drop(h.value_and_grad(&a, &b, &c, &[0, 1]).expect("a value and gradients")));
        let vg = t.elapsed().as_secs_f64() * 1e3;
        // The first round maps the buffers.
        if r > 0 {
            times[0].push(fwd);
            times[1].push(vg);
        }
    }
    let [mut f, mut g] = times;
    let ((fm, fs), (gm, gs)) = (cell(&mut f), cell(&mut g));
    println!("{side}x{side} threads {threads}: value {fs}  value+grad {gs}  ratio {:.2}", gm / fm);
}
