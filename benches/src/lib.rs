//! Shared workloads and baselines for the pipeline benchmarks (`benches/pipeline.rs`) and
//! the one-shot measurement binary (`src/bin/pipeline_report.rs`).
//!
//! - [`Shape`] and [`Workload`]: the scalar DAG shapes of `docs/SPEC.md` §8.1,
//!   parameterised by node count (from the `workloads` crate, which `cgx` shares).
//! - Our pipeline, phase by phase: [`build`], [`materialize`] (resolve + materialize_merge),
//!   `computegraph::compile`, and [`bind_inputs`] for evaluation.
//! - The baselines, run over the same nodes as our compiled program ([`baseline_spec`]:
//!   the spec hash-consed and pruned to what the outputs need):
//!   - [`FlatProgram`]: a hand-written struct-of-arrays loop with `match` dispatch (the floor);
//!   - [`BoxedProgram`]: a `Vec<Box<dyn Fn(&mut Vec<f64>)>>` interpreter;
//!   - [`hashcons`]: hashbrown + Fx hash-consing of `(op, a, b) -> u32` (the interning floor).
//!   - [`RandomReads`]: one random read per operand from a slot file of our program's size,
//!     prefetched (the memory floor of evaluation).
//! - [`heavy`]: a layered graph of ~10 µs matrix products, for parallel evaluation.
//! - [`einsum`]: the MPS inner product (`docs/SPEC.md` §8.2) and the bundled Einsum
//!   Benchmark instances (§8.3), for `benches/einsum.rs` (from the `workloads` crate, which
//!   `cgx bench mps` shares).
//!
//! Throughput everywhere is per node of the *original* spec (`spec.ops.len()`), so ours and
//! the baselines are compared per the same unit even though both run fewer nodes after CSE.

// `deny`, not `forbid`: the one exception is `prefetch` below (the prefetch intrinsic has
// no safe form), which allows it locally.
#![deny(unsafe_code)]

use computegraph::{CompiledProgram, GraphOperation, KeyInterner, MaterializedGraph, materialize_merge, resolve};
use rustc_hash::FxBuildHasher;
use scalar::spec::{BuiltSpec, GraphSpec};
use scalar::workloads;
use scalar::{ScalarKey, ScalarOp};

pub use ::workloads::{INPUT_SEED, SPEC_SEED, Shape, Workload, einsum, memory_status, parse_count, same_values};

pub mod ad;
pub mod eager;
pub mod heavy;
pub mod layers;
pub mod spec_user;

// ---------------------------------------------------------------------------------------
// Ours
// ---------------------------------------------------------------------------------------

/// Builds `spec` as one graph on a fresh interner (the `build` phase, interning included).
pub fn build(spec: &GraphSpec) -> BuiltSpec {
    spec.build_single(&KeyInterner::new()).expect("generated specs are valid")
}

/// Resolves the built graphs and materializes what the outputs need.
pub fn materialize(built: &BuiltSpec) -> MaterializedGraph<ScalarOp> {
    let view = resolve(built.graphs.clone());
    materialize_merge(&view, &built.outputs)
}

/// The program's inputs, in its own order, taken from the spec's input values.
pub fn bind_inputs<'a>(program: &CompiledProgram<ScalarOp>, inputs: &'a [f64]) -> Vec<&'a f64> {
    program
        .bind_inputs(|k| match k {
            ScalarKey::Var(i) => inputs.get(*i as usize),
            ScalarKey::Tangent(_) => None,
        })
        .expect("every program input is a spec input")
}

// ---------------------------------------------------------------------------------------
// Baselines
// ---------------------------------------------------------------------------------------

/// The result of [`hashcons`]: each spec value's canonical value, and the number of
/// distinct values (inputs included).
pub struct HashConsed {
    /// Spec value → canonical (first structurally equal) value, numbered densely.
    pub canonical: Vec<u32>,
    /// Number of distinct values.
    pub distinct: u32,
}

