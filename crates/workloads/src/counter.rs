//! A counter-based generator of the benchmark DAG shapes: every node's operation and
//! operands are drawn from a hash of `(seed, node index)`, so any node, and so any block
//! of nodes, is generated alone, with nothing of the nodes before it.
//!
//! This is what a worker of a partitioned run needs (`docs/SCALING.md`): it generates its
//! own node block without the sequential stream of [`scalar::workloads`], whose
//! generators (and the benchmark figures made with them) are unchanged. It lives here,
//! beside [`Shape`], because it is the SPEC's shapes with their fixed statistics (window
//! 1024, 30% repeats, the layered dimensions), not a general-purpose spec builder: the
//! building blocks stay in `scalar`, the shapes in this crate.
//!
//! The draws are SplitMix64's: draw `c` of seed `s` is SplitMix64's finalizer applied to
//! `s + c·0x9E3779B97F4A7C15`, and node `i` owns the draws `4i..4i + 4` (repeat flag,
//! repeat distance or first operand, operation, second operand).
//!
//! Values are named by a [`GlobalValue`]: `2·position + slot`, where positions are the
//! inputs `0..I` and then one per node (`I + i`), and `slot` is 1 only for the second
//! output of a `sincos` node. A node's value is known from its index alone, whatever the
//! nodes before it produce.
//!
//! What each shape draws (the statistics of `scalar::workloads`' generators):
//! - `window` and `uniform`, 8 inputs: node `i > 0` is flagged as a repeat with
//!   probability 0.3; a flagged node copies the operation and operands of the first
//!   unflagged node at or below a node drawn among the 64 before it (flagged nodes are
//!   never copied, so every copy is one step from its source and reads within `64 + 1024`
//!   positions), or is drawn afresh when there is none. A fresh node draws its operation
//!   with `scalar::workloads::pick_op`'s mix; its first operand is the value [`LAG`]
//!   positions back (so that almost every value is read and the sinks, the outputs, are
//!   few), its second is drawn from the 1024 positions before it (`window`) or from all
//!   (`uniform`), output 0 or 1 of a `sincos` with equal odds. Outputs: the sinks.
//! - `chain`, one input: node `i` is add, mul (reading the previous value and input 0) or
//!   neg (the previous value), a third each. Output: the last node.
//! - `layered_wide`, `layered_deep` (dimensions of [`Shape::layered_dims`]): layer 0 is the
//!   `w` inputs; node `(l, p)` reads two values drawn from layer `l` and is add (50%), mul
//!   (40%) or neg (10%). Outputs: the last layer.
//!
//! Complexity: [`CounterDag::node`] is `O(1)` expected (a repeat looks at 1.4 flags on
//! average, at most 64).

use std::fmt;

use computegraph::GraphOperation;
use scalar::ScalarOp;

use crate::Shape;

/// A value of a counter-based DAG: `2·position + slot` (module docs).
pub type GlobalValue = u64;

/// Operands of `window` DAGs come from this many positions back.
pub const WINDOW: u64 = 1024;
/// The share of `window` and `uniform` nodes flagged as repeats.
pub const REPEAT: f64 = 0.3;
/// A repeat copies a node among this many before it.
pub const REPEAT_REACH: u64 = 64;
/// A fresh `window` or `uniform` node reads, as its first operand, the value this many
/// positions back.
pub const LAG: u64 = 512;
/// The most nodes a counter-based DAG may have (positions and global values fit `u64`
/// with room; far beyond any machine).
pub const MAX_NODES: u64 = 1 << 48;

/// Inputs of the random shapes, as in `scalar::workloads::random_dag`.
const RANDOM_INPUTS: u64 = 8;
/// SplitMix64's increment.
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

/// What went wrong in generating or partitioning a counter-based DAG.
#[derive(Debug, Clone, PartialEq)]
pub enum DagError {
    /// A size out of range: the message says which and why.
    Size(String),
    /// An allocation of this many bytes failed.
    Memory {
        /// Bytes asked for.
        bytes: u64,
    },
    /// The engine refused a partition's graph.
    Graph(String),
    /// A value the partition reads from earlier partitions was not among their exports.
    Missing {
        /// The value.
        value: GlobalValue,
    },
    /// The stop flag of `computegraph::stop::with_stop` was raised while a partition was
    /// generated or prepared.
    Interrupted,
}

