//! A counter-based DAG cut into node blocks, each prepared and evaluated alone
//! (`docs/SCALING.md`, *What is built*).
//!
//! [`cuts`] splits the nodes `0..n` into `P` contiguous blocks (for layered shapes, at
//! layer boundaries: level bands). [`Block::generate`] draws a block's nodes
//! ([`CounterDag`]) into a [`GraphSpec`] whose inputs are the DAG's inputs, then its
//! *boundary* values: the values of earlier blocks it reads, in increasing
//! [`GlobalValue`] order, input `I + k` being boundary value `k`. The boundary values
//! are bound by key at evaluation (`ScalarKey::Var(I + k)`, looked up by their global
//! value), so the engine never sees another partition. The block also finds, by drawing
//! the nodes after it that can read it ([`CounterDag::reader_reach`]), its *exports* (its
//! values that later blocks read) and the DAG outputs it holds (the sinks of `window` and
//! `uniform`, the last node or layer otherwise): its graph's outputs are the exports, then
//! the held outputs, both in increasing global order.
//!
//! [`Partition::prepare`] generates, builds, materializes and compiles one block alone;
//! [`Partition::evaluate`] runs it given the DAG's inputs and its boundary values, which
//! [`gather`] picks from the exports of earlier partitions. [`evaluate_partitioned`]
//! runs every partition in order in one process. The DAG's outputs are the held outputs
//! of every partition in partition order: the same list, in the same order, as the
//! whole graph's (one partition), and equal to it bit for bit.
//!
//! Complexity: generating a block of `B` nodes is `O(B log b)` (`b` boundary values) plus
//! drawing its readers, `O(1)` per node (`window`: 1088; chain: 1; layered: two layers) or
//! `O(n)` (`uniform`, where any later node may read any value). Memory: two bits per value
//! of the block beside the spec; the spec is dropped once the program is compiled.

use std::ops::Range;
use std::time::{Duration, Instant};

use computegraph::stop::Poll;
use computegraph::{CompiledProgram, EvalState, KeyInterner, try_compile, try_materialize_merge, try_resolve};
use scalar::spec::GraphSpec;
use scalar::{ScalarKey, ScalarOp};

use crate::counter::{CounterDag, DagError, DagResult, GlobalValue};

/// A block's graph holds fewer than this many values (the engine's local ids are 31 bits).
const MAX_BLOCK_VALUES: u64 = 1 << 31;

/// The `P + 1` node indices that cut `dag` into `parts` blocks: block `k` is
/// `cuts[k]..cuts[k + 1]`. Blocks are as even as the shape allows; layered shapes are cut
/// between layers only, so `parts` may not exceed their depth.
///
/// ```
/// use workloads::{Shape, counter::CounterDag, partition::cuts};
///
/// let dag = CounterDag::new(Shape::LayeredWide, 10_000, 1).unwrap(); // 100 layers of 100
/// assert_eq!(cuts(&dag, 3).unwrap(), vec![0, 3300, 6600, 10_000]);
/// assert!(cuts(&dag, 101).is_err());
/// ```
pub fn cuts(dag: &CounterDag, parts: usize) -> DagResult<Vec<u64>> {
    let n = dag.node_count();
    let (unit, units) = match dag.layer_width() {
        Some(w) => (w, n / w),
        None => (1, n),
    };
    if parts == 0 || parts as u64 > units {
        let what = if unit > 1 { "layers" } else { "nodes" };
        return Err(DagError::Size(format!(
            "{parts} partitions: a DAG of {units} {what} takes 1 to {units} partitions"
        )));
    }
    let p = parts as u128;
    Ok((0..=p).map(|k| (k * u128::from(units) / p) as u64 * unit).collect())
}

/// A bit per value of a block: `2·(node − lo) + slot`.
struct Bits(Vec<u64>);

impl Bits {
    fn new(values: u64) -> DagResult<Bits> {
        Ok(Bits(try_vec(values.div_ceil(64), 0)?))
    }
    #[inline]
    fn set(&mut self, i: u64) {
        self.0[(i / 64) as usize] |= 1 << (i % 64);
    }
    #[inline]
    fn get(&self, i: u64) -> bool {
        self.0[(i / 64) as usize] >> (i % 64) & 1 == 1
    }
}

