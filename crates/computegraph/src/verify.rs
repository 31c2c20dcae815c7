//! Verifiers for the graph phases. The backend's are beside their types: the slot
//! program's structural check in `program.rs` (`Program::verify`, the only maker of a
//! `VerifiedProgram`), the parallel schedule's in `schedule.rs` (`Schedule::verify`, the
//! only maker of a `VerifiedSchedule`), both run in every build because the evaluators'
//! `unsafe` rests on them, and the checks against the graph in `compile.rs`
//! ([`CompiledProgram::verify_against`](crate::CompiledProgram::verify_against)). Each
//! verifier here runs after its phase in debug builds and in tests.
//!
//! [`Graph`] checklist:
//! 1. every column has one entry per value / operation (keys fully interned);
//! 2. operation `o`'s operands are local values created before its first output, or
//!    valid external indices; their count is `input_count()`; a linear mask matches;
//! 3. operation outputs are `output_count()` consecutive values whose definitions point
//!    back at `(o, slot)` (in a `Graph`: at `o`, and no other value points at an
//!    operation), and whose keys are the operation key's outputs;
//! 4. inputs are the values defined as inputs, in order; outputs are in range.
//!
//! [`MaterializedGraph`] checklist: 2 and 3 with materialized ids, operations' outputs in
//! operation order (which `dispatch.rs` relies on); no two values share a
//! key; the inputs are the first values and the external values the next ones, the only
//! values with no operation (`value_op`), and every other value is an output of the
//! operation it names; `inputs` lists exactly the input values, in order, parallel to
//! `input_keys`, and `externals` the external values after them, in order, parallel to
//! `external_keys` (derived keys, each interning to its value's key, in increasing key
//! order).

use rustc_hash::FxHashSet;

use crate::error::{GraphError, GraphResult};
use crate::graph::{Graph, InputRef};
use crate::key::ValueKey;
use crate::materialize::{MaterializedGraph, ValueId};
use crate::operation::GraphOperation;

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
                if key.output_key_id(slot as u8) != Some(self.value_key[v]) {
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
            if !seen.insert(self.value_key[v]) {
                return Err(bad(format!("{v:?} duplicates the key {:?}", self.value_key[v])));
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
            if self.interner.derived_key_id(operation, *output_slot, k).ok() != Some(self.value_key[v]) {
                return Err(bad(format!("external key {k:?} is not the key of {v:?}")));
            }
        }
        if self.externals.windows(2).any(|w| self.value_key[w[0]] >= self.value_key[w[1]]) {
            return Err(bad("external values are not in increasing key order".into()));
        }
        if let Some(v) = self.outputs.iter().find(|v| v.index() >= n_values) {
            return Err(bad(format!("output {v:?} does not exist")));
        }
        Ok(())
    }
}
