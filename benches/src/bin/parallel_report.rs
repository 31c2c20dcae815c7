//! Sequential against level-parallel evaluation, interleaved, for a shared machine.
//!
//! ```text
//! cargo run --release -p benches --bin parallel_report -- [--nodes N] [--rounds R] [--workloads a,b]
//! ```
//!
//! Workloads: every scalar shape (`window`, `uniform`, `chain`, `layered_wide`,
//! `layered_deep` (1000 wide)) of `N` nodes (default 10^7, so `layered_wide` is 10^5 wide ×
//! 100 deep), and `matmul_layered` (10^4 matrix
//! products of about 10 µs, [`benches::heavy`], with its engine-free baselines). The
//! layered workloads also run their engine-free floor, [`benches::layers::FlatLayers`], on
//! one and two threads (`flat_layers`, `flat_layers_2t`). Each round
//! runs every implementation of a workload once, one after the other, so that load from
//! other processes falls on all of them alike; the report gives each implementation's
//! median and minimum over `R` rounds (default 15) and the speedups of both. Each round
//! starts one implementation later than the one before, so that none always runs first,
//! after the previous round's last one has evicted its data from the shared cache. The criterion
//! group `eval_parallel` measures the same things with medians of separate runs; this
//! report exists because on a shared two-core machine a separate 2-second window is often
//! loaded for one implementation and not the next.

#![forbid(unsafe_code)]

use std::time::Instant;

use benches::heavy::HeavyWorkload;
use benches::{SPEC_SEED, Shape, Workload, bind_inputs, build, materialize};
use computegraph::{EvalState, compile};

fn usage(msg: &str) -> ! {
    eprintln!(
        "error: {msg}\nusage: parallel_report [--nodes N] [--rounds R] [--workloads a,b] (N accepts `_` and `1e7`; workloads: window, uniform, chain, layered_wide, layered_deep, matmul_layered)"
    );
    std::process::exit(2)
}

fn parse_count(s: &str) -> usize {
    benches::parse_count(s).unwrap_or_else(|e| usage(&e))
}

/// Times each closure once per round, interleaved; prints medians, minimums and the
/// speedups of every implementation over the first.
fn report(name: &str, rounds: usize, impls: &mut [(&str, &mut dyn FnMut())]) {
    let mut times: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); impls.len()];
    for (_, f) in impls.iter_mut() {
        f(); // warm-up
    }
    // Each round starts one implementation later: the first of a round runs after the
    // last of the round before (the two-thread floor, which evicts the program from the
    // shared cache), so a fixed order would always hand the same one a cold cache.
    let n = impls.len();
    for r in 0..rounds {
        for k in (0..n).map(|j| (r + j) % n) {
            let t = Instant::now();
            (impls[k].1)();
            times[k].push(t.elapsed().as_secs_f64() * 1e3);
        }
    }
    let stats: Vec<(f64, f64)> = times
        .iter_mut()
        .map(|t| {
            t.sort_by(f64::total_cmp);
            (t[t.len() / 2], t[0])
        })
        .collect();
    for ((who, _), &(median, min)) in impls.iter().zip(&stats) {
        println!(
            "{name:15} {who:16} median {median:9.2} ms  min {min:9.2} ms  speedup: median {:.2}×, min {:.2}×",
            stats[0].0 / median,
            stats[0].1 / min
        );
    }
}

