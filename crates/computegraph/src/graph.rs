//! Fragments: [`Graph`] and its [`GraphBuilder`](crate::GraphBuilder).
//!
//! A graph owns its local values and operations as columns (struct of arrays) and may
//! refer to values of other graphs by [`ValueKey`] (`ValueRef::External`). Operand lists
//! of all operations sit in one pool.
//!
//! Invariants of a built [`Graph`] (checked by [`Graph::verify`]):
//! - an operation refers only to local values created before it, so local id order is
//!   a topological order;
//! - every operation's input count equals its `input_count()`, its outputs are
//!   `output_count()` consecutive local values, and a `Linearized` mask has one flag per input;
//! - every local value and operation has its interned key (`value_key`, `op_key`), and
//!   the key of output `s` of an operation is its operation key's output `s`.
//!
//! Columns are kept small, since a 10^6-operation build is bound by writing them (their
//! first-touch page faults are about as costly as the interning itself): a value records
//! only its defining operation (`value_op`, `None` for an input: `inputs` is increasing, so
//! an input's index is a binary search, and an output's slot is its id minus its
//! operation's first output); an operand is 4 bytes ([`PackedInputRef`], so a graph holds
//! fewer than 2^31 local values and 2^31 external references); `op_role` stays empty while
//! every operation is `Primary`.
//!
//! The builder (`builder.rs`) appends to these columns without locking and interns the
//! pending tail in one write lock on [`GraphBuilder::build`](crate::GraphBuilder::build) (or when a key is asked for),
//! and, past `STORE_OPS_MIN` operations, a batch at a time as it appends: a large
//! graph's operations are then only in the interner's store (`own_ops` keeps the pending
//! batch), and a built one reads them there.

use std::fmt;
use std::sync::{Arc, OnceLock};

use smallvec::SmallVec;

use crate::chunk::StoreOps;
use crate::error::{GraphError, GraphResult};
use crate::id::{IdVec, ListPool};
use crate::id::{KeyId, OperationKeyId};
use crate::key::{KeyInterner, OperationKey, ValueKey};
use crate::keymap::KeyMap;
use crate::operation::{GraphOperation, OperationRole};
use crate::prefetch::prefetch_entry;

crate::define_id!(
    /// A value of one graph (fragment). Meaningful only inside that graph.
    pub struct LocalValueId = "v"
);
crate::define_id!(
    /// An operation of one graph (fragment).
    pub struct LocalOperationId = "op"
);

/// An operand of an operation being added: a value of this graph or any value by key.
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{compile, materialize_merge, resolve, GraphBuilder, OperationRole::Primary, ValueRef::{External, Local}};
/// use scalar::{ScalarKey, ScalarOp};
///
/// let mut a = GraphBuilder::<ScalarOp>::new();
/// let x = a.add_input(ScalarKey::var(0));
/// let e = a.add_operation(ScalarOp::Exp, vec![Local(x)], Primary)[0];
/// let first = Arc::new(a.build());
///
/// // Another fragment uses exp(x) by key, and a local value of its own.
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// b.add_parent(first.clone());
/// let y = b.add_input(ScalarKey::var(1));
/// let p = b.add_operation(ScalarOp::Mul, vec![External(first.global_key(e)), Local(y)], Primary)[0];
/// let second = Arc::new(b.build());
///
/// let program = compile(&materialize_merge(&resolve(vec![second.clone()]), &[second.global_key(p)]));
/// assert_eq!(program.eval(&mut (), &[&0.0, &3.0]), vec![3.0]);
/// ```
pub enum ValueRef<Op: GraphOperation> {
    /// A value of the graph being built.
    Local(LocalValueId),
    /// A value defined elsewhere (another fragment, a parent) or a graph input, by key.
    External(ValueKey<Op>),
}

impl<Op: GraphOperation> Clone for ValueRef<Op> {
    fn clone(&self) -> Self {
        match self {
            ValueRef::Local(v) => ValueRef::Local(*v),
            ValueRef::External(k) => ValueRef::External(k.clone()),
        }
    }
}
impl<Op: GraphOperation> PartialEq for ValueRef<Op> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (ValueRef::Local(a), ValueRef::Local(b)) => a == b,
            (ValueRef::External(a), ValueRef::External(b)) => a == b,
            _ => false,
        }
    }
}
impl<Op: GraphOperation> Eq for ValueRef<Op> {}
impl<Op: GraphOperation> fmt::Debug for ValueRef<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueRef::Local(v) => write!(f, "Local({v:?})"),
            ValueRef::External(k) => write!(f, "External({k:?})"),
        }
    }
}

/// An operand of a graph's operation: a local value or an index into its externals column.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum InputRef {
    Local(LocalValueId),
    External(u32),
}

/// An [`InputRef`] as the operand pool stores it, in 4 bytes: the local value's index, or
/// the external index with the top bit set.
#[derive(Copy, Clone, PartialEq, Eq)]
pub(crate) struct PackedInputRef(u32);

/// Tags an external index in a [`PackedInputRef`].
const EXTERNAL_BIT: u32 = 1 << 31;

/// Built graphs with at least this many operations read them from the interner's store
/// instead of keeping a copy ([`Graph::read_ops_from_store`]); smaller ones keep their own,
/// since sharing copies the operations of the store's open chunk (up to
/// [`CHUNK`](crate::chunk::CHUNK) of them).
pub(crate) const STORE_OPS_MIN: usize = 4 * crate::chunk::CHUNK;

