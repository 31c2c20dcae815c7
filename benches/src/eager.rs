//! Shared setup of the eager benches: a ten-operation scalar function run eagerly on a
//! [`Tape`], and the same function's gradient compiled in graph mode (the baseline).
//!
//! `f(x, w; c) = -x · (x + w) · exp(sin(x·w) + c·cos x)`, with `c` a constant that does not
//! require a gradient.
//!
//! Issue 23's workloads: one-operation graphs over fresh keys built with
//! `GraphBuilder::new()` ([`fresh_exp_graph`], beside [`same_key_exp_graph`]), and the
//! loop of `docs/SPEC.md` §6 ([`spec_step`] on a [`SpecTape`]).

use std::collections::HashMap;
use std::sync::Arc;

use computegraph::{Graph, GraphBuilder, KeyInterner, OperationRole, ValueRef, resolve};
use scalar::eager::{Gradients, ScalarExecutor, SpecTape, Tape, Var};
use scalar::spec::GraphSpec;
use scalar::{ScalarKey, ScalarOp};
use tidu::DerivativeProgram;
use tidu::eager::try_backward;

/// The function's inputs: `x`, `w`, `c`.
pub const INPUTS: [f64; 3] = [0.7, 1.5, 0.25];

/// The ten-operation function as a spec (inputs `x`, `w`, `c`; one output).
pub fn ten_ops() -> GraphSpec {
    let mut s = GraphSpec { inputs: 3, ..Default::default() };
    let (x, w, c) = (0, 1, 2);
    let p = s.push(ScalarOp::Mul, &[x, w]);
    let sn = s.push(ScalarOp::Sin, &[p]);
    let k = s.push(ScalarOp::Cos, &[x]);
    let kc = s.push(ScalarOp::Mul, &[k, c]);
    let t = s.push(ScalarOp::Add, &[sn, kc]);
    let e = s.push(ScalarOp::Exp, &[t]);
    let sum = s.push(ScalarOp::Add, &[x, w]);
    let q = s.push(ScalarOp::Mul, &[e, sum]);
    let n = s.push(ScalarOp::Neg, &[x]);
    let y = s.push(ScalarOp::Mul, &[q, n]);
    s.outputs = vec![y];
    s
}

/// Runs the function eagerly: returns the leaves and the output. With `track == false`
/// no input requires a gradient, so nothing is recorded (the frontend's own cost).
pub fn forward(tape: &mut Tape, spec: &GraphSpec, track: bool) -> (Vec<Var>, Var) {
    let leaves: Vec<Var> = INPUTS.iter().enumerate().map(|(i, &v)| tape.leaf(v, track && i < 2).unwrap()).collect();
    let values = tape.run_spec(spec, &leaves).expect("eager ops");
    let y = values[spec.outputs[0] as usize].clone();
    (leaves, y)
}

/// Reverse mode over the tape of [`forward`].
pub fn backward(y: &Var, executor: &mut ScalarExecutor) -> Gradients {
    try_backward(&y.key, y.trace.as_ref(), Arc::new(1.0), executor, &mut ()).expect("backward")
}

/// The graph-mode gradient of the function with respect to `x` and `w`, compiled once.
pub struct GraphGradient {
    program: DerivativeProgram<ScalarOp>,
    inputs: HashMap<ScalarKey, f64>,
}

impl GraphGradient {
    /// Builds, differentiates and compiles the function.
    pub fn new(spec: &GraphSpec) -> Self {
        let built = spec.build_single(&KeyInterner::new()).expect("valid spec");
        let wrt = [ScalarKey::var(0), ScalarKey::var(1)];
        let g = tidu::vjp(&resolve(built.graphs), &built.outputs, &wrt).expect("rules");
        let mut inputs: HashMap<ScalarKey, f64> =
            INPUTS.iter().enumerate().map(|(i, &v)| (ScalarKey::var(i as u32), v)).collect();
        for (k, _) in g.tangent_inputs() {
            inputs.insert(k.clone(), 1.0);
        }
        GraphGradient { program: DerivativeProgram::new(&g).expect("compiles"), inputs }
    }

    /// Evaluates the gradient: `[df/dx, df/dw]`.
    pub fn eval(&self) -> Vec<Option<f64>> {
        self.program.eval(&mut (), |k| self.inputs.get(k)).expect("inputs bound")
    }
}

/// First key of [`FreshKeys`]: above the keys of [`ten_ops`] and below `SpecTape`'s.
const FIRST_FRESH_KEY: u32 = 1 << 20;

