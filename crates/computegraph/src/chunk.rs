//! The interner's storage: chunks of [`CHUNK`] consecutive operations or input keys, the
//! unit in which entries are pinned and reclaimed (`docs/adr/0010-interner-reclamation.md`),
//! and the structural hashes that the operation table keeps.
//!
//! An operation chunk's columns are the one store of ADR 0017: every distinct operation,
//! its operand keys (exactly as many as it has) and its first output key live here once.
//! A full chunk's operations never change again, so built fragments share them
//! ([`StoreOps`]) instead of keeping a copy, and read them without the interner's lock.
//! They are written in place into the shared allocation ([`OpColumn`]), so closing a
//! chunk copies nothing.

use std::hash::{BuildHasher, Hash, Hasher};
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::Arc;

use rustc_hash::FxBuildHasher;
use smallvec::SmallVec;

use crate::id::{KeyId, ListPool, OperationKeyId};
use crate::operation::GraphOperation;

/// Operations per chunk of the interner's operation columns, and input keys per chunk of
/// its input columns: the unit in which entries are reclaimed.
pub(crate) const CHUNK_BITS: u32 = 10;
pub(crate) const CHUNK: usize = 1 << CHUNK_BITS;
pub(crate) const CHUNK_MASK: usize = CHUNK - 1;
/// Marks an input chunk in a pin list (operation chunks are unmarked).
pub(crate) const INPUT_CHUNK: u32 = 1 << 31;
/// Idle chunks are reclaimed once they hold at least this many value keys (and as many as
/// the chunks in use): below it, reclaiming would only change the keys of rebuilt graphs.
pub(crate) const RECLAIM_MIN_VALUES: usize = 1 << 16;

/// The interner chunks a builder's `flush` touched (tags, see `KeyInterner`'s pins).
pub(crate) type Touched = SmallVec<[u32; 4]>;

/// [`CHUNK`] consecutive operations' columns.
pub(crate) struct OpChunk<Op> {
    /// The operations (read them with [`OpChunk::ops`]).
    ops: OpColumn<Op>,
    pub(crate) inputs: ListPool<KeyId>,
    /// Role id of each operation; empty while every operation of the chunk is `Primary`.
    pub(crate) role: Vec<u32>,
    /// Key id of each operation's first output; non-decreasing.
    pub(crate) first_output: Vec<KeyId>,
    /// Output keys of the chunk's operations.
    pub(crate) values: usize,
    pub(crate) life: ChunkLife,
}

/// Whether a chunk may be reclaimed.
#[derive(Default)]
pub(crate) struct ChunkLife {
    /// Graphs holding a key of the chunk.
    pub(crate) pins: usize,
    /// Holds keys handed out by the interner's own methods: never reclaimed.
    pub(crate) sticky: bool,
    /// Full, unpinned and not sticky: in the interner's idle list, to be reclaimed.
    pub(crate) idle: bool,
}

/// The table slot where a probe found an operation missing (see the interner's
/// `probe_op` and `append_op`): valid until the table next changes.
pub(crate) struct OpSlot(pub(crate) usize);

/// A mean number of operands per operation, in sixteenths.
#[derive(Copy, Clone, Debug)]
pub(crate) struct OperandsPerOp(usize);

impl OperandsPerOp {
    /// Two per operation: the guess when nothing is known.
    pub(crate) const TWO: Self = OperandsPerOp(32);

    /// The mean of `operands` over `ops` operations (two when there are none).
    pub(crate) fn of(ops: usize, operands: usize) -> Self {
        if ops == 0 { Self::TWO } else { OperandsPerOp(operands.saturating_mul(16).div_ceil(ops).min(1 << 20)) }
    }

    /// Operands of `n` operations, rounded up, plus one per sixteen operations of slack
    /// (the mean of a batch is not that of each of its chunks).
    pub(crate) fn operands(self, n: usize) -> usize {
        (n * self.0).div_ceil(16) + n / 16
    }
}

