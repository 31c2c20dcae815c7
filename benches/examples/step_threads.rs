//! Where a second thread goes: each contraction step of an instance run alone on its
//! recorded inputs, outside any pool (one thread) and inside a pool of two threads (where
//! a step's GEMM and permutations may split), beside whole evaluations on one thread and
//! two (`Einsum::eval_parallel`), interleaved, and value with gradients of every operand
//! (`EinsumGradient::eval_with_value_parallel`).
//!
//! `cargo run --release -p benches --example step_threads -- FILE.json [ROUNDS]`

use std::time::Instant;

use computegraph::ValueRef;
use einsum::{Einsum, Instance, PathChoice, Tensor, TensorOp};

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let file = args.first().expect("an instance file");
    let rounds: usize = args.get(1).map_or(3, |r| r.parse().expect("a number of rounds"));
    let inst = Instance::from_json(&std::fs::read_to_string(file).expect("readable")).expect("an instance");
    let path = inst.opt_flops.clone().expect("an opt_flops path");
    let e = Einsum::<f64>::new(&inst.format_string, &inst.shapes, PathChoice::Explicit(path)).expect("builds");
    let operands = inst.random_operands::<f64>(42).expect("operands");
    let refs: Vec<&Tensor<f64>> = operands.iter().collect();
    // Each operation with its recorded inputs, in program order.
    let g = e.graph();
    let mut vals: Vec<Option<Tensor<f64>>> = vec![None; g.value_count()];
    for (i, &v) in g.inputs().iter().enumerate() {
        vals[v.index()] = Some(operands[i].clone());
    }
    let mut steps: Vec<(TensorOp<f64>, Vec<Tensor<f64>>)> = Vec::new();
    // The step that makes each value (`None` for an operand), and each step's producers.
    let mut made_by: Vec<Option<usize>> = vec![None; g.value_count()];
    let mut after: Vec<Vec<usize>> = Vec::new();
    for op in g.operations() {
        after.push(
            op.inputs()
                .filter_map(|r| match r {
                    ValueRef::Local(v) => made_by[v.index()],
                    ValueRef::External(_) => None,
                })
                .collect(),
        );
        for v in op.outputs() {
            made_by[v.index()] = Some(steps.len());
        }
        let ins: Vec<Tensor<f64>> = op
            .inputs()
            .map(|r| match r {
                ValueRef::Local(v) => vals[v.index()].clone().expect("topological order"),
                ValueRef::External(_) => unreachable!("one fragment"),
            })
            .collect();
        let r: Vec<&Tensor<f64>> = ins.iter().collect();
        vals[op.outputs().next().expect("one output").index()] = Some(op.operation().apply(&r));
        steps.push((op.operation().clone(), ins));
    }
    drop(vals);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a pool");
    let n = steps.len();
    let (mut one, mut two) = (vec![f64::INFINITY; n], vec![f64::INFINITY; n]);
    let (mut e1, mut e2) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..rounds {
        for (i, (op, ins)) in steps.iter().enumerate() {
            let r: Vec<&Tensor<f64>> = ins.iter().collect();
            let t = Instant::now();
            std::hint::black_box(op.apply(&r));
            one[i] = one[i].min(ms(t));
            let t = Instant::now();
            pool.install(|| std::hint::black_box(op.apply(&r)));
            two[i] = two[i].min(ms(t));
        }
        let t = Instant::now();
        std::hint::black_box(e.eval(&refs).expect("evaluates"));
        e1 = e1.min(ms(t));
        let t = Instant::now();
        std::hint::black_box(e.eval_parallel(Some(&pool), &refs).expect("evaluates"));
        e2 = e2.min(ms(t));
    }
    // Value and gradients of every operand, one thread and two (`eval_with_value_parallel`,
    // which stays on one thread where the estimate says two would not pay).
    let all: Vec<usize> = (0..operands.len()).collect();
    let g = e.gradient(&all).expect("a gradient");
    let seed = Tensor::from_fn(e.output_shape().to_vec(), |_| 1.0).expect("a seed");
    let (mut g1, mut g2) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..rounds {
        let t = Instant::now();
        std::hint::black_box(g.eval_with_value(&refs, &seed).expect("evaluates"));
        g1 = g1.min(ms(t));
        let t = Instant::now();
        std::hint::black_box(g.eval_with_value_parallel(Some(&pool), &refs, &seed).expect("evaluates"));
        g2 = g2.min(ms(t));
    }
    let (s1, s2): (f64, f64) = (one.iter().sum(), two.iter().sum());
    println!("{}: {n} steps; steps alone: {s1:.1} ms on one thread, {s2:.1} ms in a pool of two", inst.name);
    println!("whole evaluation (best of {rounds}): {e1:.1} ms on one thread, {e2:.1} ms on two");
    println!("value and gradients (best of {rounds}): {g1:.1} ms on one thread, {g2:.1} ms on two");
    // The longest chain of dependent steps, by their one-thread times: no schedule of
    // unsplit steps beats it, whatever the threads.
    let mut finish = vec![0.0f64; n];
    for i in 0..n {
        finish[i] = after[i].iter().map(|&p| finish[p]).fold(0.0, f64::max) + one[i];
    }
    let critical = finish.iter().copied().fold(0.0, f64::max);
    println!(
        "critical path of unsplit steps: {critical:.1} ms ({:.2}x below their sum at best)",
        s1 / critical.max(s1 / 2.0)
    );
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| one[b].total_cmp(&one[a]));
    println!("{:>5} {:>9} {:>9} {:>6}  step", "#", "1 thr ms", "2 thr ms", "ratio");
    for &i in order.iter().take(15) {
        println!("{i:>5} {:>9.2} {:>9.2} {:>6.2}  {:?}", one[i], two[i], two[i] / one[i], steps[i].0);
    }
}
