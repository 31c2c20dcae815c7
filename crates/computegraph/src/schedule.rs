//! `schedule`: the level schedule and level-aware slot assignment of parallel evaluation.
//!
//! Input: a sequential slot program (the columns `compile` built: instructions, their
//! arguments, input and output slots) and a cost per instruction. The program runs this
//! pass on first parallel use and keeps the result. The sequential program
//! is only read; its slot reuse is not safe for level order, so this pass assigns its own
//! slots. Output: a [`Schedule`], run by [`CompiledProgram::eval_parallel`](crate::CompiledProgram::eval_parallel).
//!
//! Invariants of the output (checked against the graph by `verify::check_schedule_against`
//! in debug builds and tests):
//! - an instruction's level is 1 + the largest level of the producers of its operands
//!   (inputs are level 0, so an instruction without operands is level 1); `order` lists the
//!   instructions by increasing level, in program order within a level (a counting sort),
//!   and `level_start` holds the level boundaries in `order`;
//! - `args` has the layout of the sequential argument pool (same `Instr` ranges) with
//!   slots of this schedule: a value's slot is released only after the whole level that
//!   holds its last reader, and outputs of a level never take a slot released in that
//!   level, so within a level no slot is written twice, and no written slot is read;
//! - the instructions of one level may therefore run in any order or concurrently, reading
//!   the slots as they stood when the level began;
//! - `steps` is `order` in the compact form the parallel evaluator streams (16 bytes per
//!   instruction, [`Step`]): for an instruction of one output and one or two operands,
//!   its slots and the index of its operation in `op_rep`, a table of one representative
//!   instruction per distinct operation (by `Eq`, which CSE already takes to mean "the
//!   same computation", and which `GraphOperation` requires to mean interchangeable in
//!   evaluation); for any other instruction, and for further distinct operations once the
//!   table holds `Step::MAX_OPS`, a general step naming it. Reading
//!   `order`, the instruction record, the operation and the argument pool per instruction
//!   (about 40 bytes, from four places) made the chunks memory bound; see
//!   `docs/adr/0007-compact-parallel-steps.md`.
//!
//! **The level invariant, on which the evaluator's `unsafe` rests:** within one level, every
//! slot written is written by exactly one output of one instruction, and no slot written
//! in the level is read in it; every slot is below `slot_count`. The parallel evaluator
//! lets the chunks of a level write their output slots concurrently through a raw
//! pointer (`eval.rs`, ADR 0005), which is data-race free exactly when this holds. It is
//! not left to the correctness of the slot assignment alone: `verify::verify_schedule`,
//! a direct check of the invariant (and of the steps against the instructions), runs on
//! every schedule when the compiled program builds it, in release builds too, and a
//! schedule that fails it is an error, never evaluated. What passed is a
//! `VerifiedSchedule` (`verify.rs`), which hands out no `&mut`: the evaluator's parallel
//! chunks and its `LevelSlots` view take one.
//!
//! Slots are [`SlotId`]s (`None` for an input no instruction reads), instructions
//! [`InstrId`]s. Internally, a value read by no instruction has no last level (`None`),
//! and a program output's last level is one past the last level (the output gather
//! reads it after every level), so it is never released.
//!
//! Complexity: `O(instructions + arguments + slots)` (plus one hash per compact step), no
//! allocation per level.

use std::collections::hash_map::Entry;
use std::hash::Hash;

use rustc_hash::FxHashMap;

use crate::error::{GraphError, GraphResult};
use crate::id::{Id, IdVec, InstrId, SlotId};
use crate::probe::ParChoice;
use crate::program::{Instr, SlotProgram};

/// Levels whose summed cost hint is below this run on the calling thread. A fork-join
/// inside the pool costs about a microsecond, and values a level reads were half written
/// by the other core; on the project machine a level of 10^4 cheap scalar operations
/// (cost 1 each, about 7 ns) gains little on two threads and one of 10^5 more
/// (`docs/PERFORMANCE.md`, *Level-parallel evaluation*).
pub const PAR_LEVEL_MIN_COST: u64 = 4096;
/// A parallel level is cut into chunks of at least this cost (and at most four per
/// thread). Crate-private: no user of the engine reads it (unlike
/// [`PAR_LEVEL_MIN_COST`], which users choosing `cost_hint` values compare against).
pub(crate) const PAR_CHUNK_MIN_COST: u64 = 1024;
/// What running an instruction in a split level adds, in cost-hint units, to its own cost
/// on the thread that runs it: its operands were mostly written by another core one level
/// before, so their cache lines cross between the cores, and the chunk streams its step.
/// Measured on the project machine (`docs/PERFORMANCE.md`, *Two threads never slower than
/// one*): `layered_wide` (cost 1 per node) on two threads took 0.5 to 2.0 ns per node more
/// than half its sequential time, while sequential evaluation took 1.6 to 2.1 ns per node;
/// so up to about 1.3 units, and 2 leaves a margin.
pub(crate) const PAR_STEP_COST: u64 = 2;
/// What one split level costs in synchronisation, in cost-hint units: the lead publishes
/// the level, every thread claims chunks, and the lead waits for the last one (a few
/// cache-line round trips between cores, 100 to 450 ns each on the project machine).
pub(crate) const PAR_LEVEL_SYNC_COST: u64 = 1024;