impl<Op> OpChunk<Op> {
    /// An empty chunk with room for `n` operations and their operands at `arity`.
    pub(crate) fn with_capacity(n: usize, arity: OperandsPerOp) -> Self {
        OpChunk {
            ops: OpColumn::with_capacity(n),
            inputs: ListPool::with_capacity(n, arity.operands(n)),
            role: Vec::new(),
            first_output: Vec::with_capacity(n),
            values: 0,
            life: ChunkLife::default(),
        }
    }

    /// Trims the operand pool of a full chunk to its operands: the store keeps exactly
    /// one operand key per operand (a `realloc` that shrinks in place), and freezes its
    /// operations, which graphs may then share.
    pub(crate) fn close(&mut self) {
        self.inputs.shrink_items();
        self.ops.freeze();
    }

    /// The chunk's operations.
    #[inline(always)]
    pub(crate) fn ops(&self) -> &[Op] {
        self.ops.as_slice()
    }

    /// Appends an operation to the open chunk.
    #[inline(always)]
    pub(crate) fn push_op(&mut self, op: Op) {
        self.ops.push(op);
    }

    /// Makes room for `n` more operations in the open chunk.
    pub(crate) fn reserve_ops(&mut self, n: usize) {
        self.ops.reserve(n);
    }

    /// Bytes of the operations column.
    pub(crate) fn ops_bytes(&self) -> usize {
        std::mem::size_of::<Op>() * self.ops.capacity()
    }

    /// Records the role of the operation being appended (before its `first_output`), once
    /// some operation of the chunk is not `Primary`.
    #[cold]
    #[inline(never)]
    pub(crate) fn push_role(&mut self, role: u32) {
        if self.role.is_empty() {
            // The chunk's first operation in another role: its column starts to be kept.
            // With room for the rest of the chunk, so that it is not copied as it grows.
            // (`first_output` has one entry per earlier operation of the chunk; counting
            // them there, not in `ops`, keeps the open-or-frozen test out of every append.)
            let j = self.first_output.len();
            self.role = Vec::with_capacity(self.first_output.capacity().max(j + 1));
            self.role.resize(j, 0);
        }
        self.role.push(role);
    }

    #[inline]
    pub(crate) fn role_of(&self, j: usize) -> u32 {
        if self.role.is_empty() { 0 } else { self.role[j] }
    }
}

/// A built graph's operations, read from the store: the frozen operations of the closed
/// chunks that hold its operations' keys, shared, and a copy of a chunk that was not closed
/// yet when the graph was made (at most [`CHUNK`] operations). The `Arc`s keep what they
/// share alive even once the interner reclaims the chunk (ADR 0017, steps 3 and 4).
pub(crate) struct StoreOps<Op> {
    /// Chunk index of `chunks[0]`.
    first_chunk: usize,
    /// The operations of chunks `first_chunk..`; empty for a chunk the graph holds no
    /// operation of.
    chunks: Vec<Arc<[Op]>>,
    /// Operations copied (not shared) into `chunks`.
    copied: usize,
}

impl<Op: Clone> StoreOps<Op> {
    /// The operations of `chunks` (index and chunk, increasing indices).
    pub(crate) fn new<'a>(chunks: impl Iterator<Item = (usize, &'a OpChunk<Op>)> + Clone) -> Self
    where
        Op: 'a,
    {
        let first_chunk = chunks.clone().next().map_or(0, |(c, _)| c);
        let empty: Arc<[Op]> = Arc::from(Vec::new());
        let (mut shared, mut copied) = (Vec::new(), 0);
        for (c, chunk) in chunks {
            shared.resize(c - first_chunk + 1, Arc::clone(&empty));
            shared[c - first_chunk] = match chunk.ops.frozen() {
                Some(ops) => Arc::clone(ops),
                None => {
                    copied += chunk.ops().len();
                    Arc::from(chunk.ops())
                }
            };
        }
        StoreOps { first_chunk, chunks: shared, copied }
    }

    /// Operation `id`, which the graph holds.
    #[inline(always)]
    pub(crate) fn get(&self, id: OperationKeyId) -> &Op {
        let k = id.index();
        &self.chunks[(k >> CHUNK_BITS) - self.first_chunk][k & CHUNK_MASK]
    }

    /// Bytes this view holds of its own (the copied operations and the chunk list; the
    /// shared ones are the interner's).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.chunks.capacity() * std::mem::size_of::<Arc<[Op]>>() + self.copied * std::mem::size_of::<Op>()
    }
}

