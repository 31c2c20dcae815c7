//! Instruction order for predictable dispatch: the first step of [`compile`](crate::compile).
//!
//! Input: a verified [`MaterializedGraph`] (topologically ordered). Output: an evaluation
//! order of its operations, as a permutation `order[instruction] = operation index` (empty
//! when the materialized order is kept), the operations copied out in that order, and, when
//! it sorted (which reads every operand list with its reader), whether more than a quarter
//! of the operands lie far from their readers (`prefetch.rs`), for compile's slot pass.
//!
//! Evaluating a graph of cheap operations costs little more than the branch that selects
//! each operation's code: when consecutive instructions are different operations in an
//! unpredictable mix, that branch is mispredicted about once per instruction, which on
//! scalar graphs is most of the evaluation time. This pass reorders independent
//! instructions so that runs of the same operation variant follow each other, without
//! moving any instruction far: the order is cut into windows of [`WINDOW`] operations,
//! and inside each window the operations are sorted by
//! `(depth inside the window, variant, original position)`, where an operation's depth is
//! one more than the largest depth of its operands' producers *in the same window* (zero
//! when none is). Operations of equal depth do not depend on each other, so the result is
//! a topological order; its grouping is deterministic.
//!
//! The variant of an operation is its [`std::mem::discriminant`]: for an enum, operations
//! of one variant run the same arm of `eval_into`'s `match`. Operation types that are not
//! enums, graphs with a single variant, and graphs of costly operations
//! ([`KEEP_ORDER_MIN_MEAN_COST`]) keep the materialized order (the pass returns
//! an empty order, having copied the operations once, in that order: the windows are
//! sorted only once a second variant is met, and then from the first window on).
//! Invariants of the output:
//! - it is a permutation of the operations and a topological order;
//! - every operation stays inside its window, so live ranges (and the slot count) grow by
//!   at most about one window.
//!
//! Complexity: `O(operations + operands)` (one or two counting sorts per window, none for
//! a chain's), iterative, a few scratch columns of one window each.

use std::mem::Discriminant;

use crate::error::GraphResult;
use crate::hugepages::program_vec;
use crate::id::InstrId;
use crate::materialize::{MaterializedGraph, OperationId};
use crate::operation::GraphOperation;
use crate::prefetch::FarOperands;

/// Operations are regrouped only inside windows of this many consecutive operations.
pub(crate) const WINDOW: usize = 256;

/// A graph whose first window with a second variant has a mean
/// [`GraphOperation::cost_hint`] of at least this keeps the materialized order: a
/// mispredicted dispatch branch costs a few nanoseconds, nothing beside operations of
/// hundreds (tensor contractions), while an operation moved away from its producer finds
/// its operands out of the cache. Sorted by depth, a tensor program ran each result's
/// consumer a level later, after the sibling steps had evicted it.
pub(crate) const KEEP_ORDER_MIN_MEAN_COST: u64 = 1 << 8;

/// Variants beyond this many share the last group (graphs with more are rare, and the
/// grouping stays correct, only coarser).
const MAX_VARIANTS: usize = 255;

/// The operations of a program in evaluation order, and that order.
pub(crate) struct Dispatch<Op> {
    /// `source[instruction]` = operation index, or empty when the materialized order is kept.
    pub(crate) source: Vec<u32>,
    /// The operations in that order: what the program keeps (`ops[instruction]`).
    pub(crate) ops: Vec<Op>,
    /// Whether more than a quarter of the operands are far from their readers
    /// (`prefetch.rs`), when the windows were sorted (which reads every operand list with
    /// its reader, so the count costs no second pass over them); `None` when they were not.
    pub(crate) far: Option<bool>,
}