/// A vector of `len` copies of `x`, or an error instead of an abort.
fn try_vec<T: Clone>(len: u64, x: T) -> DagResult<Vec<T>> {
    let bytes = len.saturating_mul(std::mem::size_of::<T>() as u64);
    let len = usize::try_from(len).map_err(|_| DagError::Memory { bytes })?;
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| DagError::Memory { bytes })?;
    v.resize(len, x);
    Ok(v)
}

/// An empty vector with room for `len` items, or an error instead of an abort.
fn try_with_capacity<T>(len: u64) -> DagResult<Vec<T>> {
    let bytes = len.saturating_mul(std::mem::size_of::<T>() as u64);
    let len = usize::try_from(len).map_err(|_| DagError::Memory { bytes })?;
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| DagError::Memory { bytes })?;
    Ok(v)
}

/// One node block drawn as a spec, with what crosses its boundaries.
///
/// ```
/// use workloads::{Shape, counter::CounterDag, partition::Block};
///
/// let dag = CounterDag::new(Shape::Chain, 100, 1).unwrap();
/// let block = Block::generate(&dag, 40..70).unwrap();
/// // A chain block reads the value before it (and input 0), and exports its last value.
/// assert_eq!(block.boundary, vec![2 * (1 + 39)]);
/// assert_eq!(block.exports, vec![2 * (1 + 69)]);
/// assert!(block.held.is_empty()); // the chain's output is the last node's value
/// assert_eq!(block.spec.ops.len(), 30);
/// ```
#[derive(Clone, Debug)]
pub struct Block {
    /// Its nodes.
    pub range: Range<u64>,
    /// The block as a spec: inputs are the DAG's inputs, then the boundary values; its
    /// outputs are the exports, then the held outputs.
    pub spec: GraphSpec,
    /// The values of earlier blocks it reads, increasing.
    pub boundary: Vec<GlobalValue>,
    /// Its values that later blocks read, increasing.
    pub exports: Vec<GlobalValue>,
    /// The DAG outputs among its values, increasing.
    pub held: Vec<GlobalValue>,
}

