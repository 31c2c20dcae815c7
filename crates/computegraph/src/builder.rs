//! [`GraphBuilder`]: appends a fragment's values and operations, then interns them.
//!
//! [`GraphBuilder::add_operation`] checks the operation and its operands and pushes to the
//! [`Graph`]'s columns without locking. Interning is batched, in local id order (so fresh
//! keys follow local ids): the pending tail is interned in one write lock on
//! [`GraphBuilder::build`] (or when a key is asked for) and, past `STORE_OPS_MIN`
//! operations, each time that many are pending, inside the `add_operation` call that
//! fills the batch (ADR 0017, step 3: no lock is held between calls). A large fragment
//! then keeps no operations of its own: they are in the interner's store, and the
//! builder keeps only the pending batch.
//!
//! Invariants: a call that fails adds nothing and takes no id; after `build`, every local
//! value and operation has its interned key and the graph pins the interner chunks of
//! every key it holds (`docs/adr/0010-interner-reclamation.md`). The interning loop is
//! software-pipelined ([`Batch`]): as operation `i` is interned, operation `i + AHEAD` is
//! hashed and its table slot prefetched. Building is `O(n)` plus hash-consing.

use std::ops::Range;
use std::sync::Arc;

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use crate::added::AddedValues;
use crate::error::{GraphError, GraphResult};
use crate::graph::{
    Graph, InputRef, LocalOperationId, LocalValueId, MAX_LOCAL_VALUES, PackedInputRef, STORE_OPS_MIN, ValueRef,
};
use crate::id::{IdVec, KeyId};
use crate::key::{InternerState, KeyInterner, Touched, ValueKey};
use crate::operation::{GraphOperation, OperationRole, check_operation};
use crate::prefault::Prefault;
use crate::prefetch::FarOperands;

/// Builds a [`Graph`]. Appends take no lock; interning happens in batches, each under one
/// write lock taken and released inside a call.
///
/// Local values are numbered densely in the order they are added: inputs and operation
/// outputs alike, the value added after `n` others is `LocalValueId::new(n)` (so
/// [`GraphBuilder::value_count`] is the index of the next one). A caller that adds values in
/// its own order can therefore use its own numbering instead of keeping an id map. A call
/// that fails adds nothing and takes no id.
///
/// Every method that can fail on user input has a `try_` twin returning [`GraphError`];
/// the plain forms panic with the same message.
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{GraphBuilder, KeyInterner, OperationRole::Primary, ValueRef::Local};
/// use scalar::{ScalarKey, ScalarOp};
///
/// // Two builders on one interner (they may run on different threads).
/// let interner = KeyInterner::new();
/// let build = || {
///     let mut b = GraphBuilder::<ScalarOp>::with_interner(Arc::clone(&interner));
///     let x = b.add_input(ScalarKey::var(0));
///     let y = b.add_operation(ScalarOp::Sin, [Local(x)], Primary)[0];
///     b.set_outputs(vec![y]);
///     let g = b.build();
///     g.global_key(y)
/// };
/// assert_eq!(build(), build()); // equal structure, equal key
/// ```
pub struct GraphBuilder<Op: GraphOperation> {
    graph: Graph<Op>,
    role_index: FxHashMap<OperationRole, u32>,
    /// Recently used roles by address: `(address, index into graph.roles)`.
    role_cache: [(usize, u32); ROLE_CACHE],
    /// The number of pending operations at which [`GraphBuilder::intern_batch`] interns
    /// them: [`STORE_OPS_MIN`], or `usize::MAX` after it failed.
    flush_at: usize,
    /// The helper pre-faulting what [`GraphBuilder::reserve`] reserved; `build` stops it.
    prefault: Option<Prefault>,
}

/// Entries of [`GraphBuilder`]'s role cache.
const ROLE_CACHE: usize = 8;

impl<Op: GraphOperation> Default for GraphBuilder<Op> {
    fn default() -> Self {
        Self::new()
    }
}

impl<Op: GraphOperation> GraphBuilder<Op> {
    /// A builder on the process-wide interner of `Op` ([`KeyInterner::global`]).
    pub fn new() -> Self {
        Self::with_interner(KeyInterner::global())
    }

    /// A builder on a given interner.
    pub fn with_interner(interner: Arc<KeyInterner<Op>>) -> Self {
        GraphBuilder {
            graph: Graph::empty(interner),
            role_index: FxHashMap::default(),
            role_cache: [(0, 0); ROLE_CACHE],
            flush_at: STORE_OPS_MIN,
            prefault: None,
        }
    }

