//! Element types: [`Elem`] for `f64` and [`c64`] (complex `f64`).

use std::fmt;
use std::ops::{Add, AddAssign, Mul, Neg, Sub};

use faer::{Accum, Conj, MatMut, MatRef, Par};

/// Complex `f64` (faer's and `num-complex`'s `Complex<f64>`).
pub use faer::c64;

/// A tensor element: `f64` or [`c64`] (sealed: implemented for these two only).
///
/// Besides arithmetic it knows its conjugate, the real inner product
/// `⟨a, b⟩ = Re(conj(a)·b)` the AD convention is stated in, and how to run a GEMM.
///
/// ```
/// use einsum::{c64, Elem};
///
/// let z = c64::new(1.0, 2.0);
/// assert_eq!(z.conj(), c64::new(1.0, -2.0));
/// assert_eq!(z.inner(z), 5.0); // Re(conj(z)·z) = |z|²
/// assert_eq!(3.0f64.inner(2.0), 6.0);
/// ```
pub trait Elem:
    sealed::Sealed
    + Copy
    + Send
    + Sync
    + 'static
    + fmt::Debug
    + PartialEq
    + Default
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Neg<Output = Self>
    + AddAssign
{
    /// Whether the type is complex (conjugation is not the identity).
    const IS_COMPLEX: bool;
    /// `"f64"` or `"c64"`.
    const NAME: &'static str;
    /// `0`.
    fn zero() -> Self;
    /// `1`.
    fn one() -> Self;
    /// The complex conjugate (the identity for reals).
    fn conj(self) -> Self;
    /// The real number `x` as an element.
    fn from_f64(x: f64) -> Self;
    /// `re + i·im`; the imaginary part is dropped for reals.
    fn from_parts(re: f64, im: f64) -> Self;
    /// The bit patterns of the real and imaginary parts (for hashing and equality of
    /// operations that carry a constant).
    fn to_bits(self) -> [u64; 2];
    /// The modulus `|x|`.
    fn modulus(self) -> f64;
    /// The real inner product `Re(conj(self)·other)`.
    fn inner(self, other: Self) -> f64;
    /// Writes the value compactly (`1.5`, `1.5-0.5i`).
    fn fmt_short(self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
    /// The slice as `f64`s: `Some` for `f64`, `None` for complex. Why: a kernel may then
    /// run a loop written over `f64` (in the processor's vectors of `f64`, as `pulp` hands
    /// them out) and its generic loop as the fallback, without `unsafe`.
    fn as_f64s(s: &[Self]) -> Option<&[f64]>;
    /// [`Elem::as_f64s`] of a slice to be written.
    fn as_f64s_mut(s: &mut [Self]) -> Option<&mut [f64]>;
    /// `c += op(a)·op(b)` (with `accumulate`) or `c = op(a)·op(b)` (without: `c` is
    /// written, never read, so its old values may be anything) for `a` (m×k), `b` (k×n),
    /// `c` (m×n) given as slices starting at their first element with `[row stride,
    /// column stride]`; for each matrix one stride must be 1 unless its dimension is 1
    /// (the other stride is then ignored). `op` conjugates the elements where `conj` says
    /// so (no effect on reals). Sequential.
    ///
    /// # Panics
    /// If a slice is too short for its strides.
    fn gemm(
        dims: [usize; 3],
        a: Strided<'_, Self>,
        b: Strided<'_, Self>,
        c: StridedMut<'_, Self>,
        conj: [bool; 2],
        accumulate: bool,
    );
}

/// Why sealed: [`Elem`] is implemented for `f64` and [`c64`] only, and kernels add required
/// methods to it as they need them (`as_f64s`), which would break an implementation outside
/// this crate.
mod sealed {
    use super::{Cut, Strided, StridedMut};

    /// What the crate's GEMM loop asks of an element beside [`super::Elem`]'s public
    /// methods: [`super::Elem::gemm`] cut into blocks over the caller's pool
    /// ([`super::gemm_cut_into`]).
    pub trait Sealed: Sized {
        /// [`super::gemm_cut_into`] for this element type.
        fn gemm_cut_into(
            dims: [usize; 3],
            a: Strided<'_, Self>,
            b: Strided<'_, Self>,
            c: StridedMut<'_, Self>,
            conj: [bool; 2],
            accumulate: bool,
            cut: Option<Cut>,
        );
    }

    // Both element types cut through faer's generic GEMM, which needs the `ComplexField`
    // bound that `Elem` does not carry.
    macro_rules! cut_through_faer {
        ($($t:ty),*) => {$(
            impl Sealed for $t {
                fn gemm_cut_into(
                    dims: [usize; 3],
                    a: Strided<'_, Self>,
                    b: Strided<'_, Self>,
                    c: StridedMut<'_, Self>,
                    conj: [bool; 2],
                    accumulate: bool,
                    cut: Option<Cut>,
                ) {
                    super::faer_gemm(dims, a, b, c, conj, accumulate, cut);
                }
            }
        )*};
    }
    cut_through_faer!(f64, super::c64);
}

impl Elem for f64 {
    const IS_COMPLEX: bool = false;
    const NAME: &'static str = "f64";
    fn zero() -> Self {
        0.0
    }
    fn one() -> Self {
        1.0
    }
    fn conj(self) -> Self {
        self
    }
    fn from_f64(x: f64) -> Self {
        x
    }
    fn from_parts(re: f64, _: f64) -> Self {
        re
    }
    fn to_bits(self) -> [u64; 2] {
        [f64::to_bits(self), 0]
    }
    fn modulus(self) -> f64 {
        self.abs()
    }
    fn inner(self, other: Self) -> f64 {
        self * other
    }
    fn fmt_short(self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self:?}")
    }
    fn as_f64s(s: &[Self]) -> Option<&[f64]> {
        Some(s)
    }
    fn as_f64s_mut(s: &mut [Self]) -> Option<&mut [f64]> {
        Some(s)
    }
    fn gemm(
        dims: [usize; 3],
        a: Strided<'_, Self>,
        b: Strided<'_, Self>,
        c: StridedMut<'_, Self>,
        conj: [bool; 2],
        accumulate: bool,
    ) {
        faer_gemm(dims, a, b, c, conj, accumulate, None);
    }
}

