//! Structural global identity: [`ValueKey`], [`OperationKey`] and the [`KeyInterner`]
//! that hash-conses them to dense `u32` ids.
//!
//! A value is either a graph input, named by the user's `InputKey`, or output slot `s` of
//! an operation applied to input values in a role. Structurally equal operations get the
//! same [`OperationKey`] from the interner, so equality and hashing of derived keys are
//! `O(1)` on ids and building the same computation twice yields the same key (free CSE).
//!
//! Interner invariants (append-only columns, see `docs/adr/0001-storage.md`):
//! - every interned value has a [`KeyId`]; ids are dense and never reused;
//! - an operation's input keys are interned before the operation, and its outputs get
//!   consecutive ids after them, so **key-id order is a topological order**;
//! - `op_table` holds each operation exactly once (hash-consing);
//! - no column maps a key id back to its definition: input keys' ids (`input_values`)
//!   increase, and so do operations' first output ids (`op_first_output`, non-decreasing
//!   with operations without outputs), so a key's definition is found by binary search
//!   (only messages and [`KeyInterner::value_key`] need it).
//!
//! Concurrency: state sits behind one `RwLock`. Builders intern in batches (one write
//! lock per `build`), so graphs can be built on many threads against one interner.

use std::any::{Any, TypeId};
use std::fmt;
use std::hash::{BuildHasher, Hash, Hasher};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use hashbrown::HashTable;

use crate::optable::{OpTable, Probe};
use rustc_hash::{FxBuildHasher, FxHashMap};

use crate::error::{GraphError, GraphResult};
use crate::id::{IdVec, ListPool};
use crate::operation::{GraphOperation, Label, OperationRole};

crate::define_id!(
    /// Dense id of an interned value key (a [`ValueKey`]) within one [`KeyInterner`].
    pub struct KeyId = "k"
);
crate::define_id!(
    /// Dense id of an interned operation key (an [`OperationKey`]) within one [`KeyInterner`].
    pub struct OperationKeyId = "ok"
);

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
/// which is what [`GraphBuilder::new`](crate::GraphBuilder::new) uses. Create a scoped one
/// with [`KeyInterner::new`] when memory must be returned: an interner only grows, and
/// dropping it (with the graphs that hold it) frees everything.
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
    /// Number of value keys: the next fresh [`KeyId`].
    value_count: usize,
    input_keys: Vec<Op::InputKey>,
    /// Key id of each input key; increasing.
    input_values: Vec<KeyId>,
    input_table: HashTable<u32>,
    ops: IdVec<OperationKeyId, Op>,
    op_inputs: ListPool<KeyId>,
    /// Role id of each operation; empty while every operation is `Primary` (role 0; read
    /// it with [`Self::role_of`]).
    op_role: Vec<u32>,
    /// Key id of each operation's first output; non-decreasing (equal for an operation
    /// without outputs and the next one).
    op_first_output: Vec<KeyId>,
    /// The operations by hash (the table keeps each hash beside its id, so it grows
    /// without rehashing operations).
    op_table: OpTable,
    roles: Vec<OperationRole>,
    role_table: FxHashMap<OperationRole, u32>,
    /// Most value keys this interner may hold (the id space unless the user chose less).
    value_limit: usize,
}

fn hash_input<K: Hash>(k: &K) -> u64 {
    FxBuildHasher.hash_one(k)
}

/// A 32-bit structural hash of an operation application (kept in the operation table).
pub(crate) fn op_hash<Op: Hash>(op: &Op, inputs: &[KeyId], role: u32) -> u32 {
    hash_op(op, inputs, role)
}

/// [`op_hash`] of input keys given by their indices (equal for equal indices).
#[inline]
pub(crate) fn op_hash_raw<Op: Hash>(op: &Op, inputs: impl Iterator<Item = u32>, role: u32) -> u32 {
    let mut h = FxBuildHasher.build_hasher();
    op.hash(&mut h);
    for k in inputs {
        h.write_u32(k);
    }
    h.write_u32(role);
    let x = h.finish();
    (x ^ (x >> 32)) as u32
}

#[inline]
fn hash_op<Op: Hash>(op: &Op, inputs: &[KeyId], role: u32) -> u32 {
    op_hash_raw(op, inputs.iter().map(|k| k.index() as u32), role)
}

