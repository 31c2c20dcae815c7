//! The specification's contract, exercised as a downstream user writes it: the worked
//! example through every pipeline of `docs/SPEC.md` §5.3, primal computations in rules shared
//! with the primal graph, random DAGs against a plain interpreter, finite differences and
//! the dot-product identity, and a deep chain on a small stack.

use std::collections::HashMap;

use computegraph::{ValueKey, compile, materialize_merge, resolve};
use spec_user::{Key, Op};
use tidu::LinearizedGraph;

mod deep;
mod eager;
mod properties;
mod worked;

/// Evaluates `outputs` (keys of values of `graphs`) with inputs looked up by key, through
/// resolve → materialize_merge → compile → eval. The program's positional inputs are in
/// the order of the materialized graph's input keys.
fn eval_keys(
    graphs: Vec<std::sync::Arc<computegraph::Graph<Op>>>,
    outputs: &[ValueKey<Op>],
    values: &HashMap<Key, f64>,
) -> Vec<f64> {
    let materialized = materialize_merge(&resolve(graphs), outputs);
    let inputs: Vec<&f64> = materialized
        .input_keys()
        .iter()
        .map(|k| values.get(k).unwrap_or_else(|| panic!("no value for {k:?}")))
        .collect();
    compile(&materialized).eval(&mut (), &inputs)
}

/// Evaluates a linear map's outputs (`None` for symbolic zeros).
fn eval_linear(lin: &LinearizedGraph<Op>, values: &HashMap<Key, f64>) -> Vec<Option<f64>> {
    let keys: Vec<ValueKey<Op>> = lin.tangent_outputs().iter().flatten().map(|&v| lin.graph().global_key(v)).collect();
    let mut got = eval_keys(vec![lin.graph().clone()], &keys, values).into_iter();
    lin.tangent_outputs().iter().map(|o| o.map(|_| got.next().expect("one value per output"))).collect()
}

/// The key of a linear map's `i`-th input (a tangent, or a cotangent seed).
fn input_key(lin: &LinearizedGraph<Op>, i: usize) -> Key {
    lin.tangent_inputs()[i].0.clone()
}

/// The key of a linear map's `i`-th output, which must not be a symbolic zero.
fn output_key(lin: &LinearizedGraph<Op>, i: usize) -> ValueKey<Op> {
    lin.graph().global_key(lin.tangent_outputs()[i].expect("a non-zero output"))
}
