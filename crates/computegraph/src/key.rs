//! Structural global identity: [`ValueKey`], [`OperationKey`] and the [`KeyInterner`]
//! that hash-conses them to dense `u32` ids.
//!
//! A value is either a graph input, named by the user's `InputKey`, or output slot `s` of
//! an operation applied to input values in a role. Structurally equal operations get the
//! same [`OperationKey`] from the interner, so equality and hashing of derived keys are
//! `O(1)` on ids and building the same computation twice yields the same key (free CSE).
//!
//! Interner invariants (see `docs/adr/0001-storage.md` and `docs/adr/0010-interner-reclamation.md`):
//! - every interned value has a [`KeyId`]; ids are dense and never reused, not even once
//!   their entry is reclaimed;
//! - an operation's input keys are interned before the operation, and its outputs get
//!   consecutive ids after them, so **key-id order is a topological order**;
//! - `op_table` holds each live operation exactly once (hash-consing), and `input_table`
//!   each live input key;
//! - operations and input keys are stored in chunks of `CHUNK` (1024) consecutive ids; every
//!   [`Graph`](crate::Graph) pins the chunks holding its keys (inputs, outputs, externals)
//!   while it lives. A full chunk that no graph pins and that holds no key handed out by the
//!   interner's own methods is *idle*; idle chunks are reclaimed (dropped from both tables,
//!   their columns freed) once they hold at least as many value keys as the chunks in use,
//!   and at least `RECLAIM_MIN_VALUES` (2^16). So what the interner holds is bounded by the live
//!   graphs' chunks, twice over plus a constant, and the reclaiming work is amortized `O(1)`
//!   per key. Until reclaimed, an idle chunk is an ordinary one (a graph built over its keys
//!   pins it again);
//! - no column maps a key id back to its definition: input keys' ids increase with their
//!   index, and so do operations' first output ids (non-decreasing with operations without
//!   outputs), so a key's definition is found by binary search over the chunks' first ids
//!   and then in its chunk (only messages and [`KeyInterner::value_key`] need it).
//!
//! Concurrency: state sits behind one `RwLock`. Builders intern in batches (one write
//! lock per `build`), so graphs can be built on many threads against one interner.
//! A graph takes the write lock once more when it is dropped, to release its pins.

use std::any::{Any, TypeId};
use std::fmt;
use std::hash::{Hash, Hasher};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use hashbrown::HashTable;
use smallvec::SmallVec;

use crate::chunk::{
    CHUNK, CHUNK_BITS, CHUNK_MASK, ChunkLife, INPUT_CHUNK, InputChunk, OpChunk, OpSlot, OperandsPerOp, StoreOps,
    hash_input, hash_op,
};
pub(crate) use crate::chunk::{
    Garbage, RECLAIM_MIN_VALUES, Touched, input_chunk_tag, op_chunk_tag, op_hash, op_hash_raw,
};
use crate::optable::{OpTable, Probe};
use crate::stop;
use rustc_hash::FxHashMap;

use crate::error::{GraphError, GraphResult};
use crate::id::{KeyId, OperationKeyId};
use crate::operation::{GraphOperation, Label, OperationRole};

/// The structural identity of an operation application: operation, input keys and role,
/// hash-consed by a [`KeyInterner`]. Cheap to copy, compare and hash.
///
/// Obtain one from a built graph ([`Graph::global_key`](crate::Graph::global_key)) or from
/// [`KeyInterner::intern_operation`]; read its parts with [`KeyInterner::operation_parts`].
///
/// ```
/// use computegraph::{KeyInterner, OperationRole, ValueKey};
/// use scalar::{ScalarKey, ScalarOp};
///
/// let interner = KeyInterner::<ScalarOp>::new();
/// let x = interner.intern_input(ScalarKey::var(0));
/// let key = interner.intern_operation(&ScalarOp::SinCos, &[x], &OperationRole::Primary).unwrap();
/// assert_eq!(key.output_count(), 2);
/// let (op, inputs, role) = interner.operation_parts(&key).unwrap();
/// assert_eq!((op, role), (ScalarOp::SinCos, OperationRole::Primary));
/// assert_eq!(inputs, vec![ValueKey::Input(ScalarKey::var(0))]);
/// ```
pub struct OperationKey<Op> {
    interner: u32,
    id: OperationKeyId,
    first_output: KeyId,
    output_count: u16,
    _op: PhantomData<fn() -> Op>,
}

impl<Op> OperationKey<Op> {
    pub(crate) fn from_parts(interner: u32, id: OperationKeyId, first_output: KeyId, output_count: usize) -> Self {
        OperationKey { interner, id, first_output, output_count: output_count as u16, _op: PhantomData }
    }

    /// The interned id.
    pub fn id(&self) -> OperationKeyId {
        self.id
    }
    /// The id of the interner that made this key.
    pub fn interner_id(&self) -> u32 {
        self.interner
    }
    /// Number of outputs of the operation.
    pub fn output_count(&self) -> usize {
        self.output_count as usize
    }
    /// The key id of output `slot`, if the slot exists.
    pub fn output_key_id(&self, slot: u8) -> Option<KeyId> {
        ((slot as u16) < self.output_count).then(|| KeyId::new(self.first_output.index() + slot as usize))
    }

    /// The key id of the first output (for an operation without outputs, the id its
    /// first output would have had).
    #[inline]
    pub(crate) fn first_output_id(&self) -> KeyId {
        self.first_output
    }

    /// The key ids of the outputs, in slot order.
    #[inline]
    pub(crate) fn output_key_ids(&self) -> impl ExactSizeIterator<Item = KeyId> + use<Op> {
        let first = self.first_output.index();
        (first..first + self.output_count as usize).map(KeyId::new)
    }
}

impl<Op> Clone for OperationKey<Op> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<Op> Copy for OperationKey<Op> {}
impl<Op> PartialEq for OperationKey<Op> {
    fn eq(&self, other: &Self) -> bool {
        self.interner == other.interner && self.id == other.id
    }
}
impl<Op> Eq for OperationKey<Op> {}
impl<Op> Hash for OperationKey<Op> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(((self.interner as u64) << 32) | self.id.index() as u64);
    }
}
impl<Op> fmt::Debug for OperationKey<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.id)?;
        if self.interner != 1 {
            write!(f, "@i{}", self.interner)?;
        }
        Ok(())
    }
}

