//! The three small products of a batch of bilinear forms in one pass ([`Triple`]): what a
//! fused pair runs when `reassoc.rs` has rewritten an expansion's gradients.
//!
//! Why: `lm_batch`'s rewritten pairs (`reassoc.rs`) end in three small operations over the
//! batch label `n`, from `T[n r s] = dO·X` and the forward step's `W[n r]`, `Y[n s]`:
//! `dW[n r] = Σ_s T·Y`, `dY[n s] = Σ_r T·W` (batched matrix-vector products), and the
//! outer product `WY[n r s] = W·Y` that `dX = dO·WY` reads. As three contractions, each
//! ran on a kernel made for long rows or long sums: the direct loop moved the batch label
//! (strided by a whole `r × s` block) innermost, and the element-wise kernel wrote rows of
//! `s`. Here each batch element's block of `T` is read once, while its `W` and `Y` stay
//! in registers, and the three results are written from there.
//!
//! The pattern ([`Triple::new`] checks it), in a fused pair's operand order `(c, m, a)`:
//! `x = c·m`, `y = a·c`, `z = m·a`, with no conjugation, where the labels shared by `m`
//! and `a` (the batch `N`) lead every tensor in one order, `m = N R`, `a = N S`, `c = N R S`
//! or `N S R` (`R`, `S` nonempty, in `c`'s order in every tensor), `x = N S`, `y = N R`,
//! and `z = N R S` or `N S R`.
//!
//! Each block of `c` is a matrix of `rows × cols` (`R × S` or `S × R`); its rows are
//! taken four at a time, whose dot products with the column vector are four independent
//! sums, and each column sum adds the four rows' terms in row order. So every element of
//! `x` and `y` is the sum of its terms in the order of the summed labels, as the direct
//! loop forms it: equal to the contraction kernels' results to rounding; `z` (one product
//! per element) equal bit for bit. The loop is compiled for the processor's vector
//! instructions by run-time dispatch.
//!
//! Cost: one pass over `c` (`|c|` elements read, `|z| = |c|` written), `|m| + |a|` read,
//! `|x| + |y|` written.

use crate::buffer::overwritten;
use crate::elem::Elem;
use crate::kernel::ContractSpec;

/// The loop of a batch of bilinear forms' three products (module docs): `batch` blocks of
/// `rows × cols` elements of `c`; the row vector `u` (of `rows`) and the column vector `v`
/// (of `cols`) of each block are `m`'s and `a`'s blocks (`m_rows`) or `a`'s and `m`'s.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Triple {
    batch: usize,
    rows: usize,
    cols: usize,
    /// Whether `c`'s rows are `R` (`m`'s labels): `u = m`, `v = a`, the row sums are `y`.
    m_rows: bool,
    /// Whether `z` is laid out as `c`'s blocks are (else transposed).
    z_as_c: bool,
}

/// The labels of the tensors of a pattern, each as positions of `c`'s axes.
type Axes = Vec<usize>;

