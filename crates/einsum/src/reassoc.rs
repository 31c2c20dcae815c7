//! The rewrite that contracts a step's gradients along the cheapest order
//! ([`reassociate`]), not the forward path's order reversed.
//!
//! tidu transposes each forward step on its own: for a producer `P: B = X·Y` whose result
//! is read by one consumer `C: O = W·B`, the reverse pass forms `dW = dO·B` (reading the
//! kept `B`), the cotangent `dB = W·dO` (of `B`'s size), then `dX = dB·Y` and
//! `dY = X·dB`. When `B` is an expansion (larger than the tensors it is made of), that
//! order writes and reads a cotangent larger than any gradient needs, and keeps `B` alive
//! from the forward pass for `dW` alone. `lm_batch`'s twelve steps `X[pqrs]·Y[ns] →
//! B[pqrn]` (224 000 elements), read by `W[nr]·B → O[npq]`, are that shape: each gradient
//! is a contraction of three tensors (`dW = dO·X·Y`, `dX = dO·W·Y`, `dY = dO·W·X`), and
//! contracting `dO·X` first (shared by `dW` and `dY`, CSE merges it) and `W·Y` first for
//! `dX` makes nothing over 14 000 elements beside `dO`.
//!
//! So for each such pair of steps whose producer sums a label and expands (its result is
//! larger than either operand; a producer that sums its large operand down saves nothing this
//! way, and its rewritten `dX` would read `dO` in the consumer's order), each existing
//! gradient is rewritten as its three-tensor
//! contraction along the pairwise order of fewest multiply-adds, when all of them together
//! take no more multiply-adds than the four transposes they replace and the largest tensor
//! they write is smaller than the largest of those (the cotangent `dB`, or `B` kept).
//!
//! `lm_batch`'s three gradients then end in three small products over its batch label,
//! `T·Y`, `T·W` (batched matrix-vector products of `T = dO·X`) and `W·Y` (their outer
//! product, which `dX` reads), each of a few multiply-adds per element of `T`: as
//! contractions, each ran on a kernel made for long rows or long sums. Where the three
//! have that form ([`Triple`]), they are one fused pair that reads `T` once
//! (`pair/triple.rs`).
//!
//! Input invariants: a materialized value-and-gradient program of real contractions in
//! topological order, as `Einsum::gradient` merges it (tidu's transposes carry the
//! forward specs' `transpose_a` / `transpose_b`). Output invariants: the same inputs and
//! outputs (by position); each rewritten gradient equals the old one to rounding (the sums
//! run in another order); the new operations take the place of the first replaced
//! transpose in program order, where `dO`, `W`, `X` and `Y` exist; a forward step belongs
//! to at most one rewritten pair. Complexity: `O(operations + operands)` to find the pairs,
//! three orders priced per gradient, then one rebuild and materialization of the program
//! (`rewrite.rs`).

use std::sync::Arc;

use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use computegraph::{MaterializedGraph, OperationRole, ValueId, ValueRef};

use crate::elem::Elem;
use crate::error::EinsumResult;
use crate::kernel::ContractSpec;
use crate::layout::step_output;
use crate::op::TensorOp;
use crate::pair::PairSpec;
use crate::rewrite::{Program, Rebuilder, Replaced};

/// One gradient written as two contractions: the operands (values of the old program), the
/// spec of the first pair, and the spec of its result with the third operand.
struct Rewritten {
    first: ([ValueId; 2], ContractSpec),
    second: (ValueId, ContractSpec),
}

/// A pair of forward steps whose gradients are rewritten: the old operations it replaces
/// (their indices), the old values each new gradient stands for, and the new gradients,
/// with their three small products fused when they form a triple ([`Triple`]).
struct Group {
    replaced: SmallVec<[usize; 4]>,
    gradients: SmallVec<[(ValueId, Rewritten); 3]>,
    triple: Option<Triple>,
}

