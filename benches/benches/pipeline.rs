//! Criterion benches of the pipeline phases, one group per phase, ours beside the
//! baselines, each over every [`Shape`] and size (`docs/SPEC.md` §8.1).
//!
//! | group | ours | baselines |
//! |---|---|---|
//! | `build` | `build_single` on a fresh interner (interning included); `spec_user`: the `spec-user` set built the specification's way (`add_operation` with a `Vec` per node) | `fx_hashcons`: hashbrown + Fx `(op, a, b) -> u32` |
//! | `resolve_materialize` | `resolve` + `materialize_merge` on a freshly built graph | `prune`: reachability + compaction of the deduplicated spec |
//! | `compile` | `compile` of the materialized graph; `spec_user`: the same for the `spec-user` set | `flat_lower`: lowering the same nodes to flat columns |
//! | `eval` | sequential `eval_with`, `EvalState` reused; `spec_user`: the same for the `spec-user` set (`eval_into` written as the rustdoc shows, `#[inline(always)]`); `spec_user_not_inlined`: that set with `eval_into` out of line, as without the attribute | `flat_soa` (the floor), `boxed_dyn_fn`; `random_reads`, the memory floor: one random read per operand from a slot file of our program's size ([`benches::RandomReads`]) |
//! | `eval_arithmetic` | the add/mul/neg window DAG of issue 18 (no transcendental functions): ours, `spec_user`, `spec_user_not_inlined` | `boxed_dyn_fn` |
//! | `gradient_eval` | the compiled gradient (linearize + transpose) of the `ad` bench's DAG (window 1024, one output), `scalar` set and `spec_user` set | `boxed_dyn_fn` of the primal DAG, for scale |
//! | `eval_parallel` | `eval_parallel_with` on pools of 1 and 2 threads: `layered_wide`, `layered_deep` (1000 wide), `chain`, `window`, and `matmul_layered` (10^4 matrix products of ~10 µs, [`benches::heavy`], at every size setting) | sequential `eval_with`; for `matmul_layered` also `flat_layers` and `rayon_layers_2t` (the same products without the engine, sequential and `par_iter` per layer) |
//!
//! Ids read `<group>/<shape>/<impl>/<size>`; throughput is per node of the original spec.
//!
//! Sizes: 10^4, 10^5 and 10^6 by default; `CG_BENCH_SIZES` (comma-separated, `_` and
//! `1e7` forms accepted) overrides, e.g. `CG_BENCH_SIZES=10000000 cargo bench -p benches
//! --bench pipeline -- eval/window`. In test mode (`cargo bench -- --test`, or `cargo test
//! --benches`) the default is 10^4 only, so CI (which also sets `CG_BENCH_SIZES=10000`)
//! finishes in seconds. Inputs are generated lazily, so a filter skips their setup.
//!
//! Timing setup: 10 samples, flat sampling and 2 s measurement for sizes from 10^6 on;
//! outputs of build/materialize/compile are dropped outside the timed region.
//!
//! Memory: under glibc's defaults, blocks above 32 MiB are mapped anew for every
//! iteration and fault page by page on first touch, which only the largest sizes pay.
//! `just bench-scaling` runs the phases at 10^4 and 10^7 with glibc keeping freed memory
//! mapped (`GLIBC_TUNABLES=glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold=4294967295`),
//! so that every size runs on pages the process already has; `docs/PERFORMANCE.md` gives
//! both.

use std::cell::OnceCell;
use std::hint::black_box;
use std::time::Duration;

use benches::heavy::HeavyWorkload;
use benches::layers::FlatLayers;
use benches::spec_user;
use benches::{
    BoxedProgram, FlatProgram, INPUT_SEED, RandomReads, SPEC_SEED, Shape, Workload, baseline_spec, bind_inputs, build,
    hashcons, materialize, prune,
};
use computegraph::{EvalState, compile};
use criterion::measurement::WallTime;
use criterion::{BatchSize, BenchmarkGroup, BenchmarkId, Criterion, SamplingMode, Throughput};
use scalar::workloads::{self, Operands};

