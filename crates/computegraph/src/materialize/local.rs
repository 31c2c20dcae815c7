//! The short path of `materialize_merge` for a view of one fragment (no external
//! operands, every operation `Primary`, keys compact): marking into a bit per key
//! (`sweep_single`) and emit in the fragment's local order (`emit_in_local_order`), with
//! the same result as the general path (`materialize.rs`, which falls back to it).
//!
//! Emit renumbers nothing while it can: a fragment built alone on a fresh interner,
//! inputs first, with nothing pruned, gives each value its key as its new id (the inputs
//! hold keys `0..n`, and the reachable operations follow in key order with no key
//! skipped). Then an operand's new id is its key, read from the store's operand lists
//! (the interner's chunks, in key order, so in sequence) instead of the fragment's
//! operand references and a key → id map (two reads at random per operand, a cache miss
//! each on a graph whose operands lie far from their readers); no map is written or read
//! (ADR 0017, step 4). Once a key is skipped (an unreachable operation or input) but keys
//! still increase, a value's id is its key's rank among the values' keys, from a bit per
//! key and a count per 64 keys (`KeyRank`, 1.5 bits per key against the map's 32, small
//! enough to stay cached). Only keys out of order (an input interned after operations)
//! build the key-indexed map, from the values emitted so far, and the rest of emit reads
//! the fragment's operand lists through it as before.

use std::mem::MaybeUninit;
use std::sync::Arc;

use super::{AHEAD, Bits, KeyRun, Marker, MaterializedGraph, OperationId, ValueId, output_count, output_count_from};
use crate::chunk::{CHUNK_BITS, CHUNK_MASK, OpChunk};
use crate::error::{GraphError, GraphResult};
use crate::graph::{Graph, InputRef, LocalOperationId, LocalValueId, STORE_OPS_MIN};
use crate::hugepages::{huge_vec, huge_vec_of};
use crate::id::{IdVec, KeyId, ListPool, OperationKeyId};
use crate::keymap::KeyMap;
use crate::operation::{GraphOperation, OperationRole};
use crate::prefetch::FarOperands;
use crate::stop::Poll;