/// The interning floor: hash-consing of `(op, a, b) -> u32` with hashbrown and Fx, one
/// probe per node, operands canonicalised through the dense `canonical` column. Keys are
/// three `u32`s (opcode and operands; a constant's bits in place of its operands), so an
/// entry is 16 bytes. The table starts empty and grows, like a fresh interner.
pub fn hashcons(spec: &GraphSpec) -> HashConsed {
    let mut memo: hashbrown::HashMap<[u32; 3], u32, FxBuildHasher> = hashbrown::HashMap::with_hasher(FxBuildHasher);
    let mut canonical: Vec<u32> = Vec::with_capacity(spec.value_count());
    canonical.extend(0..spec.inputs);
    let mut next = spec.inputs;
    let mut a = 0;
    for &op in &spec.ops {
        let arg = |k: usize| canonical[spec.args[a + k] as usize];
        let key = match op {
            ScalarOp::Add => [0, arg(0), arg(1)],
            ScalarOp::Mul => [1, arg(0), arg(1)],
            ScalarOp::Neg => [2, arg(0), u32::MAX],
            ScalarOp::Exp => [3, arg(0), u32::MAX],
            ScalarOp::Sin => [4, arg(0), u32::MAX],
            ScalarOp::Cos => [5, arg(0), u32::MAX],
            ScalarOp::SinCos => [6, arg(0), u32::MAX],
            ScalarOp::Const(bits) => [7, bits as u32, (bits >> 32) as u32],
        };
        a += op.input_count();
        let outs = op.output_count() as u32;
        let first = *memo.entry(key).or_insert_with(|| {
            next += outs;
            next - outs
        });
        canonical.extend(first..first + outs);
    }
    HashConsed { canonical, distinct: next }
}

/// `spec` without the nodes its outputs do not need (the spec's own value numbering is
/// compacted; inputs are all kept).
pub fn prune(spec: &GraphSpec) -> GraphSpec {
    // Per node: index of its first value and of its first argument.
    let mut first_value = Vec::with_capacity(spec.ops.len());
    let mut first_arg = Vec::with_capacity(spec.ops.len());
    let (mut v, mut a) = (spec.inputs as usize, 0);
    for op in &spec.ops {
        first_value.push(v);
        first_arg.push(a);
        v += op.output_count();
        a += op.input_count();
    }
    let mut live = vec![false; spec.value_count()];
    for &o in &spec.outputs {
        live[o as usize] = true;
    }
    let mut keep = vec![false; spec.ops.len()];
    for (i, op) in spec.ops.iter().enumerate().rev() {
        let fv = first_value[i];
        if live[fv..fv + op.output_count()].iter().any(|&l| l) {
            keep[i] = true;
            for &x in &spec.args[first_arg[i]..first_arg[i] + op.input_count()] {
                live[x as usize] = true;
            }
        }
    }
    let kept = keep.iter().filter(|&&k| k).count();
    let mut out = GraphSpec { inputs: spec.inputs, ..Default::default() };
    out.ops.reserve(kept);
    out.args.reserve(2 * kept);
    let mut remap: Vec<u32> = vec![u32::MAX; spec.value_count()];
    for (i, slot) in remap.iter_mut().enumerate().take(spec.inputs as usize) {
        *slot = i as u32;
    }
    let mut args = [0u32; 2];
    for (i, op) in spec.ops.iter().enumerate() {
        if !keep[i] {
            continue;
        }
        let n = op.input_count();
        for (a, &x) in args.iter_mut().zip(&spec.args[first_arg[i]..first_arg[i] + n]) {
            *a = remap[x as usize];
        }
        let first = out.push(*op, &args[..n]);
        for s in 0..op.output_count() {
            remap[first_value[i] + s] = first + s as u32;
        }
    }
    out.outputs = spec.outputs.iter().map(|&o| remap[o as usize]).collect();
    out
}

/// The nodes the evaluation baselines run: the spec hash-consed and pruned, i.e. the same
/// operations as our materialized graph.
pub fn baseline_spec(spec: &GraphSpec) -> GraphSpec {
    prune(&spec.dedup())
}

#[repr(u8)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Code {
    Add,
    Mul,
    Neg,
    Exp,
    Sin,
    Cos,
    SinCos,
    Const,
}

