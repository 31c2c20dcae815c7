//! Shared helpers: building scalar functions and evaluating derivative graphs.

use std::collections::HashMap;
use std::sync::Arc;

use computegraph::{Graph, GraphBuilder, KeyInterner, LocalValueId, OperationRole, ValueRef};
use scalar::{ScalarKey, ScalarOp};
use tidu::{DerivativeProgram, LinearizedGraph};

/// A builder on a fresh interner.
pub fn builder() -> GraphBuilder<ScalarOp> {
    GraphBuilder::with_interner(KeyInterner::new())
}

/// Adds a primal operation with local operands; returns its first output.
pub fn op(b: &mut GraphBuilder<ScalarOp>, op: ScalarOp, args: &[LocalValueId]) -> LocalValueId {
    b.add_operation(op, args.iter().map(|&a| ValueRef::Local(a)).collect::<Vec<_>>(), OperationRole::Primary)[0]
}

/// Evaluates a derivative graph with the given input values (by key).
pub fn eval(lin: &LinearizedGraph<ScalarOp>, values: &HashMap<ScalarKey, f64>) -> Vec<Option<f64>> {
    let program = DerivativeProgram::new(lin).expect("derivative compiles");
    program.eval(&mut (), |k| values.get(k)).expect("every input is bound")
}

/// Counts operations of a graph that are the given op.
pub fn count_ops(g: &Graph<ScalarOp>, which: ScalarOp) -> usize {
    g.operations().filter(|o| *o.operation() == which).count()
}

/// `f(x) = (x + x) * x` as in `docs/SPEC.md` §4.4: returns the graph and its output.
pub fn worked_example() -> (Arc<Graph<ScalarOp>>, LocalValueId) {
    let mut b = builder();
    let x = b.add_input(ScalarKey::var(0));
    let s = op(&mut b, ScalarOp::Add, &[x, x]);
    let y = op(&mut b, ScalarOp::Mul, &[s, x]);
    b.set_outputs(vec![y]);
    (Arc::new(b.build()), y)
}