/// Split levels weighing less than this (in cost-hint units: about 2·10^5 scalar
/// instructions, some 0.4 ms of sequential evaluation) are not worth timing: a probe's
/// slower call would cost more than a choice could save.
pub(crate) const PROBE_MIN_COST: u64 = 1 << 18;

/// One instruction of the schedule in the compact form the parallel evaluator reads: 16
/// bytes, in level order, so that a chunk streams one column instead of gathering from
/// four (see [`Schedule::steps`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub(crate) struct Step {
    /// [`Step::GENERAL`], or the index in [`Schedule::op_rep`] of the instruction's
    /// operation, with [`Step::UNARY`] set when it has one operand.
    pub(crate) op: u32,
    /// First operand slot (for a general step: the first operand slot or `s0`, a prefetch
    /// hint only).
    pub(crate) a: SlotId,
    /// Last operand slot (equal to `a` for one operand; for a general step a hint only).
    pub(crate) b: SlotId,
    /// Output slot (for a general step: unused, the evaluator reads the instruction
    /// through `order` at the step's position).
    pub(crate) out: SlotId,
}

impl Step {
    /// The step of an instruction that is not one output of one or two operands (or
    /// whose operation did not get a compact index): the evaluator reads it through
    /// `order`, the instruction record and `args`. (A tag value of `op`, not a slot or an
    /// instruction: `op` is an index into `op_rep` with a flag bit, never an id.)
    pub(crate) const GENERAL: u32 = u32::MAX;
    /// Set in `op` when the instruction has one operand.
    pub(crate) const UNARY: u32 = 1 << 31;
    /// Compact operation indices are below this (so that no compact `op` equals `GENERAL`).
    const MAX_OPS: u32 = Self::UNARY - 1;
}

/// The level schedule of a program (see the module doc).
#[derive(Clone, Debug, Default)]
pub(crate) struct Schedule {
    /// Instructions by increasing level.
    pub(crate) order: Vec<InstrId>,
    /// `steps[k]` is instruction `order[k]` in compact form: its operation's index in
    /// `op_rep` and its slots (of `args`), or [`Step::GENERAL`].
    pub(crate) steps: Vec<Step>,
    /// One instruction per distinct operation (by `Eq`) of the compact steps: the
    /// operation of step `k` is `ops[op_rep[steps[k].op & !UNARY]]`. Few distinct
    /// operations keep this table in cache, so a step needs no read of the operation
    /// column.
    pub(crate) op_rep: Vec<InstrId>,
    /// `order[level_start[l]..level_start[l + 1]]` is level `l + 1`.
    pub(crate) level_start: Vec<u32>,
    /// `cost_prefix[k]` is the summed cost of `order[..k]`.
    pub(crate) cost_prefix: Vec<u64>,
    /// This schedule's slots, in the layout of the sequential program's.
    pub(crate) slots: SlotProgram,
    /// What the levels that parallel evaluation splits hold (see [`Schedule::is_split`]),
    /// for [`SplitLevels::worth_parallel`].
    pub(crate) split: SplitLevels,
}

/// The split levels of a schedule, summed: what the choice between the level evaluator and
/// the sequential one weighs ([`SplitLevels::worth_parallel`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SplitLevels {
    /// Summed cost hint of every instruction.
    pub(crate) total_cost: u64,
    /// Summed cost hint of the instructions in split levels.
    pub(crate) cost: u64,
    /// Instructions in split levels.
    pub(crate) instructions: u64,
    /// Number of split levels.
    pub(crate) levels: u64,
}