/// The dispatch-friendly evaluation order of `graph`'s operations, with the operations
/// copied out in that order.
///
/// One pass, a window at a time: the window's operations are read in materialized order
/// (through the store, `op_key` → chunk → operation, whose chunks that order reads in
/// sequence) for their variants, sorted, and copied out in their new order while their
/// lines are still cached; compile then reads `ops` in place instead of the store in
/// evaluation order (ADR 0017, step 5). A window whose depths are `0, 1, 2, …` (a chain:
/// each operation reads the one before) keeps its order without sorting.
/// [`GraphError::Interrupted`](crate::GraphError::Interrupted) when the thread's stop flag
/// is raised (`stop.rs`; read once per window).
pub(crate) fn dispatch_order<Op: GraphOperation>(graph: &MaterializedGraph<Op>) -> GraphResult<Dispatch<Op>> {
    let n = graph.operation_count();
    // Advised for huge pages below a size (`hugepages.rs`), as compile's instruction and
    // argument columns: written once, front to back.
    let mut ops: Vec<Op> = program_vec(n);
    // Written from the first window whose sort moves an operation (the windows before
    // it are then listed in their order): a graph whose sorts move nothing (one variant,
    // a chain) has no order to write, and its pages are never touched.
    let mut order: Vec<u32> = Vec::new();
    let mut moved = false;
    // A window's operations in sorted order (offsets from the window's first).
    let mut sorted: Vec<u32> = vec![0; WINDOW];
    let mut variants = Variants::<Op>::default();
    // Scratch of one window, indexed by an operation's offset in it: its variant, its
    // depth, and the offsets sorted by variant (the first pass of a two-pass stable
    // counting sort); the buckets of the sorts.
    let mut variant: Vec<u8> = Vec::with_capacity(WINDOW);
    let mut depth: Vec<u32> = Vec::with_capacity(WINDOW);
    // Whether the last window sorted was a chain's (depth equal to offset: `is_chain`).
    let mut chained = false;
    let mut by_variant: Vec<u32> = vec![0; WINDOW];
    let mut buckets: Vec<u32> = Vec::with_capacity(WINDOW + 2);
    // The window's operations, read once from the store (`op_key` → chunk → operation)
    // for their variants and kept for the copy in sorted order, instead of a second read
    // through the store.
    let mut window_ops: Vec<&Op> = Vec::with_capacity(WINDOW);
    let mut sorting = false;
    // Decided at the first window with a second variant (`KEEP_ORDER_MIN_MEAN_COST`).
    let mut keep_order = false;
    // Far operands, counted while sorting (from the first window on: a restart begins it).
    let mut far = FarOperands::new(graph.inputs.len() + graph.externals.len());
    let first_outputs = graph.op_first_output.raw();
    let mut start = 0;
    while start < n {
        crate::stop::check()?;
        let end = (start + WINDOW).min(n);
        let len = end - start;
        window_ops.clear();
        graph.extend_ops(start..end, &mut window_ops);
        variant.clear();
        variant.extend(window_ops.iter().map(|&op| variants.id(op)));
        if !sorting {
            keep_order = keep_order || (variants.len() >= 2 && costly(&window_ops));
            if variants.len() < 2 || keep_order {
                // One variant so far: a sort by (depth, variant) would group nothing, and
                // if no other variant follows the materialized order is kept, so the
                // window is copied out as it is; and so for costly operations, whose
                // order is kept.
                ops.extend(window_ops.iter().map(|&op| op.clone()));
                start = end;
                continue;
            }
            // A second variant: every window is sorted, those before this one too, so
            // the order is the one a sort of every window gives (the variants' ids are
            // their order of first appearance, the same on the second reading).
            sorting = true;
            if start > 0 {
                ops.clear();
                start = 0;
                continue;
            }
        }
        depth.clear();
        // Values before the window's first output are inputs or outputs of earlier
        // operations (outputs are numbered in operation order): their depth inside the
        // window is zero, and they are not looked up (a cache miss per far operand on
        // large graphs).
        let window_values = first_outputs[start].index();
        // A window after a chain's is likely one too: tested without depths, which are
        // then taken only when it is not (their operands are noted once, by the test).
        let max_depth = if chained && is_chain(graph, start..end, &mut far) {
            len - 1
        } else {
            // One call of the inlined `depths`: two made its code slower on every window.
            let mut noted = FarOperands::new(0);
            depths(graph, start..end, window_values, &mut depth, if chained { &mut noted } else { &mut far })
        };
        chained = max_depth + 1 == len;
        if chained {
            // Depth `len - 1` needs a producer of depth `len - 2` before it, and so on
            // down: depth equals offset, and the sort below would keep the order.
            if moved {
                order.extend(start as u32..end as u32);
            }
            ops.extend(window_ops.iter().map(|&op| op.clone()));
            start = end;
            continue;
        }
        // Sorted into the order once an earlier window has moved an operation (it is
        // then written in full), into `sorted` until then.
        // Once moved, the order lists every earlier window: `start` entries.
        if moved {
            order.resize(start + len, 0);
        }
        let target = if moved { &mut order[start..] } else { &mut sorted[..len] };
        // Sorted by (depth, variant, offset): one stable counting sort by both when
        // their buckets are fewer than the window's operations, else two (stable by
        // variant, then stable by depth), which give the same order.
        let nv = variants.len();
        if (max_depth + 1) * nv <= WINDOW {
            buckets.resize((max_depth + 1) * nv + 1, 0);
            let keys = variant.iter().zip(&depth).map(|(&v, &d)| d as usize * nv + v as usize);
            counting_sort(keys, &mut buckets, |k, at| target[at] = (start + k) as u32);
        } else {
            buckets.resize(nv + 1, 0);
            counting_sort(variant.iter().map(|&v| v as usize), &mut buckets, |k, at| by_variant[at] = k as u32);
            buckets.resize(max_depth + 2, 0);
            counting_sort(by_variant[..len].iter().map(|&o| depth[o as usize] as usize), &mut buckets, |k, at| {
                target[at] = (start as u32) + by_variant[k]
            });
        }
        if !moved && target.iter().enumerate().any(|(k, &from)| from as usize != start + k) {
            // The first window that moves an operation: the ones before it kept their order.
            moved = true;
            order = program_vec(n);
            order.extend(0..start as u32);
            order.extend_from_slice(&sorted[..len]);
        }
        let placed = if moved { &order[start..] } else { &sorted[..len] };
        // The window's operations in their new order (one `extend`, which reserves once,
        // instead of a push and its capacity check per operation).
        ops.extend(placed.iter().map(|&from| window_ops[from as usize - start].clone()));
        start = end;
    }
    Ok(Dispatch { source: order, ops, far: sorting.then(|| far.decide()) })
}

