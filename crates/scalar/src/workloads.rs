//! The scalar DAG shapes of `docs/SPEC.md` §8.1, as [`GraphSpec`]s.
//!
//! All generators are deterministic in their seed. About `repeat` of the nodes repeat an
//! earlier node's `(op, args)` exactly, so CSE has work. Operation mix: mostly add and
//! mul, some neg, a few sin/cos/sincos (see [`pick_op`]).

use computegraph::GraphOperation;

use crate::ScalarOp;
use crate::spec::GraphSpec;

/// The workloads' generator: the workspace's one seeded generator
/// ([`tidu::testing::CheckRng`], `rand_xoshiro`'s SplitMix64).
///
/// ```
/// use scalar::workloads::Rng;
///
/// let (mut a, mut b) = (Rng::new(7), Rng::new(7));
/// assert_eq!(a.next_u64(), b.next_u64()); // deterministic in the seed
/// assert!(a.below(10) < 10);
/// assert!((0.0..1.0).contains(&a.unit()));
/// ```
pub type Rng = tidu::testing::CheckRng;

/// Picks an operation: add 45%, mul 40%, neg 10%, sin 2%, cos 2%, sincos 1%.
///
/// ```
/// use scalar::{workloads::{pick_op, Rng}, ScalarOp};
///
/// let mut rng = Rng::new(1);
/// let adds = (0..10_000).filter(|_| pick_op(&mut rng) == ScalarOp::Add).count();
/// assert!((4_000..5_000).contains(&adds));
/// ```
pub fn pick_op(rng: &mut Rng) -> ScalarOp {
    op_at_percent(rng.below(100))
}

/// The operation of [`pick_op`]'s mix at percentile `p` (0 to 99, as a uniform draw below
/// 100 gives it): the one table of the mix, which generators of other random streams
/// (`workloads`' counter-based one) share.
///
/// ```
/// use scalar::{workloads::op_at_percent, ScalarOp};
///
/// assert_eq!(op_at_percent(0), ScalarOp::Add);
/// assert_eq!(op_at_percent(99), ScalarOp::SinCos);
/// ```
pub fn op_at_percent(p: u64) -> ScalarOp {
    match p {
        0..45 => ScalarOp::Add,
        45..85 => ScalarOp::Mul,
        85..95 => ScalarOp::Neg,
        95..97 => ScalarOp::Sin,
        97..99 => ScalarOp::Cos,
        _ => ScalarOp::SinCos,
    }
}

/// Where a random DAG draws its operands from (see [`random_dag`]).
///
/// ```
/// use scalar::workloads::{random_dag, Operands};
///
/// // With a window of 16, every operand is one of the 16 values before its node.
/// let spec = random_dag(1000, Operands::Window(16), 0.0, 3);
/// let mut arg = 0;
/// let mut first_output = spec.inputs as usize;
/// for op in &spec.ops {
///     use computegraph::GraphOperation;
///     for &a in &spec.args[arg..arg + op.input_count()] {
///         assert!(a as usize + 16 >= first_output);
///     }
///     arg += op.input_count();
///     first_output += op.output_count();
/// }
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Operands {
    /// Uniformly from the `window` most recent values.
    Window(u32),
    /// Uniformly from all earlier values.
    Uniform,
}

/// Values never read by a node: the natural outputs of a generated DAG.
fn sinks(spec: &GraphSpec) -> Vec<u32> {
    let mut used = vec![false; spec.value_count()];
    for &a in &spec.args {
        used[a as usize] = true;
    }
    (spec.inputs..spec.value_count() as u32).filter(|&v| !used[v as usize]).collect()
}

/// A random DAG of `n` nodes over 8 inputs; outputs are its sinks.
///
/// A node's first operand is, when possible, the oldest value (within reach) that no node
/// has read yet, so almost every value is used and the sinks (outputs) are few; the
/// other operand is drawn as `operands` says.
///
/// ```
/// use scalar::workloads::{inputs_for, random_dag, Operands};
///
/// let spec = random_dag(10_000, Operands::Window(1024), 0.3, 1);
/// assert_eq!((spec.inputs, spec.ops.len()), (8, 10_000));
/// // About 30% of the nodes repeat an earlier (operation, operands): CSE removes them.
/// let unique = spec.dedup().ops.len();
/// assert!((6_500..8_000).contains(&unique), "{unique}");
/// assert_eq!(spec.eval_reference(&inputs_for(&spec, 2)).len(), spec.outputs.len());
/// ```
pub fn random_dag(n: usize, operands: Operands, repeat: f64, seed: u64) -> GraphSpec {
    random_dag_of(n, operands, repeat, seed, pick_op)
}

/// Picks an arithmetic operation: add 50%, mul 40%, neg 10%.
///
/// ```
/// use scalar::{workloads::{pick_arithmetic, Rng}, ScalarOp};
///
/// let mut rng = Rng::new(1);
/// assert!((0..1000).all(|_| matches!(pick_arithmetic(&mut rng), ScalarOp::Add | ScalarOp::Mul | ScalarOp::Neg)));
/// ```
pub fn pick_arithmetic(rng: &mut Rng) -> ScalarOp {
    match rng.below(10) {
        0..5 => ScalarOp::Add,
        5..9 => ScalarOp::Mul,
        _ => ScalarOp::Neg,
    }
}