impl Block {
    /// Draws the nodes `range` of `dag` and what crosses the block's boundaries. Sizes are
    /// checked before anything is allocated.
    pub fn generate(dag: &CounterDag, range: Range<u64>) -> DagResult<Block> {
        let (lo, hi) = (range.start, range.end);
        if lo >= hi || hi > dag.node_count() {
            return Err(DagError::Size(format!(
                "block {lo}..{hi} is not a non-empty range of the DAG's {} nodes",
                dag.node_count()
            )));
        }
        let inputs = dag.input_count();
        let len = hi - lo;
        // At most two values per node, and two boundary values read per node.
        let worst = inputs.saturating_add(len.saturating_mul(4));
        if worst >= MAX_BLOCK_VALUES {
            return Err(DagError::Size(format!(
                "a block of {len} nodes may need {worst} values, over the engine's 2^31 per graph: use more partitions"
            )));
        }
        let first_value = 2 * (inputs + lo); // the block's first global value
        let local_of = |g: GlobalValue| g - first_value;

        // Pass 1: the boundary values, and which of the block's values the block reads.
        let mut read = Bits::new(2 * len)?;
        let mut boundary: Vec<GlobalValue> = Vec::new();
        // Each pass over the nodes reads the stop flag (`computegraph::stop`) as it goes.
        let mut poll = Poll::new();
        for i in lo..hi {
            poll.tick()?;
            for &a in dag.node(i).operands() {
                if a >= first_value {
                    read.set(local_of(a));
                } else if a >= 2 * inputs {
                    boundary.push(a);
                }
            }
        }
        boundary.sort_unstable();
        boundary.dedup();
        boundary.shrink_to_fit();

        // The nodes after the block that can read it: its exports.
        let mut exported = Bits::new(2 * len)?;
        let last_reader = hi.saturating_add(dag.reader_reach()).min(dag.node_count());
        for i in hi..last_reader {
            poll.tick()?;
            for &a in dag.node(i).operands() {
                if a >= first_value && a < 2 * (inputs + hi) {
                    exported.set(local_of(a));
                }
            }
        }

        // Pass 2: the spec, numbering the block's values densely after the inputs.
        let spec_inputs = inputs + boundary.len() as u64;
        let mut spec = GraphSpec { inputs: spec_inputs as u32, ..Default::default() };
        spec.ops = try_with_capacity(len)?;
        spec.args = try_with_capacity(2 * len)?;
        let mut first_local: Vec<u32> = try_with_capacity(len)?;
        let mut local = [0u32; 2];
        for i in lo..hi {
            poll.tick()?;
            let node = dag.node(i);
            let operands = node.operands();
            for (slot, &a) in local.iter_mut().zip(operands) {
                *slot = if a >= first_value {
                    let k = local_of(a);
                    first_local[(k / 2) as usize] + (k % 2) as u32
                } else if a < 2 * inputs {
                    (a / 2) as u32
                } else {
                    let k = boundary.binary_search(&a).map_err(|_| DagError::Missing { value: a })?;
                    (inputs + k as u64) as u32
                };
            }
            first_local.push(spec.push(node.op, &local[..operands.len()]));
        }

        // Outputs: the exports, then the DAG outputs the block holds.
        let value_exists = |k: u64| k % 2 == 0 || spec.ops[(k / 2) as usize] == ScalarOp::SinCos;
        let mut exports = Vec::new();
        let mut held = Vec::new();
        let fixed = dag.fixed_outputs();
        for k in 0..2 * len {
            if !value_exists(k) {
                continue;
            }
            if exported.get(k) {
                exports.push(first_value + k);
            }
            let node = lo + k / 2;
            let is_output = if dag.outputs_are_sinks() {
                !read.get(k) && !exported.get(k)
            } else {
                k % 2 == 0 && fixed.contains(&node)
            };
            if is_output {
                held.push(first_value + k);
            }
        }
        let to_local = |g: &GlobalValue| {
            let k = local_of(*g);
            first_local[(k / 2) as usize] + (k % 2) as u32
        };
        spec.outputs = exports.iter().chain(&held).map(to_local).collect();
        Ok(Block { range, spec, boundary, exports, held })
    }
}

/// Times of one partition's preparation.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PrepareTimes {
    /// Drawing the block, its boundary and exports.
    pub generate: Duration,
    /// Building its graph (interning included).
    pub build: Duration,
    /// Resolving and materializing it.
    pub materialize: Duration,
    /// Compiling it.
    pub compile: Duration,
}

impl PrepareTimes {
    /// The whole preparation.
    pub fn total(&self) -> Duration {
        self.generate + self.build + self.materialize + self.compile
    }
}

/// One partition of a counter-based DAG, prepared: its compiled program and what crosses
/// its boundaries. The spec and the graph are dropped once compiled.
///
/// ```
/// use workloads::{Shape, counter::CounterDag, partition::{Partition, evaluate_partitioned}};
///
/// let dag = CounterDag::new(Shape::Window, 5000, 1).unwrap();
/// let inputs = dag.inputs(7);
/// let whole = vec![Partition::prepare(&dag, 1, 0).unwrap()];
/// let parts: Vec<Partition> = (0..3).map(|k| Partition::prepare(&dag, 3, k).unwrap()).collect();
/// let a = evaluate_partitioned(&whole, &inputs).unwrap();
/// let b = evaluate_partitioned(&parts, &inputs).unwrap();
/// assert!(workloads::same_values(&a, &b));
/// ```
pub struct Partition {
    dag: CounterDag,
    index: usize,
    cuts: Vec<u64>,
    boundary: Vec<GlobalValue>,
    exports: Vec<GlobalValue>,
    held: Vec<GlobalValue>,
    program: CompiledProgram<ScalarOp>,
    operations: usize,
    times: PrepareTimes,
}

