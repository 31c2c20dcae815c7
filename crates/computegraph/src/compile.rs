//! `compile`: turn a [`MaterializedGraph`] into an SSA slot program.
//!
//! Input: a verified materialized graph (topologically ordered, deduplicated). Output: a
//! [`CompiledProgram`]: one instruction per operation, reading and writing numbered slots,
//! in the topological order chosen by `dispatch.rs` (the materialized order with
//! independent operations of the same variant grouped inside small windows, so that
//! evaluation's dispatch branch is predictable).
//!
//! Invariants of the output (checked by [`CompiledProgram::verify_against`]):
//! - the instructions are the graph's operations, each once, in a topological order
//!   ([`CompiledProgram::source_operation`] maps one to the other);
//! - an instruction reads only slots that hold the value it names, written earlier by
//!   an input or an instruction (SSA over live ranges: each slot write starts a new value);
//! - a slot is reused only after the last read of the value it held (liveness), and
//!   never for an output of the instruction that reads it, so outputs never alias inputs;
//! - slots of graph outputs are never reused; inputs nobody reads get no slot (`None`).
//!
//! The program's slot code (`program.rs`) is stored only as a `VerifiedProgram`: compile
//! builds a `Program` and `verify::verify_program` (structural checks the evaluators'
//! `unsafe` rests on, `verify.rs`) turns it into one, in every build; the compiled
//! program type, its accessors and its evaluators are `compiled.rs`'s. Slots are `SlotId`s, instructions
//! `InstrId`s. During slot assignment a value's liveness is the number of operand reads
//! of it still to come (`Live::uses`): counted once over the operand pool, in any order
//! (a count does not depend on the instruction order, so the pass is one flat loop over
//! the pool), and decremented by each read in instruction order, so that it reaches zero
//! at the value's last reader. A program output is never freed (its count is set out of
//! reach).
//!
//! Slot allocation is a linear scan with a LIFO free list, so a chain of any length runs
//! in a constant number of slots. Complexity: `O(values + operands)`. Each value's count
//! and slot share one column entry (one cache miss per far operand, not two), and
//! when more than a quarter of the operands lie far from their readers (`prefetch.rs`,
//! counted by dispatch as it reads every operand list, or by the counting pass when
//! dispatch keeps the materialized order without reading them),
//! slot assignment prefetches the entries of the operands 16 instructions ahead, and
//! the program records that sequential evaluation should prefetch operand slots too
//! when its slot file exceeds `PREFETCH_SLOT_BYTES`.

use std::cell::Cell;
use std::sync::Arc;

use crate::compiled::CompiledProgram;
use crate::dispatch::{Dispatch, dispatch_order};
use crate::error::{GraphError, GraphResult};
use crate::hugepages::{program_vec, program_vec_of, trim};
use crate::id::{Id, IdVec, InstrId, SlotId};
use crate::materialize::{MaterializedGraph, ValueId};
use crate::operation::GraphOperation;
use crate::prefetch::{FarOperands, prefetch_entry};
use crate::program::{
    Instr, MIN_UNIFORM_RUN, MIN_UNIFORM_RUN_KEPT_ORDER, Program, RunCutter, SlotProgram, output_moves,
};
use crate::stop::{POLL_EVERY, Poll};
use crate::verify::verify_program;

/// Compiles a materialized graph.
///
/// # Panics
/// If the program would need more than `u32::MAX - 1` slots or arguments; see [`try_compile`].
///
/// ```
/// use std::sync::{Arc, OnceLock};
/// use computegraph::{compile, materialize_merge, resolve, GraphBuilder, ValueRef::Local, OperationRole::Primary};
/// use scalar::{ScalarOp, ScalarKey};
///
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// let mut v = x;
/// for _ in 0..1000 {
///     v = b.add_operation(ScalarOp::Neg, vec![Local(v)], Primary)[0];
/// }
/// let g = Arc::new(b.build());
/// let program = compile(&materialize_merge(&resolve(vec![g.clone()]), &[g.global_key(v)]));
/// assert!(program.slot_count() <= 2); // a chain reuses its slots
/// assert_eq!(program.eval(&mut (), &[&1.5]), vec![1.5]);
/// ```
pub fn compile<Op: GraphOperation>(graph: &MaterializedGraph<Op>) -> CompiledProgram<Op> {
    try_compile(graph).unwrap_or_else(|e| panic!("{e}"))
}

