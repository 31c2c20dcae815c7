//! Evaluation of a [`CompiledProgram`](crate::CompiledProgram), sequential or level-parallel.
//!
//! Input: a program and one operand per input, in [`CompiledProgram::input_keys`](crate::CompiledProgram::input_keys) order,
//! then one per external value, in [`CompiledProgram::external_keys`](crate::CompiledProgram::external_keys) order (a program
//! compiled from a fragment materialized alone). Output: one operand per output. Slots live
//! in an [`EvalState`] that can be kept and reused across runs, so repeated evaluation
//! allocates only its result vector ([`CompiledProgram::eval_with_each`](crate::CompiledProgram::eval_with_each) not even that).
//! Operands are gathered on the stack (no per-node allocation for up to two inputs, a
//! `SmallVec` of eight beyond); [`EvaluableGraphOperation::eval_into`] pushes a one-output
//! instruction's value into an [`Outputs`] over a local (which the compiler keeps in a
//! register), and the others' into the spare room of one reused buffer. The sequential loop
//! reads slots and argument lists without bounds or tag checks (`VerifiedSlots`):
//! `try_compile` verifies every program, in every build, so the checks would repeat what
//! is proven (see `docs/adr/0006-verified-sequential-eval.md`). That proof is carried by a
//! type: the loop is a method of `VerifiedProgram` (`program.rs`), which only
//! `Program::verify` makes and which hands out no `&mut`, and `VerifiedSlots` is made only
//! from one; likewise the parallel chunks take a `VerifiedSchedule` (`schedule.rs`), and
//! `LevelSlots` is made only from one. Slots are [`SlotId`]s and instructions
//! [`InstrId`]s. The loop goes run by run
//! (`program.rs`'s `Run`): a *uniform* run (equal operations, one output, one or two
//! operands each) is one out-of-line loop, `run_uniform`, that receives the operation as
//! an argument, walks the run's stretch of the argument pool with a fixed stride and
//! never reads the instruction words. The compiler knows no slot write changes a
//! function argument, so it loads the operation's variant once per run and can take the
//! `match` of an inlined `eval_into` out of the loop. Mixed runs go instruction by
//! instruction: the hot path (one output, one or two operands) inline, reading an
//! instruction with one load (`Instr` is packed in a `u64`), everything else out of line
//! (`eval_instruction_general`). When compile found the operands far from their readers
//! in a large slot file, the loop instead goes instruction by instruction throughout and
//! prefetches the operand slots of the instruction [`SLOT_AHEAD`] places ahead.
//! Complexity: `O(instructions + operands)`.
//!
//! Programs whose mean cost hint per instruction reaches
//! [`DATAFLOW_MIN_MEAN_COST`](crate::DATAFLOW_MIN_MEAN_COST) are evaluated in parallel by
//! dependency instead (`dataflow.rs`, ADR 0015); what follows is the level evaluator.
//!
//! Parallel evaluation ([`CompiledProgram::eval_parallel`](crate::CompiledProgram::eval_parallel)) runs the level schedule of
//! `schedule.rs` with its own slots, entering the rayon pool once per run, when the
//! schedule's estimate says that beats the sequential evaluator (`SplitLevels::worth_parallel`;
//! otherwise it is the sequential evaluator, except where the levels are heavy enough to
//! time both: then the [`EvalState`] runs whichever its calls measured faster, `probe.rs`). A level with
//! one instruction, or whose summed [`cost_hint`](crate::GraphOperation::cost_hint) is
//! below [`PAR_LEVEL_MIN_COST`](crate::PAR_LEVEL_MIN_COST), runs on the calling thread,
//! in place. A larger one is cut into chunks of about equal cost (at least
//! [`PAR_CHUNK_MIN_COST`] each, at most four per thread; an expensive instruction can be
//! a chunk by itself, so heavy operations fork even in a level of two). The calling thread
//! and helpers spawned once per run claim the chunks of one level at a time (`Team`: an epoch per split level, an atomic claim
//! counter, spinning rather than sleeping between levels). A chunk streams the
//! schedule's compact steps (16 bytes per instruction in level order, see `schedule.rs`
//! and ADR 0007), prefetching operand slots ahead. The chunks read their
//! operands from the shared slots and write their outputs straight into their own slots,
//! concurrently, through `LevelSlots`, a raw-pointer view of the slot vector for the
//! duration of the run. This is the parallel evaluator's only `unsafe`, and it is sound by the
//! schedule's level invariant (`schedule.rs`, checked whenever a schedule is built) and
//! the team's rule that only one level runs at a time:
//!
//! **within a level, a written slot is written by exactly one instruction output and read
//! by no instruction, and every slot is in range,** so no slot is touched by two threads
//! unless both only read it. Results are bit-identical to sequential evaluation: every
//! instruction runs once on the same operands, with its own operation or one equal to it
//! (equal operations compute the same thing: `GraphOperation`'s contract). See `docs/adr/0005-parallel-slot-writes.md`.

use std::mem::MaybeUninit;
use std::time::Instant;

use smallvec::SmallVec;

use rayon::ThreadPool;

use crate::compiled::CompiledProgram;
use crate::dataflow;
use crate::error::{GraphError, GraphResult};
use crate::id::{InstrId, SlotId};
use crate::operation::{EvaluableGraphOperation, Label, Outputs};
use crate::probe::{Mode, ParChoice, ParProbe};
use crate::schedule::{PAR_CHUNK_MIN_COST, Step};
use crate::slots::{SlotFile, SlotPtr};
use crate::team::{StopOnDrop, Team};
use crate::verify::{VerifiedProgram, VerifiedSchedule};

/// At most this many chunks per thread in one level: more than one, so that a thread
/// slowed down by other work on the machine is balanced by the others claiming more.
/// (On `layered_wide` at 10^7, 1 or 2 per thread measured 3-5% faster than 4 in one
/// interleaved run, within this machine's noise; `matmul_layered`, whose operations
/// cost 10 µs each, needs the balance.)
const PAR_CHUNKS_PER_THREAD: usize = 4;

/// A parallel chunk prefetches the first and last operand slots of the instruction this
/// many places ahead. A level reads values that the other threads wrote in earlier
/// levels, so its operand reads miss into another core's cache; the hints overlap those
/// misses. On the project machine the hints matter most when the two cores are far apart
/// (a cache line round trip of 400 ns rather than 100): `layered_wide` at 10^7 on two
/// threads took 20 ms with them and 37 ms without (16 ahead: 24 ms, 64 ahead: 20 ms),
/// and about the same with or without when the cores are close. The sequential
/// evaluator prefetches only when compile says so ([`SLOT_AHEAD`]).
const PAR_PREFETCH_AHEAD: usize = 32;