fn main() {
    let (mut nodes, mut rounds) = (10_000_000, 15);
    let mut only: Option<Vec<String>> = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let Some(v) = it.next() else { usage(&format!("`{a}` needs a value")) };
        match a.as_str() {
            "--nodes" => nodes = parse_count(&v),
            "--rounds" => rounds = parse_count(&v).max(1),
            "--workloads" => only = Some(v.split(',').map(str::to_owned).collect()),
            _ => usage(&format!("unexpected `{a}`")),
        }
    }
    const WORKLOADS: [&str; 6] = ["window", "uniform", "chain", "layered_wide", "layered_deep", "matmul_layered"];
    if let Some(unknown) = only.iter().flatten().find(|w| !WORKLOADS.contains(&w.as_str())) {
        usage(&format!("unknown workload `{unknown}`"));
    }
    let wanted = |name: &str| only.as_ref().is_none_or(|o| o.iter().any(|x| x == name));
    let pools: Vec<rayon::ThreadPool> =
        [1, 2].iter().map(|&t| rayon::ThreadPoolBuilder::new().num_threads(t).build().expect("pool")).collect();
    println!("parallel_report: {nodes} nodes, {rounds} rounds, times per evaluation");
    for shape in Shape::ALL {
        if !wanted(shape.name()) {
            continue;
        }
        let w = Workload::new(shape, nodes);
        let p = compile(&materialize(&build(&w.spec)));
        let inputs = bind_inputs(&p, &w.inputs);
        let expected = p.eval(&mut (), &inputs);
        assert!(benches::same_values(&p.eval_parallel(Some(&pools[1]), &mut (), &inputs), &expected));
        let mut state = EvalState::new();
        let state = std::cell::RefCell::new(&mut state);
        let run = |pool: Option<&rayon::ThreadPool>| {
            let mut s = state.borrow_mut();
            let out = match pool {
                None => p.eval_with(&mut s, &mut (), &inputs),
                Some(pool) => p.eval_parallel_with(Some(pool), &mut s, &mut (), &inputs),
            };
            std::hint::black_box(out.expect("evaluates"));
        };
        let (width, _) = shape.layered_dims(nodes);
        let layered = matches!(shape, Shape::LayeredWide | Shape::LayeredDeep);
        let flat = layered.then(|| benches::layers::FlatLayers::new(&w.spec, width));
        if let Some(flat) = &flat {
            assert!(benches::same_values(&flat.eval(&w.inputs), &expected));
            assert!(benches::same_values(&flat.eval_two_threads(&w.inputs), &expected));
        }
        let mut flat_seq = || {
            std::hint::black_box(flat.as_ref().map(|f| f.eval(&w.inputs)));
        };
        let mut flat_2t = || {
            std::hint::black_box(flat.as_ref().map(|f| f.eval_two_threads(&w.inputs)));
        };
        let (mut seq, mut par1, mut par2) = (|| run(None), || run(Some(&pools[0])), || run(Some(&pools[1])));
        let mut modes: Vec<(&str, &mut dyn FnMut())> =
            vec![("sequential", &mut seq), ("parallel_1t", &mut par1), ("parallel_2t", &mut par2)];
        if flat.is_some() {
            modes.push(("flat_layers", &mut flat_seq));
            modes.push(("flat_layers_2t", &mut flat_2t));
        }
        report(shape.name(), rounds, &mut modes);
    }
    if !wanted("matmul_layered") {
        return;
    }
    let h = HeavyWorkload::new(100, 100, SPEC_SEED);
    let inputs = h.bind();
    let mut state = EvalState::new();
    let state = std::cell::RefCell::new(&mut state);
    let run = |pool: Option<&rayon::ThreadPool>| {
        let mut s = state.borrow_mut();
        let out = match pool {
            None => h.program.eval_with(&mut s, &mut (), &inputs),
            Some(pool) => h.program.eval_parallel_with(Some(pool), &mut s, &mut (), &inputs),
        };
        std::hint::black_box(out.expect("evaluates"));
    };
    report(
        "matmul_layered",
        rounds,
        &mut [
            ("sequential", &mut || run(None)),
            ("parallel_1t", &mut || run(Some(&pools[0]))),
            ("parallel_2t", &mut || run(Some(&pools[1]))),
            ("flat_layers", &mut || {
                std::hint::black_box(h.eval_layers());
            }),
            ("rayon_layers_2t", &mut || {
                std::hint::black_box(h.eval_layers_on(&pools[1]));
            }),
        ],
    );
}
