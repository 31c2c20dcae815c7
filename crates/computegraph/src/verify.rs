//! `verify`: every verifier of the engine, one checklist per phase, and the proof types the
//! evaluators take.
//!
//! The backend's checks each return the proof type of what they checked, or a
//! [`VerifyError`] that names the failing entity by its typed id ([`InstrId`], [`SlotId`],
//! [`ValueId`], [`OperationId`]) rather than in a string:
//! - [`verify_program`] is the only maker of a [`VerifiedProgram`]; `try_compile` runs it
//!   on every program, in every build, because the sequential evaluator's `unsafe`
//!   (`eval.rs`) and the dataflow plan (`dataflow.rs`) rest on it;
//! - [`verify_schedule`] is the only maker of a [`VerifiedSchedule`], checked against the
//!   instructions of a verified program; the compiled program runs it on every schedule
//!   it builds, because the level evaluator's concurrent slot writes rest on it;
//! - [`check_program_against`] and [`check_schedule_against`] check a compiled program and
//!   its schedule against the materialized graph they came from (debug builds and tests:
//!   they prove that compile is right, not what the evaluators' memory safety needs).
//!
//! A proof type has one private field, is made only here and hands out only a shared
//! reference to what it holds, so what its check proved stays true for as long as it
//! lives. The public forms (`CompiledProgram::verify`, `verify_against`,
//! `verify_parallel_against`) turn a [`VerifyError`] into [`GraphError::Invalid`].
//!
//! [`Program`] checklist ([`verify_program`]):
//! 1. one operation per instruction; every instruction's arguments inside the pool, and
//!    as many operand and output slots as its operation has inputs and outputs;
//! 2. every slot below `slot_count`; every slot read written before (by an input or an
//!    earlier instruction); no output slot aliasing an operand of its instruction; every
//!    program output slot written;
//! 3. the runs cover the instructions in order, a uniform run's instructions have its
//!    arity, one output, arguments one after another and operations equal to the run's
//!    entry of `run_ops`, which has one entry per uniform run;
//! 4. the output move flags mark exactly the last mention of each output slot.
//!
//! [`Schedule`] checklist ([`verify_schedule`], the level invariant of `schedule.rs`):
//! 1. one input slot per program input; level boundaries cover the instructions in order;
//! 2. every compact step names its instruction's slots and an operation table entry that
//!    names an instruction;
//! 3. every slot in range; within a level every written slot written once and not read,
//!    and every read slot written before (an input or an earlier level); every output
//!    slot written; output move flags as for the program.
//!
//! Against the graph ([`check_program_against`], [`check_schedule_against`]): the
//! source-operation column is a permutation; simulating slot contents, every operand
//! reads the value the graph names (for the schedule, as it stood when its level began)
//! and every output ends in its slot; a compact step's operation equals its instruction's.
//!
//! [`Graph`] checklist ([`Graph::verify`]):
//! 1. every column has one entry per value / operation (keys fully interned);
//! 2. operation `o`'s operands are local values created before its first output, or
//!    valid external indices; their count is `input_count()`; a linear mask matches;
//! 3. operation outputs are `output_count()` consecutive values whose definitions point
//!    back at `(o, slot)` (in a `Graph`: at `o`, and no other value points at an
//!    operation), and whose keys are the operation key's outputs;
//! 4. inputs are the values defined as inputs, in order; outputs are in range.
//!
//! [`MaterializedGraph`] checklist ([`MaterializedGraph::verify`]): 2 and 3 with
//! materialized ids, operations' outputs in operation order (which `dispatch.rs` relies
//! on); no two values share a key; the inputs are the first values and the external
//! values the next ones, the only values with no operation (`value_op`), and every other
//! value is an output of the operation it names; `inputs` lists exactly the input values,
//! in order, parallel to `input_keys`, and `externals` the external values after them, in
//! order, parallel to `external_keys` (derived keys, each interning to its value's key, in
//! increasing key order). The graph verifiers run after their phase in debug builds and in
//! tests, and report a [`GraphError`] directly.
//!
//! Complexity: each check is linear in what it reads (instructions, arguments, slots,
//! outputs), with one or two allocations.

use std::fmt;

use rustc_hash::FxHashSet;

use crate::dispatch::source_of;
use crate::error::{GraphError, GraphResult};
use crate::graph::{Graph, InputRef};
use crate::id::{IdVec, InstrId, SlotId};
use crate::key::ValueKey;
use crate::materialize::{MaterializedGraph, OperationId, ValueId};
use crate::operation::GraphOperation;
use crate::program::{Instr, Program, SlotProgram};
use crate::schedule::{Schedule, Step};

/// Which object a failed check was about: the sequential program or the parallel
/// schedule (the `phase` of the [`GraphError::Invalid`] it becomes).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// The sequential slot program of a compiled program.
    Program,
    /// The level schedule of parallel evaluation.
    Schedule,
}

impl Phase {
    fn name(self) -> &'static str {
        match self {
            Phase::Program => "compiled program",
            Phase::Schedule => "parallel schedule",
        }
    }
}

/// A failed check: the phase, and what is wrong (see [`Fault`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct VerifyError {
    pub(crate) phase: Phase,
    pub(crate) fault: Fault,
}

