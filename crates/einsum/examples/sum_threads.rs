//! A one-operand sum (`ij->j`, `ij->i`, `ij->`) inside a rayon pool of one thread against
//! one of two, each call made with `pool.install` so that the sum kernel sees the pool's
//! threads whatever the program's pricing would choose; rounds alternate the two pools.
//! Printed per expression: `uses_threads(2)` (whether a call from outside enters the
//! pool at all), and the median and range of each pool's calls, in milliseconds.
//!
//! `cargo run --release -p einsum --example sum_threads -- [--reps N] [--rows R] [--cols C]`

use std::time::Instant;

use einsum::{Einsum, PathChoice, Tensor};

fn cell(mut v: Vec<f64>) -> String {
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
    let (reps, rows, cols) = (arg("--reps", 41), arg("--rows", 1024), arg("--cols", 1024));
    let a = Tensor::from_fn(vec![rows, cols], |ix| ((ix[0] * 7 + ix[1] * 3) % 17) as f64 - 8.0).expect("a tensor");
    let pools = [1, 2].map(|n| rayon::ThreadPoolBuilder::new().num_threads(n).build().expect("a pool"));
    for eq in ["ij->j", "ij->i", "ij->"] {
        let e = Einsum::<f64>::new(eq, &[vec![rows, cols]], PathChoice::Greedy).expect("an expression");
        let mut times = [Vec::new(), Vec::new()];
        for r in 0..reps {
            for k in [r % 2, 1 - r % 2] {
                let t = Instant::now();
                let out = pools[k].install(|| e.eval(&[&a])).expect("a sum");
                times[k].push(t.elapsed().as_secs_f64() * 1e3);
                drop(out);
            }
        }
        let [one, two] = times;
        println!("{eq} {rows}x{cols}: uses_threads(2) {}  1t {}  2t {}", e.uses_threads(2), cell(one), cell(two));
    }
}