/// The depths inside the window of the operations `ops`, whose first value is
/// `window_values`, pushed to `depth` (empty), with their operands noted in `far`;
/// returns the largest.
#[inline(always)]
fn depths<Op: GraphOperation>(
    graph: &MaterializedGraph<Op>,
    ops: std::ops::Range<usize>,
    window_values: usize,
    depth: &mut Vec<u32>,
    far: &mut FarOperands,
) -> usize {
    let (start, first_outputs) = (ops.start, graph.op_first_output.raw());
    let mut max_depth = 0;
    for i in ops {
        let mut d = 0;
        let reader = first_outputs[i].index();
        for v in graph.op_inputs.get(i) {
            far.note(v.index(), reader);
            if v.index() < window_values {
                continue;
            }
            if let Some(producer) = graph.value_op[*v] {
                let p = producer.index();
                if p >= start {
                    d = d.max(depth[p - start] + 1);
                }
            }
        }
        depth.push(d);
        max_depth = max_depth.max(d as usize);
    }
    max_depth
}

/// Whether the operations `ops` form a chain, each after the first reading an output of
/// the one before it, with their operands noted in `far`: for a window after a chain's
/// (a chain of random variants: each operation reads the one before, and at random one
/// input or none besides). That is exactly the window whose depths ([`depths`]) are `0,
/// 1, 2, …` (the largest equal to its length less one): a depth is at most the
/// operation's offset, and offset `k` needs a producer at offset `k - 1`. One range test
/// per operand (outputs are numbered in operation order, after the inputs, so those of
/// the operation before are the values from its first output to the reader's), without
/// a branch on where an operand lies or on whether an operation has one operand or two,
/// each mispredicted about once per operation there, and without a depth column.
fn is_chain<Op: GraphOperation>(
    graph: &MaterializedGraph<Op>,
    ops: std::ops::Range<usize>,
    far: &mut FarOperands,
) -> bool {
    let (starts, items) = (graph.op_inputs.starts(), graph.op_inputs.items());
    // The window's stretch of each column, sliced once: the loop indexes none of them.
    let (readers, bounds) = (&graph.op_first_output.raw()[ops.clone()], &starts[ops.start..=ops.end]);
    let mut chain = true;
    // The outputs of the operation before: `prev..reader` (none before the first, which
    // links to nothing and needs not; an operation without outputs has none either).
    let mut prev = readers[0].index();
    // Every operand is noted: the window's count is its stretch of the pool, and only the
    // far ones are counted per operand, one comparison each against their reader's bound.
    let mut n_far = 0;
    for (k, (reader, list)) in readers.iter().zip(bounds.windows(2)).enumerate() {
        let reader = reader.index();
        let inputs = &items[list[0] as usize..list[1] as usize];
        let (lo, width) = (prev, reader - prev);
        let links = |v: usize| v.wrapping_sub(lo) < width;
        let bound = far.bound(reader);
        let linked = if let n @ (1 | 2) = inputs.len() {
            // The first and the last operand (the first again when it is the only one:
            // it is counted once).
            let (a, b) = (inputs[0].index(), inputs[n - 1].index());
            n_far += usize::from(far.is_far(a, bound)) + usize::from(far.is_far(b, bound) & (n == 2));
            links(a) | links(b)
        } else {
            inputs.iter().fold(false, |l, v| {
                n_far += usize::from(far.is_far(v.index(), bound));
                l | links(v.index())
            })
        };
        chain &= linked | (k == 0);
        prev = reader;
    }
    far.add((bounds[bounds.len() - 1] - bounds[0]) as usize, n_far);
    chain
}

