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

/// `left_range(x)`: for a float64 or complex128 numpy array, whether an entry is not
/// finite or the largest modulus is a subnormal number; `False` for anything else.
#[pyfunction]
pub fn left_range(x: &Bound<'_, PyAny>) -> bool {
    if let Ok(a) = x.cast::<PyArrayDyn<f64>>() {
        let a = a.readonly();
        return outside(a.as_array().iter().map(|v| v.abs()));
    }
    if let Ok(a) = x.cast::<PyArrayDyn<c64>>() {
        let a = a.readonly();
        return outside(a.as_array().iter().map(|v| v.re.hypot(v.im)));
    }
    false
}