/// A chunk's operations, written in place into the allocation that is shared once the
/// chunk is full: closing a chunk used to copy its operations from a `Vec` into a fresh
/// `Arc<[Op]>` (`docs/PERFORMANCE.md`, bld41b).
///
/// Invariants: `data` points at the first element of `buf`'s allocation, whose first `len`
/// elements are initialized; while the column is open (`Open`) no other reference to the
/// allocation exists (the column is never shared open: [`StoreOps::new`] copies an open
/// chunk), so elements are written through `data`; once frozen (`Frozen`, every element
/// initialized) it is only read. Every read goes through `data`, open or frozen, so
/// [`OpColumn::as_slice`] has no branch.
pub(crate) struct OpColumn<Op> {
    data: NonNull<Op>,
    len: usize,
    /// Elements the allocation has room for.
    cap: usize,
    buf: Buf<Op>,
}

/// The allocation behind an [`OpColumn`].
enum Buf<Op> {
    /// Open: `len` of its elements initialized, the rest free.
    Open(Arc<[MaybeUninit<Op>]>),
    /// Closed: all of its elements initialized, shared with built graphs.
    Frozen(Arc<[Op]>),
    /// None, only while [`OpColumn::freeze`] turns `Open` into `Frozen`.
    Moving,
}

// SAFETY: the column owns its elements (as a `Vec<Op>` or an `Arc<[Op]>` would): `data`
// only points into `buf`, which the column holds, so sending it sends the elements.
unsafe impl<Op: Send + Sync> Send for OpColumn<Op> {}
// SAFETY: `&OpColumn` only reads the elements (`as_slice`, `frozen`), as `&[Op]` does.
unsafe impl<Op: Sync> Sync for OpColumn<Op> {}

impl<Op> OpColumn<Op> {
    /// An open column with room for `n` operations.
    pub(crate) fn with_capacity(n: usize) -> Self {
        let (buf, data) = Self::allocate(n);
        OpColumn { data, len: 0, cap: n, buf: Buf::Open(buf) }
    }

    /// A fresh open allocation of `n` elements and its first element.
    fn allocate(n: usize) -> (Arc<[MaybeUninit<Op>]>, NonNull<Op>) {
        let mut buf = Arc::<[Op]>::new_uninit_slice(n);
        let slice = Arc::get_mut(&mut buf).expect("a fresh allocation is not shared");
        let data = NonNull::from(slice).cast();
        (buf, data)
    }

    /// Room for operations in the allocation.
    pub(crate) fn capacity(&self) -> usize {
        self.cap
    }

    /// The operations.
    #[inline(always)]
    pub(crate) fn as_slice(&self) -> &[Op] {
        // SAFETY: the first `len` elements from `data` are initialized and live as long
        // as `buf`, which `&self` borrows; nothing writes them while it is borrowed.
        unsafe { std::slice::from_raw_parts(self.data.as_ptr(), self.len) }
    }

    /// The shared operations once frozen.
    pub(crate) fn frozen(&self) -> Option<&Arc<[Op]>> {
        match &self.buf {
            Buf::Frozen(b) => Some(b),
            Buf::Open(_) | Buf::Moving => None,
        }
    }