/// [`random_dag`] with operations drawn by `pick` (say [`pick_arithmetic`], for the
/// add/mul/neg DAG on which evaluation is all engine overhead).
///
/// ```
/// use scalar::workloads::{pick_arithmetic, random_dag_of, Operands};
/// use scalar::ScalarOp;
///
/// let spec = random_dag_of(1000, Operands::Window(1024), 0.3, 1, pick_arithmetic);
/// assert!(spec.ops.iter().all(|op| matches!(op, ScalarOp::Add | ScalarOp::Mul | ScalarOp::Neg)));
/// ```
pub fn random_dag_of(
    n: usize,
    operands: Operands,
    repeat: f64,
    seed: u64,
    pick: fn(&mut Rng) -> ScalarOp,
) -> GraphSpec {
    let mut rng = Rng::new(seed);
    let mut spec = GraphSpec { inputs: 8, ..Default::default() };
    spec.ops.reserve(n);
    spec.args.reserve(2 * n);
    let mut node_arg_start: Vec<u32> = Vec::with_capacity(n);
    let mut used: Vec<bool> = vec![false; 8];
    let mut unused = std::collections::VecDeque::new();
    unused.extend(0..8u32);
    for i in 0..n {
        let start = spec.args.len() as u32;
        let avail = spec.value_count() as u64;
        if i > 0 && rng.unit() < repeat {
            // Repeat a recent node exactly, so CSE has work.
            let back = rng.below(i.min(64) as u64) as usize + 1;
            let j = i - back;
            let op = spec.ops[j];
            let s = node_arg_start[j] as usize;
            let args: Vec<u32> = spec.args[s..s + op.input_count()].to_vec();
            spec.push(op, &args);
        } else {
            let op = pick(&mut rng);
            let reach = match operands {
                Operands::Window(w) => avail.min(w as u64),
                Operands::Uniform => avail,
            };
            let mut args = [0u32; 2];
            for (k, a) in args.iter_mut().take(op.input_count()).enumerate() {
                *a = (avail - 1 - rng.below(reach)) as u32;
                if k == 0 {
                    while let Some(&front) = unused.front() {
                        if used[front as usize] || (front as u64) < avail - reach {
                            unused.pop_front();
                        } else {
                            *a = front;
                            break;
                        }
                    }
                }
            }
            spec.push(op, &args[..op.input_count()]);
        }
        let s = start as usize;
        for &a in &spec.args[s..] {
            used[a as usize] = true;
        }
        let new_values = spec.value_count() - used.len();
        for v in used.len()..used.len() + new_values {
            unused.push_back(v as u32);
        }
        used.resize(spec.value_count(), false);
        node_arg_start.push(start);
    }
    spec.outputs = sinks(&spec);
    spec
}

/// A chain of `n` nodes: each reads the previous value (and sometimes input 0).
///
/// ```
/// let spec = scalar::workloads::chain(100, 5);
/// assert_eq!((spec.ops.len(), spec.outputs.len()), (100, 1));
/// ```
pub fn chain(n: usize, seed: u64) -> GraphSpec {
    let mut rng = Rng::new(seed);
    let mut spec = GraphSpec { inputs: 1, ..Default::default() };
    spec.ops.reserve(n);
    spec.args.reserve(2 * n);
    let mut prev = 0;
    for _ in 0..n {
        prev = match rng.below(3) {
            0 => spec.push(ScalarOp::Add, &[prev, 0]),
            1 => spec.push(ScalarOp::Mul, &[prev, 0]),
            _ => spec.push(ScalarOp::Neg, &[prev]),
        };
    }
    spec.outputs = vec![prev];
    spec
}

/// `depth` layers of `width` nodes; each node reads two random values of the layer
/// before. Layer 0 is `width` inputs; the last layer is the output.
///
/// ```
/// let spec = scalar::workloads::layered(32, 10, 1);
/// assert_eq!((spec.inputs, spec.ops.len(), spec.outputs.len()), (32, 320, 32));
/// ```
pub fn layered(width: usize, depth: usize, seed: u64) -> GraphSpec {
    let mut rng = Rng::new(seed);
    let mut spec = GraphSpec { inputs: width as u32, ..Default::default() };
    spec.ops.reserve(width * depth);
    spec.args.reserve(2 * width * depth);
    let mut layer: Vec<u32> = (0..width as u32).collect();
    let mut next = Vec::with_capacity(width);
    for _ in 0..depth {
        next.clear();
        for _ in 0..width {
            let op = match rng.below(10) {
                0..5 => ScalarOp::Add,
                5..9 => ScalarOp::Mul,
                _ => ScalarOp::Neg,
            };
            let a = layer[rng.below(width as u64) as usize];
            let b = layer[rng.below(width as u64) as usize];
            next.push(spec.push(op, &[a, b][..op.input_count()]));
        }
        std::mem::swap(&mut layer, &mut next);
    }
    spec.outputs = layer;
    spec
}

/// Input values in `[0.5, 1.5)` for a spec, deterministic in the seed.
///
/// ```
/// use scalar::workloads::{chain, inputs_for};
///
/// let spec = chain(10, 1);
/// let x = inputs_for(&spec, 9);
/// assert_eq!(x.len(), spec.inputs as usize);
/// assert!(x.iter().all(|v| (0.5..1.5).contains(v)));
/// assert_eq!(x, inputs_for(&spec, 9));
/// ```
pub fn inputs_for(spec: &GraphSpec, seed: u64) -> Vec<f64> {
    let mut rng = Rng::new(seed);
    (0..spec.inputs).map(|_| 0.5 + rng.unit()).collect()
}