impl Partition {
    /// Generates, builds, materializes and compiles block `index` of `dag` cut into
    /// `parts` ([`cuts`]), alone.
    pub fn prepare(dag: &CounterDag, parts: usize, index: usize) -> DagResult<Partition> {
        let cuts = cuts(dag, parts)?;
        if index >= parts {
            return Err(DagError::Size(format!("partition {index} of {parts}: the index must be below {parts}")));
        }
        let mut times = PrepareTimes::default();
        let t = Instant::now();
        let Block { spec, boundary, exports, held, .. } = Block::generate(dag, cuts[index]..cuts[index + 1])?;
        times.generate = t.elapsed();
        let t = Instant::now();
        let interner = KeyInterner::new();
        let built = spec.build_single(&interner)?;
        drop(spec);
        times.build = t.elapsed();
        let t = Instant::now();
        let view = try_resolve(built.graphs.clone())?;
        let flat = try_materialize_merge(&view, &built.outputs)?;
        drop(view);
        drop(built);
        times.materialize = t.elapsed();
        let t = Instant::now();
        let program = try_compile(&flat)?;
        let operations = flat.operation_count();
        drop(flat);
        drop(interner);
        times.compile = t.elapsed();
        Ok(Partition { dag: *dag, index, cuts, boundary, exports, held, program, operations, times })
    }

    /// The DAG it is part of.
    pub fn dag(&self) -> &CounterDag {
        &self.dag
    }

    /// Its index.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Its nodes.
    pub fn range(&self) -> Range<u64> {
        self.cuts[self.index]..self.cuts[self.index + 1]
    }

    /// The values of earlier partitions it reads, increasing: [`Partition::evaluate`]
    /// takes their values in this order.
    pub fn boundary(&self) -> &[GlobalValue] {
        &self.boundary
    }

    /// Its values that later partitions read, increasing.
    pub fn exports(&self) -> &[GlobalValue] {
        &self.exports
    }

    /// The DAG outputs it holds, increasing.
    pub fn held(&self) -> &[GlobalValue] {
        &self.held
    }

    /// The earlier partitions whose exports it reads, increasing.
    pub fn sources(&self) -> Vec<usize> {
        let inputs = self.dag.input_count();
        let mut out: Vec<usize> = Vec::new();
        for &g in &self.boundary {
            let node = g / 2 - inputs;
            let k = self.cuts.partition_point(|&c| c <= node) - 1;
            if out.last() != Some(&k) {
                out.push(k);
            }
        }
        out
    }

    /// Operations of its program after CSE.
    pub fn operation_count(&self) -> usize {
        self.operations
    }

    /// Its compiled program.
    pub fn program(&self) -> &CompiledProgram<ScalarOp> {
        &self.program
    }

    /// What its preparation took.
    pub fn times(&self) -> PrepareTimes {
        self.times
    }

    /// Evaluates the partition: `inputs` are the DAG's inputs, `boundary` the values of
    /// [`Partition::boundary`] in its order. Returns the values of its exports and of its
    /// held outputs, each in its list's order.
    pub fn evaluate(&self, inputs: &[f64], boundary: &[f64]) -> DagResult<(Vec<f64>, Vec<f64>)> {
        self.evaluate_with(&mut EvalState::new(), inputs, boundary)
    }

    /// [`Partition::evaluate`] reusing `state`'s allocations.
    pub fn evaluate_with(
        &self,
        state: &mut EvalState<f64>,
        inputs: &[f64],
        boundary: &[f64],
    ) -> DagResult<(Vec<f64>, Vec<f64>)> {
        let n = self.dag.input_count() as usize;
        if inputs.len() != n || boundary.len() != self.boundary.len() {
            return Err(DagError::Size(format!(
                "partition {} takes {n} inputs and {} boundary values, not {} and {}",
                self.index,
                self.boundary.len(),
                inputs.len(),
                boundary.len()
            )));
        }
        let bound = self.program.bind_inputs(|k| match k {
            ScalarKey::Var(i) => {
                let i = *i as usize;
                if i < n { inputs.get(i) } else { boundary.get(i - n) }
            }
            _ => None,
        })?;
        let mut out = self.program.eval_with(state, &mut (), &bound)?;
        let held = out.split_off(self.exports.len());
        Ok((out, held))
    }
}