impl<Op: GraphOperation> Marker<'_, Op> {
    /// The sweep of a `single` view: one descending pass over its fragment (it has no
    /// external operands, so nothing queues another), recording each reachable operation
    /// by the key of its first output in `key_needed`; which copy of a repeated
    /// operation is emitted is emit's choice. The columns are read as slices, outside
    /// `self`, so that the loop keeps them in registers.
    pub(super) fn sweep_single(&mut self) -> GraphResult<()> {
        let graph = &*self.graphs[0];
        let Some((mut lo, hi)) = self.pending[0].take() else { return Ok(()) };
        if self.expanded[0].is_empty() {
            self.expanded[0].resize(graph.operation_count());
        }
        let Marker {
            needed, expanded, key_needed, inputs, input_list, single_ops, single_operands, def_values, ..
        } = self;
        let (needed, expanded) = (&mut needed[0], &mut expanded[0]);
        let (value_op, keys, first_outputs) =
            (graph.value_op.raw(), graph.value_key.raw(), graph.op_first_output.raw());
        let mut poll = Poll::new();
        let mut v = hi + 1;
        while v > lo {
            v -= 1;
            if !needed.get(v) {
                continue;
            }
            let Some(op) = value_op[v] else {
                let i = graph
                    .inputs
                    .binary_search(&LocalValueId::new(v))
                    .expect("a value without an operation is an input");
                if inputs.insert_if_absent(keys[v], input_list.len() as u32) {
                    input_list.push((keys[v], graph.input_keys[i].clone()));
                }
                continue;
            };
            if expanded.test_and_set(op.index()) {
                continue;
            }
            poll.tick()?;
            // Counted without a branch on whether the key is new: about one operation in
            // three repeats an earlier one's key, at random, and a branch on it was
            // mispredicted as often. The outputs are counted either way (the value
            // column's entries at `v`, just read).
            let fresh = usize::from(!key_needed.test_and_set(keys[first_outputs[op.index()].index()].index()));
            *single_ops += fresh;
            *def_values += fresh * output_count(graph, op);
            let operands = graph.op_inputs.get(op.index());
            *single_operands += fresh * operands.len();
            // One operand or two without a branch on which: in a DAG of random variants
            // they come at random, and a loop over the list mispredicted its end often
            // (`docs/PERFORMANCE.md`, mc45). The second is the last operand, the first again
            // when it is the only one, whose second marking changes nothing.
            if let n @ (1 | 2) = operands.len() {
                mark_operand(needed, &mut lo, operands[0].get());
                mark_operand(needed, &mut lo, operands[n - 1].get());
            } else {
                for r in operands {
                    mark_operand(needed, &mut lo, r.get());
                }
            }
        }
        Ok(())
    }

    /// Emit for a `single` view: the fragment's operations in local order, each reachable
    /// key at its first local definition. Emit's order is key order; a fragment whose
    /// builder interned its fresh operations in local order (every builder alone on its
    /// interner) defines its keys for the first time in increasing key order, so this is
    /// the same graph as the general emit's without `defs`, its sort and its entries. A
    /// fragment that defines a key first after a larger one (it repeats keys another
    /// fragment interned) returns `None`, and emit takes the general path.
    ///
    /// The first local definition stands for every copy: copies share their key, so
    /// their operands have the same keys, and those keys are defined earlier in local
    /// order (operands precede their reader), so their new ids exist when it is emitted.
    /// While every value's id is its key, operands are read from the store and not
    /// renumbered (the module doc).
    pub(super) fn emit_in_local_order(&mut self, out_ids: &[KeyId]) -> GraphResult<Option<MaterializedGraph<Op>>> {
        let graph = &*self.graphs[0];
        let (n_ops, n_inputs, n_externals) = (self.single_ops, self.input_list.len(), self.external_list.len());
        let n_values = self.def_values + n_inputs + n_externals;
        if n_ops > <OperationId as crate::Id>::MAX_INDEX + 1 {
            return Err(GraphError::IdSpaceExhausted { space: "materialized operation" });
        }
        if n_values > <ValueId as crate::Id>::MAX_INDEX + 1 {
            return Err(GraphError::IdSpaceExhausted { space: "materialized value" });
        }
        let n_operands = self.single_operands;
        if u32::try_from(n_operands).is_err() {
            return Err(GraphError::IdSpaceExhausted { space: "materialized operand pool" });
        }
        let use_store = n_ops >= STORE_OPS_MIN;
        // Plain vectors while filling, made columns at the end without a copy; the key
        // columns stay runs while keys are consecutive (`keys.rs`): no bytes written for
        // them on a fragment built alone with nothing pruned. The sweep counted the
        // values, operations and operands exactly, so the other columns are reserved at
        // their final lengths and written through that room (`Room`).
        let mut value_key: KeyRun<ValueId, KeyId> = KeyRun::with_room(n_values);
        let mut value_op: Vec<Option<OperationId>> = huge_vec(n_values);
        let mut op_key: KeyRun<OperationId, OperationKeyId> = KeyRun::with_room(n_ops);
        let mut op_first_output: Vec<ValueId> = huge_vec(n_ops);
        let mut starts: Vec<u32> = huge_vec(n_ops + 1);
        let mut items: Vec<ValueId> = huge_vec(n_operands);
        starts.push(0);
        let mut own_ops: Vec<Op> = if use_store { Vec::new() } else { Vec::with_capacity(n_ops) };
        let (inputs, input_keys) = push_leaves(&mut self.input_list, &mut value_op, &mut value_key);
        let (externals, external_keys) = push_leaves(&mut self.external_list, &mut value_op, &mut value_key);
        let mut room = Room::of(&mut value_op, &mut op_first_output, &mut starts, &mut items);
        // How a key becomes its value's id (the module doc): the key itself while every
        // value so far has its key as its id, its rank among the values' keys while those
        // increase, a key-indexed map otherwise.
        let key_space = self.key_needed.len;
        let mut ids = Renumber::of(&value_key, key_space);
        let interner = Arc::clone(self.view.interner());
        // Held to the end of emit: the store's operand lists are read under it, and the
        // operations' chunks are shared under it (`store_ops_of`). Nothing below takes the
        // lock again.
        let state = interner.read();
        // The chunk of the last operation read in the store (consecutive operations share it).
        let mut chunk_at: Option<(usize, &OpChunk<Op>)> = None;
        let keys = graph.value_key.raw();
        let first_outputs = graph.op_first_output.raw();
        // The store's chunks holding the operations (their keys increase, so a chunk
        // differs from the previous one or repeats it).
        let mut chunks: Vec<usize> = Vec::new();
        let mut next_key = 0;
        let mut far = FarOperands::new(n_inputs + n_externals);
        let mut prefetch = false;
        let mut poll = Poll::new();
        // Each reachable key's first local definition, listed a block at a time before it
        // is emitted (`FirstDefinitions`). Operations without outputs at the end of the
        // fragment have a first output past its last value: no key to list (`first_outputs`
        // does not decrease, so they are the suffix this search finds).
        let listed = first_outputs.partition_point(|f| f.index() < keys.len());
        let mut defining = FirstDefinitions::new(listed, n_ops == first_outputs.len());
        while let Some(block) = defining.next_block(&first_outputs[..listed], keys, &mut self.key_needed) {
            for &op in block {
                let mut op = op as usize;
                let first_local = first_outputs[op].index();
                let mut n_out = output_count_from(graph, LocalOperationId::new(op), first_local);
                if n_out == 0 {
                    // An operation without outputs (reachable from none) whose first-output
                    // index is the next value's: it was listed for that value's key, whose
                    // first definition is then the operation defining that value, next in
                    // local order with outputs. That one is emitted here instead (it is not
                    // listed again: the key's bit is taken).
                    (op, n_out) = next_definer(graph, first_local);
                }
                let lop = LocalOperationId::new(op);
                let key = keys[first_local];
                if key.index() < next_key {
                    return Ok(None);
                }
                next_key = key.index() + 1;
                poll.tick()?;
                let id = OperationId::new(op_key.len());
                let reader = room.next_value();
                let ok = graph.op_key[lop];
                let c = ok.index() >> CHUNK_BITS;
                if !matches!(ids, Renumber::Map(_)) {
                    let chunk = match chunk_at {
                        Some((at, chunk)) if at == c => chunk,
                        _ => match state.op_chunk(ok) {
                            Some(chunk) => {
                                chunk_at = Some((c, chunk));
                                chunk
                            }
                            // Reclaimed (it cannot be while the fragment pins it): the general
                            // path reads the fragment's own operand lists.
                            None => return Ok(None),
                        },
                    };
                    // One loop per renumbering, so that the match is not taken per operand.
                    let operands = chunk.inputs.get(ok.index() & CHUNK_MASK);
                    let list = room.list(operands.len());
                    match &ids {
                        // One operand or two without a branch on which (as in the sweep):
                        // the first and the last, the first again when it is the only one.
                        Renumber::Identity if matches!(operands.len(), 1 | 2) => {
                            let n = operands.len();
                            for (at, k) in [(0, operands[0]), (n - 1, operands[n - 1])] {
                                debug_assert!(k.index() < reader, "operands precede their users in key order");
                                list[at].write(ValueId::new(k.index()));
                            }
                        }
                        Renumber::Identity => {
                            for (slot, k) in list.iter_mut().zip(operands) {
                                // Values `0..reader` are keys `0..reader`, and an operand is
                                // emitted before its reader: the store gives an operation the
                                // next key after its operands' (ADR 0017's key order), so this
                                // holds by construction and is checked in debug builds only
                                // (with the materialized graph's verifier); compile's slot pass
                                // panics on an operand read before it is defined in any build.
                                debug_assert!(k.index() < reader, "operands precede their users in key order");
                                slot.write(ValueId::new(k.index()));
                            }
                        }
                        Renumber::Rank(rank) => {
                            for (slot, k) in list.iter_mut().zip(operands) {
                                let v = rank.rank(k.index()).expect("operands precede their users in key order");
                                slot.write(ValueId::new(v));
                            }
                        }
                        Renumber::Map(_) => unreachable!("a map reads the fragment's operand lists"),
                    }
                } else {
                    let Renumber::Map(vid) = &ids else { unreachable!("checked above") };
                    if far.block_full() {
                        prefetch = far.decide();
                    }
                    if prefetch {
                        prefetch_local_operands(graph, op, vid);
                    }
                    let refs = graph.op_input_refs(lop);
                    let list = room.list(refs.len());
                    for (slot, r) in list.iter_mut().zip(refs) {
                        let v =
                            vid[graph.input_key_id(r).index()].expect("operands precede their users in local order");
                        far.note(v.index(), reader);
                        slot.write(v);
                    }
                }
                if !use_store {
                    own_ops.push(graph.op(lop).clone());
                }
                op_key.push(ok);
                if chunks.last() != Some(&c) {
                    chunks.push(c);
                }
                room.operation(reader);
                for slot in 0..n_out {
                    let key = keys[first_local + slot];
                    room.value(Some(id));
                    // While every value's id is its key, `value_key` is the run `0..` and
                    // a key equal to the next id only lengthens it.
                    if matches!(ids, Renumber::Identity) && key.index() == value_key.len() {
                        value_key.lengthen();
                    } else {
                        value_key.push(key);
                        ids.push(key, &value_key, key_space);
                    }
                }
            }
        }
        let (n_written_values, n_written_ops, n_written_operands) = (room.next_value(), room.ops, room.operands);
        // SAFETY: `Room` wrote entries `len..n` of each column's spare capacity in order
        // (`Room::of`), where `len` is the column's length then and `n` its count now;
        // none of the types needs a drop.
        unsafe {
            value_op.set_len(n_written_values);
            op_first_output.set_len(n_written_ops);
            starts.set_len(n_written_ops + 1);
            items.set_len(n_written_operands);
        }
        let op_inputs = ListPool::from_filled_parts(starts, items);
        let store_ops = if use_store {
            match state.store_ops_of(chunks.iter().copied()) {
                Some(store) => Some(store),
                // A chunk was reclaimed (it cannot be while the fragment pins it): the
                // general path copies the operations.
                None => return Ok(None),
            }
        } else {
            None
        };
        drop(state);
        // The sweep's counts (taken without a branch) sized the columns: they are the
        // operations and values emitted.
        debug_assert_eq!(
            (op_key.len(), value_op.len(), op_inputs.items().len()),
            (n_ops, n_values, n_operands),
            "the sweep's counts"
        );
        let outputs =
            out_ids.iter().map(|&k| ids.id(k, value_key.len())).map(|v| v.expect("every output was marked")).collect();
        Ok(Some(MaterializedGraph {
            interner,
            value_key,
            value_op: IdVec::from_raw(value_op),
            own_ops: IdVec::from_raw(own_ops),
            store_ops,
            op_key,
            op_inputs,
            op_role: IdVec::new(),
            roles: vec![OperationRole::Primary],
            op_first_output: IdVec::from_raw(op_first_output),
            inputs,
            input_keys,
            externals,
            external_keys,
            outputs,
        }))
    }

    /// Fills `defs` from the expanded operations of a `single` view whose emit in local
    /// order gave up: the earliest expanded copy of each key, as marking records it for
    /// other views.
    pub(super) fn defs_from_expanded(&mut self) {
        self.single = false;
        let graph = &*self.graphs[0];
        let key_space = self.key_needed.len;
        self.defs = KeyMap::with_range(0..key_space, graph.value_count());
        if self.expanded[0].is_empty() {
            return;
        }
        for (op, &first) in graph.op_first_output.raw().iter().enumerate() {
            if self.expanded[0].get(op) {
                self.defs.insert_if_absent(graph.value_key[first], (0, LocalOperationId::new(op)));
            }
        }
    }
}