/// What a check found wrong, naming the failing entity by its typed id. Levels are
/// numbered from 1 (level 0 is the inputs), runs, steps, operands and outputs by their
/// position.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The operation and instruction columns differ in length.
    OperationCount { ops: usize, instrs: usize },
    /// An input slot is not below the slot count.
    InputSlotOutOfRange { slot: SlotId },
    /// An instruction's argument range runs past the argument pool.
    ArgumentsPastPool { instr: InstrId },
    /// An instruction's operand or output count differs from its operation's.
    Arity { instr: InstrId },
    /// An instruction reads a slot nothing wrote before it (or one out of range).
    ReadBeforeWrite { instr: InstrId, slot: SlotId },
    /// An instruction writes a slot out of range or one of its own operands.
    BadOutputSlot { instr: InstrId, slot: SlotId },
    /// A program output's slot is never written.
    OutputNeverWritten { slot: SlotId },
    /// A run does not end after the previous one and within the program.
    RunEnd { run: usize, end: usize, after: usize },
    /// A run does not start at its first instruction's arguments.
    RunStart { run: usize },
    /// A uniform run has no entry in `run_ops`.
    RunWithoutOperation { run: usize },
    /// An instruction does not fit the uniform run that holds it.
    NotInRun { instr: InstrId, run: usize },
    /// The runs cover fewer instructions than the program has.
    RunsCover { covered: usize, instrs: usize },
    /// `run_ops` has a different length from the number of uniform runs.
    RunOperations { run_ops: usize, uniform: usize },
    /// The output move flags and output slots differ in length.
    OutputMoveCount { flags: usize, outputs: usize },
    /// An output's slot is out of range.
    OutputSlotOutOfRange { output: usize, slot: SlotId },
    /// An output is not moved out exactly at its slot's last mention.
    OutputMove { output: usize, slot: SlotId },
    /// A schedule has a different number of input slots from the program's inputs.
    InputSlotCount { slots: usize, inputs: usize },
    /// The level boundaries do not cover the instructions in order.
    LevelBounds,
    /// A schedule has a different number of steps from its instructions.
    StepCount { steps: usize, instrs: usize },
    /// The operation table names an instruction out of range.
    OperationTable { instr: InstrId },
    /// A compact step does not match the instruction at its position.
    Step { step: usize, instr: InstrId },
    /// The schedule's order names an instruction out of range.
    OrderOutOfRange { instr: InstrId },
    /// A level writes a slot twice, or one out of range.
    LevelWritesTwice { level: usize, slot: SlotId },
    /// A level reads a slot it writes, that nothing wrote before, or out of range.
    LevelRead { level: usize, slot: SlotId },
    /// The instruction or input count differs from the graph's.
    GraphCounts,
    /// A schedule's columns differ in length from the program's.
    ScheduleColumns,
    /// The source-operation column's length differs from the instruction count.
    SourceLength { len: usize, instrs: usize },
    /// An instruction's source operation is out of range or another's too.
    SourceOperation { instr: InstrId, operation: OperationId },
    /// An operand reads a slot that holds another value than the graph's operand.
    Operand { instr: InstrId, operand: usize, slot: SlotId, holds: Option<ValueId>, expected: ValueId },
    /// A graph output is not in its slot at the end.
    OutputValue { value: ValueId, slot: SlotId },
    /// The schedule's order is not a permutation of the instructions.
    NotPermutation { instr: InstrId },
    /// A compact step runs another instruction's operation, not an equal one.
    StepOperation { step: usize, rep: InstrId, instr: InstrId },
    /// In the schedule, an instruction's argument counts differ from its operation's.
    GraphArity { instr: InstrId },
    /// In the schedule, an operand does not hold the graph's value when its level begins,
    /// or is written in its level.
    LevelOperand { level: usize, instr: InstrId, operand: usize, slot: SlotId, expected: ValueId },
    /// In the schedule, an instruction writes a slot out of range or already used in its
    /// level.
    LevelWrite { level: usize, instr: InstrId, slot: SlotId },
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::OperationCount { ops, instrs } => {
                write!(f, "operation and instruction counts differ ({ops} and {instrs})")
            }
            Fault::InputSlotOutOfRange { slot } => write!(f, "input slot {slot:?} out of range"),
            Fault::ArgumentsPastPool { instr } => {
                write!(f, "instruction {instr:?}'s arguments run past the argument pool")
            }
            Fault::Arity { instr } => write!(f, "instruction {instr:?} arity differs from its operation"),
            Fault::ReadBeforeWrite { instr, slot } => {
                write!(f, "instruction {instr:?} reads slot {slot:?} before any write")
            }
            Fault::BadOutputSlot { instr, slot } => {
                write!(f, "instruction {instr:?} writes slot {slot:?} out of range or aliasing an operand")
            }
            Fault::OutputNeverWritten { slot } => write!(f, "output slot {slot:?} is never written"),
            Fault::RunEnd { run, end, after } => {
                write!(f, "run {run} ends at instruction {end}, not after {after} and within the program")
            }
            Fault::RunStart { run } => write!(f, "run {run} does not start at its first instruction's arguments"),
            Fault::RunWithoutOperation { run } => write!(f, "uniform run {run} has no operation"),
            Fault::NotInRun { instr, run } => write!(f, "instruction {instr:?} does not fit uniform run {run}"),
            Fault::RunsCover { covered, instrs } => write!(f, "runs cover {covered} of {instrs} instructions"),
            Fault::RunOperations { run_ops, uniform } => {
                write!(f, "{run_ops} run operations for {uniform} uniform runs")
            }
            Fault::OutputMoveCount { flags, outputs } => {
                write!(f, "{flags} output move flags for {outputs} output slots")
            }
            Fault::OutputSlotOutOfRange { output, slot } => {
                write!(f, "output {output}'s slot {slot:?} is out of range")
            }
            Fault::OutputMove { output, slot } => {
                write!(f, "output {output} (slot {slot:?}) is not moved out exactly at its slot's last mention")
            }
            Fault::InputSlotCount { slots, inputs } => write!(f, "{slots} input slots for {inputs} inputs"),
            Fault::LevelBounds => f.write_str("level boundaries do not cover the instructions in order"),
            Fault::StepCount { steps, instrs } => write!(f, "{steps} steps for {instrs} instructions"),
            Fault::OperationTable { instr } => write!(f, "operation table names instruction {instr:?}, out of range"),
            Fault::Step { step, instr } => write!(f, "step {step} does not match instruction {instr:?}"),
            Fault::OrderOutOfRange { instr } => write!(f, "order names instruction {instr:?}, out of range"),
            Fault::LevelWritesTwice { level, slot } => {
                write!(f, "level {level} writes slot {slot:?} twice, or it is out of range")
            }
            Fault::LevelRead { level, slot } => write!(
                f,
                "level {level} reads slot {slot:?}, which it writes, which nothing wrote before, or which is out of range"
            ),
            Fault::GraphCounts => f.write_str("instruction or input count differs from the graph"),
            Fault::ScheduleColumns => f.write_str("column lengths differ from the program"),
            Fault::SourceLength { len, instrs } => {
                write!(f, "the source-operation column has {len} entries for {instrs} instructions")
            }
            Fault::SourceOperation { instr, operation } => {
                write!(f, "instruction {instr:?}'s source operation {operation:?} is out of range or repeated")
            }
            Fault::Operand { instr, operand, slot, holds, expected } => write!(
                f,
                "instruction {instr:?} operand {operand} reads slot {slot:?} holding {holds:?}, expected {expected:?}"
            ),
            Fault::OutputValue { value, slot } => write!(f, "output {value:?} is not in its slot {slot:?} at the end"),
            Fault::NotPermutation { instr } => write!(f, "order is not a permutation (instruction {instr:?})"),
            Fault::StepOperation { step, rep, instr } => {
                write!(f, "step {step} runs the operation of instruction {rep:?}, not of {instr:?}")
            }
            Fault::GraphArity { instr } => write!(f, "instruction {instr:?} arity differs from the graph"),
            Fault::LevelOperand { level, instr, operand, slot, expected } => write!(
                f,
                "level {level} instruction {instr:?} operand {operand} reads slot {slot:?}, which does not hold \
                 {expected:?} when the level begins or is written in the level"
            ),
            Fault::LevelWrite { level, instr, slot } => write!(
                f,
                "level {level} instruction {instr:?} writes slot {slot:?}, out of range or already used in the level"
            ),
        }
    }
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {}: {}", self.phase.name(), self.fault)
    }
}

