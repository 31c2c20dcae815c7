//! Evaluation of a [`CompiledProgram`] (sequential).
//!
//! Input: a program and one operand per input, in [`CompiledProgram::input_keys`] order.
//! Output: one operand per output. Slots live in an [`EvalState`] that can be kept and
//! reused across runs, so repeated evaluation allocates only its result vector.
//! Operands are gathered on the stack (no per-node allocation for up to four inputs),
//! and outputs go through one reused buffer via
//! [`EvaluableGraphOperation::eval_into`]. Complexity: `O(instructions + operands)`.

use smallvec::SmallVec;

use crate::compile::{CompiledProgram, NO_SLOT};
use crate::error::{GraphError, GraphResult};
use crate::operation::{EvaluableGraphOperation, Label};

/// Reusable evaluation scratch: the slot vector and the output buffer.
pub struct EvalState<T> {
    slots: Vec<Option<T>>,
    out: Vec<T>,
}

impl<T> Default for EvalState<T> {
    fn default() -> Self {
        EvalState { slots: Vec::new(), out: Vec::new() }
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
    /// Evaluates the program on `inputs` (in [`Self::input_keys`] order).
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
        if inputs.len() != self.input_slots.len() {
            return Err(GraphError::InputCountMismatch { expected: self.input_slots.len(), found: inputs.len() });
        }
        let EvalState { slots, out } = state;
        slots.clear();
        slots.resize_with(self.slot_count, || None);
        for (&s, &x) in self.input_slots.iter().zip(inputs) {
            if s != NO_SLOT {
                slots[s as usize] = Some(x.clone());
            }
        }
        for (i, op) in self.ops.iter().enumerate() {
            let (ins, outs) = self.instr_args(i);
            out.clear();
            eval_instruction(op, ctx, slots, ins, out);
            if let ([s], 1) = (outs, out.len()) {
                // The common case: one output, moved straight into its slot.
                slots[*s as usize] = out.pop();
                continue;
            }
            if out.len() != outs.len() {
                return Err(GraphError::OutputCountMismatch {
                    operation: format!("{}", Label(op)),
                    expected: outs.len(),
                    found: out.len(),
                });
            }
            for (&s, v) in outs.iter().zip(out.drain(..)) {
                slots[s as usize] = Some(v);
            }
        }
        let result = self
            .output_slots
            .iter()
            .zip(&self.output_move)
            .map(|(&s, &mv)| {
                let slot = &mut slots[s as usize];
                if mv { slot.take() } else { slot.clone() }.expect("output slots are written (verified at compile)")
            })
            .collect();
        slots.clear();
        Ok(result)
    }
}

#[inline(always)]
fn get<T>(slots: &[Option<T>], s: u32) -> &T {
    slots[s as usize].as_ref().expect("operand slots are written before use (verified at compile)")
}

/// Gathers operand references on the stack and evaluates one instruction into `out`.
#[inline(always)]
pub(crate) fn eval_instruction<Op: EvaluableGraphOperation>(
    op: &Op,
    ctx: &mut Op::Context,
    slots: &[Option<Op::Operand>],
    ins: &[u32],
    out: &mut Vec<Op::Operand>,
) {
    let n = ins.len();
    if n.wrapping_sub(1) < 2 {
        // One or two operands, without branching on which: a unary operation reads its
        // operand twice and sees a one-element slice.
        let refs = [get(slots, ins[0]), get(slots, ins[n - 1])];
        op.eval_into(ctx, &refs[..n], out)
    } else if n == 0 {
        op.eval_into(ctx, &[], out)
    } else {
        let refs: SmallVec<[&Op::Operand; 8]> = ins.iter().map(|&s| get(slots, s)).collect();
        op.eval_into(ctx, &refs, out)
    }
}
