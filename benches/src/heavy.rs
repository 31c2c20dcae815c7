//! The heavy-node workload of the `eval_parallel` bench group: a layered graph whose every
//! node is a small dense matrix product costing about 10 µs, for the issue-5 target
//! "10^4 nodes of ~10 µs each: parallel ≥ 1.8× sequential".
//!
//! [`MatMul`] multiplies two `N × N` matrices (`N` = [`MATMUL_N`]) and scales the result by
//! `1 / N` so that magnitudes stay bounded through a hundred layers; it reports its
//! multiply-adds as its cost hint, as a tensor contraction would report its flops.

use std::sync::Arc;

use computegraph::{
    CompiledProgram, EvaluableGraphOperation, GraphBuilder, GraphOperation, KeyInterner, OperationRole::Primary,
    ValueRef::Local, compile, materialize_merge, resolve,
};
use scalar::workloads::Rng;

/// Matrix side: `32³` multiply-adds, about 10 µs on the project machine.
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
    fn eval_into(&self, _: &mut (), inputs: &[&Matrix], out: &mut Vec<Matrix>) {
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
}

impl HeavyWorkload {
    /// Builds and compiles the workload; deterministic in `seed`.
    pub fn new(width: usize, depth: usize, seed: u64) -> Self {
        let mut rng = Rng::new(seed);
        let inputs: Vec<Matrix> =
            (0..width).map(|_| (0..MATMUL_N * MATMUL_N).map(|_| rng.unit() - 0.5).collect()).collect();
        let mut b = GraphBuilder::with_interner(KeyInterner::new());
        let mut layer: Vec<_> = (0..width as u32).map(|k| b.add_input(k)).collect();
        for _ in 0..depth {
            layer = (0..width)
                .map(|j| {
                    let x = layer[j];
                    let y = layer[rng.below(width as u64) as usize];
                    b.add_operation(MatMul, vec![Local(x), Local(y)], Primary)[0]
                })
                .collect();
        }
        let g = Arc::new(b.build());
        let outputs: Vec<_> = layer.iter().map(|&v| g.global_key(v)).collect();
        let program = compile(&materialize_merge(&resolve(vec![g]), &outputs));
        HeavyWorkload { program, inputs, nodes: width * depth }
    }

    /// The program's inputs, in its own order.
    pub fn bind(&self) -> Vec<&Matrix> {
        self.program.bind_inputs(|&k| self.inputs.get(k as usize)).expect("every input key is bound")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parallel evaluation of the heavy workload equals sequential evaluation bitwise.
    #[test]
    fn parallel_matches_sequential() {
        let w = HeavyWorkload::new(6, 5, 3);
        let inputs = w.bind();
        let expected = w.program.eval(&mut (), &inputs);
        assert_eq!(expected.len(), 6);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let got = w.program.eval_parallel(Some(&pool), &mut (), &inputs);
        let bits = |v: &[Matrix]| v.iter().flat_map(|m| m.iter().map(|x| x.to_bits())).collect::<Vec<_>>();
        assert_eq!(bits(&got), bits(&expected));
    }
}