/// Reusable evaluation scratch: the slot vector and the output buffer.
///
/// Keep one per thread and pass it to [`CompiledProgram::eval_with`](crate::CompiledProgram::eval_with) (or
/// `eval_parallel_with`): repeated evaluations then allocate only their result vector.
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{compile, materialize_merge, resolve, EvalState, GraphBuilder, OperationRole::Primary, ValueRef::Local};
/// use scalar::{ScalarKey, ScalarOp};
///
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// let y = b.add_operation(ScalarOp::Neg, vec![Local(x)], Primary)[0];
/// let g = Arc::new(b.build());
/// let program = compile(&materialize_merge(&resolve(vec![g.clone()]), &[g.global_key(y)]));
///
/// let mut state = EvalState::new();
/// let total: f64 = (0..100).map(|i| program.eval_with(&mut state, &mut (), &[&(i as f64)]).unwrap()[0]).sum();
/// assert_eq!(total, -4950.0);
/// ```
pub struct EvalState<T> {
    pub(crate) slots: SlotFile<T>,
    out: Vec<T>,
    /// Which evaluator parallel evaluation runs, for programs whose estimate cannot tell
    /// (`probe.rs`).
    probe: ParProbe,
}

impl<T> Default for EvalState<T> {
    fn default() -> Self {
        EvalState { slots: SlotFile::default(), out: Vec::new(), probe: ParProbe::default() }
    }
}

impl<T> EvalState<T> {
    /// An empty state.
    pub fn new() -> Self {
        Self::default()
    }
    /// Drops held values, keeping the allocations.
    pub fn clear(&mut self) {
        self.slots.clear();
        self.out.clear();
    }
}