/// The values of `boundary` (increasing global values) picked from earlier partitions'
/// exports: `sources` holds each one's `(exports, values)`, in partition order.
///
/// ```
/// use workloads::partition::gather;
///
/// let sources: [(&[u64], &[f64]); 2] = [(&[20, 24], &[1.0, 2.0]), (&[40, 41], &[3.0, 4.0])];
/// assert_eq!(gather(&[24, 41], &sources).unwrap(), vec![2.0, 4.0]);
/// assert!(gather(&[22], &sources).is_err());
/// ```
pub fn gather(boundary: &[GlobalValue], sources: &[(&[GlobalValue], &[f64])]) -> DagResult<Vec<f64>> {
    let mut out = try_with_capacity(boundary.len() as u64)?;
    // Both sides increase (sources in partition order hold disjoint increasing ranges):
    // one merge walk.
    let mut s = 0;
    let mut j = 0;
    for &g in boundary {
        loop {
            let Some((ids, values)) = sources.get(s) else {
                return Err(DagError::Missing { value: g });
            };
            if ids.len() != values.len() {
                return Err(DagError::Size(format!("exports of {} values with {} values", ids.len(), values.len())));
            }
            while j < ids.len() && ids[j] < g {
                j += 1;
            }
            if j < ids.len() {
                if ids[j] != g {
                    return Err(DagError::Missing { value: g });
                }
                out.push(values[j]);
                break;
            }
            s += 1;
            j = 0;
        }
    }
    Ok(out)
}

/// Evaluates prepared partitions (every partition of one cut, in order) in this process:
/// each one's boundary values are gathered from the exports of those before it. Returns
/// the DAG's outputs (the held outputs of each partition, in partition order).
pub fn evaluate_partitioned(partitions: &[Partition], inputs: &[f64]) -> DagResult<Vec<f64>> {
    let mut exports: Vec<Vec<f64>> = Vec::with_capacity(partitions.len());
    let mut outputs = Vec::new();
    let mut state = EvalState::new();
    for (k, p) in partitions.iter().enumerate() {
        if p.index != k || p.cuts.len() != partitions.len() + 1 {
            return Err(DagError::Size(format!("partition {} given at place {k} of {}", p.index, partitions.len())));
        }
        let sources: Vec<(&[GlobalValue], &[f64])> =
            p.sources().into_iter().map(|s| (partitions[s].exports(), exports[s].as_slice())).collect();
        let boundary = gather(&p.boundary, &sources)?;
        let (out, held) = p.evaluate_with(&mut state, inputs, &boundary)?;
        exports.push(out);
        outputs.extend(held);
    }
    Ok(outputs)
}

/// The DAG's held outputs of every partition, in order: the global values
/// [`evaluate_partitioned`] returns the values of.
pub fn output_values(partitions: &[Partition]) -> Vec<GlobalValue> {
    partitions.iter().flat_map(|p| p.held.iter().copied()).collect()
}

