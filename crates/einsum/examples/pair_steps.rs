//! Per-step timing of the fused reverse pairs (`einsum::PairSpec`) against their two
//! transposes run alone: for each forward step of an instance whose transposes pair (a
//! small factor's step), the step, `dA`, `dB` and the pair in one pass, each the median of
//! `--reps` (default 5) on seeded operands, printed slowest pair first with the sums, so
//! that a change to the element-wise or the pair kernel can be seen on the reverse steps
//! it moves.
//!
//! `cargo run --release -p einsum --example pair_steps -- [--reps N] [--threads N] file.json`
//! (`--threads N`: every kernel inside a rayon pool of `N` threads).

mod steps;

use einsum::{ContractSpec, TensorOp};
use steps::{forward_steps, median_ms, seeded, take_option, take_reps};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let reps = take_reps(&mut args, 5);
    let threads: usize =
        take_option(&mut args, "--threads").map_or(1, |t| t.parse().expect("--threads takes a number"));
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a rayon pool");
    pool.install(|| run(&args[0], reps));
}

/// `spec` without conjugations, as the gradient program has it on reals.
fn real(spec: &ContractSpec) -> ContractSpec {
    spec.clone().with_conj([false; 2])
}

fn run(file: &str, reps: usize) {
    let (inst, _, specs) = forward_steps(file);
    let mut rows = Vec::new();
    for s in &specs {
        let (a, b, c) = (seeded(s.a_shape()), seeded(s.b_shape()), seeded(s.out_shape()));
        let (ta, tb) = (s.transpose_a(), s.transpose_b());
        // The fused pair, whichever operand is the small one (`ta` reads the cotangent
        // first, `tb` second), as `grad_steps` forms it.
        let pair = einsum::PairSpec::new(&real(&ta), [0, 1], &real(&tb), [0, 1])
            .map(|p| (p, [&c, &b, &a]))
            .or_else(|| einsum::PairSpec::new(&real(&tb), [1, 0], &real(&ta), [1, 0]).map(|p| (p, [&c, &a, &b])));
        let Some((p, [x, y, z])) = pair else { continue };
        let f = median_ms(reps, || TensorOp::contract(s.clone()).apply(&[&a, &b]));
        let da = median_ms(reps, || TensorOp::contract(ta.clone()).apply(&[&c, &b]));
        let db = median_ms(reps, || TensorOp::contract(tb.clone()).apply(&[&a, &c]));
        let op = TensorOp::ContractPair(std::sync::Arc::new(p));
        let fused = median_ms(reps, || op.apply_all(&[x, y, z]).swap_remove(0));
        rows.push((fused, f, da, db, format!("{s:?}")));
    }
    rows.sort_by(|x, y| y.0.total_cmp(&x.0));
    let sum = |i: usize| rows.iter().map(|r| [r.0, r.1, r.2, r.3][i]).sum::<f64>();
    println!(
        "{}: {} paired steps, fused pairs {:.3} ms, forward {:.3}, dA {:.3}, dB {:.3}",
        inst.name,
        rows.len(),
        sum(0),
        sum(1),
        sum(2),
        sum(3)
    );
    for (fused, f, da, db, s) in &rows {
        println!("  pair {fused:8.4} ms | step {f:8.4} | dA {da:8.4} | dB {db:8.4} | {s}");
    }
}