/// Compiles a materialized graph, or reports an exhausted slot or argument space (or, as
/// an internal error, a program that fails [`CompiledProgram::verify`]).
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{materialize_merge, resolve, try_compile, GraphBuilder, OperationRole::Primary, ValueRef::Local};
/// use scalar::{ScalarKey, ScalarOp};
///
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// let y = b.add_operation(ScalarOp::Cos, vec![Local(x)], Primary)[0];
/// let g = Arc::new(b.build());
/// let program = try_compile(&materialize_merge(&resolve(vec![g.clone()]), &[g.global_key(y)])).unwrap();
/// assert_eq!(program.eval(&mut (), &[&0.0]), vec![1.0]);
/// ```
pub fn try_compile<Op: GraphOperation>(graph: &MaterializedGraph<Op>) -> GraphResult<CompiledProgram<Op>> {
    let n_ops = graph.operation_count();
    // Instructions are `InstrId`s `0..n_ops`; `n_ops` itself is kept an id too (it was the
    // output gather's position when liveness was a last reader), so the space a program's
    // instructions may fill is the same as before.
    if InstrId::try_new(n_ops).is_none() {
        return Err(GraphError::IdSpaceExhausted { space: "instruction" });
    }
    let Dispatch { source, ops, far } = dispatch_order(graph)?;
    // Per value: the operand reads of it, then its slot (the thread's column from its
    // previous compile when it was kept, `take_live`).
    let mut live: IdVec<ValueId, Live> = IdVec::from_raw(take_live(graph.value_count()));
    // Liveness, and whether operands are far enough from their readers for slot
    // assignment to prefetch their entries (`prefetch.rs`): dispatch has decided that
    // when it sorted (it read every operand list with its reader), and the counts are
    // then one loop over the pool; otherwise one pass over the operations does both.
    let prefetch = match far {
        Some(far) => {
            count_uses(graph, live.raw_mut())?;
            far
        }
        None => count_uses_and_far(graph, live.raw_mut())?,
    };
    // Outputs are read by the output gather after the last instruction: a count that the
    // reads (fewer than `u32::MAX`, the pool's length being a `u32`) never bring to zero.
    for &v in &graph.outputs {
        live[v].uses = KEPT;
    }

    let mut alloc = SlotAllocator::default();
    // Positional inputs: the inputs, then the external values (fragment materialization).
    let mut input_slots = Vec::with_capacity(graph.inputs.len() + graph.externals.len());
    for &v in graph.inputs.iter().chain(&graph.externals) {
        let l = &mut live[v];
        let s = if l.uses == 0 { None } else { Some(alloc.take()?) };
        l.slot = s;
        input_slots.push(s);
    }

    // The argument pool holds each operand and each operation's output once, so its
    // length bounds every instruction's `start`: checked once here instead of per
    // instruction.
    let n_args = graph.op_inputs.items().len() + graph.value_count() - input_slots.len();
    if u32::try_from(n_args).is_err() {
        return Err(GraphError::IdSpaceExhausted { space: "argument" });
    }
    // Runs of two are kept as runs only where dispatch moved instructions (`program.rs`):
    // an order it kept, even one it sorted without moving anything, takes runs of three.
    let min_run = if source.is_empty() { MIN_UNIFORM_RUN_KEPT_ORDER } else { MIN_UNIFORM_RUN };
    // One entry of room past the pool: the slot pass writes a one-operand list's
    // second argument there before the next argument overwrites it (`SlotPass::run`).
    let pass =
        SlotPass { instrs: program_vec(n_ops), args: program_vec(n_args + 1), runs: RunCutter::new(min_run), alloc };
    let SlotPass { instrs, args, runs, alloc } = if source.is_empty() {
        pass.run(graph, &ops, live.raw_mut(), prefetch, true, 0..n_ops)?
    } else {
        pass.run(graph, &ops, live.raw_mut(), prefetch, false, source.iter().map(|&o| o as usize))?
    };
    let output_slots: Vec<SlotId> =
        graph.outputs.iter().map(|&v| live[v].slot.expect("an output is kept, so it has a slot at the end")).collect();
    keep_live(live.into_raw());
    let output_move = output_moves(&output_slots);
    let input_keys = graph.input_keys.clone();
    let (runs, run_ops) = runs.finish(&ops);
    let slot_count = alloc.next as usize;
    // The program keeps its columns without the room `program_vec` left after them.
    let code = Program {
        runs,
        run_ops,
        ops: IdVec::from_raw(trim(ops)),
        instrs: IdVec::from_raw(trim(instrs)),
        slots: SlotProgram { args: trim(args), input_slots, output_slots, output_move, slot_count },
    };
    // The evaluators read slots unchecked on the strength of this verification (`eval.rs`
    // takes a `VerifiedProgram`, which only `verify_program` makes), so it runs in every
    // build; a failure is an internal error.
    let code = verify_program(code)?;
    let program = CompiledProgram::new(
        Arc::clone(&graph.interner),
        code,
        prefetch && slot_count.saturating_mul(std::mem::size_of::<Op::Operand>()) > PREFETCH_SLOT_BYTES,
        trim(source),
        input_keys,
        graph.external_keys.clone(),
        graph.output_keys(),
    );
    #[cfg(debug_assertions)]
    program
        .verify_against(graph)
        .and_then(|()| program.verify_parallel_against(graph))
        .unwrap_or_else(|e| panic!("internal error: compiled program fails verification: {e}"));
    Ok(program)
}