/// Whether `ops` have a mean cost hint of at least [`KEEP_ORDER_MIN_MEAN_COST`].
fn costly<Op: GraphOperation>(ops: &[&Op]) -> bool {
    let total = ops.iter().fold(0u64, |sum, op| sum.saturating_add(op.cost_hint()));
    total >= KEEP_ORDER_MIN_MEAN_COST.saturating_mul(ops.len() as u64)
}

/// The variants met so far, each with a small id: in order of first appearance, up to
/// [`MAX_VARIANTS`] ids, the last one shared by every later variant.
///
/// A variant's id is found in a small table indexed by its discriminant's value (a direct
/// map for an enum's usual discriminants `0..n`), whose one test succeeds for every
/// operation but a variant's first: operations of a DAG come in an unpredictable mix, and
/// a test against the previous operation's variant was mispredicted about once in three.
struct Variants<Op> {
    seen: Vec<Discriminant<Op>>,
    table: [Option<(Discriminant<Op>, u8)>; TABLE],
}

/// Entries of [`Variants`]' table (a power of two).
const TABLE: usize = 64;

impl<Op> Default for Variants<Op> {
    fn default() -> Self {
        Variants { seen: Vec::new(), table: [None; TABLE] }
    }
}

/// A hasher that keeps the integer it is given: a discriminant's value, which
/// [`Discriminant`]'s `Hash` writes (through `write_isize` for an enum without a `repr`).
#[derive(Default)]
struct DiscriminantValue(u64);

impl std::hash::Hasher for DiscriminantValue {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Bytes of no integer width below (not written by `Discriminant`'s `Hash` today).
        // The table compares the discriminant itself, so any fold is correct; this one
        // ends on the least significant byte, so small discriminants take distinct entries.
        let fold = |h: u64, b: &u8| h.rotate_left(8) ^ u64::from(*b);
        self.0 = if cfg!(target_endian = "little") {
            bytes.iter().rev().fold(self.0, fold)
        } else {
            bytes.iter().fold(self.0, fold)
        };
    }

    // Each integer width keeps its value: the default methods would write its bytes, and a
    // `repr(u32)` enum's discriminants `0..n` must not all land on one entry.
    fn write_u8(&mut self, i: u8) {
        self.0 ^= u64::from(i);
    }

