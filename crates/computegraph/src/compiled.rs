//! `CompiledProgram`: the compiled program, its accessors, its checks and its dumps; every
//! way to evaluate it is in one other file, `eval.rs`.
//!
//! A compiled program owns its verified slot code (`VerifiedProgram`, `verify.rs`) and the
//! two structures parallel evaluation builds from that code on first use: the level
//! schedule (`schedule.rs`, verified by `verify::verify_schedule` into a
//! `VerifiedSchedule`) and the dataflow plan (`dataflow.rs`). All three are private
//! fields, set once and never changed, so the schedule and the plan describe exactly the
//! instructions that run: **Architecture Invariant:** no code outside this file can pair a
//! schedule or a plan with another program's code (the evaluators read them through
//! `code()`, `schedule()` and `dataflow_plan()`, which build them from that code). Every
//! evaluation method, [`CompiledProgram::eval`] and [`CompiledProgram::eval_parallel`] and
//! their forms, is `eval.rs`'s, beside the loops they run (the sequential loop and the level
//! evaluator, methods of `VerifiedProgram`); evaluation by dependency is `dataflow.rs`. The
//! program's verifiers are `verify.rs`'s; the public `verify*` methods here forward to
//! them. The text and DOT dumps of the program are here too (the graphs' are `dump.rs`).
//!
//! Nothing here compiles: [`compile`](crate::compile) (`compile.rs`) builds the verified
//! code and hands it to [`CompiledProgram::new`].

use std::fmt::{self, Write};
use std::sync::{Arc, OnceLock};

use rustc_hash::FxHashMap;

use crate::dataflow::{self, DataflowPlan};
use crate::dispatch::source_of;
use crate::dump::escape;
use crate::error::{GraphError, GraphResult};
use crate::id::{IdVec, InstrId, SlotId};
use crate::key::{KeyInterner, ValueKey};
use crate::materialize::{MaterializedGraph, OperationId};
use crate::operation::{GraphOperation, Label};
use crate::program::Run;
use crate::schedule::schedule;
use crate::verify::{
    VerifiedProgram, VerifiedSchedule, check_program_against, check_schedule_against, recheck_program, verify_schedule,
};

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
    interner: Arc<KeyInterner<Op>>,
    /// The slot program, verified (`verify.rs`): operations, instruction words, runs and
    /// slots. Evaluation reads it without checks, on the strength of that verification.
    code: VerifiedProgram<Op>,
    /// Whether sequential evaluation prefetches the operand slots of instructions ahead:
    /// when operands lie far from their readers (`prefetch.rs`) and the slot file is
    /// larger than [`PREFETCH_SLOT_BYTES`], so that their slots are likely not cached.
    prefetch_slots: bool,
    /// The materialized operation (its index) of each instruction, or empty when
    /// instruction `i` is operation `i` (see `dispatch.rs`). Plain `u32`s, as `dispatch.rs`
    /// sorts them: building `OperationId`s there cost compile 2% more instructions. Read
    /// through [`Self::source_of`].
    source: Vec<u32>,
    input_keys: Vec<Op::InputKey>,
    input_index: FxHashMap<Op::InputKey, usize>,
    /// Keys of the external values, which `eval` takes after the inputs (empty unless the graph
    /// came from [`try_materialize_fragment`](crate::try_materialize_fragment)).
    external_keys: Vec<ValueKey<Op>>,
    output_keys: Vec<ValueKey<Op>>,
    /// The level schedule and its own slots, for parallel evaluation (`schedule.rs`),
    /// computed on first use so that sequential users do not pay for it.
    schedule: OnceLock<GraphResult<VerifiedSchedule>>,
    /// The dataflow plan, for evaluation by dependency (`dataflow.rs`), built from `code`
    /// on the first run that chooses it.
    dataflow: OnceLock<GraphResult<DataflowPlan>>,
}

impl<Op: GraphOperation> CompiledProgram<Op> {
    /// The program of `code`, verified by the caller (`try_compile`), with what compile
    /// decided beside it: whether sequential evaluation prefetches operand slots, the
    /// source operation of each instruction (empty when instruction `i` is operation
    /// `i`), and the keys.
    pub(crate) fn new(
        interner: Arc<KeyInterner<Op>>,
        code: VerifiedProgram<Op>,
        prefetch_slots: bool,
        source: Vec<u32>,
        input_keys: Vec<Op::InputKey>,
        external_keys: Vec<ValueKey<Op>>,
        output_keys: Vec<ValueKey<Op>>,
    ) -> Self {
        let input_index = input_keys.iter().enumerate().map(|(i, k)| (k.clone(), i)).collect();
        CompiledProgram {
            interner,
            code,
            prefetch_slots,
            source,
            input_keys,
            input_index,
            external_keys,
            output_keys,
            schedule: OnceLock::new(),
            dataflow: OnceLock::new(),
        }
    }