impl<Op: GraphOperation> InternerState<Op> {
    fn new(value_limit: usize) -> Self {
        let mut role_table = FxHashMap::default();
        role_table.insert(OperationRole::Primary, 0);
        InternerState {
            value_count: 0,
            input_keys: Vec::new(),
            input_values: Vec::new(),
            input_table: HashTable::new(),
            ops: IdVec::new(),
            op_inputs: ListPool::default(),
            op_role: Vec::new(),
            op_first_output: Vec::new(),
            op_table: OpTable::default(),
            roles: vec![OperationRole::Primary],
            role_table,
            value_limit,
        }
    }

    pub(crate) fn intern_input(&mut self, key: &Op::InputKey) -> GraphResult<KeyId> {
        let hash = hash_input(key);
        let keys = &self.input_keys;
        if let Some(&i) = self.input_table.find(hash, |&i| keys[i as usize] == *key) {
            return Ok(self.input_values[i as usize]);
        }
        let index = u32::try_from(self.input_keys.len())
            .ok()
            .filter(|&i| i < u32::MAX)
            .ok_or(GraphError::IdSpaceExhausted { space: "input key" })?;
        if self.value_count >= self.value_limit {
            return Err(GraphError::IdSpaceExhausted { space: "value key" });
        }
        let id = KeyId::new(self.value_count);
        self.value_count += 1;
        self.input_keys.push(key.clone());
        self.input_values.push(id);
        let keys = &self.input_keys;
        self.input_table.insert_unique(hash, index, |&i| hash_input(&keys[i as usize]));
        Ok(id)
    }

    /// Makes room for `ops` more operations with `operands` operands in all.
    pub(crate) fn reserve(&mut self, ops: usize, operands: usize) {
        self.op_table.reserve(ops);
        self.ops.reserve(ops);
        self.op_inputs.reserve(ops, operands);
        if !self.op_role.is_empty() {
            self.op_role.reserve(ops);
        }
        self.op_first_output.reserve(ops);
    }

    /// The role id of an interned operation.
    fn role_of(&self, op: OperationKeyId) -> u32 {
        if self.op_role.is_empty() { 0 } else { self.op_role[op.index()] }
    }

    /// Number of value keys (the id the next fresh one gets).
    #[inline]
    pub(crate) fn value_count(&self) -> usize {
        self.value_count
    }

    /// What key `id` stands for, or `None` if this interner did not make it.
    fn key_def(&self, id: KeyId) -> Option<KeyDef> {
        if id.index() >= self.value_count {
            return None;
        }
        if let Ok(i) = self.input_values.binary_search(&id) {
            return Some(KeyDef::Input(i as u32));
        }
        // The last operation whose outputs start at or before `id` owns it: operations
        // after it start after its outputs, and those without outputs before it share its
        // start but come earlier.
        let op = self.op_first_output.partition_point(|&f| f <= id) - 1;
        let slot = id.index() - self.op_first_output[op].index();
        Some(KeyDef::Derived(OperationKeyId::new(op), slot as u8))
    }

    pub(crate) fn lookup_input(&self, key: &Op::InputKey) -> Option<KeyId> {
        let keys = &self.input_keys;
        self.input_table.find(hash_input(key), |&i| keys[i as usize] == *key).map(|&i| self.input_values[i as usize])
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
        self.intern_op_hashed(op, inputs, role, hash_op(op, inputs, role), interner)
    }

