//! `materialize_merge`: flatten the reachable part of a view into one graph.
//!
//! Input: a [`ResolvedView`] and output keys. Output: a [`MaterializedGraph`] holding
//! exactly the definitions reachable from the outputs, each structural key once (CSE),
//! in one topological order, with its inputs listed by key.
//!
//! Invariants of the output (checked by [`MaterializedGraph::verify`]):
//! - operation `i`'s inputs are values created before its outputs (id order is topological);
//! - no two values share a [`KeyId`] (deduplicated by structural key);
//! - `inputs()` lists every input value once, in key-interning order, and `input_keys()` is
//!   parallel to it;
//! - `externals()` lists every external value once, in key-interning order, after the inputs, and
//!   `external_keys()` is parallel to it (only [`try_materialize_fragment`] makes them).
//!
//! [`try_materialize_fragment`] runs the same two phases over one graph alone, without its
//! parents: a derived key the graph reads from another graph is not followed but becomes an
//! *external value*, one the result reads from outside, named by its key and bound at
//! evaluation like an input. That is how a fragment that reads values computed elsewhere
//! (a transposed linear map reading primal values) compiles on its own.
//!
//! Algorithm, in two phases, both iterative (no recursion, so any depth works on any stack):
//! 1. *Mark*: from the outputs, sweep each fragment's values in reverse local order,
//!    expanding every reachable operation (its operands come earlier, so they are met
//!    later in the same sweep); references into other fragments mark there and queue that
//!    fragment. Reachable operations are recorded by the key of their first output, which
//!    deduplicates structurally equal operations wherever they are defined; of several
//!    copies in one fragment the earliest is kept, so that emit reads that fragment's
//!    columns in increasing order.
//! 2. *Emit*: inputs first, in key order, then the recorded operations in increasing key
//!    order, which is a topological order (an operation's input keys are interned before
//!    its outputs'). A result of at least 4096 operations copies no operation: it reads
//!    them from the interner's store, whose closed chunks it shares (`StoreOps`, ADR 0017).
//!
//! A view of one fragment (no external operands, every operation `Primary`, keys compact)
//! takes a shorter path with the same result (`materialize/local.rs`): marking records the
//! reachable keys in a bit set (a bit per key instead of an 8-byte entry), and emit walks
//! the fragment in local order, emitting each reachable key at its first local
//! definition. Local order is key order there when the builder interned the fragment's
//! fresh operations in local order (a builder alone on its interner); a fragment that
//! meets a key before a smaller one falls back to the general emit. That removes the
//! key-indexed table of definitions, its scan and its list of entries (8 bytes per key and
//! 12 per operation, written once and read once): about a third of materialize's time at
//! 10^7 nodes. Its emit reads operands from the store and renumbers them by key, by rank,
//! or through a map only when it must.
//!
//! Both phases walk columns mostly sequentially. Key-indexed tables are dense arrays when
//! the view's keys are compact, hash maps otherwise ([`KeyMap`]). Emit's operand lookups
//! (an operand's key, then its new id) jump wherever the operands are: when enough
//! operands lie far from their readers (`prefetch.rs`, decided every few thousand
//! operands) emit prefetches them a few operations ahead. Complexity:
//! `O(swept values + reachable operands)`; a fragment sweep covers the range between its
//! lowest and highest reachable value. Each external key is located once; in a view of
//! more than eight graphs that reads the view's key index, built on first use in
//! `O(the view's values)` (`resolve.rs`).

use std::fmt;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::error::{GraphError, GraphResult};

use crate::chunk::{CHUNK_BITS, StoreOps};
use crate::graph::{Graph, InputRef, LocalDef, LocalOperationId, LocalValueId, STORE_OPS_MIN};
use crate::hugepages::huge_vec;
use crate::id::{IdVec, ListPool};
use crate::id::{KeyId, OperationKeyId};
use crate::key::{KeyInterner, OperationKey, ValueKey};
use crate::keymap::KeyMap;
use crate::operation::{GraphOperation, Label, OperationRole};
use crate::prefetch::FarOperands;
use crate::resolve::ResolvedView;
use crate::stop::Poll;

mod keys;
mod local;

pub(crate) use keys::KeyRun;

crate::define_id!(
    /// A value of a [`MaterializedGraph`].
    pub struct ValueId = "mv"
);
crate::define_id!(
    /// An operation of a [`MaterializedGraph`].
    pub struct OperationId = "mop"
);

/// How a value of a [`MaterializedGraph`] is defined, decoded from its `value_op` column
/// by [`MaterializedGraph::def`].
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum MatDef {
    Input(u32),
    /// A value read from outside the materialized fragment: `external_keys[i]`.
    External(u32),
    Output(OperationId, u8),
}