/// Emit's columns of known length (`value_op`, `op_first_output` and the operand pool's
/// two), written through their spare capacity: an index per column kept in a register
/// and a bound check per operation or value, where a push per entry tests the capacity
/// and stores the length each time (the sweep counted every column's length, so the room
/// is exact; a count too low panics on the bound, and room beyond it stays unused). Each column is written from its
/// length at [`Room::of`] on, in order, and the caller sets the lengths to the counts.
struct Room<'a> {
    value_op: &'a mut [MaybeUninit<Option<OperationId>>],
    op_first_output: &'a mut [MaybeUninit<ValueId>],
    /// The pool's list ends: entry `i` ends list `i` (the pool's start 0 is written).
    ends: &'a mut [MaybeUninit<u32>],
    items: &'a mut [MaybeUninit<ValueId>],
    /// Values of `value_op` before the room (the leaves).
    leaves: usize,
    /// Values written since.
    values: usize,
    /// Operations written (their first outputs and their lists' ends).
    ops: usize,
    /// Operands written into the pool.
    operands: usize,
}

impl<'a> Room<'a> {
    /// The room of the four columns, each empty but `value_op` (the leaves) and `starts`
    /// (the pool's first start).
    fn of(
        value_op: &'a mut Vec<Option<OperationId>>,
        op_first_output: &'a mut Vec<ValueId>,
        starts: &'a mut Vec<u32>,
        items: &'a mut Vec<ValueId>,
    ) -> Self {
        debug_assert!(op_first_output.is_empty() && starts.len() == 1 && items.is_empty());
        let leaves = value_op.len();
        Room {
            value_op: value_op.spare_capacity_mut(),
            op_first_output: op_first_output.spare_capacity_mut(),
            ends: starts.spare_capacity_mut(),
            items: items.spare_capacity_mut(),
            leaves,
            values: 0,
            ops: 0,
            operands: 0,
        }
    }

