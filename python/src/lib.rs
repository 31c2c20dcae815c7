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
//! - `graph.rs`: the scalar graph engine (`Graph`, `Program`, `Gradient`) over
//!   `computegraph`, `tidu` and the `scalar` operation set.
//!
//! Errors: every `einsum::EinsumError` becomes a `ValueError` carrying its message; an
//! intermediate over the memory limit is a `MemoryError`; a dtype that is not a number is
//! a `TypeError`.

mod convert;
mod expression;
mod graph;
mod plan;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// A `ValueError` with the einsum crate's message.
pub(crate) fn value_error(e: einsum::EinsumError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<expression::Expression>()?;
    m.add_function(wrap_pyfunction!(expression::contract, m)?)?;
    m.add_function(wrap_pyfunction!(expression::set_memory_ceiling, m)?)?;
    m.add_function(wrap_pyfunction!(expression::search_path, m)?)?;
    m.add_class::<graph::Graph>()?;
    m.add_class::<graph::Program>()?;
    m.add_class::<graph::Gradient>()?;
    m.add_function(wrap_pyfunction!(graph::graph_op_codes, m)?)?;
    m.add_function(wrap_pyfunction!(graph::graph_workload, m)?)?;
    m.add("GRAPH_OPS", graph::OP_NAMES.to_vec())?;
    Ok(())
}