    /// Appends `op` to an open column, growing it when full.
    #[inline(always)]
    pub(crate) fn push(&mut self, op: Op) {
        if self.len == self.cap {
            self.grow(1);
        }
        debug_assert!(matches!(self.buf, Buf::Open(_)));
        // SAFETY: the column is open (a full one was moved into an open allocation by
        // `grow`, and a frozen one is full) and has room past `len`, which `data` may
        // write: no other reference to an open allocation exists.
        unsafe { self.data.as_ptr().add(self.len).write(op) };
        self.len += 1;
    }

    /// Makes room for `n` more operations in an open column.
    pub(crate) fn reserve(&mut self, n: usize) {
        if self.cap - self.len < n {
            self.grow(n);
        }
    }

    /// Moves the operations into an open allocation with room for `n` more (and at least
    /// twice the current room, so that pushes one at a time stay amortized `O(1)`).
    #[cold]
    #[inline(never)]
    fn grow(&mut self, n: usize) {
        self.move_to((self.len + n).max(2 * self.cap).max(4));
    }

    /// Moves the operations of an open column into a fresh open allocation of `capacity`
    /// (at least `len`).
    fn move_to(&mut self, capacity: usize) {
        assert!(
            matches!(self.buf, Buf::Open(_)) && capacity >= self.len,
            "internal error: only an open operation column moves"
        );
        let (buf, data) = Self::allocate(capacity);
        // SAFETY: the first `len` elements are initialized and owned by this open column
        // alone; they are moved (bitwise) into the fresh allocation, and the old one is
        // then freed as `MaybeUninit`s, which does not drop them again.
        unsafe { std::ptr::copy_nonoverlapping(self.data.as_ptr(), data.as_ptr(), self.len) };
        (self.buf, self.data, self.cap) = (Buf::Open(buf), data, capacity);
    }

    /// Freezes the column for sharing: the allocation itself when the column fills it
    /// (a full chunk), else a copy of exactly its operations.
    pub(crate) fn freeze(&mut self) {
        if !matches!(self.buf, Buf::Open(_)) {
            return;
        }
        if self.len != self.cap {
            self.move_to(self.len);
        }
        if let Buf::Open(b) = std::mem::replace(&mut self.buf, Buf::Moving) {
            // SAFETY: the column fills its allocation, so every element is initialized;
            // `data` still points at its first (the allocation does not move).
            self.buf = Buf::Frozen(unsafe { b.assume_init() });
        }
    }
}

impl<Op> Drop for OpColumn<Op> {
    fn drop(&mut self) {
        if let Buf::Open(_) = self.buf {
            // SAFETY: the first `len` elements are initialized and owned by this open
            // column alone; the allocation is then freed as `MaybeUninit`s.
            unsafe { std::ptr::drop_in_place(std::ptr::slice_from_raw_parts_mut(self.data.as_ptr(), self.len)) };
        }
    }
}

/// [`CHUNK`] consecutive input keys.
pub(crate) struct InputChunk<K> {
    pub(crate) keys: Vec<K>,
    /// Key id of each input; increasing.
    pub(crate) values: Vec<KeyId>,
    pub(crate) life: ChunkLife,
}

impl<K> InputChunk<K> {
    pub(crate) fn heap_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.keys.capacity() * std::mem::size_of::<K>() + self.values.capacity() * 4
    }
}

/// Reclaimed chunks, dropped once the interner's lock is released: dropping operations
/// and keys runs their `Drop`, user code that must not run under the lock.
pub(crate) struct Garbage<Op: GraphOperation> {
    pub(crate) ops: Vec<OpChunk<Op>>,
    pub(crate) inputs: Vec<InputChunk<Op::InputKey>>,
}

impl<Op: GraphOperation> Default for Garbage<Op> {
    fn default() -> Self {
        Garbage { ops: Vec::new(), inputs: Vec::new() }
    }
}