/// The global identity of a value: a graph input or one output of an operation.
///
/// ```
/// use computegraph::{GraphBuilder, ValueKey, ValueRef, OperationRole};
/// use scalar::{ScalarOp, ScalarKey};
///
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// let y = b.add_operation(ScalarOp::Neg, vec![ValueRef::Local(x)], OperationRole::Primary)[0];
/// let g = b.build();
/// assert_eq!(g.global_key(x), ValueKey::Input(ScalarKey::var(0)));
/// match g.global_key(y) {
///     ValueKey::Derived { output_slot, .. } => assert_eq!(output_slot, 0),
///     ValueKey::Input(_) => unreachable!(),
/// }
/// ```
pub enum ValueKey<Op: GraphOperation> {
    /// A graph input, named by the user's key alone.
    Input(Op::InputKey),
    /// Output `output_slot` of an interned operation application.
    Derived {
        /// The operation application.
        operation: OperationKey<Op>,
        /// Which of its outputs.
        output_slot: u8,
    },
}

impl<Op: GraphOperation> ValueKey<Op> {
    /// The input key, if this is an input.
    pub fn as_input(&self) -> Option<&Op::InputKey> {
        match self {
            ValueKey::Input(k) => Some(k),
            ValueKey::Derived { .. } => None,
        }
    }
    /// Whether this is an input key.
    pub fn is_input(&self) -> bool {
        matches!(self, ValueKey::Input(_))
    }
}

impl<Op: GraphOperation> Clone for ValueKey<Op> {
    fn clone(&self) -> Self {
        match self {
            ValueKey::Input(k) => ValueKey::Input(k.clone()),
            ValueKey::Derived { operation, output_slot } => {
                ValueKey::Derived { operation: *operation, output_slot: *output_slot }
            }
        }
    }
}
impl<Op: GraphOperation> PartialEq for ValueKey<Op> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (ValueKey::Input(a), ValueKey::Input(b)) => a == b,
            (
                ValueKey::Derived { operation: a, output_slot: s },
                ValueKey::Derived { operation: b, output_slot: t },
            ) => a == b && s == t,
            _ => false,
        }
    }
}
impl<Op: GraphOperation> Eq for ValueKey<Op> {}
impl<Op: GraphOperation> Hash for ValueKey<Op> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self {
            ValueKey::Input(k) => {
                state.write_u8(0);
                k.hash(state);
            }
            ValueKey::Derived { operation, output_slot } => {
                state.write_u8(1);
                operation.hash(state);
                state.write_u8(*output_slot);
            }
        }
    }
}
impl<Op: GraphOperation> fmt::Debug for ValueKey<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueKey::Input(k) => write!(f, "Input({k:?})"),
            ValueKey::Derived { operation, output_slot } => write!(f, "{operation:?}.{output_slot}"),
        }
    }
}
impl<Op: GraphOperation> fmt::Display for ValueKey<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// What an interned key stands for.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum KeyDef {
    /// Index into the interner's input-key column.
    Input(u32),
    /// Output `slot` of an operation.
    Derived(OperationKeyId, u8),
}

static NEXT_INTERNER_ID: AtomicU32 = AtomicU32::new(1);

/// Hash-conses [`ValueKey`]s and operation applications to dense `u32` ids.
///
/// One interner is shared by every graph that should see each other's values; graphs
/// built against different interners cannot be combined (an error, not a silent
/// mismatch). [`KeyInterner::global`] gives a process-wide interner per operation type,
/// which is what [`GraphBuilder::new`](crate::GraphBuilder::new) uses; [`KeyInterner::new`]
/// a scoped one, freed with the graphs that hold it.
///
/// Memory is bounded by what is alive: keys that no live graph holds are reclaimed in
/// batches (about 35 bytes per key of a one-operation graph are kept while it lives; see
/// `docs/adr/0010-interner-reclamation.md`). Equal structure gets an equal key as long as
/// some graph holding that key is alive; a structure rebuilt after its keys were reclaimed
/// gets new ones, and a stale derived key is reported, never confused with a new key. Ids
/// are never reused, so an interner hands out at most 2^32 − 2 value keys in its life.
///
/// ```
/// use computegraph::{KeyInterner, OperationRole};
/// use scalar::{ScalarOp, ScalarKey};
///
/// let interner = KeyInterner::<ScalarOp>::new();
/// let x = interner.intern_input(ScalarKey::var(0));
/// let a = interner.intern_operation(&ScalarOp::Add, &[x, x], &OperationRole::Primary).unwrap();
/// let b = interner.intern_operation(&ScalarOp::Add, &[x, x], &OperationRole::Primary).unwrap();
/// assert_eq!(a, b); // same structure, same key
/// ```
pub struct KeyInterner<Op: GraphOperation> {
    id: u32,
    state: RwLock<InternerState<Op>>,
}

pub(crate) struct InternerState<Op: GraphOperation> {
    /// Number of value keys ever interned: the next fresh [`KeyId`].
    value_count: usize,
    /// Input keys ever interned: the index of the next one.
    input_count: usize,
    /// Input keys by index, in chunks of [`CHUNK`]; `None` once reclaimed.
    input_chunks: Vec<Option<Box<InputChunk<Op::InputKey>>>>,
    /// Key id of the first input of each input chunk (kept after it is reclaimed).
    input_chunk_first: Vec<KeyId>,
    /// The index of every live input key, by hash.
    input_table: HashTable<u32>,
    /// Operations ever interned: the id of the next one.
    op_count: usize,
    /// Operations by id, in chunks of [`CHUNK`]; `None` once reclaimed.
    op_chunks: Vec<Option<Box<OpChunk<Op>>>>,
    /// Key id of the first output of each operation chunk's first operation (kept after
    /// it is reclaimed).
    op_chunk_first: Vec<KeyId>,
    /// The live operations by hash (the table keeps each hash beside its id, so it grows
    /// without rehashing operations).
    op_table: OpTable,
    /// The table was dropped by [`KeyInterner::release_table`]: it is empty, and the next
    /// interning of an operation rebuilds it from the live chunks first.
    table_released: bool,
    roles: Vec<OperationRole>,
    role_table: FxHashMap<OperationRole, u32>,
    /// Most value keys this interner may hold (the id space unless the user chose less).
    value_limit: usize,
    /// Value keys and operations in reclaimed chunks (the live ones are the rest, so
    /// interning counts nothing more per key).
    reclaimed_values: usize,
    reclaimed_ops: usize,
    /// The operation count at which the current `flush` means to stop (sizes new chunks).
    pending_end: usize,
    /// The current batch's operands per operation (sizes new chunks' operand pools).
    pending_arity: OperandsPerOp,
    /// Scratch for the operand keys of the operation a builder interns, lent to each
    /// `flush` so that it allocates none.
    pub(crate) key_scratch: Vec<KeyId>,
    /// Chunks that were idle when listed (some may have been pinned again since).
    idle: Vec<u32>,
    /// Value keys in idle chunks (counted live until reclaimed).
    idle_values: usize,
}

