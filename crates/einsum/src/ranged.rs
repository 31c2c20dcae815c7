//! The rewrite that reads each result's range where it is written ([`with_ranges`]): a
//! value-and-gradient program gets one `TensorOp::Range` per output, placed right after
//! the operation that defines the output, and the ranges as extra outputs after the
//! original ones. Compile keeps that order for costly operations (`dispatch.rs`), so run
//! on one thread each range reads its result while that is still in the cache of the
//! thread that wrote it (on a pool's threads, when its operand's step is done); read after the program, the chain of matrix
//! products' 55 MB of gradients came from memory at about 9 GB/s, a fifth of its
//! value-and-gradient time on one thread (docs/PERFORMANCE.md, "Each result's range read
//! where it is written").
//!
//! Input invariants: a materialized graph in topological order (materialize's output),
//! without external values. The rebuild interns on an interner of its own, so that the
//! key order materialize emits in is the order built here.
//!
//! Output invariants: the operations of the input in the same order, each followed by the
//! ranges of the outputs it defines; the ranges of outputs
//! that are inputs first; the outputs of the input, then one range per output, by
//! position. Complexity: one pass over the operations and one rebuild and
//! materialization of the program.

use computegraph::{
    GraphBuilder, KeyInterner, LocalValueId, MaterializedGraph, OperationRole, ValueId, ValueKey, ValueRef,
};
use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use crate::elem::Elem;
use crate::error::EinsumResult;
use crate::op::TensorOp;

/// `merged` with the range of each output read right after its last write (module docs),
/// materialized again: outputs `0..n` as before, then output `n + i` the range of output
/// `i`.
///
/// # Panics
/// On a graph with external values (`materialize_merge` makes none).
pub(crate) fn with_ranges<T: Elem>(
    merged: &MaterializedGraph<TensorOp<T>>,
) -> EinsumResult<MaterializedGraph<TensorOp<T>>> {
    assert!(merged.externals().is_empty(), "a merged program reads no external value");
    let is_output: rustc_hash::FxHashSet<ValueId> = merged.outputs().iter().copied().collect();
    // A fresh interner: materialize emits operations in key order, so on `merged`'s
    // interner, where every other operation already has a key, the ranges would all come
    // last. Alone on its interner the builder's local order is the key order.
    let mut b = GraphBuilder::<TensorOp<T>>::with_interner(KeyInterner::try_new()?);
    let mut local: FxHashMap<ValueId, LocalValueId> = FxHashMap::default();
    let mut range: FxHashMap<ValueId, LocalValueId> = FxHashMap::default();
    let mut add_range = |b: &mut GraphBuilder<TensorOp<T>>, v: ValueId, l: LocalValueId| -> EinsumResult<()> {
        if is_output.contains(&v) && !range.contains_key(&v) {
            let r = b.try_add_operation(TensorOp::Range, vec![ValueRef::Local(l)], OperationRole::Primary)?;
            range.insert(v, r[0]);
        }
        Ok(())
    };
    for (&v, key) in merged.inputs().iter().zip(merged.input_keys()) {
        let l = b.try_add_input(key.clone())?;
        local.insert(v, l);
        add_range(&mut b, v, l)?;
    }
    for op in merged.operations() {
        let operands: SmallVec<[ValueRef<TensorOp<T>>; 3]> =
            op.inputs().iter().map(|v| ValueRef::Local(local[v])).collect();
        let out = b.try_add_operation(op.operation().clone(), operands, op.role().clone())?;
        for (v, &l) in op.outputs().zip(out.iter()) {
            local.insert(v, l);
            add_range(&mut b, v, l)?;
        }
    }
    let outputs: Vec<LocalValueId> =
        merged.outputs().iter().map(|v| local[v]).chain(merged.outputs().iter().map(|v| range[v])).collect();
    let graph = std::sync::Arc::new(b.try_build()?);
    let keys: Vec<ValueKey<TensorOp<T>>> = outputs.iter().map(|&v| graph.global_key(v)).collect();
    let view = computegraph::try_resolve(vec![graph])?;
    Ok(computegraph::try_materialize_merge(&view, &keys)?)
}

#[cfg(test)]
mod tests {
    use computegraph::MaterializedValueDef;

    use super::*;

    /// The gradient program of a chain of products, as `Einsum::gradient` merges it.
    fn merged(e: &crate::Einsum<f64>, wrt: &[usize]) -> MaterializedGraph<TensorOp<f64>> {
        let keys: Vec<crate::TensorKey> = wrt.iter().map(|&i| crate::TensorKey::var(i as u32)).collect();
        let view = computegraph::resolve(vec![e.graph().clone()]);
        let g = tidu::vjp(&view, std::slice::from_ref(e.output_key()), &keys).unwrap();
        let mut out = vec![e.output_key().clone()];
        out.extend(g.tangent_output_keys().into_iter().flatten());
        computegraph::materialize_merge(&computegraph::resolve(vec![e.graph().clone(), g.graph().clone()]), &out)
    }

    #[test]
    fn each_range_follows_the_operation_that_defines_its_result() {
        let shapes = vec![vec![3, 4], vec![4, 5], vec![5, 2], vec![2, 6]];
        let chain = crate::Einsum::<f64>::new("ab,bc,cd,de->ae", &shapes, crate::PathChoice::Greedy).unwrap();
        // A permutation: its gradient is the cotangent permuted, its value a step.
        let single = crate::Einsum::<f64>::new("ab->ba", &[vec![3, 4]], crate::PathChoice::Greedy).unwrap();
        for (e, wrt) in [(&chain, vec![0, 1, 2, 3]), (&chain, vec![2]), (&chain, vec![0, 3]), (&single, vec![0])] {
            let before = merged(e, &wrt);
            let after = with_ranges(&before).unwrap();
            let n = before.outputs().len();
            assert_eq!(after.outputs().len(), 2 * n, "{wrt:?}");
            let ops: Vec<_> = after.operations().collect();
            let position = |v: ValueId| match after.value_def(v) {
                Some(MaterializedValueDef::Output { operation, .. }) => Some(operation.index()),
                _ => None,
            };
            for (i, &r) in after.outputs()[n..].iter().enumerate() {
                let at = position(r).expect("a range is an operation's result");
                assert!(matches!(ops[at].operation(), TensorOp::Range), "{wrt:?}: output {}", n + i);
                let result = after.outputs()[i];
                assert_eq!(ops[at].inputs(), &[result], "{wrt:?}: the range of output {i}");
                // Right after the result's own operation, or among the ranges that open
                // the program for an input.
                match position(result) {
                    Some(p) => assert_eq!(p + 1, at, "{wrt:?}: range of output {i}"),
                    None => assert!(ops[..at].iter().all(|o| matches!(o.operation(), TensorOp::Range)), "{wrt:?}"),
                }
            }
            // The other operations, in the same order.
            let kept: Vec<String> =
                ops.iter().map(|o| format!("{:?}", o.operation())).filter(|s| s != "range").collect();
            let want: Vec<String> = before.operations().map(|o| format!("{:?}", o.operation())).collect();
            assert_eq!(kept, want, "{wrt:?}");
        }
    }
}
