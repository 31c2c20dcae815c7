//! Reclamation of interner entries no live graph holds (ADR 0010): memory bounded by what
//! is alive, identity and CSE kept among what is alive, stale keys reported, keys handed
//! out by the interner's own methods kept.

use std::sync::Arc;

use computegraph::{Graph, GraphBuilder, GraphError, KeyInterner, OperationRole::Primary, ValueKey, ValueRef, resolve};
use scalar::{ScalarKey, ScalarOp};

use crate::support::{compile_checked, eval_vars, fresh};

/// `exp(k)` over input key `k`, one operation.
fn exp_of(interner: &Arc<KeyInterner<ScalarOp>>, k: u32) -> Graph<ScalarOp> {
    let mut b = GraphBuilder::with_interner(Arc::clone(interner));
    let x = b.add_input(ScalarKey::var(k));
    let y = b.add_operation(ScalarOp::Exp, vec![ValueRef::Local(x)], Primary);
    b.set_outputs(y.to_vec());
    b.build()
}

/// `sin(x0 · x1) + x0`, three operations.
fn small(interner: &Arc<KeyInterner<ScalarOp>>) -> Graph<ScalarOp> {
    let mut b = GraphBuilder::with_interner(Arc::clone(interner));
    let (x, w) = (b.add_input(ScalarKey::var(0)), b.add_input(ScalarKey::var(1)));
    let p = b.add_operation(ScalarOp::Mul, vec![ValueRef::Local(x), ValueRef::Local(w)], Primary)[0];
    let s = b.add_operation(ScalarOp::Sin, vec![ValueRef::Local(p)], Primary)[0];
    let y = b.add_operation(ScalarOp::Add, vec![ValueRef::Local(s), ValueRef::Local(x)], Primary);
    b.set_outputs(y.to_vec());
    b.build()
}

fn output_key(g: &Graph<ScalarOp>) -> ValueKey<ScalarOp> {
    g.global_key(g.outputs()[0])
}

/// 2·10^5 fresh one-operation graphs, each dropped at once: the interner's live keys and
/// bytes stay bounded while its ids keep increasing; a graph kept alive from the start
/// keeps its keys (a rebuild finds them: CSE among what is alive) and still evaluates.
#[test]
fn fresh_graphs_are_reclaimed_and_live_ones_kept() {
    let interner = fresh();
    let kept = small(&interner);
    let kept_key = output_key(&kept);
    let mut peak = (0, 0);
    for k in 0..200_000u32 {
        let g = exp_of(&interner, 1000 + k);
        drop(g);
        if k % 10_000 == 0 {
            peak = (peak.0.max(interner.live_value_count()), peak.1.max(interner.heap_bytes()));
        }
    }
    assert_eq!(interner.value_count(), 5 + 2 * 200_000, "ids are never reused");
    assert!(peak.0 <= 150_000, "{} live keys at the peak", peak.0);
    assert!(peak.1 <= 16 << 20, "{} bytes at the peak", peak.1);
    interner.reclaim_unused();
    assert!(interner.live_value_count() <= 4096, "{} live keys left", interner.live_value_count());

    let again = small(&interner);
    assert_eq!(output_key(&again), kept_key, "a live graph's structure keeps its key");
    let (_, program) = compile_checked(&resolve(vec![Arc::new(kept)]), &[kept_key]);
    let want = (2.0f64 * 3.0).sin() + 2.0;
    assert_eq!(eval_vars(&program, &[2.0, 3.0]), vec![want]);
}

