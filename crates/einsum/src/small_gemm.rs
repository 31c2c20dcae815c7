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
mod tests {
    use super::*;
    use crate::elem::c64;

    /// A triple loop over any strides, the reference.
    fn naive(
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
    }
}
