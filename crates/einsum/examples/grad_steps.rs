//! Per-step diagnosis of the reverse pass: for each contraction of an instance's forward
//! program, the step alone and its two transposes alone (`ContractSpec::transpose_a`,
//! `transpose_b`), each timed on seeded operands (median of `--reps`, default 5), printed
//! with the largest transpose-to-step ratios first. Also the transposes written in their
//! GEMM's own order (batch, left, right) instead of the operand's layout: what a free
//! cotangent layout would save at the writer (its readers, the transposes of the
//! producing step, would then pay for reading it out of their order).
//!
//! `cargo run --release -p einsum --example grad_steps -- [--reps N] file.json`

mod steps;

use computegraph::{materialize_merge, resolve};
use einsum::{ContractSpec, TensorOp};
use steps::{forward_steps, median_ms, seeded, take_reps};

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let reps = take_reps(&mut args, 5);
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
    let mut rows = Vec::new();
    let (mut tf, mut tt, mut tn) = (0.0, 0.0, 0.0);
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
        tn += fa + fb;
        tf += f;
        tt += da + db;
        rows.push((f, da, db, format!("{s:?}")));
    }
    rows.sort_by(|x, y| (y.1 + y.2 - 2.0 * y.0).total_cmp(&(x.1 + x.2 - 2.0 * x.0)));
    println!(
        "{}: {} steps, forward {tf:.3} ms, transposes {tt:.3} ms, ratio {:.2}; transposes in GEMM order {tn:.3} ms",
        inst.name,
        specs.len(),
        tt / tf
    );
    for (f, da, db, s) in rows.iter().take(12) {
        println!("  step {f:8.3} ms | dA {da:8.3} ms | dB {db:8.3} ms | excess {:8.3} ms | {s}", da + db - 2.0 * f);
    }
}
