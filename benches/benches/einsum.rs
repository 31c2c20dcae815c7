//! Criterion benches of the einsum crate (issue 6), on the workloads of [`benches::einsum`].
//!
//! | group | ids | what |
//! |---|---|---|
//! | `einsum_steps` | `mps_n{100,1000}_chi{1,2,4,8}/{ours,kernels_only}` | `docs/SPEC.md` §8.2: the MPS inner product along the zipper path; throughput is per contraction step, so criterion's per-element time is the time per step. `ours` is `Einsum::eval_with` (state reused); the baseline `kernels_only` runs the same operations on their recorded inputs without the engine, so the difference is the engine's overhead per step. |
//! | `einsum_instances` | `<instance>/{forward,forward_2_threads,gradient}` | `docs/SPEC.md` §8.3: each bundled Einsum Benchmark instance on its `opt_flops` path, the forward evaluation (one thread, `Einsum::eval`), the same on a pool of two threads (`Einsum::eval_parallel`: steps by dependency, large GEMMs and permutations split; issue 19), and the gradient with respect to every operand (cotangent of ones), side by side so their ratios are read in one run. |
//!
//! In test mode (`cargo bench -p benches --bench einsum -- --test`, as CI runs it) each
//! bench runs once and `str_nw_mera_open_26` (about 2 s of evaluations and 10 s of criterion
//! samples at full size) is left out; `CG_EINSUM_INSTANCES=all` (or a comma-separated list
//! of names) overrides the set in either mode. Inputs are built lazily, so a filter skips
//! their setup.

use std::cell::OnceCell;
use std::hint::black_box;
use std::time::Duration;

use benches::einsum::{Kernels, Network, gradient, instance, mps};
use computegraph::EvalState;
use criterion::{BenchmarkId, Criterion, SamplingMode, Throughput};
use einsum::Instance;

/// Mirrors criterion's own rule: test mode under `--test`, or when run without `--bench`.
fn test_mode() -> bool {
    let args: Vec<String> = std::env::args().collect();
    args.iter().any(|a| a == "--test") || !args.iter().any(|a| a == "--bench")
}

/// The instance names to run (see the module docs).
fn instances() -> Vec<String> {
    let all = || Instance::bundled_names().unwrap_or_else(|e| panic!("{e}"));
    match std::env::var("CG_EINSUM_INSTANCES") {
        Ok(v) if v.trim() == "all" => all(),
        Ok(v) if !v.trim().is_empty() => v.split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(),
        _ => all().into_iter().filter(|n| !test_mode() || n != "str_nw_mera_open_26").collect(),
    }
}

fn bench_steps(c: &mut Criterion) {
    let mut g = c.benchmark_group("einsum_steps");
    g.sample_size(20).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(1));
    for sites in [100, 1000] {
        for chi in [1, 2, 4, 8] {
            let net = OnceCell::new();
            let net = || -> &Network { net.get_or_init(|| mps(sites, chi)) };
            let name = format!("mps_n{sites}_chi{chi}");
            // The zipper path has 2·sites − 1 steps.
            g.throughput(Throughput::Elements(2 * sites as u64 - 1));
            g.bench_function(BenchmarkId::new(&name, "ours"), |b| {
                let net = net();
                let (e, refs) = (net.einsum(), net.refs());
                let mut state = EvalState::new();
                b.iter(|| black_box(e.eval_with(&mut state, black_box(&refs)).expect("evaluates")))
            });
            g.bench_function(BenchmarkId::new(&name, "kernels_only"), |b| {
                let net = net();
                let kernels = Kernels::new(&net.einsum(), &net.operands);
                b.iter(|| kernels.run())
            });
        }
    }
    g.finish();
}

fn bench_instances(c: &mut Criterion) {
    let mut g = c.benchmark_group("einsum_instances");
    g.sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a pool of two threads");
    for name in instances() {
        let net = OnceCell::new();
        let net = || -> &Network { net.get_or_init(|| instance(&name)) };
        g.bench_function(BenchmarkId::new(&name, "forward"), |b| {
            let net = net();
            let (e, refs) = (net.einsum(), net.refs());
            b.iter(|| black_box(e.eval(black_box(&refs)).expect("evaluates")))
        });
        g.bench_function(BenchmarkId::new(&name, "forward_2_threads"), |b| {
            let net = net();
            let (e, refs) = (net.einsum(), net.refs());
            b.iter(|| black_box(e.eval_parallel(Some(&pool), black_box(&refs)).expect("evaluates")))
        });
        g.bench_function(BenchmarkId::new(&name, "gradient"), |b| {
            let net = net();
            let (e, refs) = (net.einsum(), net.refs());
            let (grad, ones) = gradient(&e);
            b.iter(|| black_box(grad.eval(black_box(&refs), &ones).expect("evaluates")))
        });
    }
    g.finish();
}

fn main() {
    let names = instances();
    eprintln!("einsum benches: instances {names:?} (override with CG_EINSUM_INSTANCES=all or a list)");
    let mut c = Criterion::default().configure_from_args();
    bench_steps(&mut c);
    bench_instances(&mut c);
    c.final_summary();
}