/// Compile's liveness pass when dispatch has decided the prefetch: for each value, the
/// number of operand reads of it (`live[v].uses`), one loop over the operand pool (the
/// count does not depend on the order the reads come in).
fn count_uses<Op: GraphOperation>(graph: &MaterializedGraph<Op>, live: &mut [Live]) -> GraphResult<()> {
    for block in graph.op_inputs.items().chunks(POLL_EVERY as usize) {
        crate::stop::check()?;
        for &v in block {
            live[v.index()].uses += 1;
        }
    }
    Ok(())
}

/// [`count_uses`], operation by operation, with whether more than a quarter of the
/// operands are far from their readers, so that slot assignment should prefetch
/// (`prefetch.rs`): for a graph whose order dispatch kept without reading its operand lists.
fn count_uses_and_far<Op: GraphOperation>(graph: &MaterializedGraph<Op>, live: &mut [Live]) -> GraphResult<bool> {
    let (starts, items) = (graph.op_inputs.starts(), graph.op_inputs.items());
    let mut far = FarOperands::new(graph.inputs.len() + graph.externals.len());
    let mut poll = Poll::new();
    for (op, reader) in graph.op_first_output.raw().iter().enumerate() {
        poll.tick()?;
        for &v in &items[starts[op] as usize..starts[op + 1] as usize] {
            live[v.index()].uses += 1;
            far.note(v.index(), reader.index());
        }
    }
    Ok(far.decide())
}

/// Compile's slot pass and what it fills: the instruction words, the argument pool, the
/// sequential evaluator's runs, and the slot allocator. The columns are plain vectors
/// while filling (an `IdVec` push checks the id space, which `try_compile` checked
/// once), made columns at the end without a copy, and come from `program_vec`: advised
/// for huge pages, with room past their end (`hugepages.rs`), since a first write to a
/// fresh 4 KiB page costs about a microsecond here.
struct SlotPass<Op> {
    instrs: Vec<Instr>,
    args: Vec<SlotId>,
    runs: RunCutter<Op>,
    alloc: SlotAllocator,
}