/// A flat, deduplicated, topologically ordered graph: the input of [`compile`](crate::compile).
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{materialize_merge, resolve, GraphBuilder, OperationRole::Primary, ValueRef::Local};
/// use scalar::{ScalarKey, ScalarOp};
///
/// // sin(x) built twice, and an operation nobody asks for.
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// let s1 = b.add_operation(ScalarOp::Sin, vec![Local(x)], Primary)[0];
/// let s2 = b.add_operation(ScalarOp::Sin, vec![Local(x)], Primary)[0];
/// let y = b.add_operation(ScalarOp::Mul, vec![Local(s1), Local(s2)], Primary)[0];
/// b.add_operation(ScalarOp::Cos, vec![Local(x)], Primary);
/// let g = Arc::new(b.build());
///
/// let m = materialize_merge(&resolve(vec![g.clone()]), &[g.global_key(y)]);
/// assert_eq!(m.operation_count(), 2); // one sin (CSE) and the mul; the cos is unreachable
/// assert_eq!(m.input_keys(), &[ScalarKey::var(0)]);
/// let ops: Vec<_> = m.operations().map(|o| *o.operation()).collect();
/// assert_eq!(ops, [ScalarOp::Sin, ScalarOp::Mul]); // a topological order
/// m.verify().unwrap();
/// ```
pub struct MaterializedGraph<Op: GraphOperation> {
    pub(crate) interner: Arc<KeyInterner<Op>>,
    /// Each value's key: a run while they are consecutive, as they are for a fragment
    /// built alone with nothing pruned (`materialize/keys.rs`).
    pub(crate) value_key: KeyRun<ValueId, KeyId>,
    /// The operation defining each value, `None` for an input or an external value: the
    /// inputs are the first values and the external values the next ones, so the index of
    /// either is its id, and an output's slot is its id minus its operation's first output
    /// (4 bytes a value, where the decoded [`MatDef`] takes 8; read it with [`Self::def`]).
    pub(crate) value_op: IdVec<ValueId, Option<OperationId>>,
    /// The operations, unless `store_ops` reads them from the interner's store (read them
    /// with [`Self::op`]).
    pub(crate) own_ops: IdVec<OperationId, Op>,
    /// The operations of a large graph, read in place from the interner's store, which
    /// holds each distinct operation once (ADR 0017, step 4).
    pub(crate) store_ops: Option<StoreOps<Op>>,
    /// Each operation's key, a run while they are consecutive (as `value_key`).
    pub(crate) op_key: KeyRun<OperationId, OperationKeyId>,
    pub(crate) op_inputs: ListPool<ValueId>,
    /// Index into `roles` of each operation's role; empty while every operation is
    /// `Primary`, as a fragment's (read it with `role_id`): 4 bytes per operation saved
    /// on every graph the AD transforms did not make.
    pub(crate) op_role: IdVec<OperationId, u32>,
    pub(crate) roles: Vec<OperationRole>,
    pub(crate) op_first_output: IdVec<OperationId, ValueId>,
    pub(crate) inputs: Vec<ValueId>,
    pub(crate) input_keys: Vec<Op::InputKey>,
    /// Values read from outside (fragment materialization only), after the inputs.
    pub(crate) externals: Vec<ValueId>,
    pub(crate) external_keys: Vec<ValueKey<Op>>,
    pub(crate) outputs: Vec<ValueId>,
}

/// How a value of a [`MaterializedGraph`] is defined.
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{materialize_merge, resolve, GraphBuilder, MaterializedValueDef, OperationRole::Primary, ValueRef::Local};
/// use scalar::{ScalarKey, ScalarOp};
///
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// let y = b.add_operation(ScalarOp::Neg, vec![Local(x)], Primary)[0];
/// let g = Arc::new(b.build());
/// let m = materialize_merge(&resolve(vec![g.clone()]), &[g.global_key(y)]);
///
/// assert!(matches!(m.value_def(m.inputs()[0]), Some(MaterializedValueDef::Input(k)) if *k == ScalarKey::var(0)));
/// assert!(matches!(m.value_def(m.outputs()[0]), Some(MaterializedValueDef::Output { output_slot: 0, .. })));
/// ```
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum MaterializedValueDef<'a, Op: GraphOperation> {
    /// A graph input.
    Input(&'a Op::InputKey),
    /// An external value: a derived value the materialized fragment reads from another graph
    /// ([`try_materialize_fragment`]), bound by key at evaluation.
    External(&'a ValueKey<Op>),
    /// Output `output_slot` of an operation.
    Output {
        /// The producing operation.
        operation: OperationId,
        /// Which of its outputs.
        output_slot: u8,
    },
}

/// One operation of a [`MaterializedGraph`], from [`MaterializedGraph::operations`] or
/// [`MaterializedGraph::operation`].
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{materialize_merge, resolve, GraphBuilder, OperationRole::Primary, ValueRef::Local};
/// use scalar::{ScalarKey, ScalarOp};
///
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// let sc = b.add_operation(ScalarOp::SinCos, vec![Local(x)], Primary);
/// let g = Arc::new(b.build());
/// let m = materialize_merge(&resolve(vec![g.clone()]), &[g.global_key(sc[0]), g.global_key(sc[1])]);
///
/// let op = m.operations().next().unwrap();
/// assert_eq!(*op.operation(), ScalarOp::SinCos);
/// assert_eq!(op.inputs(), m.inputs());
/// assert_eq!(op.outputs().collect::<Vec<_>>(), m.outputs());
/// assert!(!op.role().is_linearized());
/// ```
pub struct MaterializedOperation<'a, Op: GraphOperation> {
    graph: &'a MaterializedGraph<Op>,
    id: OperationId,
}

impl<'a, Op: GraphOperation> MaterializedOperation<'a, Op> {
    /// The operation's id.
    pub fn id(&self) -> OperationId {
        self.id
    }
    /// The operation.
    pub fn operation(&self) -> &'a Op {
        self.graph.op(self.id)
    }
    /// Its operands.
    pub fn inputs(&self) -> &'a [ValueId] {
        self.graph.op_inputs.get(self.id.index())
    }
    /// Its outputs (consecutive ids).
    pub fn outputs(&self) -> impl ExactSizeIterator<Item = ValueId> + use<'a, Op> {
        self.graph.op_outputs(self.id)
    }
    /// Its role.
    pub fn role(&self) -> &'a OperationRole {
        &self.graph.roles[self.graph.role_id(self.id) as usize]
    }
    /// Its interned key.
    pub fn key(&self) -> OperationKey<Op> {
        self.graph.operation_key(self.id)
    }
}