impl Elem for c64 {
    const IS_COMPLEX: bool = true;
    const NAME: &'static str = "c64";
    fn zero() -> Self {
        c64::new(0.0, 0.0)
    }
    fn one() -> Self {
        c64::new(1.0, 0.0)
    }
    fn conj(self) -> Self {
        c64::new(self.re, -self.im)
    }
    fn from_f64(x: f64) -> Self {
        c64::new(x, 0.0)
    }
    fn from_parts(re: f64, im: f64) -> Self {
        c64::new(re, im)
    }
    fn to_bits(self) -> [u64; 2] {
        [self.re.to_bits(), self.im.to_bits()]
    }
    fn modulus(self) -> f64 {
        self.re.hypot(self.im)
    }
    fn inner(self, other: Self) -> f64 {
        self.re * other.re + self.im * other.im
    }
    fn fmt_short(self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sign = if self.im.is_sign_negative() { "-" } else { "+" };
        write!(f, "{:?}{sign}{:?}i", self.re, self.im.abs())
    }
    fn as_f64s(_: &[Self]) -> Option<&[f64]> {
        None
    }
    fn as_f64s_mut(_: &mut [Self]) -> Option<&mut [f64]> {
        None
    }
    fn gemm(
        dims: [usize; 3],
        a: Strided<'_, Self>,
        b: Strided<'_, Self>,
        c: StridedMut<'_, Self>,
        conj: [bool; 2],
        accumulate: bool,
    ) {
        faer_gemm(dims, a, b, c, conj, accumulate, None);
    }
}

/// A matrix in a slice: the slice starts at element `(0, 0)`; `[row stride, column stride]`.
///
/// ```
/// use einsum::{Elem, Strided, StridedMut};
///
/// // C = A·B with A 2×3 row-major, B 3×2 given column-major (strides [1, 3]).
/// let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
/// let b = [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]; // columns (1, 0, 1) and (0, 1, 0)
/// let mut c = [0.0; 4];
/// f64::gemm([2, 2, 3], Strided(&a, [3, 1]), Strided(&b, [1, 3]), StridedMut(&mut c, [2, 1]), [false; 2], false);
/// assert_eq!(c, [4.0, 2.0, 10.0, 5.0]);
/// ```
#[derive(Copy, Clone, Debug)]
pub struct Strided<'a, T>(pub &'a [T], pub [usize; 2]);

/// A mutable matrix in a slice (see [`Strided`]).
#[derive(Debug)]
pub struct StridedMut<'a, T>(pub &'a mut [T], pub [usize; 2]);

/// Whether a `rows × cols` matrix with strides `[rs, cs]` is row-major with a leading
/// dimension (`Some(true)`), column-major with one (`Some(false)`), or neither.
pub(crate) fn layout(rows: usize, cols: usize, [rs, cs]: [usize; 2]) -> Option<bool> {
    if cs == 1 || cols == 1 {
        Some(true)
    } else if rs == 1 || rows == 1 {
        Some(false)
    } else {
        None
    }
}