impl<Op: GraphOperation> InternerState<Op> {
    fn new(value_limit: usize) -> Self {
        let mut role_table = FxHashMap::default();
        role_table.insert(OperationRole::Primary, 0);
        InternerState {
            value_count: 0,
            input_count: 0,
            input_chunks: Vec::new(),
            input_chunk_first: Vec::new(),
            input_table: HashTable::new(),
            op_count: 0,
            op_chunks: Vec::new(),
            op_chunk_first: Vec::new(),
            op_table: OpTable::default(),
            table_released: false,
            roles: vec![OperationRole::Primary],
            role_table,
            value_limit,
            reclaimed_values: 0,
            reclaimed_ops: 0,
            pending_end: 0,
            pending_arity: OperandsPerOp::TWO,
            key_scratch: Vec::new(),
            idle: Vec::new(),
            idle_values: 0,
        }
    }

    /// The live chunk of operation `id`.
    #[inline]
    pub(crate) fn op_chunk(&self, id: OperationKeyId) -> Option<&OpChunk<Op>> {
        self.op_chunks.get(id.index() >> CHUNK_BITS).and_then(|c| c.as_deref())
    }

    /// Whether operation `id` was interned here and is not reclaimed.
    pub(crate) fn op_is_live(&self, id: OperationKeyId) -> bool {
        id.index() < self.op_count && self.op_chunk(id).is_some()
    }

    /// Input key `index` (live: the table holds only live inputs).
    #[inline]
    fn input_at(chunks: &[Option<Box<InputChunk<Op::InputKey>>>], index: u32) -> (&Op::InputKey, KeyId) {
        let chunk = chunks[index as usize >> CHUNK_BITS].as_deref().expect("the input table holds live inputs only");
        let j = index as usize & CHUNK_MASK;
        (&chunk.keys[j], chunk.values[j])
    }

    /// Interns an input key; returns its key id and its index among input keys.
    pub(crate) fn intern_input_at(&mut self, key: &Op::InputKey) -> GraphResult<(KeyId, u32)> {
        let hash = hash_input(key);
        let chunks = &self.input_chunks;
        if let Some(&i) = self.input_table.find(hash, |&i| Self::input_at(chunks, i).0 == key) {
            return Ok((Self::input_at(chunks, i).1, i));
        }
        let index = u32::try_from(self.input_count)
            .ok()
            .filter(|&i| i < u32::MAX)
            .ok_or(GraphError::IdSpaceExhausted { space: "input key" })?;
        if self.value_count >= self.value_limit {
            return Err(GraphError::IdSpaceExhausted { space: "value key" });
        }
        let id = KeyId::new(self.value_count);
        if index as usize & CHUNK_MASK == 0 {
            if let Some(c) = self.input_chunks.len().checked_sub(1) {
                self.note_if_idle(INPUT_CHUNK | c as u32);
            }
            self.input_chunks.push(Some(Box::new(InputChunk {
                keys: Vec::new(),
                values: Vec::new(),
                life: ChunkLife::default(),
            })));
            self.input_chunk_first.push(id);
        }
        let chunk = self.input_chunks.last_mut().and_then(|c| c.as_deref_mut()).expect("the open chunk is live");
        chunk.keys.push(key.clone());
        chunk.values.push(id);
        self.value_count += 1;
        self.input_count += 1;
        let chunks = &self.input_chunks;
        self.input_table.insert_unique(hash, index, |&i| hash_input(Self::input_at(chunks, i).0));
        Ok((id, index))
    }

    /// Value keys in live chunks.
    fn live_values(&self) -> usize {
        self.value_count - self.reclaimed_values
    }

    /// Operations in live chunks.
    fn live_ops(&self) -> usize {
        self.op_count - self.reclaimed_ops
    }

    /// Makes room for `ops` more operations with `operands` operands in all; fails, having
    /// changed nothing, when the stop flag goes up while the table is rebuilt or grown.
    pub(crate) fn reserve(&mut self, ops: usize, operands: usize) -> GraphResult<()> {
        self.restore_table(ops)?;
        self.op_table.reserve(ops)?;
        self.pending_end = self.op_count.saturating_add(ops);
        // New chunks' operand pools are sized by the batch's mean operands per operation
        // (and trimmed when full), not a fixed two per operation.
        self.pending_arity = OperandsPerOp::of(ops, operands);
        let room = CHUNK - (self.op_count & CHUNK_MASK);
        if self.op_count & CHUNK_MASK != 0
            && let Some(Some(c)) = self.op_chunks.last_mut()
        {
            let n = ops.min(room);
            c.reserve_ops(n);
            c.first_output.reserve(n);
            c.inputs.reserve(n, operands.min(self.pending_arity.operands(n)));
        }
        Ok(())
    }

    /// Number of value keys (the id the next fresh one gets).
    #[inline]
    pub(crate) fn value_count(&self) -> usize {
        self.value_count
    }

    /// What key `id` stands for, or `None` if this interner did not make it or reclaimed it.
    fn key_def(&self, id: KeyId) -> Option<KeyDef> {
        if id.index() >= self.value_count {
            return None;
        }
        // An input, if the input chunk whose range holds `id` is live and has it.
        let c = self.input_chunk_first.partition_point(|&f| f <= id);
        if c > 0
            && let Some(chunk) = &self.input_chunks[c - 1]
            && let Ok(j) = chunk.values.binary_search(&id)
        {
            return Some(KeyDef::Input((((c - 1) << CHUNK_BITS) + j) as u32));
        }
        // Otherwise an output of the last operation whose outputs start at or before `id`
        // (operations after it start after its outputs, and those without outputs before it
        // share its start but come earlier), if its chunk is live and `id` is in its range.
        let c = self.op_chunk_first.partition_point(|&f| f <= id).checked_sub(1)?;
        let chunk = self.op_chunks[c].as_deref()?;
        let j = chunk.first_output.partition_point(|&f| f <= id).checked_sub(1)?;
        let slot = id.index() - chunk.first_output[j].index();
        (slot < chunk.ops()[j].output_count())
            .then(|| KeyDef::Derived(OperationKeyId::new((c << CHUNK_BITS) + j), slot as u8))
    }

