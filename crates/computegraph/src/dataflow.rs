//! `dataflow`: dependency-driven parallel evaluation, for programs of costly instructions.
//!
//! Input: a [`VerifiedProgram`] (`verify.rs`) and its cost per instruction
//! ([`GraphOperation::cost_hint`]). [`plan`] numbers the values by simulating
//! the program (inputs `0..n_inputs`, then each instruction's outputs in program order,
//! as `schedule.rs` does), and records per instruction how many operands other
//! instructions produce (`pending`), which instructions read its outputs (`consumers`,
//! once per operand), and its *rank*: its cost plus the largest rank of its consumers,
//! the cost of the longest path from it to the end. Output: a [`DataflowPlan`], which the
//! compiled program keeps beside the verified program it was built from, and by which
//! [`run`] evaluates that program on the current rayon pool.
//!
//! Why: the level evaluator (`eval.rs`) waits for a whole level before the next begins,
//! and its helper threads spin between levels. That suits many cheap operations; for a
//! few dozen costly ones (an einsum network's contractions) a level often holds one long
//! step and one short one, and the core that finished the short one idles until the long
//! one ends, unable even to take part in the long step's own parallel kernels. Here an
//! instruction starts as soon as its last operand is ready, and a thread that has nothing
//! to do is an idle rayon worker, which steals spawned instructions and the kernels' own
//! rayon work alike. See `docs/adr/0015-dataflow-evaluation.md`.
//!
//! How: [`run`] opens one `rayon::scope`. Instructions without pending operands are ready
//! at the start; when an instruction finishes, the counters of its consumers go down, and
//! those that reach zero are ready. Of the ready instructions, the thread keeps the one of
//! highest rank (the critical path stays on a warm core), runs the cheap ones itself (a
//! cost hint below [`SPAWN_MIN_COST`]: they do not pay for a spawn and a wake-up) and
//! spawns the others, for an idle thread to steal. Idle threads do not sleep during a
//! run: they spin, taking pool work as it appears (`Run::stay_awake`).
//!
//! Ids: instructions are [`InstrId`]s, values `ValueNo`s (numbered as above), and the
//! values instructions make `CellId`s (a value's number minus the input count: each has
//! a cell of its own during a run). A column indexed by instruction is an
//! `IdVec<InstrId, _>` (`pending`, `cost`, `rank`), one indexed by made value an
//! `IdVec<CellId, _>` (`readers`, a run's cells and counters); `consumers` and the ready
//! lists hold `InstrId`s. No column holds a sentinel: an input has no cell
//! (`ValueNo::cell` is `None`), and while planning a slot not yet written holds `None`.
//!
//! Invariants of the plan: it is built only from a [`VerifiedProgram`], by [`plan`], which
//! marks it with the program it came from (its argument pool's address and length, its
//! instruction count: an immutable program's pool never moves); the compiled program
//! keeps it beside that program (both private fields, `compiled.rs`), and [`run`] refuses
//! a plan whose mark is not the program's it is given. So a plan is only ever run
//! with the program it was made for: its value numbering, counts and consumers describe
//! exactly the instructions [`run`] executes. Because the
//! program is verified, every operand names a value written before it (by an input or an
//! earlier instruction), so the simulation numbers every operand; every output names a
//! value of its own; and a program output's value counts the final gather as one more
//! reader.
//!
//! **The dataflow invariant, on which this module's `unsafe` rests:** a value's cell is
//! written once, by the instruction that produces it, before any reader starts: a reader
//! becomes ready only when its `pending` counter, decremented (acquire-release) by each
//! producer after its writes, reaches zero. It is dropped once, by its last reader, after
//! every reader is done with it: `readers_left`, decremented (acquire-release) by each
//! reader after its reads, reaches zero only then; program outputs count one more reader,
//! the final gather, so they are never dropped during the run. Program inputs are read
//! from the caller's references and never stored. So no cell is written while another
//! thread reads it, and none is read after it is dropped. The counters hold because of
//! the pairing above: they were counted on the very instructions that run.
//!
//! Results are bit-identical to sequential evaluation: every instruction runs once, with
//! its own operation, on the same operands. The instructions the calling thread runs get
//! the caller's context; each spawned job (an instruction and the ones its thread then
//! runs in place) gets a clone, made when it starts; what a clone records is dropped. A
//! failing instruction stops the run (nothing more starts) and its error is returned; a
//! panic reaches the caller when the scope ends. Either way the values still held are
//! dropped. Peak memory may exceed the sequential order's: independent steps run
//! together, each with its inputs and output alive.
//!
//! Complexity: [`plan`] `O(instructions + arguments + slots)`, one sort of the
//! roots; [`run`] `O(instructions + arguments)` atomic operations, one spawn per costly ready
//! instruction beyond the first.

