//! The slot program's encoding, shared by [`compile`](crate::compile)'s program and the
//! parallel schedule (`schedule.rs`): packed instruction words over an argument pool of
//! [`SlotId`]s, the input slots (`None` for an input no instruction reads), and which
//! output reads move their value out. It also cuts the instructions into [`Run`]s for the
//! sequential evaluator: stretches of equal one-output operations that one loop evaluates
//! with a fixed stride.
//!
//! Invariants: an [`Instr`] names `n_in` operand slots followed by `n_out` output slots,
//! contiguous in its pool from `start`; the output move flags mark exactly the last
//! mention of each output slot; the runs cover the instructions in order, and a uniform
//! run's instructions have its arity, one output, equal operations and their arguments
//! one after another. This module states them and builds data that keeps them; the
//! checks are `verify.rs`'s, whose `verify_program` is the only maker of the
//! `VerifiedProgram` the evaluators take. Nothing here allocates slots or orders
//! instructions: that is `compile.rs` and `schedule.rs`.

use std::fmt;

use crate::hugepages::{push_grown, trim};
use crate::id::{IdVec, InstrId, SlotId};
use crate::operation::GraphOperation;

/// The slots of a program: the argument pool its instructions index (operand slots then
/// output slots, per [`Instr`]), the slot of each input and of each output, which output
/// reads move their value out, and the number of slots. The sequential program and the
/// parallel schedule each have one, in the same layout.
#[derive(Clone, Debug, Default)]
pub(crate) struct SlotProgram {
    pub(crate) args: Vec<SlotId>,
    /// The slot of each input, `None` for an input that no instruction reads.
    pub(crate) input_slots: Vec<Option<SlotId>>,
    pub(crate) output_slots: Vec<SlotId>,
    /// Whether output `i` may move its value out of the slot (last mention of that slot).
    pub(crate) output_move: Vec<bool>,
    pub(crate) slot_count: usize,
}

impl SlotProgram {
    /// Whether `s` is below [`Self::slot_count`].
    #[inline]
    pub(crate) fn in_range(&self, s: SlotId) -> bool {
        s.index() < self.slot_count
    }
}

/// A sequential slot program: per instruction its operation and its packed argument range,
/// the runs the sequential evaluator goes by, and the slots. [`compile`](crate::compile)
/// builds one; only `verify::verify_program` turns it into a `VerifiedProgram`, which is
/// what evaluation reads.
#[derive(Clone, Debug)]
pub(crate) struct Program<Op> {
    pub(crate) ops: IdVec<InstrId, Op>,
    pub(crate) instrs: IdVec<InstrId, Instr>,
    /// The instructions cut into runs for the sequential evaluator ([`Run`]).
    pub(crate) runs: Vec<Run>,
    /// The operation of each uniform run, in order ([`RunCutter`]).
    pub(crate) run_ops: Vec<Op>,
    /// Operand and output slots of every instruction, of the inputs and of the outputs.
    pub(crate) slots: SlotProgram,
}

impl<Op: GraphOperation> Program<Op> {
    /// Each instruction's [`cost_hint`](GraphOperation::cost_hint), the input of both
    /// parallel plans (`schedule.rs`, `dataflow.rs`).
    pub(crate) fn cost_hints(&self) -> Vec<u64> {
        self.ops.raw().iter().map(GraphOperation::cost_hint).collect()
    }
}

/// Where an instruction's slot arguments sit in the argument pool: `n_in` input slots
/// followed by `n_out` output slots, starting at `start`.
///
/// Packed in one `u64` (`start` in the low 32 bits, then `n_in`, then `n_out`, 16 bits
/// each) so that the evaluation loop reads an instruction with one load: the sequential
/// loop is bound by loads, and three field loads per instruction cost it about 10%.
#[derive(Copy, Clone, PartialEq, Eq)]
pub(crate) struct Instr(u64);

impl Instr {
    #[inline]
    pub(crate) fn new(start: u32, n_in: u16, n_out: u16) -> Instr {
        Instr(start as u64 | (n_in as u64) << 32 | (n_out as u64) << 48)
    }

    /// Index of the first operand slot in the argument pool.
    #[inline(always)]
    pub(crate) fn start(self) -> usize {
        self.0 as u32 as usize
    }

    /// Number of operand slots.
    #[inline(always)]
    pub(crate) fn n_in(self) -> usize {
        (self.0 >> 32) as u16 as usize
    }

