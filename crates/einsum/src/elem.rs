//! Element types: [`Elem`] for `f64` and [`c64`] (complex `f64`).

use std::fmt;
use std::ops::{Add, AddAssign, Mul, Neg, Sub};

use faer::{Accum, MatMut, MatRef, Par};

/// Complex `f64` (faer's and `num-complex`'s `Complex<f64>`).
pub use faer::c64;

/// A tensor element: `f64` or [`c64`].
///
/// Besides arithmetic it knows its conjugate, the real inner product
/// `⟨a, b⟩ = Re(conj(a)·b)` the AD convention is stated in, and how to run a GEMM.
pub trait Elem:
    Copy
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
    /// `c += a·b` for row-major `a` (m×k), `b` (k×n), `c` (m×n), contiguous, sequential.
    fn gemm(m: usize, n: usize, k: usize, a: &[Self], b: &[Self], c: &mut [Self]);
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
    fn gemm(m: usize, n: usize, k: usize, a: &[Self], b: &[Self], c: &mut [Self]) {
        faer_gemm(m, n, k, a, b, c);
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
    fn gemm(m: usize, n: usize, k: usize, a: &[Self], b: &[Self], c: &mut [Self]) {
        faer_gemm(m, n, k, a, b, c);
    }
}

fn faer_gemm<T: faer::traits::ComplexField + Elem>(m: usize, n: usize, k: usize, a: &[T], b: &[T], c: &mut [T]) {
    let lhs = MatRef::from_row_major_slice(&a[..m * k], m, k);
    let rhs = MatRef::from_row_major_slice(&b[..k * n], k, n);
    let dst = MatMut::from_row_major_slice_mut(&mut c[..m * n], m, n);
    faer::linalg::matmul::matmul(dst, Accum::Add, lhs, rhs, T::one(), Par::Seq);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_matches_a_loop() {
        let (m, n, k) = (3, 4, 5);
        let a: Vec<c64> = (0..m * k).map(|i| c64::new(i as f64, 1.0 - i as f64)).collect();
        let b: Vec<c64> = (0..k * n).map(|i| c64::new(0.5 * i as f64, 2.0)).collect();
        let mut c = vec![c64::one(); m * n];
        c64::gemm(m, n, k, &a, &b, &mut c);
        for i in 0..m {
            for j in 0..n {
                let mut s = c64::one();
                for l in 0..k {
                    s += a[i * k + l] * b[l * n + j];
                }
                assert!((s - c[i * n + j]).norm() < 1e-12, "{i} {j}");
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
}