use std::cell::{Cell, UnsafeCell};
use std::mem::MaybeUninit;
use std::sync::Mutex;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize};

use smallvec::SmallVec;

use crate::error::{GraphError, GraphResult};
use crate::id::{Id, IdVec, InstrId, SlotId};
use crate::operation::{EvaluableGraphOperation, GraphOperation, Label, Outputs};
use crate::program::{Instr, SlotProgram};
use crate::verify::VerifiedProgram;

/// Programs whose mean cost hint per instruction is at least this are evaluated in
/// parallel by dependency rather than by levels
/// ([`CompiledProgram::parallel_by_dependency`](crate::CompiledProgram::parallel_by_dependency)
/// tells which a program takes): about 16 µs of work per
/// instruction, where a spawn and a thread's wake-up (tens of microseconds when a rayon
/// worker sleeps) are small. Scalar graphs (cost 1) never come near it.
pub const DATAFLOW_MIN_MEAN_COST: u64 = 1 << 14;

/// A ready instruction of at least this cost hint is spawned for another thread to steal;
/// a cheaper one runs on the thread that made it ready.
pub(crate) const SPAWN_MIN_COST: u64 = 1 << 15;

crate::define_id!(
    /// A value of the program, numbered by simulating it: the inputs `0..n_inputs`, then
    /// every instruction's outputs in program order.
    struct ValueNo = "w"
);
crate::define_id!(
    /// A value an instruction makes: its [`ValueNo`] minus the input count. It has a cell
    /// of its own during a run, a producer and a reader count.
    struct CellId = "c"
);

// The plan's columns hold these where the raw `u32`s were: they must stay as small, and
// a slot's value while planning, an `Option<ValueNo>`, as small as the value.
const _: () = assert!(size_of::<ValueNo>() == 4 && size_of::<Option<ValueNo>>() == 4);
const _: () = assert!(size_of::<Option<CellId>>() == 4);

impl ValueNo {
    /// The cell of this value, or `None` for a program input (`n_inputs`: the program's).
    #[inline(always)]
    fn cell(self, n_inputs: usize) -> Option<CellId> {
        // `try_new` never fails here (the difference is at most this value's own index);
        // unlike `new`, it has no panic path in the evaluation loop's operand gather.
        self.index().checked_sub(n_inputs).and_then(CellId::try_new)
    }
}

impl CellId {
    /// The value this cell holds (`n_inputs`: the program's).
    #[inline(always)]
    fn value(self, n_inputs: usize) -> ValueNo {
        ValueNo::new(n_inputs + self.index())
    }
}

/// The dependency structure of a verified program, built once on first use and kept
/// beside it by the compiled program (see the module doc).
#[derive(Debug)]
pub(crate) struct DataflowPlan {
    n_inputs: usize,
    /// The value at each argument position, in the layout of the program's argument pool.
    arg_value: Vec<ValueNo>,
    /// Readers of each instruction-made value, one per operand that names it, plus one if
    /// it is a program output.
    readers: IdVec<CellId, u32>,
    /// Operands of each instruction that other instructions produce.
    pending: IdVec<InstrId, u32>,
    /// `consumers[consumer_start[i]..consumer_start[i + 1]]`: the instructions reading
    /// instruction `i`'s outputs, once per such operand (offsets into `consumers`, one per
    /// instruction and one past the last: see [`Self::consumers_of`]).
    consumer_start: Vec<u32>,
    consumers: Vec<InstrId>,
    /// Instructions with no pending operand, by increasing rank.
    roots: Vec<InstrId>,
    /// Each instruction's cost hint, and its rank (the module doc).
    cost: IdVec<InstrId, u64>,
    rank: IdVec<InstrId, u64>,
    /// The value of each program output, and whether this output position moves it out
    /// (the last position naming an instruction-made value) or clones it.
    output_values: Vec<ValueNo>,
    output_move: Vec<bool>,
    /// The program the plan was made from ([`plan`]), which [`run`] checks.
    made_from: Option<ProgramMark>,
}