    /// Number of output slots.
    #[inline(always)]
    pub(crate) fn n_out(self) -> usize {
        (self.0 >> 48) as usize
    }

    /// One past the last argument (operands and outputs) in the argument pool.
    #[inline]
    pub(crate) fn end(self) -> usize {
        self.start() + self.n_in() + self.n_out()
    }

    /// The instruction's operand and output slots in `args` (the program's pool, or a
    /// schedule's, which has the same layout).
    ///
    /// # Panics
    /// If the range runs past `args`.
    #[inline]
    pub(crate) fn slots<T>(self, args: &[T]) -> (&[T], &[T]) {
        let (start, mid) = (self.start(), self.start() + self.n_in());
        (&args[start..mid], &args[mid..mid + self.n_out()])
    }

    /// [`Self::slots`] without bounds checks, for the evaluators' loops.
    ///
    /// # Safety
    /// The range lies in `args`: `verify::verify_program` checks it for the program's pool,
    /// `verify::verify_schedule` for a schedule's.
    #[inline(always)]
    pub(crate) unsafe fn slots_unchecked(self, args: &[SlotId]) -> (&[SlotId], &[SlotId]) {
        let (start, mid) = (self.start(), self.start() + self.n_in());
        // SAFETY: in range, by the caller's guarantee.
        unsafe { (args.get_unchecked(start..mid), args.get_unchecked(mid..mid + self.n_out())) }
    }
}

impl fmt::Debug for Instr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Instr")
            .field("start", &self.start())
            .field("n_in", &self.n_in())
            .field("n_out", &self.n_out())
            .finish()
    }
}

/// Per output, whether it is its slot's last mention, so that taking the outputs may move
/// that value out (the earlier mentions clone it). The slots seen are a flag per slot up
/// to the largest output slot, not a hash set: every unread value of a random DAG is an
/// output, so there may be as many outputs as slots, and a hash of each cost more than
/// the rest of compile's tail.
pub(crate) fn output_moves(output_slots: &[SlotId]) -> Vec<bool> {
    let slots = output_slots.iter().map(|s| s.index() + 1).max().unwrap_or(0);
    let mut seen = vec![false; slots];
    let mut output_move = vec![false; output_slots.len()];
    for (i, s) in output_slots.iter().enumerate().rev() {
        output_move[i] = !std::mem::replace(&mut seen[s.index()], true);
    }
    output_move
}

/// Consecutive instructions that the sequential evaluator runs with one loop: either a
/// *uniform* run, whose instructions all evaluate the same operation (equal by `Eq`) with
/// one output and `arity` operands (1 or 2), or a *mixed* run (`arity` 0) of any
/// instructions, each evaluated on its own.
///
/// A uniform run's instructions have their arguments one after another in the pool
/// (`arity` operand slots then the output slot, per instruction), from the run's first
/// instruction's `start`: the evaluator walks that stretch of the pool with a stride of
/// `arity + 1`, without reading the instruction words, and hands every instruction the
/// same operation reference. With the operation fixed for the whole loop, the branch that
/// selects the operation's code (the `match` of `eval_into`) has one target in the loop;
/// the compiler may hoist it out.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    /// One past the run's last instruction.
    pub(crate) end: u32,
    /// Where the run's first instruction's arguments start in the pool (so that the
    /// evaluator does not read the instruction words of a uniform run at all).
    pub(crate) start: u32,
    /// Operands per instruction of a uniform run, or 0 for a mixed run.
    pub(crate) arity: u8,
}

/// Uniform runs shorter than this are folded into mixed runs where dispatch moved the
/// instructions (a sorted order): the run loop's set-up costs about what one instruction
/// of the per-instruction loop does. Where it kept the order, [`MIN_UNIFORM_RUN_KEPT_ORDER`].
pub(crate) const MIN_UNIFORM_RUN: usize = 2;

/// [`MIN_UNIFORM_RUN`] for instructions in the materialized order, which dispatch kept (a
/// chain of random variants): there a group of two equal operations is as common as not,
/// and its run loop, a call of its own, cost evaluation more than the mixed loop's two
/// dispatches; each run also costs the cut and the verifier a branch on its kind that
/// nothing predicts. In a sorted order (a layered DAG's) runs of two are evaluated faster
/// as runs.
pub(crate) const MIN_UNIFORM_RUN_KEPT_ORDER: usize = 3;