    pub(crate) fn lookup_input(&self, key: &Op::InputKey) -> Option<KeyId> {
        let chunks = &self.input_chunks;
        self.input_table
            .find(hash_input(key), |&i| Self::input_at(chunks, i).0 == key)
            .map(|&i| Self::input_at(chunks, i).1)
    }

    pub(crate) fn intern_role(&mut self, role: &OperationRole) -> GraphResult<u32> {
        if let Some(&r) = self.role_table.get(role) {
            return Ok(r);
        }
        let r = u32::try_from(self.roles.len()).map_err(|_| GraphError::IdSpaceExhausted { space: "role" })?;
        self.roles.push(role.clone());
        self.role_table.insert(role.clone(), r);
        Ok(r)
    }

    /// Interns `op(inputs)` in role `role` (an id from [`Self::intern_role`]); returns the
    /// operation id and its first output's key id. Inputs must be valid key ids.
    pub(crate) fn intern_op(
        &mut self,
        op: &Op,
        inputs: &[KeyId],
        role: u32,
        interner: u32,
    ) -> GraphResult<OperationKey<Op>> {
        self.restore_table(1)?;
        self.op_table.reserve(1)?;
        self.intern_op_hashed(op, inputs, role, hash_op(op, inputs, role), interner)
    }

    /// [`Self::intern_op`] with the structural hash already computed (see [`op_hash`]),
    /// after [`Self::reserve`] made room for the operation: [`Self::probe_op`], then
    /// [`Self::append_op`] if the operation is new.
    #[inline]
    pub(crate) fn intern_op_hashed(
        &mut self,
        op: &Op,
        inputs: &[KeyId],
        role: u32,
        h32: u32,
        interner: u32,
    ) -> GraphResult<OperationKey<Op>> {
        match self.probe_op(op, inputs, role, h32, interner) {
            Ok(key) => Ok(key),
            Err(slot) => self.append_op(op, inputs, role, h32, slot, interner),
        }
    }

    /// Whether `ops` more operations defining at most `values` more values fit the id
    /// spaces whatever they intern to: then [`Self::intern_op_fitted`] may intern each of
    /// them without testing the id spaces again (a builder's batch, checked once).
    pub(crate) fn batch_fits(&self, ops: usize, values: usize) -> bool {
        // A no-output operation's first output is the next value id: one more value.
        self.op_count.saturating_add(ops) <= <OperationKeyId as crate::Id>::MAX_INDEX
            && self.value_count.saturating_add(values).saturating_add(1) <= self.value_limit
    }

    /// [`Self::intern_op_hashed`] for an operation of a batch that [`Self::batch_fits`]
    /// accepted, of at most 256 outputs (which the builder checked when it was added):
    /// appending it tests no id space.
    #[inline(always)]
    pub(crate) fn intern_op_fitted(
        &mut self,
        op: &Op,
        inputs: &[KeyId],
        role: u32,
        h32: u32,
        interner: u32,
    ) -> GraphResult<OperationKey<Op>> {
        match self.probe_op_as::<false>(op, inputs, role, h32, interner) {
            Ok(key) => Ok(key),
            Err(slot) => self.append_op_as::<false>(op, inputs, role, h32, slot, interner),
        }
    }

    /// Looks `op(inputs)` in role `role` up by its structural hash (see [`op_hash`]),
    /// after [`Self::reserve`] made room for one more operation: its key if it is
    /// interned, or the table slot that [`Self::append_op`] fills for it. One probe, which
    /// compares the store's own columns.
    #[inline(always)]
    pub(crate) fn probe_op(
        &self,
        op: &Op,
        inputs: &[KeyId],
        role: u32,
        h32: u32,
        interner: u32,
    ) -> Result<OperationKey<Op>, OpSlot> {
        self.probe_op_as::<true>(op, inputs, role, h32, interner)
    }

    /// [`Self::probe_op`], one copy per appending path (`CHECKED`), so that each has its own
    /// comparison closure, which LLVM inlines at its one call site (shared, it was called
    /// out of line; docs/PERFORMANCE.md, int41b).
    #[inline(always)]
    fn probe_op_as<const CHECKED: bool>(
        &self,
        op: &Op,
        inputs: &[KeyId],
        role: u32,
        h32: u32,
        interner: u32,
    ) -> Result<OperationKey<Op>, OpSlot> {
        debug_assert_eq!(h32, hash_op(op, inputs, role));
        let chunks = &self.op_chunks;
        match self.op_table.probe_reserved(h32, |id| {
            let chunk = chunks[id.index() >> CHUNK_BITS].as_deref().expect("the table holds live operations only");
            let j = id.index() & CHUNK_MASK;
            chunk.role_of(j) == role && chunk.ops()[j] == *op && chunk.inputs.get(j) == inputs
        }) {
            Probe::Found(id) => Ok(self.op_key(id, interner)),
            Probe::Vacant(slot) => Err(OpSlot(slot)),
        }
    }

    /// Appends an operation that [`Self::probe_op`] did not find to the store's columns
    /// (operation, exactly its operand keys, role, first output) and fills its table slot
    /// `slot`, which that probe returned with no other append in between. Its outputs get
    /// the next key ids. Errors, with nothing appended: more than 256 outputs, or an
    /// exhausted id space.
    #[inline(always)]
    pub(crate) fn append_op(
        &mut self,
        op: &Op,
        inputs: &[KeyId],
        role: u32,
        h32: u32,
        slot: OpSlot,
        interner: u32,
    ) -> GraphResult<OperationKey<Op>> {
        self.append_op_as::<true>(op, inputs, role, h32, slot, interner)
    }