impl DataflowPlan {
    /// Bytes held by the plan's columns.
    pub(crate) fn heap_bytes(&self) -> usize {
        (self.arg_value.capacity() + self.output_values.capacity()) * size_of::<ValueNo>()
            + self.readers.heap_bytes()
            + self.pending.heap_bytes()
            + (self.consumer_start.capacity() + self.consumers.capacity() + self.roots.capacity()) * 4
            + self.cost.heap_bytes()
            + self.rank.heap_bytes()
            + self.output_move.capacity()
    }
}

/// The dataflow plan of `code` (a linear pass): the only way to a plan. The compiled
/// program builds it on the first run that chooses dataflow and keeps it beside `code`,
/// which never changes, so the plan describes exactly the instructions [`run`]
/// evaluates; [`run`] checks that it is given the program the plan was made from.
pub(crate) fn plan<Op: GraphOperation>(code: &VerifiedProgram<Op>) -> GraphResult<DataflowPlan> {
    let program = code.program();
    let mut plan = plan_slots(&program.instrs, &program.slots, program.cost_hints())?;
    plan.made_from = Some(ProgramMark::of(code));
    Ok(plan)
}

/// Which program a plan was made from: its argument pool's address and length and its
/// instruction count. A verified program is immutable, so its pool never moves while it
/// lives, and no two live programs share one. (The address is kept as a number: it is
/// only compared.)
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct ProgramMark {
    args: usize,
    n_args: usize,
    n_instrs: usize,
}

impl ProgramMark {
    fn of<Op>(code: &VerifiedProgram<Op>) -> Self {
        let program = code.program();
        ProgramMark {
            args: program.slots.args.as_ptr() as usize,
            n_args: program.slots.args.len(),
            n_instrs: program.instrs.len(),
        }
    }
}

/// The plan of a program given by its instruction words, slots and cost hints (not
/// generic over the operation).
fn plan_slots(instrs: &IdVec<InstrId, Instr>, slots: &SlotProgram, cost: Vec<u64>) -> GraphResult<DataflowPlan> {
    // A verified program writes every slot it reads first: this is unreachable.
    let unverified = || GraphError::Invalid {
        phase: "dataflow plan",
        message: "the sequential program reads a slot before writing it".into(),
    };
    let args = &slots.args;
    let n = instrs.len();
    let n_inputs = slots.input_slots.len();
    let n_made: usize = instrs.raw().iter().map(|i| i.n_out()).sum();
    if ValueNo::try_new(n_inputs + n_made).is_none() || InstrId::try_new(n).is_none() {
        return Err(GraphError::IdSpaceExhausted { space: "value" });
    }
    // Value numbering; `producer[m]` is the instruction that makes cell `m`. Every pool
    // position an instruction names is overwritten below (in a compiled program, all).
    let mut arg_value: Vec<ValueNo> = vec![ValueNo::new(0); args.len()];
    let mut producer: IdVec<CellId, InstrId> = IdVec::with_capacity(n_made);
    let mut slot_value: IdVec<SlotId, Option<ValueNo>> = IdVec::from_elem(None, slots.slot_count);
    // Index loops over `0..n_inputs` and `0..n`, both below `u32::MAX` (checked above), so
    // that the compiler drops the ids' range checks.
    for j in 0..n_inputs {
        if let Some(s) = slots.input_slots[j] {
            slot_value[s] = Some(ValueNo::new(j));
        }
    }
    let mut readers: IdVec<CellId, u32> = IdVec::from_elem(0, n_made);
    let mut pending: IdVec<InstrId, u32> = IdVec::from_elem(0, n);
    // Each instruction's consumer count at `consumer_start[i]`, made the end of its row by
    // a prefix sum and its start by the fill; the (producer, consumer) pairs, in program
    // order of the consumer, once per operand.
    let mut consumer_start: Vec<u32> = vec![0; n + 1];
    let mut edges: Vec<(InstrId, InstrId)> = Vec::with_capacity(args.len().saturating_sub(n_made));
    for k in 0..n {
        let (i, instr) = (InstrId::new(k), instrs.raw()[k]);
        let (start, mid) = (instr.start(), instr.start() + instr.n_in());
        for p in start..mid {
            let v = slot_value[args[p]].ok_or_else(unverified)?;
            arg_value[p] = v;
            if let Some(m) = v.cell(n_inputs) {
                readers[m] += 1;
                pending[i] += 1;
                consumer_start[producer[m].index()] += 1;
                edges.push((producer[m], i));
            }
        }
        for p in mid..instr.end() {
            let v = producer.push(i).value(n_inputs);
            arg_value[p] = v;
            slot_value[args[p]] = Some(v);
        }
    }
    let output_values: Vec<ValueNo> =
        slots.output_slots.iter().map(|&s| slot_value[s].ok_or_else(unverified)).collect::<GraphResult<_>>()?;
    let mut output_move = vec![false; output_values.len()];
    for (k, &v) in output_values.iter().enumerate().rev() {
        if let Some(m) = v.cell(n_inputs) {
            // The last position naming it moves it; the output gather is one more reader.
            output_move[k] = !output_values[k + 1..].contains(&v);
            if output_move[k] {
                readers[m] += 1;
            }
        }
    }
    let mut total = 0;
    for at in &mut consumer_start[..n] {
        total += *at;
        *at = total;
    }
    consumer_start[n] = total;
    // Rows filled from their ends, pairs taken in reverse: each row lists its consumers in
    // program order, and every entry is written.
    let mut consumers: Vec<InstrId> = vec![InstrId::new(0); total as usize];
    for &(p, c) in edges.iter().rev() {
        let at = &mut consumer_start[p.index()];
        *at -= 1;
        consumers[*at as usize] = c;
    }
    // Ranks in reverse program order: consumers come later.
    let cost: IdVec<InstrId, u64> = cost.into_iter().collect();
    let mut rank: IdVec<InstrId, u64> = IdVec::from_elem(0, n);
    let mut roots: Vec<InstrId> = Vec::new();
    for k in (0..n).rev() {
        let i = InstrId::new(k);
        let below = consumers[consumer_start[k] as usize..consumer_start[k + 1] as usize]
            .iter()
            .map(|&c| rank[c])
            .max()
            .unwrap_or(0);
        rank[i] = cost[i].saturating_add(below);
        if pending[i] == 0 {
            roots.push(i);
        }
    }
    // Program order, then a stable sort by rank.
    roots.reverse();
    roots.sort_by_key(|&i| rank[i]);
    Ok(DataflowPlan {
        n_inputs,
        arg_value,
        readers,
        pending,
        consumer_start,
        consumers,
        roots,
        cost,
        rank,
        output_values,
        output_move,
        made_from: None,
    })
}