impl<Op: EvaluableGraphOperation> CompiledProgram<Op> {
    /// Evaluates the program on `inputs`, one per program input, in the order of
    /// [`Self::input_keys`] (the same as the materialized graph's
    /// [`input_keys`](crate::MaterializedGraph::input_keys)). That order is the order in
    /// which the inputs' keys were first interned, which is not always the order in which
    /// a graph added them: bind by key ([`Self::bind_inputs`], [`Self::try_eval_by_key`])
    /// rather than by position when in doubt.
    ///
    /// # Panics
    /// On a wrong number of inputs or an operation that returns the wrong number of
    /// outputs; see [`Self::try_eval`].
    pub fn eval(&self, ctx: &mut Op::Context, inputs: &[&Op::Operand]) -> Vec<Op::Operand> {
        self.try_eval(ctx, inputs).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Evaluates the program, or reports a wrong input count or a misbehaving operation.
    pub fn try_eval(&self, ctx: &mut Op::Context, inputs: &[&Op::Operand]) -> GraphResult<Vec<Op::Operand>> {
        self.eval_with(&mut EvalState::new(), ctx, inputs)
    }

    /// Evaluates the program with inputs looked up by key.
    pub fn try_eval_by_key<'a, F>(&self, ctx: &mut Op::Context, lookup: F) -> GraphResult<Vec<Op::Operand>>
    where
        F: FnMut(&Op::InputKey) -> Option<&'a Op::Operand>,
    {
        let inputs = self.bind_inputs(lookup)?;
        self.try_eval(ctx, &inputs)
    }

    /// Evaluates the program reusing `state`'s allocations.
    pub fn eval_with(
        &self,
        state: &mut EvalState<Op::Operand>,
        ctx: &mut Op::Context,
        inputs: &[&Op::Operand],
    ) -> GraphResult<Vec<Op::Operand>> {
        let mut outputs = Vec::with_capacity(self.code().program().slots.output_slots.len());
        self.eval_with_each(state, ctx, inputs, |x| outputs.push(x))?;
        Ok(outputs)
    }

    /// [`Self::eval_with`] handing each output, in order, to `each` instead of returning
    /// a vector: a caller that evaluates a small program many times and keeps its
    /// outputs in its own form allocates nothing here.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use computegraph::{compile, materialize_merge, resolve, EvalState, GraphBuilder, ValueRef::Local, OperationRole::Primary};
    /// # use scalar::{ScalarOp, ScalarKey};
    /// # let mut b = GraphBuilder::<ScalarOp>::new();
    /// # let x = b.add_input(ScalarKey::var(0));
    /// # let sc = b.add_operation(ScalarOp::SinCos, vec![Local(x)], Primary);
    /// # let g = Arc::new(b.build());
    /// # let program = compile(&materialize_merge(&resolve(vec![g.clone()]), &[g.global_key(sc[0]), g.global_key(sc[1])]));
    /// let (mut state, mut sum) = (EvalState::new(), 0.0);
    /// program.eval_with_each(&mut state, &mut (), &[&0.5], |y| sum += y).unwrap();
    /// assert_eq!(sum, 0.5f64.sin() + 0.5f64.cos());
    /// ```
    pub fn eval_with_each<F>(
        &self,
        state: &mut EvalState<Op::Operand>,
        ctx: &mut Op::Context,
        inputs: &[&Op::Operand],
        each: F,
    ) -> GraphResult<()>
    where
        F: FnMut(Op::Operand),
    {
        self.run_to_slots(state, ctx, inputs)?;
        let slots = &self.code().program().slots;
        // SAFETY: the run completed, so every output slot of the verified program holds
        // its value, and verification checked that each is moved out once, at its last
        // mention.
        unsafe { take_outputs(&mut state.slots, &slots.output_slots, &slots.output_move, each) };
        Ok(())
    }

    /// Runs the program, leaving the outputs in `state`'s slots (the part of evaluation
    /// that does not depend on what the caller does with the outputs).
    ///
    /// It only forwards, but it stays: calling `run` directly from `eval_with_each` gives
    /// the same instructions and a different placement of the evaluation loop, and
    /// `eval_arithmetic/window/ours` at 10^6 took 1.74–1.79 ms instead of 0.88–0.90 ms in
    /// the `pipeline` bench binary (ADR 0016).
    #[inline(always)]
    fn run_to_slots(
        &self,
        state: &mut EvalState<Op::Operand>,
        ctx: &mut Op::Context,
        inputs: &[&Op::Operand],
    ) -> GraphResult<()> {
        self.code().run(state, ctx, inputs, self.prefetches_operand_slots())
    }
}

impl<Op: EvaluableGraphOperation> CompiledProgram<Op>
where
    Op::Context: Clone + Send,
{
    /// Evaluates the program level by level on a rayon pool; the result is the one of
    /// [`Self::eval`].
    ///
    /// `pool` is the user's pool, or `None` for the current one (the global pool outside
    /// any pool). The pool is entered once per call. A program of costly instructions
    /// (mean cost hint at least [`DATAFLOW_MIN_MEAN_COST`](crate::DATAFLOW_MIN_MEAN_COST),
    /// see [`Self::parallel_by_dependency`]) runs by dependency: an instruction starts as
    /// soon as its operands are ready, and idle threads steal costly ones. Otherwise it
    /// runs level by level, unless the levels would not pay: with one thread, or when
    /// the estimated time of the levels (the split ones' cost shared among the threads,
    /// plus a cost per instruction for the operands crossing between cores and one per
    /// split level for its synchronisation; levels split when costly enough, see
    /// [`PAR_LEVEL_MIN_COST`](crate::PAR_LEVEL_MIN_COST)) is not at most seven eighths of
    /// the program's cost, this is the sequential evaluator. So cheap scalar operations
    /// (cost hint 1) run sequentially in one-off calls: sharing them between cores can
    /// cost more than it saves. Where their split levels are heavy (at least 2^18 cost
    /// units), a state kept across calls with [`Self::eval_parallel_with`] times both
    /// evaluators and runs the faster, re-checking the other now and then. Instructions of levels that run on the calling thread alone
    /// get `ctx`; chunks of a parallel level get a clone of `ctx` per thread (made once
    /// per thread per call, on the calling thread), and what a clone records is dropped.
    /// Operations that need one shared context should keep it behind their own lock.
    /// Between parallel levels the pool's other threads spin, then yield, rather than
    /// sleep, for the duration of the call.
    ///
    /// # Panics
    /// As [`Self::eval`]; see [`Self::try_eval_parallel`].
    ///
    /// ```
    /// use std::sync::Arc;
    /// use computegraph::{compile, materialize_merge, resolve, GraphBuilder, ValueRef::Local, OperationRole::Primary};
    /// use scalar::{ScalarOp, ScalarKey};
    ///
    /// let mut b = GraphBuilder::<ScalarOp>::new();
    /// let x = b.add_input(ScalarKey::var(0));
    /// let s = b.add_operation(ScalarOp::Sin, vec![Local(x)], Primary)[0];
    /// let c = b.add_operation(ScalarOp::Cos, vec![Local(x)], Primary)[0];
    /// let y = b.add_operation(ScalarOp::Mul, vec![Local(s), Local(c)], Primary)[0];
    /// let g = Arc::new(b.build());
    /// let program = compile(&materialize_merge(&resolve(vec![g.clone()]), &[g.global_key(y)]));
    /// assert_eq!(program.level_count(), 2);
    /// let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    /// assert_eq!(program.eval_parallel(Some(&pool), &mut (), &[&0.5]), program.eval(&mut (), &[&0.5]));
    /// ```
    pub fn eval_parallel(
        &self,
        pool: Option<&ThreadPool>,
        ctx: &mut Op::Context,
        inputs: &[&Op::Operand],
    ) -> Vec<Op::Operand> {
        self.try_eval_parallel(pool, ctx, inputs).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Evaluates the program in parallel, or reports a wrong input count or a misbehaving
    /// operation.
    pub fn try_eval_parallel(
        &self,
        pool: Option<&ThreadPool>,
        ctx: &mut Op::Context,
        inputs: &[&Op::Operand],
    ) -> GraphResult<Vec<Op::Operand>> {
        self.eval_parallel_with(pool, &mut EvalState::new(), ctx, inputs)
    }

    /// Evaluates the program in parallel reusing `state`'s allocations, and its timings of
    /// the two evaluators where the estimate cannot choose (see [`Self::eval_parallel`]).
    pub fn eval_parallel_with(
        &self,
        pool: Option<&ThreadPool>,
        state: &mut EvalState<Op::Operand>,
        ctx: &mut Op::Context,
        inputs: &[&Op::Operand],
    ) -> GraphResult<Vec<Op::Operand>> {
        let threads = pool.map_or_else(rayon::current_num_threads, ThreadPool::current_num_threads);
        if threads <= 1 || inputs.len() != self.code().program().slots.input_slots.len() {
            return self.eval_with(state, ctx, inputs);
        }
        let sched = self.schedule()?;
        if self.parallel_by_dependency() {
            // Few costly instructions: by dependency, not by level (`dataflow.rs`), in
            // cells of its own; what an earlier run left in `state` is dropped, as a
            // reset would.
            state.clear();
            let (code, plan) = (self.code(), self.dataflow_plan()?);
            return match pool {
                Some(pool) => pool.install(|| dataflow::run(code, plan, ctx, inputs)),
                None => rayon::scope(|_| dataflow::run(code, plan, ctx, inputs)),
            };
        }
        let (mode, timed) = match sched.schedule().split.choice(threads) {
            ParChoice::Sequential => (Mode::Sequential, false),
            ParChoice::Parallel => (Mode::Parallel, false),
            ParChoice::Measure => state.probe.next(std::ptr::from_ref(self) as usize),
        };
        let start = timed.then(Instant::now);
        let out = match mode {
            Mode::Sequential => self.eval_with(state, ctx, inputs),
            Mode::Parallel => match pool {
                Some(pool) => pool.install(|| self.code().run_levels(sched, threads, state, ctx, inputs)),
                None => rayon::scope(|_| self.code().run_levels(sched, threads, state, ctx, inputs)),
            },
        };
        if let (Some(start), Ok(_)) = (start, &out) {
            state.probe.record(mode, u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX));
        }
        out
    }
}

impl<Op: EvaluableGraphOperation> VerifiedProgram<Op> {
    /// Sequential evaluation: sizes the slots, stores the inputs, runs every instruction in
    /// program order through a [`VerifiedSlots`] view, leaving the outputs in the slots. With
    /// `prefetch`, instruction by instruction with operand slots hinted ahead (see
    /// [`SLOT_AHEAD`]), otherwise run by run. Everything the unchecked accesses rely on is
    /// either proven by the program's verification (the receiver's type) or done here.
    #[inline(always)]
    pub(crate) fn run(
        &self,
        state: &mut EvalState<Op::Operand>,
        ctx: &mut Op::Context,
        inputs: &[&Op::Operand],
        prefetch: bool,
    ) -> GraphResult<()> {
        let program = self.program();
        if inputs.len() != program.slots.input_slots.len() {
            return Err(GraphError::InputCountMismatch {
                expected: program.slots.input_slots.len(),
                found: inputs.len(),
            });
        }
        let EvalState { slots, out, .. } = state;
        slots.reset(program.slots.slot_count);
        for (s, &x) in program.slots.input_slots.iter().zip(inputs) {
            if let &Some(s) = s {
                slots.set(s, x.clone());
            }
        }
        let file = VerifiedSlots::new(self, slots);
        if prefetch {
            self.run_in_order::<true>(&file, ctx, out)?;
        } else {
            self.run_by_runs(&file, ctx, out)?;
        }
        Ok(())
    }

