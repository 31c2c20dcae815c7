//! Where the value+gradient program's time goes, operation by operation, in place: the
//! program of `Einsum::gradient` (the forward graph merged with tidu's VJP of it) run one
//! operation at a time in program order, each value dropped after its last reader, as the
//! compiled program does; and the forward program the same way. Each operation's time is
//! the median over `--reps` runs of the whole program, so it includes the cache state the
//! operations before it leave (what the isolated steps of `grad_steps` leave out).
//!
//! Prints the minor page faults per run of each program, the forward program's total, the
//! value+gradient program's forward part (the operations that do not read the cotangent)
//! and reverse part, the `--top N` slowest reverse operations (time and nanoseconds per
//! multiply-add), and the `--top N` slowest forward steps alone beside the same position
//! of the merged program (its forward steps come first, in the forward program's order).
//!
//! `--sum`: the program of `Einsum::gradient_of_sum` instead (the cotangent the scalar 1),
//! its fragment built here as `sum_seed.rs` builds it (the last contraction's operands
//! summed over the labels the other lacks, then contracted to a scalar), except that each
//! operand is summed in one stage (`sum_seed.rs` sums a large one in stages that span the
//! cache: MERA's `abcdefgh->ah` 19 ms in one, 8 in two). One-operand einsums are listed
//! wherever they are.
//!
//! `cargo run --release -p einsum --example vg_ops -- [--reps N] [--top N] [--sum] file.json`

// Shared with the other per-step examples; this one uses part of it.
#[allow(dead_code)]
mod steps;

use std::time::Instant;

use std::sync::Arc;

use computegraph::{
    Graph, GraphBuilder, LocalValueDef, MaterializedGraph, MaterializedValueDef, OperationRole, ValueKey, ValueRef,
    materialize_merge, resolve,
};
use einsum::{ContractSpec, Einsum, Tensor, TensorKey, TensorOp, UnarySpec};
use steps::{forward_steps, take_option, take_reps};

/// Per operation of `g`, its median time over `reps` runs of the whole program step by
/// step (ms), and the program's median total.
fn run_steps(
    g: &MaterializedGraph<TensorOp<f64>>,
    bind: &dyn Fn(&TensorKey) -> Tensor<f64>,
    reps: usize,
) -> (Vec<f64>, f64) {
    let n = g.value_count();
    // The last operation reading each value (program outputs: never dropped).
    let mut last = vec![usize::MAX; n];
    for (i, op) in g.operations().enumerate() {
        for v in op.inputs() {
            last[v.index()] = i;
        }
    }
    for v in g.outputs() {
        last[v.index()] = usize::MAX - 1;
    }
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); g.operation_count()];
    let mut totals = Vec::new();
    let faults0 = minor_faults();
    for _ in 0..reps {
        let mut vals: Vec<Option<Tensor<f64>>> = vec![None; n];
        for (v, k) in g.inputs().iter().zip(g.input_keys()) {
            vals[v.index()] = Some(bind(k));
        }
        let start = Instant::now();
        for (i, op) in g.operations().enumerate() {
            let t = Instant::now();
            let out = {
                let args: Vec<&Tensor<f64>> =
                    op.inputs().iter().map(|v| vals[v.index()].as_ref().expect("an operand made before")).collect();
                op.operation().apply(&args)
            };
            times[i].push(t.elapsed().as_secs_f64() * 1e3);
            let o = op.outputs().next().expect("one output");
            vals[o.index()] = Some(out);
            for v in op.inputs() {
                if last[v.index()] == i && !matches!(g.value_def(*v), Some(MaterializedValueDef::Input(_))) {
                    vals[v.index()] = None;
                }
            }
        }
        totals.push(start.elapsed().as_secs_f64() * 1e3);
    }
    println!(
        "  {} ops: {:.0} minor page faults per run",
        g.operation_count(),
        (minor_faults() - faults0) as f64 / reps as f64
    );
    let med = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    (times.into_iter().map(med).collect(), med(totals))
}

/// The process's minor page faults so far.
#[allow(unsafe_code)] // the crate denies it; this call has no safe form in std
fn minor_faults() -> i64 {
    // SAFETY: `getrusage` writes the zeroed struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid `rusage` to write to.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
    assert_eq!(rc, 0, "getrusage");
    u.ru_minflt
}