/// Most local values a graph may hold, and most external references: a packed operand
/// spends one bit on which of the two it names.
pub(crate) const MAX_LOCAL_VALUES: usize = EXTERNAL_BIT as usize;

impl PackedInputRef {
    #[inline(always)]
    pub(crate) fn local(v: LocalValueId) -> Self {
        debug_assert!(v.index() < MAX_LOCAL_VALUES);
        PackedInputRef(v.index() as u32)
    }

    #[inline(always)]
    pub(crate) fn external(i: usize) -> Self {
        debug_assert!(i < MAX_LOCAL_VALUES);
        PackedInputRef(i as u32 | EXTERNAL_BIT)
    }

    /// The operand it stands for.
    #[inline(always)]
    pub(crate) fn get(self) -> InputRef {
        if self.0 & EXTERNAL_BIT == 0 {
            InputRef::Local(LocalValueId::new(self.0 as usize))
        } else {
            InputRef::External(self.0 & !EXTERNAL_BIT)
        }
    }
}

/// What defines a local value (decoded from the graph's `value_op` column by
/// [`Graph::local_def`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum LocalDef {
    /// The `i`-th input declared with `add_input`.
    Input(u32),
    /// Output `slot` of a local operation.
    Output(LocalOperationId, u8),
}

/// How a value of a graph is defined, as returned by [`Graph::value_def`].
///
/// ```
/// use computegraph::{GraphBuilder, LocalValueDef, OperationRole::Primary, ValueRef::Local};
/// use scalar::{ScalarKey, ScalarOp};
///
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// let sc = b.add_operation(ScalarOp::SinCos, vec![Local(x)], Primary);
/// let g = b.build();
/// assert_eq!(g.value_def(x), Some(LocalValueDef::Input(&ScalarKey::var(0))));
/// assert!(matches!(g.value_def(sc[1]), Some(LocalValueDef::Output { output_slot: 1, .. })));
/// ```
#[derive(Debug, PartialEq, Eq)]
pub enum LocalValueDef<'a, Op: GraphOperation> {
    /// A graph input with this key.
    Input(&'a Op::InputKey),
    /// Output `slot` of an operation of the graph.
    Output {
        /// The producing operation.
        operation: LocalOperationId,
        /// Which of its outputs.
        output_slot: u8,
    },
}

/// An immutable computation-graph fragment. Build one with [`GraphBuilder`](crate::GraphBuilder).
///
/// ```
/// use computegraph::{GraphBuilder, ValueRef::Local, OperationRole::Primary};
/// use scalar::{ScalarOp, ScalarKey};
///
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// let y = b.add_operation(ScalarOp::Mul, vec![Local(x), Local(x)], Primary)[0];
/// b.set_outputs(vec![y]);
/// let g = b.build();
/// for op in g.operations() {
///     assert_eq!(op.operation(), &ScalarOp::Mul);
///     assert_eq!(op.outputs().collect::<Vec<_>>(), vec![y]);
/// }
/// assert_eq!(g.to_string().lines().nth(2).unwrap().trim(), "v1 = mul v0, v0");
/// ```
pub struct Graph<Op: GraphOperation> {
    pub(crate) interner: Arc<KeyInterner<Op>>,
    /// The operation defining each value, `None` for an input (see [`Graph::local_def`]).
    pub(crate) value_op: IdVec<LocalValueId, Option<LocalOperationId>>,
    /// Interned key of each value; shorter than `value_op` only inside a builder.
    pub(crate) value_key: IdVec<LocalValueId, KeyId>,
    /// The operations from local id `ops_base` on (read them with [`Graph::op`]): all of
    /// a small graph's; inside a builder, past [`STORE_OPS_MIN`] operations, only those
    /// not interned yet (the builder interns them a batch at a time, so this is a window
    /// of at most `STORE_OPS_MIN`); empty once `store_ops` reads them from the store.
    pub(crate) own_ops: Vec<Op>,
    /// The local id of `own_ops[0]`.
    pub(crate) ops_base: usize,
    /// A built graph's operations, read in place from the interner's store (ADR 0017).
    pub(crate) store_ops: Option<StoreOps<Op>>,
    /// Interned key of each operation; shorter than `ops` only inside a builder.
    pub(crate) op_key: IdVec<LocalOperationId, OperationKeyId>,
    pub(crate) op_inputs: ListPool<PackedInputRef>,
    /// Index into `roles` of each operation's role; empty while every operation is
    /// `Primary` (read it with [`Graph::role_id`]).
    pub(crate) op_role: IdVec<LocalOperationId, u32>,
    pub(crate) op_first_output: IdVec<LocalOperationId, LocalValueId>,
    /// Distinct roles used by this graph; `roles[0]` is `Primary`.
    pub(crate) roles: Vec<OperationRole>,
    pub(crate) externals: Vec<ValueKey<Op>>,
    /// Interned id of each external; shorter than `externals` only inside a builder.
    pub(crate) external_key: Vec<KeyId>,
    pub(crate) input_keys: Vec<Op::InputKey>,
    /// The inputs in declaration order, which is increasing id order.
    pub(crate) inputs: Vec<LocalValueId>,
    pub(crate) outputs: Vec<LocalValueId>,
    pub(crate) parents: Vec<Arc<Graph<Op>>>,
    /// Key id → first declared output with that key; built on first lookup.
    output_index: OnceLock<KeyMap<LocalValueId>>,
    /// Key id → first local value with that key; built on the first lookup of a key that
    /// is not a declared output (a dense array over the graph's key range when compact).
    index: OnceLock<KeyMap<LocalValueId>>,
    /// The interner chunks holding this graph's keys, pinned while it lives (sorted tags;
    /// see `docs/adr/0010-interner-reclamation.md`). A small graph's fit inline.
    pub(crate) pins: SmallVec<[u32; 2]>,
}

