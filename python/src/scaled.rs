//! `left_range`: whether a contraction's result has left float64's range (an entry that
//! is not finite, or a largest modulus below the normal range), the cheap test by which
//! `cgx.contract`'s default `strip_exponent=None` decides to run a contraction again
//! scaled. One pass over the array without a temporary: numpy's `abs` and `max` cost
//! more than a small contraction.

use einsum::c64;
use numpy::{PyArrayDyn, PyArrayMethods};
use pyo3::prelude::*;

/// Whether the moduli `m` (in any order) hold a value that is not finite, or have a
/// largest value that is not zero but below `f64::MIN_POSITIVE`.
fn outside(m: impl Iterator<Item = f64>) -> bool {
    let mut largest = 0.0f64;
    for x in m {
        if !x.is_finite() {
            return true;
        }
        largest = largest.max(x);
    }
    largest > 0.0 && largest < f64::MIN_POSITIVE
}

/// [`outside`] of a contiguous float64 slice, in lanes the compiler vectorizes: the
/// early return and `f64::max` of the plain loop keep it scalar, and the test of a large
/// result then cost more than the element-wise product that made it. A lane's `x · 0` sum
/// turns NaN at the first entry that is not finite and stays NaN; its largest modulus is
/// kept by a comparison, which NaN entries skip (the sum has caught them).
fn outside_slice(s: &[f64]) -> bool {
    const LANES: usize = 8;
    let mut largest = [0.0f64; LANES];
    let mut nan = [0.0f64; LANES];
    let chunks = s.chunks_exact(LANES);
    let tail = chunks.remainder();
    for c in chunks {
        for i in 0..LANES {
            let x = c[i].abs();
            largest[i] = if x > largest[i] { x } else { largest[i] };
            nan[i] += c[i] * 0.0;
        }
    }
    if nan.iter().any(|v| v.is_nan()) {
        return true;
    }
    outside(largest.into_iter().chain(tail.iter().map(|v| v.abs())))
}

/// `left_range(x)`: for a float64 or complex128 numpy array, whether an entry is not
/// finite or the largest modulus is a subnormal number; `False` for anything else.
#[pyfunction]
pub fn left_range(x: &Bound<'_, PyAny>) -> bool {
    if let Ok(a) = x.cast::<PyArrayDyn<f64>>() {
        let a = a.readonly();
        if let Ok(s) = a.as_slice() {
            return outside_slice(s);
        }
        return outside(a.as_array().iter().map(|v| v.abs()));
    }
    if let Ok(a) = x.cast::<PyArrayDyn<c64>>() {
        let a = a.readonly();
        return outside(a.as_array().iter().map(|v| v.re.hypot(v.im)));
    }
    false
}
