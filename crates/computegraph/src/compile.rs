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
//! builds a `Program` and `Program::verify` (structural checks the evaluators' `unsafe`
//! rests on) turns it into one, in every build. Slots are `SlotId`s, instructions
//! `InstrId`s; during slot assignment a value's last use is an `Option<InstrId>` (`None`:
//! no instruction reads it, or no longer; a program output's is the instruction after the
//! last, read by the output gather).
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

use crate::dataflow::Planned;
use crate::dispatch::dispatch_order;
use crate::error::{GraphError, GraphResult};
use crate::id::{Id, IdVec, InstrId, SlotId};
use crate::key::{KeyInterner, ValueKey};
use crate::materialize::{MaterializedGraph, OperationId, ValueId};
use crate::operation::GraphOperation;
use crate::prefetch::{FarOperands, prefetch_entry};
use crate::program::{Instr, Program, Run, SlotProgram, output_moves, runs};
use crate::schedule::{Step, VerifiedSchedule, schedule};

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
    /// The slot program, verified (`program.rs`): operations, instruction words, runs and
    /// slots. Evaluation reads it without checks, on the strength of that verification.
    pub(crate) code: Planned<Op>,
    /// Whether sequential evaluation prefetches the operand slots of instructions ahead:
    /// when operands lie far from their readers (`prefetch.rs`) and the slot file is
    /// larger than [`PREFETCH_SLOT_BYTES`], so that their slots are likely not cached.
    pub(crate) prefetch_slots: bool,
    /// The materialized operation (its index) of each instruction, or empty when
    /// instruction `i` is operation `i` (see `dispatch.rs`). Plain `u32`s, as `dispatch.rs`
    /// sorts them: building `OperationId`s there cost compile 2% more instructions. Read
    /// through [`Self::source_of`].
    pub(crate) source: Vec<u32>,
    pub(crate) input_keys: Vec<Op::InputKey>,
    pub(crate) input_index: FxHashMap<Op::InputKey, usize>,
    /// Keys of the external values, which `eval` takes after the inputs (empty unless the graph
    /// came from [`try_materialize_fragment`](crate::try_materialize_fragment)).
    pub(crate) external_keys: Vec<ValueKey<Op>>,
    pub(crate) output_keys: Vec<ValueKey<Op>>,
    /// The level schedule and its own slots, for parallel evaluation (`schedule.rs`),
    /// computed on first use so that sequential users do not pay for it.
    pub(crate) schedule: OnceLock<GraphResult<VerifiedSchedule>>,
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
    let n_ops = graph.operation_count();
    // Instruction `n_ops` stands for the reads of the outputs after the last instruction
    // (`Live::last_use`), so it must be an id too.
    let Some(after_last) = InstrId::try_new(n_ops) else {
        return Err(GraphError::IdSpaceExhausted { space: "instruction" });
    };
    let source = dispatch_order(graph).unwrap_or_default();
    let op_at = |pos: usize| OperationId::new(if source.is_empty() { pos } else { source[pos] as usize });
    // Per value: the last instruction that reads it, then its slot.
    let mut live: IdVec<ValueId, Live> = IdVec::from_elem(Live { last_use: None, slot: None }, graph.value_count());
    // Liveness, and whether operands are far enough from their readers for slot
    // assignment to prefetch their entries (`prefetch.rs`).
    let mut far = FarOperands::new(graph.inputs.len() + graph.externals.len());
    for pos in 0..n_ops {
        let op = op_at(pos);
        let here = Some(InstrId::new(pos));
        let reader = graph.op_first_output[op].index();
        for &v in graph.op_inputs.get(op.index()) {
            live[v].last_use = here;
            far.note(v.index(), reader);
        }
    }
    let prefetch = far.decide();
    let prefetch_operands = |live: &IdVec<ValueId, Live>, pos: usize| {
        if pos < n_ops {
            for v in graph.op_inputs.get(op_at(pos).index()) {
                prefetch_entry(live.raw(), v.index());
            }
        }
    };
    for &v in &graph.outputs {
        live[v].last_use = Some(after_last);
    }

    let mut alloc = SlotAllocator::default();
    // Positional inputs: the inputs, then the external values (fragment materialization).
    let mut input_slots = Vec::with_capacity(graph.inputs.len() + graph.externals.len());
    for &v in graph.inputs.iter().chain(&graph.externals) {
        let l = &mut live[v];
        let s = if l.last_use.is_none() { None } else { Some(alloc.take()?) };
        l.slot = s;
        input_slots.push(s);
    }

    // Plain vectors while filling (an `IdVec` push checks the id space, which `after_last`
    // already did), made columns at the end without a copy.
    let mut ops = Vec::with_capacity(n_ops);
    let mut instrs = Vec::with_capacity(n_ops);
    let mut args: Vec<SlotId> = Vec::with_capacity(graph.op_inputs.items().len() + graph.value_count());
    for pos in 0..n_ops {
        if prefetch {
            prefetch_operands(&live, pos + AHEAD);
        }
        let here = Some(InstrId::new(pos));
        let op_id = op_at(pos);
        let op = graph.op(op_id);
        let inputs = graph.op_inputs.get(op_id.index());
        let start = u32::try_from(args.len()).map_err(|_| GraphError::IdSpaceExhausted { space: "argument" })?;
        for &v in inputs {
            args.push(live[v].slot.expect("an operand is defined, so it has a slot, before its readers"));
        }
        let outputs = graph.op_outputs(op_id);
        let n_out = outputs.len();
        for v in graph.op_outputs(op_id) {
            let s = alloc.take()?;
            live[v].slot = Some(s);
            args.push(s);
        }
        // Free operands whose last reader this is (once, even if read twice here: the
        // value is read no more, so its last use is cleared).
        for &v in inputs {
            let l = &mut live[v];
            if l.last_use == here {
                l.last_use = None;
                alloc.free(l.slot);
            }
        }
        // Outputs nobody reads are dead at once.
        for v in outputs {
            let l = &live[v];
            if l.last_use.is_none() {
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

    let output_slots: Vec<SlotId> =
        graph.outputs.iter().map(|&v| live[v].slot.expect("an output is kept, so it has a slot at the end")).collect();
    let output_move = output_moves(&output_slots);
    let input_keys = graph.input_keys.clone();
    let input_index = input_keys.iter().enumerate().map(|(i, k)| (k.clone(), i)).collect();
    let (runs, run_ops) = runs(&ops, &instrs);
    let slot_count = alloc.next as usize;
    let code = Program {
        runs,
        run_ops,
        ops: ops.into_iter().collect(),
        instrs: instrs.into_iter().collect(),
        slots: SlotProgram { args, input_slots, output_slots, output_move, slot_count },
    };
    // The evaluators read slots unchecked on the strength of this verification (`eval.rs`
    // takes a `VerifiedProgram`), so it runs in every build; a failure is an internal error.
    let code = Planned::new(code.verify()?);
    let program = CompiledProgram {
        interner: Arc::clone(&graph.interner),
        code,
        prefetch_slots: prefetch && slot_count.saturating_mul(std::mem::size_of::<Op::Operand>()) > PREFETCH_SLOT_BYTES,
        source,
        input_keys,
        input_index,
        external_keys: graph.external_keys.clone(),
        output_keys: graph.output_keys(),
        schedule: OnceLock::new(),
    };
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
    /// The last instruction that reads the value: `None` when none does (or no longer
    /// will: it is cleared when the slot is freed), the instruction after the last one for
    /// a program output, which the output gather reads after every instruction.
    last_use: Option<InstrId>,
    /// The value's slot, once it has one (`None` for an input no instruction reads).
    slot: Option<SlotId>,
}

#[derive(Default)]
struct SlotAllocator {
    free: Vec<SlotId>,
    next: u32,
}

impl SlotAllocator {
    #[inline]
    fn take(&mut self) -> GraphResult<SlotId> {
        if let Some(s) = self.free.pop() {
            return Ok(s);
        }
        let s = SlotId::try_new(self.next as usize).ok_or(GraphError::IdSpaceExhausted { space: "slot" })?;
        self.next += 1;
        Ok(s)
    }
    #[inline]
    fn free(&mut self, s: Option<SlotId>) {
        if let Some(s) = s {
            self.free.push(s);
        }
    }
}

impl<Op: GraphOperation> CompiledProgram<Op> {
    /// Number of instructions.
    pub fn instruction_count(&self) -> usize {
        self.code.instrs.len()
    }
    /// Number of slots evaluation needs.
    pub fn slot_count(&self) -> usize {
        self.code.slots.slot_count
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
        assert!(instruction < self.code.instrs.len(), "instruction {instruction} out of range");
        self.source_of(InstrId::new(instruction))
    }
    /// [`Self::source_operation`] of an instruction id.
    fn source_of(&self, i: InstrId) -> OperationId {
        OperationId::new(if self.source.is_empty() { i.index() } else { self.source[i.index()] as usize })
    }
    /// The parallel schedule, computed on first use (a linear pass; see `schedule.rs`).
    /// It is built from, and checked against, this program's verified code, which never
    /// changes: so the schedule's checks stay true for the instructions `eval.rs` runs.
    pub(crate) fn schedule(&self) -> GraphResult<&VerifiedSchedule> {
        self.schedule
            .get_or_init(|| {
                let code = &self.code;
                let cost = code.cost_hints();
                let slots = &code.slots;
                schedule(
                    code.ops.raw(),
                    code.instrs.raw(),
                    &slots.args,
                    &slots.input_slots,
                    &slots.output_slots,
                    slots.slot_count,
                    &cost,
                )
            })
            .as_ref()
            .map_err(Clone::clone)
    }
    /// Whether [`Self::eval_parallel`] evaluates this program by dependency (an instruction
    /// starts when its operands are ready; `dataflow.rs`) rather than level by level: when
    /// the mean [`cost_hint`](GraphOperation::cost_hint) per instruction is at least
    /// [`DATAFLOW_MIN_MEAN_COST`](crate::DATAFLOW_MIN_MEAN_COST). Computes the schedule if
    /// needed.
    ///
    /// # Panics
    /// If the schedule would exhaust the `u32` slot or value space.
    pub fn parallel_by_dependency(&self) -> bool {
        self.schedule().unwrap_or_else(|e| panic!("{e}")).mean_cost() >= crate::DATAFLOW_MIN_MEAN_COST
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
    /// The external keys (derived values read from outside a fragment materialized alone,
    /// [`try_materialize_fragment`](crate::try_materialize_fragment)), in the order `eval`
    /// takes them after the inputs. Empty for a graph from `materialize_merge`.
    pub fn external_keys(&self) -> &[ValueKey<Op>] {
        &self.external_keys
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
    ///
    /// A program with external values cannot be bound this way (a
    /// [`GraphError::UnboundInput`] names the first one): use
    /// [`Self::bind_inputs_and_externals`].
    pub fn bind_inputs<'a, F>(&self, lookup: F) -> GraphResult<Vec<&'a Op::Operand>>
    where
        F: FnMut(&Op::InputKey) -> Option<&'a Op::Operand>,
    {
        self.bind_inputs_and_externals(lookup, |_| None)
    }

    /// Gathers the program's inputs by key, then its external values by key: `inputs` is
    /// asked once per input key, `externals` once per external key. See
    /// [`try_materialize_fragment`](crate::try_materialize_fragment) for an example.
    pub fn bind_inputs_and_externals<'a, F, L>(
        &self,
        mut inputs: F,
        mut externals: L,
    ) -> GraphResult<Vec<&'a Op::Operand>>
    where
        F: FnMut(&Op::InputKey) -> Option<&'a Op::Operand>,
        L: FnMut(&ValueKey<Op>) -> Option<&'a Op::Operand>,
    {
        let mut bound = Vec::with_capacity(self.input_keys.len() + self.external_keys.len());
        for k in &self.input_keys {
            bound.push(inputs(k).ok_or_else(|| GraphError::UnboundInput { key: format!("{k:?}") })?);
        }
        for k in &self.external_keys {
            bound.push(
                externals(k).ok_or_else(|| GraphError::UnboundInput { key: format!("{k:?} (an external value)") })?,
            );
        }
        Ok(bound)
    }

    /// Bytes held by the program's columns: the sum of [`CompiledProgram::column_bytes`].
    pub fn heap_bytes(&self) -> usize {
        self.column_bytes().iter().map(|&(_, b)| b).sum()
    }

    /// Bytes held by each of the program's columns, by name (allocated capacity; the
    /// parallel schedule and the dataflow plan only once an evaluation has built them).
    /// What `docs/ARCHITECTURE.md` states per node, and the memory report of `benches`
    /// prints.
    pub fn column_bytes(&self) -> Vec<(&'static str, usize)> {
        let code = &self.code;
        let slots = &code.slots;
        let keys = (self.external_keys.capacity() + self.output_keys.capacity()) * size_of::<ValueKey<Op>>()
            + self.input_keys.capacity() * size_of::<Op::InputKey>()
            + self.input_index.capacity() * (size_of::<(Op::InputKey, usize)>() + 1);
        vec![
            ("ops", code.ops.heap_bytes() + code.run_ops.capacity() * size_of::<Op>()),
            ("instrs", code.instrs.heap_bytes()),
            ("runs", code.runs.capacity() * size_of::<Run>()),
            ("args", slots.args.capacity() * size_of::<SlotId>()),
            (
                "input and output slots",
                slots.input_slots.capacity() * size_of::<Option<SlotId>>()
                    + slots.output_slots.capacity() * size_of::<SlotId>()
                    + slots.output_move.capacity(),
            ),
            ("source", self.source.capacity() * 4),
            ("input, external and output keys", keys),
            ("parallel schedule", self.schedule.get().and_then(|s| s.as_ref().ok()).map_or(0, |s| s.heap_bytes())),
            ("dataflow plan", code.plan_bytes()),
        ]
    }

    /// Instruction `i`'s operand and output slots.
    #[inline]
    pub(crate) fn instr_args(&self, i: InstrId) -> (&[SlotId], &[SlotId]) {
        self.code.instrs[i].slots(&self.code.slots.args)
    }

    /// Checks that the program computes `graph`: simulates slot contents and confirms that
    /// every read finds the value the graph names, and every output its value.
    pub fn verify_against(&self, graph: &MaterializedGraph<Op>) -> GraphResult<()> {
        let bad = |message: String| GraphError::Invalid { phase: "compiled program", message };
        self.verify()?;
        let slots = &self.code.slots;
        let n_inputs = graph.inputs.len() + graph.externals.len();
        if self.code.instrs.len() != graph.operation_count() || slots.input_slots.len() != n_inputs {
            return Err(bad("instruction or input count differs from the graph".into()));
        }
        self.verify_source()?;
        let mut content: IdVec<SlotId, Option<ValueId>> = IdVec::from_elem(None, slots.slot_count);
        for (s, &v) in slots.input_slots.iter().zip(graph.inputs.iter().chain(&graph.externals)) {
            if let &Some(s) = s {
                content[s] = Some(v);
            }
        }
        for i in self.code.instrs.ids() {
            let op = graph.operation(self.source_of(i));
            let (ins, outs) = self.instr_args(i);
            for (k, (&s, &v)) in ins.iter().zip(op.inputs()).enumerate() {
                if content[s] != Some(v) {
                    return Err(bad(format!(
                        "instruction {i:?} operand {k} reads slot {s:?} holding {:?}, expected {v:?}",
                        content[s]
                    )));
                }
            }
            for (&s, v) in outs.iter().zip(op.outputs()) {
                content[s] = Some(v);
            }
        }
        for (&s, &v) in slots.output_slots.iter().zip(&graph.outputs) {
            if content[s] != Some(v) {
                return Err(bad(format!("output {v:?} is not in its slot {s:?} at the end")));
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
        let code = &self.code;
        let n = code.instrs.len();
        if n != graph.operation_count()
            || sched.slots.input_slots.len() != graph.inputs.len() + graph.externals.len()
            || sched.slots.output_slots.len() != graph.outputs.len()
        {
            return Err(bad("instruction or input count differs from the graph".into()));
        }
        if sched.slots.args.len() != code.slots.args.len() || sched.order.len() != n || sched.cost_prefix.len() != n + 1
        {
            return Err(bad("column lengths differ from the program".into()));
        }
        if sched.level_start.first() != Some(&0)
            || sched.level_start.last() != Some(&(n as u32))
            || sched.level_start.windows(2).any(|w| w[0] > w[1])
        {
            return Err(bad("level boundaries are not increasing from 0 to the instruction count".into()));
        }
        let mut placed: IdVec<InstrId, bool> = IdVec::from_elem(false, n);
        for &i in &sched.order {
            if placed.get(i).is_none() || std::mem::replace(&mut placed[i], true) {
                return Err(bad(format!("order is not a permutation (instruction {i:?})")));
            }
        }
        self.verify_source()?;
        // A compact step's operation is its instruction's (the evaluator runs the
        // representative in its place).
        for (k, (step, &i)) in sched.steps.iter().zip(&sched.order).enumerate() {
            if step.op != Step::GENERAL {
                let rep = sched.op_rep[(step.op & !Step::UNARY) as usize];
                if code.ops[rep] != code.ops[i] {
                    return Err(bad(format!("step {k} runs the operation of instruction {rep:?}, not of {i:?}")));
                }
            }
        }
        let ops: IdVec<InstrId, _> = code.instrs.ids().map(|i| graph.operation(self.source_of(i))).collect();
        let in_range = |s: SlotId| sched.slots.in_range(s);
        let mut content: IdVec<SlotId, Option<ValueId>> = IdVec::from_elem(None, sched.slots.slot_count);
        for (s, &v) in sched.slots.input_slots.iter().zip(graph.inputs.iter().chain(&graph.externals)) {
            if let &Some(s) = s {
                if !in_range(s) {
                    return Err(bad(format!("input slot {s:?} out of range")));
                }
                content[s] = Some(v);
            }
        }
        // 0: untouched in this level, 1: read, 2: written.
        let mut touched: IdVec<SlotId, u8> = IdVec::from_elem(0, sched.slots.slot_count);
        let mut writes: Vec<(SlotId, ValueId)> = Vec::new();
        for l in 0..sched.level_count() {
            let level = sched.level(l);
            for &i in &sched.order[level.clone()] {
                let (ins, outs) = code.instrs[i].slots(&sched.slots.args);
                let op = &ops[i];
                if ins.len() != op.inputs().len() || outs.len() != op.outputs().len() {
                    return Err(bad(format!("instruction {i:?} arity differs from the graph")));
                }
                for (k, (&s, &v)) in ins.iter().zip(op.inputs()).enumerate() {
                    if !in_range(s) || content[s] != Some(v) || touched[s] == 2 {
                        return Err(bad(format!(
                            "level {} instruction {i:?} operand {k} reads slot {s:?}, which does not hold {v:?} \
                             when the level begins or is written in the level",
                            l + 1
                        )));
                    }
                    touched[s] = 1;
                }
                for (&s, v) in outs.iter().zip(op.outputs()) {
                    if !in_range(s) || touched[s] != 0 {
                        return Err(bad(format!(
                            "level {} instruction {i:?} writes slot {s:?}, out of range or already used in the level",
                            l + 1
                        )));
                    }
                    touched[s] = 2;
                    writes.push((s, v));
                }
            }
            for &i in &sched.order[level] {
                for &s in code.instrs[i].slots(&sched.slots.args).0 {
                    touched[s] = 0;
                }
            }
            for (s, v) in writes.drain(..) {
                touched[s] = 0;
                content[s] = Some(v);
            }
        }
        for (&s, &v) in sched.slots.output_slots.iter().zip(&graph.outputs) {
            if !in_range(s) || content[s] != Some(v) {
                return Err(bad(format!("output {v:?} is not in its slot {s:?} at the end")));
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
        if self.source.len() != self.code.instrs.len() {
            return Err(bad("the source-operation column's length differs from the instruction count".into()));
        }
        let mut seen: IdVec<OperationId, bool> = IdVec::from_elem(false, self.code.instrs.len());
        for (i, op) in self.code.instrs.ids().map(|i| (i, self.source_of(i))) {
            if seen.get(op).is_none() || std::mem::replace(&mut seen[op], true) {
                return Err(bad(format!("instruction {i:?}'s source operation {op:?} is out of range or repeated")));
            }
        }
        Ok(())
    }

    /// Structural checks: arities match the operations, slots are in range, every read
    /// slot has been written earlier (the checklist of `Program::verify` in `program.rs`).
    /// [`try_compile`] runs them on every program it returns (the evaluators rely on
    /// them), so on a program of this crate they always pass.
    pub fn verify(&self) -> GraphResult<()> {
        self.code.check()
    }
}

impl<Op: GraphOperation> fmt::Debug for CompiledProgram<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledProgram")
            .field("instructions", &self.code.instrs.len())
            .field("slots", &self.code.slots.slot_count)
            .field("inputs", &self.code.slots.input_slots.len())
            .field("outputs", &self.code.slots.output_slots.len())
            .finish()
    }
}