/// One operation of a [`Graph`], as yielded by [`Graph::operations`].
///
/// ```
/// use computegraph::{GraphBuilder, OperationRole::Primary, ValueRef::Local};
/// use scalar::{ScalarKey, ScalarOp};
///
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// let y = b.add_operation(ScalarOp::Add, vec![Local(x), Local(x)], Primary)[0];
/// let g = b.build();
/// let op = g.operations().next().unwrap();
/// assert_eq!(*op.operation(), ScalarOp::Add);
/// assert_eq!(op.local_inputs().collect::<Vec<_>>(), vec![Some(x), Some(x)]);
/// assert_eq!(op.outputs().collect::<Vec<_>>(), vec![y]);
/// assert_eq!(op.key(), g.operation(op.id()).key());
/// ```
pub struct OperationView<'a, Op: GraphOperation> {
    graph: &'a Graph<Op>,
    id: LocalOperationId,
}

impl<'a, Op: GraphOperation> OperationView<'a, Op> {
    /// The operation's id in its graph.
    #[inline]
    pub fn id(&self) -> LocalOperationId {
        self.id
    }
    /// The operation.
    #[inline]
    pub fn operation(&self) -> &'a Op {
        self.graph.op(self.id)
    }
    /// The operands, in order.
    #[inline]
    pub fn inputs(&self) -> impl ExactSizeIterator<Item = ValueRef<Op>> + 'a {
        let g = self.graph;
        g.op_input_refs(self.id).map(move |r| g.to_value_ref(r))
    }
    /// The operands as local values, `None` for external ones: like [`Self::inputs`]
    /// without cloning external keys.
    #[inline]
    pub fn local_inputs(&self) -> impl ExactSizeIterator<Item = Option<LocalValueId>> + 'a {
        self.graph.op_input_refs(self.id).map(|r| match r {
            InputRef::Local(v) => Some(v),
            InputRef::External(_) => None,
        })
    }
    /// The interned key ids of the operands (local or external), in order.
    pub fn input_key_ids(&self) -> impl ExactSizeIterator<Item = KeyId> + 'a {
        let g = self.graph;
        g.op_input_refs(self.id).map(move |r| g.input_key_id(r))
    }
    /// The output values (consecutive local ids).
    #[inline]
    pub fn outputs(&self) -> impl ExactSizeIterator<Item = LocalValueId> + 'a {
        self.graph.op_outputs(self.id)
    }
    /// The role.
    #[inline]
    pub fn role(&self) -> &'a OperationRole {
        &self.graph.roles[self.graph.role_id(self.id) as usize]
    }
    /// The interned key of the operation application.
    pub fn key(&self) -> OperationKey<Op> {
        self.graph.operation_key(self.id)
    }
}

/// A [`Graph`] in which no two local values share a key, from [`Graph::distinct_keys`]
/// (the only way to make one). It is its own deduplicated form: each key is one local
/// value, so a column over local values is a column over keys, with local ids in
/// topological order. It dereferences to the graph.
#[derive(Debug)]
pub struct DistinctKeys<'g, Op: GraphOperation> {
    graph: &'g Graph<Op>,
}

impl<Op: GraphOperation> Clone for DistinctKeys<'_, Op> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<Op: GraphOperation> Copy for DistinctKeys<'_, Op> {}

impl<Op: GraphOperation> std::ops::Deref for DistinctKeys<'_, Op> {
    type Target = Graph<Op>;
    fn deref(&self) -> &Graph<Op> {
        self.graph
    }
}

impl<Op: GraphOperation> Graph<Op> {
    pub(crate) fn empty(interner: Arc<KeyInterner<Op>>) -> Self {
        Graph {
            interner,
            value_op: IdVec::new(),
            value_key: IdVec::new(),
            own_ops: Vec::new(),
            ops_base: 0,
            store_ops: None,
            op_key: IdVec::new(),
            op_inputs: ListPool::default(),
            op_role: IdVec::new(),
            op_first_output: IdVec::new(),
            roles: vec![OperationRole::Primary],
            externals: Vec::new(),
            external_key: Vec::new(),
            input_keys: Vec::new(),
            inputs: Vec::new(),
            outputs: Vec::new(),
            parents: Vec::new(),
            output_index: OnceLock::new(),
            index: OnceLock::new(),
            pins: SmallVec::new(),
        }
    }

    /// The interner this graph's keys belong to.
    pub fn interner(&self) -> &Arc<KeyInterner<Op>> {
        &self.interner
    }
    /// Number of local values.
    pub fn value_count(&self) -> usize {
        self.value_op.len()
    }
    /// Number of operations.
    pub fn operation_count(&self) -> usize {
        // One first output per operation, whichever column holds the operations.
        self.op_first_output.len()
    }