impl<Op: GraphOperation> MaterializedGraph<Op> {
    /// The interner of the keys.
    pub fn interner(&self) -> &Arc<KeyInterner<Op>> {
        &self.interner
    }
    /// Number of values.
    pub fn value_count(&self) -> usize {
        self.value_op.len()
    }
    /// Number of operations.
    pub fn operation_count(&self) -> usize {
        self.op_key.len()
    }

    /// Operation `op`, from the graph's own column or the store.
    ///
    /// # Panics
    /// If `op` is out of range; for a graph whose operations are a run of store keys
    /// (`keys.rs`), only in debug builds: the callers pass the graph's own ids.
    #[inline]
    pub(crate) fn op(&self, op: OperationId) -> &Op {
        match &self.store_ops {
            None => &self.own_ops[op],
            Some(store) => store.get(self.op_key.at(op)),
        }
    }
    /// Appends operations `range` to `out`, in order, with one test of where they are
    /// for the whole range instead of one per operation (`op`): dispatch reads every
    /// operation a window at a time this way, and a run of store keys (`keys.rs`) is read
    /// without its `op_key` column.
    ///
    /// # Panics
    /// If `range` is out of range.
    pub(crate) fn extend_ops<'a>(&'a self, range: std::ops::Range<usize>, out: &mut Vec<&'a Op>) {
        assert!(range.end <= self.operation_count(), "{range:?} are not operations of this graph");
        match (&self.store_ops, self.op_key.run_first()) {
            (None, _) => out.extend(&self.own_ops.raw()[range]),
            (Some(store), Some(first)) => store.extend_keys(first + range.start..first + range.end, out),
            (Some(store), None) => out.extend(self.op_key.dense()[range].iter().map(|&k| store.get(k))),
        }
    }
    /// Input values, in the order `eval` expects them.
    pub fn inputs(&self) -> &[ValueId] {
        &self.inputs
    }
    /// Input keys, in the order `eval` expects them (parallel to [`Self::inputs`]).
    pub fn input_keys(&self) -> &[Op::InputKey] {
        &self.input_keys
    }
    /// External values (derived values read from outside, see [`try_materialize_fragment`]),
    /// in the order `eval` expects them after the inputs. Empty for `materialize_merge`.
    pub fn externals(&self) -> &[ValueId] {
        &self.externals
    }
    /// External keys, in the order `eval` expects them after the inputs (parallel to
    /// [`Self::externals`]).
    pub fn external_keys(&self) -> &[ValueKey<Op>] {
        &self.external_keys
    }
    /// Output values, in the order they were requested.
    pub fn outputs(&self) -> &[ValueId] {
        &self.outputs
    }
    /// Output keys, in the order they were requested.
    pub fn output_keys(&self) -> Vec<ValueKey<Op>> {
        self.outputs.iter().map(|&v| self.value_key(v)).collect()
    }
    /// The operations in topological order.
    pub fn operations(&self) -> impl DoubleEndedIterator<Item = MaterializedOperation<'_, Op>> + ExactSizeIterator {
        self.op_key.ids().map(move |id| MaterializedOperation { graph: self, id })
    }
    /// One operation.
    ///
    /// # Panics
    /// If `id` is out of range.
    pub fn operation(&self, id: OperationId) -> MaterializedOperation<'_, Op> {
        assert!(id.index() < self.operation_count(), "{id:?} is not an operation of this graph");
        MaterializedOperation { graph: self, id }
    }
    /// How a value is defined, or `None` if it is out of range.
    pub fn value_def(&self, v: ValueId) -> Option<MaterializedValueDef<'_, Op>> {
        Some(match self.try_def(v)? {
            MatDef::Input(i) => MaterializedValueDef::Input(&self.input_keys[i as usize]),
            MatDef::External(i) => MaterializedValueDef::External(&self.external_keys[i as usize]),
            MatDef::Output(operation, output_slot) => MaterializedValueDef::Output { operation, output_slot },
        })
    }
    /// The global key of a value.
    ///
    /// # Panics
    /// If `v` is out of range.
    pub fn value_key(&self, v: ValueId) -> ValueKey<Op> {
        match self.def(v) {
            MatDef::Input(i) => ValueKey::Input(self.input_keys[i as usize].clone()),
            MatDef::External(i) => self.external_keys[i as usize].clone(),
            MatDef::Output(op, slot) => ValueKey::Derived { operation: self.operation_key(op), output_slot: slot },
        }
    }
    /// The interned id of a value's key.
    ///
    /// # Panics
    /// If `v` is out of range.
    pub fn key_id(&self, v: ValueId) -> KeyId {
        // `at` does not bound a run's reads (`keys.rs`).
        assert!(v.index() < self.value_count(), "{v:?} is not a value of this graph");
        self.value_key.at(v)
    }

    pub(crate) fn op_outputs(&self, op: OperationId) -> impl ExactSizeIterator<Item = ValueId> + use<Op> {
        let first = self.op_first_output[op].index();
        (first..first + self.op(op).output_count()).map(ValueId::new)
    }

    /// How value `v` is defined.
    ///
    /// # Panics
    /// If `v` is out of range.
    #[inline]
    pub(crate) fn def(&self, v: ValueId) -> MatDef {
        self.try_def(v).unwrap_or_else(|| panic!("{v:?} is not a value of this graph"))
    }

    /// How value `v` is defined, or `None` if it is out of range.
    #[inline]
    pub(crate) fn try_def(&self, v: ValueId) -> Option<MatDef> {
        Some(match *self.value_op.get(v)? {
            Some(op) => MatDef::Output(op, (v.index() - self.op_first_output[op].index()) as u8),
            None if v.index() < self.inputs.len() => MatDef::Input(v.index() as u32),
            None => MatDef::External((v.index() - self.inputs.len()) as u32),
        })
    }

    /// The index into `roles` of an operation's role.
    #[inline]
    pub(crate) fn role_id(&self, op: OperationId) -> u32 {
        if self.op_role.is_empty() { 0 } else { self.op_role[op] }
    }

    pub(crate) fn operation_key(&self, op: OperationId) -> OperationKey<Op> {
        let n = self.op(op).output_count();
        let first = if n > 0 { self.value_key.at(self.op_first_output[op]) } else { KeyId::new(0) };
        OperationKey::from_parts(self.interner.id(), self.op_key.at(op), first, n)
    }

    /// Bytes held by the columns: the sum of [`MaterializedGraph::column_bytes`].
    pub fn heap_bytes(&self) -> usize {
        self.column_bytes().iter().map(|&(_, b)| b).sum()
    }

    /// Bytes held by each column, by name (allocated capacity). What
    /// `docs/ARCHITECTURE.md` states per node, and the memory report of `benches` prints.
    pub fn column_bytes(&self) -> Vec<(&'static str, usize)> {
        vec![
            ("value_key", self.value_key.heap_bytes()),
            ("value_op", self.value_op.heap_bytes()),
            ("ops", self.own_ops.heap_bytes() + self.store_ops.as_ref().map_or(0, StoreOps::heap_bytes)),
            ("op_key", self.op_key.heap_bytes()),
            ("op_inputs (starts)", self.op_inputs.starts_bytes()),
            ("op_inputs (operands)", self.op_inputs.items_bytes()),
            ("op_role", self.op_role.heap_bytes()),
            ("op_first_output", self.op_first_output.heap_bytes()),
            (
                "inputs, externals, outputs",
                (self.inputs.capacity() + self.externals.capacity() + self.outputs.capacity()) * 4
                    + self.input_keys.capacity() * std::mem::size_of::<Op::InputKey>()
                    + self.external_keys.capacity() * std::mem::size_of::<ValueKey<Op>>(),
            ),
        ]
    }
}