/// Cuts instructions into [`Run`]s as compile emits them (one entry each in `ops` and in
/// the instruction column, arguments laid out in order in the pool), and keeps with them
/// the operation of each uniform run, in order: the evaluator reads those from this short
/// column, one after another, rather than from the instructions' column at every run's
/// start (a cache miss per run when operations are large). Fed during compile's slot
/// pass rather than over the finished columns, which it would read once more.
/// `O(instructions)` operation comparisons.
///
/// The open group and the last run's kind live in plain fields, which the slot pass keeps
/// in registers once `push` is inlined into it. On a chain of random variants groups of
/// equal operations end at random, about every other instruction: whether a group ends is
/// one branch, and what its end does (whether a short group joins the mixed run before
/// it, whether a uniform run's operation is kept) is written without a branch, since
/// either way is as good as random there.
pub(crate) struct RunCutter<Op> {
    runs: Vec<Run>,
    run_ops: Vec<Op>,
    /// The instructions not yet in `runs` are `first..`: a candidate uniform run (`arity`
    /// nonzero) or a single instruction (`arity` 0) whose first argument is `start`. No
    /// instruction is open before the first push.
    first: usize,
    start: u32,
    arity: u8,
    /// The last run's arity and start (a mixed run's arity is 0; 1 before any run, so that
    /// the first one joins nothing).
    last_arity: u8,
    last_start: u32,
    /// Groups shorter than this are mixed: [`MIN_UNIFORM_RUN`] for a moved order,
    /// [`MIN_UNIFORM_RUN_KEPT_ORDER`] for a kept one.
    min_run: usize,
}

impl<Op: PartialEq + Clone> RunCutter<Op> {
    /// A cutter whose uniform runs are at least `min_run` instructions long (at least 1).
    pub(crate) fn new(min_run: usize) -> Self {
        let min_run = min_run.max(1);
        RunCutter {
            runs: Vec::new(),
            run_ops: Vec::new(),
            first: 0,
            start: 0,
            arity: 0,
            last_arity: 1,
            last_start: 0,
            min_run,
        }
    }

    /// Adds instruction `i` (the next one), whose operation is `ops[i]`.
    ///
    /// # Panics
    /// If `i` or an earlier instruction is out of `ops`.
    #[inline(always)]
    pub(crate) fn push(&mut self, ops: &[Op], i: usize, instr: Instr) {
        let n_in = instr.n_in();
        let arity = if matches!(n_in, 1 | 2) && instr.n_out() == 1 { n_in as u8 } else { 0 };
        // Operations without a drop are taken as cheap to compare: the three conditions
        // as one, a single branch (short-circuited, the arity test was mispredicted as
        // often as the operations' on a chain of random variants). Others (tensor
        // operations) are compared only when the arities agree, as they always were.
        let same = if std::mem::needs_drop::<Op>() {
            self.arity != 0 && arity == self.arity && ops[i] == ops[self.first]
        } else {
            (self.arity != 0) & (arity == self.arity) & (ops[i] == ops[self.first])
        };
        if same {
            return;
        }
        if i > 0 {
            self.close(ops, i);
        }
        (self.first, self.start, self.arity) = (i, instr.start() as u32, arity);
    }

    /// Ends the open instructions at `end` (exclusive).
    #[inline(always)]
    fn close(&mut self, ops: &[Op], end: usize) {
        let short = end - self.first < self.min_run;
        // Selects as arithmetic (the crate's MSRV predates `select_unpredictable`): a
        // plain `if` may be compiled as a branch, mispredicted here as often as not.
        let arity = self.arity * u8::from(!short);
        // Mixed instructions join the mixed run before them: that run is replaced by one
        // from its start to `end`.
        let join = (arity == 0) & (self.last_arity == 0);
        let start = self.start ^ ((self.start ^ self.last_start) & 0u32.wrapping_sub(u32::from(join)));
        self.runs.truncate(self.runs.len() - usize::from(join));
        // Grown in advised memory (`push_grown`): a graph whose operations vary a lot (a
        // chain of random variants) has a run every few instructions, and these columns
        // grown by `realloc` faulted most of their pages one at a time.
        push_grown(&mut self.runs, Run { end: end as u32, start, arity });
        (self.last_arity, self.last_start) = (arity, start);
        if std::mem::needs_drop::<Op>() {
            if arity != 0 {
                push_grown(&mut self.run_ops, ops[self.first].clone());
            }
        } else {
            // Kept by the length: a copy past it is only overwritten later (no drop).
            let n = self.run_ops.len();
            push_grown(&mut self.run_ops, ops[self.first].clone());
            self.run_ops.truncate(n + usize::from(arity != 0));
        }
    }