/// The three gradients of a pair as one pass over their shared product (`pair/triple.rs`):
/// when `dW = (dO·L)·S` and `dS = (dO·L)·W` share their first product `T = dO·L` (`L` the
/// producer's large operand, `S` its small one) and `dL = dO·(W·S)`, the products `T·S`,
/// `T·W` and `W·S` (per batch element a matrix times two vectors, and their outer
/// product) are one fused pair on `(T, W, S)`, which writes `dS`, `dW` and `W·S`.
struct Triple {
    /// The fused pair `(T, W, S) -> (dS, dW, W·S)`.
    spec: PairSpec,
    /// Positions in [`Group::gradients`] of `dW`, `dS` and `dL`.
    at: [usize; 3],
}

impl Triple {
    /// The triple of `gradients` (`dW`, `dX`, `dY` of `C: O = W·B`, `P: B = X·Y`, with
    /// `w`, `x`, `y` the values of `W`, `X`, `Y`), or `None` when they do not form one.
    fn of(gradients: &[(ValueId, Rewritten)], [w, x, y]: [ValueId; 3]) -> Option<Self> {
        let [(_, dw), (_, dx), (_, dy)] = gradients else { return None };
        // `S` is `Y` (then `L` is `X`) or `X`.
        [(dy, dx, y, [0, 2, 1]), (dx, dy, x, [0, 1, 2])].into_iter().find_map(|(ds, dl, small, at)| {
            let shared = dw.first == ds.first && dw.second.0 == small && ds.second.0 == w && dl.first.0 == [w, small];
            if !shared {
                return None;
            }
            // `dW = T·S` as `S, T -> dW`, the fused pair's operand order.
            let sw = &dw.second.1;
            let y = ContractSpec::new(sw.b_labels(), sw.a_labels(), sw.out_labels(), sw.sizes()).ok()?;
            Some(Triple { spec: PairSpec::triple(&ds.second.1, &y, &dl.first.1)?, at })
        })
    }
}

