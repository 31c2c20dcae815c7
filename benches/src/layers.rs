//! An engine-free baseline for level-parallel evaluation of the cheap layered graphs
//! (`layered_wide`, `layered_deep`): what a hand-written program gets out of two cores on
//! the same nodes, so that the engine's parallel speedup can be read against what the
//! machine allows.
//!
//! The nodes of each layer are sorted by operation (as the engine's dispatch order groups
//! them) and their operands renumbered to positions in the previous layer. Values live in
//! two buffers of one layer each, swapped per layer. The two-thread version gives each
//! thread a fixed half of every layer (no claiming, no chunk bookkeeping) and meets at a
//! spinning barrier after each layer; the buffers are `AtomicU64`s with relaxed loads and
//! stores (plain moves on x86_64), so it needs no `unsafe`.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use computegraph::GraphOperation;
use scalar::ScalarOp;
use scalar::spec::GraphSpec;

/// One node: the operation and its operands' positions in the previous layer.
#[derive(Clone, Copy, Debug)]
struct Node {
    op: Code,
    a: u32,
    b: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Code {
    Add,
    Mul,
    Neg,
}

/// A layered graph in flat per-layer columns (see the module doc).
pub struct FlatLayers {
    width: usize,
    /// `nodes[l * width..(l + 1) * width]` is layer `l`, sorted by operation.
    nodes: Vec<Node>,
    /// Position of each spec output in the last layer.
    outputs: Vec<u32>,
}

impl FlatLayers {
    /// Lowers a spec of `scalar::workloads::layered(width, depth, _)`.
    ///
    /// # Panics
    /// If the spec is not such a layered graph (an operation other than add, mul or neg,
    /// or an operand outside the previous layer).
    pub fn new(spec: &GraphSpec, width: usize) -> Self {
        assert_eq!(spec.inputs as usize, width, "a layered spec has one input per column");
        assert_eq!(spec.ops.len() % width, 0, "whole layers");
        let mut pos: Vec<u32> = (0..width as u32).collect(); // position of each value id
        pos.resize(width + spec.ops.len(), u32::MAX);
        let mut nodes = Vec::with_capacity(spec.ops.len());
        let mut arg = 0;
        let mut layer: Vec<(Code, u32, u32, usize)> = Vec::with_capacity(width);
        for (l, ops) in spec.ops.chunks(width).enumerate() {
            let prev_first = width * l;
            layer.clear();
            for (k, op) in ops.iter().enumerate() {
                let n = op.input_count();
                let operands = &spec.args[arg..arg + n];
                arg += n;
                let at = |v: u32| {
                    let v = v as usize;
                    assert!((prev_first..prev_first + width).contains(&v), "operand outside the previous layer");
                    pos[v]
                };
                let code = match op {
                    ScalarOp::Add => Code::Add,
                    ScalarOp::Mul => Code::Mul,
                    ScalarOp::Neg => Code::Neg,
                    other => panic!("{other:?} in a layered spec"),
                };
                layer.push((code, at(operands[0]), at(operands[n - 1]), width * (l + 1) + k));
            }
            layer.sort_by_key(|&(code, ..)| code);
            for (p, &(op, a, b, id)) in layer.iter().enumerate() {
                pos[id] = p as u32;
                nodes.push(Node { op, a, b });
            }
        }
        let outputs = spec.outputs.iter().map(|&o| pos[o as usize]).collect();
        FlatLayers { width, nodes, outputs }
    }

    #[inline(always)]
    fn apply(n: Node, x: f64, y: f64) -> f64 {
        match n.op {
            Code::Add => x + y,
            Code::Mul => x * y,
            Code::Neg => -x,
        }
    }

    /// Evaluates on one thread.
    pub fn eval(&self, inputs: &[f64]) -> Vec<f64> {
        let mut prev = inputs.to_vec();
        let mut cur = vec![0.0; self.width];
        for layer in self.nodes.chunks(self.width) {
            for (v, &n) in cur.iter_mut().zip(layer) {
                *v = Self::apply(n, prev[n.a as usize], prev[n.b as usize]);
            }
            std::mem::swap(&mut prev, &mut cur);
        }
        self.outputs.iter().map(|&o| prev[o as usize]).collect()
    }

    /// Evaluates on two scoped threads, each taking a fixed half of every layer.
    pub fn eval_two_threads(&self, inputs: &[f64]) -> Vec<f64> {
        let w = self.width;
        let bufs: [Vec<AtomicU64>; 2] =
            [inputs.iter().map(|x| AtomicU64::new(x.to_bits())).collect(), (0..w).map(|_| AtomicU64::new(0)).collect()];
        let arrived = AtomicUsize::new(0);
        let layers = self.nodes.len() / w.max(1);
        let half = |t: usize| t * w / 2..(t + 1) * w / 2;
        let run = |t: usize| {
            for (l, layer) in self.nodes.chunks(w).enumerate() {
                let (prev, cur) = (&bufs[l % 2], &bufs[(l + 1) % 2]);
                let load = |i: u32| f64::from_bits(prev[i as usize].load(Ordering::Relaxed));
                for i in half(t) {
                    let n = layer[i];
                    cur[i].store(Self::apply(n, load(n.a), load(n.b)).to_bits(), Ordering::Relaxed);
                }
                // Both threads have finished layer `l` when the count reaches 2(l + 1).
                arrived.fetch_add(1, Ordering::AcqRel);
                while arrived.load(Ordering::Acquire) < 2 * (l + 1) {
                    std::hint::spin_loop();
                }
            }
        };
        std::thread::scope(|s| {
            s.spawn(|| run(1));
            run(0);
        });
        let last = &bufs[layers % 2];
        self.outputs.iter().map(|&o| f64::from_bits(last[o as usize].load(Ordering::Relaxed))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use scalar::workloads;

    #[test]
    fn both_evaluators_match_the_reference() {
        let (width, depth) = (64, 9);
        let spec = workloads::layered(width, depth, 3);
        let inputs = workloads::inputs_for(&spec, 5);
        let expected = spec.eval_reference(&inputs);
        let flat = FlatLayers::new(&spec, width);
        assert!(crate::same_values(&flat.eval(&inputs), &expected));
        assert!(crate::same_values(&flat.eval_two_threads(&inputs), &expected));
    }
}