impl From<VerifyError> for GraphError {
    fn from(e: VerifyError) -> GraphError {
        GraphError::Invalid { phase: e.phase.name(), message: e.fault.to_string() }
    }
}

/// A `Result` of one phase's checks, failing with a [`Fault`].
type Checked = Result<(), Fault>;

/// A [`Program`] that passed [`verify_program`]. The field is private and only
/// [`verify_program`] builds the type, which hands out only `&Program`, so what the checks
/// proved stays true for as long as the value lives: the sequential evaluator's unchecked
/// slot and argument accesses (`eval.rs`) take a `&VerifiedProgram` as their receiver, and
/// the parallel schedule (`schedule.rs`) and the dataflow plan (`dataflow.rs`) are built
/// from one.
#[derive(Clone, Debug)]
pub(crate) struct VerifiedProgram<Op>(Program<Op>);

impl<Op> VerifiedProgram<Op> {
    /// The verified program, read-only.
    #[inline(always)]
    pub(crate) fn program(&self) -> &Program<Op> {
        &self.0
    }
}

/// A [`Schedule`] that passed [`verify_schedule`] against the instructions of a verified
/// program. The field is private, only [`verify_schedule`] builds the type, and it hands
/// out only `&Schedule`, so the level invariant holds for as long as the value lives: the
/// parallel evaluator's unchecked, concurrent slot accesses (`eval.rs`) take a
/// `&VerifiedSchedule`. (The compiled program keeps the one it built from its own
/// immutable code, so the instructions checked are the instructions run.)
#[derive(Clone, Debug)]
pub(crate) struct VerifiedSchedule(Schedule);

impl VerifiedSchedule {
    /// The verified schedule, read-only.
    #[inline(always)]
    pub(crate) fn schedule(&self) -> &Schedule {
        &self.0
    }
}

/// Checks the [`Program`] checklist of the module doc and returns the program as a
/// [`VerifiedProgram`], the only way to make one. `O(instructions + arguments + slots)`.
pub(crate) fn verify_program<Op: GraphOperation>(program: Program<Op>) -> Result<VerifiedProgram<Op>, VerifyError> {
    match check_program(&program) {
        Ok(()) => Ok(VerifiedProgram(program)),
        Err(fault) => Err(VerifyError { phase: Phase::Program, fault }),
    }
}

/// [`verify_program`]'s checks again, on a program already verified (what the public
/// `CompiledProgram::verify` runs: on a program of this crate they always pass).
pub(crate) fn recheck_program<Op: GraphOperation>(code: &VerifiedProgram<Op>) -> Result<(), VerifyError> {
    check_program(code.program()).map_err(|fault| VerifyError { phase: Phase::Program, fault })
}

/// The checks of [`verify_program`], on a borrowed program, in one pass over the
/// instructions run by run: a uniform run's instructions are checked against the run as
/// they are checked against their operations, while their words and arguments are read
/// once (a second pass for the runs re-read every operation and word of the program,
/// about a third of the verifier's work on a scalar DAG).
fn check_program<Op: GraphOperation>(program: &Program<Op>) -> Checked {
    let slots = &program.slots;
    let mut written: IdVec<SlotId, bool> = IdVec::from_elem(false, slots.slot_count);
    for &slot in slots.input_slots.iter().flatten() {
        let Some(w) = written.get_mut(slot) else {
            return Err(Fault::InputSlotOutOfRange { slot });
        };
        *w = true;
    }
    let (ops, instrs, args) = (program.ops.raw(), program.instrs.raw(), &slots.args[..]);
    if ops.len() != instrs.len() {
        return Err(Fault::OperationCount { ops: ops.len(), instrs: instrs.len() });
    }
    let mut i = 0usize;
    let mut uniform = 0usize;
    for (r, run) in program.runs.iter().enumerate() {
        let end = run.end as usize;
        if end <= i || end > instrs.len() {
            return Err(Fault::RunEnd { run: r, end, after: i });
        }
        if run.start as usize != instrs[i].start() {
            return Err(Fault::RunStart { run: r });
        }
        if run.arity == 0 {
            for k in i..end {
                check_instruction(k, &ops[k], instrs[k], args, &mut written)?;
            }
        } else {
            let Some(op) = program.run_ops.get(uniform) else {
                return Err(Fault::RunWithoutOperation { run: r });
            };
            uniform += 1;
            // Runs of one and two operands (the only ones compile cuts) are checked by a
            // loop whose arity is a constant: their operand checks unroll.
            match run.arity {
                1 => check_uniform_run::<Op, 1>(r, i, end, 1, op, ops, instrs, args, &mut written)?,
                2 => check_uniform_run::<Op, 2>(r, i, end, 2, op, ops, instrs, args, &mut written)?,
                k => check_uniform_run::<Op, 0>(r, i, end, k as usize, op, ops, instrs, args, &mut written)?,
            }
        }
        i = end;
    }
    if i != instrs.len() {
        return Err(Fault::RunsCover { covered: i, instrs: instrs.len() });
    }
    if uniform != program.run_ops.len() {
        return Err(Fault::RunOperations { run_ops: program.run_ops.len(), uniform });
    }
    if let Some(&slot) = slots.output_slots.iter().find(|&&s| written.get(s) != Some(&true)) {
        return Err(Fault::OutputNeverWritten { slot });
    }
    check_output_moves(slots)
}

/// Checklist items 1 and 2 for instruction `k` of a mixed run, whose operation is `op`
/// and word `word`; marks its outputs written.
#[inline]
fn check_instruction<Op: GraphOperation>(
    k: usize,
    op: &Op,
    word: Instr,
    args: &[SlotId],
    written: &mut IdVec<SlotId, bool>,
) -> Checked {
    // The loop counts positions and builds an id only to report one.
    let instr = || InstrId::new(k);
    if word.end() > args.len() {
        return Err(Fault::ArgumentsPastPool { instr: instr() });
    }
    let (ins, outs) = word.slots(args);
    if ins.len() != op.input_count() || outs.len() != op.output_count() {
        return Err(Fault::Arity { instr: instr() });
    }
    // One output and one or two operands (most instructions) as an array of constant
    // length, so that the checks below unroll, and without a branch on which: in a
    // mixed run they alternate at random (a chain of random variants), and a branch on
    // the count was mispredicted about once in four instructions. The second entry is
    // the last operand, the first again when it is the only one, which checks nothing
    // more. Any other shape as slices.
    match (ins.len(), outs) {
        (n @ (1 | 2), &[o]) => check_slots(k, &[ins[0], ins[n - 1]], &[o], written),
        _ => check_slots(k, ins, outs, written),
    }
}

