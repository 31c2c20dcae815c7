//! The function whose gradient [`Einsum::gradient_of_sum`](crate::Einsum::gradient_of_sum)
//! takes: `s = Σ f(x)`, the sum of every entry of the output, as a fragment over the
//! forward graph. Its scalar cotangent `c` gives the gradient of `⟨c·1, f(x)⟩` (on complex
//! values `Σ Re(conj(c)·f)`), the gradient a full cotangent of ones scaled by `c` gives,
//! without that tensor: no cotangent of the output's size is read or made.
//!
//! Why a fragment of its own: summed after the last step `y = contract[a,b→o](A, B)`, the
//! sum is `Σ_sh A'·B'` where `A' = Σ_{a only} A` and `B' = Σ_{b only} B` are the operands
//! summed over the labels the other lacks and `sh` the labels they share. Its transposes
//! are `dA' = c·B'` (element-wise, the size of the shared labels) broadcast back over `A`'s
//! labels, and the same for `B`: two reductions in the forward part and two broadcasts in
//! the reverse part, where the sum of a full output transposes into the output's cotangent
//! of ones and the last step's two GEMMs against it. Everything before the last step is
//! the forward graph's, unchanged: tidu differentiates through the fragment's parent.
//!
//! The other last operations (a reordering or reduction of one operand, a network of one
//! operand) are summed by one `unary[o→]`, whose transpose broadcasts `c` to the output's
//! shape: correct, and as costly as a full cotangent.
//!
//! Output: the fragment (its parent is the forward graph), the key of `s`, and the shapes
//! of the tensors it adds to the reverse pass (the two sums), which the memory check counts.

use std::sync::Arc;

use computegraph::{Graph, GraphBuilder, LocalValueDef, LocalValueId, OperationRole, ValueKey, ValueRef};

use crate::elem::Elem;
use crate::error::{EinsumError, EinsumResult};
use crate::kernel::{ContractSpec, UnarySpec};
use crate::op::TensorOp;

/// The sum of a forward graph's output, as [`sum_of_output`] builds it.
pub(crate) struct SumFragment<T: Elem> {
    /// The fragment: the sum and the reductions it reads; the forward graph is its parent.
    pub(crate) graph: Arc<Graph<TensorOp<T>>>,
    /// The key of the scalar sum.
    pub(crate) sum: ValueKey<TensorOp<T>>,
    /// The shapes of the tensors the fragment adds to an evaluation (the operands' sums).
    pub(crate) made: Vec<Vec<usize>>,
}

/// `Σ y` for `y` the single output of `forward` (module docs).
pub(crate) fn sum_of_output<T: Elem>(
    forward: &Arc<Graph<TensorOp<T>>>,
    output_shape: &[usize],
) -> EinsumResult<SumFragment<T>> {
    let &[output] = forward.outputs() else {
        return Err(EinsumError::Shape(format!(
            "a contraction graph has one output, this one {}",
            forward.outputs().len()
        )));
    };
    let mut b = GraphBuilder::<TensorOp<T>>::with_interner(forward.interner().clone());
    b.try_add_parent(forward.clone())?;
    let external = |v: LocalValueId| forward.try_global_key(v).map(ValueRef::External);
    let mut made = Vec::new();
    let last = match forward.value_def(output) {
        Some(LocalValueDef::Output { operation, .. }) => Some(forward.operation(operation)),
        _ => None,
    };
    let sum = match last.as_ref().map(|op| (op.operation(), op)) {
        Some((TensorOp::Contract(spec), op)) => {
            let refs: Vec<ValueRef<TensorOp<T>>> = op
                .inputs()
                .map(|r| match r {
                    ValueRef::Local(v) => external(v),
                    r => Ok(r),
                })
                .collect::<Result<_, _>>()?;
            let [ra, rb] =
                <[_; 2]>::try_from(refs).map_err(|_| EinsumError::Shape("a contraction has two operands".into()))?;
            let (la, lb, sizes) = (spec.a_labels(), spec.b_labels(), spec.sizes());
            let sa = shared(la, lb);
            let sb = shared(lb, la);
            let mut reduced =
                |r: ValueRef<TensorOp<T>>, l: &[u32], kept: &[u32]| -> EinsumResult<ValueRef<TensorOp<T>>> {
                    // Already the shared labels, once each, in some order: read as it is.
                    if l.len() == kept.len() {
                        return Ok(r);
                    }
                    let (mut r, mut from) = (r, l.to_vec());
                    for to in stages(l, kept, sizes) {
                        let unary = UnarySpec::new(&from, &to, sizes)?;
                        made.push(unary.out_shape());
                        let v = b.try_add_operation(TensorOp::unary(unary), vec![r], OperationRole::Primary)?[0];
                        (r, from) = (ValueRef::Local(v), to);
                    }
                    Ok(r)
                };
            let ra = reduced(ra, la, &sa)?;
            let rb = reduced(rb, lb, &sb)?;
            let closed = ContractSpec::new(&sa, &sb, &[], sizes)?.with_conj(spec.conj());
            b.try_add_operation(TensorOp::contract(closed), vec![ra, rb], OperationRole::Primary)?[0]
        }
        _ => {
            // The output's labels in the forward graph's numbering do not matter: one
            // label per axis, all summed.
            let labels: Vec<u32> = (0..output_shape.len() as u32).collect();
            let unary = UnarySpec::new(&labels, &[], output_shape)?;
            b.try_add_operation(TensorOp::unary(unary), vec![external(output)?], OperationRole::Primary)?[0]
        }
    };
    b.try_set_outputs(vec![sum])?;
    let graph = Arc::new(b.try_build()?);
    let sum = graph.try_global_key(sum)?;
    Ok(SumFragment { graph, sum, made })
}

