//! Per-step diagnosis of the reverse pass: for each contraction of an instance's forward
//! program, the step alone and its two transposes alone (`ContractSpec::transpose_a`,
//! `transpose_b`), each timed on seeded operands (median of `--reps`, default 5), printed
//! with the largest transpose-to-step ratios first. Also the transposes written in their
//! GEMM's own order (batch, left, right) instead of the operand's layout: what a free
//! cotangent layout would save at the writer (its readers, the transposes of the
//! producing step, would then pay for reading it out of their order), and with their two
//! operands swapped (which one is the GEMM's left matrix). Where the two transposes form a
//! fused pair (`einsum::PairSpec`: a small factor's step), the pair in one pass too, and
//! the sums of both over those steps.
//!
//! `cargo run --release -p einsum --example grad_steps -- [--reps N] [--all] [--threads N] file.json`
//! (`--all`: every step, not the twelve worst; `--threads N`: every kernel run inside a rayon
//! pool of `N` threads, so that the steps and transposes whose kernels split do, to see which
//! of them a second thread speeds up).

mod steps;

use computegraph::{materialize_merge, resolve};
use einsum::{ContractSpec, TensorOp};
use steps::{forward_steps, median_ms, seeded, take_reps};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let reps = take_reps(&mut args, 5);
    let all = args.iter().position(|a| a == "--all").map(|p| args.remove(p)).is_some();
    let threads: usize =
        steps::take_option(&mut args, "--threads").map_or(1, |t| t.parse().expect("--threads takes a number"));
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a rayon pool");
    pool.install(|| run(&args, reps, all));
}

/// `spec` without conjugations, as the gradient program has it on reals.
fn real(spec: &ContractSpec) -> ContractSpec {
    spec.clone().with_conj([false; 2])
}

/// The diagnosis of `args[0]` (module docs), on the current pool's threads.
fn run(args: &[String], reps: usize, all: bool) {
    let (inst, e, specs) = forward_steps(&args[0]);
    // The value-and-gradient program's operations, as `Einsum::gradient` merges them.
    let keys: Vec<einsum::TensorKey> = (0..inst.shapes.len() as u32).map(einsum::TensorKey::var).collect();
    let g = tidu::vjp(&resolve(vec![e.graph().clone()]), std::slice::from_ref(e.output_key()), &keys).expect("vjp");
    let mut out = vec![e.output_key().clone()];
    out.extend(g.tangent_output_keys().into_iter().flatten());
    let both = materialize_merge(&resolve(vec![e.graph().clone(), g.graph().clone()]), &out);
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    for op in both.operations() {
        let k = format!("{:?}", op.operation());
        *kinds.entry(k.split_whitespace().next().unwrap_or("").to_string()).or_default() += 1;
    }
    println!("value+grad program: {} operations {kinds:?}", both.operation_count());
    // How a pool of several threads runs each program: by dependency (`dataflow.rs`) or
    // level by level (computegraph's `eval_parallel`).
    let vg = computegraph::compile(&both);
    println!(
        "by dependency on a pool: forward {} ({} levels), value+grad {} ({} levels)",
        e.program().parallel_by_dependency(),
        e.program().level_count(),
        vg.parallel_by_dependency(),
        vg.level_count()
    );
    let mut rows = Vec::new();
    let (mut tf, mut tt, mut tn, mut tw) = (0.0, 0.0, 0.0, 0.0);
    // Over the steps whose transposes pair: their forward, the two transposes, the pair.
    let (mut pf, mut pt, mut pp, mut np) = (0.0, 0.0, 0.0, 0);
    for s in &specs {
        let (a, b, c) = (seeded(s.a_shape()), seeded(s.b_shape()), seeded(s.out_shape()));
        let f = median_ms(reps, || einsum::TensorOp::contract(s.clone()).apply(&[&a, &b]));
        let ta = s.transpose_a();
        let tb = s.transpose_b();
        let da = median_ms(reps, || TensorOp::contract(ta.clone()).apply(&[&c, &b]));
        let db = median_ms(reps, || TensorOp::contract(tb.clone()).apply(&[&a, &c]));
        // The same transposes writing their result in the order batch, left, right (the
        // GEMM's own, as the forward steps do), to see what a free cotangent layout saves.
        let natural = |x: &[u32], y: &[u32], keep: &[u32]| -> ContractSpec {
            let mut o: Vec<u32> = Vec::new();
            for &l in x.iter().filter(|l| y.contains(l)).chain(x.iter().filter(|l| !y.contains(l))).chain(y.iter()) {
                if keep.contains(&l) && !o.contains(&l) {
                    o.push(l);
                }
            }
            ContractSpec::new(x, y, &o, s.sizes()).expect("a permuted output")
        };
        let na = natural(s.out_labels(), s.b_labels(), s.a_labels());
        let nb = natural(s.a_labels(), s.out_labels(), s.b_labels());
        let fa = median_ms(reps, || TensorOp::contract(na.clone()).apply(&[&c, &b]));
        let fb = median_ms(reps, || TensorOp::contract(nb.clone()).apply(&[&a, &c]));
        // The same transposes with their two operands swapped (`b, cotangent -> a`,
        // `cotangent, a -> b`): which matrix is the GEMM's left one.
        let swap = |x: &ContractSpec| {
            let [ca, cb] = x.conj();
            ContractSpec::new(x.b_labels(), x.a_labels(), x.out_labels(), x.sizes())
                .expect("swapped")
                .with_conj([cb, ca])
        };
        let (sa, sb) = (swap(&ta), swap(&tb));
        let wa = median_ms(reps, || TensorOp::contract(sa.clone()).apply(&[&b, &c]));
        let wb = median_ms(reps, || TensorOp::contract(sb.clone()).apply(&[&c, &a]));
        // The fused pair, whichever operand is the small one (`ta` reads the cotangent
        // first, `tb` second).
        let pair = einsum::PairSpec::new(&real(&ta), [0, 1], &real(&tb), [0, 1])
            .map(|p| (p, [&c, &b, &a]))
            .or_else(|| einsum::PairSpec::new(&real(&tb), [1, 0], &real(&ta), [1, 0]).map(|p| (p, [&c, &a, &b])));
        if let Some((p, [x, y, z])) = pair {
            let op = TensorOp::ContractPair(std::sync::Arc::new(p));
            let fused = median_ms(reps, || op.apply_all(&[x, y, z]).swap_remove(0));
            pf += f;
            pt += da + db;
            pp += fused;
            np += 1;
        }
        tw += wa.min(da) + wb.min(db);
        tn += fa + fb;
        tf += f;
        tt += da + db;
        rows.push((f, da, db, wa, wb, format!("{s:?}")));
    }
    println!(
        "{np} steps whose transposes pair: forward {pf:.3} ms, the two transposes {pt:.3} ms, the fused pairs {pp:.3} ms"
    );
    rows.sort_by(|x, y| (y.1 + y.2 - 2.0 * y.0).total_cmp(&(x.1 + x.2 - 2.0 * x.0)));
    println!(
        "{}: {} steps, forward {tf:.3} ms, transposes {tt:.3} ms, ratio {:.2}; transposes in GEMM order {tn:.3} ms; \
         the better operand order of each {tw:.3} ms",
        inst.name,
        specs.len(),
        tt / tf
    );
    for (f, da, db, wa, wb, s) in rows.iter().take(if all { usize::MAX } else { 12 }) {
        println!(
            "  step {f:8.3} ms | dA {da:8.3} ({wa:.3} swapped) ms | dB {db:8.3} ({wb:.3}) ms | excess {:8.3} ms | {s}",
            da + db - 2.0 * f
        );
    }
}