const DEFAULT_SIZES: [usize; 3] = [10_000, 100_000, 1_000_000];

fn parse_size(s: &str) -> usize {
    benches::parse_count(s.trim()).unwrap_or_else(|e| panic!("CG_BENCH_SIZES: {e}"))
}

/// Mirrors criterion's own rule: test mode under `--test`, or when run without `--bench`.
fn test_mode() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.iter().any(|a| a == "--test") || !args.iter().any(|a| a == "--bench")
}

fn sizes() -> Vec<usize> {
    match std::env::var("CG_BENCH_SIZES") {
        Ok(v) if !v.trim().is_empty() => v.split(',').filter(|s| !s.trim().is_empty()).map(parse_size).collect(),
        _ if test_mode() => vec![DEFAULT_SIZES[0]],
        _ => DEFAULT_SIZES.to_vec(),
    }
}

fn configure(g: &mut BenchmarkGroup<'_, WallTime>, shape: Shape, n: usize) {
    g.throughput(Throughput::Elements(shape.node_count(n) as u64));
    g.sample_size(10);
    if n >= 1_000_000 {
        g.sampling_mode(SamplingMode::Flat);
        g.warm_up_time(Duration::from_millis(200));
        g.measurement_time(Duration::from_secs(2));
    } else {
        g.sampling_mode(SamplingMode::Auto);
        g.warm_up_time(Duration::from_millis(300));
        g.measurement_time(Duration::from_secs(1));
    }
}

fn id(shape: Shape, who: &str, n: usize) -> BenchmarkId {
    BenchmarkId::new(format!("{}/{who}", shape.name()), n)
}

fn bench_build(c: &mut Criterion, sizes: &[usize]) {
    let mut g = c.benchmark_group("build");
    for shape in Shape::ALL {
        for &n in sizes {
            configure(&mut g, shape, n);
            let w = OnceCell::new();
            let w = || w.get_or_init(|| Workload::new(shape, n));
            g.bench_function(id(shape, "ours", n), |b| {
                let w = w();
                b.iter_batched(|| (), |()| build(&w.spec), BatchSize::PerIteration)
            });
            g.bench_function(id(shape, "fx_hashcons", n), |b| {
                let w = w();
                b.iter_batched(|| (), |()| hashcons(&w.spec), BatchSize::PerIteration)
            });
            let dag = OnceCell::new();
            g.bench_function(id(shape, "spec_user", n), |b| {
                let dag = dag.get_or_init(|| spec_user::to_dag(&w().spec));
                b.iter_batched(|| (), |()| spec_user::build(dag), BatchSize::PerIteration)
            });
        }
    }
    g.finish();
}

fn bench_resolve_materialize(c: &mut Criterion, sizes: &[usize]) {
    let mut g = c.benchmark_group("resolve_materialize");
    for shape in Shape::ALL {
        for &n in sizes {
            configure(&mut g, shape, n);
            let w = OnceCell::new();
            let w = || w.get_or_init(|| Workload::new(shape, n));
            let deduped = OnceCell::new();
            // A fresh graph per iteration: the graph's key index is built lazily on the
            // first lookup, and a one-shot pipeline pays for it.
            g.bench_function(id(shape, "ours", n), |b| {
                let w = w();
                b.iter_batched_ref(|| build(&w.spec), |built| materialize(built), BatchSize::PerIteration)
            });
            g.bench_function(id(shape, "prune", n), |b| {
                let d = deduped.get_or_init(|| w().spec.dedup());
                b.iter_batched(|| (), |()| prune(d), BatchSize::PerIteration)
            });
        }
    }
    g.finish();
}