    /// Runs every instruction in program order; with `PREFETCH`, first hints the operand
    /// slots of the instruction [`SLOT_AHEAD`] places ahead (for operands that lie far
    /// from their readers, whose slots are spread over a large file). `file` is this
    /// program's view, with the inputs stored (as [`Self::run`] makes it).
    #[inline(always)]
    fn run_in_order<const PREFETCH: bool>(
        &self,
        file: &VerifiedSlots<'_, Op::Operand>,
        ctx: &mut Op::Context,
        out: &mut Vec<Op::Operand>,
    ) -> GraphResult<()> {
        let program = self.program();
        let args = &program.slots.args[..];
        let instrs = program.instrs.raw();
        for (i, (op, &instr)) in program.ops.raw().iter().zip(instrs).enumerate() {
            if PREFETCH {
                if let Some(&ahead) = instrs.get(i + SLOT_AHEAD) {
                    // SAFETY: `ahead` is an instruction of this verified program, and
                    // verification checks every instruction's argument range, so its
                    // slices lie in `args`; its slots are only used as prefetch addresses.
                    let (ins, _) = unsafe { ahead.slots_unchecked(args) };
                    for &s in ins {
                        file.0.prefetch(s);
                    }
                }
            }
            // SAFETY: the program is verified (the receiver's type), so the instruction's
            // arguments lie in the argument pool.
            let (ins, outs) = unsafe { instr.slots_unchecked(args) };
            // SAFETY: `file` is this program's view with its inputs stored, and this loop
            // runs the instructions in program order: `VerifiedSlots`' contract.
            unsafe { eval_instruction(op, ctx, file, ins, outs, out)? };
        }
        Ok(())
    }

