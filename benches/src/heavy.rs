//! The heavy-node workload of the `eval_parallel` bench group: a layered graph whose every
//! node is a small dense matrix product costing about 12 µs, for the issue-5 target
//! "10^4 nodes of ~10 µs each: parallel ≥ 1.8× sequential".
//!
//! [`MatMul`] multiplies two `N × N` matrices (`N` = [`MATMUL_N`]) and scales the result by
//! `1 / N` so that magnitudes stay bounded through a hundred layers; it reports its
//! multiply-adds as its cost hint, as a tensor contraction would report its flops.
//!
//! Baselines over the same products, without the engine: [`HeavyWorkload::eval_layers`]
//! (a loop over the layers, the sequential floor) and [`HeavyWorkload::eval_layers_on`]
//! (each layer a rayon `par_iter` on a given pool: the speedup the machine allows at the
//! moment, which on a shared machine is worth measuring in the same run).

use std::sync::Arc;

use computegraph::{
    CompiledProgram, EvaluableGraphOperation, GraphBuilder, GraphOperation, KeyInterner, OperationRole::Primary,
    Outputs, ValueRef::Local, compile, materialize_merge, resolve,
};
use scalar::workloads::Rng;

/// Matrix side: `32³` multiply-adds, about 12 µs on the project machine.
pub const MATMUL_N: usize = 32;

/// A dense `N × N` matrix, row-major, shared (cloning a slot is a reference count).
pub type Matrix = Arc<[f64]>;

/// The product of two [`MATMUL_N`]-square matrices, scaled by `1 / N`.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct MatMul;

impl GraphOperation for MatMul {
    type Operand = Matrix;
    type Context = ();
    type InputKey = u32;
    fn input_count(&self) -> usize {
        2
    }
    fn output_count(&self) -> usize {
        1
    }
    fn cost_hint(&self) -> u64 {
        (MATMUL_N * MATMUL_N * MATMUL_N) as u64
    }
}

impl EvaluableGraphOperation for MatMul {
    fn eval_into(&self, _: &mut (), inputs: &[&Matrix], out: &mut Outputs<'_, Matrix>) {
        const N: usize = MATMUL_N;
        let (a, b) = (&inputs[0][..N * N], &inputs[1][..N * N]);
        let mut c = vec![0.0; N * N];
        for (c_row, a_row) in c.chunks_exact_mut(N).zip(a.chunks_exact(N)) {
            for (&a_ik, b_row) in a_row.iter().zip(b.chunks_exact(N)) {
                for (c_ij, &b_kj) in c_row.iter_mut().zip(b_row) {
                    *c_ij += a_ik * b_kj;
                }
            }
        }
        let scale = 1.0 / N as f64;
        c.iter_mut().for_each(|x| *x *= scale);
        out.push(c.into());
    }
}

/// A compiled layered graph of [`MatMul`]s and its input matrices: `depth` layers of
/// `width` nodes, node `j` of a layer multiplying node `j` of the layer before by a random
/// node of it, so every node is reachable from the last layer (the outputs) and none is
/// removed by CSE.
pub struct HeavyWorkload {
    /// The compiled program; its outputs are the last layer.
    pub program: CompiledProgram<MatMul>,
    /// One matrix per input key (`key` indexes this vector).
    pub inputs: Vec<Matrix>,
    /// Number of nodes (`width * depth`, before CSE).
    pub nodes: usize,
    /// Per layer, per node: the positions in the layer before of its two operands.
    pub layers: Vec<Vec<(u32, u32)>>,
}

impl HeavyWorkload {
    /// Builds and compiles the workload; deterministic in `seed`.
    pub fn new(width: usize, depth: usize, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let inputs: Vec<Matrix> =
            (0..width).map(|_| (0..MATMUL_N * MATMUL_N).map(|_| rng.unit() - 0.5).collect()).collect();
        let mut b = GraphBuilder::with_interner(KeyInterner::new());
        let mut layer: Vec<_> = (0..width as u32).map(|k| b.add_input(k)).collect();
        let mut layers = Vec::with_capacity(depth);
        for _ in 0..depth {
            let picks: Vec<(u32, u32)> = (0..width).map(|j| (j as u32, rng.below(width as u64) as u32)).collect();
            layer = picks
                .iter()
                .map(|&(x, y)| {
                    b.add_operation(MatMul, vec![Local(layer[x as usize]), Local(layer[y as usize])], Primary)[0]
                })
                .collect();
            layers.push(picks);
        }
        let g = Arc::new(b.build());
        let outputs: Vec<_> = layer.iter().map(|&v| g.global_key(v)).collect();
        let program = compile(&materialize_merge(&resolve(vec![g]), &outputs));
        HeavyWorkload { program, inputs, nodes: width * depth, layers }
    }

    /// Baseline: the same products, layer by layer, on this thread; returns the last layer.
    pub fn eval_layers(&self) -> Vec<Matrix> {
        let mut prev = self.inputs.clone();
        for picks in &self.layers {
            prev = picks.iter().map(|&(x, y)| product(&prev[x as usize], &prev[y as usize])).collect();
        }
        prev
    }

    /// Baseline: the same products, each layer a `par_iter` on `pool` (entered once).
    pub fn eval_layers_on(&self, pool: &rayon::ThreadPool) -> Vec<Matrix> {
        use rayon::prelude::*;
        pool.install(|| {
            let mut prev = self.inputs.clone();
            for picks in &self.layers {
                prev = picks.par_iter().map(|&(x, y)| product(&prev[x as usize], &prev[y as usize])).collect();
            }
            prev
        })
    }

    /// The program's inputs, in its own order.
    pub fn bind(&self) -> Vec<&Matrix> {
        self.program.bind_inputs(|&k| self.inputs.get(k as usize)).expect("every input key is bound")
    }
}

fn product(a: &Matrix, b: &Matrix) -> Matrix {
    MatMul.eval(&mut (), &[a, b]).pop().expect("one output")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sequential and parallel evaluation of the heavy workload, and both baselines, give
    /// the same bits.
    #[test]
    fn evaluations_and_baselines_agree() {
        let w = HeavyWorkload::new(6, 5, 3);
        let bits = |v: &[Matrix]| v.iter().flat_map(|m| m.iter().map(|x| x.to_bits())).collect::<Vec<_>>();
        let expected = bits(&w.eval_layers());
        assert_eq!(expected.len(), 6 * MATMUL_N * MATMUL_N);
        let inputs = w.bind();
        assert_eq!(bits(&w.program.eval(&mut (), &inputs)), expected);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        assert_eq!(bits(&w.program.eval_parallel(Some(&pool), &mut (), &inputs)), expected);
        assert_eq!(bits(&w.eval_layers_on(&pool)), expected);
    }
}