    /// Operation `op`, from the graph's own column or the store.
    ///
    /// # Panics
    /// If `op` is not an operation of this graph.
    #[inline(always)]
    pub(crate) fn op(&self, op: LocalOperationId) -> &Op {
        match &self.store_ops {
            None => &self.own_ops[op.index() - self.ops_base],
            Some(store) => store.get(self.op_key[op]),
        }
    }

    /// Stops keeping the operations of a built graph of at least [`STORE_OPS_MIN`]
    /// operations: they are read from the interner's store, which holds each distinct
    /// operation once (ADR 0017, step 3). Every operation must have its key, and `pins`
    /// must be final.
    pub(crate) fn read_ops_from_store(&mut self) {
        if self.store_ops.is_some() || self.operation_count() < STORE_OPS_MIN {
            return;
        }
        debug_assert_eq!(self.op_key.len(), self.operation_count());
        let store = self.interner.read().store_ops(&self.pins);
        self.store_ops = Some(store);
        self.own_ops = Vec::new();
        self.ops_base = 0;
    }
    /// The declared inputs, in declaration order.
    pub fn inputs(&self) -> &[LocalValueId] {
        &self.inputs
    }
    /// The key of each declared input, in declaration order.
    pub fn input_keys(&self) -> &[Op::InputKey] {
        &self.input_keys
    }
    /// The outputs set with `set_outputs`.
    pub fn outputs(&self) -> &[LocalValueId] {
        &self.outputs
    }
    /// The graphs this one resolves external keys against.
    pub fn parents(&self) -> &[Arc<Graph<Op>>] {
        &self.parents
    }