/// The slot checks of [`check_instruction`]: each operand slot written before, each output
/// slot in range and not an operand, then marked written.
#[inline(always)]
fn check_slots(k: usize, ins: &[SlotId], outs: &[SlotId], written: &mut IdVec<SlotId, bool>) -> Checked {
    // `written` has one entry per slot: `get` is `None` exactly out of range.
    if let Some(&slot) = ins.iter().find(|&&s| written.get(s) != Some(&true)) {
        return Err(Fault::ReadBeforeWrite { instr: InstrId::new(k), slot });
    }
    for &slot in outs {
        match written.get_mut(slot) {
            Some(w) if !ins.contains(&slot) => *w = true,
            _ => return Err(Fault::BadOutputSlot { instr: InstrId::new(k), slot }),
        }
    }
    Ok(())
}

/// Checklist items 1 to 3 for the instructions `i..end` of uniform run `r`, whose
/// operation is `op` and arity `k`: each instruction's word is the one the run implies
/// (`k` operands, one output, arguments right after the previous instruction's), its
/// operation equals `op` and has that arity, and its slots are checked as a mixed run's
/// are, from the run's stretch of arguments. `K` is `k` when it is not 0 (a constant
/// arity, for which the compiler unrolls the operand checks), any arity otherwise.
#[allow(clippy::too_many_arguments)]
#[inline]
fn check_uniform_run<Op: GraphOperation, const K: usize>(
    r: usize,
    i: usize,
    end: usize,
    k: usize,
    op: &Op,
    ops: &[Op],
    instrs: &[Instr],
    args: &[SlotId],
    written: &mut IdVec<SlotId, bool>,
) -> Checked {
    debug_assert!(K == 0 || K == k);
    let k = if K == 0 { k } else { K };
    let base = instrs[i].start();
    for j in i..end {
        let start = base + (j - i) * (k + 1);
        // The word the run implies, compared whole (one comparison where its three
        // fields took three, with their shifts); `k` is at most 255 (a run's arity is a
        // `u8`), and a start past `u32` fits no word.
        if instrs[j] != Instr::new(start as u32, k as u16, 1) || start > u32::MAX as usize || ops[j] != *op {
            return Err(Fault::NotInRun { instr: InstrId::new(j), run: r });
        }
        // Equal operations may still differ in arity (a user's `PartialEq`): the
        // evaluators trust each instruction's own.
        if ops[j].input_count() != k || ops[j].output_count() != 1 {
            return Err(Fault::Arity { instr: InstrId::new(j) });
        }
        let Some(a) = args.get(start..start + k + 1) else {
            return Err(Fault::ArgumentsPastPool { instr: InstrId::new(j) });
        };
        let (ins, out) = (&a[..k], a[k]);
        if let Some(&slot) = ins.iter().find(|&&s| written.get(s) != Some(&true)) {
            return Err(Fault::ReadBeforeWrite { instr: InstrId::new(j), slot });
        }
        match written.get_mut(out) {
            Some(w) if !ins.contains(&out) => *w = true,
            _ => return Err(Fault::BadOutputSlot { instr: InstrId::new(j), slot: out }),
        }
    }
    Ok(())
}

/// Checks that `output_move` marks exactly the last mention of each output slot, so that
/// taking the outputs moves each value out once and clones it before (the evaluators rely
/// on it), and that every output slot is below `slot_count`. `O(outputs + slots)`.
fn check_output_moves(slots: &SlotProgram) -> Checked {
    let (output_slots, output_move) = (&slots.output_slots, &slots.output_move);
    if output_move.len() != output_slots.len() {
        return Err(Fault::OutputMoveCount { flags: output_move.len(), outputs: output_slots.len() });
    }
    let mut seen: IdVec<SlotId, bool> = IdVec::from_elem(false, slots.slot_count);
    for (output, (&slot, &mv)) in output_slots.iter().zip(output_move).enumerate().rev() {
        let Some(&seen_s) = seen.get(slot) else {
            return Err(Fault::OutputSlotOutOfRange { output, slot });
        };
        if mv == seen_s {
            return Err(Fault::OutputMove { output, slot });
        }
        seen[slot] = true;
    }
    Ok(())
}

/// Checks the [`Schedule`] checklist of the module doc against the instructions of
/// `code` and returns the schedule as a [`VerifiedSchedule`], the only way to make one.
/// This is the guarantee behind the level evaluator's concurrent, unchecked slot accesses
/// and its unchecked output takes, so it runs whenever a schedule is built.
/// `O(levels + arguments + slots + outputs)`, one allocation.
pub(crate) fn verify_schedule<Op>(
    schedule: Schedule,
    code: &VerifiedProgram<Op>,
) -> Result<VerifiedSchedule, VerifyError> {
    let program = code.program();
    match check_levels(&schedule, program.instrs.raw(), program.slots.input_slots.len()) {
        Ok(()) => Ok(VerifiedSchedule(schedule)),
        Err(fault) => Err(VerifyError { phase: Phase::Schedule, fault }),
    }
}