impl SplitLevels {
    /// Whether level evaluation on `threads` threads is estimated to take at most seven
    /// eighths of sequential evaluation's time. Costs are in cost-hint units. Sequential
    /// evaluation costs `total_cost`. Level evaluation costs the same for the levels run
    /// in place; a split level costs its cost divided among the threads, plus
    /// [`PAR_STEP_COST`] per instruction and [`PAR_LEVEL_SYNC_COST`] for the level. The
    /// eighth is a margin: a smaller estimated gain is within what the host's placement of
    /// the two cores moves (`docs/PERFORMANCE.md`), and a loss is what must never happen.
    pub(crate) fn worth_parallel(&self, threads: usize) -> bool {
        if threads <= 1 || self.cost == 0 {
            return false;
        }
        let in_place = self.total_cost.saturating_sub(self.cost);
        let split = (self.cost / threads as u64)
            .saturating_add(self.instructions.saturating_mul(PAR_STEP_COST))
            .saturating_add(self.levels.saturating_mul(PAR_LEVEL_SYNC_COST));
        let parallel = in_place.saturating_add(split);
        // `parallel <= 7/8 total`, without overflow: compare in u128.
        8 * u128::from(parallel) <= 7 * u128::from(self.total_cost)
    }

    /// What parallel evaluation on `threads` threads does: the level evaluator when
    /// [`Self::worth_parallel`], nothing to decide without split levels or with one
    /// thread, and otherwise, when the split levels weigh at least [`PROBE_MIN_COST`], time
    /// both evaluators (`probe.rs`): the estimate above is the pessimistic one, right when
    /// the host places the two cores far apart and wrong by up to 1.4× when it does not.
    pub(crate) fn choice(&self, threads: usize) -> ParChoice {
        if threads <= 1 || self.cost == 0 {
            ParChoice::Sequential
        } else if self.worth_parallel(threads) {
            ParChoice::Parallel
        } else if self.cost >= PROBE_MIN_COST {
            ParChoice::Measure
        } else {
            ParChoice::Sequential
        }
    }
}

impl Schedule {
    /// Number of levels.
    pub(crate) fn level_count(&self) -> usize {
        self.level_start.len().saturating_sub(1)
    }

    /// The positions in `order` of level index `l` (level `l + 1`).
    #[inline]
    pub(crate) fn level(&self, l: usize) -> std::ops::Range<usize> {
        self.level_start[l] as usize..self.level_start[l + 1] as usize
    }

    /// Whether level index `l` is split into chunks by parallel evaluation: it has two
    /// instructions or more and costs at least [`PAR_LEVEL_MIN_COST`](crate::PAR_LEVEL_MIN_COST).
    #[inline]
    pub(crate) fn is_split(&self, range: &std::ops::Range<usize>) -> bool {
        range.len() > 1 && self.cost(range) >= PAR_LEVEL_MIN_COST
    }

    /// The mean cost hint per instruction (0 without instructions).
    pub(crate) fn mean_cost(&self) -> u64 {
        let n = self.order.len();
        if n == 0 { 0 } else { self.cost_prefix[n] / n as u64 }
    }

    /// The summed cost of `order[range]`.
    #[inline]
    pub(crate) fn cost(&self, range: &std::ops::Range<usize>) -> u64 {
        self.cost_prefix[range.end] - self.cost_prefix[range.start]
    }

    /// Bytes held by the schedule's columns.
    pub(crate) fn heap_bytes(&self) -> usize {
        (self.order.capacity() + self.op_rep.capacity()) * size_of::<InstrId>()
            + self.level_start.capacity() * 4
            + (self.slots.args.capacity() + self.slots.output_slots.capacity()) * size_of::<SlotId>()
            + self.slots.input_slots.capacity() * size_of::<Option<SlotId>>()
            + self.cost_prefix.capacity() * 8
            + self.steps.capacity() * size_of::<Step>()
            + self.slots.output_move.capacity()
    }
}

