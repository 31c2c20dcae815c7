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
//! - slots of graph outputs are never reused; inputs nobody reads get no slot.
//!
//! Slot allocation is a linear scan with a LIFO free list, so a chain of any length runs
//! in a constant number of slots. Complexity: `O(values + operands)`. Each value's last
//! use and slot share one column entry (one cache miss per far operand, not two), and
//! when more than a quarter of the operands lie far from their readers (`prefetch.rs`),
//! slot assignment prefetches the entries of the operands 16 instructions ahead, and
//! the program records that sequential evaluation should prefetch operand slots too
//! when its slot file exceeds `PREFETCH_SLOT_BYTES`.

use std::fmt;
use std::sync::{Arc, OnceLock};

use rustc_hash::FxHashMap;

use crate::dispatch::dispatch_order;
use crate::error::{GraphError, GraphResult};
use crate::key::{KeyInterner, ValueKey};
use crate::materialize::{MaterializedGraph, OperationId, ValueId};
use crate::operation::GraphOperation;
use crate::prefetch::{FarOperands, prefetch_entry};
use crate::program::{Instr, NO_SLOT, Run, SlotProgram, check_runs, output_moves, runs};
use crate::schedule::{Schedule, Step, schedule};

/// An immutable, `Sync` slot program. Compile once, evaluate many times (see
/// [`CompiledProgram::eval`]).
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{compile, materialize_merge, resolve, EvalState, GraphBuilder, OperationRole::Primary, ValueRef::Local};
/// use scalar::{ScalarKey, ScalarOp};
///
/// // f(x, y) = x·y + sin(x)
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// let y = b.add_input(ScalarKey::var(1));
/// let p = b.add_operation(ScalarOp::Mul, vec![Local(x), Local(y)], Primary)[0];
/// let s = b.add_operation(ScalarOp::Sin, vec![Local(x)], Primary)[0];
/// let f = b.add_operation(ScalarOp::Add, vec![Local(p), Local(s)], Primary)[0];
/// let g = Arc::new(b.build());
/// let program = compile(&materialize_merge(&resolve(vec![g.clone()]), &[g.global_key(f)]));
///
/// assert_eq!(program.instruction_count(), 3);
/// assert_eq!(program.input_keys(), &[ScalarKey::var(0), ScalarKey::var(1)]);
/// // Evaluate many times, reusing the slots.
/// let mut state = EvalState::new();
/// for x in [0.0, 1.0, 2.0] {
///     let out = program.eval_with(&mut state, &mut (), &[&x, &3.0]).unwrap();
///     assert_eq!(out, vec![x * 3.0 + x.sin()]);
/// }
/// ```
pub struct CompiledProgram<Op: GraphOperation> {
    pub(crate) interner: Arc<KeyInterner<Op>>,
    pub(crate) ops: Vec<Op>,
    pub(crate) instrs: Vec<Instr>,
    /// The instructions cut into runs for the sequential evaluator (`program.rs`, [`Run`]).
    pub(crate) runs: Vec<Run>,
    /// The operation of each uniform run, in order (`program.rs`, `runs`).
    pub(crate) run_ops: Vec<Op>,
    /// Operand and output slots of every instruction, of the inputs and of the outputs.
    pub(crate) slots: SlotProgram,
    /// Whether sequential evaluation prefetches the operand slots of instructions ahead:
    /// when operands lie far from their readers (`prefetch.rs`) and the slot file is
    /// larger than [`PREFETCH_SLOT_BYTES`], so that their slots are likely not cached.
    pub(crate) prefetch_slots: bool,
    /// The materialized operation of each instruction, or empty when instruction `i` is
    /// operation `i` (see `dispatch.rs`).
    pub(crate) source: Vec<u32>,
    pub(crate) input_keys: Vec<Op::InputKey>,
    pub(crate) input_index: FxHashMap<Op::InputKey, usize>,
    pub(crate) output_keys: Vec<ValueKey<Op>>,
    /// The level schedule and its own slots, for parallel evaluation (`schedule.rs`),
    /// computed on first use so that sequential users do not pay for it.
    pub(crate) schedule: OnceLock<GraphResult<Schedule>>,
}

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
    const UNUSED: u32 = u32::MAX;
    const KEEP: u32 = u32::MAX - 1;
    const DONE: u32 = u32::MAX - 2;
    let n_ops = graph.ops.len();
    if n_ops >= DONE as usize {
        return Err(GraphError::IdSpaceExhausted { space: "instruction" });
    }
    let source = dispatch_order(graph).unwrap_or_default();
    let op_at = |pos: usize| if source.is_empty() { pos } else { source[pos] as usize };
    // Per value: the last instruction that reads it, then its slot.
    let mut live: Vec<Live> = vec![Live { last_use: UNUSED, slot: NO_SLOT }; graph.value_count()];
    // Liveness, and whether operands are far enough from their readers for slot
    // assignment to prefetch their entries (`prefetch.rs`).
    let mut far = FarOperands::new(graph.inputs.len());
    for pos in 0..n_ops {
        let op = op_at(pos);
        let reader = graph.op_first_output[OperationId::new(op)].index();
        for v in graph.op_inputs.get(op) {
            live[v.index()].last_use = pos as u32;
            far.note(v.index(), reader);
        }
    }
    let prefetch = far.decide();
    let prefetch_operands = |live: &[Live], pos: usize| {
        if pos < n_ops {
            for v in graph.op_inputs.get(op_at(pos)) {
                prefetch_entry(live, v.index());
            }
        }
    };
    for v in &graph.outputs {
        live[v.index()].last_use = KEEP;
    }

    let mut alloc = SlotAllocator::default();
    let mut input_slots = Vec::with_capacity(graph.inputs.len());
    for &v in &graph.inputs {
        let l = &mut live[v.index()];
        let s = if l.last_use == UNUSED { NO_SLOT } else { alloc.take()? };
        l.slot = s;
        input_slots.push(s);
    }

    let mut ops = Vec::with_capacity(n_ops);
    let mut instrs = Vec::with_capacity(n_ops);
    let mut args: Vec<u32> = Vec::with_capacity(graph.op_inputs.items().len() + graph.value_count());
    for pos in 0..n_ops {
        if prefetch {
            prefetch_operands(&live, pos + AHEAD);
        }
        let op_id = OperationId::new(op_at(pos));
        let op = &graph.ops[op_id];
        let inputs = graph.op_inputs.get(op_id.index());
        let start = u32::try_from(args.len()).map_err(|_| GraphError::IdSpaceExhausted { space: "argument" })?;
        for v in inputs {
            args.push(live[v.index()].slot);
        }
        let outputs = graph.op_outputs(op_id);
        let n_out = outputs.len();
        for v in graph.op_outputs(op_id) {
            let s = alloc.take()?;
            live[v.index()].slot = s;
            args.push(s);
        }
        // Free operands whose last reader this is (once, even if read twice here).
        for v in inputs {
            let l = &mut live[v.index()];
            if l.last_use == pos as u32 {
                l.last_use = DONE;
                alloc.free(l.slot);
            }
        }
        // Outputs nobody reads are dead at once.
        for v in outputs {
            let l = &live[v.index()];
            if l.last_use == UNUSED {
                alloc.free(l.slot);
            }
        }
        ops.push(op.clone());
        let n_in = u16::try_from(inputs.len())
            .map_err(|_| GraphError::IdSpaceExhausted { space: "operands of one instruction (at most 65535)" })?;
        // At most 256 outputs: the interner refuses more.
        instrs.push(Instr::new(start, n_in, n_out as u16));
    }
    if u32::try_from(args.len()).is_err() {
        return Err(GraphError::IdSpaceExhausted { space: "argument" });
    }

    let output_slots: Vec<u32> = graph.outputs.iter().map(|v| live[v.index()].slot).collect();
    let output_move = output_moves(&output_slots);
    let input_keys = graph.input_keys.clone();
    let input_index = input_keys.iter().enumerate().map(|(i, k)| (k.clone(), i)).collect();
    let (runs, run_ops) = runs(&ops, &instrs);
    let program = CompiledProgram {
        interner: Arc::clone(&graph.interner),
        runs,
        run_ops,
        ops,
        instrs,
        slots: SlotProgram { args, input_slots, output_slots, output_move, slot_count: alloc.next as usize },
        prefetch_slots: prefetch
            && (alloc.next as usize).saturating_mul(std::mem::size_of::<Op::Operand>()) > PREFETCH_SLOT_BYTES,
        source,
        input_keys,
        input_index,
        output_keys: graph.output_keys(),
        schedule: OnceLock::new(),
    };
    // The sequential evaluator reads slots unchecked on the strength of `verify`
    // (`eval.rs`, `VerifiedSlots`), so it runs in every build: alone in release builds,
    // as the first step of `verify_against` in debug builds.
    #[cfg(not(debug_assertions))]
    program.verify()?;
    #[cfg(debug_assertions)]
    program
        .verify_against(graph)
        .and_then(|()| program.verify_parallel_against(graph))
        .unwrap_or_else(|e| panic!("internal error: compiled program fails verification: {e}"));
    Ok(program)
}

