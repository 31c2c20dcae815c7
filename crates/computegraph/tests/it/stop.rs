//! The interner's own long steps stop on the flag of `stop::with_stop`: growing the
//! operation table and rebuilding a released one each take most of a second at 10^7
//! operations, which Ctrl-C's bound does not allow. A build that meets the flag there fails
//! with `GraphError::Interrupted` and leaves the interner whole: the graphs that live keep
//! their keys, and the same build with the flag down succeeds and evaluates; a builder whose
//! flush stopped keeps every value and flushes when the flag is down.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use computegraph::{
    Graph, GraphBuilder, GraphError, KeyInterner, OperationRole::Primary, ValueKey, ValueRef, compile,
    materialize_merge, resolve, stop,
};
use scalar::{ScalarKey, ScalarOp};

use crate::support::fresh;

/// A chain of `n` sines of input `var`, built with no reservation (the table grows batch
/// by batch); its output key.
fn sines(
    interner: &Arc<KeyInterner<ScalarOp>>,
    var: u32,
    n: usize,
) -> Result<(Graph<ScalarOp>, ValueKey<ScalarOp>), GraphError> {
    let mut b = GraphBuilder::with_interner(Arc::clone(interner));
    let mut y = b.add_input(ScalarKey::var(var));
    for _ in 0..n {
        y = b.add_operation(ScalarOp::Sin, vec![ValueRef::Local(y)], Primary)[0];
    }
    b.set_outputs(vec![y]);
    let g = b.try_build()?;
    let out = g.global_key(y);
    Ok((g, out))
}

/// `run` with the stop flag installed, up or down.
fn with<R>(up: bool, run: impl FnOnce() -> R) -> R {
    stop::with_stop(Arc::new(AtomicBool::new(up)), run)
}

/// The value of the chain of `n` sines at `x`, by the program the engine compiles, and by hand.
fn check_evaluates(g: Graph<ScalarOp>, out: ValueKey<ScalarOp>, n: usize, x: f64) {
    let program = compile(&materialize_merge(&resolve(vec![Arc::new(g)]), std::slice::from_ref(&out)));
    let want = (0..n).fold(x, |v, _| v.sin());
    assert_eq!(program.eval(&mut (), &[&x]), vec![want]);
}

/// The chain of `len` sines of input `var` fails to build with the flag up and builds
/// and evaluates with it down; the kept chain (of input 0) stays whole: building its
/// structure again gives its key (the table still finds it), and it evaluates.
fn stops_then_builds(
    interner: &Arc<KeyInterner<ScalarOp>>,
    (kept, kept_out, kept_len): (Graph<ScalarOp>, ValueKey<ScalarOp>, usize),
    var: u32,
    len: usize,
) {
    assert_eq!(with(true, || sines(interner, var, len)).map(|_| ()), Err(GraphError::Interrupted));
    assert_eq!(with(false, || sines(interner, 0, kept_len)).expect("flag down").1, kept_out);
    let (g, out) = with(false, || sines(interner, var, len)).expect("flag down");
    check_evaluates(g, out, len, 0.3);
    check_evaluates(kept, kept_out, kept_len, 0.7);
}

#[test]
fn a_build_that_grows_the_table_stops_on_the_flag() {
    let interner = fresh();
    let kept_len = 3 * stop::POLL_EVERY as usize;
    let (kept, kept_out) = sines(&interner, 0, kept_len).expect("no flag");
    // The second chain is several times the table's room: its batches grow the table,
    // and a growth re-inserts the kept chain's entries, more than a poll's worth.
    stops_then_builds(&interner, (kept, kept_out, kept_len), 1, 8 * stop::POLL_EVERY as usize);
}

#[test]
fn a_table_released_by_a_large_drop_is_rebuilt_unless_the_flag_is_up() {
    let interner = fresh();
    let kept_len = 70_000;
    let (kept, kept_out) = sines(&interner, 0, kept_len).expect("no flag");
    // Dropping more operations than live ones reclaims them at once and releases the
    // table (one removal per entry would take seconds at 10^7).
    drop(sines(&interner, 1, 150_000).expect("no flag"));
    // The next interning rebuilds the table first: with the flag up, it stops there.
    stops_then_builds(&interner, (kept, kept_out, kept_len), 2, 10);
}

#[test]
fn a_flush_stopped_by_the_flag_loses_nothing_and_goes_on_when_it_is_down() {
    let interner = fresh();
    let kept_len = 3 * stop::POLL_EVERY as usize;
    let (kept, kept_out) = sines(&interner, 0, kept_len).expect("no flag");
    let n = 8 * stop::POLL_EVERY as usize;
    let mut b = GraphBuilder::with_interner(Arc::clone(&interner));
    let mut y = b.add_input(ScalarKey::var(1));
    with(true, || {
        for _ in 0..n {
            y = b.add_operation(ScalarOp::Sin, vec![ValueRef::Local(y)], Primary)[0];
        }
        // The batches' table growth stopped; so does the flush, with nothing lost.
        assert_eq!(b.try_flush(), Err(GraphError::Interrupted));
    });
    assert_eq!(b.value_count(), n + 1);
    with(false, || b.try_flush()).expect("flag down");
    // Nothing is left for the build to intern: it succeeds with the flag up.
    b.set_outputs(vec![y]);
    let g = with(true, || b.try_build()).expect("nothing pending");
    let out = g.global_key(y);
    check_evaluates(g, out, n, 0.3);
    check_evaluates(kept, kept_out, kept_len, 0.7);
}