    /// Reserves room for `values` values, `operations` operations and `operands` operands.
    pub fn reserve(&mut self, values: usize, operations: usize, operands: usize) {
        let g = &mut self.graph;
        // A fresh builder writes on the columns of its thread's last dropped fragment
        // where they fit (`Graph::adopt_kept_columns` says why).
        g.adopt_kept_columns(values, operations, operands);
        g.value_op.reserve(values);
        g.value_key.reserve(values);
        // Past `STORE_OPS_MIN` operations the builder keeps only a batch of them.
        g.own_ops.reserve(operations.min(STORE_OPS_MIN));
        g.op_key.reserve(operations);
        g.op_first_output.reserve(operations);
        g.op_inputs.reserve(operations, operands);
        if !g.op_role.is_empty() {
            g.op_role.reserve(operations);
        }
        // The builder interns a batch at a time: room in the store's table for every
        // operation now, so that it is not rehashed as it grows batch by batch.
        // A stop raised meanwhile skips the room (a hint): the next batch fails on it.
        if operations >= STORE_OPS_MIN {
            let _ = g.interner.write().reserve(operations, operands);
        }
        // Their page faults are taken on another core, ahead of the writes (`prefault.rs`).
        if self.prefault.is_none() {
            self.prefault = Prefault::spawn(&self.graph.spare_columns());
        }
    }

    /// The interner this builder uses.
    pub fn interner(&self) -> &Arc<KeyInterner<Op>> {
        &self.graph.interner
    }

    /// Number of values added so far.
    pub fn value_count(&self) -> usize {
        self.graph.value_op.len()
    }

    /// Number of operations added so far.
    pub fn operation_count(&self) -> usize {
        self.graph.operation_count()
    }

