//! The rewrite that fuses a step's two gradients ([`fuse_pairs`]): in a materialized
//! value-and-gradient program, each pair of contractions that [`PairSpec::new`] accepts
//! (the element-wise transpose `c, m -> a` and the reduction `a, c -> m` of one forward
//! step, reading the same cotangent `c`) becomes one `TensorOp::ContractPair`
//! (`pair.rs`, ADR 0018). `Einsum::gradient` calls it after tidu's transform, so no graph
//! the transforms read holds a pair.
//!
//! Input invariants: a materialized graph in topological order (materialize's output).
//! Output invariants: every fused operation replaces exactly two contractions that read
//! the same value `c`, and takes the place of the earlier of the two in program order,
//! where its three operands already exist; all other operations, the inputs and the
//! outputs (by position) are kept. Complexity: `O(operations + operands)` to find the
//! pairs, then one rebuild and materialization of the program.

use std::sync::Arc;

use computegraph::{MaterializedGraph, OperationRole, ValueId};
use rustc_hash::FxHashMap;

use crate::elem::Elem;
use crate::error::EinsumResult;
use crate::op::TensorOp;
use crate::pair::{PAIR_MIN_ELEMENTS, PairSpec};
use crate::rewrite::{Program, Replaced};

/// The gradient program `merged` with each pair of transposes that [`PairSpec::new`]
/// accepts fused into one `TensorOp::ContractPair` (module docs), materialized again with
/// the same outputs; `None` when it has no such pair (or reads external values, which a
/// rebuild would have to name again).
pub(crate) fn fuse_pairs<T: Elem>(
    merged: &MaterializedGraph<TensorOp<T>>,
) -> EinsumResult<Option<MaterializedGraph<TensorOp<T>>>> {
    let Some(program) = Program::new(merged) else { return Ok(None) };
    let ops = &program.ops;
    // Pairs (first in program order, second, the fused operands and spec).
    let mut partner: Vec<Option<usize>> = vec![None; ops.len()];
    // Keyed by the earlier of the two: the operands, the spec, and which op makes `x`.
    let mut fused: FxHashMap<usize, ([ValueId; 3], PairSpec, [usize; 2])> = FxHashMap::default();
    for (i, op) in ops.iter().enumerate() {
        let TensorOp::Contract(sx) = op.operation() else { continue };
        if partner[i].is_some() {
            continue;
        }
        for (ci, small) in [(0usize, 1usize), (1, 0)] {
            let (c, m) = (op.inputs()[ci], op.inputs()[small]);
            let x_order = if ci == 0 { [0, 1] } else { [1, 0] };
            let found = program.readers(c).iter().find_map(|&j| {
                let TensorOp::Contract(sy) = ops[j].operation() else { return None };
                if j == i || partner[j].is_some() {
                    return None;
                }
                let yin = ops[j].inputs();
                let (y_order, big) = if yin[1] == c { ([0, 1], yin[0]) } else { ([1, 0], yin[1]) };
                // Both operands of the fused operation must exist where it is placed.
                let at = i.min(j);
                let ready = |v: ValueId| program.def(v).is_none_or(|d| d < at);
                (big != c && ready(big) && ready(m) && ready(c))
                    .then(|| PairSpec::new(sx, x_order, sy, y_order))
                    .flatten()
                    .filter(|p| p.len() >= PAIR_MIN_ELEMENTS)
                    .map(|p| (j, big, p))
            });
            if let Some((j, big, p)) = found {
                partner[i] = Some(j);
                partner[j] = Some(i);
                fused.insert(i.min(j), ([c, m, big], p, [i, j]));
                break;
            }
        }
    }
    if fused.is_empty() {
        return Ok(None);
    }
    program.rebuild(|i, r| {
        let Some((operands, spec, [x_op, y_op])) = fused.get(&i) else {
            return Ok(if partner[i].is_none() { Replaced::No } else { Replaced::Yes });
        };
        let Some(operands) = r.operands(operands) else { return Ok(Replaced::Missing) };
        let op = TensorOp::ContractPair(Arc::new(spec.clone()));
        let out = r.builder.try_add_operation(op, operands, OperationRole::Primary)?;
        r.stands_for(program.output(*x_op), out[0]);
        r.stands_for(program.output(*y_op), out[1]);
        Ok(Replaced::Yes)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pair::tests::seeded;
    use crate::tensor::Tensor;

    /// A queens-like network: a `3^10` tensor times four `3 × 3` factors, each pair of
    /// factors on the same two labels, so that the first of each pair multiplies in
    /// element-wise (its labels still needed) and the second sums them away.
    fn network() -> crate::Einsum<f64> {
        let mut shapes = vec![vec![3usize; 10]];
        shapes.extend([vec![3, 3], vec![3, 3], vec![3, 3], vec![3, 3]]);
        let path = crate::ContractionPath::new(vec![[0, 1], [0, 3], [0, 2], [0, 1]]);
        crate::Einsum::new("abcdefghij,ab,ba,cd,dc->efghij", &shapes, crate::PathChoice::Explicit(path)).unwrap()
    }

    /// [`network`] with the factors on the large tensor's innermost labels (`ij`, `gh`),
    /// so that the pairs' rows are short: the panels of `pair.rs`.
    fn short_rows_network() -> crate::Einsum<f64> {
        let mut shapes = vec![vec![3usize; 10]];
        shapes.extend([vec![3, 3], vec![3, 3], vec![3, 3], vec![3, 3]]);
        let path = crate::ContractionPath::new(vec![[0, 1], [0, 3], [0, 2], [0, 1]]);
        crate::Einsum::new("abcdefghij,ij,ji,gh,hg->abcdef", &shapes, crate::PathChoice::Explicit(path)).unwrap()
    }

    #[test]
    fn fused_programs_equal_the_unfused_ones() {
        let long = check_every_wrt(&network());
        let short = check_every_wrt(&short_rows_network());
        assert!(long.0 >= 1, "{long:?}: the long rows' network has pairs walked row by row");
        assert!(short.1 >= 1, "{short:?}: the short rows' network has pairs walked in panels");
    }

    /// The fused program against the unfused one for every set of active operands of `e`
    /// (its output of `3^6` elements), and `EinsumGradient::eval_with_value` against
    /// `EinsumGradient::eval`; how many pairs it met walked row by row and in panels.
    fn check_every_wrt(e: &crate::Einsum<f64>) -> (usize, usize) {
        let (mut rows, mut panels) = (0, 0);
        let operands: Vec<Tensor<f64>> = e.shapes().iter().enumerate().map(|(i, s)| seeded(s, 10 + i as u64)).collect();
        let refs: Vec<&Tensor<f64>> = operands.iter().collect();
        let c = seeded::<f64>(&[3; 6], 3);
        let mut fused_sets = 0;
        for mask in 1u32..32 {
            let wrt: Vec<usize> = (0..5).filter(|i| mask & (1 << i) != 0).collect();
            let keys: Vec<crate::TensorKey> = wrt.iter().map(|&i| crate::TensorKey::var(i as u32)).collect();
            let view = computegraph::resolve(vec![e.graph().clone()]);
            let g = tidu::vjp(&view, std::slice::from_ref(e.output_key()), &keys).unwrap();
            let mut out = vec![e.output_key().clone()];
            out.extend(g.tangent_output_keys().into_iter().flatten());
            let merged = computegraph::materialize_merge(
                &computegraph::resolve(vec![e.graph().clone(), g.graph().clone()]),
                &out,
            );
            // A step pairs only when both of its operands are active.
            let Some(fused) = fuse_pairs(&merged).unwrap() else {
                assert_ne!(mask, 31, "with every operand active, the factors' steps pair");
                continue;
            };
            let pairs: Vec<_> = fused
                .operations()
                .filter_map(|op| match op.operation() {
                    TensorOp::ContractPair(p) => Some(p.walks_in_panels()),
                    _ => None,
                })
                .collect();
            assert!((1..=4).contains(&pairs.len()), "wrt {wrt:?}: {} pairs", pairs.len());
            for panel in pairs {
                match panel {
                    Some(true) => panels += 1,
                    Some(false) => rows += 1,
                    None => {}
                }
            }
            fused_sets += 1;
            let (p, q) = (computegraph::compile(&merged), computegraph::compile(&fused));
            let bind = |prog: &computegraph::CompiledProgram<TensorOp<f64>>| {
                let seed = g.tangent_inputs().first().map(|(k, _)| k.clone());
                let inputs = prog
                    .bind_inputs(|k| match k {
                        crate::TensorKey::Var(i) => Some(refs[*i as usize]),
                        k if Some(k) == seed.as_ref() => Some(&c),
                        crate::TensorKey::Tangent(_) => None,
                    })
                    .unwrap();
                prog.eval(&mut (), &inputs)
            };
            let (u, f) = (bind(&p), bind(&q));
            assert_eq!(u.len(), f.len());
            for (x, y) in u.iter().zip(&f) {
                assert_eq!(x.shape(), y.shape());
                let scale = x.data().iter().fold(1.0f64, |m, v| m.max(v.abs()));
                assert!(x.data().iter().zip(y.data()).all(|(a, b)| (a - b).abs() <= 1e-12 * scale), "wrt {wrt:?}");
            }
        }
        assert!(fused_sets >= 4, "{fused_sets} operand sets fused");
        // Through `Einsum::gradient`: the value and gradients with the pairs equal the
        // gradient program without them (`EinsumGradient::eval` runs the unfused one).
        let g = e.gradient(&[0, 1, 2, 3, 4]).unwrap();
        let (_, with) = g.eval_with_value(&refs, &c).unwrap();
        let without = g.eval(&refs, &c).unwrap();
        for (x, y) in with.iter().zip(&without) {
            let scale = x.data().iter().fold(1.0f64, |m, v| m.max(v.abs()));
            assert!(x.data().iter().zip(y.data()).all(|(a, b)| (a - b).abs() <= 1e-12 * scale));
        }
        (rows, panels)
    }
}