/// The checks of [`verify_schedule`], against instruction words and an input count.
pub(crate) fn check_levels(schedule: &Schedule, instrs: &[Instr], n_inputs: usize) -> Checked {
    let n = instrs.len();
    let slots = &schedule.slots;
    if slots.input_slots.len() != n_inputs {
        return Err(Fault::InputSlotCount { slots: slots.input_slots.len(), inputs: n_inputs });
    }
    let level_start = &schedule.level_start;
    if schedule.order.len() != n
        || schedule.cost_prefix.len() != n + 1
        || level_start.first().is_some_and(|&s| s != 0)
        || level_start.last().is_some_and(|&e| e as usize != n)
        || (level_start.is_empty() && n != 0)
        || level_start.windows(2).any(|w| w[0] > w[1])
    {
        return Err(Fault::LevelBounds);
    }
    check_steps(schedule, instrs)?;
    let in_range = |s: SlotId| slots.in_range(s);
    if let Some(&slot) = slots.input_slots.iter().flatten().find(|&&s| !in_range(s)) {
        return Err(Fault::InputSlotOutOfRange { slot });
    }
    if let Some((output, &slot)) = slots.output_slots.iter().enumerate().find(|&(_, &s)| !in_range(s)) {
        return Err(Fault::OutputSlotOutOfRange { output, slot });
    }
    // `stamp[s]`: the last write of slot `s` so far.
    #[derive(Copy, Clone, PartialEq, Eq)]
    enum Stamp {
        Never,
        Input,
        Level(u32),
    }
    let mut stamp: IdVec<SlotId, Stamp> = IdVec::from_elem(Stamp::Never, slots.slot_count);
    for &s in slots.input_slots.iter().flatten() {
        stamp[s] = Stamp::Input;
    }
    for l in 0..schedule.level_count() {
        let level = l + 1;
        let mark = Stamp::Level(level as u32);
        let order = &schedule.order[schedule.level(l)];
        for &instr in order {
            let Some(&word) = instrs.get(instr.index()) else {
                return Err(Fault::OrderOutOfRange { instr });
            };
            let mid = word.start() + word.n_in();
            let Some(outs) = slots.args.get(mid..mid + word.n_out()) else {
                return Err(Fault::ArgumentsPastPool { instr });
            };
            for &slot in outs {
                if !in_range(slot) || stamp[slot] == mark {
                    return Err(Fault::LevelWritesTwice { level, slot });
                }
                stamp[slot] = mark;
            }
        }
        for &i in order {
            for &slot in instrs[i.index()].slots(&slots.args).0 {
                if !in_range(slot) || stamp[slot] == mark || stamp[slot] == Stamp::Never {
                    return Err(Fault::LevelRead { level, slot });
                }
            }
        }
    }
    if let Some(&slot) = slots.output_slots.iter().find(|&&s| stamp[s] == Stamp::Never) {
        return Err(Fault::OutputNeverWritten { slot });
    }
    check_output_moves(slots)
}

/// Checks that `steps` is `order` in compact form: one step per position, a compact step
/// only for an instruction of one output and one or two operands, naming that
/// instruction's slots (so the level invariant checked on `args` holds for the steps) and
/// an entry of `op_rep` that names an instruction. Whether the representative's operation
/// equals the instruction's is checked by [`check_schedule_against`] (debug builds and
/// tests; it catches only an `Eq` that is not symmetric, since the table was built with
/// that `Eq`): the evaluator's memory safety does not depend on it.
fn check_steps(schedule: &Schedule, instrs: &[Instr]) -> Checked {
    let args = &schedule.slots.args;
    if schedule.steps.len() != schedule.order.len() {
        return Err(Fault::StepCount { steps: schedule.steps.len(), instrs: schedule.order.len() });
    }
    if let Some(&instr) = schedule.op_rep.iter().find(|&&i| i.index() >= instrs.len()) {
        return Err(Fault::OperationTable { instr });
    }
    for (step, (s, &instr)) in schedule.steps.iter().zip(&schedule.order).enumerate() {
        let Some(&word) = instrs.get(instr.index()) else {
            return Err(Fault::Step { step, instr });
        };
        if s.op == Step::GENERAL {
            continue;
        }
        let Some((ins, outs)) = (word.end() <= args.len()).then(|| word.slots(args)) else {
            return Err(Fault::Step { step, instr });
        };
        let unary = s.op & Step::UNARY != 0;
        let matches = match (ins, outs) {
            ([a], [out]) => unary && (s.a, s.b, s.out) == (*a, *a, *out),
            ([a, b], [out]) => !unary && (s.a, s.b, s.out) == (*a, *b, *out),
            _ => false,
        };
        if !matches || (s.op & !Step::UNARY) as usize >= schedule.op_rep.len() {
            return Err(Fault::Step { step, instr });
        }
    }
    Ok(())
}

/// Checks that `source` (instruction `i` computes operation `source[i]`, or operation `i`
/// when empty) is a permutation of the `n` instructions.
fn check_source(source: &[u32], n: usize) -> Checked {
    if source.is_empty() {
        return Ok(());
    }
    if source.len() != n {
        return Err(Fault::SourceLength { len: source.len(), instrs: n });
    }
    let mut seen: IdVec<OperationId, bool> = IdVec::from_elem(false, n);
    for instr in (0..n).map(InstrId::new) {
        let operation = source_of(source, instr);
        if seen.get(operation).is_none() || std::mem::replace(&mut seen[operation], true) {
            return Err(Fault::SourceOperation { instr, operation });
        }
    }
    Ok(())
}

/// Checks that `code`, whose instruction `i` computes the operation `source` names
/// ([`check_source`]), computes `graph`: re-runs [`verify_program`]'s checks, then
/// simulates slot contents and confirms that every read finds the value the graph names,
/// and every output its value.
pub(crate) fn check_program_against<Op: GraphOperation>(
    code: &VerifiedProgram<Op>,
    source: &[u32],
    graph: &MaterializedGraph<Op>,
) -> Result<(), VerifyError> {
    recheck_program(code)?;
    program_against(code.program(), source, graph).map_err(|fault| VerifyError { phase: Phase::Program, fault })
}

fn program_against<Op: GraphOperation>(
    program: &Program<Op>,
    source: &[u32],
    graph: &MaterializedGraph<Op>,
) -> Checked {
    let slots = &program.slots;
    let n_inputs = graph.inputs.len() + graph.externals.len();
    if program.instrs.len() != graph.operation_count() || slots.input_slots.len() != n_inputs {
        return Err(Fault::GraphCounts);
    }
    check_source(source, program.instrs.len())?;
    let mut content: IdVec<SlotId, Option<ValueId>> = IdVec::from_elem(None, slots.slot_count);
    for (s, &v) in slots.input_slots.iter().zip(graph.inputs.iter().chain(&graph.externals)) {
        if let &Some(s) = s {
            content[s] = Some(v);
        }
    }
    for instr in program.instrs.ids() {
        let op = graph.operation(source_of(source, instr));
        let (ins, outs) = program.instrs[instr].slots(&slots.args);
        for (operand, (&slot, &expected)) in ins.iter().zip(op.inputs()).enumerate() {
            if content[slot] != Some(expected) {
                return Err(Fault::Operand { instr, operand, slot, holds: content[slot], expected });
            }
        }
        for (&s, v) in outs.iter().zip(op.outputs()) {
            content[s] = Some(v);
        }
    }
    for (&slot, &value) in slots.output_slots.iter().zip(&graph.outputs) {
        if content[slot] != Some(value) {
            return Err(Fault::OutputValue { value, slot });
        }
    }
    Ok(())
}