    /// The dataflow plan, built from this program's code on first use (`dataflow::plan`).
    pub(crate) fn dataflow_plan(&self) -> GraphResult<&DataflowPlan> {
        self.dataflow.get_or_init(|| dataflow::plan(&self.code)).as_ref().map_err(Clone::clone)
    }

    /// The verified code, which the evaluators (`eval.rs`) run.
    #[inline(always)]
    pub(crate) fn code(&self) -> &VerifiedProgram<Op> {
        &self.code
    }

    /// Makes sequential evaluation go instruction by instruction with prefetching, as
    /// compile decides only for large slot files (for the evaluators' tests).
    #[cfg(test)]
    pub(crate) fn force_prefetch(&mut self) {
        self.prefetch_slots = true;
    }
}

impl<Op: GraphOperation> CompiledProgram<Op> {
    /// Number of instructions.
    pub fn instruction_count(&self) -> usize {
        self.code.program().instrs.len()
    }
    /// Number of slots evaluation needs.
    pub fn slot_count(&self) -> usize {
        self.code.program().slots.slot_count
    }
    /// Whether sequential evaluation prefetches operand slots a few instructions ahead,
    /// as compile decides for programs whose operands lie far from their readers in a
    /// slot file too large to stay cached. It only changes speed, never results.
    pub fn prefetches_operand_slots(&self) -> bool {
        self.prefetch_slots
    }
    /// The operation of the materialized graph that instruction `instruction` computes.
    /// Instructions run in a topological order of the materialized graph's operations,
    /// not necessarily in its own order (see [`compile`](crate::compile)).
    ///
    /// # Panics
    /// If `instruction` is not below [`Self::instruction_count`].
    pub fn source_operation(&self, instruction: usize) -> OperationId {
        assert!(instruction < self.code.program().instrs.len(), "instruction {instruction} out of range");
        source_of(&self.source, InstrId::new(instruction))
    }
    /// The parallel schedule, computed on first use (a linear pass; see `schedule.rs`).
    /// It is built from, and verified against, this program's verified code
    /// (`verify::verify_schedule`), which never changes: so the schedule's checks stay
    /// true for the instructions `eval.rs` runs.
    pub(crate) fn schedule(&self) -> GraphResult<&VerifiedSchedule> {
        self.schedule
            .get_or_init(|| {
                let code = self.code.program();
                let cost = code.cost_hints();
                let slots = &code.slots;
                let sched = schedule(
                    code.ops.raw(),
                    code.instrs.raw(),
                    &slots.args,
                    &slots.input_slots,
                    &slots.output_slots,
                    slots.slot_count,
                    &cost,
                )?;
                Ok(verify_schedule(sched, &self.code)?)
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
        self.schedule().unwrap_or_else(|e| panic!("{e}")).schedule().mean_cost() >= crate::DATAFLOW_MIN_MEAN_COST
    }
    /// Number of topological levels of the parallel schedule (an instruction's level is
    /// one more than the largest level of its operands' producers; inputs are level 0).
    /// Computes the schedule if no parallel evaluation has yet.
    ///
    /// # Panics
    /// If the schedule would exhaust the `u32` slot or value space.
    pub fn level_count(&self) -> usize {
        self.schedule().unwrap_or_else(|e| panic!("{e}")).schedule().level_count()
    }
    /// Number of slots parallel evaluation needs (its slot assignment is level-aware, so it
    /// may need more than [`Self::slot_count`]). Computes the schedule if needed.
    ///
    /// # Panics
    /// As [`Self::level_count`].
    pub fn parallel_slot_count(&self) -> usize {
        self.schedule().unwrap_or_else(|e| panic!("{e}")).schedule().slots.slot_count
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
        let code = self.code.program();
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
            (
                "parallel schedule",
                self.schedule.get().and_then(|s| s.as_ref().ok()).map_or(0, |s| s.schedule().heap_bytes()),
            ),
            ("dataflow plan", self.dataflow.get().and_then(|p| p.as_ref().ok()).map_or(0, DataflowPlan::heap_bytes)),
        ]
    }

    /// Instruction `i`'s operand and output slots.
    #[inline]
    fn instr_args(&self, i: InstrId) -> (&[SlotId], &[SlotId]) {
        let code = self.code.program();
        code.instrs[i].slots(&code.slots.args)
    }

    /// Checks that the program computes `graph`: simulates slot contents and confirms that
    /// every read finds the value the graph names, and every output its value
    /// (`verify::check_program_against`).
    pub fn verify_against(&self, graph: &MaterializedGraph<Op>) -> GraphResult<()> {
        Ok(check_program_against(&self.code, &self.source, graph)?)
    }

    /// Checks the parallel schedule against `graph`: `order` is a permutation of the
    /// instructions sorted by level, and, simulating slot contents level by level, every
    /// operand reads the value the graph names as it stood when the level began (so its
    /// producer is in an earlier level and its slot was not reused), no slot is written
    /// twice in a level or both written and read in one level, and every output ends in
    /// its slot (`verify::check_schedule_against`). Computes the schedule if needed.
    pub fn verify_parallel_against(&self, graph: &MaterializedGraph<Op>) -> GraphResult<()> {
        Ok(check_schedule_against(&self.code, self.schedule()?, &self.source, graph)?)
    }

    /// Structural checks: arities match the operations, slots are in range, every read
    /// slot has been written earlier (the program checklist of `verify.rs`).
    /// [`try_compile`](crate::try_compile) runs them on every program it returns (the
    /// evaluators rely on them), so on a program of this crate they always pass.
    pub fn verify(&self) -> GraphResult<()> {
        Ok(recheck_program(&self.code)?)
    }
}

impl<Op: GraphOperation> fmt::Debug for CompiledProgram<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledProgram")
            .field("instructions", &self.code.program().instrs.len())
            .field("slots", &self.code.program().slots.slot_count)
            .field("inputs", &self.code.program().slots.input_slots.len())
            .field("outputs", &self.code.program().slots.output_slots.len())
            .finish()
    }
}