    /// Runs every instruction in program order, run by run (`Run`, `program.rs`): a uniform
    /// run with one loop over its stretch of the argument pool and one operation
    /// reference, a mixed run instruction by instruction. `file` as for
    /// [`Self::run_in_order`].
    #[inline(always)]
    fn run_by_runs(
        &self,
        file: &VerifiedSlots<'_, Op::Operand>,
        ctx: &mut Op::Context,
        out: &mut Vec<Op::Operand>,
    ) -> GraphResult<()> {
        let program = self.program();
        let args = &program.slots.args[..];
        let (ops, instrs) = (program.ops.raw(), program.instrs.raw());
        let mut i = 0usize;
        let mut uniform = 0usize;
        for run in &program.runs {
            let end = run.end as usize;
            // What the unsafe blocks of this loop rely on: the program is verified (the
            // receiver's type), and verification checks that the runs cover the
            // instructions in order (so `i < end <= instrs.len() == ops.len()`), that every
            // instruction's arguments lie in the pool, that a uniform run's instructions
            // take `arity` operands and one output each, laid out one after another from
            // the run's start, and evaluate operations equal to the run's entry of
            // `run_ops`, which has one entry per uniform run. `file` is this program's view
            // with its inputs stored, and runs are evaluated in program order, which is
            // `VerifiedSlots`' contract.
            match run.arity {
                // SAFETY: as stated above the `match`.
                2 => unsafe {
                    let start = run.start as usize;
                    let stretch = args.get_unchecked(start..start + 3 * (end - i));
                    run_uniform::<Op, 2, 3>(program.run_ops.get_unchecked(uniform), ctx, file, stretch)?;
                    uniform += 1;
                },
                // SAFETY: as stated above the `match`.
                1 => unsafe {
                    let start = run.start as usize;
                    let stretch = args.get_unchecked(start..start + 2 * (end - i));
                    run_uniform::<Op, 1, 2>(program.run_ops.get_unchecked(uniform), ctx, file, stretch)?;
                    uniform += 1;
                },
                _ => {
                    for j in i..end {
                        // SAFETY: as stated above the `match`.
                        unsafe {
                            let op = ops.get_unchecked(j);
                            let (ins, outs) = instrs.get_unchecked(j).slots_unchecked(args);
                            eval_instruction(op, ctx, file, ins, outs, out)?;
                        }
                    }
                }
            }
            i = end;
        }
        Ok(())
    }
}

/// Evaluates a uniform run: `stretch` holds, per instruction, its `N` operand slots and
/// its output slot (`S = N + 1`), and every instruction evaluates `op`. Out of line so
/// that `op` arrives as a function argument, which the compiler knows no slot write can
/// change: the operation's variant is then loaded once and its branch can leave the loop.
/// Its code starts on a line of its own ([`align_code`]), so that the loop's place in the
/// instruction cache's lines is set by this function alone, not by the code linked before it.
///
/// # Safety
/// As `VerifiedSlots`' contract, for every instruction of `stretch`, in order.
#[inline(never)]
unsafe fn run_uniform<Op: EvaluableGraphOperation, const N: usize, const S: usize>(
    op: &Op,
    ctx: &mut Op::Context,
    file: &VerifiedSlots<'_, Op::Operand>,
    stretch: &[SlotId],
) -> GraphResult<()> {
    align_code();
    for a in stretch.chunks_exact(S) {
        // SAFETY: by the caller's guarantee.
        let refs: [&Op::Operand; N] = std::array::from_fn(|k| unsafe { file.read(a[k]) });
        let v = eval_one(op, ctx, &refs)?;
        // SAFETY: by the caller's guarantee.
        unsafe { file.write(a[N], v) };
    }
    Ok(())
}

/// Pads the machine code up to the next 64-byte boundary (the instruction cache's line),
/// with no-operations run once per call, so that the code after it lies in the same lines
/// whatever code the linker placed before the function. A tight loop's speed depends on
/// where its branches and blocks fall in those lines: `layered`'s uniform runs were
/// evaluated markedly slower once compile's code grew and moved `run_uniform` by a few
/// bytes, with the same instructions (`docs/PERFORMANCE.md`, mc47). The padding sits
/// before the loop, so the loop itself is not lengthened. Rust has no stable attribute to
/// align a function; only x86-64 is measured, so other targets are left as they are.
#[inline(always)]
fn align_code() {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: the directive only inserts no-operation instructions here; it reads and
    // writes no register, flag, stack or memory.
    unsafe {
        std::arch::asm!(".p2align 6", options(nomem, nostack, preserves_flags));
    }
}

/// How many instructions ahead sequential evaluation prefetches operand slots, when
/// compile found the operands far from their readers and the slot file large
/// ([`CompiledProgram::prefetches_operand_slots`](crate::CompiledProgram::prefetches_operand_slots)). Its operands are then spread over
/// many MiB, and each read waits on memory: a random DAG of 10^7 cheap operations (15 MiB
/// of slots) took 2.8 to 8.6 ns per node without the hints, 3.3 to 4.6 with 16
/// ahead, 3.1 to 4.2 with 32 and 3.0 to 3.4 with 64 (five runs each, `phasebench 10000000
/// uniform eval`). Otherwise its operands are mostly in its own cache and the hints would
/// only cost.
const SLOT_AHEAD: usize = 64;

impl<Op: EvaluableGraphOperation> VerifiedProgram<Op>
where
    Op::Context: Clone + Send,
{
    /// The level loop, inside the pool: the calling thread and `threads - 1` helpers
    /// spawned once for the whole run form a team (see [`Team`]).
    pub(crate) fn run_levels(
        &self,
        sched: &VerifiedSchedule,
        threads: usize,
        state: &mut EvalState<Op::Operand>,
        ctx: &mut Op::Context,
        inputs: &[&Op::Operand],
    ) -> GraphResult<Vec<Op::Operand>> {
        let EvalState { slots, out, .. } = state;
        slots.reset(sched.schedule().slots.slot_count);
        for (s, &x) in sched.schedule().slots.input_slots.iter().zip(inputs) {
            if let &Some(s) = s {
                slots.set(s, x.clone());
            }
        }
        let max_chunks = threads.saturating_mul(PAR_CHUNKS_PER_THREAD);
        let team = Team::new(max_chunks);
        let view = LevelSlots::new(sched, slots);
        let result = rayon::scope(|scope| {
            for _ in 1..threads {
                let (team, view, mut cx) = (&team, &view, ctx.clone());
                scope.spawn(move |_| self.help(sched, team, view, &mut cx));
            }
            // Whatever happens below (an error, a panic), the helpers stop.
            let _stop = StopOnDrop(&team);
            self.lead(sched, &team, &view, ctx, out, max_chunks)
        });
        result?;
        let mut outputs = Vec::with_capacity(sched.schedule().slots.output_slots.len());
        // SAFETY: every level ran, so every output slot of the schedule holds its value
        // (`check_levels` checked that one is written, and that each is moved out once,
        // at its last mention).
        unsafe {
            take_outputs(slots, &sched.schedule().slots.output_slots, &sched.schedule().slots.output_move, |x| {
                outputs.push(x)
            })
        };
        Ok(outputs)
    }

    /// The calling thread's part: runs small levels alone and publishes the large ones,
    /// taking chunks like any helper, then waits for the level's last chunk.
    fn lead(
        &self,
        sched: &VerifiedSchedule,
        team: &Team,
        view: &LevelSlots<'_, Op::Operand>,
        ctx: &mut Op::Context,
        out: &mut Vec<Op::Operand>,
        max_chunks: usize,
    ) -> GraphResult<()> {
        // Chunks of split levels get a clone of the context on every thread, this one too.
        let mut chunk_ctx: Option<Op::Context> = None;
        for l in 0..sched.schedule().level_count() {
            let range = sched.schedule().level(l);
            if !sched.schedule().is_split(&range) {
                // Alone: every helper is between levels (`team.wait_done` returned after the
                // last chunk of the previous split level), so no other thread touches a slot.
                self.eval_chunk(sched, range, ctx, view, out)?;
                continue;
            }
            // Chunk boundaries at about equal cost.
            let cost = sched.schedule().cost(&range);
            let chunks = ((cost / PAR_CHUNK_MIN_COST) as usize).clamp(2, max_chunks).min(range.len());
            let prefix = &sched.schedule().cost_prefix[range.start..range.end];
            let base = sched.schedule().cost_prefix[range.start];
            let mut prev = range.start;
            team.set_bound(0, prev);
            for c in 1..chunks {
                let target = base + (u128::from(cost) * c as u128 / chunks as u128) as u64;
                let at = range.start + prefix.partition_point(|&x| x < target);
                // Cost ties (zero-cost instructions) must not leave a chunk empty.
                prev = at.max(prev + 1).min(range.end - (chunks - c));
                team.set_bound(c, prev);
            }
            team.set_bound(chunks, range.end);
            let epoch = team.publish(chunks);
            let cx = chunk_ctx.get_or_insert_with(|| ctx.clone());
            while let Some(c) = team.claim(epoch) {
                team.run(|| self.eval_chunk(sched, team.chunk(c), cx, view, out));
            }
            team.wait_done(chunks)?;
        }
        Ok(())
    }

    /// A helper's part: waits for each published level, takes its chunks until none is
    /// left, and returns when the lead stops the team.
    fn help(&self, sched: &VerifiedSchedule, team: &Team, view: &LevelSlots<'_, Op::Operand>, ctx: &mut Op::Context) {
        let mut out = Vec::new();
        let mut seen = 0;
        while let Some(epoch) = team.wait_epoch(seen) {
            seen = epoch;
            while let Some(c) = team.claim(epoch) {
                team.run(|| self.eval_chunk(sched, team.chunk(c), ctx, view, &mut out));
            }
        }
    }

    /// Evaluates the instructions at positions `chunk` of the schedule's order, all of
    /// one level, reading their operands and writing their outputs in place through
    /// `slots`, possibly concurrently with the level's other chunks. It streams the
    /// compact steps (`schedule::Step`); a general step goes through the instruction
    /// record.
    fn eval_chunk(
        &self,
        sched: &VerifiedSchedule,
        chunk: std::ops::Range<usize>,
        ctx: &mut Op::Context,
        slots: &LevelSlots<'_, Op::Operand>,
        out: &mut Vec<Op::Operand>,
    ) -> GraphResult<()> {
        let first = chunk.start;
        let steps = &sched.schedule().steps[chunk];
        for (k, step) in steps.iter().enumerate() {
            if let Some(ahead) = steps.get(k + PAR_PREFETCH_AHEAD) {
                slots.prefetch(ahead.a);
                slots.prefetch(ahead.b);
            }
            // What the unsafe blocks below rely on: the step is at a position of the level
            // being run, in a verified schedule (`VerifiedSchedule`: `check_levels` passed
            // against this program's instructions), which checks that a compact step names
            // its instruction's slots and an entry of `op_rep` naming an instruction (below
            // `instrs.len()`, which is `ops.len()`: checked by the program's verification).
            // Every slot is in range and every operand slot was written by an input or an
            // earlier level; no instruction of the level writes an operand slot, and no
            // other instruction of the level reads or writes an output slot; no thread runs
            // another level meanwhile (see `Team`). So no thread writes the operand slots
            // while their references live, and this thread alone touches the output slot.
            if step.op == Step::GENERAL {
                let (op, ins, outs) = self.par_instr(sched, sched.schedule().order[first + k]);
                // SAFETY: as stated above.
                unsafe { eval_instruction(op, ctx, slots, ins, outs, out)? };
                continue;
            }
            // SAFETY: as stated above.
            let op = unsafe {
                let rep = *sched.schedule().op_rep.get_unchecked((step.op & !Step::UNARY) as usize);
                self.program().ops.get_unchecked(rep)
            };
            let n = 2 - (step.op >> 31) as usize;
            // SAFETY: as stated above.
            let refs = unsafe { [slots.read(step.a), slots.read(step.b)] };
            let v = eval_one(op, ctx, &refs[..n])?;
            // SAFETY: as stated above.
            unsafe { slots.write(step.out, v) };
        }
        Ok(())
    }
}

/// The slot vector during one parallel run, shared by the threads of the `Team`: the
/// chunks of a level read operand slots and write output slots in place.
///
/// It holds the exclusive borrow of the slots for its lifetime, and touches them only
/// through a [`SlotPtr`], element by element, so no reference to the whole vector exists
/// while chunks write. Soundness rests on the schedule's level invariant (`schedule.rs`,
/// checked by `Schedule::check_levels` whenever a schedule is built: within a level, a
/// written slot is written by one instruction only and read by none, and every slot is in
/// range) and on `Team` running one level at a time, with release/acquire ordering between
/// levels. See `docs/adr/0005-parallel-slot-writes.md`.
struct LevelSlots<'a, T>(SlotPtr<'a, T>);