/// The slot file size from which evaluation prefetches far operands' slots: beyond this
/// machine's 1 MiB of L2 per core with room to spare. Smaller files stay cached, and the
/// hints would only cost (a 10^5-wide layered graph, 0.9 MiB of slots: 2.5 → 2.9 ns/node).
const PREFETCH_SLOT_BYTES: usize = 4 << 20;

/// How far ahead (in instructions) slot assignment prefetches operand entries.
const AHEAD: usize = 16;

/// A value's liveness and slot during compilation.
#[derive(Copy, Clone)]
struct Live {
    last_use: u32,
    slot: u32,
}

#[derive(Default)]
struct SlotAllocator {
    free: Vec<u32>,
    next: u32,
}

impl SlotAllocator {
    #[inline]
    fn take(&mut self) -> GraphResult<u32> {
        if let Some(s) = self.free.pop() {
            return Ok(s);
        }
        if self.next >= NO_SLOT - 1 {
            return Err(GraphError::IdSpaceExhausted { space: "slot" });
        }
        self.next += 1;
        Ok(self.next - 1)
    }
    #[inline]
    fn free(&mut self, s: u32) {
        self.free.push(s);
    }
}

impl<Op: GraphOperation> CompiledProgram<Op> {
    /// Number of instructions.
    pub fn instruction_count(&self) -> usize {
        self.instrs.len()
    }
    /// Number of slots evaluation needs.
    pub fn slot_count(&self) -> usize {
        self.slots.slot_count
    }
    /// Whether sequential evaluation prefetches operand slots a few instructions ahead,
    /// as compile decides for programs whose operands lie far from their readers in a
    /// slot file too large to stay cached. It only changes speed, never results.
    pub fn prefetches_operand_slots(&self) -> bool {
        self.prefetch_slots
    }
    /// The operation of the materialized graph that instruction `instruction` computes.
    /// Instructions run in a topological order of the materialized graph's operations,
    /// not necessarily in its own order (see [`compile`]).
    ///
    /// # Panics
    /// If `instruction` is not below [`Self::instruction_count`].
    pub fn source_operation(&self, instruction: usize) -> OperationId {
        assert!(instruction < self.instrs.len(), "instruction {instruction} out of range");
        OperationId::new(if self.source.is_empty() { instruction } else { self.source[instruction] as usize })
    }
    /// The parallel schedule, computed on first use (a linear pass; see `schedule.rs`).
    pub(crate) fn schedule(&self) -> GraphResult<&Schedule> {
        self.schedule
            .get_or_init(|| {
                let cost: Vec<u64> = self.ops.iter().map(GraphOperation::cost_hint).collect();
                schedule(
                    &self.ops,
                    &self.instrs,
                    &self.slots.args,
                    &self.slots.input_slots,
                    &self.slots.output_slots,
                    self.slots.slot_count,
                    &cost,
                )
            })
            .as_ref()
            .map_err(Clone::clone)
    }
    /// Number of topological levels of the parallel schedule (an instruction's level is
    /// one more than the largest level of its operands' producers; inputs are level 0).
    /// Computes the schedule if no parallel evaluation has yet.
    ///
    /// # Panics
    /// If the schedule would exhaust the `u32` slot or value space.
    pub fn level_count(&self) -> usize {
        self.schedule().unwrap_or_else(|e| panic!("{e}")).level_count()
    }
    /// Number of slots parallel evaluation needs (its slot assignment is level-aware, so it
    /// may need more than [`Self::slot_count`]). Computes the schedule if needed.
    ///
    /// # Panics
    /// As [`Self::level_count`].
    pub fn parallel_slot_count(&self) -> usize {
        self.schedule().unwrap_or_else(|e| panic!("{e}")).slots.slot_count
    }
    /// The input keys, in the order `eval` takes its inputs.
    pub fn input_keys(&self) -> &[Op::InputKey] {
        &self.input_keys
    }
    /// The output keys, in the order `eval` returns its outputs.
    pub fn output_keys(&self) -> &[ValueKey<Op>] {
        &self.output_keys
    }
    /// The position of an input key in [`Self::input_keys`].
    pub fn input_position(&self, key: &Op::InputKey) -> Option<usize> {
        self.input_index.get(key).copied()
    }
    /// The interner of the keys.
    pub fn interner(&self) -> &Arc<KeyInterner<Op>> {
        &self.interner
    }

