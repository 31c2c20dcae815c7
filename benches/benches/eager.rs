//! Criterion benches of eager mode.
//!
//! Group `eager` (issue 4): a ten-operation scalar function (`benches::eager::ten_ops`) run
//! on a `scalar::eager::Tape`, per recorded operation.
//! - `forward_untracked`: the frontend alone (no input requires a gradient, nothing
//!   recorded): the baseline that isolates recording.
//! - `forward_recorded`: the same with `x` and `w` requiring gradients (ten records).
//! - `backward`: `try_backward` over the ten recorded nodes (tape built in setup).
//! - `graph_gradient_eval`: the same gradient compiled once in graph mode, evaluated.
//!
//! Throughput is ten elements per iteration, so criterion's per-element time is per
//! recorded operation.
//!
//! Groups of issue 23, ids `<group>/<impl>/<n>`, throughput per graph or per iteration:
//! - `fresh_graphs`: `n` one-operation graphs (`exp` of an input) built one after another
//!   with `GraphBuilder::new()`, each dropped at once: `fresh_keys` gives each a fresh
//!   input key (interned anew), `same_key` the same key every time (the baseline:
//!   hash-consing finds everything). Per-graph time must not grow with `n`. After the
//!   timings, `n` fresh graphs are held alive to print the interner's bytes per live key.
//! - `eager_loop`: `n` iterations of the `docs/SPEC.md` §6 loop (fresh leaves; `mul`, `exp`,
//!   `add`; backward; drop everything) on a `SpecTape` recording `fresh` graphs per operation,
//!   beside `reused` (one graph per operation kind).
//!
//! Sizes: 10^4, 10^5, 10^6 graphs and 10^3, 10^5, 10^6 iterations by default;
//! `CG_BENCH_SIZES` (comma-separated) overrides both. In test mode (`-- --test`) the
//! default is the smallest size only, and everything runs once.

use std::hint::black_box;
use std::time::Duration;

use benches::eager::{
    FreshKeys, GraphGradient, backward, forward, fresh_exp_graph, same_key_exp_graph, spec_step, ten_ops,
};
use computegraph::KeyInterner;
use criterion::measurement::WallTime;
use criterion::{BatchSize, BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput};
use scalar::ScalarOp;
use scalar::eager::{GraphPerOp, ScalarExecutor, SpecTape, Tape};

const GRAPH_SIZES: [usize; 3] = [10_000, 100_000, 1_000_000];
const LOOP_SIZES: [usize; 3] = [1_000, 100_000, 1_000_000];

/// Mirrors criterion's own rule: test mode under `--test`, or when run without `--bench`.
fn test_mode() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.iter().any(|a| a == "--test") || !args.iter().any(|a| a == "--bench")
}

fn sizes(defaults: &[usize]) -> Vec<usize> {
    match std::env::var("CG_BENCH_SIZES") {
        Ok(v) if !v.trim().is_empty() => v
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(|s| benches::parse_count(s.trim()).unwrap_or_else(|e| panic!("CG_BENCH_SIZES: {e}")))
            .collect(),
        _ if test_mode() => vec![defaults[0]],
        _ => defaults.to_vec(),
    }
}

/// Long runs: ten flat samples.
fn configure(g: &mut BenchmarkGroup<'_, WallTime>, n: usize) {
    g.throughput(Throughput::Elements(n as u64));
    g.sample_size(10);
    g.sampling_mode(SamplingMode::Flat);
    g.warm_up_time(Duration::from_millis(300));
    g.measurement_time(Duration::from_secs(if n >= 100_000 { 3 } else { 1 }));
}

fn eager(c: &mut Criterion) {
    let spec = ten_ops();
    let mut g = c.benchmark_group("eager");
    g.sample_size(30).measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(spec.ops.len() as u64));

    let mut tape = Tape::new();
    g.bench_function("forward_untracked", |b| b.iter(|| black_box(forward(&mut tape, &spec, false))));
    g.bench_function("forward_recorded", |b| b.iter(|| black_box(forward(&mut tape, &spec, true))));
    let mut exec = ScalarExecutor::new();
    g.bench_function("backward", |b| {
        b.iter_batched(
            || forward(&mut tape, &spec, true),
            |(_leaves, y)| black_box(backward(&y, &mut exec)),
            BatchSize::SmallInput,
        )
    });
    let graph = GraphGradient::new(&spec);
    g.bench_function("graph_gradient_eval", |b| b.iter(|| black_box(graph.eval())));
    g.finish();
}

/// Prints what the process-wide interner holds per live key with `n` fresh one-operation
/// graphs alive, and what it keeps once they are dropped and their chunks reclaimed.
fn report_bytes_per_live_key(keys: &mut FreshKeys, n: usize) {
    let interner = KeyInterner::<ScalarOp>::global();
    interner.reclaim_unused();
    let (values, bytes) = (interner.live_value_count(), interner.heap_bytes());
    let graphs: Vec<_> = (0..n).map(|_| fresh_exp_graph(keys)).collect();
    let (values_alive, bytes_alive) = (interner.live_value_count(), interner.heap_bytes());
    drop(graphs);
    interner.reclaim_unused();
    let added = values_alive - values;
    eprintln!(
        "fresh_graphs/{n}: {n} graphs alive hold {added} more live keys and {} more interner bytes: \
         {:.1} bytes per live key; dropped and reclaimed: {} live keys, {} bytes (before: {values}, {bytes})",
        bytes_alive.saturating_sub(bytes),
        bytes_alive.saturating_sub(bytes) as f64 / added.max(1) as f64,
        interner.live_value_count(),
        interner.heap_bytes(),
    );
}

fn fresh_graphs(c: &mut Criterion) {
    let mut keys = FreshKeys::default();
    let sizes = sizes(&GRAPH_SIZES);
    for &n in &sizes {
        let mut g = c.benchmark_group("fresh_graphs");
        configure(&mut g, n);
        g.bench_function(BenchmarkId::new("fresh_keys", n), |b| {
            b.iter(|| {
                for _ in 0..n {
                    black_box(fresh_exp_graph(&mut keys));
                }
            })
        });
        g.bench_function(BenchmarkId::new("same_key", n), |b| {
            b.iter(|| {
                for _ in 0..n {
                    black_box(same_key_exp_graph());
                }
            })
        });
        g.finish();
    }
    // After every timing: holding 10^6 graphs at once leaves the heap fragmented, which
    // slows whatever allocates next.
    for &n in &sizes {
        report_bytes_per_live_key(&mut keys, n);
    }
}

fn eager_loop(c: &mut Criterion) {
    for n in sizes(&LOOP_SIZES) {
        let mut g = c.benchmark_group("eager_loop");
        configure(&mut g, n);
        for (name, mode) in [("fresh", GraphPerOp::Fresh), ("reused", GraphPerOp::Reused)] {
            let mut tape = SpecTape::new(mode);
            let mut exec = ScalarExecutor::new();
            g.bench_function(BenchmarkId::new(name, n), |b| {
                b.iter(|| {
                    for i in 0..n {
                        black_box(spec_step(&mut tape, &mut exec, i));
                    }
                })
            });
        }
        g.finish();
    }
}

// The loop runs before `fresh_graphs`, whose reports hold 10^6 graphs alive at once and
// leave the allocator's heap fragmented for what follows.
criterion::criterion_group!(benches, eager, eager_loop, fresh_graphs);
criterion::criterion_main!(benches);
