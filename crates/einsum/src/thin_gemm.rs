//! GEMMs of a few rows and columns summed over a long `k`: `c = op(a)·op(b)` (or `+=`)
//! with `m, n ≤` [`THIN_MAX`], `a`'s rows and `b`'s columns contiguous along `k`. These are
//! the transposes that make a small factor's gradient from two large tensors (the queens
//! network's `dA = Σ dC·B`, a `3 × 3` result over `3^10` to `3^14` terms): faer runs them
//! as a general GEMM on one thread, and cutting the output per thread, as `elem.rs` does
//! for large GEMMs, leaves nothing to cut.
//!
//! The kernel reads each of the `m + n` rows once and keeps all `m·n` sums in registers
//! (vectors of [`LANES`] partial sums each), so it runs at memory bandwidth. `k` is cut
//! into chunks of [`CHUNK`] at fixed places; each chunk's sums are formed alone and the
//! chunks' sums are added in order, so the result does not depend on how many threads
//! formed the chunks: inside a pool of several threads, a product of at least
//! `PAR_GEMM_MIN_MACS` multiply-adds forms its chunks on all of them, and two threads give
//! the one-thread result bit for bit.
//!
//! Invariants: every element of the `m × n` block of `c` is written (replaced or
//! accumulated into) exactly once; nothing outside it is touched; [`thin_gemm`] writes
//! nothing when it declines. Cost: `m·n·k` multiply-adds, `(m + n)·k` reads, one
//! allocation of the chunks' sums (`m·n` elements per chunk) when the threads share it.

use crate::elem::{Elem, PAR_GEMM_MIN_MACS, Strided, StridedMut};

/// The most rows (and columns) of `c` the kernel keeps in registers.
pub(crate) const THIN_MAX: usize = 4;

/// Elements of `k` summed alone before the chunks' sums are added: the order of sums is
/// fixed by it, not by the threads. Large enough that the chunks' sums cost nothing
/// beside the chunk (`m·n` additions per `(m + n)·CHUNK` reads), small enough that a
/// `k` of `3^10` gives each of two threads several chunks.
pub(crate) const CHUNK: usize = 1 << 11;

/// Partial sums per accumulator: one AVX2 vector of `f64`.
const LANES: usize = 4;

/// The chunks a thread of the pool takes at once, so that a task holds enough work to
/// pay for its hand-off.
const CHUNKS_PER_TASK: usize = 4;

/// Runs `c = op(a)·op(b)` (`accumulate`: `c +=`) for `[m, n, k]` when `m, n ≤ THIN_MAX`,
/// `k > 0`, `a`'s column stride and `b`'s row stride are 1 (or their other dimension is 1
/// and the stride of `k` is 1), and returns whether it did; `c` is untouched when it
/// returns `false`. Strides as in [`Elem::gemm`].
pub(crate) fn thin_gemm<T: Elem>(
    [m, n, k]: [usize; 3],
    a: Strided<'_, T>,
    b: Strided<'_, T>,
    c: StridedMut<'_, T>,
    conj: [bool; 2],
    accumulate: bool,
) -> bool {
    let unit_k = |s: usize| s == 1 || k == 1;
    if m == 0 || n == 0 || m > THIN_MAX || n > THIN_MAX || k == 0 || !unit_k(a.1[1]) || !unit_k(b.1[0]) {
        return false;
    }
    // Each row of `a` and column of `b` as a slice of `k` elements.
    fn rows<T>(d: &[T], stride: usize, count: usize, k: usize) -> [&[T]; THIN_MAX] {
        let mut r: [&[T]; THIN_MAX] = [&[]; THIN_MAX];
        for (i, slot) in r.iter_mut().enumerate().take(count) {
            *slot = &d[i * stride..i * stride + k];
        }
        r
    }
    let (ra, cb) = (rows(a.0, a.1[0], m, k), rows(b.0, b.1[1], n, k));
    let chunks = k.div_ceil(CHUNK);
    let sum_of = |j: usize| chunk_sums([m, n], ra, cb, j * CHUNK..((j + 1) * CHUNK).min(k), conj);
    let pooled = crate::elem::caller_pool_threads() > 1;
    let mut total = [T::zero(); THIN_MAX * THIN_MAX];
    if pooled && m * n * k >= par_min_macs() && chunks > 1 {
        use rayon::prelude::*;
        let sums: Vec<[T; THIN_MAX * THIN_MAX]> =
            (0..chunks).into_par_iter().with_min_len(CHUNKS_PER_TASK).map(sum_of).collect();
        for s in &sums {
            add(&mut total, s);
        }
    } else {
        for j in 0..chunks {
            if j % 64 == 63 && crate::stop::requested() {
                return true; // the evaluation is ending with an error; `c` is discarded
            }
            add(&mut total, &sum_of(j));
        }
    }
    let StridedMut(c, [rc, cc]) = c;
    for i in 0..m {
        for j in 0..n {
            let x = total[i * THIN_MAX + j];
            let o = &mut c[i * rc + j * cc];
            *o = if accumulate { *o + x } else { x };
        }
    }
    true
}

/// Multiply-adds from which the chunks are formed on the pool's threads:
/// `PAR_GEMM_MIN_MACS`, as for any GEMM; in tests `2^10`, so that the property test's
/// small products take the pool's path too.
fn par_min_macs() -> usize {
    if cfg!(test) { 1 << 10 } else { PAR_GEMM_MIN_MACS }
}

/// `total += s`, element by element (the chunks' sums, in chunk order).
fn add<T: Elem>(total: &mut [T; THIN_MAX * THIN_MAX], s: &[T; THIN_MAX * THIN_MAX]) {
    for (t, &x) in total.iter_mut().zip(s) {
        *t += x;
    }
}

