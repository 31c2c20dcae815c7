//! Shared setup of the AD benches: a scalar random DAG with one output, differentiated
//! with respect to all of its inputs.

use std::collections::HashMap;

use computegraph::{
    CompiledProgram, EvalState, KeyInterner, ResolvedView, ValueKey, compile, materialize_merge, resolve,
};
use scalar::workloads::{self, Operands};
use scalar::{ScalarKey, ScalarOp};
use tidu::LinearizedGraph;

/// A primal graph ready to differentiate.
pub struct AdWorkload {
    /// Primal nodes of the spec.
    pub nodes: usize,
    /// The primal view.
    pub view: ResolvedView<ScalarOp>,
    /// Its one output.
    pub output: ValueKey<ScalarOp>,
    /// Input values by key.
    pub inputs: HashMap<ScalarKey, f64>,
    /// The keys differentiated against.
    pub wrt: Vec<ScalarKey>,
}

impl AdWorkload {
    /// A window-1024 random DAG of `n` nodes with 30% repeats and its last sink as output.
    pub fn new(n: usize) -> Self {
        let mut spec = workloads::random_dag(n, Operands::Window(1024), 0.3, 3);
        spec.outputs.truncate(1);
        let values = workloads::inputs_for(&spec, 5);
        let built = spec.build_single(&KeyInterner::new()).expect("valid spec");
        let wrt: Vec<ScalarKey> = (0..spec.inputs).map(ScalarKey::var).collect();
        let inputs = wrt.iter().cloned().zip(values).collect();
        AdWorkload { nodes: n, view: resolve(built.graphs.clone()), output: built.outputs[0].clone(), inputs, wrt }
    }

    /// The JVP of the output with respect to every input.
    pub fn linearize(&self) -> LinearizedGraph<ScalarOp> {
        tidu::linearize(&self.view, std::slice::from_ref(&self.output), &self.wrt)
    }

    /// A compiled HVP program with its bound inputs (direction all ones, seed one).
    pub fn hvp_program(&self) -> BoundProgram {
        let h = tidu::hvp(&self.view, &self.output, &self.wrt).expect("hvp");
        let keys: Vec<_> = h.tangent_output_keys().into_iter().flatten().collect();
        let program = compile(&materialize_merge(&resolve(vec![h.graph().clone()]), &keys));
        BoundProgram::new(program, &self.inputs)
    }
}

/// A program with its inputs: primal inputs by key, every other input (tangents, seeds) one.
pub struct BoundProgram {
    program: CompiledProgram<ScalarOp>,
    values: Vec<f64>,
}

impl BoundProgram {
    fn new(program: CompiledProgram<ScalarOp>, inputs: &HashMap<ScalarKey, f64>) -> Self {
        let values = program.input_keys().iter().map(|k| inputs.get(k).copied().unwrap_or(1.0)).collect();
        BoundProgram { program, values }
    }

    /// Evaluates it.
    pub fn eval(&self, state: &mut EvalState<f64>) -> Vec<f64> {
        let refs: Vec<&f64> = self.values.iter().collect();
        self.program.eval_with(state, &mut (), &refs).expect("evaluates")
    }

    /// The program.
    pub fn program(&self) -> &CompiledProgram<ScalarOp> {
        &self.program
    }
}

/// Linearize, transpose, materialize, compile and evaluate the gradient.
pub fn gradient_end_to_end(w: &AdWorkload) -> Vec<f64> {
    let lin = w.linearize();
    let t = tidu::linear_transpose(&lin);
    let keys: Vec<_> = t.tangent_output_keys().into_iter().flatten().collect();
    let program = compile(&materialize_merge(&resolve(vec![t.graph().clone()]), &keys));
    BoundProgram::new(program, &w.inputs).eval(&mut EvalState::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gradient_matches_finite_differences_on_a_small_dag() {
        let w = AdWorkload::new(300);
        let grad = gradient_end_to_end(&w);
        // Central differences of the primal program along each input.
        let primal = compile(&materialize_merge(&w.view, std::slice::from_ref(&w.output)));
        let f = |shift: &HashMap<ScalarKey, f64>| -> f64 {
            let refs = primal.bind_inputs(|k| shift.get(k)).expect("bound");
            primal.eval(&mut (), &refs)[0]
        };
        let mut checked = 0;
        let t = tidu::linear_transpose(&w.linearize());
        for (j, key) in w.wrt.iter().enumerate() {
            if t.tangent_outputs()[j].is_none() {
                continue;
            }
            // The program's outputs are the non-zero cotangents, in `wrt` order.
            let pos = t.tangent_outputs()[..j].iter().filter(|o| o.is_some()).count();
            let h = 1e-6;
            let mut plus = w.inputs.clone();
            *plus.get_mut(key).unwrap() += h;
            let mut minus = w.inputs.clone();
            *minus.get_mut(key).unwrap() -= h;
            let fd = (f(&plus) - f(&minus)) / (2.0 * h);
            let g = grad[pos];
            if fd.is_finite() && g.is_finite() && fd.abs() < 1e6 {
                assert!((fd - g).abs() <= 1e-5 + 1e-3 * fd.abs().max(g.abs()), "input {key:?}: {g} vs {fd}");
                checked += 1;
            }
        }
        assert!(checked > 0, "at least one input was checked");
    }
}
