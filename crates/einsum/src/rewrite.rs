//! What the gradient program's rewrites (`reassoc.rs`, `fuse.rs`) share: an index of a
//! materialized program ([`Program`]: its operations in order, each value's defining
//! operation and its readers) and the rebuild ([`Program::rebuild`]) that copies the
//! program with some operations replaced by others.
//!
//! Input invariants: a materialized graph in topological order (materialize's output)
//! that reads no external value (a rebuild would have to name it again; [`Program::new`]
//! says `None`). Output invariants: the rebuilt program has the same inputs and outputs
//! (by position), materialized again (so equal operations are merged). Complexity:
//! `O(operations + operands)` for the index and for the rebuild.

use std::sync::Arc;

use computegraph::{
    GraphBuilder, LocalValueId, MaterializedGraph, MaterializedOperation, MaterializedValueDef, ValueId, ValueKey,
    ValueRef,
};
use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use crate::elem::Elem;
use crate::error::EinsumResult;
use crate::op::TensorOp;

/// A materialized program indexed for a rewrite.
pub(crate) struct Program<'g, T: Elem> {
    graph: &'g MaterializedGraph<TensorOp<T>>,
    /// The operations in program order (a rewrite names them by index).
    pub(crate) ops: Vec<MaterializedOperation<'g, TensorOp<T>>>,
    /// The operations reading each value, in program order.
    readers: FxHashMap<ValueId, SmallVec<[usize; 2]>>,
}

/// What [`Program::rebuild`]'s caller did at an operation of the old program.
pub(crate) enum Replaced {
    /// Nothing: the operation is copied.
    No,
    /// It added what stands for the operation's outputs (or nothing: it is dropped).
    Yes,
    /// An operand it needed is not made yet: the rebuild is given up.
    Missing,
}

/// The new program while [`Program::rebuild`] makes it: the builder, and the new value
/// that stands for each old one made so far.
pub(crate) struct Rebuilder<T: Elem> {
    pub(crate) builder: GraphBuilder<TensorOp<T>>,
    local: FxHashMap<ValueId, LocalValueId>,
}

impl<T: Elem> Rebuilder<T> {
    /// The new values standing for the old values `vs`, as operands; `None` if one is not
    /// made yet.
    pub(crate) fn operands(&self, vs: &[ValueId]) -> Option<SmallVec<[ValueRef<TensorOp<T>>; 3]>> {
        vs.iter().map(|v| self.local.get(v).map(|&l| ValueRef::Local(l))).collect()
    }

    /// Says that the new value `new` stands for the old value `old`.
    pub(crate) fn stands_for(&mut self, old: ValueId, new: LocalValueId) {
        self.local.insert(old, new);
    }
}

impl<'g, T: Elem> Program<'g, T> {
    /// The index of `graph`, or `None` when it reads external values.
    pub(crate) fn new(graph: &'g MaterializedGraph<TensorOp<T>>) -> Option<Self> {
        if !graph.externals().is_empty() {
            return None;
        }
        let ops: Vec<_> = graph.operations().collect();
        let mut readers: FxHashMap<ValueId, SmallVec<[usize; 2]>> = FxHashMap::default();
        for (i, op) in ops.iter().enumerate() {
            for &v in op.inputs() {
                readers.entry(v).or_default().push(i);
            }
        }
        Some(Program { graph, ops, readers })
    }

    /// The operation defining `v` (`None`: an input).
    pub(crate) fn def(&self, v: ValueId) -> Option<usize> {
        match self.graph.value_def(v) {
            Some(MaterializedValueDef::Output { operation, .. }) => Some(operation.index()),
            _ => None,
        }
    }

    /// The operations reading `v`, in program order.
    pub(crate) fn readers(&self, v: ValueId) -> &[usize] {
        self.readers.get(&v).map_or(&[], |r| r.as_slice())
    }

    /// The first output of operation `i` (a contraction's only one).
    pub(crate) fn output(&self, i: usize) -> ValueId {
        self.ops[i].outputs().next().expect("a contraction has an output")
    }

    /// The program rebuilt in program order: at each operation `i`, `replace(i, rebuilder)`
    /// adds what stands for it ([`Replaced::Yes`]) or leaves it to be copied
    /// ([`Replaced::No`]); then materialized again with the same outputs. `None` when an
    /// operand is missing where it is needed.
    pub(crate) fn rebuild(
        &self,
        mut replace: impl FnMut(usize, &mut Rebuilder<T>) -> EinsumResult<Replaced>,
    ) -> EinsumResult<Option<MaterializedGraph<TensorOp<T>>>> {
        let mut r = Rebuilder {
            builder: GraphBuilder::with_interner(self.graph.interner().clone()),
            local: FxHashMap::default(),
        };
        for (&v, key) in self.graph.inputs().iter().zip(self.graph.input_keys()) {
            let l = r.builder.try_add_input(key.clone())?;
            r.stands_for(v, l);
        }
        for (i, op) in self.ops.iter().enumerate() {
            match replace(i, &mut r)? {
                Replaced::Yes => {}
                Replaced::Missing => return Ok(None),
                Replaced::No => {
                    let Some(inputs) = r.operands(op.inputs()) else { return Ok(None) };
                    let out = r.builder.try_add_operation(op.operation().clone(), inputs, op.role().clone())?;
                    for (v, &l) in op.outputs().zip(out.iter()) {
                        r.stands_for(v, l);
                    }
                }
            }
        }
        let Some(outputs) = self.graph.outputs().iter().map(|v| r.local.get(v).copied()).collect::<Option<Vec<_>>>()
        else {
            return Ok(None);
        };
        let graph = Arc::new(r.builder.try_build()?);
        let keys: Vec<ValueKey<TensorOp<T>>> = outputs.iter().map(|&v| graph.global_key(v)).collect();
        let view = computegraph::try_resolve(vec![graph])?;
        Ok(Some(computegraph::try_materialize_merge(&view, &keys)?))
    }
}