    /// [`Self::append_op`], testing the output count and the id spaces only if `CHECK`.
    #[inline(always)]
    fn append_op_as<const CHECK: bool>(
        &mut self,
        op: &Op,
        inputs: &[KeyId],
        role: u32,
        h32: u32,
        slot: OpSlot,
        interner: u32,
    ) -> GraphResult<OperationKey<Op>> {
        let n_out = op.output_count();
        let first = self.value_count;
        if CHECK {
            if n_out > 256 {
                return Err(GraphError::TooManyOutputs { operation: format!("{}", Label(op)), outputs: n_out });
            }
            if first + n_out.max(1) > self.value_limit {
                return Err(GraphError::IdSpaceExhausted { space: "value key" });
            }
            if self.op_count > <OperationKeyId as crate::Id>::MAX_INDEX {
                return Err(GraphError::IdSpaceExhausted { space: "operation key" });
            }
        } else {
            debug_assert!(n_out <= 256 && first + n_out.max(1) <= self.value_limit);
            debug_assert!(self.op_count <= <OperationKeyId as crate::Id>::MAX_INDEX);
        }
        let id = OperationKeyId::new(self.op_count);
        let first = KeyId::new(first);
        if self.op_count & CHUNK_MASK == 0 {
            if let Some(c) = self.op_chunks.len().checked_sub(1) {
                if let Some(full) = self.op_chunks[c].as_deref_mut() {
                    full.close();
                }
                self.note_if_idle(c as u32);
            }
            let n = self.pending_end.saturating_sub(self.op_count).clamp(16, CHUNK);
            self.op_chunks.push(Some(Box::new(OpChunk::with_capacity(n, self.pending_arity))));
            self.op_chunk_first.push(first);
        }
        let chunk = self.op_chunks.last_mut().and_then(|c| c.as_deref_mut()).expect("the open chunk is live");
        chunk.inputs.extend_from_short(inputs);
        if !chunk.inputs.finish_list() {
            chunk.inputs.abandon_list();
            return Err(GraphError::IdSpaceExhausted { space: "operation input pool" });
        }
        self.op_table.fill(slot.0, h32, id);
        chunk.push_op(op.clone());
        // One test while every operation of the chunk is `Primary` (its role column empty).
        if role != 0 || !chunk.role.is_empty() {
            chunk.push_role(role);
        }
        chunk.first_output.push(first);
        chunk.values += n_out;
        self.op_count += 1;
        self.value_count += n_out;
        Ok(OperationKey { interner, id, first_output: first, output_count: n_out as u16, _op: PhantomData })
    }

    /// Hints that `intern_op_hashed` will soon be called with this hash.
    #[inline]
    pub(crate) fn prefetch_op(&self, h32: u32) {
        self.op_table.prefetch(h32);
    }

    /// The key of live operation `id`.
    fn op_key(&self, id: OperationKeyId, interner: u32) -> OperationKey<Op> {
        let chunk = self.op_chunk(id).expect("a live operation");
        let j = id.index() & CHUNK_MASK;
        OperationKey {
            interner,
            id,
            first_output: chunk.first_output[j],
            output_count: chunk.ops()[j].output_count() as u16,
            _op: PhantomData,
        }
    }

    /// Operation, operands and role id of live operation `id`.
    fn op_parts(&self, id: OperationKeyId) -> Option<(&Op, &[KeyId], u32)> {
        let chunk = self.op_chunk(id)?;
        let j = id.index() & CHUNK_MASK;
        Some((&chunk.ops()[j], chunk.inputs.get(j), chunk.role_of(j)))
    }

    pub(crate) fn value_key(&self, id: KeyId, interner: u32) -> Option<ValueKey<Op>> {
        Some(match self.key_def(id)? {
            KeyDef::Input(i) => ValueKey::Input(Self::input_at(&self.input_chunks, i).0.clone()),
            KeyDef::Derived(op, slot) => ValueKey::Derived { operation: self.op_key(op, interner), output_slot: slot },
        })
    }

    fn describe(&self, id: KeyId, interner: u32) -> String {
        use fmt::Write;
        let mut s = String::new();
        // Operation keys print as `ValueKey`'s `Debug` does: `ok3` or `ok3@i7`.
        let at = if interner != 1 { format!("@i{interner}") } else { String::new() };
        match self.key_def(id) {
            None if id.index() < self.value_count => write!(s, "{id:?} (reclaimed)").unwrap(),
            None => write!(s, "{id:?} (unknown)").unwrap(),
            Some(KeyDef::Input(i)) => write!(s, "Input({:?})", Self::input_at(&self.input_chunks, i).0).unwrap(),
            Some(KeyDef::Derived(op, slot)) => {
                let (operation, inputs, role) = self.op_parts(op).expect("key_def finds live operations");
                write!(s, "{op:?}{at}.{slot} = {}", Label(operation)).unwrap();
                let role = &self.roles[role as usize];
                if role.is_linearized() {
                    write!(s, " [{role}]").unwrap();
                }
                write!(s, "(").unwrap();
                for (i, k) in inputs.iter().enumerate() {
                    if i > 0 {
                        s.push_str(", ");
                    }
                    match self.key_def(*k) {
                        Some(KeyDef::Input(j)) => write!(s, "{:?}", Self::input_at(&self.input_chunks, j).0).unwrap(),
                        Some(KeyDef::Derived(o, sl)) => write!(s, "{o:?}{at}.{sl}").unwrap(),
                        None => write!(s, "{k:?} (reclaimed)").unwrap(),
                    }
                }
                s.push(')');
            }
        }
        s
    }

    /// Pins the chunks of `touched` (tags from [`op_chunk_tag`] and [`input_chunk_tag`], any
    /// order, repeats allowed, every chunk live) that the sorted pin list `pins` does not
    /// hold yet, and adds them to it. Clears `touched`.
    pub(crate) fn pin(&mut self, pins: &mut SmallVec<[u32; 2]>, touched: &mut Touched) {
        touched.sort_unstable();
        touched.dedup();
        // `touched` keeps, sorted, the tags `pins` does not hold yet.
        touched.retain(|tag| {
            if pins.binary_search(tag).is_ok() {
                return false;
            }
            let (life, values) = self.life_of(*tag).expect("pinned chunks are live");
            life.pins += 1;
            if std::mem::take(&mut life.idle) {
                // In use again: no longer counted idle (its tag stays listed, skipped).
                self.idle_values -= values;
            }
            true
        });
        merge_sorted(pins, touched);
        touched.clear();
    }

    /// The operations of the chunks among `pins` (a graph's sorted pin list), read in place
    /// by a built fragment (see [`StoreOps`]).
    pub(crate) fn store_ops(&self, pins: &[u32]) -> StoreOps<Op> {
        let op_chunks = pins.iter().take_while(|&&tag| tag & INPUT_CHUNK == 0).map(|&tag| tag as usize);
        self.store_ops_of(op_chunks).expect("pinned chunks are live")
    }

    /// The operations of chunks `chunks` (increasing indices), or `None` if one of them
    /// was reclaimed.
    pub(crate) fn store_ops_of(&self, chunks: impl Iterator<Item = usize> + Clone) -> Option<StoreOps<Op>> {
        if !chunks.clone().all(|c| matches!(self.op_chunks.get(c), Some(Some(_)))) {
            return None;
        }
        let op_chunks = chunks.map(|c| (c, self.op_chunks[c].as_deref().expect("checked live")));
        Some(StoreOps::new(op_chunks))
    }