    /// Gathers the program's inputs by key: `lookup` is asked once per input key.
    ///
    /// ```
    /// # use std::{collections::HashMap, sync::Arc};
    /// # use computegraph::{compile, materialize_merge, resolve, GraphBuilder, ValueRef::Local, OperationRole::Primary};
    /// # use scalar::{ScalarOp, ScalarKey};
    /// # let mut b = GraphBuilder::<ScalarOp>::new();
    /// # let x = b.add_input(ScalarKey::var(0));
    /// # let y = b.add_input(ScalarKey::var(1));
    /// # let z = b.add_operation(ScalarOp::Mul, vec![Local(x), Local(y)], Primary)[0];
    /// # let g = Arc::new(b.build());
    /// # let program = compile(&materialize_merge(&resolve(vec![g.clone()]), &[g.global_key(z)]));
    /// let values: HashMap<ScalarKey, f64> = [(ScalarKey::var(0), 3.0), (ScalarKey::var(1), 4.0)].into();
    /// let inputs = program.bind_inputs(|k| values.get(k)).unwrap();
    /// assert_eq!(program.eval(&mut (), &inputs), vec![12.0]);
    /// ```
    pub fn bind_inputs<'a, F>(&self, mut lookup: F) -> GraphResult<Vec<&'a Op::Operand>>
    where
        F: FnMut(&Op::InputKey) -> Option<&'a Op::Operand>,
    {
        self.input_keys
            .iter()
            .map(|k| lookup(k).ok_or_else(|| GraphError::UnboundInput { key: format!("{k:?}") }))
            .collect()
    }

