//! `cgx._core.DagPartition`, `dag_gather`, `dag_inputs` and `dag_size`: the partitioned
//! counter-based DAGs of `workloads::partition` from Python, for `cgx.distributed.dag`.
//!
//! A `DagPartition` is one node block of a counter-based DAG, generated and prepared
//! (built, materialized, compiled) when it is made, with the GIL released. It evaluates a
//! batch: one row per evaluation, the DAG's inputs in the columns of one array and the
//! boundary values (in the order of `boundary`) in those of another; it returns the rows
//! of its exports and of the DAG outputs it holds. `dag_gather` picks a batch's boundary
//! values from the earlier partitions' exports.
//!
//! Sizes: a block whose nodes would need more than the memory budget at
//! [`BYTES_PER_NODE`] is a `MemoryError` before anything is generated; the other size
//! errors of the library (`DagError::Size`) are `ValueError`s, an allocation refused is a
//! `MemoryError`.

use std::sync::Mutex;

use computegraph::EvalState;
use numpy::{
    IntoPyArray, PyArray1, PyArray2, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods,
};
use pyo3::exceptions::{PyMemoryError, PyValueError};
use pyo3::prelude::*;
use workloads::Shape;
use workloads::counter::{CounterDag, DagError};
use workloads::partition::{Partition, cuts, gather};

use crate::interrupt::interruptibly;

/// What one node of a block costs at most while it is prepared, in bytes (the estimate of
/// `cgx bench dag`, which rounds up the measured peaks).
const BYTES_PER_NODE: u64 = 256;

fn dag_error(e: DagError) -> PyErr {
    match e {
        DagError::Memory { .. } => PyMemoryError::new_err(e.to_string()),
        _ => PyValueError::new_err(e.to_string()),
    }
}

fn counter_dag(shape: &str, nodes: u64, seed: u64) -> PyResult<CounterDag> {
    let s = Shape::parse(shape).ok_or_else(|| {
        PyValueError::new_err(format!(
            "unknown shape `{shape}`: expected window, uniform, chain, layered_wide or layered_deep"
        ))
    })?;
    CounterDag::new(s, nodes, seed).map_err(dag_error)
}

/// A 2-d array's data in row-major order (copied only when not C-contiguous), after
/// checking its shape.
fn rows_of(x: &PyReadonlyArray2<'_, f64>, rows: Option<usize>, columns: usize, what: &str) -> PyResult<Vec<f64>> {
    let shape = x.shape();
    if shape[1] != columns || rows.is_some_and(|r| r != shape[0]) {
        return Err(PyValueError::new_err(format!(
            "{what} have shape {shape:?}; expected {} rows of {columns}",
            rows.map_or("any number of".to_string(), |r| r.to_string())
        )));
    }
    let mut v = crate::try_alloc(Some(x.len()), || format!("a copy of the {what}"))?;
    v.extend(x.as_array().iter().copied());
    Ok(v)
}

/// A row-major vector as a `rows` x `columns` array.
fn to_rows<'py>(py: Python<'py>, v: Vec<f64>, rows: usize, columns: usize) -> PyResult<Bound<'py, PyArray2<f64>>> {
    v.into_pyarray(py).reshape([rows, columns])
}

/// One prepared partition of a counter-based DAG.
/// A 2-d float64 numpy array: one row per evaluation.
type Rows<'py> = Bound<'py, PyArray2<f64>>;

#[pyclass(module = "cgx._core", frozen)]
pub struct DagPartition {
    part: Partition,
    parts: usize,
    state: Mutex<EvalState<f64>>,
}

#[pymethods]
impl DagPartition {
    /// Generates and prepares block `index` of the DAG of `shape` with about `nodes`
    /// nodes drawn from `seed`, cut into `parts` blocks.
    #[new]
    #[pyo3(signature = (shape, nodes, seed, parts, index))]
    fn new(py: Python<'_>, shape: &str, nodes: u64, seed: u64, parts: usize, index: usize) -> PyResult<Self> {
        let dag = counter_dag(shape, nodes, seed)?;
        let cut = cuts(&dag, parts).map_err(dag_error)?;
        if index >= parts {
            return Err(PyValueError::new_err(format!(
                "partition {index} of {parts}: the index must be below {parts}"
            )));
        }
        let len = cut[index + 1] - cut[index];
        let bytes = len.saturating_mul(BYTES_PER_NODE);
        if bytes as f64 > crate::memory_budget() {
            return Err(PyMemoryError::new_err(format!(
                "a partition of {len} nodes needs about {bytes} bytes ({BYTES_PER_NODE} per node), more than the memory budget: use more partitions"
            )));
        }
        // Seconds at 10^7 nodes: Ctrl-C ends it (generation, build, materialize and compile
        // read the flag as they go).
        let part = interruptibly(py, |stop| {
            computegraph::stop::with_stop(stop, || Partition::prepare(&dag, parts, index)).map_err(dag_error)
        })?;
        Ok(DagPartition { part, parts, state: Mutex::new(EvalState::new()) })
    }

    /// The partition's index.
    #[getter]
    fn index(&self) -> usize {
        self.part.index()
    }

    /// The number of partitions of its cut.
    #[getter]
    fn parts(&self) -> usize {
        self.parts
    }

    /// Its nodes, `(first, end)`.
    #[getter]
    fn range(&self) -> (u64, u64) {
        let r = self.part.range();
        (r.start, r.end)
    }