impl<Op: GraphOperation> fmt::Debug for MaterializedGraph<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaterializedGraph")
            .field("values", &self.value_op.len())
            .field("operations", &self.operation_count())
            .field("inputs", &self.inputs.len())
            .field("externals", &self.externals.len())
            .field("outputs", &self.outputs)
            .finish()
    }
}

/// Flattens the part of `view` reachable from `outputs` into one deduplicated graph.
///
/// # Panics
/// On an unresolved or foreign key; see [`try_materialize_merge`].
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{materialize_merge, resolve, GraphBuilder, ValueRef::Local, OperationRole::Primary};
/// use scalar::{ScalarOp, ScalarKey};
///
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// let a = b.add_operation(ScalarOp::Exp, vec![Local(x)], Primary)[0];
/// let a2 = b.add_operation(ScalarOp::Exp, vec![Local(x)], Primary)[0]; // same structure
/// let y = b.add_operation(ScalarOp::Mul, vec![Local(a), Local(a2)], Primary)[0];
/// let g = Arc::new(b.build());
/// let m = materialize_merge(&resolve(vec![g.clone()]), &[g.global_key(y)]);
/// assert_eq!(m.operation_count(), 2); // exp deduplicated
/// assert_eq!(m.input_keys(), &[ScalarKey::var(0)]);
/// ```
pub fn materialize_merge<Op: GraphOperation>(
    view: &ResolvedView<Op>,
    outputs: &[ValueKey<Op>],
) -> MaterializedGraph<Op> {
    try_materialize_merge(view, outputs).unwrap_or_else(|e| panic!("{e}"))
}

/// Flattens the part of `view` reachable from `outputs`, or reports the first key that
/// no graph defines (or that belongs to another interner).
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{resolve, try_materialize_merge, GraphBuilder, GraphError, OperationRole::Primary, ValueRef::Local};
/// use scalar::{ScalarKey, ScalarOp};
///
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// let y = b.add_operation(ScalarOp::Exp, vec![Local(x)], Primary)[0];
/// let g = Arc::new(b.build());
/// let key = g.global_key(y);
///
/// // A view without the graph that defines `key` cannot materialize it.
/// let mut other = GraphBuilder::<ScalarOp>::new();
/// other.add_input(ScalarKey::var(1));
/// let empty = resolve(vec![Arc::new(other.build())]);
/// assert!(matches!(try_materialize_merge(&empty, &[key.clone()]), Err(GraphError::UnresolvedKey { .. })));
/// assert!(try_materialize_merge(&resolve(vec![g]), &[key]).is_ok());
/// ```
pub fn try_materialize_merge<Op: GraphOperation>(
    view: &ResolvedView<Op>,
    outputs: &[ValueKey<Op>],
) -> GraphResult<MaterializedGraph<Op>> {
    materialize(view, outputs, Undefined::Error)
}

