//! `cgx._core`: the Python extension module over the `einsum` crate and the scalar graph
//! engine, a thin layer that converts types and errors and releases the GIL around work
//! (the Rust crates know nothing of Python). The pure-Python package `cgx` re-exports it with opt_einsum's
//! surface (`contract`, `contract_path`, `contract_expression`).
//!
//! - `plan.rs`: [`plan::Plan`], a checked contraction and its step sizes (reports, memory
//!   checks);
//! - `convert.rs`: numpy arrays to `einsum::Tensor` and back;
//! - `expression.rs`: `Expression` (compiled once per element type, sliced when
//!   `memory_limit` or `sliced_inds` asks, gradients, HVPs, slice ranges) and `contract`
//!   (a bounded cache of expressions);
//! - `hyper.rs`: `hyper_search`, the hyper-optimizer for `cgx.HyperOptimizer`;
//! - `draw.rs`: `tree_svg`, the contraction tree as SVG for `PathInfo.plot`;
//! - `graph.rs`: the scalar graph engine (`Graph`, `Program`, `Gradient`) over
//!   `computegraph`, `tidu` and the `scalar` operation set.
//!
//! Errors: every `einsum::EinsumError` becomes a Python exception carrying its message:
//! `MemoryError` for `EinsumError::Memory` (a tensor over the memory budget, or memory the
//! allocator refused), `ValueError` for the others; an intermediate over `memory_limit`
//! is a `MemoryError` too; a dtype that is not a number is a `TypeError`. Sizes that come
//! from user input (batches, copies of operands) are computed in checked arithmetic and
//! allocated with `try_reserve`, so they raise instead of aborting.
//!
//! Memory budget: the einsum crate's own default (a fixed 8 GiB) is not used. Every
//! contraction is built with the machine's physical memory as its budget ([`machine_limit`],
//! set from Python at import), as numpy would run it until the machine runs out; a
//! `memory_limit` (elements) bounds the largest intermediate on top of that.

mod convert;
mod draw;
mod expression;
mod graph;
mod hyper;
mod plan;

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

/// The machine's memory in bytes as `f64` bits, set from Python at import (infinite until
/// then, or when Python cannot tell). Read on every call, so an atomic rather than a lock.
static MEMORY_CEILING: AtomicU64 = AtomicU64::new(f64::INFINITY.to_bits());

/// Sets the machine's memory in bytes ([`memory_ceiling`]).
#[pyfunction]
fn set_memory_ceiling(bytes: f64) {
    MEMORY_CEILING.store(bytes.to_bits(), Ordering::Relaxed);
}

/// The machine's memory in bytes (`f64::INFINITY` if unknown).
pub(crate) fn memory_ceiling() -> f64 {
    f64::from_bits(MEMORY_CEILING.load(Ordering::Relaxed))
}

/// The machine's memory as the einsum crate's byte budget (unlimited if unknown).
pub(crate) fn machine_limit() -> MemoryLimit {
    let c = memory_ceiling();
    if c.is_finite() && c >= 0.0 { MemoryLimit::Bytes(c as u64) } else { MemoryLimit::Unlimited }
}

/// A `MemoryError` unless `elems` elements of `elem_bytes` bytes each fit in the machine's
/// memory and the allocator gives them: `what` names the tensor in the message. Returns
/// an empty vector with that capacity.
pub(crate) fn try_alloc<T>(elems: Option<usize>, what: impl Fn() -> String) -> PyResult<Vec<T>> {
    let size = std::mem::size_of::<T>();
    let bytes = elems.and_then(|n| n.checked_mul(size));
    let too_big = |bytes: Option<usize>| {
        let shown = bytes.map_or("more than 2^64 bytes".to_string(), |b| format!("{b} bytes"));
        PyMemoryError::new_err(format!("{} needs {shown}, more than this machine's memory", what()))
    };
    match (elems, bytes) {
        (Some(n), Some(b)) if (b as f64) <= memory_ceiling() => {
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
    m.add_function(wrap_pyfunction!(set_memory_ceiling, m)?)?;
    m.add_function(wrap_pyfunction!(release_buffers, m)?)?;
    m.add_function(wrap_pyfunction!(expression::search_path, m)?)?;
    m.add_function(wrap_pyfunction!(hyper::hyper_search, m)?)?;
    m.add_function(wrap_pyfunction!(draw::tree_svg, m)?)?;
    m.add_class::<graph::Graph>()?;
    m.add_class::<graph::Program>()?;
    m.add_class::<graph::Gradient>()?;
    m.add_function(wrap_pyfunction!(graph::graph_op_codes, m)?)?;
    m.add_function(wrap_pyfunction!(graph::graph_workload, m)?)?;
    m.add("GRAPH_OPS", graph::OP_NAMES.to_vec())?;
    Ok(())
}