// SAFETY: chunks on several threads get `&T` from distinct or shared read-only slots
// (needs `T: Sync`) and move values into, and drop the previous values of, slots that
// only their thread touches in the level (needs `T: Send`). Which thread touches which
// slot is disjoint by the level invariant; see its `SlotAccess` methods.
unsafe impl<T: Send + Sync> Sync for LevelSlots<'_, T> {}

impl<'a, T> LevelSlots<'a, T> {
    /// The view of `file` for a run of `sched`: only a verified schedule has one.
    ///
    /// # Panics
    /// If `file` does not have the schedule's slot count.
    fn new(sched: &VerifiedSchedule, file: &'a mut SlotFile<T>) -> Self {
        assert_eq!(file.len(), sched.schedule().slots.slot_count, "slot file sized for another schedule");
        LevelSlots(file.ptr())
    }

    /// Hints that slot `s` will be read soon.
    #[inline(always)]
    fn prefetch(&self, s: SlotId) {
        self.0.prefetch(s);
    }
}

impl<Op: EvaluableGraphOperation> VerifiedProgram<Op> {
    /// Instruction `i` with its operand and output slots in the parallel schedule.
    #[inline]
    fn par_instr<'a>(&'a self, sched: &'a VerifiedSchedule, i: InstrId) -> (&'a Op, &'a [SlotId], &'a [SlotId]) {
        // SAFETY: `i` comes from the order of a verified schedule (`check_levels` checks
        // that every instruction it names and its argument range are in bounds), built
        // from this program's instructions, which verification keeps as long as `ops`.
        unsafe {
            let program = self.program();
            let (ins, outs) = program.instrs.get_unchecked(i).slots_unchecked(&sched.schedule().slots.args);
            (program.ops.get_unchecked(i), ins, outs)
        }
    }
}

#[inline]
#[cold]
fn count_error<Op: EvaluableGraphOperation>(op: &Op, expected: usize, found: usize) -> GraphError {
    GraphError::OutputCountMismatch { operation: format!("{}", Label(op)), expected, found }
}

/// The slots as an evaluator's instructions see them: operand reads and output writes.
trait SlotAccess<T> {
    /// The operand in slot `s`.
    ///
    /// # Safety
    /// As the implementation states; in every case no write of slot `s` happens while the
    /// reference lives.
    unsafe fn read(&self, s: SlotId) -> &T;
    /// Stores `v` in slot `s`, dropping what it held.
    ///
    /// # Safety
    /// As the implementation states; in every case no reference from [`Self::read`] of
    /// slot `s` is alive.
    unsafe fn write(&self, s: SlotId, v: T);
}

/// The sequential evaluator's slots, read and written without checks through a
/// [`SlotPtr`], like [`LevelSlots`], so that writes take `&self` and the evaluation loop
/// can keep the base pointer in a register across calls that receive the view.
///
/// Only [`VerifiedSlots::new`] makes one, from a [`VerifiedProgram`] (a program that passed
/// `Program::verify`, which `try_compile` runs in every build, and which nothing can change
/// afterwards) and a slot file of its `slot_count`. Contract of `read` and `write`: that
/// program's inputs are stored, and its instructions run in order, on one thread, through
/// this view ([`VerifiedProgram::run`] does both). Then every slot an instruction names is
/// in range, every slot it reads was written before (nothing takes a value out during the
/// run), and an instruction's outputs never alias its operands (all checked by the
/// verification), so no write meets a live reference.
struct VerifiedSlots<'a, T>(SlotPtr<'a, T>);

impl<'a, T> VerifiedSlots<'a, T> {
    /// The view of `file` for a run of `program`.
    ///
    /// # Panics
    /// If `file` does not have the program's slot count.
    #[inline(always)]
    fn new<Op>(program: &VerifiedProgram<Op>, file: &'a mut SlotFile<T>) -> Self {
        assert_eq!(file.len(), program.program().slots.slot_count, "slot file sized for another program");
        VerifiedSlots(file.ptr())
    }
}

impl<T> SlotAccess<T> for VerifiedSlots<'_, T> {
    #[inline(always)]
    unsafe fn read(&self, s: SlotId) -> &T {
        // SAFETY: in range and written, and not written while the reference lives (the
        // instruction reading it writes only its outputs, which never alias its operands),
        // by the type's contract.
        unsafe { self.0.read(s) }
    }
    #[inline(always)]
    unsafe fn write(&self, s: SlotId, v: T) {
        // SAFETY: in range, one thread, and no reference into the slot is alive, by the
        // type's contract.
        unsafe { self.0.write(s, v) };
    }
}