fn bench_compile(c: &mut Criterion, sizes: &[usize]) {
    let mut g = c.benchmark_group("compile");
    for shape in Shape::ALL {
        for &n in sizes {
            configure(&mut g, shape, n);
            let w = OnceCell::new();
            let w = || w.get_or_init(|| Workload::new(shape, n));
            let flat_graph = OnceCell::new();
            let base = OnceCell::new();
            g.bench_function(id(shape, "ours", n), |b| {
                let m = flat_graph.get_or_init(|| materialize(&build(&w().spec)));
                b.iter_batched(|| (), |()| compile(m), BatchSize::PerIteration)
            });
            let user_graph = OnceCell::new();
            g.bench_function(id(shape, "spec_user", n), |b| {
                let m = user_graph.get_or_init(|| spec_user::materialized(&spec_user::to_dag(&w().spec)));
                b.iter_batched(|| (), |()| compile(m), BatchSize::PerIteration)
            });
            g.bench_function(id(shape, "flat_lower", n), |b| {
                let s = base.get_or_init(|| baseline_spec(&w().spec));
                b.iter_batched(|| (), |()| FlatProgram::new(s), BatchSize::PerIteration)
            });
        }
    }
    g.finish();
}

fn bench_eval(c: &mut Criterion, sizes: &[usize]) {
    let mut g = c.benchmark_group("eval");
    for shape in Shape::ALL {
        for &n in sizes {
            configure(&mut g, shape, n);
            let w = OnceCell::new();
            let w = || w.get_or_init(|| Workload::new(shape, n));
            let base = OnceCell::new();
            let base = || base.get_or_init(|| baseline_spec(&w().spec));
            let ours = OnceCell::new();
            let ours = || ours.get_or_init(|| compile(&materialize(&build(&w().spec))));
            let flat = OnceCell::new();
            let boxed = OnceCell::new();
            let floor = OnceCell::new();
            // Scratch lives across criterion's calls of each closure (warm-up, samples).
            let mut state = EvalState::new();
            let mut flat_values = Vec::new();
            let mut boxed_values = Vec::new();
            g.bench_function(id(shape, "ours", n), |b| {
                let p = ours();
                let inputs = bind_inputs(p, &w().inputs);
                b.iter(|| p.eval_with(&mut state, &mut (), black_box(&inputs)).expect("evaluates"))
            });
            let spec_user_program = OnceCell::new();
            g.bench_function(id(shape, "spec_user", n), |b| {
                let p = spec_user_program.get_or_init(|| spec_user::program(&spec_user::to_dag(&w().spec)));
                let inputs = spec_user::bind_inputs(p, &w().inputs);
                b.iter(|| p.eval_with(&mut state, &mut (), black_box(&inputs)).expect("evaluates"))
            });
            let not_inlined = OnceCell::new();
            g.bench_function(id(shape, "spec_user_not_inlined", n), |b| {
                let p = not_inlined.get_or_init(|| spec_user::program_not_inlined(&spec_user::to_dag(&w().spec)));
                let inputs = spec_user::bind_inputs(p, &w().inputs);
                b.iter(|| p.eval_with(&mut state, &mut (), black_box(&inputs)).expect("evaluates"))
            });
            g.bench_function(id(shape, "flat_soa", n), |b| {
                let p = flat.get_or_init(|| FlatProgram::new(base()));
                let inputs = &w().inputs;
                b.iter(|| p.eval(&mut flat_values, black_box(inputs)))
            });
            g.bench_function(id(shape, "boxed_dyn_fn", n), |b| {
                let p = boxed.get_or_init(|| BoxedProgram::new(base()));
                let inputs = &w().inputs;
                b.iter(|| p.eval(&mut boxed_values, black_box(inputs)))
            });
            g.bench_function(id(shape, "random_reads", n), |b| {
                let reads = floor.get_or_init(|| RandomReads::new(ours().slot_count(), base().args.len(), SPEC_SEED));
                b.iter(|| black_box(reads).run())
            });
        }
    }
    g.finish();
}

