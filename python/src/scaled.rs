//! `left_range`: whether a contraction's result has left float64's range (an entry that
//! is not finite, or a largest modulus below the normal range), the cheap test by which
//! `cgx.contract`'s default `strip_exponent=None` decides to run a contraction again
//! scaled. One pass over the array without a temporary: numpy's `abs` and `max` cost
//! more than a small contraction. `any_left_range`: the same test over a value and its
//! gradients in one call, without the GIL, the contiguous float64 arrays read in chunks
//! over the call's threads (the test reads every gradient entry once more, at memory
//! bandwidth, which a second core adds to). The scan of a contiguous array is
//! `einsum::RangeScan`'s, the one an element-wise product (`einsum::Hadamard`) makes while
//! it writes its results. An expression's calls need neither function: the call's
//! threads read the results right after writing them (`any_outside_in_pool`; complex
//! results' moduli are decided from their parts' scan except near the ends of the range).

use einsum::{RangeScan, c64};
use numpy::{PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyList;

/// Elements per chunk of [`any_left_range`]'s parallel test: 512 KiB of float64, so that a
/// chunk's work (tens of microseconds) dwarfs claiming it.
const CHUNK: usize = 1 << 16;

/// Below this many float64 entries in all, [`any_left_range`] reads them on the calling
/// thread: entering the pool costs microseconds.
const PAR_MIN_ELEMENTS: usize = 1 << 20;

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

/// The element types whose contiguous entries `einsum::RangeScan` reads in lanes the
/// compiler vectorizes (the early return and `f64::max` of [`outside`]'s plain loop keep it
/// scalar, and the test of a large result then cost more than the element-wise product
/// that made it; `hypot` per complex entry more still).
pub(crate) trait Scanned: numpy::Element + Sync + Sized {
    /// float64 parts per element: chunks and thresholds count parts.
    const PARTS: usize;
    /// The scan of `s`: float64 by `RangeScan::of`, complex128 by its parts
    /// (`RangeScan::of_complex`, moduli computed only near the ends of the range).
    fn scan(s: &[Self]) -> RangeScan;
    /// The modulus of one entry, for arrays that are not contiguous.
    fn modulus(&self) -> f64;
}

impl Scanned for f64 {
    const PARTS: usize = 1;
    fn scan(s: &[f64]) -> RangeScan {
        RangeScan::of(s)
    }
    fn modulus(&self) -> f64 {
        self.abs()
    }
}

impl Scanned for c64 {
    const PARTS: usize = 2;
    fn scan(s: &[c64]) -> RangeScan {
        RangeScan::of_complex(s)
    }
    fn modulus(&self) -> f64 {
        self.re.hypot(self.im)
    }
}

/// [`outside`] of a contiguous slice, by its [`Scanned::scan`].
fn outside_slice<T: Scanned>(s: &[T]) -> bool {
    T::scan(s).left_range()
}

/// `left_range(x)`: for a float64 or complex128 numpy array, whether an entry is not
/// finite or the largest modulus is a subnormal number; `False` for anything else.
///
/// A contiguous array of `PAR_MIN_ELEMENTS` float64 parts or more is read without the
/// GIL and, when the call has a pool of several threads, in chunks over them, as
/// [`any_left_range`] reads it: a forward call's result is read once more after the
/// contraction wrote it, which on two threads was the one part of an element-wise
/// product left to a single thread.
#[pyfunction]
pub fn left_range(x: &Bound<'_, PyAny>) -> PyResult<bool> {
    if let Ok(a) = x.cast::<PyArrayDyn<f64>>() {
        return array_left_range(x.py(), a.readonly());
    }
    if let Ok(a) = x.cast::<PyArrayDyn<c64>>() {
        return array_left_range(x.py(), a.readonly());
    }
    Ok(false)
}

/// [`left_range`] of one array of a [`Scanned`] type.
fn array_left_range<T: Scanned>(py: Python<'_>, a: PyReadonlyArrayDyn<'_, T>) -> PyResult<bool> {
    let Ok(s) = a.as_slice() else { return Ok(outside(a.as_array().iter().map(T::modulus))) };
    if s.len() * T::PARTS < PAR_MIN_ELEMENTS {
        return Ok(outside_slice(s));
    }
    let pool = crate::threads::call_pool()?;
    Ok(py.detach(|| match pool {
        Some(pool) => pool.install(|| any_outside_par(&[s])),
        None => outside_slice(s),
    }))
}

/// `any_left_range(arrays)`: whether any of `arrays` (a list: a value and its gradients)
/// is one [`left_range`] says left the range. The contiguous float64 and complex128
/// arrays are read without the GIL, split into chunks over the threads of the call's pool
/// when it has several and they hold `PAR_MIN_ELEMENTS` float64 parts or more; the others
/// one at a time as `left_range` reads them.
#[pyfunction]
pub fn any_left_range(py: Python<'_>, arrays: &Bound<'_, PyList>) -> PyResult<bool> {
    let mut views: Vec<PyReadonlyArrayDyn<'_, f64>> = Vec::new();
    let mut complex: Vec<PyReadonlyArrayDyn<'_, c64>> = Vec::new();
    for x in arrays.iter() {
        match (x.cast::<PyArrayDyn<f64>>(), x.cast::<PyArrayDyn<c64>>()) {
            (Ok(a), _) if a.is_contiguous() => views.push(a.readonly()),
            (_, Ok(a)) if a.is_contiguous() => complex.push(a.readonly()),
            _ => {
                if left_range(&x)? {
                    return Ok(true);
                }
            }
        }
    }
    let slices: Vec<&[f64]> = views.iter().filter_map(|v| v.as_slice().ok()).collect();
    let parts: Vec<&[c64]> = complex.iter().filter_map(|v| v.as_slice().ok()).collect();
    let total = parts_of(&slices) + parts_of(&parts);
    let pool = if total >= PAR_MIN_ELEMENTS { crate::threads::call_pool()? } else { None };
    let test = || any_outside_in_pool(&slices) || any_outside_in_pool(&parts);
    Ok(py.detach(|| match pool {
        Some(pool) => pool.install(test),
        None => test(),
    }))
}

/// The float64 parts of `slices`.
fn parts_of<T: Scanned>(slices: &[&[T]]) -> usize {
    slices.iter().map(|s| s.len() * T::PARTS).sum()
}

/// Whether any of `slices` is [`outside_slice`], read by the thread that asks: inside a pool
/// of several threads (a contraction's call, right after it wrote them) in chunks over the
/// pool's threads once they hold two chunks, since its threads are awake and hold the parts
/// they wrote; elsewhere one slice after the other.
pub(crate) fn any_outside_in_pool<T: Scanned>(slices: &[&[T]]) -> bool {
    let pool_threads = rayon::current_thread_index().map(|_| rayon::current_num_threads());
    if pool_threads.is_some_and(|n| n > 1) && parts_of(slices) >= 2 * CHUNK {
        any_outside_par(slices)
    } else {
        slices.iter().any(|s| outside_slice(s))
    }
}

/// Whether any of `slices` is [`outside_slice`], read in chunks of `CHUNK` float64 parts on
/// the current pool's threads; each array's chunks combined into its own verdict (a largest
/// modulus below the normal range is a property of the whole array, not of a chunk).
fn any_outside_par<T: Scanned>(slices: &[&[T]]) -> bool {
    use rayon::prelude::*;
    let chunks: Vec<(usize, &[T])> =
        slices.iter().enumerate().flat_map(|(i, s)| s.chunks(CHUNK / T::PARTS).map(move |c| (i, c))).collect();
    let scanned: Vec<(usize, RangeScan)> = chunks.par_iter().map(|&(i, c)| (i, T::scan(c))).collect();
    let mut per = vec![RangeScan::EMPTY; slices.len()];
    for (i, scan) in scanned {
        per[i] = per[i].merge(scan);
    }
    per.iter().any(RangeScan::left_range)
}
