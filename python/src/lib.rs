//! `cgx._core`: the Python extension module over the `einsum` crate and the scalar graph
//! engine, a thin layer that converts types and errors and releases the GIL around work
//! (the Rust crates know nothing of Python). The pure-Python package `cgx` re-exports it with opt_einsum's
//! surface (`contract`, `contract_path`, `contract_expression`).
//!
//! - `plan.rs`: [`plan::Report`], the einsum crate's `Plan` as characters and step sizes
//!   (reports, memory checks);
//! - `convert.rs`: numpy arrays to `einsum::Tensor` and back;
//! - `expression.rs`: `Expression` (compiled once per element type, sliced when
//!   `memory_limit` or `sliced_inds` asks, gradients, HVPs, slice ranges) and `contract`
//!   (a bounded cache of expressions); an element-wise product runs the einsum crate's
//!   kernels that scan each result as they write it (`expression/checked.rs`), whose range
//!   verdict `_call_checked`, `_value_and_grad_checked` and `_contract_checked` hand to
//!   `strip_exponent=None`;
//! - `hyper.rs`: `hyper_search`, the hyper-optimizer for `cgx.HyperOptimizer`, and
//!   `check_hyper_options`, its arguments checked when it is made;
//! - `draw.rs`: `tree_svg`, the contraction tree as SVG for `PathInfo.plot`;
//! - `scaled.rs`: `left_range`, whether a result left float64's range (the test behind
//!   `strip_exponent=None`; the scaled contraction itself is `Expression._scaled`), and
//!   `any_left_range`, the same over a value and its gradients on the call's threads;
//! - `threads.rs`: `set_num_threads`, `get_num_threads` and `_swap_call_threads`, the
//!   threads of the contraction calls (process-wide, per Python thread), and their pools;
//! - `graph.rs`: the scalar graph engine (`Graph`, `Program`, `Gradient`) over
//!   `computegraph`, `tidu` and the `scalar` operation set;
//! - `dag.rs`: partitions of the counter-based benchmark DAGs (`DagPartition`,
//!   `dag_gather`, `dag_inputs`, `dag_size`) over `workloads::partition`, for
//!   `cgx.distributed.dag`.
//!
//! Errors: every `einsum::EinsumError` becomes a Python exception carrying its message:
//! `MemoryError` for `EinsumError::Memory` (a tensor over the memory budget, or memory the
//! allocator refused), `ValueError` for the others; an intermediate over `memory_limit`
//! is a `MemoryError` too; a dtype that is not a number is a `TypeError`. Sizes that come
//! from user input (batches, copies of operands) are computed in checked arithmetic and
//! allocated with `try_reserve`, so they raise instead of aborting.
//!
//! Memory budget: the einsum crate's one policy, [`einsum::MemoryLimit::default`] (half of
//! the physical memory or of `ulimit -v`, at most 8 GiB), as for the library and `cgx`;
//! a `memory_limit` (elements) bounds the largest intermediate on top of that. Tests may
//! set another budget ([`set_memory_budget`]).

mod convert;
mod dag;
mod draw;
mod expression;
mod graph;
mod hyper;
mod interrupt;
mod plan;
mod scaled;
mod threads;

use std::sync::atomic::{AtomicU64, Ordering};

use einsum::{EinsumError, MemoryLimit};
use pyo3::exceptions::{PyMemoryError, PyValueError};
use pyo3::prelude::*;

/// The einsum crate's error as a Python exception with its message: `MemoryError` for
/// the memory variant, `ValueError` for every other.
pub(crate) fn einsum_error(e: EinsumError) -> PyErr {
    match e {
        EinsumError::Memory { .. } => PyMemoryError::new_err(e.to_string()),
        _ => PyValueError::new_err(e.to_string()),
    }
}

/// A budget in bytes set from Python (`f64` bits; NaN: none set, the policy's). Read on
/// every call, so an atomic rather than a lock.
static MEMORY_BUDGET: AtomicU64 = AtomicU64::new(f64::NAN.to_bits());

/// Sets the byte budget of every contraction built from now on (`None`: back to the
/// einsum crate's policy); for tests that pretend a machine of another size.
#[pyfunction]
#[pyo3(signature = (bytes=None))]
fn set_memory_budget(bytes: Option<f64>) {
    MEMORY_BUDGET.store(bytes.unwrap_or(f64::NAN).to_bits(), Ordering::Relaxed);
}