/// Computes the level schedule of a sequential program. `cost[i]` is instruction `i`'s
/// cost. The caller verifies it (`verify::verify_schedule`) before any evaluation.
pub(crate) fn schedule<Op: Hash + Eq>(
    ops: &[Op],
    instrs: &[Instr],
    args: &[SlotId],
    input_slots: &[Option<SlotId>],
    output_slots: &[SlotId],
    slot_count: usize,
    cost: &[u64],
) -> GraphResult<Schedule> {
    let exhausted = |space| GraphError::IdSpaceExhausted { space };
    let unverified = || GraphError::Invalid {
        phase: "parallel schedule",
        message: "the sequential program reads a slot before writing it".into(),
    };
    let n = instrs.len();
    // Value numbering by simulating the sequential program: inputs are 0..n_inputs, then
    // each instruction output in program order. `arg_value[p]` names the value at
    // argument position `p`; `value_level[v]` is the value's level.
    let n_outputs: usize = instrs.iter().map(|i| i.n_out()).sum();
    let n_values = input_slots.len() + n_outputs;
    if n_values >= u32::MAX as usize {
        return Err(exhausted("value"));
    }
    let mut arg_value: Vec<u32> = vec![0; args.len()];
    let mut value_level: Vec<u32> = vec![0; n_values];
    // The value each slot holds, `None` before its first write.
    let mut slot_value: IdVec<SlotId, Option<u32>> = IdVec::from_elem(None, slot_count);
    for (j, s) in input_slots.iter().enumerate() {
        if let &Some(s) = s {
            slot_value[s] = Some(j as u32);
        }
    }
    let mut instr_level: Vec<u32> = Vec::with_capacity(n);
    let mut next_value = input_slots.len() as u32;
    let mut max_level = 0u32;
    for &instr in instrs {
        let (start, mid, n_out) = (instr.start(), instr.start() + instr.n_in(), instr.n_out());
        let mut l = 0;
        for p in start..mid {
            let v = slot_value[args[p]].ok_or_else(unverified)?;
            arg_value[p] = v;
            l = l.max(value_level[v as usize]);
        }
        let l = l + 1;
        for p in mid..mid + n_out {
            arg_value[p] = next_value;
            value_level[next_value as usize] = l;
            slot_value[args[p]] = Some(next_value);
            next_value += 1;
        }
        instr_level.push(l);
        max_level = max_level.max(l);
    }
    let output_values: Vec<u32> =
        output_slots.iter().map(|&s| slot_value[s].ok_or_else(unverified)).collect::<GraphResult<_>>()?;
    drop(slot_value);

    // Counting sort of the instructions by level (1..=levels).
    let levels = max_level as usize;
    let mut level_start: Vec<u32> = vec![0; levels + 1];
    for &l in &instr_level {
        level_start[l as usize] += 1; // count of level l at index l, shifted below
    }
    for l in 1..=levels {
        level_start[l] += level_start[l - 1];
    }
    // level_start[l] is now the end of level l, i.e. the start of level l + 1.
    // Scatter in program order (the cost goes along, so the prefix sum is sequential).
    let mut fill: Vec<u32> = level_start.clone();
    let mut order: Vec<InstrId> = vec![InstrId::new(0); n];
    let mut cost_prefix: Vec<u64> = vec![0; n + 1];
    for (i, &l) in instr_level.iter().enumerate() {
        let at = &mut fill[l as usize - 1];
        order[*at as usize] = InstrId::new(i);
        cost_prefix[*at as usize + 1] = cost[i];
        *at += 1;
    }
    let mut acc = 0u64;
    for c in &mut cost_prefix[1..] {
        acc = acc.saturating_add(*c);
        *c = acc;
    }

    // Last level reading each value (`None`: no instruction reads it); outputs are read
    // after the last level (`levels + 1`), so they are never released; values nobody reads
    // are released after the level that writes them.
    let after_last = max_level + 1;
    let mut last_level: Vec<Option<u32>> = vec![None; n_values];
    for (i, &instr) in instrs.iter().enumerate() {
        for &v in instr.slots(&arg_value).0 {
            let ll = &mut last_level[v as usize];
            *ll = Some(ll.map_or(instr_level[i], |ll| ll.max(instr_level[i])));
        }
    }
    for &v in &output_values {
        last_level[v as usize] = Some(after_last);
    }
    let n_inputs = input_slots.len();
    for v in n_inputs..n_values {
        last_level[v].get_or_insert(value_level[v]);
    }

    // Two more counting sorts, so that slot assignment walks compact lists in level
    // order: the values each level writes (`defs`), and those it releases (`releases`).
    let (def_start, defs) = bucket(levels, (n_inputs..n_values).map(|v| (value_level[v], v as u32)));
    let (release_start, releases) =
        bucket(levels, (0..n_values).filter_map(|v| last_level[v].filter(|&l| l != after_last).map(|l| (l, v as u32))));
    drop(last_level);

    // Level-aware slot assignment: a LIFO free list that only receives slots after the
    // level that released them has taken all its output slots.
    let mut free: Vec<SlotId> = Vec::new();
    let mut next_slot = 0usize;
    let mut take = |free: &mut Vec<SlotId>| -> GraphResult<SlotId> {
        if let Some(s) = free.pop() {
            return Ok(s);
        }
        let s = SlotId::try_new(next_slot).ok_or_else(|| exhausted("slot"))?;
        next_slot += 1;
        Ok(s)
    };
    let mut slot_of: Vec<Option<SlotId>> = vec![None; n_values];
    let mut par_input_slots = Vec::with_capacity(n_inputs);
    for (j, &s) in input_slots.iter().enumerate() {
        // An input has a sequential slot exactly when it is read or is an output.
        let slot = if s.is_none() { None } else { Some(take(&mut free)?) };
        slot_of[j] = slot;
        par_input_slots.push(slot);
    }
    for l in 0..levels {
        for &v in &defs[def_start[l] as usize..def_start[l + 1] as usize] {
            slot_of[v as usize] = Some(take(&mut free)?);
        }
        for &v in &releases[release_start[l] as usize..release_start[l + 1] as usize] {
            free.extend(slot_of[v as usize]);
        }
    }
    // Every value an argument or an output names is an input with a slot or an output of
    // an instruction, which got one above.
    let slot_of_value = |v: u32| slot_of[v as usize].ok_or_else(unverified);
    let par_args: Vec<SlotId> = arg_value.iter().map(|&v| slot_of_value(v)).collect::<GraphResult<_>>()?;
    let par_output_slots: Vec<SlotId> = output_values.iter().map(|&v| slot_of_value(v)).collect::<GraphResult<_>>()?;
    let output_move = crate::program::output_moves(&par_output_slots);
    let (steps, op_rep) = compact_steps(ops, instrs, &order, &par_args);
    let mut sched = Schedule {
        order,
        steps,
        op_rep,
        level_start,
        cost_prefix,
        slots: SlotProgram {
            args: par_args,
            input_slots: par_input_slots,
            output_slots: par_output_slots,
            output_move,
            slot_count: next_slot,
        },
        split: SplitLevels { total_cost: acc, ..SplitLevels::default() },
    };
    let mut split = sched.split;
    for r in (0..levels).map(|l| sched.level(l)).filter(|r| sched.is_split(r)) {
        split.cost = split.cost.saturating_add(sched.cost(&r));
        split.instructions += r.len() as u64;
        split.levels += 1;
    }
    sched.split = split;
    Ok(sched)
}