/// The add/mul/neg window DAG of issue 18 (30% repeats), where evaluation is all engine
/// overhead: no transcendental function hides the dispatch.
fn bench_eval_arithmetic(c: &mut Criterion, sizes: &[usize]) {
    let mut g = c.benchmark_group("eval_arithmetic");
    for &n in sizes {
        configure(&mut g, Shape::Window, n);
        g.throughput(Throughput::Elements(n as u64));
        let w = OnceCell::new();
        let w = || {
            w.get_or_init(|| {
                let spec =
                    workloads::random_dag_of(n, Operands::Window(1024), 0.3, SPEC_SEED, workloads::pick_arithmetic);
                let inputs = workloads::inputs_for(&spec, INPUT_SEED);
                (spec, inputs)
            })
        };
        let gid = |who: &str| BenchmarkId::new(format!("window/{who}"), n);
        let mut state = EvalState::new();
        let mut boxed_values = Vec::new();
        let (ours, user, not_inlined, boxed) = (OnceCell::new(), OnceCell::new(), OnceCell::new(), OnceCell::new());
        g.bench_function(gid("ours"), |b| {
            let p = ours.get_or_init(|| compile(&materialize(&build(&w().0))));
            let inputs = bind_inputs(p, &w().1);
            b.iter(|| p.eval_with(&mut state, &mut (), black_box(&inputs)).expect("evaluates"))
        });
        g.bench_function(gid("spec_user"), |b| {
            let p = user.get_or_init(|| spec_user::program(&spec_user::to_dag(&w().0)));
            let inputs = spec_user::bind_inputs(p, &w().1);
            b.iter(|| p.eval_with(&mut state, &mut (), black_box(&inputs)).expect("evaluates"))
        });
        g.bench_function(gid("spec_user_not_inlined"), |b| {
            let p = not_inlined.get_or_init(|| spec_user::program_not_inlined(&spec_user::to_dag(&w().0)));
            let inputs = spec_user::bind_inputs(p, &w().1);
            b.iter(|| p.eval_with(&mut state, &mut (), black_box(&inputs)).expect("evaluates"))
        });
        g.bench_function(gid("boxed_dyn_fn"), |b| {
            let p = boxed.get_or_init(|| BoxedProgram::new(&baseline_spec(&w().0)));
            b.iter(|| p.eval(&mut boxed_values, black_box(&w().1)))
        });
    }
    g.finish();
}

fn bench_gradient_eval(c: &mut Criterion, sizes: &[usize]) {
    let mut g = c.benchmark_group("gradient_eval");
    for &n in sizes {
        configure(&mut g, Shape::Window, n);
        g.throughput(Throughput::Elements(n as u64));
        let w = OnceCell::new();
        let w = || w.get_or_init(|| spec_user::gradient_spec(n));
        let scalar_grad = OnceCell::new();
        let user_grad = OnceCell::new();
        let boxed = OnceCell::new();
        let mut state = EvalState::new();
        let mut boxed_values = Vec::new();
        let gid = |who: &str| BenchmarkId::new(format!("window/{who}"), n);
        g.bench_function(gid("scalar"), |b| {
            let p = scalar_grad.get_or_init(|| spec_user::scalar_gradient(&w().0, &w().1));
            b.iter(|| p.eval(&mut state))
        });
        g.bench_function(gid("spec_user"), |b| {
            let p = user_grad.get_or_init(|| spec_user::spec_user_gradient(&w().0, &w().1));
            b.iter(|| p.eval(&mut state))
        });
        g.bench_function(gid("boxed_dyn_fn_primal"), |b| {
            let p = boxed.get_or_init(|| BoxedProgram::new(&baseline_spec(&w().0)));
            b.iter(|| p.eval(&mut boxed_values, black_box(&w().1)))
        });
    }
    g.finish();
}