/// The byte budget in bytes (`f64::INFINITY` when unlimited).
#[pyfunction]
pub(crate) fn memory_budget() -> f64 {
    let set = f64::from_bits(MEMORY_BUDGET.load(Ordering::Relaxed));
    if !set.is_nan() {
        return set;
    }
    match MemoryLimit::default() {
        MemoryLimit::Bytes(b) => b as f64,
        MemoryLimit::Unlimited => f64::INFINITY,
    }
}

/// The budget as the einsum crate's limit.
pub(crate) fn budget_limit() -> MemoryLimit {
    let c = memory_budget();
    if c.is_finite() && c >= 0.0 { MemoryLimit::Bytes(c as u64) } else { MemoryLimit::Unlimited }
}

/// A `MemoryError` unless `elems` elements of `elem_bytes` bytes each fit in the memory
/// budget and the allocator gives them: `what` names the tensor in the message. Returns
/// an empty vector with that capacity.
pub(crate) fn try_alloc<T>(elems: Option<usize>, what: impl Fn() -> String) -> PyResult<Vec<T>> {
    let size = std::mem::size_of::<T>();
    let bytes = elems.and_then(|n| n.checked_mul(size));
    let too_big = |bytes: Option<usize>| {
        let shown = bytes.map_or("more than 2^64 bytes".to_string(), |b| format!("{b} bytes"));
        PyMemoryError::new_err(format!("{} needs {shown}, more than the memory budget", what()))
    };
    match (elems, bytes) {
        (Some(n), Some(b)) if (b as f64) <= memory_budget() => {
            let mut v = Vec::new();
            v.try_reserve_exact(n).map_err(|_| {
                PyMemoryError::new_err(format!("{} needs {b} bytes, which the allocator refused", what()))
            })?;
            Ok(v)
        }
        _ => Err(too_big(bytes)),
    }
}

/// Empties the process's pools of recycled buffers ([`einsum::release_buffers`]): a
/// process that evaluates now and then (a Dask worker between slice ranges) gives their
/// memory back instead of keeping up to `POOL_MAX_BYTES` per element type.
#[pyfunction]
fn release_buffers() {
    einsum::release_buffers();
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<expression::Expression>()?;
    m.add_function(wrap_pyfunction!(expression::contract, m)?)?;
    m.add_function(wrap_pyfunction!(expression::_contract_checked, m)?)?;
    m.add_function(wrap_pyfunction!(set_memory_budget, m)?)?;
    m.add_function(wrap_pyfunction!(memory_budget, m)?)?;
    m.add_function(wrap_pyfunction!(expression::is_path_finder, m)?)?;
    m.add_function(wrap_pyfunction!(release_buffers, m)?)?;
    m.add_function(wrap_pyfunction!(threads::set_num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(threads::get_num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(threads::_swap_call_threads, m)?)?;
    m.add_function(wrap_pyfunction!(expression::search_path, m)?)?;
    m.add_function(wrap_pyfunction!(hyper::hyper_search, m)?)?;
    m.add_function(wrap_pyfunction!(hyper::check_hyper_options, m)?)?;
    m.add_function(wrap_pyfunction!(draw::tree_svg, m)?)?;
    m.add_function(wrap_pyfunction!(scaled::left_range, m)?)?;
    m.add_function(wrap_pyfunction!(scaled::any_left_range, m)?)?;
    m.add_class::<graph::Graph>()?;
    m.add_class::<graph::Program>()?;
    m.add_class::<graph::Gradient>()?;
    m.add_function(wrap_pyfunction!(graph::graph_op_codes, m)?)?;
    m.add_function(wrap_pyfunction!(graph::graph_workload, m)?)?;
    m.add("GRAPH_OPS", graph::OP_NAMES.to_vec())?;
    m.add_class::<dag::DagPartition>()?;
    m.add_function(wrap_pyfunction!(dag::dag_gather, m)?)?;
    m.add_function(wrap_pyfunction!(dag::dag_inputs, m)?)?;
    m.add_function(wrap_pyfunction!(dag::dag_size, m)?)?;
    Ok(())
}
