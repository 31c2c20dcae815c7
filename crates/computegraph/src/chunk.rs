//! The interner's storage: chunks of [`CHUNK`] consecutive operations or input keys, the
//! unit in which entries are pinned and reclaimed (`docs/adr/0010-interner-reclamation.md`),
//! and the structural hashes that the operation table keeps.
//!
//! An operation chunk's columns are the one store of ADR 0017: every distinct operation,
//! its operand keys (exactly as many as it has) and its first output key live here once.
//! A full chunk's operations never change again, so built fragments share them
//! ([`StoreOps`]) instead of keeping a copy, and read them without the interner's lock.

use std::hash::{BuildHasher, Hash, Hasher};
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
    /// The operations while the chunk is open (read them with [`OpChunk::ops`]); moved to
    /// `frozen` when it is closed.
    open_ops: Vec<Op>,
    /// The operations of a closed (full) chunk, shared with built graphs ([`StoreOps`]).
    frozen: Option<Arc<[Op]>>,
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
            open_ops: Vec::with_capacity(n),
            frozen: None,
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
        if self.frozen.is_none() {
            self.frozen = Some(Arc::from(std::mem::take(&mut self.open_ops)));
        }
    }

    /// The chunk's operations.
    #[inline(always)]
    pub(crate) fn ops(&self) -> &[Op] {
        match &self.frozen {
            Some(ops) => ops,
            None => &self.open_ops,
        }
    }

    /// Appends an operation to the open chunk.
    #[inline(always)]
    pub(crate) fn push_op(&mut self, op: Op) {
        debug_assert!(self.frozen.is_none());
        self.open_ops.push(op);
    }

    /// Makes room for `n` more operations in the open chunk.
    pub(crate) fn reserve_ops(&mut self, n: usize) {
        self.open_ops.reserve(n);
    }

    /// Bytes of the operations column.
    pub(crate) fn ops_bytes(&self) -> usize {
        std::mem::size_of::<Op>() * self.frozen.as_ref().map_or(self.open_ops.capacity(), |f| f.len())
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
            shared[c - first_chunk] = match &chunk.frozen {
                Some(ops) => Arc::clone(ops),
                None => {
                    copied += chunk.open_ops.len();
                    Arc::from(chunk.open_ops.as_slice())
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

    /// Appends operations `keys` (consecutive keys, which the graph holds) to `out`, in
    /// order: one slice per chunk met instead of a chunk lookup per operation ([`Self::get`]).
    pub(crate) fn extend_keys<'a>(&'a self, keys: std::ops::Range<usize>, out: &mut Vec<&'a Op>) {
        let mut k = keys.start;
        while k < keys.end {
            let at = k & CHUNK_MASK;
            let n = (CHUNK - at).min(keys.end - k);
            out.extend(&self.chunks[(k >> CHUNK_BITS) - self.first_chunk][at..at + n]);
            k += n;
        }
    }

    /// Bytes this view holds of its own (the copied operations and the chunk list; the
    /// shared ones are the interner's).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.chunks.capacity() * std::mem::size_of::<Arc<[Op]>>() + self.copied * std::mem::size_of::<Op>()
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