fn bench_eval_parallel(c: &mut Criterion, sizes: &[usize]) {
    let mut g = c.benchmark_group("eval_parallel");
    let pools: Vec<(usize, rayon::ThreadPool)> = [1, 2]
        .into_iter()
        .map(|t| (t, rayon::ThreadPoolBuilder::new().num_threads(t).build().expect("pool")))
        .collect();
    for shape in [Shape::LayeredWide, Shape::LayeredDeep, Shape::Chain, Shape::Window] {
        for &n in sizes {
            configure(&mut g, shape, n);
            let w = OnceCell::new();
            let w = || w.get_or_init(|| Workload::new(shape, n));
            let ours = OnceCell::new();
            let program = || ours.get_or_init(|| compile(&materialize(&build(&w().spec))));
            let mut state = EvalState::new();
            g.bench_function(id(shape, "sequential", n), |b| {
                let p = program();
                let inputs = bind_inputs(p, &w().inputs);
                b.iter(|| p.eval_with(&mut state, &mut (), black_box(&inputs)).expect("evaluates"))
            });
            for (t, pool) in &pools {
                g.bench_function(id(shape, &format!("parallel_{t}t"), n), |b| {
                    let p = program();
                    let inputs = bind_inputs(p, &w().inputs);
                    b.iter(|| {
                        p.eval_parallel_with(Some(pool), &mut state, &mut (), black_box(&inputs)).expect("evaluates")
                    })
                });
            }
            if matches!(shape, Shape::LayeredWide | Shape::LayeredDeep) {
                // The engine-free floor on the same nodes, one and two threads.
                let flat = OnceCell::new();
                let flat = || flat.get_or_init(|| FlatLayers::new(&w().spec, shape.layered_dims(n).0));
                g.bench_function(id(shape, "flat_layers", n), |b| b.iter(|| flat().eval(black_box(&w().inputs))));
                g.bench_function(id(shape, "flat_layers_2t", n), |b| {
                    b.iter(|| flat().eval_two_threads(black_box(&w().inputs)))
                });
            }
        }
    }
    // 10^4 matrix products of about 10 µs each (100 wide, 100 deep), whatever the sizes.
    let heavy = OnceCell::new();
    let heavy = || heavy.get_or_init(|| HeavyWorkload::new(100, 100, SPEC_SEED));
    let n = 10_000;
    g.throughput(Throughput::Elements(n as u64));
    g.sample_size(10);
    g.sampling_mode(SamplingMode::Flat);
    g.warm_up_time(Duration::from_millis(300));
    g.measurement_time(Duration::from_secs(3));
    let mut state = EvalState::new();
    let heavy_id = |who: &str| BenchmarkId::new(format!("matmul_layered/{who}"), n);
    g.bench_function(heavy_id("sequential"), |b| {
        let w = heavy();
        let inputs = w.bind();
        b.iter(|| w.program.eval_with(&mut state, &mut (), black_box(&inputs)).expect("evaluates"))
    });
    for (t, pool) in &pools {
        g.bench_function(heavy_id(&format!("parallel_{t}t")), |b| {
            let w = heavy();
            let inputs = w.bind();
            b.iter(|| {
                w.program.eval_parallel_with(Some(pool), &mut state, &mut (), black_box(&inputs)).expect("evaluates")
            })
        });
    }
    g.bench_function(heavy_id("flat_layers"), |b| {
        let w = heavy();
        b.iter(|| w.eval_layers())
    });
    let (_, pool2) = &pools[1];
    g.bench_function(heavy_id("rayon_layers_2t"), |b| {
        let w = heavy();
        b.iter(|| w.eval_layers_on(pool2))
    });
    g.finish();
}

fn main() {
    let sizes = sizes();
    eprintln!("pipeline benches: sizes {sizes:?} (override with CG_BENCH_SIZES=n1,n2,...)");
    let mut c = Criterion::default().configure_from_args();
    bench_build(&mut c, &sizes);
    bench_resolve_materialize(&mut c, &sizes);
    bench_compile(&mut c, &sizes);
    bench_eval(&mut c, &sizes);
    bench_eval_arithmetic(&mut c, &sizes);
    bench_gradient_eval(&mut c, &sizes);
    bench_eval_parallel(&mut c, &sizes);
    c.final_summary();
}