/// The compact steps of the instructions in `order` (slots from `args`) and the table of
/// representative instructions of their distinct operations.
fn compact_steps<Op: Hash + Eq>(
    ops: &[Op],
    instrs: &[Instr],
    order: &[InstrId],
    args: &[SlotId],
) -> (Vec<Step>, Vec<InstrId>) {
    let mut index: FxHashMap<&Op, u32> = FxHashMap::default();
    let mut op_rep: Vec<InstrId> = Vec::new();
    let steps = order
        .iter()
        .map(|&i| {
            let instr = instrs[i.index()];
            let (ins, outs) = instr.slots(args);
            let hint = SlotId::new(0);
            let general = Step {
                op: Step::GENERAL,
                a: ins.first().copied().unwrap_or(hint),
                b: ins.last().copied().unwrap_or(hint),
                out: outs.first().copied().unwrap_or(hint),
            };
            let ([a, .., b] | [a @ b], [out]) = (ins, outs) else { return general };
            if ins.len() > 2 {
                return general;
            }
            let op = &ops[i.index()];
            let k = match index.entry(op) {
                Entry::Occupied(e) => *e.get(),
                // Past the table's capacity, further distinct operations take the general path.
                Entry::Vacant(_) if op_rep.len() as u32 >= Step::MAX_OPS => return general,
                Entry::Vacant(e) => {
                    op_rep.push(i);
                    *e.insert(op_rep.len() as u32 - 1)
                }
            };
            let unary = if ins.len() == 1 { Step::UNARY } else { 0 };
            Step { op: k | unary, a: *a, b: *b, out: *out }
        })
        .collect();
    (steps, op_rep)
}

