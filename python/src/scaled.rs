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
//! threads read the results right after writing them (`any_outside_in_pool`, and
//! `any_complex_outside_in_pool` for complex results, whose moduli are decided from their
//! parts' scan except near the ends of the range).

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

/// [`outside`] of a contiguous float64 slice, by `einsum::RangeScan` (lanes the compiler
/// vectorizes: the early return and `f64::max` of the plain loop keep it scalar, and the
/// test of a large result then cost more than the element-wise product that made it).
fn outside_slice(s: &[f64]) -> bool {
    RangeScan::of(s).left_range()
}

/// `left_range(x)`: for a float64 or complex128 numpy array, whether an entry is not
/// finite or the largest modulus is a subnormal number; `False` for anything else.
///
/// A contiguous float64 array of `PAR_MIN_ELEMENTS` entries or more is read without the
/// GIL and, when the call has a pool of several threads, in chunks over them, as
/// [`any_left_range`] reads it: a forward call's result is read once more after the
/// contraction wrote it, which on two threads was the one part of an element-wise
/// product left to a single thread.
#[pyfunction]
pub fn left_range(x: &Bound<'_, PyAny>) -> PyResult<bool> {
    if let Ok(a) = x.cast::<PyArrayDyn<f64>>() {
        let a = a.readonly();
        if let Ok(s) = a.as_slice() {
            if s.len() < PAR_MIN_ELEMENTS {
                return Ok(outside_slice(s));
            }
            let pool = crate::threads::call_pool()?;
            return Ok(x.py().detach(|| match pool {
                Some(pool) => pool.install(|| any_outside_par(&[s])),
                None => outside_slice(s),
            }));
        }
        return Ok(outside(a.as_array().iter().map(|v| v.abs())));
    }
    if let Ok(a) = x.cast::<PyArrayDyn<c64>>() {
        let a = a.readonly();
        if let Ok(s) = a.as_slice() {
            if s.len() < PAR_MIN_ELEMENTS / 2 {
                return Ok(outside_complex(s, false));
            }
            let pool = crate::threads::call_pool()?;
            return Ok(x.py().detach(|| match pool {
                Some(pool) => pool.install(|| outside_complex(s, true)),
                None => outside_complex(s, false),
            }));
        }
        return Ok(outside(a.as_array().iter().map(|v| v.re.hypot(v.im))));
    }
    Ok(false)
}

/// [`outside`] of the moduli of complex entries, by `einsum::RangeScan::of_complex` (the
/// moduli decided from the parts' scan, computed by `hypot` only near the ends of the
/// range: `hypot` over every entry kept this test scalar, on one thread, and slower than
/// the product that made the result). With `par`, in chunks over the current pool's
/// threads (their scans merge into the whole's verdict).
fn outside_complex(s: &[c64], par: bool) -> bool {
    let scan = if par {
        use rayon::prelude::*;
        s.par_chunks(CHUNK / 2).map(RangeScan::of_complex).reduce(|| RangeScan::EMPTY, RangeScan::merge)
    } else {
        RangeScan::of_complex(s)
    };
    scan.left_range()
}

/// Whether any of the complex `slices` is [`outside_complex`], read by the thread that
/// asks, in chunks over the current pool's threads when it is inside a pool of several
/// and they hold two chunks (as [`any_outside_in_pool`] reads float64 results).
pub(crate) fn any_complex_outside_in_pool(slices: &[&[c64]]) -> bool {
    let total: usize = slices.iter().map(|s| 2 * s.len()).sum();
    let par = rayon::current_thread_index().is_some() && rayon::current_num_threads() > 1 && total >= 2 * CHUNK;
    slices.iter().any(|s| outside_complex(s, par))
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
    let total: usize = slices.iter().map(|s| s.len()).sum::<usize>() + parts.iter().map(|s| 2 * s.len()).sum::<usize>();
    let pool = if total >= PAR_MIN_ELEMENTS { crate::threads::call_pool()? } else { None };
    let test = || {
        (!slices.is_empty() && any_outside_in_pool(&slices))
            || (!parts.is_empty() && any_complex_outside_in_pool(&parts))
    };
    Ok(py.detach(|| match pool {
        Some(pool) => pool.install(test),
        None => test(),
    }))
}

/// Whether any of `slices` is [`outside_slice`], read by the thread that asks: inside a pool
/// of several threads (a contraction's call, right after it wrote them) in chunks over the
/// pool's threads once they hold two chunks, since its threads are awake and hold the parts
/// they wrote; elsewhere one slice after the other.
pub(crate) fn any_outside_in_pool(slices: &[&[f64]]) -> bool {
    let total: usize = slices.iter().map(|s| s.len()).sum();
    let pool_threads = rayon::current_thread_index().map(|_| rayon::current_num_threads());
    if pool_threads.is_some_and(|n| n > 1) && total >= 2 * CHUNK {
        any_outside_par(slices)
    } else {
        slices.iter().any(|s| outside_slice(s))
    }
}

/// Whether any of `slices` is [`outside_slice`], read in chunks of `CHUNK` on the current
/// pool's threads; each array's chunks combined into its own verdict (a largest modulus
/// below the normal range is a property of the whole array, not of a chunk).
fn any_outside_par(slices: &[&[f64]]) -> bool {
    use rayon::prelude::*;
    let chunks: Vec<(usize, &[f64])> =
        slices.iter().enumerate().flat_map(|(i, s)| s.chunks(CHUNK).map(move |c| (i, c))).collect();
    let scanned: Vec<(usize, RangeScan)> = chunks.par_iter().map(|&(i, c)| (i, RangeScan::of(c))).collect();
    let mut per = vec![RangeScan::EMPTY; slices.len()];
    for (i, scan) in scanned {
        per[i] = per[i].merge(scan);
    }
    per.iter().any(RangeScan::left_range)
}
