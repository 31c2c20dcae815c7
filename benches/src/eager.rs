//! Shared setup of the eager benches: a ten-operation scalar function run eagerly on a
//! [`Tape`], and the same function's gradient compiled in graph mode (the baseline).
//!
//! `f(x, w; c) = -x · (x + w) · exp(sin(x·w) + c·cos x)`, with `c` a constant that does not
//! require a gradient.

use std::collections::HashMap;
use std::sync::Arc;

use computegraph::{KeyInterner, resolve};
use scalar::eager::{Gradients, ScalarExecutor, Tape, Var};
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

#[cfg(test)]
mod tests {
    use super::*;

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