/// The floor: one byte of opcode and two `u32` operands per node in flat columns, one
/// `Vec<f64>` of values, `match` dispatch.
pub struct FlatProgram {
    inputs: u32,
    code: Vec<Code>,
    /// Operand value indices (unused ones are 0); for constants, `[index into consts, 0]`.
    args: Vec<[u32; 2]>,
    consts: Vec<f64>,
    outputs: Vec<u32>,
    values: usize,
}

impl FlatProgram {
    /// Lowers a spec (normally [`baseline_spec`]) to flat columns.
    pub fn new(spec: &GraphSpec) -> Self {
        let mut code = Vec::with_capacity(spec.ops.len());
        let mut args = Vec::with_capacity(spec.ops.len());
        let mut consts = Vec::new();
        let mut a = 0;
        for op in &spec.ops {
            let n = op.input_count();
            let mut xy = [0u32; 2];
            xy[..n].copy_from_slice(&spec.args[a..a + n]);
            a += n;
            code.push(match *op {
                ScalarOp::Add => Code::Add,
                ScalarOp::Mul => Code::Mul,
                ScalarOp::Neg => Code::Neg,
                ScalarOp::Exp => Code::Exp,
                ScalarOp::Sin => Code::Sin,
                ScalarOp::Cos => Code::Cos,
                ScalarOp::SinCos => Code::SinCos,
                ScalarOp::Const(bits) => {
                    xy[0] = consts.len() as u32;
                    consts.push(f64::from_bits(bits));
                    Code::Const
                }
            });
            args.push(xy);
        }
        FlatProgram {
            inputs: spec.inputs,
            code,
            args,
            consts,
            outputs: spec.outputs.clone(),
            values: spec.value_count(),
        }
    }

    /// Evaluates on `inputs` (one per spec input), using `values` as scratch.
    pub fn eval(&self, values: &mut Vec<f64>, inputs: &[f64]) -> Vec<f64> {
        assert_eq!(inputs.len(), self.inputs as usize);
        values.clear();
        values.reserve(self.values);
        values.extend_from_slice(inputs);
        for (&c, &[a, b]) in self.code.iter().zip(&self.args) {
            let (a, b) = (a as usize, b as usize);
            match c {
                Code::Add => {
                    let r = values[a] + values[b];
                    values.push(r)
                }
                Code::Mul => {
                    let r = values[a] * values[b];
                    values.push(r)
                }
                Code::Neg => {
                    let r = -values[a];
                    values.push(r)
                }
                Code::Exp => {
                    let r = values[a].exp();
                    values.push(r)
                }
                Code::Sin => {
                    let r = values[a].sin();
                    values.push(r)
                }
                Code::Cos => {
                    let r = values[a].cos();
                    values.push(r)
                }
                Code::SinCos => {
                    let (s, c) = values[a].sin_cos();
                    values.push(s);
                    values.push(c)
                }
                Code::Const => values.push(self.consts[a]),
            }
        }
        self.outputs.iter().map(|&o| values[o as usize]).collect()
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.code.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.code.is_empty()
    }

    /// Bytes held by the columns.
    pub fn heap_bytes(&self) -> usize {
        self.code.capacity() + self.args.capacity() * 8 + self.consts.capacity() * 8 + self.outputs.capacity() * 4
    }
}

/// One node of a [`BoxedProgram`]: reads its operands from the values and pushes its results.
pub type BoxedNode = Box<dyn Fn(&mut Vec<f64>)>;

/// The closure interpreter: one boxed closure per node.
pub struct BoxedProgram {
    inputs: u32,
    nodes: Vec<BoxedNode>,
    outputs: Vec<u32>,
    values: usize,
}