impl<T> SlotAccess<T> for LevelSlots<'_, T> {
    /// # Safety
    /// `s` is an operand slot of an instruction of the level this view was made for, in a
    /// schedule that passed `Schedule::check_levels`, run level by level from its inputs:
    /// so `s` is in range and holds a value (an input, or an output of an earlier level;
    /// nothing empties a slot during a run), and no thread writes it while the returned
    /// reference lives.
    #[inline(always)]
    unsafe fn read(&self, s: SlotId) -> &T {
        // SAFETY: in range, written, and not written while the reference lives, by the
        // caller's guarantee.
        unsafe { self.0.read(s) }
    }
    /// # Safety
    /// No other thread reads or writes slot `s` during the level: `s` is an output slot of
    /// the instruction being evaluated, in the level this view was made for (of a schedule
    /// that passed `Schedule::check_levels`, which also puts `s` in range).
    #[inline(always)]
    unsafe fn write(&self, s: SlotId, v: T) {
        // SAFETY: `s` is in range, and by the caller's guarantee this thread is the only
        // one touching the slot, so the write (and the drop of the old value) is exclusive.
        unsafe { self.0.write(s, v) };
    }
}

/// Evaluates one instruction: gathers its operands on the stack (no allocation for up to
/// two), runs the operation, and stores its outputs in their slots. One-output
/// instructions of one or two operands run inline, their output pushed straight into a
/// local (see [`eval_one`]); everything else (no operand or more than two, more outputs)
/// goes through the out-of-line [`eval_instruction_general`], so the hot loop keeps its
/// registers.
///
/// # Safety
/// `slots.read` is sound for every slot of `ins` and `slots.write` for every slot of
/// `outs`, for the duration of the call, as `S`'s contract states.
#[inline(always)]
unsafe fn eval_instruction<Op: EvaluableGraphOperation, S: SlotAccess<Op::Operand>>(
    op: &Op,
    ctx: &mut Op::Context,
    slots: &S,
    ins: &[SlotId],
    outs: &[SlotId],
    out: &mut Vec<Op::Operand>,
) -> GraphResult<()> {
    let n = ins.len();
    if let ([s], true) = (outs, n.wrapping_sub(1) < 2) {
        // One or two operands, gathered without branching on which: a unary operation
        // reads its operand twice and sees a one-element slice.
        // SAFETY: operand slots, by the caller's guarantee; the references end here.
        let refs = unsafe { [slots.read(ins[0]), slots.read(ins[n - 1])] };
        let v = eval_one(op, ctx, &refs[..n])?;
        // SAFETY: the instruction's output slot, by the caller's guarantee.
        unsafe { slots.write(*s, v) };
        return Ok(());
    }
    // SAFETY: as this function's.
    unsafe { eval_instruction_general(op, ctx, slots, ins, outs, out) }
}

/// Runs a one-output operation with its output pushed into a local, and returns it.
#[inline(always)]
fn eval_one<Op: EvaluableGraphOperation>(
    op: &Op,
    ctx: &mut Op::Context,
    args: &[&Op::Operand],
) -> GraphResult<Op::Operand> {
    let mut value = MaybeUninit::uninit();
    let mut o = Outputs::slots(std::slice::from_mut(&mut value));
    op.eval_into(ctx, args, &mut o);
    match o.finish() {
        // SAFETY: `finish` returned `Ok`: the one entry was written, and is now ours.
        Ok(()) => Ok(unsafe { value.assume_init() }),
        Err(found) => Err(count_error(op, 1, found)),
    }
}

/// The rest of [`eval_instruction`]: operands gathered into a `SmallVec`, outputs pushed
/// into `out`'s spare room, then moved to their slots.
///
/// # Safety
/// As [`eval_instruction`].
#[cold]
#[inline(never)]
unsafe fn eval_instruction_general<Op: EvaluableGraphOperation, S: SlotAccess<Op::Operand>>(
    op: &Op,
    ctx: &mut Op::Context,
    slots: &S,
    ins: &[SlotId],
    outs: &[SlotId],
    out: &mut Vec<Op::Operand>,
) -> GraphResult<()> {
    // SAFETY: `ins` are the instruction's operand slots, as this function's contract states.
    let args = unsafe { gather(slots, ins) };
    if let [s] = outs {
        let v = eval_one(op, ctx, &args)?;
        drop(args);
        // SAFETY: the instruction's output slot, as this function's contract states; the
        // operand references were dropped just above.
        unsafe { slots.write(*s, v) };
        return Ok(());
    }
    out.clear();
    out.reserve(outs.len());
    let mut o = Outputs::slots(&mut out.spare_capacity_mut()[..outs.len()]);
    op.eval_into(ctx, &args, &mut o);
    drop(args);
    if let Err(found) = o.finish() {
        return Err(count_error(op, outs.len(), found));
    }
    // SAFETY: `finish` returned `Ok`: the first `outs.len()` entries of the spare room
    // were written and are now ours.
    unsafe { out.set_len(outs.len()) };
    for (&s, v) in outs.iter().zip(out.drain(..)) {
        // SAFETY: an output slot of the instruction, as this function's contract states;
        // the operand references were dropped above.
        unsafe { slots.write(s, v) };
    }
    Ok(())
}

/// References to the operands in slots `ins`.
///
/// # Safety
/// `slots.read` is sound for every slot of `ins` while the references live.
#[inline(always)]
unsafe fn gather<'s, T, S: SlotAccess<T>>(slots: &'s S, ins: &[SlotId]) -> SmallVec<[&'s T; 8]> {
    // SAFETY: by the caller's guarantee.
    ins.iter().map(|&s| unsafe { slots.read(s) }).collect()
}