/// Materializes one graph on its own: the part of `graph` reachable from `outputs`,
/// deduplicated and ordered as [`try_materialize_merge`] does, without reading its
/// parents. A derived key the graph reads from another graph (or an output key it does not
/// define) becomes an *external value*: an input of the result named by its [`ValueKey`]
/// ([`MaterializedGraph::external_keys`]), which [`compile`](crate::compile) places after the
/// inputs and evaluation binds by key
/// ([`CompiledProgram::bind_inputs_and_externals`](crate::CompiledProgram::bind_inputs_and_externals)).
///
/// This is how a fragment that reads values computed elsewhere runs on its own, given
/// those values: a transposed linear map, say, whose primal values an eager runtime holds.
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{
///     compile, try_materialize_fragment, GraphBuilder, OperationRole::Primary,
///     ValueRef::{External, Local},
/// };
/// use scalar::{ScalarKey, ScalarOp};
///
/// // `s = sin x` in one graph; `y = s · t` in another, which reads `s` by key.
/// let mut a = GraphBuilder::<ScalarOp>::new();
/// let x = a.add_input(ScalarKey::var(0));
/// let s = a.add_operation(ScalarOp::Sin, vec![Local(x)], Primary)[0];
/// let first = Arc::new(a.build());
/// let s_key = first.global_key(s);
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// b.add_parent(first.clone());
/// let t = b.add_input(ScalarKey::var(1));
/// let y = b.add_operation(ScalarOp::Mul, vec![External(s_key.clone()), Local(t)], Primary)[0];
/// let second = Arc::new(b.build());
///
/// // Alone, the second graph reads `s` from outside: no `sin`, no `x`.
/// let m = try_materialize_fragment(&second, &[second.global_key(y)]).unwrap();
/// assert_eq!((m.operation_count(), m.input_keys(), m.external_keys()), (1, &[ScalarKey::var(1)][..], &[s_key.clone()][..]));
/// let program = compile(&m);
/// let inputs = program.bind_inputs_and_externals(|_| Some(&2.0), |k| (*k == s_key).then_some(&0.5)).unwrap();
/// assert_eq!(program.eval(&mut (), &inputs), vec![1.0]);
/// ```
pub fn try_materialize_fragment<Op: GraphOperation>(
    graph: &Arc<Graph<Op>>,
    outputs: &[ValueKey<Op>],
) -> GraphResult<MaterializedGraph<Op>> {
    materialize(&ResolvedView::alone(Arc::clone(graph)), outputs, Undefined::External)
}

/// What marking does with a derived key that no graph of the view defines.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Undefined {
    /// Reports it ([`GraphError::UnresolvedKey`]): `materialize_merge`.
    Error,
    /// Makes it an external value: `try_materialize_fragment`.
    External,
}

/// The pass behind both entry points: mark from `outputs`, then emit.
fn materialize<Op: GraphOperation>(
    view: &ResolvedView<Op>,
    outputs: &[ValueKey<Op>],
    undefined: Undefined,
) -> GraphResult<MaterializedGraph<Op>> {
    let interner = view.interner();
    let out_ids: Vec<KeyId> = outputs.iter().map(|k| interner.intern_key(k)).collect::<GraphResult<_>>()?;
    let key_space = interner.value_count();
    let mut m = Marker::new(view, key_space, undefined);
    for (key, &id) in outputs.iter().zip(&out_ids) {
        match key {
            ValueKey::Input(k) => m.need_input(id, k),
            ValueKey::Derived { .. } => m.need_key(id, key)?,
        }
    }
    m.sweep()?;
    let graph = m.emit(&out_ids)?;
    #[cfg(debug_assertions)]
    graph.verify().unwrap_or_else(|e| panic!("internal error: materialized graph fails verification: {e}"));
    Ok(graph)
}

/// How many operations ahead emit prefetches operand entries (in two stages, see `emit`).
const AHEAD: usize = 8;

/// A fixed-size bit set: marking's per-graph sets, tested and set once per operand (a
/// plain word column; `bitvec`'s general indexing cost several times the instructions).
/// A bit's range is checked in debug builds only: an index past the last word still
/// panics (the word's own bound check), and one in the last word's spare bits can only
/// come from a broken invariant of marking, whose sets are sized by the columns they
/// index; the check ran on every operand, in the pass's hottest loop.
#[derive(Default)]
struct Bits {
    words: Vec<u64>,
    len: usize,
}

impl Bits {
    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Makes the set `n` bits long, all clear (called once, on an empty set).
    fn resize(&mut self, n: usize) {
        self.words = vec![0; n.div_ceil(64)];
        self.len = n;
    }

    /// Bit `i`.
    ///
    /// # Panics
    /// If `i` is past the last word (in debug builds, out of range).
    #[inline(always)]
    fn get(&self, i: usize) -> bool {
        debug_assert!(i < self.len, "bit {i} of {}", self.len);
        self.words[i >> 6] >> (i & 63) & 1 != 0
    }

    /// Sets bit `i`; returns whether it was set before.
    ///
    /// # Panics
    /// If `i` is past the last word (in debug builds, out of range).
    #[inline(always)]
    fn test_and_set(&mut self, i: usize) -> bool {
        debug_assert!(i < self.len, "bit {i} of {}", self.len);
        let (w, bit) = (&mut self.words[i >> 6], 1u64 << (i & 63));
        let was = *w & bit != 0;
        *w |= bit;
        was
    }