impl BoxedProgram {
    /// One closure per node of `spec` (normally [`baseline_spec`]).
    pub fn new(spec: &GraphSpec) -> Self {
        let mut nodes: Vec<BoxedNode> = Vec::with_capacity(spec.ops.len());
        let mut a = 0;
        for op in &spec.ops {
            let n = op.input_count();
            let args = &spec.args[a..a + n];
            a += n;
            let x = args.first().map_or(0, |&x| x as usize);
            let y = args.get(1).map_or(0, |&y| y as usize);
            nodes.push(match *op {
                ScalarOp::Add => Box::new(move |v: &mut Vec<f64>| {
                    let r = v[x] + v[y];
                    v.push(r)
                }),
                ScalarOp::Mul => Box::new(move |v: &mut Vec<f64>| {
                    let r = v[x] * v[y];
                    v.push(r)
                }),
                ScalarOp::Neg => Box::new(move |v: &mut Vec<f64>| {
                    let r = -v[x];
                    v.push(r)
                }),
                ScalarOp::Exp => Box::new(move |v: &mut Vec<f64>| {
                    let r = v[x].exp();
                    v.push(r)
                }),
                ScalarOp::Sin => Box::new(move |v: &mut Vec<f64>| {
                    let r = v[x].sin();
                    v.push(r)
                }),
                ScalarOp::Cos => Box::new(move |v: &mut Vec<f64>| {
                    let r = v[x].cos();
                    v.push(r)
                }),
                ScalarOp::SinCos => Box::new(move |v: &mut Vec<f64>| {
                    let (s, c) = v[x].sin_cos();
                    v.push(s);
                    v.push(c)
                }),
                ScalarOp::Const(bits) => {
                    let c = f64::from_bits(bits);
                    Box::new(move |v: &mut Vec<f64>| v.push(c))
                }
            });
        }
        BoxedProgram { inputs: spec.inputs, nodes, outputs: spec.outputs.clone(), values: spec.value_count() }
    }

