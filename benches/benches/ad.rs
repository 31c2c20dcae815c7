//! Criterion benches of the AD transforms on scalar random DAGs (window 1024, 30%
//! repeats, one output), per primal node: `linearize`, `linear_transpose`, the whole
//! gradient (linearize + transpose + materialize + compile + eval) and the evaluation of a
//! compiled Hessian-vector-product program.
//!
//! Sizes: 10^4 and 10^5 by default, `CG_BENCH_SIZES` overrides (CI sets 10000); in test
//! mode (`-- --test`) each runs once.

use std::hint::black_box;
use std::time::Duration;

use benches::ad::{AdWorkload, gradient_end_to_end};
use computegraph::EvalState;
use criterion::{BatchSize, BenchmarkId, Criterion, Throughput};

fn sizes() -> Vec<usize> {
    match std::env::var("CG_BENCH_SIZES") {
        Ok(s) => s.split(',').map(|x| x.trim().replace('_', "").parse().expect("CG_BENCH_SIZES: sizes")).collect(),
        Err(_) => vec![10_000, 100_000],
    }
}

fn ad(c: &mut Criterion) {
    for n in sizes() {
        let mut g = c.benchmark_group("ad");
        g.sample_size(10).measurement_time(Duration::from_secs(if n >= 100_000 { 6 } else { 3 }));
        g.throughput(Throughput::Elements(n as u64));
        // Every iteration differentiates a freshly built graph on a fresh interner (setup,
        // not timed): a derivative is made once per function, so the timed cost includes
        // interning the new tangent keys, as a user pays it. Each routine returns what it
        // was given with its result, so that dropping them is not timed (criterion drops
        // the outputs after the measurement).
        g.bench_function(BenchmarkId::new("linearize", n), |b| {
            b.iter_batched(
                || AdWorkload::new(n),
                |w| {
                    let lin = w.linearize();
                    black_box((w, lin))
                },
                BatchSize::PerIteration,
            )
        });
        g.bench_function(BenchmarkId::new("linear_transpose", n), |b| {
            b.iter_batched(
                || {
                    let w = AdWorkload::new(n);
                    let lin = w.linearize();
                    (w, lin)
                },
                |(w, lin)| {
                    let t = tidu::linear_transpose(&lin);
                    black_box((w, lin, t))
                },
                BatchSize::PerIteration,
            )
        });
        g.bench_function(BenchmarkId::new("gradient_end_to_end", n), |b| {
            b.iter_batched(
                || AdWorkload::new(n),
                |w| {
                    let gradient = gradient_end_to_end(&w);
                    black_box((w, gradient))
                },
                BatchSize::PerIteration,
            )
        });
        let w = AdWorkload::new(n);
        let hvp = w.hvp_program();
        let mut state = EvalState::new();
        g.bench_function(BenchmarkId::new("hvp_eval", n), |b| b.iter(|| black_box(hvp.eval(&mut state))));
        g.finish();
    }
}

criterion::criterion_group!(benches, ad);
criterion::criterion_main!(benches);