impl DataflowPlan {
    /// The instructions reading instruction `i`'s outputs, once per such operand.
    fn consumers_of(&self, i: InstrId) -> &[InstrId] {
        &self.consumers[self.consumer_start[i.index()] as usize..self.consumer_start[i.index() + 1] as usize]
    }
}

/// The values instructions make during one run: one cell each, and whether it holds one.
struct Values<T> {
    cells: IdVec<CellId, UnsafeCell<MaybeUninit<T>>>,
    live: IdVec<CellId, AtomicBool>,
}

// SAFETY: threads share `Values` during a run to read cells (needs `T: Sync`) and to move
// values into and out of them (needs `T: Send`); which thread touches which cell when is
// ordered by the dataflow invariant (module doc).
unsafe impl<T: Send + Sync> Sync for Values<T> {}

impl<T> Values<T> {
    fn new(n: usize) -> Self {
        Values {
            cells: (0..n).map(|_| UnsafeCell::new(MaybeUninit::uninit())).collect(),
            live: (0..n).map(|_| AtomicBool::new(false)).collect(),
        }
    }

    /// # Safety
    /// Cell `m` holds a value that no thread drops or overwrites while the reference lives.
    unsafe fn read(&self, m: CellId) -> &T {
        // SAFETY: by the caller's guarantee.
        unsafe { (*self.cells[m].get()).assume_init_ref() }
    }

    /// # Safety
    /// Cell `m` is empty and no other thread touches it during the call.
    unsafe fn write(&self, m: CellId, v: T) {
        // SAFETY: by the caller's guarantee.
        unsafe { (*self.cells[m].get()).write(v) };
        // Published to readers by the producer's `pending` decrements (acquire-release).
        self.live[m].store(true, Relaxed);
    }