fn mat<T>(r: usize, c: usize, Strided(s, st): Strided<'_, T>) -> MatRef<'_, T> {
    match layout(r, c, st) {
        Some(true) => MatRef::from_row_major_slice_with_stride(s, r, c, st[0].max(c)),
        Some(false) => MatRef::from_column_major_slice_with_stride(s, r, c, st[1].max(r)),
        None => panic!("gemm: a {r}×{c} matrix with strides {st:?} has no unit stride"),
    }
}

fn mat_mut<T>(r: usize, c: usize, StridedMut(s, st): StridedMut<'_, T>) -> MatMut<'_, T> {
    match layout(r, c, st) {
        // Not `from_row_major_slice_with_stride_mut`: in faer 0.24.4 it builds a
        // column-major view (unit row stride), so GEMM writes past the rows.
        Some(true) => MatMut::from_column_major_slice_with_stride_mut(s, c, r, st[0].max(c)).transpose_mut(),
        Some(false) => MatMut::from_column_major_slice_with_stride_mut(s, r, c, st[1].max(r)),
        None => panic!("gemm: a {r}×{c} matrix with strides {st:?} has no unit stride"),
    }
}

fn faer_gemm<T: faer::traits::ComplexField + Elem>(
    [m, n, k]: [usize; 3],
    a: Strided<'_, T>,
    b: Strided<'_, T>,
    c: StridedMut<'_, T>,
    [ca, cb]: [bool; 2],
    accumulate: bool,
    cut: Option<Cut>,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            mat_mut(m, n, c).fill(T::zero());
        }
        return;
    }
    let dst = mat_mut(m, n, c);
    let flag = |c: bool| if c && T::IS_COMPLEX { Conj::Yes } else { Conj::No };
    let (lhs, rhs) = (mat(m, k, a), mat(k, n, b));
    let accum = if accumulate { Accum::Add } else { Accum::Replace };
    let (fa, fb) = (flag(ca), flag(cb));
    match cut.filter(|c| c.parts > 1) {
        Some(Cut { cols, parts }) => {
            use rayon::prelude::*;
            // One block of the output per thread, each a sequential GEMM: faer's own split
            // of a `256³` product gained less on two threads than this one
            // (`docs/PERFORMANCE.md`). Each block packs the other operand again, which for
            // a GEMM worth splitting is a small part of its work. Every element's sum runs
            // over `k` as in the whole GEMM, in the whole GEMM's kernel where the caller
            // cut as [`Cut`] says, so the result is the same.
            let mut blocks = Vec::with_capacity(parts);
            if cols {
                let (mut dst, mut rhs) = (dst, rhs);
                for left in (1..=parts).rev() {
                    let w = split_block(dst.ncols(), left);
                    let (d0, d1) = dst.split_at_col_mut(w);
                    let (r0, r1) = rhs.split_at_col(w);
                    blocks.push((d0, lhs, r0));
                    (dst, rhs) = (d1, r1);
                }
            } else {
                let (mut dst, mut lhs) = (dst, lhs);
                for left in (1..=parts).rev() {
                    let h = split_block(dst.nrows(), left);
                    let (d0, d1) = dst.split_at_row_mut(h);
                    let (l0, l1) = lhs.split_at_row(h);
                    blocks.push((d0, l0, rhs));
                    (dst, lhs) = (d1, l1);
                }
            }
            blocks.into_par_iter().for_each(|(d, l, r)| {
                faer::linalg::matmul::matmul_with_conj(d, accum, l, fa, r, fb, T::one(), Par::Seq);
            });
        }
        None => faer::linalg::matmul::matmul_with_conj(dst, accum, lhs, fa, rhs, fb, T::one(), Par::Seq),
    }
}

/// How a GEMM's output is cut over the threads of the caller's pool ([`gemm_cut_into`]):
/// its columns (with `b`'s) or its rows (with `a`'s) into `parts` blocks of
/// [`split_block`]'s sizes, each a sequential GEMM on one of the threads.
///
/// A block sums each element over `k` as the whole GEMM does, but faer runs a product of
/// one row or column as a matrix-vector product, and a small one in its nano-GEMM, each
/// summing in an order of its own: the caller (`gemm_loop::split_cut`) cuts only where
/// every block keeps the whole GEMM's kernel, so that the result is the one-thread one
/// bit for bit.
///
/// `pub` without a path to it from the crate's root: the sealed trait's method names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cut {
    /// Columns (`true`) or rows.
    pub cols: bool,
    /// The number of blocks.
    pub parts: usize,
}

/// [`Elem::gemm`] with its output cut by `cut` over the caller's pool (`None`: on this
/// thread, as [`Elem::gemm`]).
pub(crate) fn gemm_cut_into<T: Elem>(
    dims: [usize; 3],
    a: Strided<'_, T>,
    b: Strided<'_, T>,
    c: StridedMut<'_, T>,
    conj: [bool; 2],
    accumulate: bool,
    cut: Option<Cut>,
) {
    <T as sealed::Sealed>::gemm_cut_into(dims, a, b, c, conj, accumulate, cut);
}