    /// Declares a graph input named `key` and returns its local value.
    ///
    /// # Panics
    /// When the local value id space is exhausted; see [`GraphBuilder::try_add_input`].
    pub fn add_input(&mut self, key: Op::InputKey) -> LocalValueId {
        self.try_add_input(key).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Declares a graph input, or reports an exhausted id space.
    pub fn try_add_input(&mut self, key: Op::InputKey) -> GraphResult<LocalValueId> {
        let g = &mut self.graph;
        if g.value_op.len() >= MAX_LOCAL_VALUES {
            return Err(GraphError::IdSpaceExhausted { space: "local value" });
        }
        let v = g.value_op.push(None);
        g.input_keys.push(key);
        g.inputs.push(v);
        Ok(v)
    }

    /// Adds `op(inputs)` in `role` and returns its output values.
    ///
    /// The operands are anything that reads as a slice of [`ValueRef`]s: an array
    /// (`[Local(x), Local(y)]`, which allocates nothing), a `Vec` or a slice. The builder
    /// only reads them, so a per-operation `Vec` would cost its caller a heap allocation
    /// and a free for nothing (issue 41: 6 to 8 ns of a 10^6-node build's 87 per node).
    ///
    /// # Panics
    /// On a wrong arity, mask length, unknown local value or foreign key; see
    /// [`GraphBuilder::try_add_operation`].
    #[inline]
    pub fn add_operation(&mut self, op: Op, inputs: impl AsRef<[ValueRef<Op>]>, role: OperationRole) -> AddedValues {
        // The range is unwrapped before the outputs are made, so that the docs' form
        // carries no `Result` of `AddedValues` through the caller's loop.
        match self.try_add_operation_from(op, inputs.as_ref(), &role) {
            Ok(range) => AddedValues::from_range(range),
            Err(e) => failed(e),
        }
    }

    /// Adds `op(inputs)` in `role`, or reports why it cannot be added (nothing is added then).
    ///
    /// The outputs come back as [`AddedValues`], a slice of local values that needs no heap
    /// allocation for up to two outputs.
    #[inline]
    pub fn try_add_operation(
        &mut self,
        op: Op,
        inputs: impl AsRef<[ValueRef<Op>]>,
        role: OperationRole,
    ) -> GraphResult<AddedValues> {
        self.try_add_operation_from(op, inputs.as_ref(), &role).map(AddedValues::from_range)
    }

    /// Allocation-free form of [`GraphBuilder::add_operation`]: borrows the operands and
    /// returns the outputs as a range of local value indices.
    ///
    /// # Panics
    /// As [`GraphBuilder::add_operation`]; see [`GraphBuilder::try_add_operation_from`].
    ///
    /// ```
    /// use computegraph::{GraphBuilder, LocalValueId, ValueRef::Local, OperationRole::Primary};
    /// use scalar::{ScalarOp, ScalarKey};
    ///
    /// let mut b = GraphBuilder::<ScalarOp>::new();
    /// let x = b.add_input(ScalarKey::var(0));
    /// let outputs = b.add_operation_from(ScalarOp::SinCos, &[Local(x)], &Primary);
    /// assert_eq!(outputs, 1..3);
    /// let cos = LocalValueId::new(outputs.start + 1);
    /// let y = b.add_operation_from(ScalarOp::Mul, &[Local(x), Local(cos)], &Primary).start;
    /// assert_eq!(y, 3);
    /// ```
    pub fn add_operation_from(&mut self, op: Op, inputs: &[ValueRef<Op>], role: &OperationRole) -> Range<usize> {
        self.try_add_operation_from(op, inputs, role).unwrap_or_else(|e| failed(e))
    }

    /// Allocation-free form of [`GraphBuilder::try_add_operation`]: borrows the operands
    /// and returns the outputs as a range of local value indices.
    // Always inlined into the caller's loop: as a call (`#[inline]` was not always taken),
    // its prologue, epilogue and `Result` were a visible share of a large build's appending
    // (docs/PERFORMANCE.md, build41e); interning a full batch stays out of line.
    #[inline(always)]
    pub fn try_add_operation_from(
        &mut self,
        op: Op,
        inputs: &[ValueRef<Op>],
        role: &OperationRole,
    ) -> GraphResult<Range<usize>> {
        let n_out = check_operation(&op, inputs.len(), role)?;
        let GraphBuilder { graph: g, role_index, role_cache, flush_at, .. } = self;
        let first = g.value_op.len();
        if first + n_out > MAX_LOCAL_VALUES {
            return Err(GraphError::IdSpaceExhausted { space: "local value" });
        }
        let Some(op_id) = g.op_first_output.next_id() else {
            // Not `ok_or`, which made this error, and dropped it by a call, on every append.
            return Err(GraphError::IdSpaceExhausted { space: "local operation" });
        };
        // Store the operands, checking each; a failure takes back what was stored, so a
        // failed call adds nothing.
        let externals = g.externals.len();
        for r in inputs {
            let stored = match r {
                ValueRef::Local(v) if v.index() < first => PackedInputRef::local(*v),
                _ => match push_external(g, r, first) {
                    Ok(stored) => stored,
                    Err(e) => {
                        g.op_inputs.abandon_list();
                        g.externals.truncate(externals);
                        return Err(e);
                    }
                },
            };
            g.op_inputs.push_item(stored);
        }
        if !g.op_inputs.finish_list() {
            g.op_inputs.abandon_list();
            g.externals.truncate(externals);
            return Err(GraphError::IdSpaceExhausted { space: "operand pool" });
        }
        let role_id = match role {
            OperationRole::Primary => 0,
            _ => role_index_of(&mut g.roles, role_index, role_cache, role),
        };
        if role_id != 0 && g.op_role.is_empty() {
            // The first operation in another role: the column starts to be kept, with
            // room for the operations `reserve` made room for (it skipped this column
            // while it was empty), so that it is not copied as it grows.
            g.op_role = IdVec::from_elem(0, op_id.index());
            g.op_role.reserve(g.op_first_output.capacity().saturating_sub(op_id.index()));
        }
        // The id spaces were checked above (`op_id`, and room for `n_out` values).
        if role_id != 0 || !g.op_role.is_empty() {
            g.op_role.push_value(role_id);
        }
        g.own_ops.push(op);
        g.op_first_output.push_value(LocalValueId::new(first));
        if n_out == 1 {
            g.value_op.push_value(Some(op_id));
        } else {
            g.value_op.extend(std::iter::repeat_n(Some(op_id), n_out));
        }
        if g.own_ops.len() >= *flush_at {
            self.intern_batch();
        }
        Ok(first..first + n_out)
    }

    /// Interns the pending operations (a full batch) under one write lock, taken and
    /// released here, and drops them from the builder: past [`STORE_OPS_MIN`] operations
    /// the fragment reads its operations from the store (ADR 0017, step 3), so it never
    /// writes a column of them, only a batch that stays in cache. A graph that stays
    /// smaller keeps its own column, since sharing the store copies its open chunk.
    ///
    /// An error (an exhausted id space, or the stop flag of
    /// [`stop::with_stop`](crate::stop::with_stop) raised while the store's table grows)
    /// leaves the operations pending, for `build` or `global_key` to report, and stops
    /// interning as the builder appends until [`GraphBuilder::try_flush`] succeeds.
    #[cold]
    #[inline(never)]
    fn intern_batch(&mut self) {
        if self.flush().is_err() {
            self.flush_at = usize::MAX;
            return;
        }
        let g = &mut self.graph;
        if g.ops_base == 0 {
            // The first batch: the graph is large, so it grows into its thread's kept columns.
            g.grow_into_kept_columns();
        }
        g.ops_base = g.op_key.len();
        g.own_ops.clear();
    }

    #[cfg(test)]
    pub(crate) fn prefaulting(&self) -> bool {
        self.prefault.is_some()
    }

    /// Sets the graph's outputs.
    ///
    /// # Panics
    /// If a value is not a value of this graph; see [`GraphBuilder::try_set_outputs`].
    pub fn set_outputs(&mut self, outputs: Vec<LocalValueId>) {
        self.try_set_outputs(outputs).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Sets the graph's outputs, or reports a value that does not exist.
    ///
    /// The [`AddedValues`] of [`GraphBuilder::add_operation`] become a `Vec` with
    /// `to_vec()` or `into()`.
    pub fn try_set_outputs(&mut self, outputs: Vec<LocalValueId>) -> GraphResult<()> {
        let len = self.graph.value_op.len();
        if let Some(bad) = outputs.iter().find(|v| v.index() >= len) {
            return Err(GraphError::UnknownLocalValue { value: format!("{bad:?}"), len });
        }
        self.graph.outputs = outputs;
        Ok(())
    }

    /// Adds a parent: a graph whose values this one's external keys may resolve to.
    ///
    /// # Panics
    /// If the parent uses another interner; see [`GraphBuilder::try_add_parent`].
    pub fn add_parent(&mut self, parent: Arc<Graph<Op>>) {
        self.try_add_parent(parent).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Adds a parent, or reports that it was built on another interner.
    pub fn try_add_parent(&mut self, parent: Arc<Graph<Op>>) -> GraphResult<()> {
        if parent.interner.id() != self.graph.interner.id() {
            return Err(GraphError::MixedInterners { first: self.graph.interner.id(), second: parent.interner.id() });
        }
        self.graph.parents.push(parent);
        Ok(())
    }

    /// The global key of a value added so far (interning pending operations first).
    ///
    /// # Panics
    /// If `value` does not exist or an id space is exhausted; see [`GraphBuilder::try_global_key`].
    pub fn global_key(&mut self, value: LocalValueId) -> ValueKey<Op> {
        self.try_global_key(value).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The global key of a value added so far, or an error.
    pub fn try_global_key(&mut self, value: LocalValueId) -> GraphResult<ValueKey<Op>> {
        if let Some(None) = self.graph.value_op.get(value) {
            return self.graph.try_global_key(value);
        }
        self.flush()?;
        self.graph.try_global_key(value)
    }

    /// Interns every pending value and operation under one write lock, in local id order
    /// (so fresh keys follow local ids). Resumable: on an error, what was interned stays
    /// interned and the rest stays pending.
    ///
    /// The interner chunks of every key interned or referred to are pinned for as long as
    /// the graph lives, those of a failed call's keys included.
    fn flush(&mut self) -> GraphResult<()> {
        let g = &mut self.graph;
        // Nothing pending: every value, external and operation keyed (an operation of no
        // outputs adds no value, so the values alone do not tell).
        if g.value_key.len() == g.value_op.len()
            && g.external_key.len() == g.externals.len()
            && g.op_key.len() == g.operation_count()
        {
            return Ok(());
        }
        let interner = Arc::clone(&g.interner);
        let mut s = interner.write();
        let mut touched = SmallVec::new();
        // Every key interned or referred to notes its chunk in `touched` as it goes.
        let result = Self::flush_locked(g, &mut s, &mut touched, interner.id());
        s.pin(&mut g.pins, &mut touched);
        result
    }

    fn flush_locked(
        g: &mut Graph<Op>,
        s: &mut InternerState<Op>,
        touched: &mut Touched,
        interner_id: u32,
    ) -> GraphResult<()> {
        let pending_operands = g.op_inputs.items().len() - g.op_inputs.start(g.op_key.len());
        s.reserve(g.operation_count() - g.op_key.len(), pending_operands)?;
        // Room for the pending keys at once: the key columns are not copied as they grow.
        g.op_key.reserve(g.operation_count() - g.op_key.len());
        g.value_key.reserve(g.value_op.len() - g.value_key.len());
        // External operands read the same few chunks over and over (one entry per
        // operand): a tag seen recently is not noted again, so `pin` sorts a short list.
        let mut recent = [u32::MAX; 8];
        let mut note = |touched: &mut Touched, tag: u32| {
            let slot = &mut recent[tag as usize % 8];
            if *slot != tag {
                *slot = tag;
                touched.push(tag);
            }
        };
        while g.external_key.len() < g.externals.len() {
            let k = match &g.externals[g.external_key.len()] {
                ValueKey::Input(key) => {
                    let (k, index) = s.intern_input_at(key)?;
                    note(touched, crate::key::input_chunk_tag(index));
                    k
                }
                key @ ValueKey::Derived { operation, output_slot } => {
                    // A key whose definition no live graph holds was reclaimed: no graph
                    // can define it any more.
                    if !s.op_is_live(operation.id()) {
                        return Err(GraphError::UnresolvedKey {
                            key: format!("{key:?} (reclaimed: no live graph holds its definition)"),
                        });
                    }
                    note(touched, crate::key::op_chunk_tag(operation.id()));
                    operation.output_key_id(*output_slot).expect("checked when added")
                }
            };
            g.external_key.push(k);
        }
        // The operand-key scratch is the interner's, so a flush allocates none.
        let mut batch = Batch::new(g, interner_id, std::mem::take(&mut s.key_scratch));
        // The id spaces are tested once for the whole batch (every pending value taken
        // as fresh), not once per operation appended; and a batch of `Primary`
        // operations reads no role. The loop is compiled for that case apart.
        let fits = s.batch_fits(g.operation_count() - g.op_key.len(), g.value_op.len() - g.value_key.len());
        let result = if fits && batch.all_primary {
            Self::intern_pending::<true>(g, s, touched, &mut batch)
        } else {
            Self::intern_pending::<false>(g, s, touched, &mut batch)
        };
        s.key_scratch = std::mem::take(&mut batch.keys);
        result
    }

    /// Interns the pending inputs and operations in local id order (the tail of
    /// [`GraphBuilder::flush_locked`]). `FITTED`: every operation is `Primary` and the
    /// batch fits the interner's id spaces ([`InternerState::batch_fits`]).
    fn intern_pending<const FITTED: bool>(
        g: &mut Graph<Op>,
        s: &mut InternerState<Op>,
        touched: &mut Touched,
        batch: &mut Batch,
    ) -> GraphResult<()> {
        // The pending inputs are the tail of `inputs`, which is in id order.
        let mut next_input = g.inputs.partition_point(|v| v.index() < g.value_key.len());
        let mut last_tag = u32::MAX;
        let mut intern_inputs_below = |g: &mut Graph<Op>,
                                       s: &mut InternerState<Op>,
                                       touched: &mut Touched,
                                       next_input: &mut usize,
                                       end: usize| {
            while g.value_key.len() < end {
                debug_assert_eq!(g.inputs[*next_input].index(), g.value_key.len());
                let (k, index) = s.intern_input_at(&g.input_keys[*next_input])?;
                let tag = crate::key::input_chunk_tag(index);
                if tag != last_tag {
                    touched.push(tag);
                    last_tag = tag;
                }
                g.value_key.push(k);
                *next_input += 1;
            }
            Ok::<(), GraphError>(())
        };
        // The value id of the next pending input (`usize::MAX`: none). Every value before
        // it is an output of an earlier operation, so it is due exactly when the keyed
        // values reach it: one comparison per operation, no read of its first output.
        let input_at = |g: &Graph<Op>, i: usize| g.inputs.get(i).map_or(usize::MAX, |v| v.index());
        let mut due = input_at(g, next_input);
        while g.op_key.len() < g.operation_count() {
            // A plain index: below `operation_count`, which the id checks bounded when the
            // operation was added, so the loop makes no id (and checks none) per operation.
            let op = g.op_key.len();
            if g.value_key.len() == due {
                // Inputs declared before the operation get their keys first.
                let first_output = g.op_first_output.raw()[op].index();
                intern_inputs_below(g, s, touched, &mut next_input, first_output)?;
                due = input_at(g, next_input);
            }
            batch.intern::<FITTED, Op>(g, s, touched, op)?;
        }
        intern_inputs_below(g, s, touched, &mut next_input, g.value_op.len())
    }

    /// Interns every pending operation now, as the builder does a batch at a time. On an
    /// error (an exhausted id space; under [`stop::with_stop`](crate::stop::with_stop), the
    /// flag raised while the store's table grows) nothing is lost: what was interned stays,
    /// the rest stays pending, and a later call or [`GraphBuilder::try_build`] goes on from
    /// there. After a success, finishing the graph interns nothing more, so a caller that
    /// must not lose the builder to a failed [`GraphBuilder::try_build`] flushes first.
    pub fn try_flush(&mut self) -> GraphResult<()> {
        self.flush()?;
        self.flush_at = STORE_OPS_MIN;
        Ok(())
    }

    /// Finishes the graph.
    ///
    /// # Panics
    /// When an id space is exhausted while interning, or under
    /// [`stop::with_stop`](crate::stop::with_stop) when the flag goes up while the store's
    /// table grows; see [`GraphBuilder::try_build`].
    pub fn build(self) -> Graph<Op> {
        self.try_build().unwrap_or_else(|e| panic!("{e}"))
    }

    /// Finishes the graph, interning whatever is pending.
    pub fn try_build(mut self) -> GraphResult<Graph<Op>> {
        drop(self.prefault.take()); // before the columns are shrunk (moved) below
        self.flush()?;
        let mut g = self.graph;
        debug_assert_eq!(g.op_key.len(), g.operation_count());
        // First: a graph that reads its operations from the store frees that column, untrimmed.
        g.read_ops_from_store();
        g.value_op.shrink_loose();
        g.value_key.shrink_loose();
        crate::id::shrink_loose(&mut g.own_ops);
        g.op_key.shrink_loose();
        g.op_inputs.shrink_loose();
        g.op_role.shrink_loose();
        g.op_first_output.shrink_loose();
        crate::id::shrink_loose(&mut g.externals);
        crate::id::shrink_loose(&mut g.external_key);
        #[cfg(debug_assertions)]
        g.verify().unwrap_or_else(|e| panic!("internal error: built graph fails verification: {e}"));
        Ok(g)
    }
}

/// The panic of the plain forms (`add_operation`, `add_operation_from`): out of line, so
/// the caller's loop keeps only the branch to it.
#[cold]
#[inline(never)]
fn failed(e: GraphError) -> ! {
    panic!("{e}")
}

/// Stores an operand that is not a known local value: an external key (checked to belong
/// to the graph's interner and to name an existing output), or an error for a local value
/// that does not exist yet (`first` values do).
#[cold]
fn push_external<Op: GraphOperation>(g: &mut Graph<Op>, r: &ValueRef<Op>, first: usize) -> GraphResult<PackedInputRef> {
    let key = match r {
        ValueRef::Local(v) => return Err(GraphError::UnknownLocalValue { value: format!("{v:?}"), len: first }),
        ValueRef::External(key) => key,
    };
    if let ValueKey::Derived { operation, output_slot } = key {
        let interner_id = g.interner.id();
        if operation.interner_id() != interner_id {
            return Err(GraphError::ForeignKey {
                key: format!("{key:?}"),
                key_interner: operation.interner_id(),
                used_with: interner_id,
            });
        }
        if operation.output_key_id(*output_slot).is_none() {
            return Err(GraphError::UnresolvedKey {
                key: format!("{key:?} (the operation has {} outputs)", operation.output_count()),
            });
        }
    }
    let i = g.externals.len();
    if i >= MAX_LOCAL_VALUES {
        return Err(GraphError::IdSpaceExhausted { space: "external reference" });
    }
    g.externals.push(key.clone());
    Ok(PackedInputRef::external(i))
}

/// The index into `roles` of `role` (not `Primary`), adding it on first use.
#[inline]
fn role_index_of(
    roles: &mut Vec<OperationRole>,
    role_index: &mut FxHashMap<OperationRole, u32>,
    role_cache: &mut [(usize, u32); ROLE_CACHE],
    role: &OperationRole,
) -> u32 {
    // Rules pass the same few roles over and over, usually from the same addresses: a
    // small cache keyed by address (confirmed by comparing the role) skips hashing it.
    let addr = role as *const OperationRole as usize;
    let slot = (addr >> 3) % ROLE_CACHE;
    match role_cache[slot] {
        (a, r) if a == addr && roles.get(r as usize).is_some_and(|known| same_role(known, role)) => r,
        _ => role_index_by_hash(roles, role_index, &mut role_cache[slot], addr, role),
    }
}

/// [`role_index_of`] past its cache: by the role's hash, then noted in cache entry `entry`.
#[cold]
#[inline(never)]
fn role_index_by_hash(
    roles: &mut Vec<OperationRole>,
    role_index: &mut FxHashMap<OperationRole, u32>,
    entry: &mut (usize, u32),
    addr: usize,
    role: &OperationRole,
) -> u32 {
    let r = match role_index.get(role) {
        Some(&r) => r,
        None => {
            let r = roles.len() as u32;
            roles.push(role.clone());
            role_index.insert(role.clone(), r);
            r
        }
    };
    *entry = (addr, r);
    r
}

/// Whether two roles are equal, compared inline: the masks rules pass are a few operands
/// long, and comparing them through `==` calls `memcmp`, which cost the transpose more
/// than the rest of the cache's hit (`docs/PERFORMANCE.md`, reg38b).
#[inline(always)]
fn same_role(a: &OperationRole, b: &OperationRole) -> bool {
    match (a, b) {
        (OperationRole::Primary, OperationRole::Primary) => true,
        (OperationRole::Linearized { active_mask: x }, OperationRole::Linearized { active_mask: y }) => {
            // The usual masks by pattern, which compiles to a comparison or two.
            match (&x[..], &y[..]) {
                ([p], [q]) => p == q,
                ([p0, p1], [q0, q1]) => p0 == q0 && p1 == q1,
                (x, y) => x == y,
            }
        }
        // Listed rather than `_`, so that a new role must say how it compares.
        (OperationRole::Primary, OperationRole::Linearized { .. })
        | (OperationRole::Linearized { .. }, OperationRole::Primary) => false,
    }
}

/// Pending operation `op` (an index) of a graph being built: in the builder's window
/// (`own_ops`, from `ops_base` on), never in the store, so the flush loop reads it without
/// asking which.
#[inline(always)]
fn pending_op<Op: GraphOperation>(g: &Graph<Op>, op: usize) -> &Op {
    debug_assert!(g.store_ops.is_none() && op >= g.ops_base);
    &g.own_ops[op - g.ops_base]
}

/// How far ahead of the operation being interned [`Batch`] hashes operations and
/// prefetches their table slots.
const AHEAD: usize = 8;

/// One `flush`'s interning of a graph's pending operations, software-pipelined: once
/// operation `i` is interned, operation `i + AHEAD` is hashed and its table slot
/// prefetched, so the table's cache misses overlap instead of queueing.
///
/// Operands of `i + AHEAD` that have no key yet are predicted: if every pending value
/// before them gets a fresh key, local and key ids advance in step. A hash made from a
/// prediction is used only if every value interned since then did get a fresh key (then
/// the prediction was exact); otherwise it was just a prefetch and is made again. The
/// operand keys are kept beside the hash ([`Ahead`]), so an operation whose hash is used
/// is interned without reading its operands' keys again.
///
/// Hashing ahead reads the operands' keys. When operands lie far from their readers
/// (operands drawn from the whole of a large graph), those reads miss the cache too, so
/// the keys of operation `i + 2 * AHEAD` are prefetched as well (`prefetch.rs` decides
/// when, from the operands seen).
struct Batch {
    interner_id: u32,
    /// Every operation of the graph is `Primary` (its role column is empty), so no
    /// operation's role is read: the flush adds no operation, so this holds throughout.
    all_primary: bool,
    /// The interner's id of each of the graph's roles, on first use (`Primary` is role 0
    /// of every graph and every interner).
    role_ids: SmallVec<[Option<u32>; 4]>,
    /// Hashes made ahead, at the index of their operation modulo `AHEAD`.
    ahead: [Ahead; AHEAD],
    /// Operand keys of the operation being interned when its [`Ahead`] entry cannot
    /// give them (the interner's scratch, lent for the flush).
    keys: Vec<KeyId>,
    /// The interner chunk of the last operation interned (its tag; `u32::MAX`: none yet).
    last_op_tag: u32,
    /// Whether operands lie far enough from their readers that hashing ahead should
    /// find their keys prefetched (`prefetch.rs`), judged on a sample of
    /// [`FAR_SAMPLE`] operations every [`FAR_EVERY`].
    far: FarOperands,
    prefetch_keys: bool,
    /// The operation at which the next sample is taken.
    next_sample: usize,
}

/// Operations between two samples of [`Batch`]'s far operands.
const FAR_EVERY: usize = 2048;
/// Operations per sample: their operands are counted, and decide whether operand keys
/// are prefetched until the next sample. Counting every operand cost more than a
/// tenth of the loop's instructions.
const FAR_SAMPLE: usize = 64;

/// An operation hashed ahead of its interning, with the operand keys it was hashed with
/// (when it has at most [`AHEAD_KEYS`] operands), so that interning it need not read
/// them again.
#[derive(Copy, Clone)]
struct Ahead {
    /// Index of the operation hashed (`usize::MAX`: none).
    op: usize,
    hash: u32,
    /// Number of operand keys in `keys`, or [`NO_KEYS`] (too many operands, or a
    /// prediction beyond the id space).
    len: u32,
    /// Whether some operand key was predicted.
    predicted: bool,
    /// The interner's value count minus the graph's keyed values at hashing (wrapping).
    /// A prediction is exact if the difference is the same at interning: every value
    /// keyed since then got a fresh key.
    offset: usize,
    keys: [KeyId; AHEAD_KEYS],
}

/// Operand keys an [`Ahead`] entry keeps.
const AHEAD_KEYS: usize = 4;
/// [`Ahead::len`] when the entry keeps no keys.
const NO_KEYS: u32 = u32::MAX;

impl Batch {
    fn new<Op: GraphOperation>(g: &Graph<Op>, interner_id: u32, mut keys: Vec<KeyId>) -> Self {
        keys.clear();
        let mut role_ids: SmallVec<[Option<u32>; 4]> = smallvec::smallvec![None; g.roles.len()];
        role_ids[0] = Some(0);
        Batch {
            interner_id,
            all_primary: g.op_role.is_empty(),
            role_ids,
            ahead: [Ahead {
                op: usize::MAX,
                hash: 0,
                len: NO_KEYS,
                predicted: false,
                offset: 0,
                keys: [KeyId::new(0); AHEAD_KEYS],
            }; AHEAD],
            keys,
            last_op_tag: u32::MAX,
            // Values before the first operation's outputs are inputs, which do not count
            // as far.
            far: FarOperands::new(g.op_first_output.raw().first().map_or(0, |v| v.index())),
            prefetch_keys: false,
            next_sample: 0,
        }
    }

    /// Counts the far operands of the [`FAR_SAMPLE`] operations from `op` on and decides
    /// whether to prefetch operand keys until the next sample.
    #[cold]
    #[inline(never)]
    fn sample_far<Op: GraphOperation>(&mut self, g: &Graph<Op>, op: usize) {
        for i in op..(op + FAR_SAMPLE).min(g.operation_count()) {
            let op = LocalOperationId::new(i);
            let reader = g.op_first_output[op].index();
            for r in g.op_input_refs(op) {
                if let InputRef::Local(l) = r {
                    self.far.note(l.index(), reader);
                }
            }
        }
        self.prefetch_keys = self.far.decide();
        self.next_sample = op + FAR_EVERY;
    }

    /// The interner's id of the role of operation `op` (an index below the graph's
    /// operation count); `Primary`'s, 0, without a read when `FITTED`.
    #[inline(always)]
    fn role<const FITTED: bool, Op: GraphOperation>(
        &mut self,
        g: &Graph<Op>,
        s: &mut InternerState<Op>,
        op: usize,
    ) -> GraphResult<u32> {
        if FITTED || self.all_primary {
            return Ok(0);
        }
        let local = g.op_role.raw()[op] as usize;
        if local == 0 {
            return Ok(0); // `Primary`, role 0 everywhere
        }
        match self.role_ids[local] {
            Some(r) => Ok(r),
            None => {
                let r = s.intern_role(&g.roles[local])?;
                self.role_ids[local] = Some(r);
                Ok(r)
            }
        }
    }

    /// Interns operation `op` (an index), the first pending one (its operands all have keys).
    #[inline]
    fn intern<const FITTED: bool, Op: GraphOperation>(
        &mut self,
        g: &mut Graph<Op>,
        s: &mut InternerState<Op>,
        touched: &mut Touched,
        op: usize,
    ) -> GraphResult<()> {
        debug_assert_eq!(g.op_key.len(), op);
        if op >= self.next_sample {
            self.sample_far(g, op);
        }
        let role = self.role::<FITTED, Op>(g, s, op)?;
        let operation = pending_op(g, op);
        let ahead = &self.ahead[op % AHEAD];
        let hashed =
            ahead.op == op && (!ahead.predicted || ahead.offset == s.value_count().wrapping_sub(g.value_key.len()));
        // `NO_KEYS` is beyond the keys an entry holds, so one check covers both.
        let kept = if hashed { ahead.keys.get(..ahead.len as usize) } else { None };
        let (keys, hash) = if let Some(keys) = kept {
            debug_assert!(
                keys.iter().copied().eq(g.op_input_refs(LocalOperationId::new(op)).map(|r| g.input_key_id(r)))
            );
            (keys, ahead.hash)
        } else {
            self.keys.clear();
            self.keys.extend(g.op_inputs.get(op).iter().map(|r| g.input_key_id(r.get())));
            let hash = if hashed { ahead.hash } else { crate::key::op_hash(operation, &self.keys, role) };
            (&self.keys[..], hash)
        };
        let key = if FITTED {
            s.intern_op_fitted(operation, keys, role, hash, self.interner_id)?
        } else {
            s.intern_op_hashed(operation, keys, role, hash, self.interner_id)?
        };
        // Both key columns follow columns whose pushes checked the id space.
        g.op_key.push_value(key.id());
        if key.output_count() == 1 {
            g.value_key.push_value(key.first_output_id());
        } else {
            g.value_key.extend(key.output_key_ids());
        }
        let tag = crate::key::op_chunk_tag(key.id());
        if tag != self.last_op_tag {
            touched.push(tag);
            self.last_op_tag = tag;
        }
        // Now that `op` is interned, its entry of the ring takes `op + AHEAD`.
        let next = op + AHEAD;
        if next < g.operation_count() {
            if self.prefetch_keys && next + AHEAD < g.operation_count() {
                // For `hash_ahead` to find them cached `AHEAD` operations later.
                g.prefetch_operand_keys(LocalOperationId::new(next + AHEAD));
            }
            self.hash_ahead::<FITTED, Op>(g, s, next)?;
        }
        Ok(())
    }

    /// Hashes operation `op` (an index below the graph's operation count; predicting the
    /// keys of operands still pending) and prefetches its table slot.
    #[inline]
    fn hash_ahead<const FITTED: bool, Op: GraphOperation>(
        &mut self,
        g: &Graph<Op>,
        s: &mut InternerState<Op>,
        op: usize,
    ) -> GraphResult<()> {
        let role = self.role::<FITTED, Op>(g, s, op)?;
        let (known, next_key) = (g.value_key.len(), s.value_count());
        let entry = &mut self.ahead[op % AHEAD];
        let refs = g.op_inputs.get(op).iter().map(|r| r.get());
        entry.len = if refs.len() <= AHEAD_KEYS { refs.len() as u32 } else { NO_KEYS };
        let mut predicted = false;
        let mut j = 0;
        let keys = refs.map(|r| {
            let k = match r {
                InputRef::Local(l) if l.index() >= known => {
                    predicted = true;
                    // Beyond the id space only if the prediction is wrong (the ids do
                    // not exist); then neither the hash nor the keys are used.
                    <KeyId as crate::Id>::try_new(next_key + (l.index() - known)).unwrap_or_else(|| {
                        entry.len = NO_KEYS;
                        KeyId::new(0)
                    })
                }
                r => g.input_key_id(r),
            };
            if let Some(slot) = entry.keys.get_mut(j) {
                *slot = k;
            }
            j += 1;
            k.index() as u32
        });
        entry.hash = crate::key::op_hash_raw(pending_op(g, op), keys, role);
        entry.op = op;
        entry.predicted = predicted;
        entry.offset = next_key.wrapping_sub(known);
        s.prefetch_op(entry.hash);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
