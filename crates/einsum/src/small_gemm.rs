//! GEMMs too small for faer's dispatch: `c = op(a)·op(b)` (or `+=`) with the output's
//! columns at most [`SMALL_N`], run inline by the GEMM loop (`kernel.rs`) for each entry of
//! a batch of tiny products (the language-model networks' `16 × 4 × 4` and `4 × 16 × 16`
//! steps, a thousand or more per step).
//!
//! The kernel keeps one output row in registers (an array of `N` elements, `N` a constant
//! so that the compiler unrolls and vectorizes it) and adds `a[i, l]·b[l, ..]` for each
//! `l`: it needs `c`'s rows contiguous (column stride 1), reads `a` with any strides and
//! `b`'s rows contiguously or, column-major, gathered. A product whose `c` is column-major
//! is run transposed (`cᵀ = bᵀ·aᵀ`). [`small_gemm`] says whether it ran, so that the
//! caller falls back to faer otherwise.
//!
//! Invariants: every element of the `m × n` output block is written (replaced or
//! accumulated into) exactly once; nothing outside it is touched. Cost: `m·n·k`
//! multiply-adds, no allocation, no copy.

use crate::elem::{Elem, Strided, StridedMut};

/// The widest output row the kernel keeps in registers.
pub(crate) const SMALL_N: usize = 16;

/// Products of up to this many multiply-adds (and rows of up to [`SMALL_N`]) run here
/// rather than in faer, whose per-call dispatch (views, nano-GEMM selection, often a copy
/// of an operand) costs more than such a product's arithmetic.
pub(crate) const SMALL_GEMM_MAX_MACS: usize = 4096;

/// Which operand [`small_gemm`] reads gathered (a row of `b`, or for a column-major `c` a
/// column of `a`, not contiguous).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gathered {
    A,
    B,
}

/// What a gathered row adds per multiply-add in the inline kernel: 1996 products of
/// 16 × 16 × 16 took 2.99 ms with `b` column-major against 0.95 ms row-major
/// (`abcde,cfgbe->cadfg` and `abcde,cbefg->cadfg`, sizes 4 but `c` = 1996), about 0.25 ns
/// per multiply-add.
const GATHER_NS_PER_MAC: f64 = 0.25;

/// What copying one element costs when an operand is packed before a loop of tiny
/// products, in nanoseconds (a permutation of short rows: `cadbe -> abcde`, 1996 · 256
/// elements, took 0.35 ms).
const PACK_NS_PER_ELEMENT: f64 = 1.0;

/// The operand that [`small_gemm`] would read gathered for `[m, n, k]` with the strides
/// `[a, b, c]`, or `None` (contiguous rows, or a product it does not run), following its
/// dispatch: `c`'s rows contiguous first, else `c` column-major run transposed.
fn gathers([m, n, k]: [usize; 3], [sa, sb, sc]: [[usize; 2]; 3]) -> Option<Gathered> {
    if m.saturating_mul(n).saturating_mul(k) > SMALL_GEMM_MAX_MACS || m == 0 || n == 0 {
        return None;
    }
    let unit = |s: usize, d: usize| s == 1 || d == 1;
    if n <= SMALL_N && unit(sc[1], n) {
        (!unit(sb[1], n)).then_some(Gathered::B)
    } else if m <= SMALL_N && unit(sc[0], m) {
        (!unit(sa[0], m)).then_some(Gathered::A)
    } else {
        None
    }
}

/// The operand to pack (once, in the order the kernel reads) before a loop of `nl` tiny
/// products `[m, n, k]` with these strides, that [`small_gemm`] would otherwise read
/// gathered: when the copy of its `lens` elements costs less than the gathers. Why: the
/// transposes of a step read both operands with their contracted labels innermost
/// (`cadfg,cbefg->abcde` of `lm_batch`, 1996 products of 16³: 3.2 ms gathered, 1.5
/// packed, 1.0 for the forward step).
pub(crate) fn to_pack([nl, m, n, k]: [usize; 4], strides: [[usize; 2]; 3], lens: [usize; 2]) -> Option<Gathered> {
    let g = gathers([m, n, k], strides)?;
    let [gather, pack] = costs(g, [nl, m, n, k], lens);
    (pack < gather).then_some(g)
}