    /// # Safety
    /// Cell `m` holds a value and no other thread touches it during the call or after.
    unsafe fn take(&self, m: CellId) -> T {
        self.live[m].store(false, Relaxed);
        // SAFETY: by the caller's guarantee.
        unsafe { (*self.cells[m].get()).assume_init_read() }
    }
}

impl<T> Drop for Values<T> {
    fn drop(&mut self) {
        // Exclusive: the run's scope has ended (normally, by an error or by a panic).
        for (cell, live) in self.cells.raw_mut().iter_mut().zip(self.live.raw_mut()) {
            if *live.get_mut() {
                // SAFETY: `live` marks the cells that hold a value.
                unsafe { cell.get_mut().assume_init_drop() };
            }
        }
    }
}

/// The shared state of one run. `plan` is `program`'s own (checked by [`run`]).
struct Run<'a, Op: EvaluableGraphOperation> {
    program: &'a VerifiedProgram<Op>,
    plan: &'a DataflowPlan,
    inputs: &'a [&'a Op::Operand],
    values: Values<Op::Operand>,
    readers_left: IdVec<CellId, AtomicU32>,
    pending: IdVec<InstrId, AtomicU32>,
    failed: AtomicBool,
    /// Instructions not finished yet.
    left: AtomicUsize,
    error: Mutex<Option<GraphError>>,
    /// The context spawned jobs clone.
    ctx: Mutex<Op::Context>,
}

thread_local! {
    /// How many instructions this thread is inside (a kernel's rayon wait can run other
    /// pool jobs, so instructions nest).
    static IN_STEP: Cell<u32> = const { Cell::new(0) };
}

/// Counts the current thread as inside an instruction while it lives.
struct InStep;

impl InStep {
    fn enter() -> Self {
        IN_STEP.with(|d| d.set(d.get() + 1));
        InStep
    }
}

impl Drop for InStep {
    fn drop(&mut self) {
        IN_STEP.with(|d| d.set(d.get() - 1));
    }
}

/// Sets the run's `failed` flag when a job unwinds, so that nothing more starts.
struct FailOnUnwind<'a>(&'a AtomicBool);

impl Drop for FailOnUnwind<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Relaxed);
        }
    }
}

/// Evaluates `program` by `plan` on the current rayon pool (the caller enters it), with
/// one input per program input. `plan` must be the one [`plan`] made from `program`: a
/// plan of another program is refused (an internal error), since the run's `unsafe`
/// rests on the plan describing exactly these instructions. See the module doc.
pub(crate) fn run<Op>(
    program: &VerifiedProgram<Op>,
    plan: &DataflowPlan,
    ctx: &mut Op::Context,
    inputs: &[&Op::Operand],
) -> GraphResult<Vec<Op::Operand>>
where
    Op: EvaluableGraphOperation,
    Op::Context: Clone + Send,
{
    if plan.made_from != Some(ProgramMark::of(program)) {
        return Err(GraphError::Invalid {
            phase: "dataflow plan",
            message: "the plan was made from another program".into(),
        });
    }
    if inputs.len() != plan.n_inputs {
        return Err(GraphError::InputCountMismatch { expected: plan.n_inputs, found: inputs.len() });
    }
    let mut run = Run {
        program,
        plan,
        inputs,
        values: Values::new(plan.readers.len()),
        readers_left: plan.readers.raw().iter().map(|&r| AtomicU32::new(r)).collect(),
        pending: plan.pending.raw().iter().map(|&p| AtomicU32::new(p)).collect(),
        failed: AtomicBool::new(false),
        left: AtomicUsize::new(plan.pending.len()),
        error: Mutex::new(None),
        ctx: Mutex::new(ctx.clone()),
    };
    rayon::scope(|scope| {
        let run = &run;
        for _ in 1..rayon::current_num_threads() {
            scope.spawn(move |_| run.stay_awake());
        }
        let mut ready: SmallVec<[InstrId; 8]> = plan.roots.iter().copied().collect();
        let mut work = Vec::new();
        run.dispatch(scope, &mut ready, &mut work);
        run.job(scope, work, ctx);
        run.stay_awake();
    });
    if let Some(e) = run.error.get_mut().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
        return Err(e);
    }
    // Every instruction ran (none failed), and the scope's end ordered all their writes
    // before this thread's reads.
    let n_inputs = plan.n_inputs;
    let out = plan
        .output_values
        .iter()
        .zip(&plan.output_move)
        .map(|(&v, &moved)| match v.cell(n_inputs) {
            None => run.inputs[v.index()].clone(),
            // SAFETY: the plan is the program's own, so it counted the output gather as one
            // more reader of `v`: no instruction dropped the cell, and every instruction
            // ran, so its producer filled it; the scope has ended, so this thread alone
            // touches the cells; `output_move` marks the last position naming `v`, so a
            // moved cell is not named by a later output.
            Some(m) if moved => unsafe { run.values.take(m) },
            // SAFETY: as above.
            Some(m) => unsafe { run.values.read(m) }.clone(),
        })
        .collect();
    Ok(out)
}

