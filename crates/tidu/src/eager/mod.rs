//! `tidu::eager`: the tape for eager frontends (`docs/SPEC.md` §6).
//!
//! A frontend that executes operations immediately records each invocation with a
//! [`Recorder`] and later asks [`try_backward`] for the cotangents of the leaves. The
//! recorder never evaluates anything: the frontend's [`BackwardExecutor`] does, through three
//! hooks (`execute_forward`, `run_transposed_linear`, `add_operands`).
//!
//! # The tape
//! A recorded invocation is a *tape node*: the primitive graph that was run (a one-operation
//! graph for a single primitive, a larger graph for a composite), its inputs as
//! [`EagerInput`]s (user-visible key, the [`Trace`] of the node that produced the value,
//! `requires_grad`, the concrete data) and the user-visible keys of its outputs. A [`Trace`]
//! is a reference-counted handle to a node, and a node holds the traces of its inputs, so
//! the tape lives exactly as long as the frontend's values do: memory is bounded by what the
//! frontend keeps, not by how many steps it has run. Nodes are freed iteratively, so
//! dropping a long chain does not recurse (tested at 10^5 nodes on a 256 KiB stack). An
//! invocation none of whose
//! inputs requires a gradient is not recorded at all (its outputs get no trace).
//!
//! Nodes are numbered in recording order; since a node's inputs were produced before it,
//! descending numbers are a reverse topological order, and backward needs no sort beyond
//! ordering the reachable nodes by number.
//!
//! # Backward rules, cached by structure
//! For each node that received a cotangent, backward needs the transposed linear map of its
//! graph, restricted to the output slots that received a cotangent and the inputs that
//! require a gradient. Building it (`linearize` + `linear_transpose`) costs far more than
//! running it, so the result is cached per recorder under a key that ignores input
//! identity: the graph's structure (operations, roles, operand positions, outputs) and the
//! two masks. On a miss the graph is first rebuilt as a *canonical* graph whose inputs are
//! keyed by the recorder's own keys (input `i` gets the `i`-th key the [`KeySource`] handed
//! out), so the cached rule never refers to a frontend key and every later graph of the same
//! structure, whatever its input keys, hits. A rule is built with the `ADContext` of the
//! backward call that first needs it and reused by the recorder's later calls: a rule
//! context that changes what rules emit needs a recorder of its own. See
//! `docs/adr/0003-eager-tape.md`.
//!
//! # Primal values the transpose needs
//! A cached rule lists the primal values its transposed graph reads. When every one of them
//! is an input or a value the frontend retained ([`Recorder::record_graph`]'s
//! `retained_values`), backward passes them straight to `run_transposed_linear`. Otherwise
//! (an intermediate of a composite, or a value the linearization computes from primal data,
//! such as `cos x` for `sin`) it first calls `execute_forward` with everything it has, and
//! the executor recomputes the rest. A required value that still is missing is an error,
//! never a silent zero.

mod backward;
mod recorder;
mod rules;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use computegraph::{Graph, GraphOperation, ResolvedView, ValueKey};

use crate::error::ADRuleResult;
use crate::linearized::LinearizedGraph;
use crate::primitive::Primitive;

pub use crate::error::EagerError;
pub use backward::try_backward;
pub use recorder::{DEFAULT_RULE_CAPACITY, Recorder, RecorderStats, Trace};

/// Hands out fresh input keys for the recorder's internal (canonical) graphs.
///
/// Keys must not collide with each other; the recorder asks for a new one only when it
/// records a graph with more inputs than any before, so a source hands out as many keys as
/// the widest recorded graph has inputs. Any `FnMut() -> Op::InputKey` is a key source.
///
/// ```
/// # #[path = "../../doc/scalar.rs"] mod scalar;
/// use scalar::{ScalarKey, ScalarOp};
/// use tidu::eager::Recorder;
///
/// // Keys from a range the frontend never uses for its own variables.
/// let mut next = u32::MAX / 2;
/// let recorder = Recorder::<ScalarOp>::new(move || {
///     next += 1;
///     ScalarKey::var(next)
/// });
/// assert_eq!(recorder.stats().canonical_keys, 0); // drawn only when a graph is recorded
/// ```
pub trait KeySource<Op: GraphOperation> {
    /// A key never handed out before.
    fn fresh_input_key(&mut self) -> Op::InputKey;
}

impl<Op: GraphOperation, F: FnMut() -> Op::InputKey> KeySource<Op> for F {
    fn fresh_input_key(&mut self) -> Op::InputKey {
        self()
    }
}

/// An input of a recorded invocation.
pub struct EagerInput<Op: Primitive> {
    /// The user-visible key of the value, under which its cotangent accumulates. Keys must
    /// be unique per value; `ValueKey::Input` of a frontend counter is the cheap choice (it
    /// is never interned).
    pub key: ValueKey<Op>,
    /// The node that produced the value, or `None` for a leaf.
    pub trace: Option<Trace<Op>>,
    /// Whether cotangents flow to (and through) this value.
    pub requires_grad: bool,
    /// The concrete primal value, kept for the backward pass.
    pub data: Arc<Op::Operand>,
}