    /// The DAG's inputs (columns of `evaluate`'s inputs).
    #[getter]
    fn num_inputs(&self) -> u64 {
        self.part.dag().input_count()
    }

    /// The global values of earlier partitions it reads, increasing.
    #[getter]
    fn boundary<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<u64>> {
        self.part.boundary().to_vec().into_pyarray(py)
    }

    /// Its values that later partitions read, increasing.
    #[getter]
    fn exports<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<u64>> {
        self.part.exports().to_vec().into_pyarray(py)
    }

    /// The DAG outputs it holds, increasing.
    #[getter]
    fn held<'py>(&self, py: Python<'py>) -> Bound<'py, PyArray1<u64>> {
        self.part.held().to_vec().into_pyarray(py)
    }

    /// The earlier partitions whose exports it reads, increasing.
    #[getter]
    fn sources(&self) -> Vec<usize> {
        self.part.sources()
    }

    /// Operations of its program after CSE.
    #[getter]
    fn operations(&self) -> usize {
        self.part.operation_count()
    }

    /// Seconds its preparation took: `(generate, build, materialize, compile)`.
    #[getter]
    fn times(&self) -> (f64, f64, f64, f64) {
        let t = self.part.times();
        (t.generate.as_secs_f64(), t.build.as_secs_f64(), t.materialize.as_secs_f64(), t.compile.as_secs_f64())
    }

    /// Evaluates a batch: `inputs` has one row per evaluation and one column per DAG
    /// input, `boundary` the same rows and one column per boundary value. Returns
    /// `(exports, held)`, one row per evaluation each.
    fn evaluate<'py>(
        &self,
        py: Python<'py>,
        inputs: PyReadonlyArray2<'py, f64>,
        boundary: PyReadonlyArray2<'py, f64>,
    ) -> PyResult<(Rows<'py>, Rows<'py>)> {
        let n = self.part.dag().input_count() as usize;
        let rows = inputs.shape()[0];
        let x = rows_of(&inputs, None, n, "inputs")?;
        let b = self.part.boundary().len();
        let y = rows_of(&boundary, Some(rows), b, "boundary values")?;
        let (e, h) = (self.part.exports().len(), self.part.held().len());
        let mut exports = crate::try_alloc(rows.checked_mul(e), || format!("the exports of {rows} rows"))?;
        let mut held = crate::try_alloc(rows.checked_mul(h), || format!("the outputs of {rows} rows"))?;
        interruptibly(py, |stop| {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            for r in 0..rows {
                // One row is one evaluation of the partition: Ctrl-C ends the batch between two.
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    return Err(dag_error(DagError::Interrupted));
                }
                let (out, kept) = self
                    .part
                    .evaluate_with(&mut state, &x[r * n..(r + 1) * n], &y[r * b..(r + 1) * b])
                    .map_err(dag_error)?;
                exports.extend(out);
                held.extend(kept);
            }
            Ok(())
        })?;
        Ok((to_rows(py, exports, rows, e)?, to_rows(py, held, rows, h)?))
    }
}

/// A batch's boundary values (`rows` x `len(boundary)`) picked from earlier partitions'
/// exports: `sources` holds, in partition order, each one's `(exports, values)` with
/// `values` of `rows` rows.
#[pyfunction]
pub fn dag_gather<'py>(
    py: Python<'py>,
    boundary: PyReadonlyArray1<'py, u64>,
    sources: Vec<(PyReadonlyArray1<'py, u64>, PyReadonlyArray2<'py, f64>)>,
    rows: usize,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let wanted = boundary.as_array().to_vec();
    let mut owned = Vec::with_capacity(sources.len());
    for (ids, values) in &sources {
        let ids = ids.as_array().to_vec();
        let v = rows_of(values, Some(rows), ids.len(), "export values")?;
        owned.push((ids, v));
    }
    let b = wanted.len();
    let mut out = crate::try_alloc(rows.checked_mul(b), || format!("the boundary values of {rows} rows"))?;
    py.detach(|| -> Result<(), DagError> {
        for r in 0..rows {
            let row: Vec<(&[u64], &[f64])> =
                owned.iter().map(|(ids, v)| (&ids[..], &v[r * ids.len()..(r + 1) * ids.len()])).collect();
            out.extend(gather(&wanted, &row)?);
        }
        Ok(())
    })
    .map_err(dag_error)?;
    to_rows(py, out, rows, b)
}

/// `rows` rows of seeded input values of the DAG of `shape` with about `nodes` nodes:
/// row `r` is drawn from `seed + r`.
#[pyfunction]
pub fn dag_inputs<'py>(
    py: Python<'py>,
    shape: &str,
    nodes: u64,
    seed: u64,
    rows: usize,
) -> PyResult<Bound<'py, PyArray2<f64>>> {
    let dag = counter_dag(shape, nodes, 0)?;
    let n = dag.input_count() as usize;
    let mut out = crate::try_alloc(rows.checked_mul(n), || format!("{rows} rows of inputs"))?;
    for r in 0..rows {
        out.extend(dag.inputs(seed.wrapping_add(r as u64)));
    }
    to_rows(py, out, rows, n)
}

/// `(inputs, nodes, most partitions)` of the DAG of `shape` with about `nodes` nodes.
#[pyfunction]
pub fn dag_size(shape: &str, nodes: u64) -> PyResult<(u64, u64, u64)> {
    let dag = counter_dag(shape, nodes, 0)?;
    let units = dag.layer_width().map_or(dag.node_count(), |w| dag.node_count() / w);
    Ok((dag.input_count(), dag.node_count(), units))
}