impl<Op: GraphOperation> SlotPass<Op> {
    /// Emits one instruction per operation, `order` yielding each instruction's
    /// operation index and `ops` its operation: operand slots from `live`, then fresh
    /// slots for the outputs, and frees each operand at its last reader and each output
    /// nobody reads. With `prefetch`, the liveness entries of the operands [`AHEAD`]
    /// instructions on are prefetched. `mixed` when `order` is the materialized order,
    /// which dispatch kept: operations of one operand and of two may then alternate at
    /// random, and their operands are read without a branch on which. The graph's columns are read as plain slices
    /// (the pool's starts and items, each operation's first output), which the loop
    /// indexes directly rather than through a list view per operation.
    #[inline(always)]
    fn run(
        self,
        graph: &MaterializedGraph<Op>,
        ops: &[Op],
        live: &mut [Live],
        prefetch: bool,
        mixed: bool,
        order: impl Iterator<Item = usize> + Clone,
    ) -> GraphResult<Self> {
        let SlotPass { mut instrs, mut args, mut runs, mut alloc } = self;
        // The pool and the instruction words are written through their spare capacity, an
        // index kept in a register and one bound check per entry instead of a push's
        // capacity check and length update; their lengths are set once at the end.
        // `try_compile` made room for every argument and instruction.
        args.clear();
        instrs.clear();
        let (mut n_args, mut n_words) = (0, 0);
        let pool = args.spare_capacity_mut();
        let words = instrs.spare_capacity_mut();
        let mut put = |n_args: &mut usize, s: SlotId| {
            pool[*n_args].write(s);
            *n_args += 1;
        };
        let (starts, items) = (graph.op_inputs.starts(), graph.op_inputs.items());
        let first_outputs = graph.op_first_output.raw();
        // The operations `AHEAD` instructions on, for the prefetch.
        let mut ahead = order.clone().skip(AHEAD);
        for ((pos, op), o) in ops.iter().enumerate().zip(order) {
            // The stop flag every `POLL_EVERY` instructions, counted by the position this
            // loop keeps anyway rather than by a countdown of its own.
            if pos % POLL_EVERY as usize == POLL_EVERY as usize - 1 {
                crate::stop::check()?;
            }
            if prefetch && let Some(a) = ahead.next() {
                for v in &items[starts[a] as usize..starts[a + 1] as usize] {
                    prefetch_entry(live, v.index());
                }
            }
            let inputs = &items[starts[o] as usize..starts[o + 1] as usize];
            let n_in = u16::try_from(inputs.len())
                .map_err(|_| GraphError::IdSpaceExhausted { space: "operands of one instruction (at most 65535)" })?;
            // Fits: the pool's length was checked against `u32` before the pass.
            let start = n_args as u32;
            // The outputs' slots are taken before this instruction's last reads free
            // theirs, so an output never shares a slot with an operand. The operation
            // comes from `ops` (dispatch order, copied once): no read through the store.
            let n_out = op.output_count();
            let first_out = first_outputs[o].index();
            let outputs = first_out..first_out + n_out;
            for l in &mut live[outputs.clone()] {
                l.slot = Some(alloc.take()?);
            }
            // One read of each operand's entry: its slot, and its count of reads to come,
            // which reaching zero says this is its last reader.
            if let n @ (1 | 2) = inputs.len()
                && mixed
            {
                // One operand or two without a branch on which: in an order dispatch
                // kept (a chain of random variants) they come at random, and a loop over
                // the list mispredicted its end about once per instruction (in a sorted
                // order they come in runs, where the loop is predicted and cheaper). The second
                // read is `inputs[n - 1]`, the first operand again when there is one:
                // its argument is written past the list and overwritten by what follows
                // (`try_compile` left one entry of room past the pool), and it counts
                // no read and frees nothing.
                let two = n == 2;
                for (v, mention) in [(inputs[0], true), (inputs[n - 1], two)] {
                    let l = &mut live[v.index()];
                    let s = l.slot.expect("an operand is defined, so it has a slot, before its readers");
                    put(&mut n_args, s);
                    n_args -= usize::from(!mention);
                    l.uses -= u32::from(mention);
                    // Whether this is the last read is as good as random on a DAG: a
                    // branch on it was mispredicted about every other operand.
                    alloc.free_if(s, mention & (l.uses == 0));
                }
            } else if inputs.len() <= 2 {
                for &v in inputs {
                    let l = &mut live[v.index()];
                    let s = l.slot.expect("an operand is defined, so it has a slot, before its readers");
                    put(&mut n_args, s);
                    l.uses -= 1;
                    // Whether this is the last read is as good as random on a DAG: a
                    // branch on it was mispredicted about every other operand.
                    alloc.free_if(s, l.uses == 0);
                }
            } else {
                // An operand read twice by one instruction is freed at its first mention,
                // as for one or two operands (where freeing at the last mention frees the
                // same slots in the same order), so the counts are taken down first.
                for &v in inputs {
                    let l = &mut live[v.index()];
                    put(&mut n_args, l.slot.expect("an operand is defined, so it has a slot, before its readers"));
                    l.uses -= 1;
                }
                for &v in inputs {
                    let l = &mut live[v.index()];
                    if l.uses == 0 {
                        l.uses = KEPT;
                        alloc.free(l.slot);
                    }
                }
            }
            // Outputs nobody reads are dead at once.
            for l in &live[outputs] {
                put(&mut n_args, l.slot.expect("taken above"));
                if l.uses == 0 {
                    alloc.free(l.slot);
                }
            }
            // At most 256 outputs: the interner refuses more.
            let instr = Instr::new(start, n_in, n_out as u16);
            words[pos].write(instr);
            n_words = pos + 1;
            runs.push(ops, pos, instr);
        }
        // SAFETY: `put` wrote entries `0..n_args` of the pool's spare capacity, in order
        // (the pool was empty), and the loop wrote word `pos` for every position up to
        // `n_words` (it was empty too); neither type needs a drop.
        unsafe {
            args.set_len(n_args);
            instrs.set_len(n_words);
        }
        Ok(SlotPass { instrs, args, runs, alloc })
    }
}