impl<Op: Primitive> Clone for EagerInput<Op> {
    fn clone(&self) -> Self {
        EagerInput {
            key: self.key.clone(),
            trace: self.trace.clone(),
            requires_grad: self.requires_grad,
            data: Arc::clone(&self.data),
        }
    }
}

impl<Op: Primitive> fmt::Debug for EagerInput<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EagerInput")
            .field("key", &self.key)
            .field("trace", &self.trace)
            .field("requires_grad", &self.requires_grad)
            .finish_non_exhaustive()
    }
}

impl<Op: Primitive> EagerInput<Op> {
    /// A leaf: a value no recorded invocation produced.
    pub fn leaf(key: ValueKey<Op>, data: Arc<Op::Operand>, requires_grad: bool) -> Self {
        EagerInput { key, trace: None, requires_grad, data }
    }
}

/// An output of a recorded invocation, as [`Recorder::record_graph`] returns it.
pub struct EagerOutput<Op: Primitive> {
    /// The user-visible key given to this output.
    pub key: ValueKey<Op>,
    /// The node that produced it (`None` when no input required a gradient).
    pub trace: Option<Trace<Op>>,
    /// Whether any input of the invocation requires a gradient.
    pub requires_grad: bool,
    /// The output's position among the recorded graph's outputs.
    pub output_slot: usize,
}

impl<Op: Primitive> EagerOutput<Op> {
    /// This output as the input of a later invocation, with its concrete value.
    pub fn input(&self, data: Arc<Op::Operand>) -> EagerInput<Op> {
        EagerInput { key: self.key.clone(), trace: self.trace.clone(), requires_grad: self.requires_grad, data }
    }
}

impl<Op: Primitive> Clone for EagerOutput<Op> {
    fn clone(&self) -> Self {
        EagerOutput {
            key: self.key.clone(),
            trace: self.trace.clone(),
            requires_grad: self.requires_grad,
            output_slot: self.output_slot,
        }
    }
}

impl<Op: Primitive> fmt::Debug for EagerOutput<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EagerOutput")
            .field("key", &self.key)
            .field("trace", &self.trace)
            .field("requires_grad", &self.requires_grad)
            .field("output_slot", &self.output_slot)
            .finish()
    }
}

/// The graph handed to [`BackwardExecutor::execute_forward`]: a recorded invocation in its
/// canonical form, and the primal values the backward pass needs from it.
pub struct PrimitiveGraph<'a, Op: GraphOperation> {
    pub(crate) graph: &'a Arc<Graph<Op>>,
    pub(crate) view: &'a ResolvedView<Op>,
    pub(crate) required: &'a [ValueKey<Op>],
}

impl<'a, Op: GraphOperation> PrimitiveGraph<'a, Op> {
    /// The recorded graph, canonical form: input `i` is keyed by the recorder's `i`-th key
    /// (the keys of `initial_data`'s inputs).
    pub fn as_graph(&self) -> &'a Graph<Op> {
        self.graph
    }
    /// The values to produce: every primal value the transposed graph reads. Some are
    /// values of [`as_graph`](Self::as_graph); others are computed from primal values by the
    /// linearization (say `cos x` for `sin x`) and are defined in [`view`](Self::view).
    pub fn required(&self) -> &'a [ValueKey<Op>] {
        self.required
    }
    /// A resolved view defining every required value, whose only inputs are the canonical
    /// graph's inputs: `materialize_merge(view, required)` then `compile` gives a program
    /// that computes them from `initial_data`.
    pub fn view(&self) -> &'a ResolvedView<Op> {
        self.view
    }
}

/// The downstream runtime's hooks into [`try_backward`]. It owns the concrete data:
/// allocation, devices, shapes, and the errors about them.
pub trait BackwardExecutor<Op: Primitive> {
    /// Replays a recorded graph: returns (at least) the values of `graph.required()`, from
    /// `initial_data` (the graph's inputs and the values the frontend retained, by canonical
    /// key).
    fn execute_forward(
        &mut self,
        graph: PrimitiveGraph<'_, Op>,
        initial_data: &HashMap<ValueKey<Op>, Arc<Op::Operand>>,
    ) -> HashMap<ValueKey<Op>, Arc<Op::Operand>>;

    /// Runs a transposed linear graph: `cotangent_out[i]` is the value of
    /// `linear.tangent_inputs()[i]` (`None` is a zero), `external_data` holds every primal
    /// value the graph reads by key. Returns one cotangent per `linear.tangent_outputs()`
    /// entry (`None` where it is a symbolic zero). Reject a seed the graph cannot take (a
    /// wrong shape, say) with [`EagerError::executor`].
    fn run_transposed_linear(
        &mut self,
        linear: &LinearizedGraph<Op>,
        cotangent_out: &[Option<Arc<Op::Operand>>],
        external_data: &HashMap<ValueKey<Op>, Arc<Op::Operand>>,
        ctx: &mut Op::ADContext,
    ) -> ADRuleResult<Vec<Option<Arc<Op::Operand>>>>;

    /// Sums two cotangents of the same value, where paths meet.
    fn add_operands(&mut self, a: &Arc<Op::Operand>, b: &Arc<Op::Operand>) -> Arc<Op::Operand>;
}