/// The program `merged` with the gradients of each producer-consumer pair of steps (module
/// docs) contracted along their cheapest order, materialized again with the same outputs;
/// `None` when no pair pays (or the values are complex, whose transposes carry
/// conjugations, or the program reads external values, which a rebuild would have to name
/// again).
pub(crate) fn reassociate<T: Elem>(
    merged: &MaterializedGraph<TensorOp<T>>,
) -> EinsumResult<Option<MaterializedGraph<TensorOp<T>>>> {
    if T::IS_COMPLEX {
        return Ok(None);
    }
    let Some(program) = Program::new(merged) else { return Ok(None) };
    let (ops, def, readers_of, output_of) =
        (&program.ops, |v| program.def(v), |v| program.readers(v), |i| program.output(i));
    let spec_of = |i: usize| match ops[i].operation() {
        TensorOp::Contract(s) => Some(&**s),
        _ => None,
    };
    // The reader of `v` at operand position `at` computing `spec` with `other` at the other
    // position (`None`: any value there), and that other value.
    let find = |v: ValueId, at: usize, spec: &ContractSpec, other: Option<ValueId>| {
        readers_of(v).iter().copied().find_map(|j| {
            let inputs = ops[j].inputs();
            let o = *inputs.get(1 - at)?;
            (spec_of(j) == Some(spec) && inputs[at] == v && other.is_none_or(|x| x == o)).then_some((j, o))
        })
    };
    let real = |s: ContractSpec| s.with_conj([false; 2]);
    let mut in_group = vec![false; ops.len()];
    let mut groups: FxHashMap<usize, Group> = FxHashMap::default();
    for (ic, op) in ops.iter().enumerate() {
        let Some(c) = spec_of(ic) else { continue };
        if in_group[ic] || c.conj() != [false; 2] {
            continue;
        }
        for k in [1usize, 0] {
            let (b_val, w_val) = (op.inputs()[k], op.inputs()[1 - k]);
            let Some(ip) = def(b_val).filter(|&p| !in_group[p]) else { continue };
            // A producer that sums nothing (an element-wise or outer product: queens' factor
            // times its large tensor) has its two gradients fused in one pass (`fuse.rs`),
            // which this order would undo.
            let sums = |p: &ContractSpec| p.a_labels().iter().chain(p.b_labels()).any(|l| !p.out_labels().contains(l));
            // A producer whose result is no larger than its larger operand (queens' factor
            // summed out of its large tensor) leaves nothing to save: its cotangent `dB` is
            // no larger than the gradient `dX` made from it, and the rewritten `dX` would
            // read `dO` in the consumer's output order against `X`'s, a gather per element
            // where the transposes read `dB` in `B`'s order, close to `X`'s.
            let expands = |p: &ContractSpec| len(&p.out_shape()) > len(&p.a_shape()).max(len(&p.b_shape()));
            let Some(p) = spec_of(ip).filter(|p| p.conj() == [false; 2] && sums(p) && expands(p)) else { continue };
            // The consumer's transposes: `dB` reads `W` and `dO`, `dW` reads `dO` and `B`.
            let (tb, tw) = if k == 1 { (c.transpose_b(), c.transpose_a()) } else { (c.transpose_a(), c.transpose_b()) };
            let (tb, tw) = (real(tb), real(tw));
            // `dB = contract(W, dO)` (k = 1) or `contract(dO, W)` (k = 0).
            let Some((idb, d_o)) = find(w_val, 1 - k, &tb, None) else { continue };
            let d_b = output_of(idb);
            let dw = find(b_val, k, &tw, Some(d_o)).map(|(j, _)| j);
            // `B` read by `C` and `dW` alone, `dB` by `P`'s transposes alone.
            if readers_of(b_val).iter().any(|&j| j != ic && Some(j) != dw) {
                continue;
            }
            let (x_val, y_val) = (ops[ip].inputs()[0], ops[ip].inputs()[1]);
            let dx = find(d_b, 0, &real(p.transpose_a()), Some(y_val)).map(|(j, _)| j);
            let dy = find(d_b, 1, &real(p.transpose_b()), Some(x_val)).map(|(j, _)| j);
            if readers_of(d_b).iter().any(|&j| Some(j) != dx && Some(j) != dy) {
                continue;
            }
            let Some(labels) = Labels::of(c, k, p) else { continue };
            let t = [d_o, w_val, x_val, y_val];
            let mut gradients: SmallVec<[(ValueId, Rewritten); 3]> = SmallVec::new();
            let mut old: SmallVec<[usize; 4]> = [Some(idb), dw, dx, dy].into_iter().flatten().collect();
            old.sort_unstable();
            for (which, j) in [(1usize, dw), (2, dx), (3, dy)] {
                if let Some(j) = j {
                    gradients.push((output_of(j), labels.cheapest(which, t)?));
                }
            }
            let old_cost = old.iter().map(|&j| spec_of(j).map_or(0, |s| s.multiply_adds())).sum::<u64>();
            let old_peak = old.iter().map(|&j| spec_of(j).map_or(0, |s| len(&s.out_shape()))).max().unwrap_or(0);
            let (mut new_cost, mut new_peak) = (0u64, 0usize);
            for (i, (_, r)) in gradients.iter().enumerate() {
                // Equal first pairs are one operation once materialized (CSE).
                if !gradients[..i].iter().any(|(_, q)| q.first == r.first) {
                    new_cost += r.first.1.multiply_adds();
                }
                new_cost += r.second.1.multiply_adds();
                new_peak = new_peak.max(len(&r.first.1.out_shape()));
            }
            if gradients.is_empty() || new_cost > old_cost || new_peak >= old_peak {
                continue;
            }
            for &j in &old {
                in_group[j] = true;
            }
            in_group[ic] = true;
            in_group[ip] = true;
            let triple = Triple::of(&gradients, [w_val, x_val, y_val]);
            groups.insert(old[0], Group { replaced: old, gradients, triple });
            break;
        }
    }
    if groups.is_empty() {
        return Ok(None);
    }
    let replaced: rustc_hash::FxHashSet<usize> = groups.values().flat_map(|g| g.replaced.iter().copied()).collect();
    // Each group's new operations take the place of its first replaced one; the other
    // replaced operations are dropped.
    program.rebuild(|i, r| {
        let Some(g) = groups.get(&i) else {
            return Ok(if replaced.contains(&i) { Replaced::Yes } else { Replaced::No });
        };
        if let Some(t) = &g.triple {
            return add_triple(r, g, t);
        }
        for (old, rw) in &g.gradients {
            let Some(first) = r.operands(&rw.first.0) else { return Ok(Replaced::Missing) };
            let f =
                r.builder.try_add_operation(TensorOp::contract(rw.first.1.clone()), first, OperationRole::Primary)?;
            let Some(mut second) = r.operands(&[rw.second.0]) else { return Ok(Replaced::Missing) };
            second.insert(0, ValueRef::Local(f[0]));
            let s =
                r.builder.try_add_operation(TensorOp::contract(rw.second.1.clone()), second, OperationRole::Primary)?;
            r.stands_for(*old, s[0]);
        }
        Ok(Replaced::Yes)
    })
}