    /// [`Self::intern_op`] with the structural hash already computed (see [`op_hash`]).
    pub(crate) fn intern_op_hashed(
        &mut self,
        op: &Op,
        inputs: &[KeyId],
        role: u32,
        h32: u32,
        interner: u32,
    ) -> GraphResult<OperationKey<Op>> {
        debug_assert_eq!(h32, hash_op(op, inputs, role));
        // One probe finds the key or the slot for it.
        let (ops, pool, roles) = (&self.ops, &self.op_inputs, &self.op_role);
        let role_of = |id: OperationKeyId| if roles.is_empty() { 0 } else { roles[id.index()] };
        let slot = match self
            .op_table
            .probe(h32, |id| role_of(id) == role && ops[id] == *op && pool.get(id.index()) == inputs)
        {
            Probe::Found(id) => return Ok(self.op_key(id, interner)),
            Probe::Vacant(slot) => slot,
        };
        let n_out = op.output_count();
        if n_out > 256 {
            return Err(GraphError::TooManyOutputs { operation: format!("{}", Label(op)), outputs: n_out });
        }
        let first = self.value_count;
        if first + n_out.max(1) > self.value_limit {
            return Err(GraphError::IdSpaceExhausted { space: "value key" });
        }
        let id = self.ops.next_id().ok_or(GraphError::IdSpaceExhausted { space: "operation key" })?;
        for &k in inputs {
            self.op_inputs.push_item(k);
        }
        if !self.op_inputs.finish_list() {
            self.op_inputs.abandon_list();
            return Err(GraphError::IdSpaceExhausted { space: "operation input pool" });
        }
        self.op_table.fill(slot, h32, id);
        self.ops.push(op.clone());
        if role != 0 && self.op_role.is_empty() {
            // The first operation in another role: the column starts to be kept.
            self.op_role = vec![0; id.index()];
        }
        if role != 0 || !self.op_role.is_empty() {
            self.op_role.push(role);
        }
        let first = KeyId::new(first);
        self.op_first_output.push(first);
        self.value_count += n_out;
        Ok(OperationKey { interner, id, first_output: first, output_count: n_out as u16, _op: PhantomData })
    }

    /// Hints that `intern_op_hashed` will soon be called with this hash.
    #[inline]
    pub(crate) fn prefetch_op(&self, h32: u32) {
        self.op_table.prefetch(h32);
    }

    fn op_key(&self, id: OperationKeyId, interner: u32) -> OperationKey<Op> {
        OperationKey {
            interner,
            id,
            first_output: self.op_first_output[id.index()],
            output_count: self.ops[id].output_count() as u16,
            _op: PhantomData,
        }
    }

    pub(crate) fn value_key(&self, id: KeyId, interner: u32) -> ValueKey<Op> {
        match self.key_def(id).unwrap_or_else(|| panic!("{id:?} was not made by this interner")) {
            KeyDef::Input(i) => ValueKey::Input(self.input_keys[i as usize].clone()),
            KeyDef::Derived(op, slot) => ValueKey::Derived { operation: self.op_key(op, interner), output_slot: slot },
        }
    }

