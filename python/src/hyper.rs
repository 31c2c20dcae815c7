//! `hyper_search`: the einsum crate's hyper-optimizer (`einsum::hyper`) on a numbered
//! network, for `cgx.HyperOptimizer`. The search runs without the GIL; between batches of
//! trials it takes the GIL back to run Python's signal handlers and the caller's progress
//! callback. Ctrl-C (a handler that raises) ends the search with the best tree so far,
//! reported as interrupted, rather than losing the search's work.

use std::sync::Mutex;

use einsum::hyper::{HyperOptions, Objective, budget, hyper_path_until};
use einsum::path_cache::{CachedPath, PathCache};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::einsum_error;

/// A pairwise path as opt_einsum writes it.
type PairPath = Vec<(usize, usize)>;

/// The search's options from `cgx.HyperOptimizer`'s arguments, checked by the crate (one
/// check for the library, the CLI and Python).
fn options(
    max_time: Option<f64>,
    max_trials: Option<u32>,
    minimize: &str,
    seed: u64,
    reconf_size: u32,
    target_size: Option<u64>,
) -> PyResult<HyperOptions> {
    let minimize: Objective = minimize.parse().map_err(einsum_error)?;
    let max_time = max_time.map(budget).transpose().map_err(einsum_error)?;
    let opts = HyperOptions { max_time, max_trials, minimize, seed, reconf_size, slice_target: target_size };
    opts.check().map_err(einsum_error)?;
    Ok(opts)
}

/// Checks `cgx.HyperOptimizer`'s arguments when it is made, as `hyper_search` will (a
/// `ValueError` naming the bad one).
#[pyfunction]
#[pyo3(signature = (max_time, max_trials, minimize, reconf_size, target_size))]
pub fn check_hyper_options(
    max_time: Option<f64>,
    max_trials: Option<u32>,
    minimize: &str,
    reconf_size: u32,
    target_size: Option<u64>,
) -> PyResult<()> {
    options(max_time, max_trials, minimize, 0, reconf_size, target_size).map(|_| ())
}

/// Searches a path (and, with `target_size`, the labels to slice); returns the pairwise
/// path and a report (a dict: `trials`, `seconds`, `multiply_adds`, `largest_intermediate`,
/// `written`, `method`, `interrupted`, `sliced` (label numbers), `slices`, `cached`). With
/// `cache_dir`, a path found before for the same network and objective is taken from there
/// (the report then has only `trials` (0), `cached` and `sliced`), and a new one is stored.
#[pyfunction]
#[pyo3(signature = (inputs, output, sizes, max_time=None, max_trials=None, minimize="flops", seed=0, reconf_size=8, target_size=None, progress=None, cache_dir=None))]
#[allow(clippy::too_many_arguments)]
pub fn hyper_search<'py>(
    py: Python<'py>,
    inputs: Vec<Vec<u32>>,
    output: Vec<u32>,
    sizes: Vec<usize>,
    max_time: Option<f64>,
    max_trials: Option<u32>,
    minimize: &str,
    seed: u64,
    reconf_size: u32,
    target_size: Option<u64>,
    progress: Option<Py<PyAny>>,
    cache_dir: Option<std::path::PathBuf>,
) -> PyResult<(PairPath, Bound<'py, PyDict>)> {
    let opts = options(max_time, max_trials, minimize, seed, reconf_size, target_size)?;
    let cache = match cache_dir {
        Some(dir) => {
            let cache = PathCache::new(dir).map_err(einsum_error)?;
            let key = PathCache::key(&inputs, &output, &sizes, &opts.cache_tag());
            if let Some(hit) = cache.get(&key) {
                let pairs = hit.path.pairwise(inputs.len()).map_err(einsum_error)?;
                let report = PyDict::new(py);
                report.set_item("trials", 0)?;
                report.set_item("cached", true)?;
                report.set_item("sliced", key.labels(&hit.sliced))?;
                return Ok((pairs.into_iter().map(|[i, j]| (i, j)).collect(), report));
            }
            Some((cache, key))
        }
        None => None,
    };
    // A progress callback's exception, raised once the search returns.
    let failed: Mutex<Option<PyErr>> = Mutex::new(None);
    let found = py.detach(|| {
        // A signal handler's exception may be raised inside the progress callback rather
        // than here; either way the search ends with its best path so far.
        let stop = || {
            failed.lock().unwrap_or_else(|p| p.into_inner()).is_some()
                || Python::attach(|py| py.check_signals()).is_err()
        };
        let mut report = |p: &einsum::hyper::HyperProgress| {
            if let Some(f) = &progress {
                Python::attach(|py| {
                    if let Err(e) = f.call1(py, (p.trials, p.seconds, p.best.multiply_adds)) {
                        *failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                    }
                });
            }
        };
        hyper_path_until(&inputs, &output, &sizes, &opts, &stop, &mut report)
    });
    let failed = failed.into_inner().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = failed.filter(|e| !e.is_instance_of::<pyo3::exceptions::PyKeyboardInterrupt>(py)) {
        return Err(e);
    }
    let found = found.map_err(einsum_error)?;
    // A search cut short is not kept: a later run would take it and search nothing.
    if let Some((cache, key)) = cache.filter(|_| !found.report.interrupted) {
        let entry = CachedPath { path: found.path.clone(), sliced: key.canonical(&found.report.sliced) };
        cache.put(&key, &entry).map_err(einsum_error)?;
    }
    let pairs = found.path.pairwise(inputs.len()).map_err(einsum_error)?;
    let r = &found.report;
    let report = PyDict::new(py);
    report.set_item("trials", r.trials)?;
    report.set_item("seconds", r.seconds)?;
    report.set_item("multiply_adds", r.cost.multiply_adds)?;
    report.set_item("largest_intermediate", r.cost.largest_intermediate)?;
    report.set_item("written", r.cost.written)?;
    report.set_item("method", r.method)?;
    report.set_item("interrupted", r.interrupted)?;
    report.set_item("sliced", r.sliced.clone())?;
    report.set_item("slices", r.slices)?;
    report.set_item("cached", false)?;
    Ok((pairs.into_iter().map(|[i, j]| (i, j)).collect(), report))
}