/// The slot file size from which evaluation prefetches far operands' slots: beyond this
/// machine's 1 MiB of L2 per core with room to spare. Smaller files stay cached, and the
/// hints would only cost (a 10^5-wide layered graph, 0.9 MiB of slots: 2.5 → 2.9 ns/node).
const PREFETCH_SLOT_BYTES: usize = 4 << 20;

/// How far ahead (in instructions) slot assignment prefetches operand entries.
const AHEAD: usize = 16;

/// Liveness columns of at most this many bytes are kept for the thread's next compile
/// (`keep_live`): a 5·10^5-value graph's. The bound is what a thread may hold between
/// compiles; a larger column (a 10^6-value graph's is 8 MB) is freed as before, and its
/// compile maps fresh pages for the next one as it would anyway.
const LIVE_KEEP_MAX_BYTES: usize = 4 << 20;

thread_local! {
    /// The liveness column of this thread's last compile, if it was kept (`keep_live`).
    static LIVE_SCRATCH: Cell<Vec<Live>> = const { Cell::new(Vec::new()) };
}

/// A liveness column of `n` empty entries: the thread's kept one when it has room, else a
/// fresh one.
///
/// Why keep it: compiling the same graphs again and again (a bench loop, a caller that
/// recompiles) frees and allocates the same few MiB each time. Under glibc, once the free
/// top of the heap exceeds its trim threshold (twice the largest mapped block freed so
/// far, which the caller's earlier allocations decide) each drop of a program gives the
/// memory back to the kernel, and the next compile faults every page in again: compile's
/// columns and this one are the only blocks of that size between two programs. The kept
/// column stays where it is, so the program's columns are all that is freed and
/// reallocated above it, and the scratch itself is written without fresh pages.
fn take_live(n: usize) -> Vec<Live> {
    const EMPTY: Live = Live { uses: 0, slot: None };
    // `try_with`: during the thread's teardown the scratch is gone; a fresh column serves.
    let mut live = LIVE_SCRATCH.try_with(Cell::take).unwrap_or_default();
    if live.capacity() < n {
        // Freed before the larger one is allocated, so its memory can serve again.
        drop(live);
        return program_vec_of(EMPTY, n);
    }
    live.clear();
    live.resize(n, EMPTY);
    live
}