    /// The room of the next operation's `n` operands, for the caller to write each one.
    #[inline(always)]
    fn list(&mut self, n: usize) -> &mut [MaybeUninit<ValueId>] {
        let at = self.operands;
        self.operands += n;
        &mut self.items[at..at + n]
    }

    /// Closes the operation whose operands were just written: its first output is value
    /// `first_output`.
    #[inline(always)]
    fn operation(&mut self, first_output: usize) {
        self.op_first_output[self.ops].write(ValueId::new(first_output));
        // Fits: the pool's length was checked against `u32` before emit.
        self.ends[self.ops].write(self.operands as u32);
        self.ops += 1;
    }

    /// The id the next value gets.
    #[inline(always)]
    fn next_value(&self) -> usize {
        self.leaves + self.values
    }

    /// Appends a value defined by `op`.
    #[inline(always)]
    fn value(&mut self, op: Option<OperationId>) {
        self.value_op[self.values].write(op);
        self.values += 1;
    }
}

/// Marks operand `r` of a `single` view's operation needed, lowering the sweep's bound
/// `lo` to it, without a branch on whether it was needed before (then `lo` is at most it
/// already, or stays as it was).
#[inline(always)]
fn mark_operand(needed: &mut Bits, lo: &mut usize, r: InputRef) {
    match r {
        // Operands come earlier: this sweep reaches them.
        InputRef::Local(u) => {
            let fresh = !needed.test_and_set(u.index());
            *lo = (*lo).min(if fresh { u.index() } else { *lo });
        }
        InputRef::External(_) => unreachable!("a single view's fragment has no external operands"),
    }
}

/// The operation defining local value `v` and its output count, for an operation without
/// outputs that emit was handed in its place. The sweep records the keys of operations'
/// first outputs only, so `v` is an operation's first output, not an input.
#[cold]
fn next_definer<Op: GraphOperation>(graph: &Graph<Op>, v: usize) -> (usize, usize) {
    let op = graph.value_op.raw()[v].expect("a listed key is an operation's first output");
    (op.index(), output_count_from(graph, op, v))
}

/// Emit in local order's prefetches, in two stages as `prefetch_operands`: the operands'
/// keys of local operation `op + 2 * AHEAD`, then their entries in `vid` for `op + AHEAD`.
fn prefetch_local_operands<Op: GraphOperation>(graph: &Graph<Op>, op: usize, vid: &[Option<ValueId>]) {
    if op + 2 * AHEAD < graph.operation_count() {
        graph.prefetch_operand_keys(LocalOperationId::new(op + 2 * AHEAD));
    }
    if op + AHEAD < graph.operation_count() {
        for r in graph.op_input_refs(LocalOperationId::new(op + AHEAD)) {
            crate::prefetch::prefetch_entry(vid, graph.input_key_id(r).index());
        }
    }
}

/// The operations emit in local order emits: each reachable key's first local definition,
/// in local order, listed a block of the fragment's operations at a time into a small
/// buffer that stays cached. Listing them without a branch (each operation's index is
/// written, and the count advances when its key's bit was set) spares emit a branch on
/// whether an operation repeats an earlier one's key, which comes at random on a DAG
/// with repeated operations and was mispredicted as often. Each key's bit is cleared as
/// its first definition is listed, as emit did. When every operation of the fragment is
/// one (no repeats, nothing pruned: the sweep counted as many keys as operations), the
/// blocks list every operation and no bit is read. An operation without outputs lists the
/// next value's key (its first-output index is that value's), if that key's bit is still
/// set: emit then takes the operation defining that value in its place.
struct FirstDefinitions {
    buf: Vec<u32>,
    next: usize,
    end: usize,
    every: bool,
}