    /// Releases a graph's pins. Full chunks that no graph pins any more become idle, and
    /// idle chunks are reclaimed once they hold as many keys as the rest of the interner
    /// (and at least [`RECLAIM_MIN_VALUES`]): amortized `O(1)` per key. Reclaimed chunks go
    /// to `garbage`, for the caller to drop after the lock.
    pub(crate) fn unpin(&mut self, pins: &[u32], garbage: &mut Garbage<Op>) {
        for &tag in pins {
            let (life, _) = self.life_of(tag).expect("pinned chunks are live");
            life.pins -= 1;
            if life.pins == 0 {
                self.note_if_idle(tag);
            }
        }
        if self.idle_values >= RECLAIM_MIN_VALUES.max(self.live_values() - self.idle_values) {
            self.reclaim_idle(garbage);
        }
    }

    /// The life of chunk `tag` and its number of value keys, if it is live.
    fn life_of(&mut self, tag: u32) -> Option<(&mut ChunkLife, usize)> {
        let c = (tag & !INPUT_CHUNK) as usize;
        if tag & INPUT_CHUNK != 0 {
            self.input_chunks.get_mut(c)?.as_deref_mut().map(|c| (&mut c.life, c.keys.len()))
        } else {
            self.op_chunks.get_mut(c)?.as_deref_mut().map(|c| (&mut c.life, c.values))
        }
    }

    /// Lists chunk `tag` as idle if it is full, unpinned and not sticky.
    fn note_if_idle(&mut self, tag: u32) {
        let c = (tag & !INPUT_CHUNK) as usize;
        let count = if tag & INPUT_CHUNK != 0 { self.input_count } else { self.op_count };
        if (c + 1) << CHUNK_BITS > count {
            return; // still open: more keys will be interned into it
        }
        let Some((life, values)) = self.life_of(tag) else { return };
        if life.pins == 0 && !life.sticky && !life.idle {
            life.idle = true;
            self.idle_values += values;
            self.idle.push(tag);
        }
    }

    /// Marks the chunk of a key handed out by the interner's own methods: never reclaimed.
    fn make_sticky(&mut self, tag: u32) {
        if let Some((life, values)) = self.life_of(tag) {
            life.sticky = true;
            if std::mem::take(&mut life.idle) {
                self.idle_values -= values;
            }
        }
    }

    /// Reclaims every idle chunk: its entries leave the hash tables and its columns are
    /// moved to `garbage`. Their ids are never handed out again. Returns the value keys
    /// reclaimed.
    pub(crate) fn reclaim_idle(&mut self, garbage: &mut Garbage<Op>) -> usize {
        let before = self.reclaimed_values;
        let mut idle = std::mem::take(&mut self.idle);
        idle.sort_unstable();
        idle.dedup();
        // When most operations go (a one-shot caller dropping its fragment), the table is
        // released instead of one removal per operation (each a cache miss and a backward
        // shift: seconds at 10^7), and the next interning rebuilds it: a drop stays within
        // Ctrl-C's bound while a 10^7-operation graph lives on.
        let chunk_ops = |t: &u32| self.op_chunks[(t & !INPUT_CHUNK) as usize].as_deref().filter(|c| c.life.idle);
        let idle_ops: usize =
            idle.iter().filter(|&&t| t & INPUT_CHUNK == 0).filter_map(chunk_ops).map(|c| c.ops().len()).sum();
        // A released table holds nothing to remove and stays released.
        let release = !self.table_released && 2 * idle_ops >= self.op_table.len();
        let remove = !self.table_released && !release;
        for tag in idle {
            let c = (tag & !INPUT_CHUNK) as usize;
            if tag & INPUT_CHUNK != 0 {
                if !matches!(&self.input_chunks[c], Some(k) if k.life.idle) {
                    continue;
                }
                let chunk = self.input_chunks[c].take().expect("checked live");
                for (j, key) in chunk.keys.iter().enumerate() {
                    let index = ((c << CHUNK_BITS) + j) as u32;
                    if let Ok(entry) = self.input_table.find_entry(hash_input(key), |&i| i == index) {
                        entry.remove();
                    }
                }
                self.reclaimed_values += chunk.keys.len();
                garbage.inputs.push(*chunk);
            } else {
                if !matches!(&self.op_chunks[c], Some(k) if k.life.idle) {
                    continue;
                }
                let chunk = self.op_chunks[c].take().expect("checked live");
                let ops = if remove { chunk.ops() } else { &[][..] };
                for (j, op) in ops.iter().enumerate() {
                    let id = OperationKeyId::new((c << CHUNK_BITS) + j);
                    let removed = self.op_table.remove(hash_op(op, chunk.inputs.get(j), chunk.role_of(j)), id);
                    debug_assert!(removed, "{id:?} was in the operation table");
                }
                self.reclaimed_values += chunk.values;
                self.reclaimed_ops += chunk.ops().len();
                garbage.ops.push(*chunk);
            }
        }
        self.idle_values = 0;
        if release {
            self.op_table = OpTable::default();
            self.table_released = true;
        }
        // The tables need not keep the size of their peak, but keep room for about the keys
        // that will be interned before the next batch (so they do not grow again meanwhile).
        self.op_table.shrink_if_sparse(RECLAIM_MIN_VALUES / 2);
        let need = self.input_table.len() + RECLAIM_MIN_VALUES / 2;
        if self.input_table.capacity() > 4 * need {
            let chunks = &self.input_chunks;
            self.input_table.shrink_to(need, |&i| hash_input(Self::input_at(chunks, i).0));
        }
        self.reclaimed_values - before
    }

    /// Rebuilds a released table (with room for `more` operations beyond the live ones)
    /// before an operation is interned; does nothing otherwise. A stop raised meanwhile
    /// leaves the table released.
    #[inline]
    fn restore_table(&mut self, more: usize) -> GraphResult<()> {
        if self.table_released { self.rebuild_released_table(more) } else { Ok(()) }
    }