    /// The operations, in topological (creation) order.
    pub fn operations(&self) -> impl DoubleEndedIterator<Item = OperationView<'_, Op>> + ExactSizeIterator {
        (0..self.operation_count()).map(move |i| OperationView { graph: self, id: LocalOperationId::new(i) })
    }

    /// One operation.
    ///
    /// # Panics
    /// If `id` is not an operation of this graph.
    pub fn operation(&self, id: LocalOperationId) -> OperationView<'_, Op> {
        assert!(id.index() < self.operation_count(), "{id:?} is not an operation of this graph");
        OperationView { graph: self, id }
    }

    /// How a local value is defined, or `None` if `value` is not a value of this graph.
    pub fn value_def(&self, value: LocalValueId) -> Option<LocalValueDef<'_, Op>> {
        self.value_op.get(value)?;
        Some(match self.local_def(value) {
            LocalDef::Input(i) => LocalValueDef::Input(&self.input_keys[i as usize]),
            LocalDef::Output(operation, output_slot) => LocalValueDef::Output { operation, output_slot },
        })
    }

    /// The global key of a local value.
    ///
    /// # Panics
    /// If `value` is not a value of this graph; see [`Graph::try_global_key`].
    pub fn global_key(&self, value: LocalValueId) -> ValueKey<Op> {
        self.try_global_key(value).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The global key of a local value, or an error if it is not a value of this graph.
    pub fn try_global_key(&self, value: LocalValueId) -> GraphResult<ValueKey<Op>> {
        if value.index() >= self.value_op.len() {
            return Err(GraphError::UnknownLocalValue { value: format!("{value:?}"), len: self.value_op.len() });
        }
        Ok(match self.local_def(value) {
            LocalDef::Input(i) => ValueKey::Input(self.input_keys[i as usize].clone()),
            LocalDef::Output(op, slot) => {
                // An operation's output keys are consecutive, so the first is this one's
                // minus its slot (no need to read the operation's first-output column).
                let first_output = KeyId::new(self.value_key[value].index() - slot as usize);
                let operation = OperationKey::from_parts(
                    self.interner.id(),
                    self.op_key[op],
                    first_output,
                    self.op_output_count(op),
                );
                ValueKey::Derived { operation, output_slot: slot }
            }
        })
    }

    /// The interned id of a local value's key.
    ///
    /// # Panics
    /// If `value` is not a value of this graph.
    pub fn key_id(&self, value: LocalValueId) -> KeyId {
        self.value_key[value]
    }

    /// This graph as its own deduplicated form, or `None` if two of its local values share
    /// a key.
    ///
    /// Two values share a key when the same operation was added twice, or added again
    /// after an identical one elsewhere made its key first. Without that, every key is one
    /// local value, as every key is one value of a
    /// [`MaterializedGraph`](crate::MaterializedGraph), and a pass that keeps one entry
    /// per key (the transpose's cotangents) can keep it per local value. With it, such a
    /// pass reads the graph's materialization
    /// ([`try_materialize_fragment`](crate::try_materialize_fragment)), where
    /// materialize's CSE made the copies one value.
    ///
    /// Cost: one scan when keys strictly increase with local ids (as they mostly do in a
    /// graph built in one go); otherwise the graph's key index (built once, shared with
    /// lookups of keys in this graph) and a scan over it.
    ///
    /// ```
    /// use computegraph::{GraphBuilder, KeyInterner, OperationRole::Primary, ValueRef::Local};
    /// use scalar::{ScalarKey, ScalarOp};
    ///
    /// let sines = |n: usize| {
    ///     let mut b = GraphBuilder::<ScalarOp>::with_interner(KeyInterner::new());
    ///     let x = b.add_input(ScalarKey::var(0));
    ///     let y: Vec<_> = (0..n).map(|_| b.add_operation(ScalarOp::Sin, vec![Local(x)], Primary)[0]).collect();
    ///     (b.build(), y)
    /// };
    /// let (once, _) = sines(1);
    /// let (twice, y) = sines(2);
    /// assert_eq!(twice.key_id(y[0]), twice.key_id(y[1]));
    /// assert!(once.distinct_keys().is_some() && twice.distinct_keys().is_none());
    /// ```
    pub fn distinct_keys(&self) -> Option<DistinctKeys<'_, Op>> {
        let keys = self.value_key.raw();
        let distinct = keys.windows(2).all(|w| w[0] < w[1]) || {
            // The graph's own key index (first local value per key): distinct when every
            // value is the first of its key.
            let index = self.value_index();
            self.value_key.iter_enumerated().all(|(v, &k)| index.get(k) == Some(v))
        };
        distinct.then_some(DistinctKeys { graph: self })
    }

    pub(crate) fn operation_key(&self, op: LocalOperationId) -> OperationKey<Op> {
        let output_count = self.op_output_count(op);
        // An operation without outputs has no first output key; any id serves, since
        // `OperationKey::output_key_id` never yields one for it.
        let first_output = if output_count > 0 { self.value_key[self.op_first_output[op]] } else { KeyId::new(0) };
        OperationKey::from_parts(self.interner.id(), self.op_key[op], first_output, output_count)
    }

    #[inline]
    pub(crate) fn op_outputs(&self, op: LocalOperationId) -> impl ExactSizeIterator<Item = LocalValueId> + use<Op> {
        let first = self.op_first_output[op].index();
        (first..first + self.op_output_count(op)).map(LocalValueId::new)
    }

    /// The number of outputs of `op`, from the value columns: its outputs are the values
    /// from its first output on that it defines. This reads next to what the caller
    /// reads (an operation read from the store is a random access), and needs no
    /// operation, which a builder past [`STORE_OPS_MIN`] operations no longer keeps.
    #[inline]
    pub(crate) fn op_output_count(&self, op: LocalOperationId) -> usize {
        let first = self.op_first_output[op].index();
        self.value_op.raw()[first..].iter().take_while(|&&d| d == Some(op)).count()
    }

    /// What defines `value`.
    ///
    /// # Panics
    /// If `value` is not a value of this graph.
    #[inline]
    pub(crate) fn local_def(&self, value: LocalValueId) -> LocalDef {
        match self.value_op[value] {
            Some(op) => LocalDef::Output(op, (value.index() - self.op_first_output[op].index()) as u8),
            None => {
                let i = self.inputs.binary_search(&value).expect("a value without an operation is an input");
                LocalDef::Input(i as u32)
            }
        }
    }

    /// The index into `roles` of an operation's role.
    #[inline]
    pub(crate) fn role_id(&self, op: LocalOperationId) -> u32 {
        if self.op_role.is_empty() { 0 } else { self.op_role[op] }
    }

    /// Whether the role column is empty or has one entry per operation.
    pub(crate) fn role_column_ok(&self) -> bool {
        self.op_role.is_empty() || self.op_role.len() == self.operation_count()
    }

    /// An operation's operands, in order.
    #[inline]
    pub(crate) fn op_input_refs(
        &self,
        op: LocalOperationId,
    ) -> impl ExactSizeIterator<Item = InputRef> + DoubleEndedIterator + '_ {
        self.op_inputs.get(op.index()).iter().map(|r| r.get())
    }

    /// Number of operand lists (one per operation once built).
    pub(crate) fn op_input_lists(&self) -> usize {
        self.op_inputs.len()
    }

    pub(crate) fn to_value_ref(&self, r: InputRef) -> ValueRef<Op> {
        match r {
            InputRef::Local(v) => ValueRef::Local(v),
            InputRef::External(i) => ValueRef::External(self.externals[i as usize].clone()),
        }
    }

    /// Hints that the keys of `op`'s local operands will be read soon (those not keyed
    /// yet included: the hint never dereferences).
    #[inline]
    pub(crate) fn prefetch_operand_keys(&self, op: LocalOperationId) {
        for r in self.op_input_refs(op) {
            if let InputRef::Local(l) = r {
                prefetch_entry(self.value_key.raw(), l.index());
            }
        }
    }

    pub(crate) fn input_key_id(&self, r: InputRef) -> KeyId {
        match r {
            InputRef::Local(v) => self.value_key[v],
            InputRef::External(i) => self.external_key[i as usize],
        }
    }

    /// A local value whose key is `key`, if this graph defines it. Declared outputs are
    /// found through their own index (the first declared output with the key wins), other
    /// values through a full index built on first use (the first local value wins); so a
    /// key that a declared output and an earlier value share resolves to the output.
    pub(crate) fn find_key(&self, key: KeyId) -> Option<LocalValueId> {
        // Both indexes are key-indexed arrays when the keys are compact, so that looking up
        // many outputs in key order (a DAG with millions of sinks) reads them in order.
        let outputs =
            self.output_index.get_or_init(|| key_index(|| self.outputs.iter().map(|&v| (self.value_key[v], v))));
        if let Some(v) = outputs.get(key) {
            return Some(v);
        }
        self.value_index().get(key)
    }

    /// Key id → the first local value with that key, built on first use.
    fn value_index(&self) -> &KeyMap<LocalValueId> {
        self.index.get_or_init(|| key_index(|| self.value_key.iter_enumerated().map(|(v, &k)| (k, v))))
    }

    /// Bytes held by this graph's columns (not counting parents or the interner): the sum
    /// of [`Graph::column_bytes`].
    pub fn heap_bytes(&self) -> usize {
        self.column_bytes().iter().map(|&(_, b)| b).sum()
    }

    /// Bytes held by each of this graph's columns, by name (allocated capacity; the key
    /// indexes only once a lookup has built them). What `docs/ARCHITECTURE.md` states per
    /// node, and the memory report of `benches` prints.
    pub fn column_bytes(&self) -> Vec<(&'static str, usize)> {
        let index = |i: &OnceLock<KeyMap<LocalValueId>>| i.get().map_or(0, KeyMap::heap_bytes);
        vec![
            ("value_op", self.value_op.heap_bytes()),
            ("value_key", self.value_key.heap_bytes()),
            (
                "ops",
                self.own_ops.capacity() * std::mem::size_of::<Op>()
                    + self.store_ops.as_ref().map_or(0, StoreOps::heap_bytes),
            ),
            ("op_key", self.op_key.heap_bytes()),
            ("op_inputs (starts)", self.op_inputs.starts_bytes()),
            ("op_inputs (operands)", self.op_inputs.items_bytes()),
            ("op_role", self.op_role.heap_bytes()),
            ("op_first_output", self.op_first_output.heap_bytes()),
            (
                "externals",
                self.externals.capacity() * std::mem::size_of::<ValueKey<Op>>() + self.external_key.capacity() * 4,
            ),
            ("input_keys", self.input_keys.capacity() * std::mem::size_of::<Op::InputKey>()),
            (
                "inputs, outputs, pins",
                (self.inputs.capacity() + self.outputs.capacity()) * 4
                    + if self.pins.spilled() { self.pins.capacity() * 4 } else { 0 },
            ),
            ("key indexes", index(&self.output_index) + index(&self.index)),
        ]
    }
}