/// Reclaimed keys are never confused with new ones: a graph rebuilt after its first copy
/// was reclaimed gets new keys, a stale derived key is an error naming the reclamation,
/// and messages say "reclaimed".
#[test]
fn stale_keys_are_reported() {
    let interner = fresh();
    let first = small(&interner);
    let stale = output_key(&first);
    let ValueKey::Derived { operation, .. } = stale else { unreachable!() };
    let stale_id = operation.output_key_id(0).unwrap();
    drop(first);
    // Fill past the first chunks so they are full, then reclaim them.
    for k in 0..5_000u32 {
        drop(exp_of(&interner, 1000 + k));
    }
    assert!(interner.reclaim_unused() > 0);
    assert!(interner.describe(stale_id).contains("reclaimed"), "{}", interner.describe(stale_id));
    assert!(interner.operation_parts(&operation).is_err());

    let rebuilt = small(&interner);
    assert_ne!(output_key(&rebuilt), stale, "new keys for a reclaimed structure");
    let mut b = GraphBuilder::with_interner(Arc::clone(&interner));
    let y = b.add_operation(ScalarOp::Neg, vec![ValueRef::External(stale.clone())], Primary);
    b.set_outputs(y.to_vec());
    match b.try_build() {
        Err(GraphError::UnresolvedKey { key }) => assert!(key.contains("reclaimed"), "{key}"),
        other => panic!("expected UnresolvedKey, got {other:?}"),
    }
}

/// Keys handed out by `intern_input` and `intern_operation` (no graph holds them) are
/// never reclaimed.
#[test]
fn keys_interned_directly_are_kept() {
    let interner = fresh();
    let x = interner.intern_input(ScalarKey::var(0));
    let key = interner.intern_operation(&ScalarOp::Exp, &[x], &Primary).unwrap();
    for k in 0..5_000u32 {
        drop(exp_of(&interner, 1000 + k));
    }
    interner.reclaim_unused();
    assert_eq!(interner.value_key(x), ValueKey::Input(ScalarKey::var(0)));
    assert_eq!(interner.operation_parts(&key).unwrap().0, ScalarOp::Exp);
    assert_eq!(interner.intern_operation(&ScalarOp::Exp, &[x], &Primary).unwrap(), key);
}

/// A graph that outlives everything else pins only the chunks of its own keys.
#[test]
fn one_long_lived_graph_does_not_pin_everything() {
    let interner = fresh();
    for k in 0..2_000u32 {
        drop(exp_of(&interner, 1000 + k));
    }
    let kept = exp_of(&interner, 7);
    for k in 0..100_000u32 {
        drop(exp_of(&interner, 10_000 + k));
    }
    interner.reclaim_unused();
    assert!(interner.live_value_count() <= 4 * 1024, "{} live keys", interner.live_value_count());
    assert_eq!(output_key(&exp_of(&interner, 7)), output_key(&kept));
}

/// Threads build and drop fresh graphs against one interner while reclamation runs; each
/// also keeps one graph, whose structure must keep its key throughout and still evaluate.
#[test]
fn threads_building_and_dropping_keep_live_keys() {
    let interner = fresh();
    std::thread::scope(|scope| {
        for t in 0..4u32 {
            let interner = Arc::clone(&interner);
            scope.spawn(move || {
                let kept = exp_of(&interner, t);
                let key = output_key(&kept);
                for i in 0..40_000u32 {
                    drop(exp_of(&interner, 1_000_000 * (t + 1) + i));
                    if i % 1000 == 0 {
                        assert_eq!(output_key(&exp_of(&interner, t)), key, "thread {t}, step {i}");
                    }
                }
                let (_, program) = compile_checked(&resolve(vec![Arc::new(kept)]), &[key]);
                let mut inputs = vec![0.0; t as usize + 1];
                inputs[t as usize] = 0.5;
                assert_eq!(eval_vars(&program, &inputs), vec![0.5f64.exp()]);
            });
        }
    });
    assert!(interner.value_count() >= 4 * 2 * 40_000);
    assert!(interner.live_value_count() < 200_000, "{} live keys", interner.live_value_count());
}

/// A graph of the model: a chain of `len` operations over one input key.
#[derive(Clone, Debug)]
struct Chain {
    key: u32,
    len: usize,
}

fn chain(interner: &Arc<KeyInterner<ScalarOp>>, c: &Chain) -> Graph<ScalarOp> {
    let mut b = GraphBuilder::with_interner(Arc::clone(interner));
    let mut v = b.add_input(ScalarKey::var(c.key));
    for i in 0..c.len {
        let op = [ScalarOp::Sin, ScalarOp::Exp, ScalarOp::Neg][i % 3];
        v = b.add_operation(op, vec![ValueRef::Local(v)], Primary)[0];
    }
    b.set_outputs(vec![v]);
    b.build()
}