    /// The table filled again with the live chunks' operations; the stop flag is read
    /// once per chunk (a rebuild at 10^7 live operations outlasts Ctrl-C's bound).
    #[cold]
    #[inline(never)]
    fn rebuild_released_table(&mut self, more: usize) -> GraphResult<()> {
        let mut table = OpTable::default();
        table.reserve(self.live_ops().saturating_add(more))?;
        for (c, chunk) in self.op_chunks.iter().enumerate().filter_map(|(c, k)| Some((c, k.as_deref()?))) {
            stop::check()?;
            for (j, op) in chunk.ops().iter().enumerate() {
                let hash = hash_op(op, chunk.inputs.get(j), chunk.role_of(j));
                // Ids are distinct, so the probe ends at an empty slot.
                if let Probe::Vacant(slot) = table.probe_reserved(hash, |_| false) {
                    table.fill(slot, hash, OperationKeyId::new((c << CHUNK_BITS) + j));
                }
            }
        }
        self.op_table = table;
        self.table_released = false;
        Ok(())
    }

    /// Bytes held by the tables and live chunks, by column ([`KeyInterner::column_bytes`]).
    fn column_bytes(&self) -> Vec<(&'static str, usize)> {
        let chunks = |n: usize| n * std::mem::size_of::<Option<Box<()>>>() + n * 4;
        let sum = |f: &dyn Fn(&OpChunk<Op>) -> usize| self.op_chunks.iter().flatten().map(|c| f(c)).sum::<usize>();
        let op_headers = sum(&|_| std::mem::size_of::<OpChunk<Op>>());
        vec![
            ("ops", sum(&|c| c.ops_bytes())),
            ("op inputs (starts)", sum(&|c| c.inputs.starts_bytes())),
            ("op inputs (operand keys)", sum(&|c| c.inputs.items_bytes())),
            ("op role", sum(&|c| c.role.capacity() * 4)),
            ("op first_output", sum(&|c| c.first_output.capacity() * 4)),
            ("op_table", self.op_table.heap_bytes()),
            ("input keys", self.input_chunks.iter().flatten().map(|c| c.heap_bytes()).sum::<usize>()),
            ("input_table", self.input_table.capacity() * 5),
            ("chunk directories", op_headers + chunks(self.input_chunks.capacity() + self.op_chunks.capacity())),
        ]
    }
}

impl<Op: GraphOperation> KeyInterner<Op> {
    /// A new, empty interner with a fresh id.
    ///
    /// # Panics
    /// After 2^32 − 1 interners have been created in this process; see [`KeyInterner::try_new`].
    pub fn new() -> Arc<Self> {
        Self::try_new().expect("interner id space exhausted")
    }

    /// A new, empty interner, or an error once 2^32 − 1 interners have been created.
    pub fn try_new() -> GraphResult<Arc<Self>> {
        Self::try_with_value_limit(<KeyId as crate::Id>::MAX_INDEX)
    }