/// The sum of `e`'s output as a fragment over its graph, in the form `sum_seed.rs` gives it
/// (the last contraction's operands summed over the labels the other lacks), but each sum
/// in one stage, without `sum_seed.rs`'s stages and conjugation (a profiling aid: the
/// library's own sum is crate-private); a last operation that is not a contraction is an
/// error here.
fn sum_fragment(e: &Einsum<f64>) -> (Arc<Graph<TensorOp<f64>>>, ValueKey<TensorOp<f64>>) {
    let forward = e.graph();
    let output = forward.outputs()[0];
    let Some(LocalValueDef::Output { operation, .. }) = forward.value_def(output) else {
        panic!("an operation's output")
    };
    let op = forward.operation(operation);
    let TensorOp::Contract(spec) = op.operation() else { panic!("--sum needs a last contraction") };
    let refs: Vec<ValueRef<TensorOp<f64>>> = op
        .inputs()
        .map(|r| match r {
            ValueRef::Local(v) => ValueRef::External(forward.global_key(v)),
            r => r,
        })
        .collect();
    let mut b = GraphBuilder::<TensorOp<f64>>::with_interner(forward.interner().clone());
    b.add_parent(forward.clone());
    let shared = |l: &[u32], other: &[u32]| {
        let mut out: Vec<u32> = Vec::new();
        for &c in l {
            if other.contains(&c) && !out.contains(&c) {
                out.push(c);
            }
        }
        out
    };
    let (la, lb, sizes) = (spec.a_labels(), spec.b_labels(), spec.sizes());
    let (sa, sb) = (shared(la, lb), shared(lb, la));
    let mut reduced = |r: ValueRef<TensorOp<f64>>, l: &[u32], kept: &[u32]| {
        if l.len() == kept.len() {
            return r;
        }
        let u = UnarySpec::new(l, kept, sizes).expect("a sum");
        ValueRef::Local(b.add_operation(TensorOp::unary(u), vec![r], OperationRole::Primary)[0])
    };
    let ra = reduced(refs[0].clone(), la, &sa);
    let rb = reduced(refs[1].clone(), lb, &sb);
    let closed = ContractSpec::new(&sa, &sb, &[], sizes).expect("a closed contraction");
    let s = b.add_operation(TensorOp::contract(closed), vec![ra, rb], OperationRole::Primary)[0];
    b.set_outputs(vec![s]);
    let g = Arc::new(b.build());
    let key = g.global_key(s);
    (g, key)
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let sum = args.iter().any(|a| a == "--sum");
    args.retain(|a| a != "--sum");
    let reps = take_reps(&mut args, 5);
    let top: usize = take_option(&mut args, "--top").map_or(15, |t| t.parse().expect("--top takes a number"));
    let (inst, e, _) = forward_steps(&args[0]);
    let ops = inst.random_operands::<f64>(42).expect("operands");
    let keys: Vec<TensorKey> = (0..inst.shapes.len() as u32).map(TensorKey::var).collect();
    let mut graphs = vec![e.graph().clone()];
    let f = if sum {
        let (fragment, key) = sum_fragment(&e);
        graphs.push(fragment);
        key
    } else {
        e.output_key().clone()
    };
    let g = tidu::vjp(&resolve(graphs.clone()), std::slice::from_ref(&f), &keys).expect("vjp");
    let mut out = vec![e.output_key().clone()];
    out.extend(g.tangent_output_keys().into_iter().flatten());
    graphs.push(g.graph().clone());
    let both = materialize_merge(&resolve(graphs), &out);
    let fwd = materialize_merge(&resolve(vec![e.graph().clone()]), std::slice::from_ref(e.output_key()));
    let ones = if sum { Tensor::scalar(1.0) } else { Tensor::ones(e.output_shape().to_vec()).expect("a cotangent") };
    let bind = |k: &TensorKey| match k {
        TensorKey::Var(i) => ops[*i as usize].clone(),
        _ => ones.clone(),
    };
    // Warm up both (the buffer pool, faer's workspace).
    run_steps(&fwd, &bind, 1);
    run_steps(&both, &bind, 1);
    let (ft, ftotal) = run_steps(&fwd, &bind, reps);
    let (bt, btotal) = run_steps(&both, &bind, reps);
    // The reverse part: every operation that depends on the cotangent (the seed input).
    let mut seeded = vec![false; both.value_count()];
    for (v, k) in both.inputs().iter().zip(both.input_keys()) {
        seeded[v.index()] = matches!(k, TensorKey::Tangent(_));
    }
    let (mut fpart, mut rpart, mut rows) = (0.0, 0.0, Vec::new());
    for (i, op) in both.operations().enumerate() {
        let rev = op.inputs().iter().any(|v| seeded[v.index()]);
        for o in op.outputs() {
            seeded[o.index()] = rev;
        }
        if rev {
            rpart += bt[i];
            let macs = match op.operation() {
                TensorOp::Contract(s) => s.multiply_adds() as f64,
                TensorOp::Unary(s) => s.multiply_adds() as f64,
                _ => f64::NAN,
            };
            rows.push((bt[i], i, format!("{:?} {:.2} ns/MAC", op.operation(), bt[i] * 1e6 / macs)));
        } else {
            fpart += bt[i];
        }
    }
    // One-operand einsums (first sums, `--sum`'s sums and their broadcasts), wherever.
    for (i, op) in both.operations().enumerate() {
        if let TensorOp::Unary(_) = op.operation() {
            println!("  unary {:8.3} ms  op {i:4}  {:?}", bt[i], op.operation());
        }
    }
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    println!(
        "{}: forward program {} ops {:.3} ms (sum of ops {:.3}); value+grad {} ops {:.3} ms: forward part {:.3}, reverse part {:.3} ({:.2} forwards), total/fwd {:.2}",
        inst.name,
        fwd.operation_count(),
        ftotal,
        ft.iter().sum::<f64>(),
        both.operation_count(),
        btotal,
        fpart,
        rpart,
        rpart / ftotal,
        btotal / ftotal
    );
    for (t, i, k) in rows.iter().take(top) {
        println!("  {t:8.3} ms  op {i:4}  {k}");
    }
    // Forward ops, largest first, with the same op in the merged program.
    let mut fr: Vec<(f64, f64, String)> = fwd
        .operations()
        .enumerate()
        .map(|(i, op)| {
            let macs = match op.operation() {
                TensorOp::Contract(s) => s.multiply_adds() as f64,
                _ => f64::NAN,
            };
            let bi = if i < both.operation_count() { bt[i] } else { f64::NAN };
            (ft[i], bi, format!("{:?} {:.2} ns/MAC", op.operation(), ft[i] * 1e6 / macs))
        })
        .collect();
    fr.sort_by(|a, b| b.0.total_cmp(&a.0));
    println!("forward ops (alone | in value+grad, assuming the same position):");
    for (a, b, k) in fr.iter().take(top) {
        println!("  {a:8.3} | {b:8.3} ms  {k}");
    }
}