/// Adds group `g`'s gradients as its triple `t`: the shared product `T`, the fused pair
/// on `(T, W, S)`, and `dL` from its `W·S`.
fn add_triple<T: Elem>(r: &mut Rebuilder<T>, g: &Group, t: &Triple) -> EinsumResult<Replaced> {
    let [(old_w, dw), (old_s, _), (old_l, dl)] = t.at.map(|k| &g.gradients[k]);
    let (Some(first), Some(ws), Some(d_o)) =
        (r.operands(&dw.first.0), r.operands(&dl.first.0), r.operands(&[dl.second.0]))
    else {
        return Ok(Replaced::Missing);
    };
    let shared = r.builder.try_add_operation(TensorOp::contract(dw.first.1.clone()), first, OperationRole::Primary)?;
    let inputs = [ValueRef::Local(shared[0]), ws[0].clone(), ws[1].clone()];
    let op = TensorOp::ContractPair(Arc::new(t.spec.clone()));
    let out = r.builder.try_add_operation(op, inputs, OperationRole::Primary)?;
    r.stands_for(*old_s, out[0]);
    r.stands_for(*old_w, out[1]);
    let inputs = [ValueRef::Local(out[2]), d_o[0].clone()];
    let dl_op = r.builder.try_add_operation(TensorOp::contract(dl.second.1.clone()), inputs, OperationRole::Primary)?;
    r.stands_for(*old_l, dl_op[0]);
    Ok(Replaced::Yes)
}