    /// A new, empty interner that interns at most `limit` value keys in its life (inputs and
    /// operation outputs, reclaimed ones included: ids are never reused; the `u32` id
    /// space, 2^32 − 2, is the most and the default). Interning beyond the limit is
    /// [`GraphError::IdSpaceExhausted`]: a way to see how a program behaves when the id
    /// space runs out.
    ///
    /// ```
    /// use computegraph::{GraphBuilder, GraphError, KeyInterner};
    /// use scalar::{ScalarOp, ScalarKey};
    ///
    /// let interner = KeyInterner::<ScalarOp>::try_with_value_limit(1).unwrap();
    /// let mut b = GraphBuilder::with_interner(interner);
    /// b.add_input(ScalarKey::var(0));
    /// b.add_input(ScalarKey::var(1)); // a second value key: over the limit
    /// assert_eq!(b.try_build().unwrap_err(), GraphError::IdSpaceExhausted { space: "value key" });
    /// ```
    pub fn try_with_value_limit(limit: usize) -> GraphResult<Arc<Self>> {
        let id = NEXT_INTERNER_ID
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_add(1))
            .map_err(|_| GraphError::IdSpaceExhausted { space: "interner" })?;
        let limit = limit.min(<KeyId as crate::Id>::MAX_INDEX);
        Ok(Arc::new(KeyInterner { id, state: RwLock::new(InternerState::new(limit)) }))
    }

    /// The process-wide interner for `Op`, created on first use.
    pub fn global() -> Arc<Self> {
        static GLOBALS: OnceLock<Mutex<FxHashMap<TypeId, Arc<dyn Any + Send + Sync>>>> = OnceLock::new();
        let mut map = GLOBALS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
        let entry = map.entry(TypeId::of::<Op>()).or_insert_with(|| Self::new() as Arc<dyn Any + Send + Sync>);
        Arc::clone(entry).downcast::<Self>().expect("global interner registry holds the right type")
    }

    /// This interner's id (stamped into every [`OperationKey`] it makes).
    pub fn id(&self) -> u32 {
        self.id
    }

    pub(crate) fn read(&self) -> RwLockReadGuard<'_, InternerState<Op>> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn write(&self) -> RwLockWriteGuard<'_, InternerState<Op>> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Number of value keys ever interned (the id the next fresh one gets); see
    /// [`KeyInterner::live_value_count`] for those still held.
    pub fn value_count(&self) -> usize {
        self.read().value_count
    }

    /// Number of operation keys ever interned.
    pub fn operation_count(&self) -> usize {
        self.read().op_count
    }

    /// Number of value keys not reclaimed: those some live graph may hold (see
    /// `docs/adr/0010-interner-reclamation.md`).
    pub fn live_value_count(&self) -> usize {
        self.read().live_values()
    }

    /// Number of operation keys not reclaimed.
    pub fn live_operation_count(&self) -> usize {
        self.read().live_ops()
    }

    /// Reclaims now every idle chunk (full, and holding no key of a live graph) instead of
    /// waiting until idle chunks hold as many keys as the rest; returns the number of value
    /// keys reclaimed. Keys are otherwise reclaimed on their own as graphs are dropped.
    pub fn reclaim_unused(&self) -> usize {
        let mut garbage = Garbage::default();
        let n = self.write().reclaim_idle(&mut garbage);
        drop(garbage); // after the lock
        n
    }

    /// Frees the table that finds an interned operation by its structure (hash-consing):
    /// for a one-shot caller that has built its fragments and interns no operation until
    /// the pipeline ends, so that materialize and compile run without it (10.7 bytes per
    /// node at 10^7, issue 41's memory figure). Keys, operations and graphs are unchanged;
    /// the next interning of an operation (a build, [`KeyInterner::intern_operation`])
    /// first rebuilds the table from the live chunks, in time linear in their operations.
    /// Input keys keep their own table.
    pub fn release_table(&self) {
        let mut s = self.write();
        s.op_table = OpTable::default();
        s.table_released = true;
    }

    /// Bytes held by the interner's tables and live chunks (excluding heap data owned by
    /// operations and keys).
    pub fn heap_bytes(&self) -> usize {
        self.column_bytes().iter().map(|&(_, b)| b).sum()
    }

    /// Bytes held by each column and table, by name (allocated capacity, live chunks only;
    /// heap data owned by operations and keys excluded), as `docs/ARCHITECTURE.md` states.
    pub fn column_bytes(&self) -> Vec<(&'static str, usize)> {
        self.read().column_bytes()
    }

    /// Interns an input key.
    ///
    /// # Panics
    /// When the key id space is exhausted; see [`KeyInterner::try_intern_input`].
    pub fn intern_input(&self, key: Op::InputKey) -> KeyId {
        self.try_intern_input(&key).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Interns an input key, or reports that the id space is exhausted. A key interned
    /// here (rather than by building a graph) is never reclaimed.
    pub fn try_intern_input(&self, key: &Op::InputKey) -> GraphResult<KeyId> {
        if let Some(id) = self.read().lookup_input(key) {
            return Ok(id);
        }
        let mut s = self.write();
        let (id, index) = s.intern_input_at(key)?;
        s.make_sticky(input_chunk_tag(index));
        Ok(id)
    }

    /// Interns a value key: inputs are added on first sight; derived keys are checked to
    /// belong to this interner.
    pub fn intern_key(&self, key: &ValueKey<Op>) -> GraphResult<KeyId> {
        match key {
            ValueKey::Input(k) => self.try_intern_input(k),
            ValueKey::Derived { operation, output_slot } => self.derived_key_id(operation, *output_slot, key),
        }
    }

    /// The id of a derived key, checking interner and slot without taking the lock.
    pub(crate) fn derived_key_id(
        &self,
        operation: &OperationKey<Op>,
        slot: u8,
        key: &ValueKey<Op>,
    ) -> GraphResult<KeyId> {
        if operation.interner != self.id {
            return Err(GraphError::ForeignKey {
                key: format!("{key:?}"),
                key_interner: operation.interner,
                used_with: self.id,
            });
        }
        operation.output_key_id(slot).ok_or_else(|| GraphError::UnresolvedKey {
            key: format!("{key:?} (the operation has {} outputs)", operation.output_count),
        })
    }

    /// Hash-conses `op(inputs)` in `role`: structurally equal applications get the same key.
    ///
    /// Errors: a wrong number of inputs, an active mask of the wrong length, more than
    /// 256 outputs, an unknown input id, or an exhausted id space.
    ///
    /// An operation interned here (rather than by building a graph) is never reclaimed.
    pub fn intern_operation(&self, op: &Op, inputs: &[KeyId], role: &OperationRole) -> GraphResult<OperationKey<Op>> {
        crate::operation::check_operation(op, inputs.len(), role)?;
        let mut s = self.write();
        if let Some(bad) = inputs.iter().find(|&&k| s.key_def(k).is_none()) {
            return Err(GraphError::UnresolvedKey { key: s.describe(*bad, self.id) });
        }
        let role = s.intern_role(role)?;
        let key = s.intern_op(op, inputs, role, self.id)?;
        s.make_sticky(op_chunk_tag(key.id));
        Ok(key)
    }

    /// The key of an interned id.
    ///
    /// # Panics
    /// If `id` was not made by this interner, or was reclaimed.
    pub fn value_key(&self, id: KeyId) -> ValueKey<Op> {
        self.read()
            .value_key(id, self.id)
            .unwrap_or_else(|| panic!("{id:?} was not made by this interner, or was reclaimed"))
    }

    /// The parts of an operation key: operation, input keys and role.
    pub fn operation_parts(&self, key: &OperationKey<Op>) -> GraphResult<(Op, Vec<ValueKey<Op>>, OperationRole)> {
        if key.interner != self.id {
            return Err(GraphError::ForeignKey {
                key: format!("{key:?}"),
                key_interner: key.interner,
                used_with: self.id,
            });
        }
        let s = self.read();
        let reclaimed = |what: String| GraphError::UnresolvedKey { key: format!("{what} (reclaimed)") };
        let (op, inputs, role) = s.op_parts(key.id).ok_or_else(|| reclaimed(format!("{key:?}")))?;
        let inputs: GraphResult<Vec<ValueKey<Op>>> =
            inputs.iter().map(|&k| s.value_key(k, self.id).ok_or_else(|| reclaimed(format!("{k:?}")))).collect();
        Ok((op.clone(), inputs?, s.roles[role as usize].clone()))
    }

    /// A one-line description of a key id, for messages (`ok3.0 = mul(ok1.0, x0)`; keys of
    /// interners other than the first carry `@iN`, as in `ValueKey`'s `Debug`).
    pub fn describe(&self, id: KeyId) -> String {
        self.read().describe(id, self.id)
    }
}

impl<Op: GraphOperation> fmt::Debug for KeyInterner<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.read();
        f.debug_struct("KeyInterner")
            .field("id", &self.id)
            .field("values", &s.value_count)
            .field("operations", &s.op_count)
            .field("live_values", &s.live_values())
            .field("live_operations", &s.live_ops())
            .finish()
    }
}

/// Merges `new` (sorted, none in `list`) into `list` (sorted), from the back: only the
/// entries of `list` greater than the smallest new one move.
///
/// Why not push and `sort_unstable`: a builder pins after every batch it interns, and a
/// pin list ends with its input chunks' tags (they have [`INPUT_CHUNK`] set), so each
/// batch's new operation chunks would land before them and every batch would sort the
/// whole list: `O(c log c)` per batch for `c` chunks pinned, quadratic over a large
/// build. The new tags are the newest chunks, so here they pass over the few input tags
/// only.
pub(crate) fn merge_sorted(list: &mut SmallVec<[u32; 2]>, new: &[u32]) {
    if new.is_empty() {
        return;
    }
    let mut old = list.len();
    list.resize(old + new.len(), 0);
    let mut new_left = new.len();
    // Writes go to `out`, which stays above every unread entry of `list` (`out - old` is
    // the number of new tags left), so nothing unread is overwritten.
    let mut out = list.len();
    while new_left > 0 {
        out -= 1;
        if old > 0 && list[old - 1] > new[new_left - 1] {
            old -= 1;
            list[out] = list[old];
        } else {
            new_left -= 1;
            list[out] = new[new_left];
        }
    }
}

#[cfg(test)]
mod tests;