/// The spec of the whole DAG (one block), for a reference evaluation.
pub fn whole_spec(dag: &CounterDag) -> DagResult<GraphSpec> {
    Ok(Block::generate(dag, 0..dag.node_count())?.spec)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::{Shape, same_values};

    /// The whole DAG through the engine and through the spec's reference evaluator.
    fn whole(dag: &CounterDag, inputs: &[f64]) -> Vec<f64> {
        let one = vec![Partition::prepare(dag, 1, 0).unwrap()];
        let engine = evaluate_partitioned(&one, inputs).unwrap();
        let reference = whole_spec(dag).unwrap().eval_reference(inputs);
        assert!(same_values(&engine, &reference), "the engine against the reference evaluator");
        engine
    }

    fn shapes() -> impl Strategy<Value = Shape> {
        prop::sample::select(Shape::ALL.to_vec())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        #[test]
        fn partitioned_evaluation_equals_the_whole_graph_bit_for_bit(
            shape in shapes(), n in 1u64..6000, parts in 1usize..9, seed in any::<u64>(),
        ) {
            let dag = CounterDag::new(shape, n, seed).unwrap();
            let units = dag.layer_width().map_or(dag.node_count(), |w| dag.node_count() / w);
            let parts = parts.min(units as usize);
            let inputs = dag.inputs(seed ^ 1);
            let want = whole(&dag, &inputs);
            let partitions: Vec<Partition> = (0..parts).map(|k| Partition::prepare(&dag, parts, k).unwrap()).collect();
            let got = evaluate_partitioned(&partitions, &inputs).unwrap();
            prop_assert!(same_values(&got, &want), "{:?} n={} P={}", shape, n, parts);
            // The held outputs, in partition order, are the whole graph's outputs.
            let one = Partition::prepare(&dag, 1, 0).unwrap();
            prop_assert_eq!(output_values(&partitions), one.held().to_vec());
            // Every boundary value is some earlier partition's export, and every export is read.
            for p in &partitions {
                for &g in p.boundary() {
                    let owner = p.sources().into_iter().find(|&s| partitions[s].exports().contains(&g));
                    prop_assert!(owner.is_some(), "{} is exported", g);
                }
                for &g in p.exports() {
                    prop_assert!(partitions[p.index() + 1..].iter().any(|q| q.boundary().contains(&g)));
                }
            }
        }
    }

    #[test]
    fn blocks_of_a_large_dag_are_drawn_alone() {
        // Block 999 of a 10^12-node window DAG, without the nodes before it.
        let dag = CounterDag::new(Shape::Window, 1_000_000_000_000, 1).unwrap();
        let lo = 999_000_000_000;
        let block = Block::generate(&dag, lo..lo + 5000).unwrap();
        assert_eq!(block.spec.ops.len(), 5000);
        let first = 2 * (8 + lo);
        assert!(!block.boundary.is_empty() && block.boundary.iter().all(|&g| g < first && g + 2 * 1200 >= first));
        assert!(!block.exports.is_empty());
        // Sinks are few: the lag makes almost every value read.
        assert!(block.held.len() < 5000 / 5, "{}", block.held.len());
    }

    #[test]
    fn bad_sizes_are_errors_before_allocating() {
        let dag = CounterDag::new(Shape::Uniform, 1 << 40, 1).unwrap();
        assert!(matches!(Block::generate(&dag, 0..1 << 30), Err(DagError::Size(_))));
        assert!(matches!(Block::generate(&dag, 5..5), Err(DagError::Size(_))));
        assert!(matches!(cuts(&dag, 0), Err(DagError::Size(_))));
        let small = CounterDag::new(Shape::Chain, 10, 1).unwrap();
        assert!(cuts(&small, 11).is_err());
        assert!(Partition::prepare(&small, 2, 2).is_err());
        let p = Partition::prepare(&small, 2, 1).unwrap();
        assert!(matches!(p.evaluate(&[1.0], &[]), Err(DagError::Size(_))));
        assert!(matches!(gather(&[4], &[]), Err(DagError::Missing { value: 4 })));
    }

    #[test]
    fn a_deep_chain_cut_in_four_passes_on_a_small_stack() {
        // Iterative throughout: 3·10^5 deep on a 256 KiB stack, or `WORKLOADS_DEEP_CHAIN`
        // deep (CI runs 10^7 in release: `WORKLOADS_DEEP_CHAIN=10000000 cargo test
        // --release -p workloads deep_chain`).
        let depth = std::env::var("WORKLOADS_DEEP_CHAIN").ok().and_then(|v| v.parse().ok()).unwrap_or(300_000);
        let run = move || {
            let dag = CounterDag::new(Shape::Chain, depth, 3).unwrap();
            let inputs = [0.999];
            let parts: Vec<Partition> = (0..4).map(|k| Partition::prepare(&dag, 4, k).unwrap()).collect();
            let got = evaluate_partitioned(&parts, &inputs).unwrap();
            let want = whole_spec(&dag).unwrap().eval_reference(&inputs);
            same_values(&got, &want)
        };
        let ok = std::thread::Builder::new().stack_size(256 << 10).spawn(run).unwrap().join().unwrap();
        assert!(ok);
    }
}