    fn write_u16(&mut self, i: u16) {
        self.0 ^= u64::from(i);
    }

    fn write_u32(&mut self, i: u32) {
        self.0 ^= u64::from(i);
    }

    fn write_u64(&mut self, i: u64) {
        self.0 ^= i;
    }

    fn write_u128(&mut self, i: u128) {
        self.0 ^= i as u64;
    }

    fn write_usize(&mut self, i: usize) {
        self.0 ^= i as u64;
    }

    fn write_isize(&mut self, i: isize) {
        self.0 ^= i as u64;
    }
}

/// The table entry of discriminant `d`.
#[inline]
fn table_index<Op>(d: &Discriminant<Op>) -> usize {
    use std::hash::{Hash, Hasher};
    let mut h = DiscriminantValue::default();
    d.hash(&mut h);
    h.finish() as usize & (TABLE - 1)
}

impl<Op> Variants<Op> {
    fn len(&self) -> usize {
        self.seen.len()
    }

    /// The id of `op`'s variant.
    #[inline]
    fn id(&mut self, op: &Op) -> u8 {
        let d = std::mem::discriminant(op);
        let at = table_index(&d);
        if let Some((td, id)) = self.table[at]
            && td == d
        {
            return id;
        }
        self.id_of_new(d, at)
    }

    /// The id of variant `d` when the table does not hold it at `at` (its first
    /// appearance, or two variants sharing an entry), which it then does.
    #[cold]
    fn id_of_new(&mut self, d: Discriminant<Op>, at: usize) -> u8 {
        let id = match self.seen.iter().position(|&v| v == d) {
            Some(id) => id,
            None if self.seen.len() < MAX_VARIANTS => {
                self.seen.push(d);
                self.seen.len() - 1
            }
            None => MAX_VARIANTS - 1,
        } as u8;
        self.table[at] = Some((d, id));
        id
    }
}

/// The materialized operation that instruction `i` computes, given the order
/// [`dispatch_order`] returned (`source[i]`), or `i` itself when it returned none (an
/// empty `source`).
#[inline]
pub(crate) fn source_of(source: &[u32], i: InstrId) -> OperationId {
    OperationId::new(if source.is_empty() { i.index() } else { source[i.index()] as usize })
}