/// Checks the parallel schedule `sched` of `code` against `graph`: `order` is a
/// permutation of the instructions sorted by level, and, simulating slot contents level
/// by level, every operand reads the value the graph names as it stood when the level
/// began (so its producer is in an earlier level and its slot was not reused), no slot is
/// written twice in a level or both written and read in one level, a compact step runs an
/// operation equal to its instruction's, and every output ends in its slot.
pub(crate) fn check_schedule_against<Op: GraphOperation>(
    code: &VerifiedProgram<Op>,
    sched: &VerifiedSchedule,
    source: &[u32],
    graph: &MaterializedGraph<Op>,
) -> Result<(), VerifyError> {
    let program = code.program();
    check_source(source, program.instrs.len()).map_err(|fault| VerifyError { phase: Phase::Program, fault })?;
    schedule_against(program, sched.schedule(), source, graph)
        .map_err(|fault| VerifyError { phase: Phase::Schedule, fault })
}

fn schedule_against<Op: GraphOperation>(
    program: &Program<Op>,
    sched: &Schedule,
    source: &[u32],
    graph: &MaterializedGraph<Op>,
) -> Checked {
    let n = program.instrs.len();
    let slots = &sched.slots;
    if n != graph.operation_count()
        || slots.input_slots.len() != graph.inputs.len() + graph.externals.len()
        || slots.output_slots.len() != graph.outputs.len()
    {
        return Err(Fault::GraphCounts);
    }
    if slots.args.len() != program.slots.args.len() || sched.order.len() != n || sched.cost_prefix.len() != n + 1 {
        return Err(Fault::ScheduleColumns);
    }
    if sched.level_start.first() != Some(&0)
        || sched.level_start.last() != Some(&(n as u32))
        || sched.level_start.windows(2).any(|w| w[0] > w[1])
    {
        return Err(Fault::LevelBounds);
    }
    let mut placed: IdVec<InstrId, bool> = IdVec::from_elem(false, n);
    for &instr in &sched.order {
        if placed.get(instr).is_none() || std::mem::replace(&mut placed[instr], true) {
            return Err(Fault::NotPermutation { instr });
        }
    }
    // A compact step's operation is its instruction's (the evaluator runs the
    // representative in its place).
    for (step, (s, &instr)) in sched.steps.iter().zip(&sched.order).enumerate() {
        if s.op != Step::GENERAL {
            let rep = sched.op_rep[(s.op & !Step::UNARY) as usize];
            if program.ops[rep] != program.ops[instr] {
                return Err(Fault::StepOperation { step, rep, instr });
            }
        }
    }
    let ops: IdVec<InstrId, _> = program.instrs.ids().map(|i| graph.operation(source_of(source, i))).collect();
    let in_range = |s: SlotId| slots.in_range(s);
    let mut content: IdVec<SlotId, Option<ValueId>> = IdVec::from_elem(None, slots.slot_count);
    for (s, &v) in slots.input_slots.iter().zip(graph.inputs.iter().chain(&graph.externals)) {
        if let &Some(slot) = s {
            if !in_range(slot) {
                return Err(Fault::InputSlotOutOfRange { slot });
            }
            content[slot] = Some(v);
        }
    }
    // 0: untouched in this level, 1: read, 2: written.
    let mut touched: IdVec<SlotId, u8> = IdVec::from_elem(0, slots.slot_count);
    let mut writes: Vec<(SlotId, ValueId)> = Vec::new();
    for l in 0..sched.level_count() {
        let (range, level) = (sched.level(l), l + 1);
        for &instr in &sched.order[range.clone()] {
            let (ins, outs) = program.instrs[instr].slots(&slots.args);
            let op = &ops[instr];
            if ins.len() != op.inputs().len() || outs.len() != op.outputs().len() {
                return Err(Fault::GraphArity { instr });
            }
            for (operand, (&slot, &expected)) in ins.iter().zip(op.inputs()).enumerate() {
                if !in_range(slot) || content[slot] != Some(expected) || touched[slot] == 2 {
                    return Err(Fault::LevelOperand { level, instr, operand, slot, expected });
                }
                touched[slot] = 1;
            }
            for (&slot, v) in outs.iter().zip(op.outputs()) {
                if !in_range(slot) || touched[slot] != 0 {
                    return Err(Fault::LevelWrite { level, instr, slot });
                }
                touched[slot] = 2;
                writes.push((slot, v));
            }
        }
        for &i in &sched.order[range] {
            for &s in program.instrs[i].slots(&slots.args).0 {
                touched[s] = 0;
            }
        }
        for (s, v) in writes.drain(..) {
            touched[s] = 0;
            content[s] = Some(v);
        }
    }
    for (&slot, &value) in slots.output_slots.iter().zip(&graph.outputs) {
        if !in_range(slot) || content[slot] != Some(value) {
            return Err(Fault::OutputValue { value, slot });
        }
    }
    Ok(())
}

impl<Op: GraphOperation> Graph<Op> {
    /// Checks the graph's invariants (see the module doc of `verify.rs`).
    pub fn verify(&self) -> GraphResult<()> {
        let bad = |message: String| GraphError::Invalid { phase: "graph", message };
        let n_values = self.value_op.len();
        if self.value_key.len() != n_values
            || self.op_key.len() != self.operation_count()
            || !self.role_column_ok()
            || self.op_first_output.len() != self.operation_count()
            || self.op_input_lists() != self.operation_count()
            || self.external_key.len() != self.externals.len()
        {
            return Err(bad("column lengths disagree".into()));
        }
        for op in self.operations() {
            let o = op.id();
            let operation = op.operation();
            let refs = self.op_input_refs(o);
            crate::operation::check_operation(operation, refs.len(), op.role()).map_err(|e| bad(e.to_string()))?;
            let first = self.op_first_output[o];
            for r in refs {
                match r {
                    InputRef::Local(v) if v >= first => {
                        return Err(bad(format!("{o:?} reads {v:?}, which is not created before it")));
                    }
                    InputRef::External(e) if e as usize >= self.externals.len() => {
                        return Err(bad(format!("{o:?} reads missing external #{e}")));
                    }
                    _ => {}
                }
            }
            let key = self.operation_key(o);
            for (slot, v) in self.op_outputs(o).enumerate() {
                if v.index() >= n_values || self.value_op[v] != Some(o) {
                    return Err(bad(format!("output {slot} of {o:?} is not defined by it")));
                }
                if key.output_key_id(slot as u8) != Some(self.value_key[v]) {
                    return Err(bad(format!("key of {v:?} is not output {slot} of {o:?}'s key")));
                }
            }
            if self.op_first_output.raw().get(o.index() + 1).is_some_and(|&next| next < first) {
                return Err(bad(format!("operations after {o:?} have earlier outputs")));
            }
        }
        // Every operation's outputs point back at it (above); no other value claims one.
        let outputs: usize = self.operations().map(|op| op.operation().output_count()).sum();
        let mut expected_inputs = Vec::new();
        for (v, d) in self.value_op.iter_enumerated() {
            if d.is_none() {
                expected_inputs.push(v);
            }
        }
        if expected_inputs.len() + outputs != n_values {
            return Err(bad("a value claims an operation that does not produce it".into()));
        }
        if expected_inputs != self.inputs || self.input_keys.len() != self.inputs.len() {
            return Err(bad("the input list does not match the input values".into()));
        }
        if let Some(v) = self.outputs.iter().find(|v| v.index() >= n_values) {
            return Err(bad(format!("output {v:?} does not exist")));
        }
        Ok(())
    }
}

