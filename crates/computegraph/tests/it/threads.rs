//! Thread safety: one interner and one compile cache shared by many threads.

use std::sync::{Arc, Barrier};

use computegraph::{CompileCache, CompiledProgram, KeyInterner, ValueKey, resolve};
use scalar::ScalarOp;
use scalar::spec::GraphSpec;
use scalar::workloads::{self, Operands};

use crate::support::{assert_same, compile_checked, eval_vars, fresh};

const THREADS: usize = 8;

fn specs() -> Vec<GraphSpec> {
    (0..12u64)
        .map(|s| match s % 3 {
            0 => workloads::random_dag(400, Operands::Window(12), 0.3, s),
            1 => workloads::layered(8, 20, s),
            _ => workloads::chain(300, s),
        })
        .collect()
}

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn shared_types_are_send_and_sync() {
    assert_send_sync::<KeyInterner<ScalarOp>>();
    assert_send_sync::<computegraph::Graph<ScalarOp>>();
    assert_send_sync::<computegraph::MaterializedGraph<ScalarOp>>();
    assert_send_sync::<CompiledProgram<ScalarOp>>();
    assert_send_sync::<CompileCache<ScalarOp>>();
    assert_send_sync::<computegraph::GraphError>();
}

/// Threads build the same specs in different orders (and fragmentations) against one
/// interner: identical structures get identical keys on every thread, nothing is
/// interned twice, and every result evaluates to the reference.
#[test]
fn concurrent_builds_share_one_interner() {
    let specs = Arc::new(specs());
    // Sequential baseline on its own interner: how many keys the specs need.
    let baseline = fresh();
    for spec in specs.iter() {
        spec.build_single(&baseline).unwrap();
    }
    let interner = fresh();
    let barrier = Arc::new(Barrier::new(THREADS));
    let per_thread: Vec<Vec<Vec<ValueKey<ScalarOp>>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (specs, interner, barrier) = (specs.clone(), interner.clone(), barrier.clone());
                scope.spawn(move || {
                    barrier.wait();
                    let n = specs.len();
                    let mut keys = vec![Vec::new(); n];
                    for i in 0..n {
                        // Rotate the order so that threads race on different specs.
                        let s = (i + t * 5) % n;
                        let spec = &specs[s];
                        let built = spec.build(&interner, 1 + t % 3).unwrap();
                        let (_, p) = compile_checked(&resolve(built.graphs.clone()), &built.outputs);
                        let inputs = workloads::inputs_for(spec, s as u64);
                        assert_same(&eval_vars(&p, &inputs), &spec.eval_reference(&inputs));
                        keys[s] = built.outputs;
                    }
                    keys
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (t, keys) in per_thread.iter().enumerate().skip(1) {
        assert_eq!(keys, &per_thread[0], "thread {t} got different keys");
    }
    assert_eq!(interner.value_count(), baseline.value_count(), "a key was interned twice under contention");
    assert_eq!(interner.operation_count(), baseline.operation_count());
    // And a sequential rebuild afterwards finds the same keys.
    for (spec, keys) in specs.iter().zip(&per_thread[0]) {
        assert_eq!(&spec.build_single(&interner).unwrap().outputs, keys);
    }
}

/// One cache shared by threads: every lookup gets a correct program, every spec is
/// compiled at least once and at most once per thread, and later lookups all hit and
/// return the very same program. One program is also evaluated on all threads at once.
#[test]
fn compile_cache_shared_across_threads() {
    let specs = Arc::new(specs());
    let interner = fresh();
    let cache = Arc::new(CompileCache::<ScalarOp>::new(64));
    let barrier = Arc::new(Barrier::new(THREADS));
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let (specs, interner, cache, barrier) = (specs.clone(), interner.clone(), cache.clone(), barrier.clone());
            scope.spawn(move || {
                barrier.wait();
                for i in 0..specs.len() {
                    let s = (i + t) % specs.len();
                    let built = specs[s].build(&interner, 2).unwrap();
                    let p = cache.get_or_compile(&resolve(built.graphs.clone()), &built.outputs).unwrap();
                    let inputs = workloads::inputs_for(&specs[s], s as u64);
                    assert_same(&eval_vars(&p, &inputs), &specs[s].eval_reference(&inputs));
                }
            });
        }
    });
    let n = specs.len() as u64;
    let stats = cache.stats();
    assert_eq!(stats.hits + stats.misses, n * THREADS as u64);
    assert!((n..=n * THREADS as u64).contains(&stats.misses), "{stats:?}");
    assert_eq!(stats.entries, specs.len());
    // Now everything hits, and returns one shared program per structure.
    let spec = &specs[0];
    let built = spec.build_single(&interner).unwrap();
    let view = resolve(built.graphs.clone());
    let p1 = cache.get_or_compile(&view, &built.outputs).unwrap();
    let p2 = cache.get_or_compile(&view, &built.outputs).unwrap();
    assert!(Arc::ptr_eq(&p1, &p2));
    assert_eq!(cache.stats().misses, stats.misses);
    // The compiled program is Sync: evaluate it on every thread at once.
    let inputs = workloads::inputs_for(spec, 0);
    let expected = spec.eval_reference(&inputs);
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                for _ in 0..10 {
                    assert_same(&eval_vars(&p1, &inputs), &expected);
                }
            });
        }
    });
}