impl fmt::Display for DagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DagError::Size(m) => f.write_str(m),
            DagError::Memory { bytes } => write!(f, "an allocation of {bytes} bytes failed"),
            DagError::Graph(m) => write!(f, "the engine refused a partition: {m}"),
            DagError::Missing { value } => {
                write!(f, "value {value} is read by a partition but no earlier partition exported it")
            }
            DagError::Interrupted => {
                f.write_str("interrupted: the stop flag was raised while a partition was prepared")
            }
        }
    }
}

impl std::error::Error for DagError {}

impl From<computegraph::GraphError> for DagError {
    fn from(e: computegraph::GraphError) -> Self {
        match e {
            computegraph::GraphError::Interrupted => DagError::Interrupted,
            e => DagError::Graph(e.to_string()),
        }
    }
}

/// A result of this module and of [`crate::partition`].
pub type DagResult<T> = Result<T, DagError>;

/// One node: its operation and its operands (`args[..op.input_count()]`).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Node {
    /// The operation.
    pub op: ScalarOp,
    /// The operands (unused entries are 0).
    pub args: [GlobalValue; 2],
}

impl Node {
    /// The operands.
    pub fn operands(&self) -> &[GlobalValue] {
        &self.args[..self.op.input_count()]
    }
}

/// A counter-based DAG of one of the benchmark shapes: its description only (a few
/// words); nodes are drawn on demand.
///
/// ```
/// use workloads::{Shape, counter::CounterDag};
///
/// let dag = CounterDag::new(Shape::Window, 1_000_000_000, 1).unwrap();
/// // Node 10^8 is drawn alone, and the same each time.
/// assert_eq!(dag.node(100_000_000), dag.node(100_000_000));
/// assert!(CounterDag::new(Shape::Chain, 0, 1).is_err());
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CounterDag {
    shape: Shape,
    nodes: u64,
    seed: u64,
    inputs: u64,
    /// The layer width (layered shapes), else 0.
    width: u64,
}

/// SplitMix64's finalizer.
#[inline]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A draw `h` mapped to `0..n` (`n > 0`) by its high bits (Lemire's multiply-shift).
#[inline]
fn below(h: u64, n: u64) -> u64 {
    ((u128::from(h) * u128::from(n)) >> 64) as u64
}

