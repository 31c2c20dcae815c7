//! Times `linear_transpose` (or `linearize`) in a loop, for profiling: each round builds
//! the AD bench's workload (window-1024 random DAG, 30% repeats, one output) on a fresh
//! interner, linearizes it, and times the chosen transform alone, as
//! `cargo bench -p benches --bench ad` does; `program` times the transpose followed by
//! `DerivativeProgram::new` on its result (what a gradient costs before evaluation).
//!
//! ```text
//! cargo run --release -p examples --example transposebench -- [NODES] [ROUNDS] [transpose|linearize|program]
//! valgrind --tool=callgrind --toggle-collect='tidu::transpose::transpose_in_passes*' \
//!     target/release/examples/transposebench 100000 2
//! ```

use std::hint::black_box;
use std::time::Instant;

use computegraph::{KeyInterner, resolve};
use scalar::ScalarKey;
use scalar::workloads::{self, Operands};

fn main() {
    let arg = |i: usize| std::env::args().nth(i);
    let nodes: usize = arg(1).map(|s| s.replace('_', "").parse().expect("NODES is a number")).unwrap_or(100_000);
    let rounds: usize = arg(2).map(|s| s.parse().expect("ROUNDS is a number")).unwrap_or(10);
    let phase = arg(3).unwrap_or_else(|| "transpose".into());
    let mut spec = workloads::random_dag(nodes, Operands::Window(1024), 0.3, 3);
    spec.outputs.truncate(1);
    let wrt: Vec<ScalarKey> = (0..spec.inputs).map(ScalarKey::var).collect();
    let mut times = Vec::with_capacity(rounds);
    let mut sizes = (0, 0);
    for _ in 0..rounds {
        let built = spec.build_single(&KeyInterner::new()).expect("valid spec");
        let view = resolve(built.graphs.clone());
        let (t, out) = if phase == "linearize" {
            let t = Instant::now();
            let lin = tidu::linearize(&view, &built.outputs, &wrt);
            (t.elapsed(), lin)
        } else {
            let lin = tidu::linearize(&view, &built.outputs, &wrt);
            let t = Instant::now();
            let tr = tidu::linear_transpose(&lin);
            if phase == "program" {
                black_box(tidu::DerivativeProgram::new(&tr).expect("the gradient compiles"));
            }
            let elapsed = t.elapsed();
            sizes = (lin.as_graph().operation_count(), tr.as_graph().operation_count());
            (elapsed, tr)
        };
        times.push(t.as_secs_f64() * 1e9 / nodes as f64);
        black_box(out);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "{phase} {nodes} nodes, {rounds} rounds: ns/node min {:.1} median {:.1}",
        times[0],
        times[times.len() / 2]
    );
    if phase != "linearize" {
        println!(
            "operations per primal node: linear {:.2}, transposed {:.2}",
            sizes.0 as f64 / nodes as f64,
            sizes.1 as f64 / nodes as f64
        );
    }
}