/// Moves (last mention of a slot) or clones the outputs out of `slots`, then empties them.
///
/// # Safety
/// Every slot of `output_slots` is in range and holds a value.
unsafe fn take_outputs<T: Clone>(
    slots: &mut SlotFile<T>,
    output_slots: &[SlotId],
    output_move: &[bool],
    mut each: impl FnMut(T),
) {
    for (&s, &mv) in output_slots.iter().zip(output_move) {
        // SAFETY: the slot holds a value, by the caller's guarantee; a slot is moved out
        // only at its last mention, so the clones before it read a held value.
        each(unsafe { if mv { slots.take(s) } else { slots.get(s).clone() } });
    }
    slots.clear();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        GraphBuilder, GraphOperation, KeyInterner, OperationRole, ValueRef, compile, materialize_merge, resolve,
    };

    /// `(a ^ b.rotate_left(tag)) * K`: order-sensitive, so a swapped operand shows.
    #[derive(Clone, Debug, Hash, PartialEq, Eq)]
    struct Mix(u32);

    impl GraphOperation for Mix {
        type Operand = u64;
        type Context = ();
        type InputKey = u32;
        fn input_count(&self) -> usize {
            2
        }
        fn output_count(&self) -> usize {
            1
        }
    }

    impl EvaluableGraphOperation for Mix {
        fn eval_into(&self, _: &mut (), inputs: &[&u64], out: &mut Outputs<'_, u64>) {
            out.push((inputs[0] ^ inputs[1].rotate_left(self.0)).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        }
    }

    /// The prefetching loop (forced on, as compile sets it only for large slot files)
    /// gives the plain loop's results, on programs shorter and longer than `SLOT_AHEAD`:
    /// the look-ahead stays inside the program (this test also runs under Miri).
    #[test]
    fn prefetching_loop_matches_plain_loop() {
        for n_ops in [3, SLOT_AHEAD - 1, SLOT_AHEAD, 3 * SLOT_AHEAD + 5] {
            let mut b = GraphBuilder::<Mix>::with_interner(KeyInterner::new());
            let x = b.add_input(0);
            let y = b.add_input(1);
            let mut values = vec![x, y];
            let mut seed = 0x2545_F491_4F6C_DD1D_u64;
            for i in 0..n_ops {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                let n = values.len() as u64;
                let (a, c) = (values[(seed >> 33) as usize % n as usize], values[(seed >> 13) as usize % n as usize]);
                let tag = i as u32 % 7;
                values.push(
                    b.add_operation(Mix(tag), vec![ValueRef::Local(a), ValueRef::Local(c)], OperationRole::Primary)[0],
                );
            }
            let outputs: Vec<_> = values[values.len() - 3..].to_vec();
            b.set_outputs(outputs.clone());
            let g = std::sync::Arc::new(b.build());
            let keys: Vec<_> = outputs.iter().map(|&v| g.global_key(v)).collect();
            let flat = materialize_merge(&resolve(vec![g]), &keys);
            let plain = compile(&flat);
            let mut hinted = compile(&flat);
            assert!(!plain.prefetches_operand_slots());
            hinted.force_prefetch();
            let inputs = [&3_u64, &0xDEAD_BEEF_u64];
            assert_eq!(hinted.eval(&mut (), &inputs), plain.eval(&mut (), &inputs), "{n_ops} operations");
        }
    }

    /// Two- and one-operand operations with payloads, and a two-output one.
    #[derive(Clone, Debug, Hash, PartialEq, Eq)]
    enum Toy {
        Mix(u32),
        Inc(u64),
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

    impl Toy {
        fn apply(&self, x: &[u64]) -> Vec<u64> {
            match *self {
                Toy::Mix(tag) => vec![(x[0] ^ x[1].rotate_left(tag)).wrapping_mul(0x9E37_79B9_7F4A_7C15)],
                Toy::Inc(k) => vec![x[0].wrapping_add(k).rotate_left(7)],
                Toy::Split => vec![x[0] >> 32, x[0] & 0xFFFF_FFFF],
            }
        }
    }

    impl EvaluableGraphOperation for Toy {
        fn eval_into(&self, _: &mut (), inputs: &[&u64], out: &mut Outputs<'_, u64>) {
            let x: Vec<u64> = inputs.iter().map(|&&v| v).collect();
            out.extend(self.apply(&x));
        }
    }

    /// The run loop (uniform runs of equal operations, one operation reference per run)
    /// gives what the instruction-by-instruction loop and a direct interpretation give,
    /// on programs whose equal operations come in runs of several lengths, broken by
    /// operations of the same variant with another payload and by two-output ones.
    #[test]
    fn run_loop_matches_instruction_loop_and_interpretation() {
        for run_len in [1usize, 2, 3, 8] {
            let mut b = GraphBuilder::<Toy>::with_interner(KeyInterner::new());
            let mut values = vec![b.add_input(0), b.add_input(1)];
            let mut expected = vec![3_u64, 0xDEAD_BEEF_u64];
            let mut seed = 0x2545_F491_4F6C_DD1D_u64;
            for i in 0..200usize {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                let n = values.len();
                let (a, c) = ((seed >> 33) as usize % n, (seed >> 13) as usize % n);
                let group = (i / run_len) as u32;
                let op = match group % 5 {
                    0 | 3 => Toy::Mix(group % 4),
                    1 | 4 => Toy::Inc(u64::from(group % 3)),
                    _ => Toy::Split,
                };
                let operands: Vec<usize> = if let Toy::Mix(_) = op { vec![a, c] } else { vec![a] };
                let refs: Vec<_> = operands.iter().map(|&k| ValueRef::Local(values[k])).collect();
                let outs = b.add_operation(op.clone(), refs, OperationRole::Primary);
                let x: Vec<u64> = operands.iter().map(|&k| expected[k]).collect();
                for (v, y) in outs.into_iter().zip(op.apply(&x)) {
                    values.push(v);
                    expected.push(y);
                }
            }
            let outputs: Vec<_> = values[values.len() - 5..].to_vec();
            b.set_outputs(outputs.clone());
            let g = std::sync::Arc::new(b.build());
            let keys: Vec<_> = outputs.iter().map(|&v| g.global_key(v)).collect();
            let flat = materialize_merge(&resolve(vec![g]), &keys);
            let by_runs = compile(&flat);
            assert!(
                run_len == 1
                    || by_runs.code().program().runs.iter().any(|r| r.arity == 2)
                        && by_runs.code().program().runs.iter().any(|r| r.arity == 1),
                "runs of {run_len} equal operations make uniform runs of both arities"
            );
            let mut by_instruction = compile(&flat);
            by_instruction.force_prefetch(); // the instruction-by-instruction loop
            let inputs = [&3_u64, &0xDEAD_BEEF_u64];
            let got = by_runs.eval(&mut (), &inputs);
            assert_eq!(got, by_instruction.eval(&mut (), &inputs), "runs of {run_len}");
            assert_eq!(got, expected[expected.len() - 5..].to_vec(), "runs of {run_len}");
            // The verifier catches a uniform run whose stretch of arguments is off.
            let mut bad = compile(&flat).code().program().clone();
            if let Some((k, r)) = bad.runs.iter_mut().enumerate().find(|(_, r)| r.arity != 0) {
                r.start += 1;
                let fault = crate::verify::verify_program(bad).map(|_| ()).map_err(|e| e.fault);
                assert_eq!(fault, Err(crate::verify::Fault::RunStart { run: k }), "a shifted run passes verification");
            }
        }
    }
}