impl<Op: GraphOperation> MaterializedGraph<Op> {
    /// Checks the materialized graph's invariants (see the module doc of `verify.rs`).
    pub fn verify(&self) -> GraphResult<()> {
        let bad = |message: String| GraphError::Invalid { phase: "materialized graph", message };
        let n_values = self.value_op.len();
        if self.value_key.len() != n_values
            || self.op_key.len() != self.operation_count()
            || !(self.op_role.is_empty() || self.op_role.len() == self.operation_count())
            || self.op_first_output.len() != self.operation_count()
            || self.op_inputs.len() != self.operation_count()
            || self.inputs.len() != self.input_keys.len()
            || self.externals.len() != self.external_keys.len()
        {
            return Err(bad("column lengths disagree".into()));
        }
        for op in self.operations() {
            let o = op.id();
            crate::operation::check_operation(op.operation(), op.inputs().len(), op.role())
                .map_err(|e| bad(e.to_string()))?;
            let first = self.op_first_output[o];
            if let Some(v) = op.inputs().iter().find(|&&v| v >= first) {
                return Err(bad(format!("{o:?} reads {v:?}, which is not created before it")));
            }
            if self.op_first_output.raw().get(o.index() + 1).is_some_and(|&next| next < first) {
                return Err(bad(format!("operations after {o:?} have earlier outputs")));
            }
            let key = op.key();
            for (slot, v) in op.outputs().enumerate() {
                if v.index() >= n_values || self.value_op[v] != Some(o) {
                    return Err(bad(format!("output {slot} of {o:?} is not defined by it")));
                }
                if key.output_key_id(slot as u8) != Some(self.value_key.at(v)) {
                    return Err(bad(format!("key of {v:?} is not output {slot} of {o:?}'s key")));
                }
            }
        }
        let mut seen = FxHashSet::default();
        // Inputs are the first values and external values the next ones (that is how
        // `value_op` names them), and every other value is an output of its operation.
        let leaves = self.inputs.len() + self.externals.len();
        if leaves > n_values {
            return Err(bad(format!("{leaves} inputs and external values, but {n_values} values")));
        }
        for (v, d) in self.value_op.iter_enumerated() {
            if !seen.insert(self.value_key.at(v)) {
                return Err(bad(format!("{v:?} duplicates the key {:?}", self.value_key.at(v))));
            }
            match *d {
                None if v.index() >= leaves => {
                    return Err(bad(format!("{v:?} is neither an input, an external value nor an output")));
                }
                Some(_) if v.index() < leaves => {
                    return Err(bad(format!("input or external value {v:?} is an output")));
                }
                Some(o) if o.index() >= self.operation_count() || !self.op_outputs(o).any(|w| w == v) => {
                    return Err(bad(format!("{v:?} is not an output of {o:?}")));
                }
                _ => {}
            }
        }
        let inputs: Vec<ValueId> = (0..self.inputs.len()).map(ValueId::new).collect();
        let externals: Vec<ValueId> = (self.inputs.len()..leaves).map(ValueId::new).collect();
        if inputs != self.inputs || externals != self.externals {
            return Err(bad("the input or external list does not match the input and external values".into()));
        }
        for (&v, k) in self.externals.iter().zip(&self.external_keys) {
            let ValueKey::Derived { operation, output_slot } = k else {
                return Err(bad(format!("external key {k:?} is an input key")));
            };
            if self.interner.derived_key_id(operation, *output_slot, k).ok() != Some(self.value_key.at(v)) {
                return Err(bad(format!("external key {k:?} is not the key of {v:?}")));
            }
        }
        if self.externals.windows(2).any(|w| self.value_key.at(w[0]) >= self.value_key.at(w[1])) {
            return Err(bad("external values are not in increasing key order".into()));
        }
        if let Some(v) = self.outputs.iter().find(|v| v.index() >= n_values) {
            return Err(bad(format!("output {v:?} does not exist")));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operation::{EvaluableGraphOperation, Outputs};
    use crate::program::Run;
    use crate::{GraphBuilder, KeyInterner, OperationRole, ValueRef, compile, materialize_merge, resolve};
    use proptest::prelude::*;

    /// The program checks as they were written before `check_program` went run by run
    /// (every instruction against its operation, then the runs in a second pass): the
    /// reference the one-pass checker must agree with.
    fn check_program_reference<Op: GraphOperation>(program: &Program<Op>) -> Checked {
        let slots = &program.slots;
        let mut written: IdVec<SlotId, bool> = IdVec::from_elem(false, slots.slot_count);
        for &slot in slots.input_slots.iter().flatten() {
            let Some(w) = written.get_mut(slot) else {
                return Err(Fault::InputSlotOutOfRange { slot });
            };
            *w = true;
        }
        if program.ops.len() != program.instrs.len() {
            return Err(Fault::OperationCount { ops: program.ops.len(), instrs: program.instrs.len() });
        }
        for (k, (op, &word)) in program.ops.raw().iter().zip(program.instrs.raw()).enumerate() {
            check_instruction(k, op, word, &slots.args, &mut written)?;
        }
        if let Some(&slot) = slots.output_slots.iter().find(|&&s| written.get(s) != Some(&true)) {
            return Err(Fault::OutputNeverWritten { slot });
        }
        check_runs_reference(&program.runs, &program.run_ops, program.ops.raw(), program.instrs.raw())?;
        check_output_moves(slots)
    }

    fn check_runs_reference<Op: PartialEq>(runs: &[Run], run_ops: &[Op], ops: &[Op], instrs: &[Instr]) -> Checked {
        let mut i = 0usize;
        let mut uniform = 0usize;
        for (r, run) in runs.iter().enumerate() {
            let end = run.end as usize;
            if end <= i || end > instrs.len() {
                return Err(Fault::RunEnd { run: r, end, after: i });
            }
            if run.start as usize != instrs[i].start() {
                return Err(Fault::RunStart { run: r });
            }
            if run.arity != 0 {
                let k = run.arity as usize;
                let base = instrs[i].start();
                let Some(op) = run_ops.get(uniform) else {
                    return Err(Fault::RunWithoutOperation { run: r });
                };
                uniform += 1;
                for j in i..end {
                    let ins = instrs[j];
                    if ins.n_in() != k || ins.n_out() != 1 || ops[j] != *op || ins.start() != base + (j - i) * (k + 1) {
                        return Err(Fault::NotInRun { instr: InstrId::new(j), run: r });
                    }
                }
            }
            i = end;
        }
        if i != instrs.len() {
            return Err(Fault::RunsCover { covered: i, instrs: instrs.len() });
        }
        if uniform != run_ops.len() {
            return Err(Fault::RunOperations { run_ops: run_ops.len(), uniform });
        }
        Ok(())
    }

    /// One- and two-operand operations with a payload, and a two-output one.
    #[derive(Clone, Debug, Hash, PartialEq, Eq)]
    enum Toy {
        Mix(u8),
        Inc(u8),
        Split,
    }

    impl GraphOperation for Toy {
        type Operand = u64;
        type Context = ();
        type InputKey = u32;
        fn input_count(&self) -> usize {
            if let Toy::Mix(_) = self { 2 } else { 1 }
        }
        fn output_count(&self) -> usize {
            if let Toy::Split = self { 2 } else { 1 }
        }
    }

    impl EvaluableGraphOperation for Toy {
        fn eval_into(&self, _: &mut (), inputs: &[&u64], out: &mut Outputs<'_, u64>) {
            out.push(*inputs[0]);
            if let Toy::Split = self {
                out.push(*inputs[0]);
            }
        }
    }

    /// A compiled program over `ops` operations drawn from `seed`: runs of equal
    /// operations of both arities, broken by other payloads and two-output operations.
    fn program(seed: u64, n_ops: usize) -> Program<Toy> {
        let mut b = GraphBuilder::<Toy>::with_interner(KeyInterner::new());
        let mut values = vec![b.add_input(0), b.add_input(1)];
        let mut s = seed | 1;
        for i in 0..n_ops {
            s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            let n = values.len();
            let (a, c) = ((s >> 33) as usize % n, (s >> 13) as usize % n);
            let group = (i / (1 + (s >> 60) as usize % 4)) as u8;
            let op = match group % 5 {
                0 | 3 => Toy::Mix(group % 3),
                1 | 4 => Toy::Inc(group % 2),
                _ => Toy::Split,
            };
            let refs: Vec<_> = if let Toy::Mix(_) = op { vec![a, c] } else { vec![a] }
                .into_iter()
                .map(|k| ValueRef::Local(values[k]))
                .collect();
            values.extend(b.add_operation(op, refs, OperationRole::Primary));
        }
        let outputs: Vec<_> = values[values.len() - 3..].to_vec();
        b.set_outputs(outputs.clone());
        let g = std::sync::Arc::new(b.build());
        let keys: Vec<_> = outputs.iter().map(|&v| g.global_key(v)).collect();
        compile(&materialize_merge(&resolve(vec![g]), &keys)).code().program().clone()
    }

    /// Changes one field of `p`, chosen by `what` and placed by `at` and `to`.
    fn mutate(p: &mut Program<Toy>, what: u8, at: usize, to: usize) {
        let pick = |len: usize| if len == 0 { None } else { Some(at % len) };
        match what % 9 {
            0 => {
                if let Some(k) = pick(p.slots.args.len()) {
                    p.slots.args[k] = SlotId::new(to % (p.slots.slot_count + 2));
                }
            }
            1 => {
                if let Some(k) = pick(p.instrs.len()) {
                    let w = p.instrs.raw()[k];
                    let (start, n_in, n_out) = (w.start() as u32, w.n_in() as u16, w.n_out() as u16);
                    p.instrs.raw_mut()[k] = match to % 4 {
                        0 => Instr::new(start + 1, n_in, n_out),
                        1 => Instr::new(start.saturating_sub(1), n_in, n_out),
                        2 => Instr::new(start, n_in ^ 1, n_out),
                        _ => Instr::new(start, n_in, n_out + 1),
                    };
                }
            }
            2 => {
                if let Some(k) = pick(p.ops.len()) {
                    p.ops.raw_mut()[k] = [Toy::Mix(0), Toy::Mix(1), Toy::Inc(0), Toy::Split][to % 4].clone();
                }
            }
            3 => {
                if let Some(k) = pick(p.runs.len()) {
                    let r = &mut p.runs[k];
                    match to % 4 {
                        0 => r.end += 1,
                        1 => r.end = r.end.saturating_sub(1),
                        // Up to arity 3, which only the checker's general loop takes.
                        2 => r.arity = (r.arity + 1) % 4,
                        _ => r.start = r.start.wrapping_add(1),
                    }
                }
            }
            4 => {
                if let Some(k) = pick(p.run_ops.len()) {
                    if to % 2 == 0 {
                        p.run_ops.remove(k);
                    } else {
                        p.run_ops[k] = Toy::Inc(7);
                    }
                }
            }
            5 => {
                if let Some(k) = pick(p.slots.input_slots.len()) {
                    p.slots.input_slots[k] = Some(SlotId::new(to % (p.slots.slot_count + 2)));
                }
            }
            6 => {
                if let Some(k) = pick(p.slots.output_slots.len()) {
                    p.slots.output_slots[k] = SlotId::new(to % (p.slots.slot_count + 2));
                }
            }
            7 => {
                if let Some(k) = pick(p.runs.len()) {
                    p.runs.remove(k);
                }
            }
            _ => p.slots.slot_count = p.slots.slot_count.saturating_sub(to % 3),
        }
    }

    proptest! {
        /// The one-pass checker accepts exactly what the two-pass reference accepts:
        /// compiled programs as they are, and after up to three random changes.
        #[test]
        fn one_pass_program_check_agrees_with_the_reference(
            seed in any::<u64>(),
            n_ops in 1usize..120,
            changes in proptest::collection::vec((any::<u8>(), any::<usize>(), any::<usize>()), 0..4),
        ) {
            let mut p = program(seed, n_ops);
            prop_assert_eq!(check_program(&p), Ok(()));
            for (what, at, to) in changes {
                mutate(&mut p, what, at, to);
            }
            let (got, want) = (check_program(&p), check_program_reference(&p));
            prop_assert_eq!(got.is_ok(), want.is_ok(), "one pass {:?}, reference {:?}", got, want);
        }
    }
}