/// The sums of one chunk `range` of `k`: element `i·THIN_MAX + j` is `Σ op(a_i)·op(b_j)`
/// over the range, dispatched to constant `m` and `n` so that the accumulators stay in
/// registers.
fn chunk_sums<T: Elem>(
    [m, n]: [usize; 2],
    a: [&[T]; THIN_MAX],
    b: [&[T]; THIN_MAX],
    range: std::ops::Range<usize>,
    conj: [bool; 2],
) -> [T; THIN_MAX * THIN_MAX] {
    macro_rules! dispatch {
        ($($m:literal $n:literal),*) => {
            match (m, n) {
                $(($m, $n) => crate::small_gemm::arch().dispatch(Chunk::<T, $m, $n> { a, b, range, conj }),)*
                _ => unreachable!("thin_gemm checked m, n ≤ THIN_MAX"),
            }
        };
    }
    dispatch!(1 1, 1 2, 1 3, 1 4, 2 1, 2 2, 2 3, 2 4, 3 1, 3 2, 3 3, 3 4, 4 1, 4 2, 4 3, 4 4)
}

/// The arguments of [`chunk_sums`] for `M × N`, as the value pulp dispatches (a closure
/// would not be inlined into the function compiled for the processor's instructions).
struct Chunk<'a, T, const M: usize, const N: usize> {
    a: [&'a [T]; THIN_MAX],
    b: [&'a [T]; THIN_MAX],
    range: std::ops::Range<usize>,
    conj: [bool; 2],
}

impl<T: Elem, const M: usize, const N: usize> pulp::WithSimd for Chunk<'_, T, M, N> {
    type Output = [T; THIN_MAX * THIN_MAX];

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) -> Self::Output {
        let Chunk { a, b, range, conj: [conj_a, conj_b] } = self;
        // (A no-op for reals.)
        let op = |x: T, on: bool| if on && T::IS_COMPLEX { x.conj() } else { x };
        let a: [&[T]; M] = std::array::from_fn(|i| &a[i][range.clone()]);
        let b: [&[T]; N] = std::array::from_fn(|j| &b[j][range.clone()]);
        let len = range.len();
        let body = len - len % LANES;
        // Lane `l` of accumulator `(i, j)` sums the terms `l, l + LANES, …` of the chunk.
        let mut acc = [[[T::zero(); LANES]; N]; M];
        for p in (0..body).step_by(LANES) {
            let x: [[T; LANES]; M] = std::array::from_fn(|i| {
                let s: &[T; LANES] = a[i][p..p + LANES].try_into().expect("LANES elements");
                s.map(|v| op(v, conj_a))
            });
            let y: [[T; LANES]; N] = std::array::from_fn(|j| {
                let s: &[T; LANES] = b[j][p..p + LANES].try_into().expect("LANES elements");
                s.map(|v| op(v, conj_b))
            });
            for i in 0..M {
                for j in 0..N {
                    for l in 0..LANES {
                        acc[i][j][l] += x[i][l] * y[j][l];
                    }
                }
            }
        }
        let mut out = [T::zero(); THIN_MAX * THIN_MAX];
        for i in 0..M {
            for j in 0..N {
                let mut s = acc[i][j].iter().fold(T::zero(), |s, &x| s + x);
                for p in body..len {
                    s += op(a[i][p], conj_a) * op(b[j][p], conj_b);
                }
                out[i * THIN_MAX + j] = s;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elem::c64;
    use crate::small_gemm::tests::naive;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]

        /// Shapes up to one past `THIN_MAX`, `k` across chunk boundaries, operands in both
        /// layouts, `c` in both, conjugated or not, replacing or accumulating: the kernel
        /// either declines and writes nothing (and declines only outside its cases), or
        /// equals the triple loop and writes nothing outside the block; in a pool of two
        /// threads it gives the same bits as on one.
        #[test]
        fn thin_gemm_matches_a_triple_loop(
            m in 1usize..6, n in 1usize..6, k in 1usize..(3 * CHUNK + 7), layout in 0u32..64,
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
            let run = |c: &mut Vec<c64>| {
                c.clear();
                c.resize(m * n, old);
                c.resize(m * n + 8, guard);
                thin_gemm([m, n, k], Strided(&a, sa), Strided(&b, sb), StridedMut(&mut c[..m * n], sc), conj, accumulate)
            };
            let mut c = Vec::new();
            let ran = run(&mut c);
            proptest::prop_assert!(c[m * n..].iter().all(|&x| x == guard), "wrote past the block");
            let fits = m <= THIN_MAX && n <= THIN_MAX && (ra || m == 1 || k == 1) && (!rb || n == 1 || k == 1);
            proptest::prop_assert_eq!(ran, fits);
            if !ran {
                proptest::prop_assert!(c[..m * n].iter().all(|&x| x == old), "declined but wrote");
            } else {
                let want = naive([m, n, k], (&a, sa), (&b, sb), conj);
                for i in 0..m {
                    for j in 0..n {
                        let got = c[i * sc[0] + j * sc[1]] - if accumulate { old } else { c64::zero() };
                        let w = want[i * n + j];
                        proptest::prop_assert!((got - w).norm() < 1e-11 * (1.0 + w.norm()), "({i}, {j}): {got} vs {w}");
                    }
                }
                let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
                let mut two = Vec::new();
                proptest::prop_assert!(pool.install(|| run(&mut two)));
                proptest::prop_assert_eq!(&two, &c, "two threads differ from one");
            }
        }
    }
}