    /// Clears bit `i`; returns whether it was set.
    ///
    /// # Panics
    /// If `i` is past the last word (in debug builds, out of range).
    #[inline(always)]
    fn take(&mut self, i: usize) -> bool {
        debug_assert!(i < self.len, "bit {i} of {}", self.len);
        let (w, bit) = (&mut self.words[i >> 6], 1u64 << (i & 63));
        let was = *w & bit != 0;
        *w &= !bit;
        was
    }
}

/// Phase one state: which local values and operations are reachable.
///
/// Marking sweeps each fragment's values in reverse local order from the highest newly
/// marked value down (operands always come earlier, so one sweep usually finishes a
/// fragment); a reference into another fragment marks there and queues that fragment.
struct Marker<'v, Op: GraphOperation> {
    view: &'v ResolvedView<Op>,
    graphs: &'v [Arc<Graph<Op>>],
    /// Per graph: reachable local values (allocated on first use).
    needed: Vec<Bits>,
    /// Per graph: operations already expanded.
    expanded: Vec<Bits>,
    /// Per graph: the range of marked values not yet swept (`lo..=hi`).
    pending: Vec<Option<(usize, usize)>>,
    queue: Vec<usize>,
    /// Derived keys already reached through an external reference.
    external_seen: KeyMap<()>,
    /// Reachable inputs: key → index into `input_list`.
    inputs: KeyMap<u32>,
    input_list: Vec<(KeyId, Op::InputKey)>,
    /// What to do with a derived key the view does not define.
    undefined: Undefined,
    /// External values reached ([`Undefined::External`]), each once (`external_seen`
    /// deduplicates).
    external_list: Vec<(KeyId, ValueKey<Op>)>,
    /// Key of the first output of each reachable operation → where it is defined.
    defs: KeyMap<(u32, LocalOperationId)>,
    /// Outputs of the operations in `defs`: emit sizes the value columns with it, which
    /// otherwise double once operations with two outputs pass their capacity.
    def_values: usize,
    /// A view of one fragment with no external operands, every operation `Primary`, and
    /// keys compact enough for a key-indexed bit set: marking then records the reachable
    /// keys in `key_needed` instead of `defs`, and emit walks the fragment in local order
    /// (`emit_in_local_order`).
    single: bool,
    /// Key of the first output of each reachable operation (`single` views only).
    key_needed: Bits,
    /// Number of keys in `key_needed`: the result's operations (`single` views only).
    single_ops: usize,
    /// Operands of those operations: the length of the result's operand pool, which emit
    /// writes through reserved room (`single` views only).
    single_operands: usize,
}

impl<'v, Op: GraphOperation> Marker<'v, Op> {
    fn new(view: &'v ResolvedView<Op>, key_space: usize, undefined: Undefined) -> Self {
        let graphs = view.graphs();
        let local_values: usize = graphs.iter().map(|g| g.value_count()).sum();
        // The same density test as a dense `KeyMap`'s: a small fragment in a large
        // interner takes the general path rather than a bit per key of the interner.
        let single = matches!(graphs, [g] if g.externals.is_empty() && g.op_role.is_empty())
            && key_space <= local_values.saturating_mul(4).saturating_add(4096);
        let mut key_needed = Bits::default();
        if single {
            key_needed.resize(key_space);
        }
        Marker {
            view,
            graphs,
            needed: (0..graphs.len()).map(|_| Bits::default()).collect(),
            expanded: (0..graphs.len()).map(|_| Bits::default()).collect(),
            pending: vec![None; graphs.len()],
            queue: Vec::new(),
            external_seen: KeyMap::with_range(0..key_space, local_values),
            inputs: KeyMap::hashed(64),
            input_list: Vec::new(),
            undefined,
            external_list: Vec::new(),
            // Not used by a `single` view unless its emit falls back (`defs_from_expanded`).
            defs: if single { KeyMap::hashed(0) } else { KeyMap::with_range(0..key_space, local_values) },
            def_values: 0,
            single,
            key_needed,
            single_ops: 0,
            single_operands: 0,
        }
    }

    fn need_input(&mut self, key: KeyId, input: &Op::InputKey) {
        if self.inputs.insert_if_absent(key, self.input_list.len() as u32) {
            self.input_list.push((key, input.clone()));
        }
    }

    /// Marks the definition of derived key `key` (`value_key` names it), wherever the
    /// view defines it; one the view does not define is an error or an external value.
    fn need_key(&mut self, key: KeyId, value_key: &ValueKey<Op>) -> GraphResult<()> {
        if !self.external_seen.insert_if_absent(key, ()) {
            return Ok(());
        }
        match self.view.locate(key) {
            Some((g, v)) => self.mark(g, v.index()),
            None if self.undefined == Undefined::External => self.external_list.push((key, value_key.clone())),
            None => return Err(self.view.unresolved(key)),
        }
        Ok(())
    }

    /// Marks local value `v` of graph `g` and schedules it for a sweep.
    fn mark(&mut self, g: usize, v: usize) {
        let needed = &mut self.needed[g];
        if needed.is_empty() {
            needed.resize(self.graphs[g].value_count());
        }
        if needed.test_and_set(v) {
            return;
        }
        match &mut self.pending[g] {
            Some((lo, hi)) => {
                *lo = (*lo).min(v);
                *hi = (*hi).max(v);
            }
            p @ None => {
                *p = Some((v, v));
                self.queue.push(g);
            }
        }
    }