/// Keeps `live` for the thread's next compile when it is at most [`LIVE_KEEP_MAX_BYTES`]
/// (`take_live` says why); frees it otherwise.
fn keep_live(live: Vec<Live>) {
    let bytes = |live: &Vec<Live>| live.capacity().saturating_mul(size_of::<Live>());
    // A column over the bound may be one within it plus the room `program_vec` adds past
    // its entries: without that room (`trim`) it is kept.
    let live = if bytes(&live) > LIVE_KEEP_MAX_BYTES { trim(live) } else { live };
    if bytes(&live) <= LIVE_KEEP_MAX_BYTES {
        // The replaced scratch is empty (taken by `take_live`) unless a nested compile on
        // this thread kept its own meanwhile; either is freed here. During teardown,
        // `live` is dropped instead.
        let _ = LIVE_SCRATCH.try_with(|s| s.set(live));
    }
}

/// The count of a program output's reads, and of a value freed by an instruction that
/// reads it more than once (set at its first mention): never brought to zero by the reads
/// still to come.
const KEPT: u32 = u32::MAX;

/// A value's liveness and slot during compilation.
#[derive(Copy, Clone)]
struct Live {
    /// The operand reads of the value still to come: zero when no instruction reads it
    /// (or no longer will), [`KEPT`] for a program output, which the output gather reads
    /// after every instruction.
    uses: u32,
    /// The value's slot, once it has one (`None` for an input no instruction reads).
    slot: Option<SlotId>,
}

/// The slots: fresh ones numbered from zero, and a LIFO stack of freed ones.
///
/// The stack is `free[..top]`; entries past `top` are scratch, so that
/// [`SlotAllocator::free_if`] can write a slot whether or not it frees it and free it by
/// moving `top`, without a branch on a condition the processor cannot predict.
#[derive(Default)]
struct SlotAllocator {
    free: Vec<SlotId>,
    top: usize,
    next: u32,
}

impl SlotAllocator {
    #[inline]
    fn take(&mut self) -> GraphResult<SlotId> {
        if self.top > 0 {
            self.top -= 1;
            return Ok(self.free[self.top]);
        }
        let s = SlotId::try_new(self.next as usize).ok_or(GraphError::IdSpaceExhausted { space: "slot" })?;
        self.next += 1;
        Ok(s)
    }

    #[inline]
    fn free(&mut self, s: Option<SlotId>) {
        if let Some(s) = s {
            self.free_if(s, true);
        }
    }