/// The distinct labels of `l` that `other` holds, in `l`'s order.
fn shared(l: &[u32], other: &[u32]) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::with_capacity(l.len());
    for &c in l {
        if other.contains(&c) && !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

/// The elements of the innermost labels a sum stage spans at most: 32 KiB of `f64`.
const STAGE_SPAN: usize = 4096;

/// The label lists of `l` summed to `kept` (`l`'s labels in `l`'s order) stage by stage,
/// each stage summing the summed labels among the innermost ones that span at most
/// [`STAGE_SPAN`] elements. Why: the direct loop of a one-operand sum keeps the output's
/// labels outside and walks each output element's summed labels inside, so summed labels
/// between kept ones (MERA's `abcdefgh->ah`) make every pass stride across the whole
/// tensor, once per value of the kept inner labels; a stage over a span that stays in the
/// cache reads the tensor from memory once. Labels repeated in `l` (a diagonal) take one
/// stage.
fn stages(l: &[u32], kept: &[u32], sizes: &[usize]) -> Vec<Vec<u32>> {
    let distinct = l.iter().enumerate().all(|(i, c)| !l[..i].contains(c));
    if !distinct {
        return vec![kept.to_vec()];
    }
    let mut out = Vec::new();
    let mut current = l.to_vec();
    while current.iter().any(|c| !kept.contains(c)) {
        let (mut start, mut span) = (current.len(), 1usize);
        while start > 0 && span.saturating_mul(sizes[current[start - 1] as usize]) <= STAGE_SPAN {
            start -= 1;
            span *= sizes[current[start] as usize];
        }
        let mut next = current[..start].to_vec();
        next.extend(current[start..].iter().copied().filter(|c| kept.contains(c)));
        if start == 0 || next.len() == current.len() {
            // All within one span, or no summed label among the innermost: the rest at once.
            out.push(kept.to_vec());
            break;
        }
        out.push(next.clone());
        current = next;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::stages;

    #[test]
    fn sums_between_kept_labels_go_in_stages_that_span_the_cache() {
        // MERA's last step's left operand: `abcdefgh->ah`, sizes 10 9 3 9 9 9 9 5.
        let sizes = [10, 9, 3, 9, 9, 9, 9, 5];
        let l: Vec<u32> = (0..8).collect();
        assert_eq!(stages(&l, &[0, 7], &sizes), vec![vec![0, 1, 2, 3, 7], vec![0, 7]]);
        // Small: one stage.
        assert_eq!(stages(&[0, 1, 2], &[1], &[4, 4, 4]), vec![vec![1]]);
        // No summed label among the innermost: the rest at once.
        assert_eq!(stages(&[0, 1], &[1], &[8, 5000]), vec![vec![1]]);
        // A diagonal: one stage.
        assert_eq!(stages(&[0, 0, 1], &[0], &[3, 3000]), vec![vec![0]]);
    }
}