/// Multiply-adds from which one GEMM splits over its pool's threads (`gemm_loop.rs` decides
/// and cuts it by [`Cut`]): about 0.07 ms of one core's work, against the tens of
/// microseconds that forking and joining cost. (At
/// `2^21`, the matrix chain's last, sequential steps of 1 to 2 million multiply-adds ran
/// on one core while the other waited: two threads took 7% longer on it, and no other
/// instance moved; `docs/performance-history.md`, *Two threads, a GEMM splits from 2^20
/// multiply-adds*.)
pub(crate) const PAR_GEMM_MIN_MACS: usize = 1 << 20;

/// The threads of the rayon pool the caller runs in (`pool.install`, a pool's task), or 1
/// outside any: a kernel splits only over a pool its caller chose ([`crate::Einsum::eval`]
/// stays on one thread otherwise).
pub(crate) fn caller_pool_threads() -> usize {
    if rayon::current_thread_index().is_some() { rayon::current_num_threads() } else { 1 }
}

/// The rows (or columns) the next block of a split GEMM takes when `rest` remain for
/// `left` blocks: all of them for the last block, else an even share rounded up to a
/// multiple of 8 (faer's micro-kernels work in such panels). `gemm_loop.rs`'s read-ahead
/// cuts an operand by the same rule, so that each thread reads the part it multiplies.
pub(crate) fn split_block(rest: usize, left: usize) -> usize {
    if left <= 1 { rest } else { (rest / left).next_multiple_of(8).min(rest) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_matches_a_loop_in_every_layout() {
        // The small size runs faer's nano-GEMM, the larger one its blocked x86 kernels;
        // k = 0 only writes (or keeps) the output.
        for (m, n, k) in [(3, 4, 5), (37, 41, 29), (3, 4, 0)] {
            gemm_layouts(m, n, k);
        }
    }

    fn gemm_layouts(m: usize, n: usize, k: usize) {
        let a: Vec<c64> = (0..m * k).map(|i| c64::new(i as f64, 1.0 - i as f64)).collect();
        let b: Vec<c64> = (0..k * n).map(|i| c64::new(0.5 * i as f64, 2.0)).collect();
        let guard = c64::new(7.0, -7.0);
        for layout in 0..64 {
            let (ra, rb, rc) = (layout & 1 == 1, layout & 2 == 2, layout & 4 == 4);
            let conj = [layout & 8 == 8, layout & 16 == 16];
            // Without accumulation the old values are never read, not even a NaN.
            let accumulate = layout & 32 == 0;
            let old = if accumulate { c64::one() } else { c64::new(f64::NAN, f64::NAN) };
            let op = |x: c64, c: bool| if c { Elem::conj(x) } else { x };
            let sa = if ra { [k, 1] } else { [1, m] };
            let sb = if rb { [n, 1] } else { [1, k] };
            let sc = if rc { [n, 1] } else { [1, m] };
            let at = |s: [usize; 2], i: usize, j: usize| i * s[0] + j * s[1];
            // A guard zone after the output catches writes past its end.
            let mut c = vec![old; m * n + 16];
            c[m * n..].fill(guard);
            c64::gemm([m, n, k], Strided(&a, sa), Strided(&b, sb), StridedMut(&mut c[..m * n], sc), conj, accumulate);
            assert!(c[m * n..].iter().all(|&x| x == guard), "{m}×{n}×{k} layout {layout}: wrote past the output");
            for i in 0..m {
                for j in 0..n {
                    let mut s = if accumulate { c64::one() } else { c64::zero() };
                    for l in 0..k {
                        s += op(a[at(sa, i, l)], conj[0]) * op(b[at(sb, l, j)], conj[1]);
                    }
                    let err = (s - c[at(sc, i, j)]).norm();
                    assert!(err < 1e-12 * (1.0 + s.norm()), "{m}×{n}×{k} layout {layout}: ({i}, {j})");
                }
            }
        }
    }

    #[test]
    fn conj_and_inner() {
        let a = c64::new(1.0, 2.0);
        assert_eq!(Elem::conj(a), c64::new(1.0, -2.0));
        assert_eq!(a.inner(c64::new(3.0, -1.0)), 1.0);
        assert_eq!(Elem::conj(2.0f64), 2.0);
        assert_eq!(c64::from_parts(1.0, 2.0), a);
        assert_eq!(f64::from_parts(1.0, 2.0), 1.0);
    }

    #[test]
    fn only_reals_read_as_f64s() {
        let mut r = [1.0, 2.0];
        assert_eq!(f64::as_f64s(&r), Some(&[1.0, 2.0][..]));
        f64::as_f64s_mut(&mut r).expect("reals")[1] = 3.0;
        assert_eq!(r, [1.0, 3.0]);
        let mut z = [c64::new(1.0, 2.0)];
        assert!(c64::as_f64s(&z).is_none());
        assert!(c64::as_f64s_mut(&mut z).is_none());
    }
}