impl Triple {
    /// The loop of `x = c·m`, `y = a·c`, `z = m·a`, or `None` unless they form the pattern
    /// of the module docs.
    pub(crate) fn new(x: &ContractSpec, y: &ContractSpec, z: &ContractSpec) -> Option<Self> {
        if [x.conj(), y.conj(), z.conj()].iter().any(|c| c.iter().any(|&f| f)) {
            return None;
        }
        if x.a_shape() != y.b_shape() || x.b_shape() != z.a_shape() || y.a_shape() != z.b_shape() {
            return None;
        }
        // Every tensor's labels as positions of `c`'s axes, through the spec that reads `c`
        // (`x`, `y`) or through the positions found for `m` and `a` (`z`).
        let (c_len, sizes) = (x.a_labels().len(), x.a_shape());
        let positions = |c: &[u32], other: &[u32], out: &[u32]| -> Option<(Axes, Axes)> {
            let distinct = c.iter().enumerate().all(|(i, l)| !c[..i].contains(l));
            let at = |l: &u32| c.iter().position(|k| k == l);
            let axes = |t: &[u32]| t.iter().map(at).collect::<Option<Axes>>();
            distinct.then_some(())?;
            Some((axes(other)?, axes(out)?))
        };
        let (m, x_out) = positions(x.a_labels(), x.b_labels(), x.out_labels())?;
        let (a, y_out) = positions(y.b_labels(), y.a_labels(), y.out_labels())?;
        // `z`'s labels: `m`'s axes, then `a`'s, each label naming one axis of `c`.
        let mut named: Vec<(u32, usize)> = Vec::new();
        for (&l, &p) in z.a_labels().iter().zip(&m).chain(z.b_labels().iter().zip(&a)) {
            match named.iter().find(|(k, _)| *k == l) {
                Some(&(_, q)) if q != p => return None,
                Some(_) => {}
                None if named.iter().any(|&(_, q)| q == p) => return None,
                None => named.push((l, p)),
            }
        }
        let z_out: Option<Axes> =
            z.out_labels().iter().map(|l| named.iter().find(|(k, _)| k == l).map(|&(_, p)| p)).collect();
        let z_out = z_out?;
        // `N`: the axes of both `m` and `a`, leading; `R`, `S` the rest of each.
        let n = m.iter().zip(&a).take_while(|(p, q)| p == q).count();
        let (r, s) = (&m[n..], &a[n..]);
        let lead: Axes = (0..n).collect();
        let span = |from: usize, len: usize| (from..from + len).collect::<Axes>();
        let (nr, ns) = (r.len(), s.len());
        let m_rows = r.first() == Some(&n);
        let (r_at, s_at) = if m_rows { (n, n + nr) } else { (n + ns, n) };
        let joined = |p: &[usize], q: &[usize]| [&lead[..], p, q].concat();
        let ok = nr > 0
            && ns > 0
            && n + nr + ns == c_len
            && m[..n] == lead[..]
            && r == span(r_at, nr)
            && s == span(s_at, ns)
            && x_out == joined(s, &[])
            && y_out == joined(r, &[]);
        if !ok {
            return None;
        }
        let z_as_c = if m_rows { z_out == joined(r, s) } else { z_out == joined(s, r) };
        let z_transposed = if m_rows { z_out == joined(s, r) } else { z_out == joined(r, s) };
        if !z_as_c && !z_transposed {
            return None;
        }
        let len = |p: &[usize]| p.iter().map(|&i| sizes[i]).product::<usize>();
        let (rows, cols) = if m_rows { (len(r), len(s)) } else { (len(s), len(r)) };
        // Empty tensors are left to the contraction kernels.
        (rows > 0 && cols > 0).then_some(Triple { batch: len(&lead), rows, cols, m_rows, z_as_c })
    }

    /// `[x, y, z]` from `c`, `m` and `a` (lengths as [`Triple::new`]'s specs say).
    pub(crate) fn run<T: Elem>(&self, c: &[T], m: &[T], a: &[T]) -> [Vec<T>; 3] {
        let (u, v) = if self.m_rows { (m, a) } else { (a, m) };
        let (mut row_sums, mut col_sums) = (overwritten(self.batch * self.rows), overwritten(self.batch * self.cols));
        let mut z = overwritten(c.len());
        if !crate::stop::requested() {
            let blocks = Blocks { plan: self, c, u, v, row_sums: &mut row_sums, col_sums: &mut col_sums, z: &mut z };
            crate::small_gemm::arch().dispatch(blocks);
        }
        // Rows `R`: the row sums are `y` and the column sums `x`; rows `S`, the other way.
        let [x, y] = if self.m_rows { [col_sums, row_sums] } else { [row_sums, col_sums] };
        [x, y, z]
    }