/// A stable counting sort of the items `0..keys.len()` by their key: calls
/// `place(item, position)` once per item. `start` is scratch with one entry more than the
/// largest key (it ends as the buckets' end positions).
fn counting_sort(keys: impl Iterator<Item = usize> + Clone, start: &mut [u32], mut place: impl FnMut(usize, usize)) {
    start.fill(0);
    for k in keys.clone() {
        start[k + 1] += 1;
    }
    for b in 1..start.len() {
        start[b] += start[b - 1];
    }
    for (item, k) in keys.enumerate() {
        place(item, start[k] as usize);
        start[k] += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Variants whose discriminants share [`Variants`]' table entries: `A`, `B` and `C`
    /// fall on entry 0, `D` on entry 1.
    #[derive(Clone, Copy, Debug)]
    #[repr(i64)]
    enum Shared {
        A = 0,
        B = TABLE as i64,
        C = 2 * TABLE as i64,
        D = 1,
    }

    /// A variant without a `repr`, beside the colliding ones.
    #[derive(Clone, Copy, Debug)]
    enum Plain {
        X,
        // The field is never read: it is there to differ between operations of one variant.
        Y(#[allow(dead_code)] u8),
        Z,
    }

    /// The ids as the linear search over the variants seen gives them: their order of
    /// first appearance.
    fn first_appearance<T>(ops: &[T]) -> Vec<u8> {
        let mut seen: Vec<Discriminant<T>> = Vec::new();
        ops.iter()
            .map(|op| {
                let d = std::mem::discriminant(op);
                let id = seen.iter().position(|&s| s == d).unwrap_or_else(|| {
                    seen.push(d);
                    seen.len() - 1
                });
                id as u8
            })
            .collect()
    }

    /// Operations of zero to three operands, one of two outputs, and one of one operand
    /// and no output.
    #[derive(Clone, Debug, Hash, PartialEq, Eq)]
    enum Arity {
        In(u8),
        Pair,
        Sink,
    }

    impl GraphOperation for Arity {
        type Operand = u64;
        type Context = ();
        type InputKey = u32;
        fn input_count(&self) -> usize {
            match self {
                Arity::In(n) => *n as usize,
                Arity::Pair | Arity::Sink => 1,
            }
        }
        fn output_count(&self) -> usize {
            match self {
                Arity::Pair => 2,
                Arity::Sink => 0,
                Arity::In(_) => 1,
            }
        }
    }

    proptest! {
        /// The chain test (`is_chain`) says yes exactly when the lookup's depths
        /// (`depths`) are `0, 1, 2, …`, on windows of random lengths over random
        /// graphs: operands the value just before (a chain's link), the operation
        /// before's second output, or one up to 300 back; zero to three per operation,
        /// repeated in one list, two-output operations and ones without outputs (which
        /// materialization drops) among them; and the far counts decide alike.
        #[test]
        fn the_chain_test_is_depths_equal_to_offsets(
            picks in prop::collection::vec((0u8..6, prop::collection::vec((0u8..4, 0usize..300), 3)), 1..700),
            lens in prop::collection::vec(1usize..24, 1..60),
        ) {
            use crate::{GraphBuilder, KeyInterner, OperationRole, ValueRef, materialize_merge, resolve};
            let mut b = GraphBuilder::<Arity>::with_interner(KeyInterner::new());
            let mut values = vec![b.add_input(0), b.add_input(1)];
            // The outputs of the last operation that had some.
            let mut last: Vec<_> = values.clone();
            for (kind, from) in &picks {
                let op = match kind {
                    4 => Arity::Pair,
                    5 => Arity::Sink,
                    k => Arity::In(*k),
                };
                let refs: Vec<_> = from[..op.input_count()]
                    .iter()
                    .map(|&(how, back)| {
                        let v = match how {
                            0 | 1 => last[0],
                            2 => *last.last().unwrap(),
                            _ => values[values.len() - 1 - back.min(values.len() - 1)],
                        };
                        ValueRef::<Arity>::Local(v)
                    })
                    .collect();
                let out = b.add_operation(op, refs, OperationRole::Primary);
                if !out.is_empty() {
                    last = out.to_vec();
                }
                values.extend(&out);
            }
            let g = std::sync::Arc::new(b.build());
            let keys: Vec<_> = values.iter().map(|&v| g.global_key(v)).collect();
            let graph = materialize_merge(&resolve(vec![g]), &keys);
            let n = graph.operation_count();
            let inputs = graph.inputs.len();
            let (mut far_a, mut far_b) = (FarOperands::new(inputs), FarOperands::new(inputs));
            let (mut start, mut lens) = (0, lens.iter().cycle());
            while start < n {
                let end = (start + lens.next().unwrap()).min(n);
                let window_values = graph.op_first_output.raw()[start].index();
                let mut depth = Vec::new();
                let max_depth = depths(&graph, start..end, window_values, &mut depth, &mut far_a);
                prop_assert_eq!(is_chain(&graph, start..end, &mut far_b), max_depth + 1 == end - start);
                start = end;
            }
            prop_assert_eq!(far_a.decide(), far_b.decide());
        }

        /// The table gives each variant the id of its first appearance, whichever
        /// variants share its entry and in whatever order they come.
        #[test]
        fn variant_ids_are_their_order_of_first_appearance(
            picks in prop::collection::vec(0usize..4, 0..200),
            plain in prop::collection::vec(0usize..3, 0..50),
        ) {
            let shared: Vec<Shared> = picks.iter().map(|&p| [Shared::A, Shared::B, Shared::C, Shared::D][p]).collect();
            let mut v = Variants::<Shared>::default();
            let ids: Vec<u8> = shared.iter().map(|op| v.id(op)).collect();
            prop_assert_eq!(ids, first_appearance(&shared));
            prop_assert_eq!(v.len(), first_appearance(&shared).iter().map(|&i| i as usize + 1).max().unwrap_or(0));

            // `Y`'s field differs between operations of that variant: the id does not read it.
            let plain: Vec<Plain> =
                plain.iter().enumerate().map(|(i, &p)| [Plain::X, Plain::Y(i as u8), Plain::Z][p]).collect();
            let mut v = Variants::<Plain>::default();
            let ids: Vec<u8> = plain.iter().map(|op| v.id(op)).collect();
            prop_assert_eq!(ids, first_appearance(&plain));
        }
    }

    /// A graph whose first windows are a chain's and whose later ones are sorted: the
    /// chain's operations keep their places (no order is written for them until a sort
    /// moves one, and then they are listed first), and the program passes the debug
    /// verifier's check against the graph (a permutation in topological order, every
    /// operand reading the value the graph names).
    #[test]
    fn a_chain_before_sorted_windows_keeps_its_order() {
        use crate::{GraphBuilder, KeyInterner, OperationRole, ValueRef, materialize_merge, resolve, try_compile};
        let mut b = GraphBuilder::<Arity>::with_interner(KeyInterner::new());
        let x = b.add_input(0);
        let mut values = vec![x];
        let chain = 2 * WINDOW + 10;
        for i in 0..chain {
            let prev = ValueRef::Local(*values.last().unwrap());
            let (op, refs) = match i % 3 {
                0 => (Arity::In(2), vec![prev, ValueRef::Local(x)]),
                1 => (Arity::Pair, vec![prev]),
                _ => (Arity::In(1), vec![prev]),
            };
            let out = b.add_operation(op, refs, OperationRole::Primary);
            values.push(out[0]);
        }
        // Then operations reading earlier values at random (a fixed pattern): sorted.
        for i in 0..WINDOW {
            let a = values[values.len() - 1 - (i * 7) % 50];
            let c = values[values.len() - 1 - (i * 13) % 90];
            let op = if i % 4 == 0 { Arity::Pair } else { Arity::In(2) };
            let refs: Vec<_> = [a, c][..op.input_count()].iter().map(|&v| ValueRef::Local(v)).collect();
            let out = b.add_operation(op, refs, OperationRole::Primary);
            values.push(out[0]);
        }
        let g = std::sync::Arc::new(b.build());
        let keys: Vec<_> = values.iter().map(|&v| g.global_key(v)).collect();
        let graph = materialize_merge(&resolve(vec![g]), &keys);
        let program = try_compile(&graph).unwrap();
        program.verify_against(&graph).unwrap();
        let n = program.instruction_count();
        assert!((0..2 * WINDOW).all(|i| program.source_operation(i).index() == i));
        assert!((2 * WINDOW..n).any(|i| program.source_operation(i).index() != i), "a later window moved");
    }

    #[test]
    fn colliding_variants_share_a_table_entry() {
        let at = |op: Shared| table_index(&std::mem::discriminant(&op));
        assert_eq!([at(Shared::A), at(Shared::B), at(Shared::C), at(Shared::D)], [0, 0, 0, 1]);
    }

    /// Discriminants of every `repr` width take their own entries: small values of a
    /// `repr(u32)`, `repr(i16)` or `repr(u128)` enum do not all share entry 0.
    #[test]
    fn every_repr_width_spreads_over_the_table() {
        #[repr(u32)]
        enum Wide {
            A,
            B,
            C,
        }
        #[repr(i16)]
        enum Short {
            A,
            B,
            C,
        }
        #[repr(u128)]
        enum Huge {
            A,
            B,
            C,
        }
        let wide = [Wide::A, Wide::B, Wide::C].map(|op| table_index(&std::mem::discriminant(&op)));
        let short = [Short::A, Short::B, Short::C].map(|op| table_index(&std::mem::discriminant(&op)));
        let huge = [Huge::A, Huge::B, Huge::C].map(|op| table_index(&std::mem::discriminant(&op)));
        assert_eq!(wide, [0, 1, 2]);
        assert_eq!(short, [0, 1, 2]);
        assert_eq!(huge, [0, 1, 2]);
    }
}