/// A map from keys to the local values that have them (the first of several with one key).
/// `entries` gives the same entries every call.
fn key_index<I: Iterator<Item = (KeyId, LocalValueId)>>(entries: impl Fn() -> I) -> KeyMap<LocalValueId> {
    let (mut lo, mut hi, mut count) = (usize::MAX, 0, 0);
    for (k, _) in entries() {
        (lo, hi, count) = (lo.min(k.index()), hi.max(k.index() + 1), count + 1);
    }
    let mut map = KeyMap::with_range(lo.min(hi)..hi, count);
    for (k, v) in entries() {
        map.insert_if_absent(k, v);
    }
    map
}

/// Drops parent chains iteratively: a graph that holds the last reference to its parent
/// takes the parent's parents before the parent is dropped, so a chain of any length is
/// freed without recursion (and so without overflowing the stack).
///
/// A graph's pins on its interner's chunks are released first, which may reclaim them.
impl<Op: GraphOperation> Drop for Graph<Op> {
    fn drop(&mut self) {
        // The last holder of the interner takes it along: nothing to unpin, and no batch
        // of reclamation to run over keys that are about to go anyway.
        if !self.pins.is_empty() && Arc::strong_count(&self.interner) > 1 {
            let mut garbage = crate::key::Garbage::default();
            self.interner.write().unpin(&self.pins, &mut garbage);
            drop(garbage); // after the lock: dropping operations and keys runs user code
        }
        let mut stack = std::mem::take(&mut self.parents);
        while let Some(parent) = stack.pop() {
            if let Some(mut g) = Arc::into_inner(parent) {
                stack.append(&mut g.parents);
            }
        }
        self.keep_columns();
    }
}

/// The columns of a dropped fragment that its thread keeps for its next reserved build
/// ([`Graph::adopt_kept_columns`]), their entries cleared.
#[derive(Default)]
struct KeptColumns {
    value_op: Vec<Option<LocalOperationId>>,
    value_key: Vec<KeyId>,
    op_key: Vec<OperationKeyId>,
    op_first_output: Vec<LocalValueId>,
    input_starts: Vec<u32>,
    input_items: Vec<PackedInputRef>,
}

thread_local! {
    static KEPT_COLUMNS: std::cell::Cell<KeptColumns> = std::cell::Cell::new(KeptColumns::default());
}

/// Room in the value column this thread keeps (0 when it keeps none).
#[cfg(test)]
pub(crate) fn kept_value_op_capacity() -> usize {
    KEPT_COLUMNS.with(|k| {
        let kept = k.take();
        let n = kept.value_op.capacity();
        k.set(kept);
        n
    })
}

/// Fragments whose columns take fewer bytes than this are not kept: their blocks are
/// small enough for the allocator to reuse as they are (glibc's smallest mapping
/// threshold is 128 KiB).
const KEEP_MIN_BYTES: usize = 128 << 10;