/// Input keys never handed out before (`ScalarKey::Var` from 2^20 up, wrapping after
/// about 10^9).
#[derive(Debug)]
pub struct FreshKeys(u32);

impl Default for FreshKeys {
    fn default() -> Self {
        FreshKeys(FIRST_FRESH_KEY)
    }
}

impl FreshKeys {
    /// The next key.
    pub fn next_key(&mut self) -> ScalarKey {
        self.0 = if self.0 >= 1 << 30 { FIRST_FRESH_KEY } else { self.0 + 1 };
        ScalarKey::Var(self.0)
    }
}

/// `exp(k)` as a one-operation graph on the process-wide interner, `k` a fresh input key:
/// what an eager frontend following `docs/SPEC.md` §6 builds for every operation.
pub fn fresh_exp_graph(keys: &mut FreshKeys) -> Graph<ScalarOp> {
    exp_graph(keys.next_key())
}

/// The same graph over the same key every time (hash-consed: nothing new is interned).
pub fn same_key_exp_graph() -> Graph<ScalarOp> {
    exp_graph(ScalarKey::var(0))
}

fn exp_graph(key: ScalarKey) -> Graph<ScalarOp> {
    let mut b = GraphBuilder::<ScalarOp>::new();
    let x = b.add_input(key);
    let y = b.add_operation(ScalarOp::Exp, vec![ValueRef::Local(x)], OperationRole::Primary);
    b.set_outputs(y.to_vec());
    b.build()
}

/// One iteration of issue 23's loop on `tape`: fresh leaves `x`, `w`, then
/// `y = exp(x·w) + x` and reverse mode. Returns `(dy/dx, dy/dw)`.
pub fn spec_step(tape: &mut SpecTape, exec: &mut ScalarExecutor, i: usize) -> (f64, f64) {
    let (xv, wv) = spec_step_inputs(i);
    let x = tape.leaf(xv, true).expect("keys left");
    let w = tape.leaf(wv, true).expect("keys left");
    let p = tape.apply(ScalarOp::Mul, &[&x, &w]).expect("recorded");
    let e = tape.apply(ScalarOp::Exp, &[&p]).expect("recorded");
    let y = tape.apply(ScalarOp::Add, &[&e, &x]).expect("recorded");
    let g = tape.backward(&y, 1.0, exec).expect("backward");
    (*g[&x.key], *g[&w.key])
}

/// The leaves of iteration `i` of [`spec_step`].
pub fn spec_step_inputs(i: usize) -> (f64, f64) {
    (0.25 + (i % 17) as f64 * 0.03, 1.5 - (i % 5) as f64 * 0.1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use scalar::eager::GraphPerOp;

    #[test]
    fn spec_step_matches_the_closed_form_with_fresh_and_reused_graphs() {
        for mode in [GraphPerOp::Fresh, GraphPerOp::Reused] {
            let mut tape = SpecTape::new(mode);
            let mut exec = ScalarExecutor::new();
            for i in 0..40 {
                let (x, w) = spec_step_inputs(i);
                let (dx, dw) = spec_step(&mut tape, &mut exec, i);
                assert!((dx - (w * (x * w).exp() + 1.0)).abs() < 1e-12, "{mode:?} {i}: {dx}");
                assert!((dw - x * (x * w).exp()).abs() < 1e-12, "{mode:?} {i}: {dw}");
            }
            assert_eq!(tape.recorder().stats().rule_misses, 3, "{mode:?}");
        }
    }

    #[test]
    fn fresh_graphs_get_fresh_keys_and_same_key_graphs_share_theirs() {
        let mut keys = FreshKeys::default();
        let (a, b) = (fresh_exp_graph(&mut keys), fresh_exp_graph(&mut keys));
        assert_ne!(a.input_keys(), b.input_keys());
        let (c, d) = (same_key_exp_graph(), same_key_exp_graph());
        assert_eq!(c.global_key(c.outputs()[0]), d.global_key(d.outputs()[0]));
    }

    #[test]
    fn eager_and_graph_mode_agree() {
        let spec = ten_ops();
        let mut tape = Tape::new();
        let (leaves, y) = forward(&mut tape, &spec, true);
        let got = backward(&y, &mut ScalarExecutor::new());
        let want = GraphGradient::new(&spec).eval();
        for (leaf, w) in leaves.iter().zip(&want) {
            let (g, w) = (*got[&leaf.key], w.expect("depends on x and w"));
            assert!((g - w).abs() <= 1e-12 * (1.0 + w.abs()), "{g} vs {w}");
        }
        assert_eq!(*y.value, spec.eval_reference(&INPUTS)[0]);
    }
}