impl<'a, Op> Run<'a, Op>
where
    Op: EvaluableGraphOperation,
    Op::Context: Clone + Send,
{
    /// Until the run ends, takes pool work (spawned instructions, the blocks of a running
    /// instruction's parallel kernels) whenever there is some, and spins otherwise: a
    /// rayon worker that falls asleep takes tens of microseconds to wake, and a run makes
    /// work for an idle thread many times (on `str_matrix_chain_multiplication_100`, 99
    /// steps in 11 ms, two threads' best of five had a median of 10.5 ms over eight
    /// processes with sleeping helpers, 9.3 ms with awake ones). The calling thread does
    /// the same once its own instructions are done. A thread inside an instruction
    /// returns at once: a kernel waiting for its own rayon jobs may pick this job up, and
    /// spinning there until the run ends would wait for itself.
    fn stay_awake(&self) {
        if IN_STEP.with(Cell::get) > 0 {
            return;
        }
        let mut idle = 0u32;
        while self.left.load(Acquire) > 0 && !self.failed.load(Relaxed) {
            match rayon::yield_now() {
                Some(rayon::Yield::Executed) => idle = 0,
                _ if idle < 1 << 12 => {
                    idle += 1;
                    std::hint::spin_loop();
                }
                _ => std::thread::yield_now(),
            }
        }
    }

    /// A spawned job: [`Self::job`] with a clone of the context.
    fn spawned<'s>(&'s self, scope: &rayon::Scope<'s>, i: InstrId) {
        let mut cx = self.ctx.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        self.job(scope, vec![i], &mut cx);
    }

    /// Runs the instructions of `work` (a stack) and those they make ready, until none is
    /// left or the run has failed.
    fn job<'s>(&'s self, scope: &rayon::Scope<'s>, mut work: Vec<InstrId>, cx: &mut Op::Context) {
        let _unwind = FailOnUnwind(&self.failed);
        let mut ready: SmallVec<[InstrId; 8]> = SmallVec::new();
        while let Some(i) = work.pop() {
            if self.failed.load(Relaxed) {
                return;
            }
            if let Err(e) = self.step(i, cx, &mut ready) {
                self.failed.store(true, Relaxed);
                let mut slot = self.error.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                slot.get_or_insert(e);
                return;
            }
            self.dispatch(scope, &mut ready, &mut work);
        }
    }

    /// Hands out the instructions of `ready`: the one of highest rank goes on top of
    /// `work` (this thread runs it next), cheap ones into `work` too, costly ones are
    /// spawned as jobs of their own.
    fn dispatch<'s>(&'s self, scope: &rayon::Scope<'s>, ready: &mut SmallVec<[InstrId; 8]>, work: &mut Vec<InstrId>) {
        let plan = self.plan;
        ready.sort_unstable_by_key(|&i| plan.rank[i]);
        let Some(first) = ready.pop() else { return };
        for &i in ready.iter() {
            if plan.cost[i] >= SPAWN_MIN_COST {
                scope.spawn(move |s| self.spawned(s, i));
            } else {
                work.push(i);
            }
        }
        ready.clear();
        work.push(first);
    }

    /// Evaluates instruction `i`, releases its operands, and pushes the instructions it
    /// made ready onto `ready`.
    fn step(&self, i: InstrId, cx: &mut Op::Context, ready: &mut SmallVec<[InstrId; 8]>) -> GraphResult<()> {
        let _inside = InStep::enter();
        let (plan, n_inputs) = (self.plan, self.plan.n_inputs);
        let program = self.program.program();
        let op = &program.ops[i];
        let (ins, outs) = program.instrs[i].slots(&plan.arg_value);
        let mut made: SmallVec<[MaybeUninit<Op::Operand>; 2]> = outs.iter().map(|_| MaybeUninit::uninit()).collect();
        {
            let args: SmallVec<[&Op::Operand; 8]> = ins
                .iter()
                .map(|&v| match v.cell(n_inputs) {
                    None => self.inputs[v.index()],
                    // SAFETY: the plan is the program's own, so `v` is what this operand
                    // names and its producer counts in this instruction's `pending`: it
                    // wrote the cell before this instruction became ready (its acquire-
                    // release decrement), and the cell is dropped only after this
                    // instruction's own `readers_left` decrement, below, after the
                    // references end (the dataflow invariant).
                    Some(m) => unsafe { self.values.read(m) },
                })
                .collect();
            let mut o = Outputs::slots(&mut made);
            op.eval_into(cx, &args, &mut o);
            if let Err(found) = o.finish() {
                return Err(GraphError::OutputCountMismatch {
                    operation: format!("{}", Label(op)),
                    expected: outs.len(),
                    found,
                });
            }
        }
        for (&v, value) in outs.iter().zip(made) {
            // An output is never an input: the plan numbered it after them.
            let m = CellId::new(v.index() - n_inputs);
            // SAFETY: `finish` returned `Ok`: every entry was written, and is now ours.
            let value = unsafe { value.assume_init() };
            if plan.readers[m] == 0 {
                drop(value); // read by nothing, not an output
            } else {
                // SAFETY: the plan is the program's own, which gives each output a value
                // of its own: this instruction alone makes `v`, once, and no reader has
                // started (each waits for this instruction's `pending` decrement, below).
                unsafe { self.values.write(m, value) };
            }
        }
        for &v in ins {
            if let Some(m) = v.cell(n_inputs) {
                if self.readers_left[m].fetch_sub(1, AcqRel) == 1 {
                    // SAFETY: the plan is the program's own, so `readers` counted every
                    // operand naming `v`; each reader has decremented, so each is done
                    // with the value (acquire-release orders their reads before this),
                    // and no program output names it (outputs hold one more count).
                    drop(unsafe { self.values.take(m) });
                }
            }
        }
        for &c in plan.consumers_of(i) {
            if self.pending[c].fetch_sub(1, AcqRel) == 1 {
                ready.push(c);
            }
        }
        self.left.fetch_sub(1, Release);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GraphBuilder, KeyInterner, OperationRole, ValueRef, compile, materialize_merge, resolve};

    /// `x + k`, with a cost hint high enough for dataflow.
    #[derive(Clone, Debug, Hash, PartialEq, Eq)]
    struct AddK(u64);

    impl GraphOperation for AddK {
        type Operand = u64;
        type Context = ();
        type InputKey = u32;
        fn input_count(&self) -> usize {
            1
        }
        fn output_count(&self) -> usize {
            1
        }
        fn cost_hint(&self) -> u64 {
            1 << 20
        }
    }

    impl EvaluableGraphOperation for AddK {
        fn eval_into(&self, _: &mut (), inputs: &[&u64], out: &mut crate::Outputs<'_, u64>) {
            out.push(inputs[0] + self.0);
        }
    }

    fn chain(ks: &[u64]) -> crate::CompiledProgram<AddK> {
        let mut b = GraphBuilder::<AddK>::with_interner(KeyInterner::new());
        let mut v = b.add_input(0);
        for &k in ks {
            v = b.add_operation(AddK(k), vec![ValueRef::Local(v)], OperationRole::Primary)[0];
        }
        b.set_outputs(vec![v]);
        let g = std::sync::Arc::new(b.build());
        let key = g.global_key(v);
        compile(&materialize_merge(&resolve(vec![g]), &[key]))
    }

    /// A plan runs with the program it was made from, and is refused with another, even
    /// one of the same shape: the run's `unsafe` rests on that pairing.
    #[test]
    fn a_plan_runs_only_with_its_own_program() {
        let (a, b) = (chain(&[1, 2, 3]), chain(&[10, 20, 30]));
        let plan_a = plan(a.code()).unwrap();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let got = pool.install(|| run(a.code(), &plan_a, &mut (), &[&5])).unwrap();
        assert_eq!(got, vec![11]);
        match pool.install(|| run(b.code(), &plan_a, &mut (), &[&5])) {
            Err(GraphError::Invalid { phase, .. }) => assert_eq!(phase, "dataflow plan"),
            other => panic!("a plan ran with another program: {other:?}"),
        }
    }
}