    /// Bytes held by the program's columns.
    pub fn heap_bytes(&self) -> usize {
        self.ops.capacity() * std::mem::size_of::<Op>()
            + self.instrs.capacity() * std::mem::size_of::<Instr>()
            + self.slots.args.capacity() * 4
            + self.slots.input_slots.capacity() * 4
            + self.slots.output_slots.capacity() * 4
            + self.source.capacity() * 4
            + self.schedule.get().and_then(|s| s.as_ref().ok()).map_or(0, Schedule::heap_bytes)
    }

    #[inline]
    pub(crate) fn instr_args(&self, i: usize) -> (&[u32], &[u32]) {
        self.instrs[i].slots(&self.slots.args)
    }

    /// Checks that the program computes `graph`: simulates slot contents and confirms that
    /// every read finds the value the graph names, and every output its value.
    pub fn verify_against(&self, graph: &MaterializedGraph<Op>) -> GraphResult<()> {
        let bad = |message: String| GraphError::Invalid { phase: "compiled program", message };
        self.verify()?;
        if self.instrs.len() != graph.operation_count() || self.slots.input_slots.len() != graph.inputs.len() {
            return Err(bad("instruction or input count differs from the graph".into()));
        }
        self.verify_source()?;
        let mut content: Vec<Option<ValueId>> = vec![None; self.slots.slot_count];
        for (&s, &v) in self.slots.input_slots.iter().zip(&graph.inputs) {
            if s != NO_SLOT {
                content[s as usize] = Some(v);
            }
        }
        for i in 0..self.instrs.len() {
            let op = graph.operation(self.source_operation(i));
            let (ins, outs) = self.instr_args(i);
            for (k, (&s, &v)) in ins.iter().zip(op.inputs()).enumerate() {
                if content[s as usize] != Some(v) {
                    return Err(bad(format!(
                        "instruction {i} operand {k} reads slot s{s} holding {:?}, expected {v:?}",
                        content[s as usize]
                    )));
                }
            }
            for (&s, v) in outs.iter().zip(op.outputs()) {
                content[s as usize] = Some(v);
            }
        }
        for (&s, &v) in self.slots.output_slots.iter().zip(&graph.outputs) {
            if s == NO_SLOT || content[s as usize] != Some(v) {
                return Err(bad(format!("output {v:?} is not in its slot s{s} at the end")));
            }
        }
        Ok(())
    }