impl<Op: GraphOperation> Graph<Op> {
    /// Keeps this fragment's columns for the thread's next reserved build when each is at
    /// most [`KEEP_MAX_BYTES`](crate::hugepages::KEEP_MAX_BYTES), they take at least
    /// [`KEEP_MIN_BYTES`] together, and they are larger than what the thread keeps.
    ///
    /// Why: a process that builds graph after graph (a bench loop, a service building one
    /// per request) frees and allocates the same few MiB of columns each time, and under
    /// glibc, once the free top of the heap exceeds the trim threshold (twice the largest
    /// mapped block freed so far), each drop gives them back to the kernel and the next
    /// build faults every page in again (docs/PERFORMANCE.md, "Issue 38: the build's warm
    /// page faults").
    fn keep_columns(&mut self) {
        let sizes = [
            self.value_op.heap_bytes(),
            self.value_key.heap_bytes(),
            self.op_key.heap_bytes(),
            self.op_first_output.heap_bytes(),
            self.op_inputs.starts_bytes(),
            self.op_inputs.items_bytes(),
        ];
        if sizes.iter().sum::<usize>() < KEEP_MIN_BYTES || sizes.iter().any(|&b| b > crate::hugepages::KEEP_MAX_BYTES) {
            return;
        }
        let _ = KEPT_COLUMNS.try_with(|k| {
            let kept = k.take();
            if kept.value_op.capacity() >= self.value_op.capacity() {
                k.set(kept);
                return;
            }
            let (input_starts, input_items) = std::mem::take(&mut self.op_inputs).into_parts();
            k.set(KeptColumns {
                value_op: std::mem::take(&mut self.value_op).into_raw(),
                value_key: std::mem::take(&mut self.value_key).into_raw(),
                op_key: std::mem::take(&mut self.op_key).into_raw(),
                op_first_output: std::mem::take(&mut self.op_first_output).into_raw(),
                input_starts,
                input_items,
            });
        });
    }

    /// Moves a growing builder graph's columns into those its thread kept
    /// ([`Graph::keep_columns`]) where these have more room, entries copied: for a build
    /// that reserved nothing, once its first interned batch shows it is large
    /// (`GraphBuilder::intern_batch`), so that it grows into pages the process has instead
    /// of reallocating each column as it doubles. A graph that ends far smaller than the
    /// room it took gives the rest back when the builder shrinks its columns.
    pub(crate) fn grow_into_kept_columns(&mut self) {
        let Ok(kept) = KEPT_COLUMNS.try_with(std::cell::Cell::take) else { return };
        fn grown<T: Copy>(current: Vec<T>, mut kept: Vec<T>) -> Vec<T> {
            if kept.capacity() <= current.capacity() {
                return current;
            }
            kept.clear();
            kept.extend_from_slice(&current);
            kept
        }
        self.value_op = IdVec::from_raw(grown(std::mem::take(&mut self.value_op).into_raw(), kept.value_op));
        self.value_key = IdVec::from_raw(grown(std::mem::take(&mut self.value_key).into_raw(), kept.value_key));
        self.op_key = IdVec::from_raw(grown(std::mem::take(&mut self.op_key).into_raw(), kept.op_key));
        self.op_first_output =
            IdVec::from_raw(grown(std::mem::take(&mut self.op_first_output).into_raw(), kept.op_first_output));
        let (starts, items) = std::mem::take(&mut self.op_inputs).into_parts();
        self.op_inputs = ListPool::from_filled_parts(grown(starts, kept.input_starts), grown(items, kept.input_items));
    }

    /// The reserved, not yet written part of each column a builder appends to (as
    /// `(address, bytes)`), for a helper thread to pre-fault (`prefault.rs`).
    pub(crate) fn spare_columns(&self) -> [(usize, usize); 6] {
        use crate::prefault::spare;
        [
            spare(self.value_op.raw(), self.value_op.heap_bytes()),
            spare(self.value_key.raw(), self.value_key.heap_bytes()),
            spare(self.op_key.raw(), self.op_key.heap_bytes()),
            spare(self.op_first_output.raw(), self.op_first_output.heap_bytes()),
            spare(self.op_inputs.starts(), self.op_inputs.starts_bytes()),
            spare(self.op_inputs.items(), self.op_inputs.items_bytes()),
        ]
    }

    /// Gives a builder's empty graph the columns its thread kept ([`Graph::keep_columns`])
    /// that have room for `values` values, `operations` operations and `operands`
    /// operands and are at most four times that; the caller reserves the rest.
    pub(crate) fn adopt_kept_columns(&mut self, values: usize, operations: usize, operands: usize) {
        if self.value_op.capacity() != 0 || self.op_key.capacity() != 0 {
            return;
        }
        let Ok(kept) = KEPT_COLUMNS.try_with(std::cell::Cell::take) else { return };
        fn fits<T>(mut v: Vec<T>, n: usize) -> Option<Vec<T>> {
            (v.capacity() >= n && v.capacity() / 4 <= n).then(|| {
                v.clear();
                v
            })
        }
        if let Some(v) = fits(kept.value_op, values) {
            self.value_op = IdVec::from_raw(v);
        }
        if let Some(v) = fits(kept.value_key, values) {
            self.value_key = IdVec::from_raw(v);
        }
        if let Some(v) = fits(kept.op_key, operations) {
            self.op_key = IdVec::from_raw(v);
        }
        if let Some(v) = fits(kept.op_first_output, operations) {
            self.op_first_output = IdVec::from_raw(v);
        }
        if let (Some(starts), Some(items)) = (fits(kept.input_starts, operations + 1), fits(kept.input_items, operands))
        {
            self.op_inputs = ListPool::from_parts(starts, items);
        }
    }
}