/// The number of elements of `shape`.
fn len(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// The labels of a producer-consumer pair in one numbering (the consumer's, with the
/// producer's summed labels after it): `dO`, `W`, `X`, `Y`, and their sizes.
struct Labels {
    tensors: [Vec<u32>; 4],
    sizes: Vec<usize>,
}

impl Labels {
    /// The labels of `C: O = W·B` (`B` at operand position `k` of `c`) and `P: B = X·Y`,
    /// or `None` when a tensor repeats a label or a step has a label in one tensor alone
    /// (a diagonal, a sum of one operand, a broadcast), which the three-tensor
    /// contractions below do not model.
    fn of(c: &ContractSpec, k: usize, p: &ContractSpec) -> Option<Self> {
        let plain = |s: &ContractSpec| {
            let lists = [s.a_labels(), s.b_labels(), s.out_labels()];
            let distinct = lists.iter().all(|l| l.iter().enumerate().all(|(i, x)| !l[..i].contains(x)));
            let shared =
                lists.iter().flat_map(|l| l.iter()).all(|x| lists.iter().filter(|l| l.contains(x)).count() >= 2);
            distinct && shared
        };
        if !plain(c) || !plain(p) {
            return None;
        }
        let (lb, lw) = if k == 1 { (c.b_labels(), c.a_labels()) } else { (c.a_labels(), c.b_labels()) };
        let mut sizes = c.sizes().to_vec();
        let mut map: FxHashMap<u32, u32> = p.out_labels().iter().zip(lb).map(|(&q, &l)| (q, l)).collect();
        for &q in p.a_labels().iter().chain(p.b_labels()) {
            if let std::collections::hash_map::Entry::Vacant(e) = map.entry(q) {
                e.insert(sizes.len() as u32);
                sizes.push(p.sizes()[q as usize]);
            }
        }
        let to = |l: &[u32]| l.iter().map(|q| map[q]).collect::<Vec<u32>>();
        Some(Labels { tensors: [c.out_labels().to_vec(), lw.to_vec(), to(p.a_labels()), to(p.b_labels())], sizes })
    }

    /// The gradient of tensor `which` (1: `W`, 2: `X`, 3: `Y`) as the contraction of the
    /// other three (`dO` and two of `W`, `X`, `Y`) along the pairwise order of fewest
    /// multiply-adds (ties: the smaller intermediate, then the first tried), `values` being
    /// the values of `dO`, `W`, `X`, `Y`.
    fn cheapest(&self, which: usize, values: [ValueId; 4]) -> EinsumResult<Rewritten> {
        let target = &self.tensors[which];
        let others: SmallVec<[usize; 3]> = (0..4).filter(|&i| i != which).collect();
        let mut best: Option<((u64, usize), Rewritten)> = None;
        for (u, v, z) in
            [(others[0], others[1], others[2]), (others[0], others[2], others[1]), (others[1], others[2], others[0])]
        {
            let (lu, lv, lz) = (&self.tensors[u], &self.tensors[v], &self.tensors[z]);
            let inter = step_output(lu, lv, |c| lz.contains(&c) || target.contains(&c));
            let first = ContractSpec::new(lu, lv, &inter, &self.sizes)?;
            let second = ContractSpec::new(&inter, lz, target, &self.sizes)?;
            let key = (first.multiply_adds() + second.multiply_adds(), len(&first.out_shape()));
            if best.as_ref().is_none_or(|(k, _)| key < *k) {
                best = Some((key, Rewritten { first: ([values[u], values[v]], first), second: (values[z], second) }));
            }
        }
        Ok(best.expect("three orders tried").1)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::pair::tests::seeded;
    use crate::tensor::Tensor;
    use crate::{ContractionPath, Einsum, PathChoice, TensorKey, reference_einsum};

    /// The value-and-gradient program of `e` for `wrt`, as `Einsum::gradient` merges it
    /// before its rewrites, and the key of its cotangent input.
    fn merged(e: &Einsum<f64>, wrt: &[usize]) -> (MaterializedGraph<TensorOp<f64>>, Option<TensorKey>) {
        let keys: Vec<TensorKey> = wrt.iter().map(|&i| TensorKey::var(i as u32)).collect();
        let g = tidu::vjp(&computegraph::resolve(vec![e.graph().clone()]), std::slice::from_ref(e.output_key()), &keys)
            .unwrap();
        let mut out = vec![e.output_key().clone()];
        out.extend(g.tangent_output_keys().into_iter().flatten());
        let m =
            computegraph::materialize_merge(&computegraph::resolve(vec![e.graph().clone(), g.graph().clone()]), &out);
        (m, g.tangent_inputs().first().map(|(k, _)| k.clone()))
    }

    /// The outputs of program `m` (value, then gradients) on `operands` and cotangent `c`.
    fn run(
        m: &MaterializedGraph<TensorOp<f64>>,
        seed: &Option<TensorKey>,
        operands: &[Tensor<f64>],
        c: &Tensor<f64>,
    ) -> Vec<Tensor<f64>> {
        let p = computegraph::compile(m);
        let inputs = p
            .bind_inputs(|k| match k {
                TensorKey::Var(i) => Some(&operands[*i as usize]),
                k if Some(k) == seed.as_ref() => Some(c),
                TensorKey::Tangent(_) => None,
            })
            .unwrap();
        p.eval(&mut (), &inputs)
    }

    /// `⟨c, f(operands with operand i replaced by t)⟩`, by the reference loop: the
    /// contraction is linear in each operand, so this is `⟨∂f/∂x_i ᵀ c, t⟩`.
    fn probe(expr: &str, operands: &[Tensor<f64>], i: usize, t: &Tensor<f64>, c: &Tensor<f64>) -> f64 {
        let refs: Vec<&Tensor<f64>> = operands.iter().enumerate().map(|(j, x)| if j == i { t } else { x }).collect();
        let f = reference_einsum(expr, &refs).unwrap();
        f.data().iter().zip(c.data()).map(|(a, b)| a * b).sum()
    }

    /// Every `wrt` subset of `e` (operands `operands`, cotangent `c`): the rewritten
    /// program against the one before the rewrite (to rounding), and each gradient by the
    /// dot-product identity against the reference loop. Returns how many subsets were
    /// rewritten, and in how many of them a pair's small products became a triple.
    fn check_every_wrt(expr: &str, e: &Einsum<f64>, operands: &[Tensor<f64>], c: &Tensor<f64>) -> (usize, usize) {
        let n = operands.len();
        let (mut rewritten, mut triples) = (0, 0);
        for mask in 1u32..(1 << n) {
            let wrt: Vec<usize> = (0..n).filter(|i| mask & (1 << i) != 0).collect();
            let (m, seed) = merged(e, &wrt);
            let Some(r) = reassociate(&m).unwrap() else { continue };
            rewritten += 1;
            let triple = |op: &TensorOp<f64>| matches!(op, TensorOp::ContractPair(p) if p.z().is_some());
            triples += usize::from(r.operations().any(|op| triple(op.operation())));
            let (old, new) = (run(&m, &seed, operands, c), run(&r, &seed, operands, c));
            assert_eq!(old.len(), new.len());
            for (x, y) in old.iter().zip(&new) {
                assert_eq!(x.shape(), y.shape());
                let err = x.max_abs_diff(y).unwrap();
                assert!(err <= 1e-12 * (1.0 + x.max_abs()), "{expr} wrt {wrt:?}: {err}");
            }
            for (g, &i) in new[1..].iter().zip(&wrt) {
                let t = seeded::<f64>(operands[i].shape(), 77 + i as u64);
                let want = probe(expr, operands, i, &t, c);
                let got: f64 = g.data().iter().zip(t.data()).map(|(a, b)| a * b).sum();
                assert!(
                    (got - want).abs() <= 1e-10 * (1.0 + want.abs()),
                    "{expr} wrt {wrt:?}, operand {i}: {got} against {want}"
                );
            }
        }
        (rewritten, triples)
    }

    /// `lm_batch`'s shape, smaller: `X[pqrs]·Y[ns] → B[pqrn]` (an expansion), read by
    /// `W[nr]·B → O[npq]`, then a last step.
    fn lm_like() -> (&'static str, Einsum<f64>, Vec<Tensor<f64>>, Tensor<f64>) {
        lm_like_as("pqrs,ns,nr,npq->nq", [vec![3, 4, 5, 6], vec![30, 6]])
    }

    /// [`lm_like`] with the producer's two operands `expr`'s first two, of `shapes`.
    fn lm_like_as(
        expr: &'static str,
        [x, y]: [Vec<usize>; 2],
    ) -> (&'static str, Einsum<f64>, Vec<Tensor<f64>>, Tensor<f64>) {
        let shapes = [x, y, vec![30, 5], vec![30, 3, 4]];
        let path = PathChoice::Explicit(ContractionPath::new(vec![[0, 1], [0, 2], [0, 1]]));
        let e = Einsum::<f64>::new(expr, &shapes, path).unwrap();
        let operands: Vec<Tensor<f64>> = shapes.iter().enumerate().map(|(i, s)| seeded(s, 10 + i as u64)).collect();
        let c = seeded::<f64>(&[30, 4], 3);
        (expr, e, operands, c)
    }

    #[test]
    fn an_expansions_gradients_equal_the_transposes_for_every_wrt() {
        let (expr, e, operands, c) = lm_like();
        let (rewritten, triples) = check_every_wrt(expr, &e, &operands, &c);
        // Every subset with X or Y active (12 of 15) but the two with X and W and not Y
        // (`[0, 2]`, `[0, 2, 3]`) has the pair's gradients rewritten: there dW alone (no
        // dY to share `dO·X` with) takes more multiply-adds than its transpose reading the
        // kept B.
        assert_eq!(rewritten, 10, "subsets rewritten");
        // `T·Y`, `T·W` and `W·Y` in one pass wherever the three gradients are taken.
        assert_eq!(triples, 2, "subsets with X, Y and W active");
        // With every operand active: no tensor of B's size (`3·4·5·30`) in the program.
        let (m, _) = merged(&e, &[0, 1, 2, 3]);
        let r = reassociate(&m).unwrap().expect("the pair is rewritten");
        let big = |g: &MaterializedGraph<TensorOp<f64>>| {
            g.operations()
                .filter_map(|op| match op.operation() {
                    TensorOp::Contract(s) => Some(len(&s.out_shape())),
                    _ => None,
                })
                .filter(|&l| l >= 3 * 4 * 5 * 30)
                .count()
        };
        assert_eq!(big(&m), 2, "B and its cotangent before");
        assert_eq!(big(&r), 1, "B alone after (the forward step)");
    }

    #[test]
    fn a_triple_whose_small_operand_is_the_producers_left_equals_the_transposes() {
        // `X[ns]·Y[pqrs]` (`lm_like`'s operands swapped): the small operand `S` is the
        // producer's `X`, the other branch of `Triple::of` (its first, `S = Y`, cannot
        // match: `Y` is the large operand here).
        let (expr, e, operands, c) = lm_like_as("ns,pqrs,nr,npq->nq", [vec![30, 6], vec![3, 4, 5, 6]]);
        let (rewritten, triples) = check_every_wrt(expr, &e, &operands, &c);
        // The same subsets as with the operands the other way round.
        assert_eq!(rewritten, 10, "subsets rewritten");
        assert_eq!(triples, 2, "subsets with X, Y and W active");
        // The triple's `a` is `S`: the shape of `X[ns]`, its `m` that of `W[nr]`.
        let (m, _) = merged(&e, &[0, 1, 2, 3]);
        let r = reassociate(&m).unwrap().expect("the pair is rewritten");
        let spec = r
            .operations()
            .find_map(|op| match op.operation() {
                TensorOp::ContractPair(p) => Some(p.clone()),
                _ => None,
            })
            .expect("a fused triple");
        assert_eq!((spec.y().a_shape(), spec.y().out_shape()), (vec![30, 6], vec![30, 5]));
    }

    #[test]
    fn the_gradient_through_einsum_gradient_is_the_rewritten_one_on_one_and_two_threads() {
        let (_, e, operands, c) = lm_like();
        let refs: Vec<&Tensor<f64>> = operands.iter().collect();
        let g = e.gradient(&[0, 1, 2, 3]).unwrap();
        // `eval` runs tidu's program as transposed; `eval_with_value` the rewritten one.
        let want = g.eval(&refs, &c).unwrap();
        let (_, one) = g.eval_with_value(&refs, &c).unwrap();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let (_, two) = g.eval_with_value_parallel(Some(&pool), &refs, &c).unwrap();
        for ((w, x), y) in want.iter().zip(&one).zip(&two) {
            assert!(w.max_abs_diff(x).unwrap() <= 1e-12 * (1.0 + w.max_abs()));
            assert!(x.max_abs_diff(y).unwrap() <= 1e-12 * (1.0 + x.max_abs()));
        }
    }

    /// Queens' shape, smaller: `X[abcd]·M[ae] → B[bcde]` sums `a` out of the large `X` (no
    /// larger than it), read by the element-wise `W[bc]·B → O[ebcd]`.
    fn queens_like<T: Elem>() -> (&'static str, Einsum<T>, Vec<Tensor<T>>, Tensor<T>) {
        let expr = "abcd,ae,bc->ebcd";
        let shapes = [vec![3, 4, 5, 6], vec![3, 3], vec![4, 5]];
        let path = PathChoice::Explicit(ContractionPath::new(vec![[0, 1], [0, 1]]));
        let e = Einsum::<T>::new(expr, &shapes, path).unwrap();
        let operands: Vec<Tensor<T>> = shapes.iter().enumerate().map(|(i, s)| seeded(s, 40 + i as u64)).collect();
        let c = seeded::<T>(e.output_shape(), 9);
        (expr, e, operands, c)
    }

    /// `Einsum::gradient`'s gradients of `e` for every operand, each by the dot-product
    /// identity `⟨c, f(…, t, …)⟩ = ⟨∇ᵢ, t⟩` against the reference loop.
    fn gradients_match_the_reference<T: Elem>(expr: &str, e: &Einsum<T>, operands: &[Tensor<T>], c: &Tensor<T>) {
        let refs: Vec<&Tensor<T>> = operands.iter().collect();
        let all: Vec<usize> = (0..operands.len()).collect();
        let (_, grads) = e.gradient(&all).unwrap().eval_with_value(&refs, c).unwrap();
        for (i, g) in grads.iter().enumerate() {
            let t = seeded::<T>(operands[i].shape(), 70 + i as u64);
            let mut moved = refs.clone();
            moved[i] = &t;
            let want = c.inner(&reference_einsum(expr, &moved).unwrap()).unwrap();
            let got = g.inner(&t).unwrap();
            assert!((got - want).abs() <= 1e-10 * (1.0 + want.abs()), "{expr}, operand {i}: {got} against {want}");
        }
    }

    #[test]
    fn a_producer_that_sums_its_large_operand_down_is_left_to_the_transposes() {
        let (expr, e, operands, c) = queens_like::<f64>();
        for mask in 1u32..8 {
            let wrt: Vec<usize> = (0..3).filter(|i| mask & (1 << i) != 0).collect();
            let (m, _) = merged(&e, &wrt);
            assert!(reassociate(&m).unwrap().is_none(), "wrt {wrt:?} rewritten");
        }
        gradients_match_the_reference(expr, &e, &operands, &c);
        let (expr, e, operands, c) = queens_like::<crate::c64>();
        gradients_match_the_reference(expr, &e, &operands, &c);
    }

    /// Up to four distinct labels of `0..7` in a random order.
    fn labels() -> impl Strategy<Value = Vec<u32>> {
        proptest::sample::subsequence((0u32..7).collect::<Vec<_>>(), 1..=4).prop_shuffle()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Random three-operand networks `x, y, w -> out` contracted `(x·y)·w`: wherever
        /// the rewrite applies, the gradients equal the transposes' and the reference's.
        #[test]
        fn random_pairs_rewrite_to_the_reference(
            sizes in proptest::collection::vec(1usize..=4, 7),
            (x, y, w) in (labels(), labels(), labels()),
            keep in proptest::collection::vec(any::<bool>(), 7),
        ) {
            let letter = |l: &[u32]| l.iter().map(|&c| char::from(b'a' + c as u8)).collect::<String>();
            let mut out: Vec<u32> = Vec::new();
            for &c in x.iter().chain(&y).chain(&w) {
                if keep[c as usize] && !out.contains(&c) {
                    out.push(c);
                }
            }
            let expr = format!("{},{},{}->{}", letter(&x), letter(&y), letter(&w), letter(&out));
            let shape = |l: &[u32]| l.iter().map(|&c| sizes[c as usize]).collect::<Vec<usize>>();
            let shapes = [shape(&x), shape(&y), shape(&w)];
            let path = PathChoice::Explicit(ContractionPath::new(vec![[0, 1], [0, 1]]));
            let e = Einsum::<f64>::new(&expr, &shapes, path).unwrap();
            let operands: Vec<Tensor<f64>> = shapes.iter().enumerate().map(|(i, s)| seeded(s, 20 + i as u64)).collect();
            let c = seeded::<f64>(e.output_shape(), 5);
            check_every_wrt(&expr, &e, &operands, &c);
        }
    }
}