    /// Checks the parallel schedule against `graph`: `order` is a permutation of the
    /// instructions sorted by level, and, simulating slot contents level by level, every
    /// operand reads the value the graph names as it stood when the level began (so its
    /// producer is in an earlier level and its slot was not reused), no slot is written
    /// twice in a level or both written and read in one level, and every output ends in
    /// its slot.
    pub fn verify_parallel_against(&self, graph: &MaterializedGraph<Op>) -> GraphResult<()> {
        let bad = |message: String| GraphError::Invalid { phase: "parallel schedule", message };
        let sched = self.schedule()?;
        let n = self.instrs.len();
        if n != graph.operation_count()
            || sched.slots.input_slots.len() != graph.inputs.len()
            || sched.slots.output_slots.len() != graph.outputs.len()
        {
            return Err(bad("instruction or input count differs from the graph".into()));
        }
        if sched.slots.args.len() != self.slots.args.len() || sched.order.len() != n || sched.cost_prefix.len() != n + 1
        {
            return Err(bad("column lengths differ from the program".into()));
        }
        if sched.level_start.first() != Some(&0)
            || sched.level_start.last() != Some(&(n as u32))
            || sched.level_start.windows(2).any(|w| w[0] > w[1])
        {
            return Err(bad("level boundaries are not increasing from 0 to the instruction count".into()));
        }
        let mut placed = vec![false; n];
        for &i in &sched.order {
            if i as usize >= n || std::mem::replace(&mut placed[i as usize], true) {
                return Err(bad(format!("order is not a permutation (instruction {i})")));
            }
        }
        self.verify_source()?;
        // A compact step's operation is its instruction's (the evaluator runs the
        // representative in its place).
        for (k, (step, &i)) in sched.steps.iter().zip(&sched.order).enumerate() {
            if step.op != Step::GENERAL {
                let rep = sched.op_rep[(step.op & !Step::UNARY) as usize];
                if self.ops[rep as usize] != self.ops[i as usize] {
                    return Err(bad(format!("step {k} runs the operation of instruction {rep}, not of {i}")));
                }
            }
        }
        let ops: Vec<_> = (0..n).map(|i| graph.operation(self.source_operation(i))).collect();
        let in_range = |s: u32| (s as usize) < sched.slots.slot_count;
        let mut content: Vec<Option<ValueId>> = vec![None; sched.slots.slot_count];
        for (&s, &v) in sched.slots.input_slots.iter().zip(&graph.inputs) {
            if s != NO_SLOT {
                if !in_range(s) {
                    return Err(bad(format!("input slot s{s} out of range")));
                }
                content[s as usize] = Some(v);
            }
        }
        // 0: untouched in this level, 1: read, 2: written.
        let mut touched: Vec<u8> = vec![0; sched.slots.slot_count];
        let mut writes: Vec<(u32, ValueId)> = Vec::new();
        for l in 0..sched.level_count() {
            let level = sched.level(l);
            for &i in &sched.order[level.clone()] {
                let i = i as usize;
                let (ins, outs) = self.instrs[i].slots(&sched.slots.args);
                let op = &ops[i];
                if ins.len() != op.inputs().len() || outs.len() != op.outputs().len() {
                    return Err(bad(format!("instruction {i} arity differs from the graph")));
                }
                for (k, (&s, &v)) in ins.iter().zip(op.inputs()).enumerate() {
                    if !in_range(s) || content[s as usize] != Some(v) || touched[s as usize] == 2 {
                        return Err(bad(format!(
                            "level {} instruction {i} operand {k} reads slot s{s}, which does not hold {v:?} \
                             when the level begins or is written in the level",
                            l + 1
                        )));
                    }
                    touched[s as usize] = 1;
                }
                for (&s, v) in outs.iter().zip(op.outputs()) {
                    if !in_range(s) || touched[s as usize] != 0 {
                        return Err(bad(format!(
                            "level {} instruction {i} writes slot s{s}, out of range or already used in the level",
                            l + 1
                        )));
                    }
                    touched[s as usize] = 2;
                    writes.push((s, v));
                }
            }
            for &i in &sched.order[level] {
                for &s in self.instrs[i as usize].slots(&sched.slots.args).0 {
                    touched[s as usize] = 0;
                }
            }
            for (s, v) in writes.drain(..) {
                touched[s as usize] = 0;
                content[s as usize] = Some(v);
            }
        }
        for (&s, &v) in sched.slots.output_slots.iter().zip(&graph.outputs) {
            if s == NO_SLOT || !in_range(s) || content[s as usize] != Some(v) {
                return Err(bad(format!("output {v:?} is not in its slot s{s} at the end")));
            }
        }
        Ok(())
    }

