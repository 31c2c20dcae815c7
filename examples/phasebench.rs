//! Times one phase in isolation (for profiling): `phasebench NODES SHAPE PHASE`.
//! `PHASE` is `build`, `buildonly` (no dedup baseline), `eval` (builds once, evaluates
//! 200 times), `peval` (the same on a two-thread pool), `prep` (build, materialize and
//! compile, no dedup baseline and no evaluation: for a profile of the two passes) or
//! anything else for every phase.
//! `dump` builds, materializes and compiles once and prints a hash of the materialized
//! graph's and the program's DOT dumps, the program's display and its instruction →
//! operation map: two engines that make the same program print the same line.
//! With `PHASEBENCH_FAULTS` set, each round prints the minor page faults of materialize
//! and compile (from `/proc/self/stat`, Linux).
//! `PHASEBENCH_ROUNDS` sets the number of rounds (default 5, or 1 for the eval phases).
//! `SHAPE` is `window`, `uniform`, `chain`, `layered` (1000 wide) or `wide` (100 deep).
use computegraph::{EvalState, KeyInterner, compile, materialize_merge, resolve};
use scalar::workloads::{self, Operands};
use std::time::Instant;
fn main() {
    let a: Vec<String> = std::env::args().collect();
    let n: usize = a.get(1).map(|s| s.parse().unwrap()).unwrap_or(1_000_000);
    let shape = a.get(2).cloned().unwrap_or("window".into());
    let phase = a.get(3).cloned().unwrap_or("all".into());
    let spec = match shape.as_str() {
        "chain" => workloads::chain(n, 1),
        "uniform" => workloads::random_dag(n, Operands::Uniform, 0.3, 1),
        "layered" => workloads::layered(1000, n / 1000, 1),
        "wide" => workloads::layered(n / 100, 100, 1),
        _ => workloads::random_dag(n, Operands::Window(1024), 0.3, 1),
    };
    let inputs = workloads::inputs_for(&spec, 7);
    let mut best = [f64::MAX; 5];
    let (rounds, evals) = if phase.ends_with("eval") { (1, 200) } else { (5, 5) };
    let rounds = std::env::var("PHASEBENCH_ROUNDS").map_or(rounds, |r| r.parse().unwrap());
    for _ in 0..rounds {
        let t = Instant::now();
        let d = if phase == "buildonly" || phase == "prep" { Default::default() } else { spec.dedup() };
        best[4] = best[4].min(t.elapsed().as_secs_f64());
        std::hint::black_box(d);
        let interner = KeyInterner::new();
        let t = Instant::now();
        let built = spec.build_single(&interner).unwrap();
        best[0] = best[0].min(t.elapsed().as_secs_f64());
        if phase.starts_with("build") {
            continue;
        }
        let view = resolve(built.graphs.clone());
        let f0 = minor_faults();
        let t = Instant::now();
        let flat = materialize_merge(&view, &built.outputs);
        best[1] = best[1].min(t.elapsed().as_secs_f64());
        let f1 = minor_faults();
        let t = Instant::now();
        let program = compile(&flat);
        best[2] = best[2].min(t.elapsed().as_secs_f64());
        if std::env::var_os("PHASEBENCH_FAULTS").is_some() {
            println!("minor faults: materialize {}, compile {}", f1 - f0, minor_faults() - f1);
        }
        if phase == "dump" {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            let (dot, code) = (flat.to_dot(), program.to_dot());
            (&dot, &code, program.to_string()).hash(&mut h);
            (0..program.instruction_count()).map(|i| program.source_operation(i)).collect::<Vec<_>>().hash(&mut h);
            let ops = (flat.operation_count(), flat.value_count(), program.slot_count());
            println!("dump: {:016x} (operations, values, slots) {ops:?}", h.finish());
            return;
        }
        if phase == "prep" {
            continue;
        }
        let refs = program
            .bind_inputs(|k| match k {
                scalar::ScalarKey::Var(i) => inputs.get(*i as usize),
                _ => None,
            })
            .unwrap();
        if phase.ends_with("eval") {
            println!(
                "slots: {} ({} MiB), prefetched: {}",
                program.slot_count(),
                (program.slot_count() * size_of::<f64>()) >> 20,
                program.prefetches_operand_slots()
            );
        }
        if phase == "peval" {
            let t = Instant::now();
            let levels = program.level_count(); // builds the parallel schedule
            println!("schedule: {levels} levels, {:.1} ns/node", t.elapsed().as_secs_f64() * 1e9 / n as f64);
        }
        let mut st = EvalState::new();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        for _ in 0..evals {
            let t = Instant::now();
            let _ = if phase == "peval" {
                program.eval_parallel_with(Some(&pool), &mut st, &mut (), &refs)
            } else {
                program.eval_with(&mut st, &mut (), &refs)
            }
            .unwrap();
            let dt = t.elapsed().as_secs_f64();
            if std::env::var_os("PHASEBENCH_EACH").is_some() {
                print!("{:.1} ", dt * 1e3);
            }
            best[3] = best[3].min(dt);
        }
    }
    let p = |x: f64| x * 1e9 / n as f64;
    println!(
        "min ns/node: dedup-baseline {:.1} build {:.1} materialize {:.1} compile {:.1} eval {:.2}",
        p(best[4]),
        p(best[0]),
        p(best[1]),
        p(best[2]),
        p(best[3])
    );
}

/// The process's minor page faults so far (`/proc/self/stat`, field 10), or 0 where that
/// file is missing.
fn minor_faults() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    rest.split_whitespace().nth(7).and_then(|f| f.parse().ok()).unwrap_or(0)
}