/// A draw mapped to `[0, 1)`.
#[inline]
fn unit(h: u64) -> f64 {
    (h >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// `scalar::workloads::pick_op`'s mix from a draw: add 45%, mul 40%, neg 10%, sin 2%,
/// cos 2%, sincos 1%.
#[inline]
fn pick_op(h: u64) -> ScalarOp {
    scalar::workloads::op_at_percent(below(h, 100))
}

impl CounterDag {
    /// The DAG of `shape` with about `nodes` nodes (exactly, except layered shapes, which
    /// round down as [`Shape::node_count`] does), drawn from `seed`. Checks the size only:
    /// nothing is allocated.
    pub fn new(shape: Shape, nodes: u64, seed: u64) -> DagResult<CounterDag> {
        if nodes == 0 || nodes > MAX_NODES {
            return Err(DagError::Size(format!("a counter-based DAG has 1 to 2^48 nodes, not {nodes}")));
        }
        let n = usize::try_from(nodes)
            .map_err(|_| DagError::Size(format!("{nodes} nodes do not fit this machine's addresses")))?;
        let (inputs, width, nodes) = match shape {
            Shape::Window | Shape::Uniform => (RANDOM_INPUTS, 0, nodes),
            Shape::Chain => (1, 0, nodes),
            Shape::LayeredWide | Shape::LayeredDeep => {
                let (w, d) = shape.layered_dims(n);
                (w as u64, w as u64, (w as u64) * (d as u64))
            }
        };
        Ok(CounterDag { shape, nodes, seed, inputs, width })
    }

    /// The shape.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// Number of nodes.
    pub fn node_count(&self) -> u64 {
        self.nodes
    }

    /// Number of inputs (positions `0..inputs`).
    pub fn input_count(&self) -> u64 {
        self.inputs
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The layer width of a layered shape, else `None`.
    pub fn layer_width(&self) -> Option<u64> {
        (self.width > 0).then_some(self.width)
    }

    /// Draw `stream` (0 to 3) of node `i`.
    #[inline]
    fn draw(&self, i: u64, stream: u64) -> u64 {
        mix(self.seed.wrapping_add((4 * i + stream).wrapping_mul(GOLDEN)))
    }

    /// Whether node `i` is flagged as a repeat (`window`, `uniform`).
    #[inline]
    fn flagged(&self, i: u64) -> bool {
        i > 0 && unit(self.draw(i, 0)) < REPEAT
    }

    /// The node whose operation and operands node `i` has: itself when fresh, else the
    /// unflagged node it copies (`window`, `uniform`). Iterative: at most 64 flags looked at.
    #[inline]
    fn source(&self, i: u64) -> u64 {
        if !self.flagged(i) {
            return i;
        }
        let reach = i.min(REPEAT_REACH);
        let lowest = i - reach;
        let mut j = i - 1 - below(self.draw(i, 1), reach);
        loop {
            if !self.flagged(j) {
                return j;
            }
            if j == lowest {
                // Only flagged nodes within reach: drawn afresh instead.
                return i;
            }
            j -= 1;
        }
    }

    /// The operation of node `i`.
    pub fn op(&self, i: u64) -> ScalarOp {
        match self.shape {
            Shape::Window | Shape::Uniform => pick_op(self.draw(self.source(i), 2)),
            Shape::Chain => chain_op(self.draw(i, 2)),
            Shape::LayeredWide | Shape::LayeredDeep => layered_op(self.draw(i, 2)),
        }
    }

    /// Node `i` (`i < node_count()`): its operation and operands.
    pub fn node(&self, i: u64) -> Node {
        debug_assert!(i < self.nodes);
        match self.shape {
            Shape::Window | Shape::Uniform => self.fresh(self.source(i)),
            Shape::Chain => {
                let op = chain_op(self.draw(i, 2));
                let prev = if i == 0 { 0 } else { 2 * (self.inputs + i - 1) };
                Node { op, args: [prev, 0] }
            }
            Shape::LayeredWide | Shape::LayeredDeep => {
                let w = self.width;
                let layer = i / w;
                let start = if layer == 0 { 0 } else { self.inputs + (layer - 1) * w };
                let a = start + below(self.draw(i, 1), w);
                let b = start + below(self.draw(i, 3), w);
                Node { op: layered_op(self.draw(i, 2)), args: [2 * a, 2 * b] }
            }
        }
    }

    /// Node `i` drawn afresh (`window`, `uniform`; `i` is its own source).
    #[inline]
    fn fresh(&self, i: u64) -> Node {
        let op = pick_op(self.draw(i, 2));
        let pos = self.inputs + i;
        let first = if pos >= LAG { pos - LAG } else { below(self.draw(i, 1), pos) };
        let mut args = [2 * first, 0];
        if op.input_count() == 2 {
            let h = self.draw(i, 3);
            let reach = if self.shape == Shape::Window { pos.min(WINDOW) } else { pos };
            let q = pos - 1 - below(h, reach);
            // Either output of a sincos, by the draw's low bit (the position used its high bits).
            let slot = if q >= self.inputs && self.op(q - self.inputs) == ScalarOp::SinCos { h & 1 } else { 0 };
            args[1] = 2 * q + slot;
        }
        Node { op, args }
    }

    /// How far after a value's node its readers can be: every node reading a value of
    /// node `j` has an index below `j + 1 + reader_reach()` (all later nodes for `uniform`).
    pub fn reader_reach(&self) -> u64 {
        match self.shape {
            Shape::Window => WINDOW + REPEAT_REACH,
            Shape::Uniform => self.nodes,
            Shape::Chain => 1,
            Shape::LayeredWide | Shape::LayeredDeep => 2 * self.width,
        }
    }

    /// Whether the DAG's outputs are its sinks (`window`, `uniform`); otherwise they are
    /// fixed ([`CounterDag::fixed_outputs`]).
    pub fn outputs_are_sinks(&self) -> bool {
        matches!(self.shape, Shape::Window | Shape::Uniform)
    }

    /// The nodes whose first output is an output of the DAG, for the shapes whose outputs
    /// are not the sinks: the last node (`chain`), the last layer (layered shapes).
    pub fn fixed_outputs(&self) -> std::ops::Range<u64> {
        match self.shape {
            Shape::Window | Shape::Uniform => 0..0,
            Shape::Chain => self.nodes - 1..self.nodes,
            Shape::LayeredWide | Shape::LayeredDeep => self.nodes - self.width..self.nodes,
        }
    }

    /// Seeded input values in `[0.5, 1.5)`, one per input, as `scalar::workloads::inputs_for`
    /// draws them (the same stream: input `i` is draw `i` of `seed`).
    pub fn inputs(&self, seed: u64) -> Vec<f64> {
        (0..self.inputs).map(|i| 0.5 + unit(mix(seed.wrapping_add((i + 1).wrapping_mul(GOLDEN))))).collect()
    }
}

/// The chain's operations, a third each.
#[inline]
fn chain_op(h: u64) -> ScalarOp {
    match below(h, 3) {
        0 => ScalarOp::Add,
        1 => ScalarOp::Mul,
        _ => ScalarOp::Neg,
    }
}

/// The layered shapes' operations: add 50%, mul 40%, neg 10%.
#[inline]
fn layered_op(h: u64) -> ScalarOp {
    match below(h, 10) {
        0..5 => ScalarOp::Add,
        5..9 => ScalarOp::Mul,
        _ => ScalarOp::Neg,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_follow_the_sequential_shapes() {
        let n = 200_000;
        for shape in [Shape::Window, Shape::Uniform] {
            let dag = CounterDag::new(shape, n, 1).unwrap();
            let mut repeats = 0;
            let mut adds = 0;
            for i in 0..n {
                if dag.source(i) != i {
                    repeats += 1;
                    assert!(i - dag.source(i) <= REPEAT_REACH);
                }
                let node = dag.node(i);
                adds += usize::from(node.op == ScalarOp::Add);
                let pos = dag.input_count() + i;
                for &a in node.operands() {
                    assert!(a / 2 < pos, "operands precede their node");
                    if shape == Shape::Window {
                        assert!(a / 2 + WINDOW + REPEAT_REACH >= pos, "window reach");
                    }
                }
            }
            let share = repeats as f64 / n as f64;
            assert!((0.28..0.32).contains(&share), "{shape:?}: {share}");
            // 45% of fresh nodes (and of the copied ones' sources) are adds.
            assert!((0.43..0.47).contains(&(adds as f64 / n as f64)), "{shape:?}");
        }
        let dag = CounterDag::new(Shape::LayeredDeep, 10_000, 3).unwrap();
        assert_eq!((dag.input_count(), dag.node_count(), dag.layer_width()), (1000, 10_000, Some(1000)));
        for i in [0, 999, 1000, 9999] {
            let layer = i / 1000;
            for &a in dag.node(i).operands() {
                let pos = a / 2;
                assert!(pos >= layer * 1000 && pos < (layer + 1) * 1000, "layer {layer}: {pos}");
            }
        }
    }

    #[test]
    fn a_node_is_the_same_drawn_alone_or_in_order_and_depends_on_the_seed() {
        let a = CounterDag::new(Shape::Uniform, 1 << 40, 5).unwrap();
        let b = CounterDag::new(Shape::Uniform, 1 << 40, 6).unwrap();
        let far = (1 << 40) - 1;
        assert_eq!(a.node(far), a.node(far));
        assert!((0..64).any(|k| a.node(far - k) != b.node(far - k)));
        let x = a.inputs(7);
        assert_eq!(x.len(), 8);
        assert!(x.iter().all(|v| (0.5..1.5).contains(v)));
    }

    #[test]
    fn sizes_are_checked() {
        assert!(matches!(CounterDag::new(Shape::Window, 0, 1), Err(DagError::Size(_))));
        assert!(matches!(CounterDag::new(Shape::Window, MAX_NODES + 1, 1), Err(DagError::Size(_))));
        assert_eq!(CounterDag::new(Shape::LayeredWide, 250, 1).unwrap().node_count(), 200);
    }
}