impl<Op: GraphOperation> fmt::Debug for Graph<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Graph")
            .field("interner", &self.interner.id())
            .field("values", &self.value_op.len())
            .field("operations", &self.operation_count())
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .field("parents", &self.parents.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builder::GraphBuilder;

    /// One operand, one output.
    #[derive(Clone, Debug, Hash, PartialEq, Eq)]
    struct Neg;

    impl GraphOperation for Neg {
        type Operand = f64;
        type Context = ();
        type InputKey = u32;
        fn input_count(&self) -> usize {
            1
        }
        fn output_count(&self) -> usize {
            1
        }
    }

    /// A build whose reservation is large enough for a helper thread to pre-fault its
    /// columns (`prefault.rs`) while the builder writes them gives every value and
    /// operation the keys and operands an unreserved build gives on the same interner,
    /// repeated operations included: the helper never changes what is written.
    #[test]
    fn prefaulted_builds_equal_unreserved_ones() {
        let interner = KeyInterner::new();
        let n = 3 * STORE_OPS_MIN + 7;
        let build = |reserve: bool| {
            let mut b = GraphBuilder::with_interner(Arc::clone(&interner));
            if reserve {
                // Room for far more than is built: the helper populates all of it.
                b.reserve(1 << 21, 1 << 21, 1 << 22);
                assert_eq!(b.prefaulting(), cfg!(all(target_os = "linux", not(miri))));
            }
            b.add_input(0);
            for i in 0..n {
                // Three negations of each value: the second and third repeat the first.
                b.add_operation(Neg, [ValueRef::Local(LocalValueId::new(i / 3))], OperationRole::Primary);
            }
            let g = b.build();
            g.verify().unwrap();
            g
        };
        let (a, b) = (build(true), build(false));
        assert_eq!(a.value_count(), n + 1);
        assert_eq!(a.value_key.raw(), b.value_key.raw());
        assert_eq!(a.op_key.raw(), b.op_key.raw());
        assert!(a.op_inputs.items() == b.op_inputs.items());
        assert_eq!(a.op_first_output.raw(), b.op_first_output.raw());
        assert!(a.op_key.raw()[1] == a.op_key.raw()[0] && a.op_key.raw()[3] != a.op_key.raw()[0]);
    }

    /// A chain of `n` `Neg` on one input, built with room reserved, and where its columns
    /// live.
    fn reserved_chain(n: usize) -> (Graph<Neg>, [usize; 4]) {
        chain(n, true)
    }

    /// A chain of `n` `Neg` on one input, built with room reserved or not, and where its
    /// columns live.
    fn chain(n: usize, reserve: bool) -> (Graph<Neg>, [usize; 4]) {
        let mut b = GraphBuilder::with_interner(KeyInterner::new());
        if reserve {
            b.reserve(n + 1, n, n);
        }
        let mut v = b.add_input(0);
        for _ in 0..n {
            v = b.add_operation(Neg, [ValueRef::Local(v)], OperationRole::Primary)[0];
        }
        b.set_outputs(vec![v]);
        let g = b.build();
        let at = [
            g.value_op.raw().as_ptr() as usize,
            g.value_key.raw().as_ptr() as usize,
            g.op_key.raw().as_ptr() as usize,
            g.op_first_output.raw().as_ptr() as usize,
        ];
        (g, at)
    }

    /// A reserved build writes on the columns its thread kept from the last fragment it
    /// dropped (`Graph::adopt_kept_columns`), emptied: the same allocations, and the same
    /// graph as a build on fresh columns. A build that the kept columns would hold more
    /// than four times over gets fresh ones, and a fragment too small to keep is not kept.
    #[test]
    fn a_reserved_build_adopts_the_columns_of_the_last_dropped_fragment() {
        let n = 20_000;
        let ops = |g: &Graph<Neg>| -> Vec<_> {
            g.operations().map(|op| (op.operation().clone(), op.local_inputs().collect::<Vec<_>>())).collect()
        };
        let (fresh, first) = reserved_chain(n);
        let fresh_ops = ops(&fresh);
        drop(fresh);
        assert!(kept_value_op_capacity() > n);
        let (again, at) = reserved_chain(n);
        // The kept allocations are held until adopted, so no other block can have their
        // addresses.
        assert_eq!(at, first, "the kept columns are adopted");
        assert_eq!(ops(&again), fresh_ops);
        assert_eq!(again.value_count(), n + 1);
        drop(again);
        let (small, _) = reserved_chain(n / 5);
        assert_eq!(small.value_op.capacity(), n / 5 + 1, "fresh columns, reserved to size");
        // 4001 values of about 28 bytes each: below `KEEP_MIN_BYTES`.
        drop(small);
        assert_eq!(kept_value_op_capacity(), 0);
    }

    /// A build that reserved nothing grows, after its first batch, into the columns its
    /// thread kept (`Graph::grow_into_kept_columns`): a second build of the same chain ends
    /// in the first one's allocations, with the same operations; a chain too short to
    /// flush a batch does not take them.
    #[test]
    fn an_unreserved_build_grows_into_the_kept_columns() {
        let n = 20_000;
        let ops = |g: &Graph<Neg>| -> Vec<_> {
            g.operations().map(|op| (op.operation().clone(), op.local_inputs().collect::<Vec<_>>())).collect()
        };
        let (first, at) = chain(n, false);
        let first_ops = ops(&first);
        drop(first);
        let (short, _) = chain(100, false);
        assert!(short.value_op.capacity() < 1000, "a short build keeps its own columns");
        drop(short);
        let (again, again_at) = chain(n, false);
        assert_eq!(again_at, at);
        assert_eq!(ops(&again), first_ops);
    }
}
