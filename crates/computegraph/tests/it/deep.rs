//! Every traversal is iterative: a 10^6-deep chain goes through build, resolve,
//! materialize, compile, verify and eval on a thread with a 256 KiB stack.

use std::sync::Arc;
use std::time::Instant;

use computegraph::{
    GraphBuilder, OperationRole::Primary, ValueRef::Local, compile, materialize_merge, resolve, try_compile,
    try_materialize_merge,
};
use scalar::workloads;
use scalar::{ScalarKey, ScalarOp};

use crate::support::{assert_same, eval_vars, fresh};

/// Chain depth: 10^6, or `CG_DEEP_CHAIN` (`CG_DEEP_CHAIN=10000000 cargo test --release -p
/// computegraph --test it deep` runs 10^7).
fn depth() -> usize {
    std::env::var("CG_DEEP_CHAIN").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000)
}
const SMALL_STACK: usize = 256 * 1024;

fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new().stack_size(SMALL_STACK).spawn(f).expect("spawn").join().expect("small-stack thread")
}

/// The scalar workload chain (add/mul with input 0, neg), cut into three fragments and
/// resolved from the last one through its parents.
#[test]
fn million_deep_chain_on_a_small_stack() {
    let report = on_small_stack(|| {
        let t = Instant::now();
        let spec = workloads::chain(depth(), 11);
        let inputs = workloads::inputs_for(&spec, 5);
        let expected = spec.eval_reference(&inputs);
        let interner = fresh();
        let built = spec.build(&interner, 3).unwrap();
        let t_build = t.elapsed();
        for g in &built.graphs {
            g.verify().unwrap();
        }
        let root = Arc::clone(built.graphs.last().unwrap());
        let view = resolve(vec![root]);
        assert_eq!(view.graphs().len(), 3);
        let m = try_materialize_merge(&view, &built.outputs).unwrap();
        m.verify().unwrap();
        // Every node reads the one before it, so nothing merges.
        assert_eq!(m.operation_count(), depth());
        let p = try_compile(&m).unwrap();
        p.verify_against(&m).unwrap();
        // Live at any time: input 0, the previous value and the new one.
        assert!(p.slot_count() <= 3, "slot_count = {}", p.slot_count());
        assert_same(&eval_vars(&p, &inputs), &expected);
        // Dumps walk every instruction too.
        let text = p.to_string();
        assert_eq!(text.lines().count(), 1 + 1 + depth() + 1);
        format!("build {:?}, total {:?}", t_build, t.elapsed())
    });
    eprintln!("million_deep_chain_on_a_small_stack: {report}");
}

/// A hand-built chain of 10^6 negations through a single fragment: `-(-(…x))` is `x`.
#[test]
fn million_deep_neg_chain_single_fragment() {
    on_small_stack(|| {
        let mut b = GraphBuilder::with_interner(fresh());
        let x = b.add_input(ScalarKey::var(0));
        let mut v = x;
        for _ in 0..depth() {
            v = b.add_operation(ScalarOp::Neg, vec![Local(v)], Primary)[0];
        }
        b.set_outputs(vec![v]);
        let g = Arc::new(b.build());
        let p = compile(&materialize_merge(&resolve(vec![g.clone()]), &[g.global_key(v)]));
        assert!(p.slot_count() <= 2, "slot_count = {}", p.slot_count());
        // An even number of negations is the identity, bit for bit (also for -0.0).
        for x0 in [1.25, -0.0, f64::INFINITY] {
            assert_same(&p.eval(&mut (), &[&x0]), &[x0]);
        }
        assert_eq!(g.to_dot().matches("->").count(), depth() + 1);
    });
}

/// Environment variable that marks the child process of
/// [`dropping_a_deep_parent_chain_on_a_small_stack`].
const CHILD: &str = "COMPUTEGRAPH_IT_DEEP_PARENT_CHAIN_CHILD";
const CHAIN_FRAGMENTS: usize = 10_000;

/// Fragments chained through `parents` (each reads the previous one's value by key and
/// lists it as its only parent), then resolved, materialized and dropped on a small stack.
///
/// A stack overflow aborts the whole process, which would hide every other test's
/// result, so the work runs in a child process (this same test binary, this test only)
/// and the parent asserts that the child succeeded.
#[test]
fn dropping_a_deep_parent_chain_on_a_small_stack() {
    if std::env::var_os(CHILD).is_some() {
        on_small_stack(|| {
            use computegraph::{KeyInterner, ValueKey, ValueRef::External};
            let interner = KeyInterner::<ScalarOp>::new();
            let mut prev: Option<Arc<computegraph::Graph<ScalarOp>>> = None;
            let mut key = ValueKey::Input(ScalarKey::var(0));
            for _ in 0..CHAIN_FRAGMENTS {
                let mut b = GraphBuilder::with_interner(interner.clone());
                if let Some(p) = prev.take() {
                    b.add_parent(p);
                }
                let v = b.add_operation(ScalarOp::Neg, vec![External(key.clone())], Primary)[0];
                let g = Arc::new(b.build());
                key = g.global_key(v);
                prev = Some(g);
            }
            let root = prev.expect("at least one fragment");
            let view = resolve(vec![root.clone()]);
            assert_eq!(view.graphs().len(), CHAIN_FRAGMENTS);
            let p = compile(&materialize_merge(&view, &[key]));
            assert_eq!(p.instruction_count(), CHAIN_FRAGMENTS);
            assert_same(&p.eval(&mut (), &[&2.5]), &[2.5]); // an even number of negations
            drop(view);
            eprintln!("child: built, resolved, compiled and evaluated; dropping the root of the chain");
            drop(root); // the last reference to the whole chain
            eprintln!("child: dropped");
        });
        return;
    }
    let exe = std::env::current_exe().expect("test binary path");
    let out = std::process::Command::new(exe)
        .args(["--exact", "deep::dropping_a_deep_parent_chain_on_a_small_stack", "--test-threads=1", "--nocapture"])
        .env(CHILD, "1")
        .output()
        .expect("run the child test process");
    assert!(
        out.status.success(),
        "child process failed ({}) on a {CHAIN_FRAGMENTS}-deep parent chain:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 passed"), "the child ran the test");
}