/// Operations per block of [`FirstDefinitions`] (16 KiB of indices).
const DEFINITIONS_BLOCK: usize = 4096;

impl FirstDefinitions {
    /// The lister of `n_ops` operations; `every` when each one is its key's first
    /// definition and reachable.
    fn new(n_ops: usize, every: bool) -> Self {
        FirstDefinitions { buf: vec![0; DEFINITIONS_BLOCK.min(n_ops)], next: 0, end: n_ops, every }
    }

    /// The first definitions among the next block of operations (`first_outputs[op]` is
    /// operation `op`'s first value, `keys` the values' keys), `None` once every
    /// operation is listed; a block may list none.
    #[inline]
    fn next_block(&mut self, first_outputs: &[LocalValueId], keys: &[KeyId], needed: &mut Bits) -> Option<&[u32]> {
        if self.next == self.end {
            return None;
        }
        let from = self.next;
        self.next = (from + DEFINITIONS_BLOCK).min(self.end);
        let mut n = 0;
        if self.every {
            for (slot, op) in self.buf.iter_mut().zip(from..self.next) {
                *slot = op as u32;
            }
            return Some(&self.buf[..self.next - from]);
        }
        for (op, first) in (from..).zip(&first_outputs[from..self.next]) {
            self.buf[n] = op as u32;
            n += usize::from(needed.take(keys[first.index()].index()));
        }
        Some(&self.buf[..n])
    }
}

/// How emit in local order turns an operand's key into its value's id.
enum Renumber {
    /// Every value's id is its key (values `0..n` have keys `0..n`).
    Identity,
    /// The values' keys increase: a value's id is the rank of its key among them.
    Rank(KeyRank),
    /// Key → id, over the key space: keys out of order (inputs interned after operations).
    Map(Vec<Option<ValueId>>),
}

impl Renumber {
    /// The renumbering of the values `value_key` lists (value `i` has its `i`-th key)
    /// among `key_space` keys: the cheapest of the three that holds.
    fn of(value_key: &KeyRun<ValueId, KeyId>, key_space: usize) -> Self {
        let mut prefix = KeyRun::with_room(value_key.len());
        let mut ids = Renumber::Identity;
        for k in value_key.iter() {
            prefix.push(k);
            ids.push(k, &prefix, key_space);
        }
        ids
    }

    /// Records the last value of `value_key`, whose key is `key` (its id is
    /// `value_key.len() - 1`; every key is below `key_space`), taking the next
    /// renumbering when the current one no longer holds for it.
    #[inline(always)]
    fn push(&mut self, key: KeyId, value_key: &KeyRun<ValueId, KeyId>, key_space: usize) {
        let v = value_key.len() - 1;
        let key = key.index();
        match self {
            Renumber::Identity if key == v => {}
            Renumber::Rank(rank) if rank.last.is_none_or(|last| key > last) => rank.push(key),
            Renumber::Map(vid) => vid[key] = Some(ValueId::new(v)),
            // The first key skipped (every value before this one had its key as its id,
            // and this key is larger than theirs): ranks from here on.
            Renumber::Identity if v == 0 || key > value_key.at(ValueId::new(v - 1)).index() => {
                let mut rank = KeyRank::with_space(key_space);
                for k in value_key.iter() {
                    rank.push(k.index());
                }
                *self = Renumber::Rank(rank);
            }
            // Keys out of order: the map.
            _ => {
                let mut vid = huge_vec_of(None, key_space);
                for (v, k) in value_key.iter().enumerate() {
                    vid[k.index()] = Some(ValueId::new(v));
                }
                *self = Renumber::Map(vid);
            }
        }
    }

    /// The id of the value whose key is `key`, among the first `values` values; `None` if
    /// none of them has it.
    #[inline(always)]
    fn id(&self, key: KeyId, values: usize) -> Option<ValueId> {
        let k = key.index();
        match self {
            Renumber::Identity => (k < values).then(|| ValueId::new(k)),
            Renumber::Rank(rank) => rank.rank(k).filter(|&r| r < values).map(ValueId::new),
            Renumber::Map(vid) => vid.get(k).copied().flatten().filter(|v| v.index() < values),
        }
    }
}

/// A set of keys pushed in increasing order, with the rank of each: a bit per key and the
/// count of the keys before each 64-key word (1.5 bits per key where a map takes 32, and
/// small enough to stay cached where the map's reads miss).
struct KeyRank {
    bits: Vec<u64>,
    /// `before[w]`: keys in words `0..w` (for the words up to the last key's).
    before: Vec<u32>,
    count: u32,
    last: Option<usize>,
}

impl KeyRank {
    /// An empty set of keys below `key_space`.
    fn with_space(key_space: usize) -> Self {
        let words = key_space.div_ceil(64);
        KeyRank { bits: vec![0; words], before: Vec::with_capacity(words), count: 0, last: None }
    }

    /// Adds `key`, larger than every key added before.
    #[inline(always)]
    fn push(&mut self, key: usize) {
        let w = key >> 6;
        if self.bits.len() <= w {
            self.bits.resize(w + 1, 0);
        }
        while self.before.len() <= w {
            self.before.push(self.count);
        }
        self.bits[w] |= 1 << (key & 63);
        self.count += 1;
        self.last = Some(key);
    }