    /// Frees `s` when `dead`, as `free(Some(s))` would, without branching on `dead`.
    #[inline]
    fn free_if(&mut self, s: SlotId, dead: bool) {
        // Taken only while the stack grows to its largest (a few times per program).
        if self.top == self.free.len() {
            self.free.push(s);
        } else {
            self.free[self.top] = s;
        }
        self.top += usize::from(dead);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::materialize::OperationId;
    use crate::operation::{EvaluableGraphOperation, Outputs};
    use crate::{GraphBuilder, KeyInterner, OperationRole, ValueRef, materialize_merge, resolve};
    use proptest::prelude::*;

    /// Operations of one to four operands (`A`, `B`: two variants, so that dispatch sorts)
    /// and a two-output one.
    #[derive(Clone, Debug, Hash, PartialEq, Eq)]
    enum Wide {
        A(u8),
        B(u8),
        Pair,
    }

    impl GraphOperation for Wide {
        type Operand = u64;
        type Context = ();
        type InputKey = u32;
        fn input_count(&self) -> usize {
            match self {
                Wide::A(n) | Wide::B(n) => *n as usize,
                Wide::Pair => 1,
            }
        }
        fn output_count(&self) -> usize {
            if let Wide::Pair = self { 2 } else { 1 }
        }
    }

    impl EvaluableGraphOperation for Wide {
        fn eval_into(&self, _: &mut (), inputs: &[&u64], out: &mut Outputs<'_, u64>) {
            let sum = inputs.iter().fold(1u64, |a, &&x| a.wrapping_mul(31).wrapping_add(x));
            out.push(sum);
            if let Wide::Pair = self {
                out.push(sum ^ 1);
            }
        }
    }

    /// The slot assignment compile made before liveness was a count of reads: each value's
    /// last reader by instruction position, an operand freed at its first mention in its
    /// last reader, outputs taking their slots first. Returns the argument pool, the input
    /// slots and the slot count for the instruction order `order` (operation indices).
    fn reference_slots(graph: &MaterializedGraph<Wide>, order: &[usize]) -> (Vec<SlotId>, Vec<Option<SlotId>>, usize) {
        let mut last: Vec<Option<usize>> = vec![None; graph.value_count()];
        for (pos, &op) in order.iter().enumerate() {
            for v in graph.op_inputs.get(op) {
                last[v.index()] = Some(pos);
            }
        }
        for v in graph.outputs() {
            last[v.index()] = Some(order.len());
        }
        let (mut free, mut next) = (Vec::new(), 0);
        let mut take = |free: &mut Vec<SlotId>| {
            free.pop().unwrap_or_else(|| {
                next += 1;
                SlotId::new(next - 1)
            })
        };
        let mut slot: Vec<Option<SlotId>> = vec![None; graph.value_count()];
        let mut input_slots = Vec::new();
        for v in graph.inputs().iter().chain(graph.externals()) {
            slot[v.index()] = last[v.index()].map(|_| take(&mut free));
            input_slots.push(slot[v.index()]);
        }
        let mut args = Vec::new();
        for (pos, &op) in order.iter().enumerate() {
            let first = graph.op_first_output[OperationId::new(op)].index();
            let outs = first..first + graph.op(OperationId::new(op)).output_count();
            for v in outs.clone() {
                slot[v] = Some(take(&mut free));
            }
            for v in graph.op_inputs.get(op) {
                let s = slot[v.index()].expect("defined before");
                args.push(s);
                if last[v.index()] == Some(pos) {
                    last[v.index()] = None;
                    free.push(s);
                }
            }
            for v in outs {
                args.push(slot[v].expect("taken above"));
                if last[v].is_none() {
                    free.push(slot[v].expect("taken above"));
                }
            }
        }
        (args, input_slots, next)
    }

    /// A step of [`slot_allocator_is_a_lifo_of_freed_slots`]: take a slot, or release the
    /// `n`-th slot in use (freeing it when `dead`, as the slot pass does at a last read).
    #[derive(Clone, Debug)]
    enum Step {
        Take,
        Release { n: usize, dead: bool },
    }

    proptest! {
        /// The allocator's slots are those of a plain stack of freed slots (`Vec::pop`,
        /// `Vec::push` when freed), whatever the mix of frees and non-frees: the entries
        /// `free_if` writes without freeing never come back.
        #[test]
        fn slot_allocator_is_a_lifo_of_freed_slots(
            steps in prop::collection::vec(
                prop_oneof![Just(Step::Take), (0usize..64, any::<bool>()).prop_map(|(n, dead)| Step::Release { n, dead })],
                0..300,
            ),
        ) {
            let mut alloc = SlotAllocator::default();
            let (mut free, mut next): (Vec<SlotId>, usize) = (Vec::new(), 0);
            let mut in_use: Vec<SlotId> = Vec::new();
            for step in steps {
                match step {
                    Step::Take => {
                        let expected = free.pop().unwrap_or_else(|| {
                            next += 1;
                            SlotId::new(next - 1)
                        });
                        prop_assert_eq!(alloc.take().unwrap(), expected);
                        in_use.push(expected);
                    }
                    Step::Release { n, dead } if !in_use.is_empty() => {
                        let s = in_use[n % in_use.len()];
                        if dead {
                            in_use.retain(|&u| u != s);
                            free.push(s);
                        }
                        alloc.free_if(s, dead);
                    }
                    Step::Release { .. } => alloc.free(None),
                }
            }
            prop_assert_eq!(&alloc.free[..alloc.top], &free[..]);
            prop_assert_eq!(alloc.next as usize, next);
        }

        /// Compile's slots (read counts, in either liveness pass) are the ones the last-reader
        /// allocation gives, on graphs whose operations read up to four operands, the
        /// same value often twice or more, with one variant or several.
        #[test]
        fn read_counts_assign_the_slots_of_last_readers(
            picks in proptest::collection::vec((0u8..3, 1u8..5, proptest::collection::vec(0usize..6, 4)), 1..300),
            mixed in any::<bool>(),
            n_outputs in 1usize..4,
        ) {
            let mut b = GraphBuilder::<Wide>::with_interner(KeyInterner::new());
            let mut values = vec![b.add_input(0), b.add_input(1), b.add_input(2)];
            for (kind, arity, from) in &picks {
                let op = match (kind, mixed) {
                    (0, _) | (1, false) => Wide::A(*arity),
                    (1, true) => Wide::B(*arity),
                    _ => Wide::Pair,
                };
                // Operands among the last six values: repeats within one list are common.
                let refs: Vec<_> = from[..op.input_count()]
                    .iter()
                    .map(|&back| ValueRef::<Wide>::Local(values[values.len() - 1 - back.min(values.len() - 1)]))
                    .collect();
                values.extend(b.add_operation(op, refs, OperationRole::Primary));
            }
            let outputs: Vec<_> = values[values.len() - n_outputs.min(values.len())..].to_vec();
            let g = std::sync::Arc::new(b.build());
            let keys: Vec<_> = outputs.iter().map(|&v| g.global_key(v)).collect();
            let graph = materialize_merge(&resolve(vec![g]), &keys);
            let program = try_compile(&graph).unwrap();
            let order: Vec<usize> =
                (0..program.instruction_count()).map(|i| program.source_operation(i).index()).collect();
            let (args, input_slots, slot_count) = reference_slots(&graph, &order);
            let slots = &program.code().program().slots;
            prop_assert_eq!(&slots.args, &args);
            prop_assert_eq!(&slots.input_slots, &input_slots);
            prop_assert_eq!(slots.slot_count, slot_count);
        }
    }

    /// Whether every entry of `live` is empty, as a fresh column's are.
    fn all_empty(live: &[Live]) -> bool {
        live.iter().all(|l| l.uses == 0 && l.slot.is_none())
    }

    #[test]
    fn a_kept_liveness_column_comes_back_empty_and_in_place() {
        let used = vec![Live { uses: 3, slot: Some(SlotId::new(7)) }; 10];
        let at = used.as_ptr();
        keep_live(used);
        // Shorter than the kept column: the same allocation, every entry reset.
        let live = take_live(8);
        assert_eq!((live.len(), live.as_ptr()), (8, at));
        assert!(all_empty(&live));
        keep_live(live);
        // Longer than the kept one's room: a fresh column, empty too.
        let live = take_live(20);
        assert_eq!(live.len(), 20);
        assert!(all_empty(&live));
    }

    #[test]
    fn a_column_within_the_bound_but_with_room_past_it_is_kept_trimmed() {
        let over = LIVE_KEEP_MAX_BYTES / size_of::<Live>() + 1;
        let mut live = Vec::with_capacity(over);
        live.resize(10, Live { uses: 0, slot: None });
        keep_live(live);
        let kept = take_live(0);
        assert!((10..over).contains(&kept.capacity()), "kept, without the room: {}", kept.capacity());
    }

    #[test]
    fn a_liveness_column_beyond_the_bound_is_not_kept() {
        let over = LIVE_KEEP_MAX_BYTES / size_of::<Live>() + 1;
        keep_live(Vec::with_capacity(over));
        assert_eq!(take_live(0).capacity(), 0);
        let at_bound = LIVE_KEEP_MAX_BYTES / size_of::<Live>();
        keep_live(Vec::with_capacity(at_bound));
        assert!(take_live(0).capacity() >= at_bound);
    }
}