    /// The blocks of [`Triple::run`]: for each batch element, the rows four at a time.
    #[inline(always)]
    fn blocks<T: Elem>(&self, c: &[T], (u, v): (&[T], &[T]), sums: (&mut [T], &mut [T]), z: &mut [T]) {
        let (rows, cols) = (self.rows, self.cols);
        let block = rows * cols;
        let (row_sums, col_sums) = sums;
        let each = c.chunks_exact(block).zip(z.chunks_exact_mut(block));
        let each = each.zip(u.chunks_exact(rows).zip(v.chunks_exact(cols)));
        for (b, ((cb, zb), (ub, vb))) in each.enumerate() {
            let rs = &mut row_sums[b * rows..(b + 1) * rows];
            let cs = &mut col_sums[b * cols..(b + 1) * cols];
            let mut i = 0;
            while i + 4 <= rows {
                let r: [&[T]; 4] = std::array::from_fn(|k| &cb[(i + k) * cols..(i + k + 1) * cols]);
                let w: [T; 4] = std::array::from_fn(|k| ub[i + k]);
                let mut acc = [T::zero(); 4];
                for j in 0..cols {
                    let vj = vb[j];
                    let mut s = if i == 0 { T::zero() } else { cs[j] };
                    for k in 0..4 {
                        acc[k] += r[k][j] * vj;
                        s += r[k][j] * w[k];
                    }
                    cs[j] = s;
                }
                rs[i..i + 4].copy_from_slice(&acc);
                i += 4;
            }
            for i in i..rows {
                let (r, w) = (&cb[i * cols..(i + 1) * cols], ub[i]);
                let mut acc = T::zero();
                for j in 0..cols {
                    acc += r[j] * vb[j];
                    cs[j] = if i == 0 { r[j] * w } else { cs[j] + r[j] * w };
                }
                rs[i] = acc;
            }
            self.outer(zb, ub, vb);
        }
    }

    /// One block of `z`: `u ⊗ v` as `c`'s block is laid out, or transposed.
    #[inline(always)]
    fn outer<T: Elem>(&self, zb: &mut [T], u: &[T], v: &[T]) {
        if self.z_as_c {
            for (zr, &w) in zb.chunks_exact_mut(self.cols).zip(u) {
                for (o, &vj) in zr.iter_mut().zip(v) {
                    *o = w * vj;
                }
            }
        } else {
            for (zr, &vj) in zb.chunks_exact_mut(self.rows).zip(v) {
                for (o, &w) in zr.iter_mut().zip(u) {
                    *o = w * vj;
                }
            }
        }
    }
}

/// The arguments of [`Triple::blocks`], as the value pulp dispatches to the widest vector
/// instructions the processor has (a closure would not be inlined into the function
/// compiled for them). No product and sum is fused into one rounding.
struct Blocks<'a, T> {
    plan: &'a Triple,
    c: &'a [T],
    u: &'a [T],
    v: &'a [T],
    row_sums: &'a mut [T],
    col_sums: &'a mut [T],
    z: &'a mut [T],
}