/// What the gathers of an operand of a loop of `nl` products `[m, n, k]` cost
/// (nanoseconds), zero when nothing is gathered: what `GemmPlan::cost` (`kernel.rs`) adds for them
/// even where [`to_pack`] packs the operand instead. Pricing the cheaper packing there
/// let `layout.rs` choose other orders, and `lm_batch_likelihood_brackets_4_4d`'s forward
/// pass went from 15 to 18 ms (`python/bench/vg_parts.py`, two rounds).
pub(crate) fn gather_ns(dims: [usize; 4], strides: [[usize; 2]; 3], lens: [usize; 2]) -> f64 {
    let [m, n, k] = [dims[1], dims[2], dims[3]];
    gathers([m, n, k], strides).map_or(0.0, |g| costs(g, dims, lens)[0])
}

/// `[gathers, packing]` of operand `g` (nanoseconds).
fn costs(g: Gathered, [nl, m, n, k]: [usize; 4], lens: [usize; 2]) -> [f64; 2] {
    let macs = (nl as f64) * (m.saturating_mul(n).saturating_mul(k) as f64);
    [GATHER_NS_PER_MAC * macs, PACK_NS_PER_ELEMENT * lens[usize::from(g == Gathered::B)] as f64]
}

/// Runs `c = op(a)·op(b)` (`accumulate`: `c +=`) for `[m, n, k]` if the shapes and layouts
/// suit the kernel (see the module docs) and returns whether it did; `c` is untouched
/// when it returns `false`. Strides as in [`Elem::gemm`].
pub(crate) fn small_gemm<T: Elem>(
    [m, n, k]: [usize; 3],
    a: Strided<'_, T>,
    b: Strided<'_, T>,
    c: StridedMut<'_, T>,
    conj: [bool; 2],
    accumulate: bool,
) -> bool {
    if m.saturating_mul(n).saturating_mul(k) > SMALL_GEMM_MAX_MACS || m == 0 || n == 0 {
        return m == 0 || n == 0;
    }
    // The strides that matter: a dimension of 1 has no stride to respect.
    let unit = |s: usize, d: usize| s == 1 || d == 1;
    let [rc, cc] = c.1;
    if n <= SMALL_N && unit(cc, n) {
        rows(m, n, k, a, b, c, conj, accumulate);
        true
    } else if m <= SMALL_N && unit(rc, m) {
        // cᵀ (n × m, rows contiguous) = bᵀ (n × k) · aᵀ (k × m).
        let ([ra, ca], [rb, cb]) = (a.1, b.1);
        let (at, bt) = (Strided(b.0, [cb, rb]), Strided(a.0, [ca, ra]));
        rows(n, m, k, at, bt, StridedMut(c.0, [cc, rc]), [conj[1], conj[0]], accumulate);
        true
    } else {
        false
    }
}

/// The kernel for `c`'s and `b`'s rows contiguous, `n ≤ SMALL_N`, dispatched to a constant
/// width.
#[allow(clippy::too_many_arguments)]
fn rows<T: Elem>(
    m: usize,
    n: usize,
    k: usize,
    a: Strided<'_, T>,
    b: Strided<'_, T>,
    c: StridedMut<'_, T>,
    conj: [bool; 2],
    accumulate: bool,
) {
    let f = match n {
        1 => rows_n::<T, 1>,
        2 => rows_n::<T, 2>,
        3 => rows_n::<T, 3>,
        4 => rows_n::<T, 4>,
        5 => rows_n::<T, 5>,
        6 => rows_n::<T, 6>,
        7 => rows_n::<T, 7>,
        8 => rows_n::<T, 8>,
        9 => rows_n::<T, 9>,
        10 => rows_n::<T, 10>,
        11 => rows_n::<T, 11>,
        12 => rows_n::<T, 12>,
        13 => rows_n::<T, 13>,
        14 => rows_n::<T, 14>,
        15 => rows_n::<T, 15>,
        _ => rows_n::<T, 16>,
    };
    f(m, k, a, b, c, conj, accumulate);
}

/// One output row of `N` elements at a time, held in an array while `k` rows of `b` are
/// added into it.
fn rows_n<T: Elem, const N: usize>(
    m: usize,
    k: usize,
    a: Strided<'_, T>,
    b: Strided<'_, T>,
    c: StridedMut<'_, T>,
    conj: [bool; 2],
    accumulate: bool,
) {
    // The crate builds for baseline x86-64 (two doubles per vector); pulp runs the loop
    // compiled for the best instruction set the processor has, which needs every call
    // inside it inlined (a closure is not: hence the `WithSimd` value).
    arch().dispatch(Rows::<T, N> { m, k, a, b, c, conj, accumulate });
}