    /// The runs of `ops.len()` instructions, every one pushed, and each uniform run's
    /// operation.
    pub(crate) fn finish(mut self, ops: &[Op]) -> (Vec<Run>, Vec<Op>) {
        if !ops.is_empty() {
            self.close(ops, ops.len());
        }
        (trim(self.runs), trim(self.run_ops))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The cut written over the finished columns, as compile made it before cutting as it
    /// emits: the reference for [`RunCutter`].
    fn runs_of<T: PartialEq + Clone>(ops: &[T], instrs: &[Instr], min_run: usize) -> (Vec<Run>, Vec<T>) {
        let uniform_arity = |i: usize| match (instrs[i].n_in(), instrs[i].n_out()) {
            (n @ (1 | 2), 1) => n as u8,
            _ => 0,
        };
        let (mut runs, mut run_ops): (Vec<Run>, Vec<T>) = (Vec::new(), Vec::new());
        let mut i = 0;
        while i < ops.len() {
            let arity = uniform_arity(i);
            let mut end = i + 1;
            while arity != 0 && end < ops.len() && uniform_arity(end) == arity && ops[end] == ops[i] {
                end += 1;
            }
            let arity = if end - i >= min_run { arity } else { 0 };
            match runs.last_mut() {
                Some(last) if arity == 0 && last.arity == 0 => last.end = end as u32,
                _ => {
                    runs.push(Run { end: end as u32, start: instrs[i].start() as u32, arity });
                    if arity != 0 {
                        run_ops.push(ops[i].clone());
                    }
                }
            }
            i = end;
        }
        (runs, run_ops)
    }

    /// Cuts `ops` (with the words of `shapes`' arities) as compile does and by
    /// [`runs_of`].
    fn both_cuts<T: PartialEq + Clone + std::fmt::Debug>(
        ops: &[T],
        shapes: &[(u8, u16, u16)],
        min_run: usize,
    ) -> [(Vec<Run>, Vec<T>); 2] {
        let mut instrs = Vec::new();
        let mut start = 0u32;
        for &(_, n_in, n_out) in shapes {
            instrs.push(Instr::new(start, n_in, n_out));
            start += u32::from(n_in + n_out);
        }
        let mut cutter = RunCutter::new(min_run);
        for (i, &instr) in instrs.iter().enumerate() {
            cutter.push(ops, i, instr);
        }
        [cutter.finish(ops), runs_of(ops, &instrs, min_run)]
    }

    proptest! {
        /// The flags are those of a hash set of the slots seen from the end (the form
        /// before the flag column), with slots repeated among the outputs.
        #[test]
        fn output_moves_mark_each_slots_last_mention(slots in proptest::collection::vec(0usize..40, 0..60)) {
            let output_slots: Vec<SlotId> = slots.iter().map(|&s| SlotId::new(s)).collect();
            let mut seen = std::collections::HashSet::new();
            let mut expected = vec![false; slots.len()];
            for (i, s) in slots.iter().enumerate().rev() {
                expected[i] = seen.insert(*s);
            }
            prop_assert_eq!(output_moves(&output_slots), expected);
        }
    }

    proptest! {
        /// Operations without a drop (the cut without a branch on how a group ends) and
        /// with one (`String`s, the branching form), over groups of every length, with
        /// either shortest uniform run and others.
        #[test]
        fn cutting_as_compile_emits_gives_the_runs_of_the_whole_columns(
            shapes in proptest::collection::vec((0u8..3, 0u16..4, 1u16..3), 0..200),
            min_run in prop_oneof![Just(MIN_UNIFORM_RUN), Just(MIN_UNIFORM_RUN_KEPT_ORDER), 1usize..5],
        ) {
            let ops: Vec<u8> = shapes.iter().map(|s| s.0).collect();
            let [cut, reference] = both_cuts(&ops, &shapes, min_run);
            prop_assert_eq!(cut, reference);
            let ops: Vec<String> = shapes.iter().map(|s| s.0.to_string()).collect();
            let [cut, reference] = both_cuts(&ops, &shapes, min_run);
            prop_assert_eq!(cut, reference);
        }
    }
}