    fn sweep(&mut self) -> GraphResult<()> {
        if self.single {
            return self.sweep_single();
        }
        let graphs = self.graphs;
        let mut poll = Poll::new();
        while let Some(g) = self.queue.pop() {
            let Some((mut lo, hi)) = self.pending[g].take() else { continue };
            let graph = &*graphs[g];
            if self.expanded[g].is_empty() {
                self.expanded[g].resize(graph.operation_count());
            }
            let mut v = hi + 1;
            while v > lo {
                v -= 1;
                if !self.needed[g].get(v) {
                    continue;
                }
                match graph.local_def(LocalValueId::new(v)) {
                    LocalDef::Input(i) => {
                        self.need_input(graph.value_key[LocalValueId::new(v)], &graph.input_keys[i as usize])
                    }
                    LocalDef::Output(op, _) => {
                        if self.expanded[g].test_and_set(op.index()) {
                            continue;
                        }
                        poll.tick()?;
                        let first = graph.value_key[graph.op_first_output[op]];
                        // A key defined twice in one fragment (a repeated operation) keeps
                        // its earliest definer, which this descending sweep reaches last:
                        // emit then reads each fragment's columns in increasing order (key
                        // order is first-definition order), not jumping back to later copies.
                        match self.defs.get(first) {
                            Some((dg, dop)) if dg == g as u32 && op < dop => {
                                self.defs.insert(first, (g as u32, op));
                            }
                            Some(_) => {}
                            None => {
                                self.defs.insert(first, (g as u32, op));
                                self.def_values += output_count(graph, op);
                            }
                        }
                        for r in graph.op_input_refs(op) {
                            match r {
                                InputRef::Local(u) => {
                                    // Operands come earlier: this sweep reaches them.
                                    let u = u.index();
                                    if !self.needed[g].test_and_set(u) {
                                        lo = lo.min(u);
                                    }
                                }
                                InputRef::External(i) => match &graph.externals[i as usize] {
                                    ValueKey::Input(k) => self.need_input(graph.external_key[i as usize], k),
                                    key @ ValueKey::Derived { .. } => {
                                        self.need_key(graph.external_key[i as usize], key)?
                                    }
                                },
                            }
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Phase two: inputs first, then operations in key order (a topological order).
    fn emit(mut self, out_ids: &[KeyId]) -> GraphResult<MaterializedGraph<Op>> {
        if self.single {
            if let Some(out) = self.emit_in_local_order(out_ids)? {
                return Ok(out);
            }
            self.defs_from_expanded();
        }
        let graphs = self.graphs;
        let n_ops = self.defs.len();
        let n_externals = self.external_list.len();
        let mut out = MaterializedGraph {
            interner: Arc::clone(self.view.interner()),
            value_key: KeyRun::with_room(self.def_values + self.input_list.len() + n_externals),
            value_op: IdVec::from_raw(huge_vec(self.def_values + self.input_list.len() + n_externals)),
            own_ops: IdVec::new(),
            store_ops: None,
            op_key: KeyRun::with_room(n_ops),
            op_inputs: ListPool::with_capacity_huge(n_ops, 2 * n_ops),
            op_role: IdVec::new(),
            roles: vec![OperationRole::Primary],
            op_first_output: IdVec::from_raw(huge_vec(n_ops)),
            inputs: Vec::with_capacity(self.input_list.len()),
            input_keys: Vec::with_capacity(self.input_list.len()),
            externals: Vec::with_capacity(n_externals),
            external_keys: Vec::with_capacity(n_externals),
            outputs: Vec::new(),
        };
        let key_space = self.view.interner().value_count();
        let mut vid: KeyMap<ValueId> =
            KeyMap::with_range(0..key_space, self.def_values + self.input_list.len() + n_externals);
        let mut input_list = self.input_list;
        input_list.sort_unstable_by_key(|(k, _)| *k);
        for (key, input) in input_list {
            let v = out.value_op.push(None);
            out.value_key.push(key);
            out.inputs.push(v);
            out.input_keys.push(input);
            vid.insert(key, v);
        }
        let mut external_list = self.external_list;
        external_list.sort_unstable_by_key(|(k, _)| *k);
        for (key, external) in external_list {
            let v = out.value_op.push(None);
            out.value_key.push(key);
            out.externals.push(v);
            out.external_keys.push(external);
            vid.insert(key, v);
        }
        let mut role_index: FxHashMap<OperationRole, u32> = FxHashMap::default();
        role_index.insert(OperationRole::Primary, 0);
        let mut role_map: Vec<Vec<Option<u32>>> = vec![Vec::new(); graphs.len()];
        let entries = self.defs.sorted_entries();
        // A large graph reads its operations from the store: the chunks of its operation
        // keys, which `entries` lists in increasing order (an operation's id increases with
        // its first output key). Only if every such chunk is live, as it is while the
        // fragments that define them are.
        if n_ops >= STORE_OPS_MIN {
            let chunks = entries.iter().map(|&(_, (g, op))| graphs[g as usize].op_key[op].index() >> CHUNK_BITS);
            let mut last = usize::MAX;
            let distinct = chunks.filter(move |&c| std::mem::replace(&mut last, c) != c);
            out.store_ops = out.interner.read().store_ops_of(distinct);
        }
        if out.store_ops.is_none() {
            out.own_ops.reserve(n_ops);
        }
        let mut far = FarOperands::new(out.value_op.len());
        let mut prefetch = false;
        let mut poll = Poll::new();
        for (at, &(_, (g, op))) in entries.iter().enumerate() {
            poll.tick()?;
            if far.block_full() {
                prefetch = far.decide();
            }
            if prefetch {
                prefetch_operands(graphs, &entries, at, &vid);
            }
            let graph = &*graphs[g as usize];
            let id = out.op_key.next_id().ok_or(GraphError::IdSpaceExhausted { space: "materialized operation" })?;
            let n_out = output_count(graph, op);
            if out.value_op.len() + n_out > <ValueId as crate::Id>::MAX_INDEX {
                return Err(GraphError::IdSpaceExhausted { space: "materialized value" });
            }
            let reader = out.value_op.len();
            for r in graph.op_input_refs(op) {
                let v = vid.get(graph.input_key_id(r)).expect("operands precede their users in key order");
                far.note(v.index(), reader);
                out.op_inputs.push_item(v);
            }
            if !out.op_inputs.finish_list() {
                out.op_inputs.abandon_list();
                return Err(GraphError::IdSpaceExhausted { space: "materialized operand pool" });
            }
            let local_role = graph.role_id(op) as usize;
            let roles = &mut role_map[g as usize];
            if roles.is_empty() {
                roles.resize(graph.roles.len(), None);
            }
            // `Primary` is role 0 of every graph and of the result: no lookup for it.
            let role = match roles[local_role] {
                _ if local_role == 0 => 0,
                Some(r) => r,
                None => {
                    let role = &graph.roles[local_role];
                    let r = *role_index.entry(role.clone()).or_insert_with(|| {
                        out.roles.push(role.clone());
                        out.roles.len() as u32 - 1
                    });
                    roles[local_role] = Some(r);
                    r
                }
            };
            if out.store_ops.is_none() {
                out.own_ops.push(graph.op(op).clone());
            }
            out.op_key.push(graph.op_key[op]);
            if !out.op_role.is_empty() {
                out.op_role.push(role);
            } else if role != 0 {
                // The first operation that is not `Primary`: the column starts here,
                // with every earlier operation's `Primary`.
                out.op_role.reserve(n_ops);
                out.op_role.extend(std::iter::repeat_n(0, id.index()));
                out.op_role.push(role);
            }
            out.op_first_output.push(ValueId::new(out.value_op.len()));
            let first_local = graph.op_first_output[op].index();
            for slot in 0..n_out {
                let v = out.value_op.push(Some(id));
                let key = graph.value_key[LocalValueId::new(first_local + slot)];
                out.value_key.push(key);
                vid.insert(key, v);
            }
        }
        out.outputs = out_ids.iter().map(|&k| vid.get(k).expect("every output was marked")).collect();
        Ok(out)
    }
}

/// The number of outputs of `graph`'s operation `op`, from the fragment's value columns:
/// its outputs are the consecutive values from its first output that it defines. Marking
/// and emit read this instead of `op.output_count()`, which would read the operation
/// through the store (`op_key` → chunk → operation), a cache miss per operation on a large
/// graph; `value_op` is read where emit reads `value_key` anyway.
#[inline]
fn output_count<Op: GraphOperation>(graph: &Graph<Op>, op: LocalOperationId) -> usize {
    output_count_from(graph, op, graph.op_first_output[op].index())
}

/// [`output_count`] of `op`, whose first-output index `first` the caller has read.
#[inline]
fn output_count_from<Op: GraphOperation>(graph: &Graph<Op>, op: LocalOperationId, first: usize) -> usize {
    let defined = graph.value_op.raw();
    let defines = |v: usize| defined.get(v) == Some(&Some(op));
    // Nearly every operation has one output: two tests settle it without a loop along the
    // column.
    let n = if !defines(first) {
        0
    } else if !defines(first + 1) {
        1
    } else {
        2 + defined[first + 2..].iter().take_while(|&&d| d == Some(op)).count()
    };
    debug_assert_eq!(n, graph.op(op).output_count());
    n
}

/// Prefetches for emit, in two stages: the operands' keys of the operation `2 * AHEAD`
/// after `at`, then (cached by now) those keys' entries in `vid` for the one `AHEAD` after.
fn prefetch_operands<Op: GraphOperation>(
    graphs: &[Arc<Graph<Op>>],
    entries: &[(KeyId, (u32, LocalOperationId))],
    at: usize,
    vid: &KeyMap<ValueId>,
) {
    if let Some(&(_, (g, op))) = entries.get(at + 2 * AHEAD) {
        graphs[g as usize].prefetch_operand_keys(op);
    }
    if let Some(&(_, (g, op))) = entries.get(at + AHEAD) {
        let graph = &*graphs[g as usize];
        for r in graph.op_input_refs(op) {
            vid.prefetch(graph.input_key_id(r));
        }
    }
}

impl<Op: GraphOperation> MaterializedGraph<Op> {
    pub(crate) fn fmt_operation(&self, f: &mut fmt::Formatter<'_>, op: OperationId) -> fmt::Result {
        let outs: Vec<String> = self.op_outputs(op).map(|v| format!("{v:?}")).collect();
        write!(f, "{} = {}", outs.join(", "), Label(self.op(op)))?;
        let role = &self.roles[self.role_id(op) as usize];
        if role.is_linearized() {
            write!(f, " [{role}]")?;
        }
        for (i, v) in self.op_inputs.get(op.index()).iter().enumerate() {
            write!(f, "{}{v:?}", if i == 0 { " " } else { ", " })?;
        }
        Ok(())
    }
}