#[derive(Clone, Debug)]
enum Step {
    /// Build a chain over a shared key (0..4, so structures repeat) or a fresh one.
    Build {
        shared: Option<u32>,
        len: usize,
    },
    Drop(usize),
    Reclaim,
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        4 => (proptest::option::of(0u32..4), 1usize..400).prop_map(|(shared, len)| Step::Build { shared, len }),
        3 => any::<usize>().prop_map(Step::Drop),
        1 => Just(Step::Reclaim),
    ]
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

    /// Against a model of which graphs are alive: after every step, each live graph's keys
    /// map back to their definitions, a rebuild of its structure finds its key (CSE among
    /// what is alive), live graphs of equal structure share their keys, and the interner
    /// holds no more live keys than it ever interned.
    #[test]
    fn live_graphs_keep_identity_through_reclamation(steps in proptest::collection::vec(step(), 1..40)) {
        let interner = fresh();
        let mut live: Vec<(Chain, Graph<ScalarOp>)> = Vec::new();
        let mut next_key = 100;
        for s in steps {
            match s {
                Step::Build { shared, len } => {
                    let key = shared.unwrap_or_else(|| { next_key += 1; next_key });
                    let c = Chain { key, len };
                    let g = chain(&interner, &c);
                    live.push((c, g));
                }
                Step::Drop(i) if !live.is_empty() => drop(live.swap_remove(i % live.len())),
                Step::Drop(_) => {}
                Step::Reclaim => {
                    interner.reclaim_unused();
                }
            }
            for (c, g) in &live {
                for v in 0..g.value_count() {
                    let key = g.global_key(computegraph::LocalValueId::new(v));
                    let id = interner.intern_key(&key).unwrap();
                    proptest::prop_assert_eq!(interner.value_key(id), key);
                }
                let again = chain(&interner, c);
                proptest::prop_assert_eq!(output_key(&again), output_key(g), "{:?}", c);
            }
            for (i, (c, g)) in live.iter().enumerate() {
                for (d, h) in &live[i + 1..] {
                    if c.key == d.key && c.len == d.len {
                        proptest::prop_assert_eq!(output_key(g), output_key(h));
                    }
                }
            }
            proptest::prop_assert!(interner.live_value_count() <= interner.value_count());
        }
    }
}

/// A one-shot caller drops its large fragment once materialized (as `dag_memory
/// --release` does): the interner reclaims its chunks and releases its operation table
/// instead of removing entries one by one; the next interning rebuilds the table from the
/// survivors and finds their keys (building a kept graph's structure again gives its key);
/// the materialized graph, which shares the reclaimed chunks' operations, still compiles
/// and evaluates.
#[test]
fn dropping_a_large_fragment_releases_the_table_and_keeps_the_survivors() {
    let interner = fresh();
    let kept = small(&interner);
    let kept_key = output_key(&kept);
    // Past the reclamation threshold, so that dropping the fragment reclaims at once.
    let n = 100_000;
    let mut b = GraphBuilder::with_interner(Arc::clone(&interner));
    let mut v = b.add_input(ScalarKey::var(5));
    let mut want = 0.5f64;
    for i in 0..n {
        let op = if i % 3 == 0 { ScalarOp::Neg } else { ScalarOp::Sin };
        v = b.add_operation(op, vec![ValueRef::Local(v)], Primary)[0];
        want = if i % 3 == 0 { -want } else { want.sin() };
    }
    b.set_outputs(vec![v]);
    let g = Arc::new(b.build());
    let out = g.global_key(v);
    let flat = computegraph::materialize_merge(&resolve(vec![Arc::clone(&g)]), std::slice::from_ref(&out));
    let before = (interner.live_value_count(), interner.heap_bytes());
    drop(g);
    interner.reclaim_unused();
    let after = (interner.live_value_count(), interner.heap_bytes());
    assert!(after.0 * 4 < before.0, "live keys {before:?} -> {after:?}");
    // The chunks and the table go.
    assert!(after.1 * 2 < before.1, "bytes {before:?} -> {after:?}");
    assert_eq!(output_key(&small(&interner)), kept_key, "the survivors stay in the table");
    let program = computegraph::compile(&flat);
    let got = program.eval(&mut (), &[&0.5]);
    assert_eq!(got, vec![want]);
}