impl<Op: GraphOperation> fmt::Display for CompiledProgram<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let code = self.code.program();
        writeln!(f, "program: {} instructions, {} slots", code.instrs.len(), code.slots.slot_count)?;
        let (inputs, externals) = code.slots.input_slots.split_at(self.input_keys.len());
        for (s, k) in inputs.iter().zip(&self.input_keys) {
            match s {
                None => writeln!(f, "  _ = input {k:?}")?,
                Some(s) => writeln!(f, "  {s:?} = input {k:?}")?,
            }
        }
        for (s, k) in externals.iter().zip(&self.external_keys) {
            match s {
                None => writeln!(f, "  _ = external {k:?}")?,
                Some(s) => writeln!(f, "  {s:?} = external {k:?}")?,
            }
        }
        for (i, op) in code.ops.iter_enumerated() {
            let (ins, outs) = self.instr_args(i);
            let outs: Vec<String> = outs.iter().map(|s| format!("{s:?}")).collect();
            write!(f, "  {} = {}", outs.join(", "), Label(op))?;
            for (j, s) in ins.iter().enumerate() {
                write!(f, "{}{s:?}", if j == 0 { " " } else { ", " })?;
            }
            writeln!(f)?;
        }
        let outs: Vec<String> = code.slots.output_slots.iter().map(|s| format!("{s:?}")).collect();
        writeln!(f, "  outputs: {}", outs.join(", "))
    }
}

impl<Op: GraphOperation> CompiledProgram<Op> {
    /// This program in Graphviz DOT: one node per instruction, edges through slots.
    pub fn to_dot(&self) -> String {
        let mut s = String::from("digraph program {\n  rankdir=TB;\n  node [fontname=\"monospace\"];\n");
        // Which node last wrote each slot.
        let code = self.code.program();
        let mut writer: IdVec<SlotId, String> = IdVec::from_elem(String::new(), code.slots.slot_count);
        let keys =
            self.input_keys.iter().map(|k| format!("{k:?}")).chain(self.external_keys.iter().map(|k| format!("{k:?}")));
        for (i, (slot, k)) in code.slots.input_slots.iter().zip(keys).enumerate() {
            let style = if i < self.input_keys.len() { "" } else { ", style=dashed" };
            let _ = writeln!(s, "  in{i} [shape=ellipse{style}, label=\"{}\"];", escape(&k));
            if let &Some(slot) = slot {
                writer[slot] = format!("in{i}");
            }
        }
        for (id, op) in code.ops.iter_enumerated() {
            let i = id.index();
            let (ins, outs) = self.instr_args(id);
            let _ = writeln!(s, "  i{i} [shape=box, label=\"{}\"];", escape(&format!("{}", Label(op))));
            for &slot in ins {
                let _ = writeln!(s, "  {} -> i{i} [label=\"{slot:?}\"];", writer[slot]);
            }
            for &slot in outs {
                writer[slot] = format!("i{i}");
            }
        }
        for (i, &slot) in code.slots.output_slots.iter().enumerate() {
            let _ = writeln!(s, "  out{i} [shape=plaintext, label=\"out {i}\"];\n  {} -> out{i};", writer[slot]);
        }
        s.push_str("}\n");
        s
    }
}