    /// Checks that [`Self::source_operation`] is a permutation of the instructions.
    fn verify_source(&self) -> GraphResult<()> {
        if self.source.is_empty() {
            return Ok(());
        }
        let bad = |message: String| GraphError::Invalid { phase: "compiled program", message };
        if self.source.len() != self.instrs.len() {
            return Err(bad("the source-operation column's length differs from the instruction count".into()));
        }
        let mut seen = vec![false; self.instrs.len()];
        for (i, &op) in self.source.iter().enumerate() {
            if op as usize >= seen.len() || std::mem::replace(&mut seen[op as usize], true) {
                return Err(bad(format!("instruction {i}'s source operation op{op} is out of range or repeated")));
            }
        }
        Ok(())
    }

    /// Structural checks: arities match the operations, slots are in range, every read
    /// slot has been written earlier. [`try_compile`] runs it on every program it returns
    /// (the sequential evaluator relies on it).
    pub fn verify(&self) -> GraphResult<()> {
        let bad = |message: String| GraphError::Invalid { phase: "compiled program", message };
        let mut written = bitvec::vec::BitVec::<usize>::repeat(false, self.slots.slot_count);
        for &s in &self.slots.input_slots {
            if s != NO_SLOT {
                if s as usize >= self.slots.slot_count {
                    return Err(bad(format!("input slot s{s} out of range")));
                }
                written.set(s as usize, true);
            }
        }
        if self.ops.len() != self.instrs.len() {
            return Err(bad("operation and instruction counts differ".into()));
        }
        for (i, op) in self.ops.iter().enumerate() {
            if self.instrs[i].end() > self.slots.args.len() {
                return Err(bad(format!("instruction {i}'s arguments run past the argument pool")));
            }
            let (ins, outs) = self.instr_args(i);
            if ins.len() != op.input_count() || outs.len() != op.output_count() {
                return Err(bad(format!("instruction {i} arity differs from its operation")));
            }
            if let Some(s) = ins.iter().find(|&&s| s as usize >= self.slots.slot_count || !written[s as usize]) {
                return Err(bad(format!("instruction {i} reads slot s{s} before any write")));
            }
            for &s in outs {
                if s as usize >= self.slots.slot_count || ins.contains(&s) {
                    return Err(bad(format!("instruction {i} writes slot s{s} out of range or aliasing an operand")));
                }
                written.set(s as usize, true);
            }
        }
        if let Some(s) =
            self.slots.output_slots.iter().find(|&&s| s as usize >= self.slots.slot_count || !written[s as usize])
        {
            return Err(bad(format!("output slot s{s} is never written")));
        }
        check_runs(&self.runs, &self.run_ops, &self.ops, &self.instrs).map_err(&bad)?;
        self.slots.check_output_moves().map_err(bad)
    }
}

impl<Op: GraphOperation> fmt::Debug for CompiledProgram<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledProgram")
            .field("instructions", &self.instrs.len())
            .field("slots", &self.slots.slot_count)
            .field("inputs", &self.slots.input_slots.len())
            .field("outputs", &self.slots.output_slots.len())
            .finish()
    }
}