/// The arguments of [`rows_n`], as the value pulp dispatches.
struct Rows<'a, T, const N: usize> {
    m: usize,
    k: usize,
    a: Strided<'a, T>,
    b: Strided<'a, T>,
    c: StridedMut<'a, T>,
    conj: [bool; 2],
    accumulate: bool,
}

impl<T: Elem, const N: usize> pulp::WithSimd for Rows<'_, T, N> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let Rows { m, k, a: Strided(a, [ra, ca]), b: Strided(b, [rb, cb]), c: StridedMut(c, [rc, _]), .. } = self;
        let [conj_a, conj_b] = self.conj;
        // (A no-op for reals, and loop-invariant for complex numbers.)
        let op = |x: T, on: bool| if on && T::IS_COMPLEX { x.conj() } else { x };
        for i in 0..m {
            let mut acc = [T::zero(); N];
            for l in 0..k {
                let x = op(a[i * ra + l * ca], conj_a);
                if cb == 1 || N == 1 {
                    let row: &[T; N] = b[l * rb..l * rb + N].try_into().expect("a row of N elements");
                    for (s, &y) in acc.iter_mut().zip(row) {
                        *s += x * op(y, conj_b);
                    }
                } else {
                    // A column-major `b`: the row is gathered (its columns are short).
                    for (j, s) in acc.iter_mut().enumerate() {
                        *s += x * op(b[l * rb + j * cb], conj_b);
                    }
                }
            }
            let out: &mut [T; N] = (&mut c[i * rc..i * rc + N]).try_into().expect("a row of N elements");
            if self.accumulate {
                for (o, s) in out.iter_mut().zip(acc) {
                    *o += s;
                }
            } else {
                *out = acc;
            }
        }
    }
}