    fn describe(&self, id: KeyId, interner: u32) -> String {
        use fmt::Write;
        let mut s = String::new();
        // Operation keys print as `ValueKey`'s `Debug` does: `ok3` or `ok3@i7`.
        let at = if interner != 1 { format!("@i{interner}") } else { String::new() };
        match self.key_def(id) {
            None => write!(s, "{id:?} (unknown)").unwrap(),
            Some(KeyDef::Input(i)) => write!(s, "Input({:?})", self.input_keys[i as usize]).unwrap(),
            Some(KeyDef::Derived(op, slot)) => {
                write!(s, "{op:?}{at}.{slot} = {}", Label(&self.ops[op])).unwrap();
                let role = &self.roles[self.role_of(op) as usize];
                if role.is_linearized() {
                    write!(s, " [{role}]").unwrap();
                }
                write!(s, "(").unwrap();
                for (i, k) in self.op_inputs.get(op.index()).iter().enumerate() {
                    if i > 0 {
                        s.push_str(", ");
                    }
                    match self.key_def(*k).expect("operands are interned before their operation") {
                        KeyDef::Input(j) => write!(s, "{:?}", self.input_keys[j as usize]).unwrap(),
                        KeyDef::Derived(o, sl) => write!(s, "{o:?}{at}.{sl}").unwrap(),
                    }
                }
                s.push(')');
            }
        }
        s
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

    /// A new, empty interner that holds at most `limit` value keys (inputs and operation
    /// outputs; the `u32` id space, 2^32 − 2, is the most and the default). Interning
    /// beyond the limit is [`GraphError::IdSpaceExhausted`]: a way to bound an interner's
    /// memory, and to see how a program behaves when the id space runs out.
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

    /// Number of interned value keys.
    pub fn value_count(&self) -> usize {
        self.read().value_count
    }

    /// Number of interned operation keys.
    pub fn operation_count(&self) -> usize {
        self.read().ops.len()
    }

    /// Bytes held by the interner's tables (excluding heap data owned by operations and keys).
    pub fn heap_bytes(&self) -> usize {
        let s = self.read();
        s.input_keys.capacity() * std::mem::size_of::<Op::InputKey>()
            + s.input_values.capacity() * 4
            + s.input_table.capacity() * 5
            + s.ops.heap_bytes()
            + s.op_inputs.heap_bytes()
            + s.op_role.capacity() * 4
            + s.op_first_output.capacity() * 4
            + s.op_table.heap_bytes()
    }

    /// Interns an input key.
    ///
    /// # Panics
    /// When the key id space is exhausted; see [`KeyInterner::try_intern_input`].
    pub fn intern_input(&self, key: Op::InputKey) -> KeyId {
        self.try_intern_input(&key).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Interns an input key, or reports that the id space is exhausted.
    pub fn try_intern_input(&self, key: &Op::InputKey) -> GraphResult<KeyId> {
        if let Some(id) = self.read().lookup_input(key) {
            return Ok(id);
        }
        self.write().intern_input(key)
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
    pub fn intern_operation(&self, op: &Op, inputs: &[KeyId], role: &OperationRole) -> GraphResult<OperationKey<Op>> {
        crate::graph::check_operation(op, inputs.len(), role)?;
        let mut s = self.write();
        if let Some(bad) = inputs.iter().find(|k| k.index() >= s.value_count) {
            return Err(GraphError::UnresolvedKey { key: format!("{bad:?}") });
        }
        let role = s.intern_role(role)?;
        s.intern_op(op, inputs, role, self.id)
    }

    /// The key of an interned id.
    ///
    /// # Panics
    /// If `id` was not made by this interner.
    pub fn value_key(&self, id: KeyId) -> ValueKey<Op> {
        self.read().value_key(id, self.id)
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
        let i = key.id.index();
        let inputs = s.op_inputs.get(i).iter().map(|&k| s.value_key(k, self.id)).collect();
        Ok((s.ops[key.id].clone(), inputs, s.roles[s.role_of(key.id) as usize].clone()))
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
            .field("operations", &s.ops.len())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `Outputs(n)`: one input, `n` outputs (zero included).
    #[derive(Clone, Debug, Hash, PartialEq, Eq)]
    struct Outputs(u8);

    impl GraphOperation for Outputs {
        type Operand = ();
        type Context = ();
        type InputKey = u32;
        fn input_count(&self) -> usize {
            1
        }
        fn output_count(&self) -> usize {
            self.0 as usize
        }
    }

    /// Keys are found by binary search over inputs and first outputs: check every key
    /// of a mix of inputs and operations with 0 to 3 outputs, zero-output runs included.
    #[test]
    fn every_key_maps_back_to_its_definition() {
        let interner = KeyInterner::<Outputs>::new();
        let mut expected = Vec::new();
        let x = interner.intern_input(0);
        expected.push(ValueKey::Input(0));
        let mut last = x;
        for (i, n) in [0u8, 0, 2, 1, 0, 3, 0, 1, 0].into_iter().enumerate() {
            if i % 3 == 2 {
                let k = interner.intern_input(i as u32 + 1);
                assert_eq!(k.index(), expected.len());
                expected.push(ValueKey::Input(i as u32 + 1));
            }
            let key = interner.intern_operation(&Outputs(n), &[last], &OperationRole::Primary).unwrap();
            for slot in 0..n {
                let k = key.output_key_id(slot).unwrap();
                assert_eq!(k.index(), expected.len());
                expected.push(ValueKey::Derived { operation: key, output_slot: slot });
                last = k;
            }
        }
        assert_eq!(interner.value_count(), expected.len());
        for (i, key) in expected.iter().enumerate() {
            assert_eq!(&interner.value_key(KeyId::new(i)), key, "k{i}");
            assert!(!interner.describe(KeyId::new(i)).contains("unknown"));
        }
        assert!(interner.describe(KeyId::new(expected.len())).contains("unknown"));
    }
}