    /// The number of keys smaller than `key`, if `key` was added.
    #[inline(always)]
    fn rank(&self, key: usize) -> Option<usize> {
        let w = key >> 6;
        let (&word, &before) = (self.bits.get(w)?, self.before.get(w)?);
        let bit = 1u64 << (key & 63);
        (word & bit != 0).then(|| before as usize + (word & (bit - 1)).count_ones() as usize)
    }
}

/// Appends the values of `list` (inputs or external values, each with its key), in key
/// order, as values without an operation; returns their new ids and what each stands for.
fn push_leaves<T: Clone>(
    list: &mut [(KeyId, T)],
    value_op: &mut Vec<Option<OperationId>>,
    value_key: &mut KeyRun<ValueId, KeyId>,
) -> (Vec<ValueId>, Vec<T>) {
    list.sort_unstable_by_key(|(k, _)| *k);
    let mut ids = Vec::with_capacity(list.len());
    let mut leaves = Vec::with_capacity(list.len());
    for (key, leaf) in list.iter() {
        ids.push(ValueId::new(value_op.len()));
        value_op.push(None);
        value_key.push(*key);
        leaves.push(leaf.clone());
    }
    (ids, leaves)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Distinct keys below `space`: increasing with gaps when `sorted`, else shuffled, with
    /// the first `identity` of them `0, 1, 2, …` (the identity's prefix).
    fn keys(space: usize, picks: &[bool], identity: usize, sorted: bool, seed: u64) -> Vec<KeyId> {
        let mut keys: Vec<usize> = (0..space).filter(|&k| k < identity || picks[k % picks.len()]).collect();
        if !sorted {
            // A deterministic shuffle of the keys after the identity prefix.
            let tail = &mut keys[identity.min(space)..];
            let mut x = seed | 1;
            for i in (1..tail.len()).rev() {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                tail.swap(i, (x % (i as u64 + 1)) as usize);
            }
        }
        keys.into_iter().map(KeyId::new).collect()
    }

    /// An operation of any operand and output count (none included), named by a tag.
    #[derive(Clone, Debug, Hash, PartialEq, Eq)]
    struct Multi {
        tag: u8,
        operands: u8,
        outputs: u8,
    }

    impl GraphOperation for Multi {
        type Operand = u64;
        type Context = ();
        type InputKey = u32;
        fn input_count(&self) -> usize {
            self.operands as usize
        }
        fn output_count(&self) -> usize {
            self.outputs as usize
        }
    }

    impl crate::EvaluableGraphOperation for Multi {
        /// Each output mixes the tag, the operands in order and the output's slot, so that
        /// an operand read from the wrong value changes the result.
        fn eval_into(&self, _: &mut (), inputs: &[&u64], out: &mut crate::Outputs<'_, u64>) {
            let mixed = inputs.iter().fold(u64::from(self.tag) + 1, |h, &&x| h.wrapping_mul(1_000_003).wrapping_add(x));
            for slot in 0..self.outputs {
                out.push(mixed.wrapping_mul(31).wrapping_add(u64::from(slot)));
            }
        }
    }

    /// A structural name of each value: `x{key}` for an input, and
    /// `{tag}/{outputs}({operands' names})#{output}` for an output, which equal values share.
    fn names_of(
        n_values: usize,
        inputs: impl Iterator<Item = (usize, u32)>,
        ops: impl Iterator<Item = (Multi, Vec<usize>, Vec<usize>)>,
    ) -> Vec<Option<String>> {
        let mut name: Vec<Option<String>> = vec![None; n_values];
        for (v, key) in inputs {
            name[v] = Some(format!("x{key}"));
        }
        for (op, operands, outputs) in ops {
            let args: Vec<String> = operands.iter().map(|&u| name[u].clone().expect("operands come first")).collect();
            for (slot, v) in outputs.into_iter().enumerate() {
                name[v] = Some(format!("{}/{}({})#{slot}", op.tag, op.outputs, args.join(",")));
            }
        }
        name
    }

    /// A step of a fragment: an input, or an operation on earlier values (indices into
    /// the values so far, or into the parent fragment's values with `External`).
    enum Step {
        Input,
        Op(Multi, Vec<usize>),
        External(Multi, Vec<usize>),
    }

    /// Adds `steps` to `b` (whose parent fragment's values are `parent`, with the values
    /// `parent_values` computes for them); returns the fragment's values and the values
    /// the operations give them when evaluated in order (input `k` is `100 + k`).
    fn build_steps(
        b: &mut crate::GraphBuilder<Multi>,
        steps: &[Step],
        parent: &[crate::ValueKey<Multi>],
        parent_values: &[u64],
        first_input: u32,
    ) -> (Vec<LocalValueId>, Vec<u64>) {
        use crate::{EvaluableGraphOperation, ValueRef};
        let (mut values, mut computed) = (Vec::new(), Vec::new());
        let mut next_input = first_input;
        for step in steps {
            let (op, refs, args): (&Multi, Vec<ValueRef<Multi>>, Vec<u64>) = match step {
                Step::Input => {
                    values.push(b.add_input(next_input));
                    computed.push(100 + u64::from(next_input));
                    next_input += 1;
                    continue;
                }
                Step::Op(op, at) => (
                    op,
                    at.iter().map(|&i| ValueRef::Local(values[i])).collect(),
                    at.iter().map(|&i| computed[i]).collect(),
                ),
                Step::External(op, at) => (
                    op,
                    at.iter().map(|&i| ValueRef::External(parent[i].clone())).collect(),
                    at.iter().map(|&i| parent_values[i]).collect(),
                ),
            };
            let range = b.add_operation_from(op.clone(), &refs, &OperationRole::Primary);
            let args: Vec<&u64> = args.iter().collect();
            computed.extend(op.eval(&mut (), &args));
            values.extend(range.map(LocalValueId::new));
        }
        (values, computed)
    }

    /// Checks that `m` verifies, has `n_ops` operations, and that its compiled program gives
    /// each output its value in `expected`.
    fn check_eval(m: &MaterializedGraph<Multi>, n_ops: usize, expected: &[u64]) {
        m.verify().expect("the materialized graph verifies");
        assert_eq!(m.operation_count(), n_ops);
        let program = crate::compile(m);
        let inputs: Vec<u64> = (0..8).map(|k| 100 + k).collect();
        let bound = program.bind_inputs(|&k| inputs.get(k as usize)).expect("every input bound");
        assert_eq!(program.eval(&mut (), &bound), expected);
    }

    /// Operations without outputs (reachable from no output; the builder accepts them)
    /// between others, before an input and last in the fragment claim no other
    /// operation's key: a fragment materialized alone (its own path) and a view of two
    /// fragments, the second reading the first and adding its own (the general path),
    /// verify, keep every operation with outputs, and compile to programs that give each
    /// output the value the operations give it in order.
    #[test]
    fn operations_without_outputs_claim_no_key() {
        use crate::{GraphBuilder, materialize_merge, resolve};
        let op = |tag, operands, outputs| Multi { tag, operands, outputs };
        let steps = [
            Step::Input,
            Step::Op(op(1, 1, 1), vec![0]),
            Step::Op(op(2, 1, 0), vec![1]),
            Step::Op(op(3, 2, 2), vec![1, 0]),
            Step::Op(op(4, 0, 0), vec![]),
            Step::Input,
            Step::Op(op(5, 2, 1), vec![2, 4]),
            Step::Op(op(6, 1, 0), vec![5]),
            Step::Op(op(7, 0, 0), vec![]),
        ];
        let mut b = GraphBuilder::<Multi>::new();
        let (values, computed) = build_steps(&mut b, &steps, &[], &[], 0);
        let g = Arc::new(b.build());
        let keys: Vec<_> = values.iter().map(|&v| g.global_key(v)).collect();
        let m = materialize_merge(&resolve(vec![g.clone()]), &keys);
        check_eval(&m, 3, &computed);

        let steps = [
            Step::External(op(8, 1, 0), vec![3]),
            Step::Input,
            Step::External(op(9, 2, 2), vec![5, 2]),
            Step::Op(op(10, 0, 0), vec![]),
            Step::Op(op(11, 2, 1), vec![2, 0]),
            Step::Op(op(12, 1, 0), vec![3]),
        ];
        let mut c = GraphBuilder::<Multi>::new();
        c.add_parent(g.clone());
        let (second, second_computed) = build_steps(&mut c, &steps, &keys, &computed, 2);
        let h = Arc::new(c.build());
        let mut both: Vec<_> = keys.clone();
        both.extend(second.iter().map(|&v| h.global_key(v)));
        let m = materialize_merge(&resolve(vec![g, h]), &both);
        check_eval(&m, 5, &[computed, second_computed].concat());
    }

    proptest! {
        /// Pushed value by value as emit does, the renumbering gives each key its value's
        /// id (against a map from key to position) and no id to a key no value has.
        #[test]
        fn renumbering_gives_each_key_its_value_id(
            space in 1usize..700,
            picks in proptest::collection::vec(any::<bool>(), 1..40),
            identity in 0usize..300,
            sorted in any::<bool>(),
            seed in any::<u64>(),
            start in 0usize..50,
        ) {
            let keys = keys(space, &picks, identity, sorted, seed);
            let start = start.min(keys.len());
            let mut column = KeyRun::with_room(keys.len());
            for &k in &keys[..start] {
                column.push(k);
            }
            let mut ids = Renumber::of(&column, space);
            for &k in &keys[start..] {
                column.push(k);
                ids.push(k, &column, space);
            }
            let reference: std::collections::HashMap<usize, usize> =
                keys.iter().enumerate().map(|(v, k)| (k.index(), v)).collect();
            for k in 0..space {
                prop_assert_eq!(ids.id(KeyId::new(k), keys.len()).map(|v| v.index()), reference.get(&k).copied());
            }
            let increasing = keys.windows(2).all(|w| w[0] < w[1]);
            let expected = if keys.iter().enumerate().all(|(v, k)| k.index() == v) {
                "identity"
            } else if increasing {
                "rank"
            } else {
                "map"
            };
            let mode = match ids {
                Renumber::Identity => "identity",
                Renumber::Rank(_) => "rank",
                Renumber::Map(_) => "map",
            };
            prop_assert_eq!(mode, expected);
        }

        /// A fragment of operations of zero to two operands and zero to three outputs (one
        /// without outputs is reachable from none and claims no key), inputs interleaved,
        /// copies and unread operations among them, materializes (the path of
        /// one fragment, whose columns are written through reserved room) to the
        /// reference: the distinct names reachable from the outputs, each once, every
        /// operation with its output count, the verifier passing and the outputs named as
        /// the fragment names them.
        #[test]
        fn a_fragment_of_any_output_count_materializes_to_its_reachable_names(
            steps in proptest::collection::vec((0u8..4, 0u8..4, 0u8..4, proptest::collection::vec(any::<usize>(), 3)), 1..120),
            picks in proptest::collection::vec(any::<usize>(), 1..6),
        ) {
            use crate::{GraphBuilder, ValueRef::Local, materialize_merge, resolve};
            let mut b = GraphBuilder::<Multi>::new();
            let mut values = vec![b.add_input(0)];
            let mut inputs = vec![(0, 0u32)];
            let mut ops = Vec::new();
            for (kind, tag, outputs, operands) in steps {
                if kind == 0 {
                    let key = inputs.len() as u32;
                    values.push(b.add_input(key));
                    inputs.push((values.len() - 1, key));
                    continue;
                }
                let op = Multi { tag, operands: kind - 1, outputs };
                let operands: Vec<usize> = operands[..op.operands as usize].iter().map(|&i| i % values.len()).collect();
                let refs: Vec<_> = operands.iter().map(|&i| Local(values[i])).collect();
                let range = b.add_operation_from(op.clone(), &refs, &OperationRole::Primary);
                let first = values.len();
                values.extend(range.map(LocalValueId::new));
                ops.push((op, operands, (first..values.len()).collect::<Vec<_>>()));
            }
            let names = names_of(values.len(), inputs.iter().copied(), ops.iter().cloned());
            let outputs: Vec<usize> = picks.iter().map(|&i| i % values.len()).collect();
            // The reference: the names reachable from the outputs, by a walk over names.
            let mut reachable = std::collections::BTreeSet::new();
            let mut stack: Vec<usize> = outputs.clone();
            let producer: std::collections::HashMap<usize, usize> =
                ops.iter().enumerate().flat_map(|(i, (_, _, outs))| outs.iter().map(move |&v| (v, i))).collect();
            while let Some(v) = stack.pop() {
                if !reachable.insert(names[v].clone().expect("named")) {
                    continue;
                }
                if let Some(&i) = producer.get(&v) {
                    let (_, operands, outs) = &ops[i];
                    stack.extend(operands.iter().copied());
                    // Every output of a reachable operation is a value of the result.
                    stack.extend(outs.iter().copied());
                }
            }
            let g = Arc::new(b.build());
            let keys: Vec<_> = outputs.iter().map(|&i| g.global_key(values[i])).collect();
            let m = materialize_merge(&resolve(vec![g.clone()]), &keys);
            m.verify().map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
            let m_names = names_of(
                m.value_count(),
                m.inputs().iter().map(|v| v.index()).zip(m.input_keys().iter().copied()),
                m.operations().map(|o| {
                    prop_assert_eq!(o.outputs().len(), o.operation().output_count());
                    Ok((
                        o.operation().clone(),
                        o.inputs().iter().map(|v| v.index()).collect(),
                        o.outputs().map(|v| v.index()).collect(),
                    ))
                }).collect::<Result<Vec<_>, TestCaseError>>()?.into_iter(),
            );
            let listed: Vec<String> = m_names.iter().map(|n| n.clone().expect("every value named")).collect();
            let distinct: std::collections::BTreeSet<String> = listed.iter().cloned().collect();
            prop_assert_eq!(distinct.len(), listed.len(), "each name once");
            prop_assert_eq!(distinct, reachable);
            let out_names: Vec<&String> = m.outputs().iter().map(|v| &listed[v.index()]).collect();
            let expected: Vec<&String> = outputs.iter().map(|&i| names[i].as_ref().expect("named")).collect();
            prop_assert_eq!(out_names, expected);
        }

        /// The blocks list, in order, each operation whose key's bit is set the first time
        /// the key comes (operations repeating a key at random, some keys unreachable),
        /// across block boundaries, and clear the listed keys' bits; with `every`, each
        /// operation, as when no key repeats and all are needed.
        #[test]
        fn first_definitions_are_the_first_needed_copies(
            op_keys in proptest::collection::vec(0usize..3000, 0..9000),
            needed in proptest::collection::vec(any::<bool>(), 3000),
        ) {
            let firsts: Vec<LocalValueId> = (0..op_keys.len()).map(LocalValueId::new).collect();
            let keys: Vec<KeyId> = op_keys.iter().map(|&k| KeyId::new(k)).collect();
            let mut bits = Bits::default();
            bits.resize(3000);
            for (k, _) in needed.iter().enumerate().filter(|(_, n)| **n) {
                bits.test_and_set(k);
            }
            let mut seen = vec![false; 3000];
            let expected: Vec<u32> = op_keys
                .iter()
                .enumerate()
                .filter(|&(_, &k)| !std::mem::replace(&mut seen[k], true) && needed[k])
                .map(|(op, _)| op as u32)
                .collect();
            let mut listed = Vec::new();
            let mut defining = FirstDefinitions::new(op_keys.len(), false);
            while let Some(block) = defining.next_block(&firsts, &keys, &mut bits) {
                listed.extend_from_slice(block);
            }
            prop_assert_eq!(listed, expected);
            // Cleared for each key an operation has; left as they were for the others.
            prop_assert!((0..3000).all(|k| bits.get(k) == (needed[k] && !seen[k])));

            let mut every = Vec::new();
            let mut defining = FirstDefinitions::new(op_keys.len(), true);
            while let Some(block) = defining.next_block(&firsts, &keys, &mut bits) {
                every.extend_from_slice(block);
            }
            prop_assert_eq!(every, (0..op_keys.len() as u32).collect::<Vec<_>>());
        }
    }
}