/// The instruction set, detected once.
pub(crate) fn arch() -> pulp::Arch {
    static ARCH: std::sync::OnceLock<pulp::Arch> = std::sync::OnceLock::new();
    *ARCH.get_or_init(pulp::Arch::new)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::elem::c64;

    /// A triple loop over any strides, the reference (also `thin_gemm`'s).
    pub(crate) fn naive(
        [m, n, k]: [usize; 3],
        (a, sa): (&[c64], [usize; 2]),
        (b, sb): (&[c64], [usize; 2]),
        conj: [bool; 2],
    ) -> Vec<c64> {
        let op = |x: c64, on: bool| if on { Elem::conj(x) } else { x };
        let mut c = vec![c64::zero(); m * n];
        for i in 0..m {
            for j in 0..n {
                for l in 0..k {
                    c[i * n + j] += op(a[i * sa[0] + l * sa[1]], conj[0]) * op(b[l * sb[0] + j * sb[1]], conj[1]);
                }
            }
        }
        c
    }

    proptest::proptest! {
        /// Every shape up to 17 (one past the kernel's widths) and every combination of
        /// row- and column-major operands and output, conjugated or not, replacing or
        /// accumulating: the kernel either declines and writes nothing, or equals the
        /// triple loop and writes nothing outside the block.
        #[test]
        fn small_gemm_matches_a_triple_loop(
            m in 1usize..18, n in 1usize..18, k in 0usize..18, layout in 0u32..64,
        ) {
            let (ra, rb, rc) = (layout & 1 == 1, layout & 2 == 2, layout & 4 == 4);
            let conj = [layout & 8 == 8, layout & 16 == 16];
            let accumulate = layout & 32 == 32;
            let a: Vec<c64> = (0..m * k).map(|i| c64::new((i as f64 * 0.7).sin(), (i as f64).cos())).collect();
            let b: Vec<c64> = (0..k * n).map(|i| c64::new((i as f64 * 0.3).cos(), 0.5 - (i as f64).sin())).collect();
            let sa = if ra { [k, 1] } else { [1, m] };
            let sb = if rb { [n, 1] } else { [1, k] };
            let sc = if rc { [n, 1] } else { [1, m] };
            let guard = c64::new(7.0, -7.0);
            let old = c64::new(0.25, -1.5);
            let mut c = vec![old; m * n + 8];
            c[m * n..].fill(guard);
            let ran = small_gemm([m, n, k], Strided(&a, sa), Strided(&b, sb), StridedMut(&mut c[..m * n], sc), conj, accumulate);
            proptest::prop_assert!(c[m * n..].iter().all(|&x| x == guard), "wrote past the block");
            if !ran {
                proptest::prop_assert!(c[..m * n].iter().all(|&x| x == old), "declined but wrote");
                // A row-major `c` within the limits always runs.
                proptest::prop_assert!(m * n * k > SMALL_GEMM_MAX_MACS || n > SMALL_N || !rc);
            } else {
                let want = naive([m, n, k], (&a, sa), (&b, sb), conj);
                for i in 0..m {
                    for j in 0..n {
                        let got = c[i * sc[0] + j * sc[1]] - if accumulate { old } else { c64::zero() };
                        let w = want[i * n + j];
                        proptest::prop_assert!((got - w).norm() < 1e-12 * (1.0 + w.norm()), "({i}, {j}): {got} vs {w}");
                    }
                }
            }
        }

        /// Loops of tiny products whose operands come in every order of their labels (a
        /// batch label of 24 to 64, two left, two contracted and one right label of 2 to 4,
        /// complex, conjugated or not), so that `b` (or `a`, for a column-major output) is
        /// gathered or packed by `to_pack`: the GEMM path equals `reference_labels`.
        #[test]
        fn packed_or_gathered_operands_contract_as_the_reference(
            batch in 24usize..65,
            dims in proptest::collection::vec(2usize..5, 5),
            (pa, pb, po) in (0usize..120, 0usize..24, 0usize..24),
            conj in 0u32..4,
        ) {
            use crate::kernel::{ContractSpec, KernelChoice, contract_using};
            use crate::reference::reference_labels;
            use crate::tensor::Tensor;
            // Labels: 0 batch, 1 2 left, 3 4 contracted, 5 right.
            let sizes = [batch, dims[0], dims[1], dims[2], dims[3], dims[4]];
            let nth = |mut l: Vec<u32>, mut i: usize| -> Vec<u32> {
                let mut out = Vec::new();
                while !l.is_empty() {
                    out.push(l.remove(i % l.len()));
                    i /= out.len() + l.len() + 1;
                }
                out
            };
            let (la, lb, lo) = (nth(vec![0, 1, 2, 3, 4], pa), nth(vec![0, 3, 4, 5], pb), nth(vec![0, 1, 2, 5], po));
            let spec = ContractSpec::new(&la, &lb, &lo, &sizes).unwrap().with_conj([conj & 1 == 1, conj & 2 == 2]);
            let shape = |l: &[u32]| l.iter().map(|&c| sizes[c as usize]).collect::<Vec<_>>();
            let mut x = 0.0f64;
            let mut next = |_: &[usize]| {
                x += 1.0;
                c64::new((0.37 * x).sin(), (0.11 * x).cos())
            };
            let a = Tensor::from_fn(shape(&la), &mut next).unwrap();
            let b = Tensor::from_fn(shape(&lb), &mut next).unwrap();
            let got = contract_using(&spec, &a, &b, KernelChoice::Gemm);
            let ca = if conj & 1 == 1 { a.map(|x| x.conj()) } else { a.clone() };
            let cb = if conj & 2 == 2 { b.map(|x| x.conj()) } else { b.clone() };
            let want = reference_labels(&[(&ca, &la[..]), (&cb, &lb[..])], &lo, &sizes).unwrap();
            let err = got.max_abs_diff(&want).unwrap();
            proptest::prop_assert!(err <= 1e-11 * (1.0 + want.max_abs()), "{:?}: {}", spec, err);
        }
    }

    /// `lm_batch`'s transpose `cadfg,cbefg->abcde` (1996 products of 16³): `b` has its
    /// contracted labels innermost, and packing it (511 k elements) costs less than its
    /// gathers; a lone product is left gathered.
    #[test]
    fn a_transposed_b_is_packed_when_the_copy_costs_less() {
        let (a, b, c) = ([16, 1], [1, 16], [16, 1]);
        assert_eq!(to_pack([1996, 16, 16, 16], [a, b, c], [1996 * 256; 2]), Some(Gathered::B));
        assert_eq!(to_pack([1, 16, 16, 16], [a, b, [16, 1]], [256; 2]).is_some(), 0.25 * 4096.0 > 256.0);
        assert_eq!(to_pack([1, 16, 16, 16], [a, [16, 1], c], [256; 2]), None, "rows contiguous: nothing gathered");
        // Column-major output, `a` row-major: `a`'s columns gathered.
        assert_eq!(to_pack([1996, 16, 16, 16], [[16, 1], [16, 1], [1, 16]], [1996 * 256; 2]), Some(Gathered::A));
        assert_eq!(gather_ns([1996, 16, 16, 16], [a, b, c], [1996 * 256; 2]), GATHER_NS_PER_MAC * 1996.0 * 4096.0);
    }
}