    /// Evaluates on `inputs` (one per spec input), using `values` as scratch.
    pub fn eval(&self, values: &mut Vec<f64>, inputs: &[f64]) -> Vec<f64> {
        assert_eq!(inputs.len(), self.inputs as usize);
        values.clear();
        values.reserve(self.values);
        values.extend_from_slice(inputs);
        for node in &self.nodes {
            node(values);
        }
        self.outputs.iter().map(|&o| values[o as usize]).collect()
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

/// The memory floor of evaluating a program whose operands sit at random in its slot file:
/// one read per operand, at a random slot of a file as large as the program's, with
/// nothing else done. The slot indices are drawn in advance and streamed, and each read is
/// prefetched [`RandomReads::AHEAD`] reads ahead, as the engine's sequential evaluator
/// prefetches far operands; the values are summed so that no read is optimised away.
///
/// It tells how much of an evaluation's time per node is the memory system's: on a
/// `uniform` DAG of 10^7 nodes the operands are spread over 15 MiB of slots, and this
/// loop's time per read is what any evaluator of that program pays at least.
pub struct RandomReads {
    file: Vec<f64>,
    slots: Vec<u32>,
}

impl RandomReads {
    /// How many reads ahead a read is prefetched: the engine's [`computegraph`] sequential
    /// evaluator prefetches the operands of the instruction 64 ahead.
    pub const AHEAD: usize = 64;

    /// `reads` random slots of a file of `slot_count` values (at least one).
    pub fn new(slot_count: usize, reads: usize, seed: u64) -> Self {
        let slot_count = slot_count.max(1);
        let mut rng = workloads::Rng::new(seed);
        let file = (0..slot_count).map(|i| i as f64).collect();
        let slots = (0..reads).map(|_| rng.below(slot_count as u64) as u32).collect();
        RandomReads { file, slots }
    }

    /// Number of reads.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether there is no read.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Reads every slot in order, prefetching ahead; returns the sum of the values read.
    pub fn run(&self) -> f64 {
        let mut sum = 0.0;
        for (k, &s) in self.slots.iter().enumerate() {
            if let Some(&ahead) = self.slots.get(k + Self::AHEAD) {
                prefetch(&self.file[ahead as usize]);
            }
            sum += self.file[s as usize];
        }
        sum
    }
}

/// A hint to bring the cache line of `x` into every cache level (none off x86_64): the
/// hint `computegraph` issues, whose own helper is private to the engine.
#[inline(always)]
#[allow(unsafe_code)]
fn prefetch<T>(x: &T) {
    // SAFETY: `sse` is part of every x86_64 target, and a prefetch is a hint that reads
    // nothing (the pointer comes from a reference anyway).
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>((x as *const T).cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

#[cfg(test)]
mod tests {
    use super::*;
    use computegraph::{EvalState, compile};

    const N: usize = 3000;

    #[test]
    fn random_reads_sum_the_slots_read() {
        let reads = RandomReads::new(1000, 5000, 3);
        assert_eq!(reads.len(), 5000);
        assert!(reads.slots.iter().all(|&s| s < 1000));
        // Values are their slot indices, so the sum is the sum of the indices drawn.
        let expected: f64 = reads.slots.iter().map(|&s| s as f64).sum();
        assert_eq!(reads.run(), expected);
        assert!(expected > 0.0);
        assert_eq!(RandomReads::new(0, 3, 1).run(), 0.0, "an empty file reads its one slot");
    }

    fn check(shape: Shape, n: usize) {
        let w = Workload::new(shape, n);
        let name = shape.name();
        let reference = w.spec.eval_reference(&w.inputs);

        let base = baseline_spec(&w.spec);
        assert!(same_values(&base.eval_reference(&w.inputs), &reference), "{name}: baseline spec");

        let flat = FlatProgram::new(&base);
        let mut scratch = Vec::new();
        assert!(same_values(&flat.eval(&mut scratch, &w.inputs), &reference), "{name}: flat");
        assert!(same_values(&flat.eval(&mut scratch, &w.inputs), &reference), "{name}: flat, reused scratch");

        let boxed = BoxedProgram::new(&base);
        assert!(same_values(&boxed.eval(&mut scratch, &w.inputs), &reference), "{name}: boxed");

        let hc = hashcons(&w.spec);
        assert_eq!(hc.distinct as usize, w.spec.dedup().value_count(), "{name}: hashcons vs dedup");
        assert_eq!(hc.canonical.len(), w.spec.value_count());

        let built = build(&w.spec);
        let flat_graph = materialize(&built);
        assert_eq!(flat_graph.operation_count(), base.ops.len(), "{name}: ours and baselines run the same nodes");
        let program = compile(&flat_graph);
        let inputs = bind_inputs(&program, &w.inputs);
        let mut state = EvalState::new();
        for _ in 0..2 {
            let ours = program.eval_with(&mut state, &mut (), &inputs).expect("evaluates");
            assert!(same_values(&ours, &reference), "{name}: ours");
        }
    }

    #[test]
    fn window_matches_reference() {
        check(Shape::Window, N);
    }

    #[test]
    fn uniform_matches_reference() {
        check(Shape::Uniform, N);
    }

    #[test]
    fn chain_matches_reference() {
        check(Shape::Chain, N);
    }

    #[test]
    fn layered_matches_reference() {
        check(Shape::LayeredWide, N);
        check(Shape::LayeredDeep, N);
    }

    #[test]
    fn constants_and_sincos() {
        let mut spec = GraphSpec { inputs: 1, ..Default::default() };
        let c = spec.push(ScalarOp::constant(0.25), &[]);
        let s = spec.push(ScalarOp::SinCos, &[0]);
        let e = spec.push(ScalarOp::Exp, &[s + 1]);
        let m = spec.push(ScalarOp::Mul, &[c, e]);
        let _dead = spec.push(ScalarOp::Neg, &[s]);
        let c2 = spec.push(ScalarOp::constant(0.25), &[]);
        let y = spec.push(ScalarOp::Add, &[m, c2]);
        spec.outputs = vec![y, s];
        let inputs = [0.3];
        let reference = spec.eval_reference(&inputs);
        let base = baseline_spec(&spec);
        assert_eq!(base.ops.len(), 5, "the repeated constant merges and the dead neg goes");
        let mut scratch = Vec::new();
        assert!(same_values(&FlatProgram::new(&base).eval(&mut scratch, &inputs), &reference));
        assert!(same_values(&BoxedProgram::new(&base).eval(&mut scratch, &inputs), &reference));
        assert_eq!(hashcons(&spec).distinct, spec.dedup().value_count() as u32);
    }
}