/// Counting sort of `(level, value)` pairs with levels in `1..=levels`: returns the bucket
/// starts (bucket `l - 1` is `items[start[l - 1]..start[l]]`) and the values, in input
/// order within a bucket.
fn bucket<I>(levels: usize, pairs: I) -> (Vec<u32>, Vec<u32>)
where
    I: Iterator<Item = (u32, u32)> + Clone,
{
    let mut start: Vec<u32> = vec![0; levels + 1];
    for (l, _) in pairs.clone() {
        start[l as usize] += 1;
    }
    for l in 1..=levels {
        start[l] += start[l - 1];
    }
    let mut fill = start.clone();
    let mut items: Vec<u32> = vec![0; start[levels] as usize];
    for (l, v) in pairs {
        let at = &mut fill[l as usize - 1];
        items[*at as usize] = v;
        *at += 1;
    }
    (start, items)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::{Fault, check_levels};

    fn instr(start: u32, n_in: u16, n_out: u16) -> Instr {
        Instr::new(start, n_in, n_out)
    }

    fn slots(s: &[usize]) -> Vec<SlotId> {
        s.iter().map(|&s| SlotId::new(s)).collect()
    }

    fn instr_ids(i: &[usize]) -> Vec<InstrId> {
        i.iter().map(|&i| InstrId::new(i)).collect()
    }

    /// The schedule of a program given with plain slot numbers (every input read), as
    /// an unverified `Schedule` that a test may alter.
    fn build<Op: Hash + Eq>(
        ops: &[Op],
        instrs: &[Instr],
        args: &[usize],
        inputs: &[usize],
        outputs: &[usize],
        slot_count: usize,
        cost: &[u64],
    ) -> Schedule {
        let inputs: Vec<Option<SlotId>> = slots(inputs).into_iter().map(Some).collect();
        schedule(ops, instrs, &slots(args), &inputs, &slots(outputs), slot_count, cost).unwrap()
    }

    /// `a` in s0, `b` in s1; i0 = f(a) -> s2 (frees s0); i1 = g(b) -> s0, reusing s0 in
    /// the same level as i0, which is fine sequentially; i2 = h(s2, s0) -> s1.
    #[test]
    fn same_level_release_is_not_reused_in_the_level() {
        let instrs = [instr(0, 1, 1), instr(2, 1, 1), instr(4, 2, 1)];
        let s = build(&[0u8, 1, 0], &instrs, &[0, 2, 1, 0, 2, 0, 1], &[0, 1], &[1], 3, &[1, 2, 3]);
        assert_eq!(s.order, instr_ids(&[0, 1, 2]));
        assert_eq!(s.level_start, [0, 2, 3]);
        assert_eq!(s.level_count(), 2);
        assert_eq!(s.cost_prefix, [0, 1, 3, 6]);
        assert_eq!(s.slots.input_slots, [Some(SlotId::new(0)), Some(SlotId::new(1))]);
        // Level 1 writes two fresh slots; level 2 reuses a slot released after level 1.
        assert_eq!(s.slots.args, slots(&[0, 2, 1, 3, 2, 3, 1]));
        assert_eq!(s.slots.output_slots, slots(&[1]));
        assert_eq!(s.slots.slot_count, 4);
    }

    /// `check_levels` accepts the schedule built for a program and rejects one whose
    /// level writes a slot twice, or reads a slot it writes.
    #[test]
    fn check_levels_rejects_conflicting_slots() {
        let instrs = [instr(0, 1, 1), instr(2, 1, 1), instr(4, 2, 1)];
        let good = build(&[0u8, 1, 0], &instrs, &[0, 2, 1, 0, 2, 0, 1], &[0, 1], &[1], 3, &[1, 2, 3]);
        assert_eq!(check_levels(&good, &instrs, good.slots.input_slots.len()), Ok(()));
        // Level 1 is i0 (s0 -> s2) and i1 (s1 -> s3).
        let mut twice = good.clone();
        twice.slots.args[3] = SlotId::new(2); // i1 writes s2 too
        let mut read_written = good.clone();
        read_written.slots.args[2] = SlotId::new(2); // i1 reads s2, which i0 writes
        let mut out_of_range = good.clone();
        out_of_range.slots.args[1] = SlotId::new(9);
        let mut unwritten = good.clone();
        unwritten.slots.input_slots[1] = None; // i1 reads s1, which no input fills now
        let s = |k| SlotId::new(k);
        let cases = [
            (twice, Fault::LevelWritesTwice { level: 1, slot: s(2) }),
            (read_written, Fault::LevelRead { level: 1, slot: s(2) }),
            (out_of_range, Fault::LevelWritesTwice { level: 1, slot: s(9) }),
            (unwritten, Fault::LevelRead { level: 1, slot: s(1) }),
        ];
        for (mut bad, fault) in cases {
            // General steps, so that the step check (which compares compact steps with the
            // altered arguments) passes and the level check is what fails.
            bad.steps.iter_mut().for_each(|step| step.op = Step::GENERAL);
            assert_eq!(check_levels(&bad, &instrs, bad.slots.input_slots.len()), Err(fault));
        }
        // What the evaluator's output takes rely on: one input slot per input, output slots
        // written, each moved out once at its last mention.
        let mut out_of_range_output = good.clone();
        out_of_range_output.slots.output_slots[0] = SlotId::new(good.slots.slot_count);
        let mut unwritten_output = good.clone();
        unwritten_output.slots.slot_count += 1;
        unwritten_output.slots.output_slots[0] = SlotId::new(good.slots.slot_count); // in range, never written
        let mut moved_twice = good.clone();
        moved_twice.slots.output_slots.push(good.slots.output_slots[0]);
        moved_twice.slots.output_move = vec![true, true];
        let mut never_moved = good.clone();
        never_moved.slots.output_move[0] = false;
        let mut short_moves = good.clone();
        short_moves.slots.output_move.clear();
        let cases = [
            (out_of_range_output, 2, Fault::OutputSlotOutOfRange { output: 0, slot: s(4) }),
            (unwritten_output, 2, Fault::OutputNeverWritten { slot: s(4) }),
            (moved_twice, 2, Fault::OutputMove { output: 0, slot: s(1) }),
            (never_moved, 2, Fault::OutputMove { output: 0, slot: s(1) }),
            (short_moves, 2, Fault::OutputMoveCount { flags: 0, outputs: 1 }),
            (good.clone(), 3, Fault::InputSlotCount { slots: 2, inputs: 3 }), // one input slot too few
        ];
        for (bad, inputs, fault) in cases {
            assert_eq!(check_levels(&bad, &instrs, inputs), Err(fault), "{bad:?}");
        }
        let mut moved_at_last = good.clone();
        moved_at_last.slots.output_slots.push(good.slots.output_slots[0]);
        moved_at_last.slots.output_move = vec![false, true];
        assert_eq!(check_levels(&moved_at_last, &instrs, 2), Ok(()), "clone first, move at the last mention");
    }

    /// Steps are the level order in compact form: equal operations share one table entry,
    /// a one-operand step repeats its slot, and an instruction of another shape is general.
    #[test]
    fn compact_steps_share_equal_operations() {
        // x in s0, y in s1; i0 = f(x, y) -> s2; i1 = g(x) -> s3; i2 = f(s2, s3) -> s0;
        // i3 = h() -> s1 (no operand: general).
        let instrs = [instr(0, 2, 1), instr(3, 1, 1), instr(5, 2, 1), instr(8, 0, 1)];
        let s = build(&['f', 'g', 'f', 'h'], &instrs, &[0, 1, 2, 0, 3, 2, 3, 0, 1], &[0, 1], &[0, 1], 4, &[1; 4]);
        assert_eq!(s.order, instr_ids(&[0, 1, 3, 2]));
        assert_eq!(s.op_rep, instr_ids(&[0, 1]));
        let (x, y) = (s.slots.input_slots[0].unwrap(), s.slots.input_slots[1].unwrap());
        let [i0, i1, i3, i2] = [0, 1, 2, 3].map(|k| s.steps[k]);
        assert_eq!((i0.op, i0.a, i0.b), (0, x, y));
        assert_eq!((i1.op, i1.a, i1.b), (1 | Step::UNARY, x, x));
        assert_eq!(i3.op, Step::GENERAL);
        assert_eq!((i2.op, i2.a, i2.b), (0, i0.out, i1.out));
        assert_eq!(check_levels(&s, &instrs, 2), Ok(()));
        // Steps that do not match their instructions are refused.
        let mut wrong_slot = s.clone();
        wrong_slot.steps[0].b = x;
        let mut wrong_arity = s.clone();
        wrong_arity.steps[0].op |= Step::UNARY;
        let mut no_such_op = s.clone();
        no_such_op.steps[1].op = 2 | Step::UNARY;
        let mut bad_table = s.clone();
        bad_table.op_rep[1] = InstrId::new(9);
        let mut short = s.clone();
        short.steps.pop();
        let mut compact_without_operands = s.clone();
        compact_without_operands.steps[2].op = 0;
        let mut swapped = s.clone();
        let step = &mut swapped.steps[0];
        (step.a, step.b) = (step.b, step.a);
        let cases = [wrong_slot, wrong_arity, no_such_op, bad_table, short, compact_without_operands, swapped];
        for bad in cases {
            match check_levels(&bad, &instrs, 2) {
                Err(Fault::Step { .. } | Fault::OperationTable { .. } | Fault::StepCount { .. }) => {}
                other => panic!("expected a step fault, got {other:?} for {:?}", bad.steps),
            }
        }
    }

    /// A layered program: `width` inputs, then `depth` levels of `width` two-operand
    /// instructions of cost `cost`, each reading two slots of the level before (slots of
    /// level `l` are `l * width..`, no reuse).
    fn layered(width: usize, depth: usize, cost: u64) -> Schedule {
        let n = width * depth;
        let instrs: Vec<Instr> = (0..n).map(|i| instr(3 * i as u32, 2, 1)).collect();
        let mut args = Vec::with_capacity(3 * n);
        for i in 0..n {
            let (l, k) = (i / width, i % width);
            args.extend([l * width + k, l * width + (k * 7 + 3) % width, (l + 1) * width + k]);
        }
        let inputs: Vec<usize> = (0..width).collect();
        let outputs: Vec<usize> = (depth * width..(depth + 1) * width).collect();
        let ops = vec![0u8; n];
        build(&ops, &instrs, &args, &inputs, &outputs, (depth + 1) * width, &vec![cost; n])
    }

    /// The split levels are summed as the levels say, and the choice follows the estimate:
    /// cheap scalar levels (cost 1), however wide, stay sequential on any number of
    /// threads (their cores' traffic costs more than the work they share); levels of costly
    /// instructions split on two threads or more; one thread never splits.
    #[test]
    fn worth_parallel_weighs_the_sequential_evaluator() {
        for (width, depth) in [(5000, 3), (100_000, 2), (4096, 10)] {
            let s = layered(width, depth, 1);
            let expected = SplitLevels {
                total_cost: (width * depth) as u64,
                cost: (width * depth) as u64,
                instructions: (width * depth) as u64,
                levels: depth as u64,
            };
            assert_eq!(s.split, expected, "{width} x {depth}: every level splits");
            for threads in [1, 2, 3, 8, 64] {
                assert!(!s.split.worth_parallel(threads), "cost 1, {width} x {depth}, {threads} threads");
            }
            let costly = layered(width, depth, 16);
            assert_eq!(costly.split.cost, 16 * expected.cost);
            assert!(!costly.split.worth_parallel(1));
            for threads in [2, 3, 8] {
                assert!(costly.split.worth_parallel(threads), "cost 16, {width} x {depth}, {threads} threads");
            }
        }
        // Narrow levels (summed cost under PAR_LEVEL_MIN_COST) do not split at all.
        let narrow = layered(100, 50, 16);
        assert_eq!((narrow.split.levels, narrow.split.cost), (0, 0));
        assert!(!narrow.split.worth_parallel(2));
    }

    proptest::proptest! {
        /// The choice against a direct evaluation of its estimate in floating point: split
        /// work shared among the threads, plus the per-step and per-level overheads, plus
        /// the work run in place, at most seven eighths of the sequential work.
        #[test]
        fn worth_parallel_is_its_estimate(
            cost in 0u64..1 << 40,
            split_share in 0u64..=100,
            instructions in 0u64..1 << 30,
            levels in 0u64..1 << 20,
            threads in 1usize..=16,
        ) {
            let split = SplitLevels { total_cost: cost, cost: cost / 100 * split_share, instructions, levels };
            let estimate = (split.total_cost - split.cost) as f64
                + (split.cost / threads as u64) as f64
                + (instructions * PAR_STEP_COST) as f64
                + (levels * PAR_LEVEL_SYNC_COST) as f64;
            let want = threads > 1 && split.cost > 0 && estimate <= 0.875 * split.total_cost as f64;
            proptest::prop_assert_eq!(split.worth_parallel(threads), want);
        }
    }

    /// Levels are not program order: a chain interleaved with independent nodes.
    #[test]
    fn counting_sort_groups_levels_in_program_order() {
        // x in s0; i0 = f(x) -> s1; i1 = f(s1) -> s2; i2 = f(x) -> s3; i3 = () -> s4.
        let instrs = [instr(0, 1, 1), instr(2, 1, 1), instr(4, 1, 1), instr(6, 0, 1)];
        let s = build(&[0u8; 4], &instrs, &[0, 1, 1, 2, 0, 3, 4], &[0], &[2, 3, 4], 5, &[1; 4]);
        assert_eq!(s.order, instr_ids(&[0, 2, 3, 1]));
        assert_eq!(s.level_start, [0, 3, 4]);
    }
}