/// The pin tag of the chunk holding operation `id`.
#[inline]
pub(crate) fn op_chunk_tag(id: OperationKeyId) -> u32 {
    (id.index() >> CHUNK_BITS) as u32
}

/// The pin tag of the chunk holding input key `index`.
#[inline]
pub(crate) fn input_chunk_tag(index: u32) -> u32 {
    INPUT_CHUNK | (index >> CHUNK_BITS)
}

pub(crate) fn hash_input<K: Hash>(k: &K) -> u64 {
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
pub(crate) fn hash_op<Op: Hash>(op: &Op, inputs: &[KeyId], role: u32) -> u32 {
    op_hash_raw(op, inputs.iter().map(|k| k.index() as u32), role)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A step applied to an open column and to a `Vec` kept beside it.
    #[derive(Clone, Debug)]
    enum Step {
        Push,
        Reserve(usize),
    }

    fn steps() -> impl Strategy<Value = Vec<Step>> {
        proptest::collection::vec(prop_oneof![4 => Just(Step::Push), 1 => (0usize..40).prop_map(Step::Reserve)], 0..200)
    }

    proptest! {
        /// The column reads as a `Vec` given the same pushes, through growth and freezing
        /// (full or not), and drops every operation exactly once (`Rc` counts them).
        #[test]
        fn an_operation_column_reads_as_a_vec_of_its_pushes(
            capacity in 1usize..40,
            steps in steps(),
            freeze_full in any::<bool>(),
        ) {
            let alive = std::rc::Rc::new(());
            let mut column = OpColumn::with_capacity(capacity);
            let mut reference = Vec::new();
            for (i, step) in steps.iter().enumerate() {
                match step {
                    Step::Push => {
                        column.push((i, std::rc::Rc::clone(&alive)));
                        reference.push(i);
                    }
                    Step::Reserve(n) => {
                        column.reserve(*n);
                        prop_assert!(column.capacity() - column.as_slice().len() >= *n);
                    }
                }
                prop_assert!(column.as_slice().iter().map(|(i, _)| *i).eq(reference.iter().copied()));
            }
            if freeze_full {
                // Fill the allocation, as a full chunk does: freezing then keeps it.
                while column.as_slice().len() < column.capacity() {
                    let i = reference.len() + 1000;
                    column.push((i, std::rc::Rc::clone(&alive)));
                    reference.push(i);
                }
            }
            let (data, full) = (column.as_slice().as_ptr(), column.as_slice().len() == column.capacity());
            prop_assert!(full || !freeze_full);
            column.freeze();
            // A full column is frozen in place; another is moved into an exact allocation.
            prop_assert_eq!(full, column.as_slice().as_ptr() == data);
            prop_assert_eq!(column.capacity(), reference.len());
            let shared = column.frozen().map(Arc::clone).expect("frozen");
            prop_assert!(shared.iter().map(|(i, _)| *i).eq(reference.iter().copied()));
            prop_assert!(column.as_slice().iter().map(|(i, _)| *i).eq(reference.iter().copied()));
            prop_assert_eq!(std::rc::Rc::strong_count(&alive), 1 + reference.len());
            drop(column);
            prop_assert_eq!(std::rc::Rc::strong_count(&alive), 1 + reference.len());
            drop(shared);
            prop_assert_eq!(std::rc::Rc::strong_count(&alive), 1);
        }

        /// An open column dropped before it is frozen drops each of its operations once.
        #[test]
        fn an_open_operation_column_drops_its_operations(capacity in 1usize..40, pushes in 0usize..100) {
            let alive = std::rc::Rc::new(());
            let mut column = OpColumn::with_capacity(capacity);
            for _ in 0..pushes {
                column.push(std::rc::Rc::clone(&alive));
            }
            prop_assert_eq!(std::rc::Rc::strong_count(&alive), 1 + pushes);
            drop(column);
            prop_assert_eq!(std::rc::Rc::strong_count(&alive), 1);
        }
    }
}
