//! Small-tensor contraction graphs (`docs/SPEC.md` §8.2): microseconds per contraction
//! step and the overhead fraction `(total - kernel time) / total`, where the kernel time
//! is the sum of the operations' own evaluation times measured one by one.
//!
//! - MPS inner product `⟨ψ|ψ⟩`, n sites, physical dimension 2, bond dimension χ, zipper path;
//! - random 3-regular network, N tensors, bond dimension 2, greedy path;
//! - a balanced binary tree of matrix products, 2×2 to 8×8.
//!
//! `cargo run --release -p benches --bin einsum_steps [-- quick]`

#![forbid(unsafe_code)]

use std::time::Instant;

use benches::einsum::{labels, mps};
use computegraph::{EvalState, ValueRef};
use einsum::{ContractionPath, Einsum, PathChoice, Tensor};

struct Net {
    name: String,
    expr: String,
    shapes: Vec<Vec<usize>>,
    path: PathChoice,
    operands: Vec<Tensor<f64>>,
}

impl Net {
    /// The MPS inner product of `benches::einsum::mps` (operands scaled so that the result
    /// stays near 1 at any length).
    fn mps(n: usize, chi: usize) -> Net {
        let m = mps(n, chi);
        Net {
            name: format!("mps n={n} χ={chi}"),
            expr: m.expression,
            shapes: m.shapes,
            path: PathChoice::Explicit(m.path),
            operands: m.operands,
        }
    }
}

/// Operands of the given shapes, entries about `1/√size`.
fn operands(shapes: &[Vec<usize>]) -> Vec<Tensor<f64>> {
    shapes
        .iter()
        .map(|s| {
            let scale = 1.0 / (s.iter().product::<usize>() as f64).sqrt();
            Tensor::from_fn(s.clone(), |i| scale * (1.0 + 0.1 * i.iter().sum::<usize>() as f64)).unwrap()
        })
        .collect()
}

fn tree(n: usize, seed: u64) -> Net {
    let l = labels(n + 1);
    let mut x = seed;
    let mut dim = || {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        2 + (x >> 33) as usize % 7
    };
    let dims: Vec<usize> = (0..=n).map(|_| dim()).collect();
    let terms: Vec<String> = (0..n).map(|i| [l[i], l[i + 1]].iter().collect()).collect();
    let shapes: Vec<Vec<usize>> = (0..n).map(|i| vec![dims[i], dims[i + 1]]).collect();
    // [0, 1] again and again pairs neighbours level by level: a balanced tree.
    let steps = vec![[0, 1]; n - 1];
    Net {
        name: format!("tree of {n} matrices (2..8)"),
        expr: format!("{}->{}{}", terms.join(","), l[0], l[n]),
        operands: operands(&shapes),
        shapes,
        path: PathChoice::Explicit(ContractionPath::new(steps)),
    }
}

fn regular3(n: usize, seed: u64) -> Net {
    // Pairing model, retried until the graph has no loops or multi-edges.
    let mut x = seed;
    let mut rand = |m: usize| {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (x >> 33) as usize % m
    };
    let edges = loop {
        let mut stubs: Vec<usize> = (0..3 * n).map(|s| s / 3).collect();
        for i in (1..stubs.len()).rev() {
            stubs.swap(i, rand(i + 1));
        }
        let mut e: Vec<(usize, usize)> = stubs.chunks(2).map(|c| (c[0].min(c[1]), c[0].max(c[1]))).collect();
        e.sort_unstable();
        let simple = e.iter().all(|&(u, v)| u != v) && e.windows(2).all(|w| w[0] != w[1]);
        if simple {
            break e;
        }
    };
    let l = labels(edges.len());
    let mut terms = vec![String::new(); n];
    for (k, &(u, v)) in edges.iter().enumerate() {
        terms[u].push(l[k]);
        terms[v].push(l[k]);
    }
    Net {
        name: format!("3-regular N={n} χ=2"),
        expr: terms.join(",") + "->",
        operands: operands(&vec![vec![2; 3]; n]),
        shapes: vec![vec![2; 3]; n],
        path: PathChoice::Greedy,
    }
}

fn run(net: &Net) {
    let t = Instant::now();
    let e =
        Einsum::<f64>::new(&net.expr, &net.shapes, net.path.clone()).unwrap_or_else(|e| panic!("{}: {e}", net.name));
    let build = t.elapsed().as_secs_f64();
    let ops = &net.operands;
    let refs: Vec<&Tensor<f64>> = ops.iter().collect();
    let steps = e.program().instruction_count().max(1);
    let mut state = EvalState::new();
    let reps = (200_000 / steps).clamp(3, 200);
    e.eval_with(&mut state, &refs).unwrap();
    let t = Instant::now();
    for _ in 0..reps {
        std::hint::black_box(e.eval_with(&mut state, &refs).unwrap());
    }
    let total = t.elapsed().as_secs_f64() / reps as f64;
    // Kernel time: each operation alone on its recorded inputs.
    let g = e.graph();
    let mut vals: Vec<Option<Tensor<f64>>> = vec![None; g.value_count()];
    for (i, &v) in g.inputs().iter().enumerate() {
        vals[v.index()] = Some(ops[i].clone());
    }
    let mut kernel = 0.0;
    for op in g.operations() {
        let ins: Vec<Tensor<f64>> = op
            .inputs()
            .map(|r| match r {
                ValueRef::Local(v) => vals[v.index()].clone().expect("topological order"),
                ValueRef::External(_) => unreachable!("one fragment"),
            })
            .collect();
        let refs: Vec<&Tensor<f64>> = ins.iter().collect();
        let inner = (reps / 4).max(1);
        let t = Instant::now();
        let mut out = None;
        for _ in 0..inner {
            out = Some(std::hint::black_box(op.operation().apply(&refs)));
        }
        kernel += t.elapsed().as_secs_f64() / inner as f64;
        vals[op.outputs().next().expect("one output").index()] = out;
    }
    println!(
        "{:<32} {:>7} steps  build+compile {:8.2} ms  eval {:9.3} ms  {:7.2} µs/step  overhead {:4.1}%",
        net.name,
        steps,
        build * 1e3,
        total * 1e3,
        total * 1e6 / steps as f64,
        100.0 * (total - kernel).max(0.0) / total
    );
}

fn main() {
    let quick = std::env::args().any(|a| a == "quick");
    let sites: &[usize] = if quick { &[100] } else { &[100, 1000, 10000] };
    for &n in sites {
        for chi in [1, 2, 4, 8] {
            run(&Net::mps(n, chi));
        }
    }
    for n in [50, 100] {
        run(&regular3(n, n as u64));
    }
    run(&tree(if quick { 1000 } else { 100_000 }, 1));
}