impl<T: Elem> pulp::WithSimd for Blocks<'_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let Blocks { plan, c, u, v, row_sums, col_sums, z } = self;
        plan.blocks(c, (u, v), (row_sums, col_sums), z);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::reference::reference_labels;
    use crate::rng::Rng;
    use crate::tensor::Tensor;

    fn seeded(shape: &[usize], seed: u64) -> Tensor<f64> {
        let mut r = Rng::new(seed);
        Tensor::from_fn(shape.to_vec(), |_| r.unit() - 0.5).expect("a shape")
    }

    /// The specs `x = c·m`, `y = a·c`, `z = m·a` on the labels given, and the labels of
    /// `c`, `m`, `a`.
    fn specs(lists: [&[u32]; 6], sizes: &[usize]) -> ([ContractSpec; 3], [Vec<u32>; 3]) {
        let [c, m, a, x, y, z] = lists;
        let spec = |p: &[u32], q: &[u32], o: &[u32]| ContractSpec::new(p, q, o, sizes).unwrap();
        ([spec(c, m, x), spec(a, c, y), spec(m, a, z)], [c.to_vec(), m.to_vec(), a.to_vec()])
    }

    /// The pattern of the module docs with `n`, `r`, `s` labels in `N`, `R`, `S`: `c`'s
    /// rows `R` (`m_rows`) or `S`, `z` laid out as `c` (`z_as_c`) or transposed.
    fn pattern(n: usize, r: usize, s: usize, m_rows: bool, z_as_c: bool) -> [Vec<u32>; 6] {
        let ids = |from: usize, len: usize| (from as u32..(from + len) as u32).collect::<Vec<u32>>();
        let (ln, lr, ls) = (ids(0, n), ids(n, r), ids(n + r, s));
        let join = |p: &[u32], q: &[u32]| [&ln[..], p, q].concat();
        let c = if m_rows { join(&lr, &ls) } else { join(&ls, &lr) };
        let z = if m_rows == z_as_c { join(&lr, &ls) } else { join(&ls, &lr) };
        [c, join(&lr, &[]), join(&ls, &[]), join(&ls, &[]), join(&lr, &[]), z]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Every form of the pattern against the reference loop: `x` and `y` to rounding,
        /// `z` bit for bit with the contraction kernel.
        #[test]
        fn triples_equal_the_reference(
            (n, r, s) in (0usize..=2, 1usize..=2, 1usize..=2),
            sizes in proptest::collection::vec(1usize..=6, 6),
            m_rows in any::<bool>(),
            z_as_c in any::<bool>(),
            seed in 0u64..1000,
        ) {
            let lists = pattern(n, r, s, m_rows, z_as_c);
            let refs: [&[u32]; 6] = std::array::from_fn(|i| &lists[i][..]);
            let ([x, y, z], [lc, lm, la]) = specs(refs, &sizes);
            let t = Triple::new(&x, &y, &z).expect("the pattern");
            let shape = |l: &[u32]| l.iter().map(|&i| sizes[i as usize]).collect::<Vec<usize>>();
            let (c, m, a) = (seeded(&shape(&lc), seed), seeded(&shape(&lm), seed + 1), seeded(&shape(&la), seed + 2));
            let [gx, gy, gz] = t.run(c.data(), m.data(), a.data());
            let want = [
                reference_labels(&[(&c, &lc[..]), (&m, &lm[..])], &lists[3], &sizes).unwrap(),
                reference_labels(&[(&a, &la[..]), (&c, &lc[..])], &lists[4], &sizes).unwrap(),
                reference_labels(&[(&m, &lm[..]), (&a, &la[..])], &lists[5], &sizes).unwrap(),
            ];
            for (got, want) in [gx, gy].iter().zip(&want) {
                prop_assert_eq!(got.len(), want.data().len());
                let err = got.iter().zip(want.data()).fold(0.0f64, |e, (p, q)| e.max((p - q).abs()));
                prop_assert!(err <= 1e-12, "{err}");
            }
            let kz = crate::kernel::contract(&z, &m, &a);
            prop_assert_eq!(&gz[..], kz.data());
        }
    }

    #[test]
    fn other_layouts_and_conjugations_are_refused() {
        let sizes = [5, 3, 4];
        let ok = pattern(1, 1, 1, true, true);
        let refs: [&[u32]; 6] = std::array::from_fn(|i| &ok[i][..]);
        let ([x, y, z], _) = specs(refs, &sizes);
        assert!(Triple::new(&x, &y, &z).is_some());
        assert!(Triple::new(&x.clone().with_conj([true, false]), &y, &z).is_none());
        // The batch label not leading `m`; `x` with its labels swapped; `z` summing `N`.
        let bad: [[&[u32]; 6]; 3] = [
            [&[0, 1, 2], &[1, 0], &[0, 2], &[0, 2], &[0, 1], &[0, 1, 2]],
            [&[0, 1, 2], &[0, 1], &[0, 2], &[2, 0], &[0, 1], &[0, 1, 2]],
            [&[0, 1, 2], &[0, 1], &[0, 2], &[0, 2], &[0, 1], &[1, 2]],
        ];
        for lists in bad {
            let ([x, y, z], _) = specs(lists, &sizes);
            assert!(Triple::new(&x, &y, &z).is_none(), "{x}, {y}, {z}");
        }
    }
}
