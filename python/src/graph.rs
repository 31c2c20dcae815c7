//! `cgx._core.Graph`, `Program` and `Gradient`: the scalar graph engine from Python,
//! built on `computegraph`, `tidu` and the `scalar` reference operation set as a Rust user
//! would (`GraphBuilder`, `try_resolve`, `try_materialize_merge`, `try_compile`,
//! `tidu::grad`).
//!
//! Values are numbered densely from 0 in the order they are added: inputs, constants and
//! the outputs of operations (one per operation, two for `sincos` and `sub`). These
//! numbers are the Python ids; an operation may only name smaller ones, so a cycle cannot
//! be built.
//!
//! Invariants:
//! - the graph is a chain of fragments: every value below `start` lives in a built
//!   fragment (`fragments[f]` holds ids `starts[f]..starts[f + 1]`, its local value
//!   `v - starts[f]`), every value from `start` on lives in the open `builder` as local
//!   value `v - start` (a builder numbers local values densely). Each new fragment has the
//!   previous one as its parent, so resolving the last one reaches them all;
//! - `compile` and `gradient` close the open fragment (when it holds anything) and leave an
//!   empty one, so a graph can grow after it was compiled;
//! - a batch (`add`, `constants`) is checked whole before anything is added, so a call
//!   that fails on user input adds nothing;
//! - programs bind their inputs by key: `ScalarKey::Var(i)` reads column `i` of the input
//!   array, a gradient's cotangent seed reads 1.
//!
//! The GIL is released while fragments are built and programs compiled or evaluated.
//!
//! Sizes from user input never abort: value counts are added in checked arithmetic
//! (`ValueError` past [`MAX_VALUES`]); a graph that would need more than the machine's
//! memory at [`BYTES_PER_VALUE`] is a `MemoryError` before anything is added; batches of
//! outputs and copies of inputs are allocated with `try_reserve` after a check against the
//! machine's memory (`MemoryError`, see `crate::try_alloc`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use computegraph::{
    CompiledProgram, EvalState, Graph as Fragment, GraphBuilder, GraphError, KeyInterner, LocalValueId, OperationRole,
    ValueKey, ValueRef, try_compile, try_materialize_merge, try_resolve,
};
use numpy::{
    IntoPyArray, PyArray1, PyArrayDyn, PyArrayMethods, PyReadonlyArray1, PyReadonlyArrayDyn, PyUntypedArrayMethods,
};
use pyo3::exceptions::{PyMemoryError, PyValueError};
use pyo3::prelude::*;
use scalar::{ScalarKey, ScalarOp};

use crate::interrupt::{interruptibly, interruptibly_detached};

/// At most this many values in one graph (the engine's local value ids are 31 bits).
const MAX_VALUES: u64 = 1 << 31;

/// What one value of a graph costs at most, in bytes, while it is built (the builder's
/// columns as they grow, the input key, the interner's entry, the id returned to Python):
/// a graph whose values would need more than the machine's memory at this rate is refused
/// with a `MemoryError` before anything is added.
const BYTES_PER_VALUE: u64 = 128;

/// Programs whose work (instructions times rows) is below this keep the GIL.
const DETACH_MIN_WORK: usize = 4096;

/// From this much work on (tens of milliseconds) an evaluation runs where Ctrl-C can end
/// it, between two rows ([`interruptibly`]; one row of a 10^8-node program takes under a
/// second).
const INTERRUPTIBLE_MIN_WORK: usize = 1 << 23;

/// The operation names, indexed by their code.
pub const OP_NAMES: [&str; 8] = ["add", "sub", "mul", "neg", "exp", "sin", "cos", "sincos"];

fn graph_error(e: GraphError) -> PyErr {
    PyValueError::new_err(e.to_string())
}

/// An operation of `Graph.add`: one of the scalar set's, or `sub`, added as `neg` then
/// `add`.
#[derive(Clone, Copy)]
enum Code {
    Scalar(ScalarOp),
    Sub,
}

impl Code {
    fn decode(code: i64) -> Option<Code> {
        Some(match code {
            0 => Code::Scalar(ScalarOp::Add),
            1 => Code::Sub,
            2 => Code::Scalar(ScalarOp::Mul),
            3 => Code::Scalar(ScalarOp::Neg),
            4 => Code::Scalar(ScalarOp::Exp),
            5 => Code::Scalar(ScalarOp::Sin),
            6 => Code::Scalar(ScalarOp::Cos),
            7 => Code::Scalar(ScalarOp::SinCos),
            _ => return None,
        })
    }

    fn binary(self) -> bool {
        matches!(self, Code::Sub | Code::Scalar(ScalarOp::Add | ScalarOp::Mul))
    }

    /// Values the operation appends.
    fn values(self) -> u64 {
        match self {
            Code::Sub | Code::Scalar(ScalarOp::SinCos) => 2,
            _ => 1,
        }
    }
}

/// The codes of operation names (`cgx.graph` calls it on the distinct names of a batch).
#[pyfunction]
pub fn graph_op_codes(names: Vec<String>) -> PyResult<Vec<i64>> {
    names
        .iter()
        .map(|n| {
            OP_NAMES.iter().position(|o| o == n).map(|c| c as i64).ok_or_else(|| {
                PyValueError::new_err(format!("unknown operation `{n}`: expected one of {}", OP_NAMES.join(", ")))
            })
        })
        .collect()
}

/// The graph's state (see the module docs for its invariants).
struct State {
    interner: Arc<KeyInterner<ScalarOp>>,
    fragments: Vec<Arc<Fragment<ScalarOp>>>,
    starts: Vec<u64>,
    builder: GraphBuilder<ScalarOp>,
    start: u64,
    /// The id of each input, by input index (increasing).
    inputs: Vec<u64>,
}

impl State {
    fn values(&self) -> u64 {
        self.start + self.builder.value_count() as u64
    }

    /// `ValueError` if `n` more values would make more than [`MAX_VALUES`], `MemoryError`
    /// if the graph would then need more than the memory budget; else the new count.
    fn check_growth(&self, n: u64) -> PyResult<u64> {
        let have = self.values();
        let total = have.checked_add(n).filter(|&t| t <= MAX_VALUES).ok_or_else(|| {
            PyValueError::new_err(format!(
                "a graph holds at most {MAX_VALUES} values: it has {have}, and {n} more were asked for"
            ))
        })?;
        let bytes = total as f64 * BYTES_PER_VALUE as f64;
        let ceiling = crate::memory_budget();
        if bytes > ceiling {
            return Err(PyMemoryError::new_err(format!(
                "a graph of {total} values needs about {bytes:.3e} bytes ({BYTES_PER_VALUE} per value), more than the memory budget ({ceiling:.3e} bytes)"
            )));
        }
        Ok(total)
    }

    /// An operand: local to the open fragment, or the key of a built fragment's value.
    fn value_ref(&self, v: u64) -> PyResult<ValueRef<ScalarOp>> {
        if v >= self.start {
            Ok(ValueRef::Local(LocalValueId::new((v - self.start) as usize)))
        } else {
            Ok(ValueRef::External(self.key(v)?))
        }
    }

    /// The key of a value of a built fragment.
    fn key(&self, v: u64) -> PyResult<ValueKey<ScalarOp>> {
        let f = self.starts.partition_point(|&s| s <= v) - 1;
        self.fragments[f].try_global_key(LocalValueId::new((v - self.starts[f]) as usize)).map_err(graph_error)
    }

    /// Closes the open fragment if it holds anything; returns the last fragment.
    fn close(&mut self) -> PyResult<Option<Arc<Fragment<ScalarOp>>>> {
        if self.builder.value_count() > 0 {
            // Interned in place first: a stop raised there (Ctrl-C while the store's table
            // grows) leaves the builder and every value of the graph where they were.
            self.builder.try_flush().map_err(graph_error)?;
            let open = std::mem::replace(&mut self.builder, GraphBuilder::with_interner(Arc::clone(&self.interner)));
            let values = self.start + open.value_count() as u64;
            let done = Arc::new(open.try_build().map_err(graph_error)?);
            self.builder.try_add_parent(Arc::clone(&done)).map_err(graph_error)?;
            self.fragments.push(done);
            self.starts.push(self.start);
            self.start = values;
        }
        Ok(self.fragments.last().cloned())
    }

    /// Checks that `ids` name existing values; returns them as `u64`.
    fn check_ids(&self, ids: &[i64], what: &str) -> PyResult<Vec<u64>> {
        let n = self.values();
        ids.iter()
            .map(|&v| {
                u64::try_from(v).ok().filter(|&v| v < n).ok_or_else(|| {
                    PyValueError::new_err(format!("{what} {v} is not a value of this graph (it has {n} values)"))
                })
            })
            .collect()
    }

    /// The program's inputs: how each input key of `program` is bound.
    fn binds(program: &CompiledProgram<ScalarOp>, seed: Option<&ScalarKey>) -> PyResult<Vec<Bind>> {
        program
            .input_keys()
            .iter()
            .map(|k| match k {
                ScalarKey::Var(i) => Ok(Bind::Input(*i as usize)),
                k if Some(k) == seed => Ok(Bind::Seed),
                k => Err(PyValueError::new_err(format!("the program reads an unknown input {k:?}"))),
            })
            .collect()
    }
}

/// A scalar DAG under construction (`cgx.graph.Graph` wraps it).
#[pyclass(module = "cgx._core")]
pub struct Graph {
    state: State,
}

/// How a program input is bound.
#[derive(Clone, Copy)]
enum Bind {
    /// Column `i` of the inputs.
    Input(usize),
    /// A gradient's cotangent seed: 1.
    Seed,
}

/// A compiled program with its input binding, shared by [`Program`] and [`Gradient`].
struct Runner {
    program: CompiledProgram<ScalarOp>,
    binds: Vec<Bind>,
    /// Columns of the input array: the graph's inputs when it was compiled.
    inputs: usize,
    state: Mutex<EvalState<f64>>,
}

const ONE: f64 = 1.0;

impl Runner {
    fn new(program: CompiledProgram<ScalarOp>, seed: Option<&ScalarKey>, inputs: usize) -> PyResult<Runner> {
        let binds = State::binds(&program, seed)?;
        Ok(Runner { program, binds, inputs, state: Mutex::new(EvalState::new()) })
    }

    /// Evaluates every row of `x` (row-major, `inputs` columns); returns the outputs row
    /// after row.
    /// Between two rows it looks at `stop` (when given) and ends when it is up.
    fn eval_rows(&self, x: &[f64], rows: usize, stop: Option<&AtomicBool>) -> PyResult<Vec<f64>> {
        let outputs = self.program.output_keys().len();
        let mut out = crate::try_alloc(rows.checked_mul(outputs), || {
            format!("the outputs of {rows} points ({outputs} per point)")
        })?;
        if outputs == 0 {
            return Ok(out); // nothing to compute: evaluation has no other effect
        }
        let mut fresh = EvalState::new();
        let mut held = self.state.try_lock();
        let state = match held.as_deref_mut() {
            Ok(s) => s,
            Err(_) => &mut fresh,
        };
        let mut refs: Vec<&f64> = Vec::with_capacity(self.binds.len());
        for r in 0..rows {
            if stop.is_some_and(|f| f.load(Ordering::Relaxed)) {
                // The caller raises the signal handler's exception instead.
                state.clear();
                return Err(PyValueError::new_err("the evaluation was stopped"));
            }
            let row = &x[r * self.inputs..(r + 1) * self.inputs];
            refs.clear();
            refs.extend(self.binds.iter().map(|b| match *b {
                Bind::Input(i) => &row[i],
                Bind::Seed => &ONE,
            }));
            out.extend(self.program.eval_with(state, &mut (), &refs).map_err(graph_error)?);
        }
        state.clear();
        Ok(out)
    }

    /// Reads the inputs (one row, or a 2-d batch of rows), evaluates, and returns the
    /// outputs with the number of rows (`None` for one row).
    fn run(&self, py: Python<'_>, x: &PyReadonlyArrayDyn<'_, f64>) -> PyResult<(Vec<f64>, Option<usize>)> {
        let shape = x.shape();
        let (rows, batch) = match *shape {
            [n] if n == self.inputs => (1, None),
            [r, n] if n == self.inputs => (r, Some(r)),
            _ => {
                return Err(PyValueError::new_err(format!(
                    "the inputs have shape {shape:?}; the program reads {} inputs (a 1-d array of that length, or a 2-d array with that many columns)",
                    self.inputs
                )));
            }
        };
        let copy;
        let data = match x.as_slice() {
            Ok(s) if x.is_c_contiguous() => s,
            _ => {
                copy = {
                    let mut v = crate::try_alloc(Some(x.len()), || format!("a copy of the inputs of shape {shape:?}"))?;
                    v.extend(x.as_array().iter().copied());
                    v
                };
                &copy[..]
            }
        };
        let work = rows.saturating_mul(self.program.instruction_count());
        let out = if work >= INTERRUPTIBLE_MIN_WORK {
            interruptibly(py, |stop| self.eval_rows(data, rows, Some(&stop)))
        } else if work >= DETACH_MIN_WORK {
            py.detach(|| self.eval_rows(data, rows, None))
        } else {
            self.eval_rows(data, rows, None)
        };
        Ok((out?, batch))
    }
}

/// A vector as a numpy array of `rows` rows of `columns` (or 1-d), without copying it.
fn to_numpy<'py>(
    py: Python<'py>,
    v: Vec<f64>,
    rows: Option<usize>,
    columns: usize,
) -> PyResult<Bound<'py, PyArrayDyn<f64>>> {
    let shape = match rows {
        Some(r) => vec![r, columns],
        None => vec![columns],
    };
    v.into_pyarray(py).reshape(shape)
}

#[pymethods]
impl Graph {
    #[new]
    fn new() -> Self {
        let interner = KeyInterner::new();
        let builder = GraphBuilder::with_interner(Arc::clone(&interner));
        Graph {
            state: State { interner, fragments: Vec::new(), starts: Vec::new(), builder, start: 0, inputs: Vec::new() },
        }
    }

    /// Values in the graph.
    #[getter]
    fn num_values(&self) -> u64 {
        self.state.values()
    }

    /// Inputs in the graph.
    #[getter]
    fn num_inputs(&self) -> usize {
        self.state.inputs.len()
    }

    /// Adds `n` inputs; returns their ids.
    fn inputs<'py>(&mut self, py: Python<'py>, n: u64) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let s = &mut self.state;
        s.check_growth(n)?;
        // Below `MAX_VALUES` (2^31) now, so `n` fits a `usize`.
        let n = n as usize;
        let mut ids = crate::try_alloc(Some(n), || format!("the ids of {n} inputs"))?;
        s.inputs.try_reserve(n).map_err(|_| PyMemoryError::new_err(format!("{n} inputs: the allocator refused")))?;
        s.builder.reserve(n, 0, 0);
        for _ in 0..n {
            let index = u32::try_from(s.inputs.len())
                .map_err(|_| PyValueError::new_err("a graph holds at most 2^32 inputs"))?;
            let id = s.values();
            s.builder.try_add_input(ScalarKey::var(index)).map_err(graph_error)?;
            s.inputs.push(id);
            ids.push(id as i64);
        }
        Ok(ids.into_pyarray(py))
    }

    /// Adds one constant per value; returns their ids.
    fn constants<'py>(
        &mut self,
        py: Python<'py>,
        values: PyReadonlyArray1<'py, f64>,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let values = values.as_array();
        let s = &mut self.state;
        s.check_growth(values.len() as u64)?;
        let mut ids = crate::try_alloc(Some(values.len()), || format!("the ids of {} constants", values.len()))?;
        for &x in values {
            let r = s.builder.try_add_operation_from(ScalarOp::constant(x), &[], &OperationRole::Primary);
            ids.push((s.start + r.map_err(graph_error)?.start as u64) as i64);
        }
        Ok(ids.into_pyarray(py))
    }

    /// Adds one operation per entry of `ops` (codes, see `OP_NAMES`) on operands `lhs`
    /// and, for binary operations, `rhs`; an operand may be any earlier value, those of
    /// earlier operations of the batch included. Returns each operation's value (the
    /// first, `sin`, for `sincos`; the sum for `sub`).
    #[pyo3(signature = (ops, lhs, rhs=None))]
    fn add<'py>(
        &mut self,
        py: Python<'py>,
        ops: PyReadonlyArray1<'py, i64>,
        lhs: PyReadonlyArray1<'py, i64>,
        rhs: Option<PyReadonlyArray1<'py, i64>>,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let (ops, lhs) = (ops.as_array(), lhs.as_array());
        let rhs = rhs.as_ref().map(|r| r.as_array());
        if lhs.len() != ops.len() || rhs.as_ref().is_some_and(|r| r.len() != ops.len()) {
            return Err(PyValueError::new_err(format!(
                "ops, lhs and rhs must have one entry per operation: got {}, {} and {}",
                ops.len(),
                lhs.len(),
                rhs.as_ref().map_or("no rhs".to_string(), |r| r.len().to_string())
            )));
        }
        // Check the whole batch first: a failed call adds nothing.
        let s = &mut self.state;
        let mut next = s.values();
        let mut codes = Vec::with_capacity(ops.len());
        for (k, &c) in ops.iter().enumerate() {
            let code = Code::decode(c).ok_or_else(|| {
                PyValueError::new_err(format!(
                    "operation {k} of the batch has code {c}: codes are 0 to {} ({})",
                    OP_NAMES.len() - 1,
                    OP_NAMES.join(", ")
                ))
            })?;
            let operand = |side: &str, v: i64| {
                if v < 0 || v as u64 >= next {
                    Err(PyValueError::new_err(format!(
                        "operation {k} of the batch ({}): {side} {v} is not an earlier value (there are {next} values before it)",
                        OP_NAMES[c as usize]
                    )))
                } else {
                    Ok(())
                }
            };
            operand("lhs", lhs[k])?;
            if code.binary() {
                match &rhs {
                    Some(r) => operand("rhs", r[k])?,
                    None => {
                        return Err(PyValueError::new_err(format!(
                            "operation {k} of the batch ({}) is binary but no rhs was given",
                            OP_NAMES[c as usize]
                        )));
                    }
                }
            }
            // At most 2 per operation of a batch that exists in memory: no overflow.
            next += code.values();
            codes.push(code);
        }
        let extra = next - s.values();
        s.check_growth(extra)?;
        s.builder.reserve(extra as usize, extra as usize, 2 * codes.len());
        let add_batch = |s: &mut State| -> PyResult<Vec<i64>> {
            let mut ids = Vec::with_capacity(codes.len());
            let primary = OperationRole::Primary;
            for (k, &code) in codes.iter().enumerate() {
                let a = s.value_ref(lhs[k] as u64)?;
                let b = match &rhs {
                    Some(r) if code.binary() => Some(s.value_ref(r[k] as u64)?),
                    _ => None,
                };
                let first = match (code, b) {
                    (Code::Scalar(op), Some(b)) => s.builder.try_add_operation_from(op, &[a, b], &primary),
                    (Code::Scalar(op), None) => s.builder.try_add_operation_from(op, &[a], &primary),
                    (Code::Sub, Some(b)) => {
                        let neg =
                            s.builder.try_add_operation_from(ScalarOp::Neg, &[b], &primary).map_err(graph_error)?;
                        let neg = ValueRef::Local(LocalValueId::new(neg.start));
                        s.builder.try_add_operation_from(ScalarOp::Add, &[a, neg], &primary)
                    }
                    (Code::Sub, None) => unreachable!("checked: sub is binary"),
                }
                .map_err(graph_error)?
                .start;
                ids.push((s.start + first as u64) as i64);
            }
            Ok(ids)
        };
        let ids = if codes.len() >= DETACH_MIN_WORK { py.detach(|| add_batch(s)) } else { add_batch(s) }?;
        Ok(ids.into_pyarray(py))
    }

    /// Compiles the program computing `outputs` (ids) from the graph's inputs. Ctrl-C
    /// ends it within a fraction of a second ([`interruptibly_detached`]: the engine's passes read
    /// the flag every few thousand operations, `computegraph::stop`).
    fn compile(&mut self, py: Python<'_>, outputs: Vec<i64>) -> PyResult<Program> {
        let outputs = self.state.check_ids(&outputs, "output")?;
        let s = &mut self.state;
        let inputs = s.inputs.len();
        // The graph's own state is read first; the passes then own what they read, and
        // are not waited for once Ctrl-C has raised (`interruptibly_detached`).
        let (roots, keys) = interruptibly(py, |stop| {
            computegraph::stop::with_stop(stop, || -> PyResult<_> {
                let roots: Vec<_> = s.close()?.into_iter().collect();
                let keys = outputs.iter().map(|&v| s.key(v)).collect::<PyResult<Vec<_>>>()?;
                Ok((roots, keys))
            })
        })?;
        let runner = interruptibly_detached(py, move |stop| {
            computegraph::stop::with_stop(stop, || -> PyResult<Runner> {
                let view = try_resolve(roots).map_err(graph_error)?;
                let program =
                    try_compile(&try_materialize_merge(&view, &keys).map_err(graph_error)?).map_err(graph_error)?;
                Runner::new(program, None, inputs)
            })
        })?;
        Ok(Program { runner })
    }

    /// Compiles the value and gradient of `output` with respect to the inputs `wrt` (ids;
    /// every input when `None`). Ctrl-C ends it as it ends `compile`.
    #[pyo3(signature = (output, wrt=None))]
    fn gradient(&mut self, py: Python<'_>, output: i64, wrt: Option<Vec<i64>>) -> PyResult<Gradient> {
        let output = self.state.check_ids(&[output], "output")?[0];
        let wrt = match wrt {
            Some(w) => self.state.check_ids(&w, "wrt value")?,
            None => self.state.inputs.clone(),
        };
        let s = &mut self.state;
        let inputs = s.inputs.len();
        // As in `compile`: the graph's state first, then passes that own what they read.
        let (last, wrt_keys, key) = interruptibly(py, |stop| {
            computegraph::stop::with_stop(stop, || -> PyResult<_> {
                let last = s.close()?.ok_or_else(|| PyValueError::new_err("the graph is empty"))?;
                let wrt_keys = wrt
                    .iter()
                    .map(|&v| match s.key(v)? {
                        ValueKey::Input(k) => Ok(k),
                        ValueKey::Derived { .. } => {
                            Err(PyValueError::new_err(format!("wrt value {v} is not an input of the graph")))
                        }
                    })
                    .collect::<PyResult<Vec<_>>>()?;
                Ok((last, wrt_keys, s.key(output)?))
            })
        })?;
        let wrt_count = wrt.len();
        interruptibly_detached(py, move |stop| {
            computegraph::stop::with_stop(stop, || -> PyResult<Gradient> {
                let view = try_resolve(vec![Arc::clone(&last)]).map_err(graph_error)?;
                let lin = tidu::grad(&view, &key, &wrt_keys).map_err(|e| PyValueError::new_err(e.to_string()))?;
                let mut keys = vec![key];
                let mut positions = Vec::with_capacity(wrt_count);
                for k in lin.tangent_output_keys() {
                    positions.push(k.map(|k| {
                        keys.push(k);
                        keys.len() - 1
                    }));
                }
                let view = try_resolve(vec![lin.graph().clone(), last]).map_err(graph_error)?;
                let program =
                    try_compile(&try_materialize_merge(&view, &keys).map_err(graph_error)?).map_err(graph_error)?;
                let seed = lin.tangent_inputs().first().map(|(k, _)| k.clone());
                Ok(Gradient { runner: Runner::new(program, seed.as_ref(), inputs)?, positions })
            })
        })
    }
}

/// A compiled program (`Graph.compile`).
#[pyclass(frozen, module = "cgx._core")]
pub struct Program {
    runner: Runner,
}

#[pymethods]
impl Program {
    /// The outputs at `inputs` (1-d: one value per graph input; 2-d: one row per point).
    fn eval<'py>(
        &self,
        py: Python<'py>,
        inputs: PyReadonlyArrayDyn<'py, f64>,
    ) -> PyResult<Bound<'py, PyArrayDyn<f64>>> {
        let (out, rows) = self.runner.run(py, &inputs)?;
        to_numpy(py, out, rows, self.runner.program.output_keys().len())
    }

    /// Inputs the program reads per point (the graph's inputs when it was compiled).
    #[getter]
    fn num_inputs(&self) -> usize {
        self.runner.inputs
    }

    /// Instructions of the compiled program (after merging equal operations).
    #[getter]
    fn instruction_count(&self) -> usize {
        self.runner.program.instruction_count()
    }
}

/// A compiled value and gradient (`Graph.gradient`).
#[pyclass(frozen, module = "cgx._core")]
pub struct Gradient {
    runner: Runner,
    /// Per `wrt` entry, its output position (`None`: a symbolic zero).
    positions: Vec<Option<usize>>,
}

#[pymethods]
impl Gradient {
    /// `(value, gradient)` at `inputs`; for a 2-d batch, one value and one gradient row per
    /// point.
    #[allow(clippy::type_complexity)]
    fn eval<'py>(
        &self,
        py: Python<'py>,
        inputs: PyReadonlyArrayDyn<'py, f64>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyArrayDyn<f64>>)> {
        let (out, rows) = self.runner.run(py, &inputs)?;
        let width = self.runner.program.output_keys().len();
        let n = self.positions.len();
        let points = out.len().checked_div(width).unwrap_or(0);
        let mut values = Vec::with_capacity(points);
        let mut grads =
            crate::try_alloc(points.checked_mul(n), || format!("the gradients of {points} points ({n} per point)"))?;
        grads.resize(points * n, 0.0);
        for (p, row) in out.chunks_exact(width).enumerate() {
            values.push(row[0]);
            for (j, pos) in self.positions.iter().enumerate() {
                if let Some(i) = pos {
                    grads[p * n + j] = row[*i];
                }
            }
        }
        let value = match rows {
            Some(_) => values.into_pyarray(py).into_any(),
            None => values[0].into_pyobject(py)?.into_any(),
        };
        Ok((value, to_numpy(py, grads, rows, n)?))
    }

    /// Inputs the program reads per point.
    #[getter]
    fn num_inputs(&self) -> usize {
        self.runner.inputs
    }

    /// Instructions of the compiled program.
    #[getter]
    fn instruction_count(&self) -> usize {
        self.runner.program.instruction_count()
    }
}

/// A numpy array of ids.
type Ids<'py> = Bound<'py, PyArray1<i64>>;

/// The benchmark DAG `cgx bench dag --shape SHAPE --nodes N` builds (`window` or `uniform`,
/// from the `workloads` crate), as the arrays `Graph.add` takes:
/// `(inputs, ops, lhs, rhs, outputs, input_values)`. Value ids are the spec's.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn graph_workload<'py>(
    py: Python<'py>,
    shape: &str,
    nodes: usize,
) -> PyResult<(u32, Ids<'py>, Ids<'py>, Ids<'py>, Ids<'py>, Bound<'py, PyArray1<f64>>)> {
    use computegraph::GraphOperation;
    let shape = match shape {
        "window" => workloads::Shape::Window,
        "uniform" => workloads::Shape::Uniform,
        _ => return Err(PyValueError::new_err(format!("unknown shape `{shape}`: expected window or uniform"))),
    };
    let w = workloads::Workload::new(shape, nodes);
    let spec = &w.spec;
    let (mut ops, mut lhs, mut rhs) = (Vec::new(), Vec::new(), Vec::new());
    let mut a = 0;
    for op in &spec.ops {
        let name = match op {
            ScalarOp::Add => "add",
            ScalarOp::Mul => "mul",
            ScalarOp::Neg => "neg",
            ScalarOp::Exp => "exp",
            ScalarOp::Sin => "sin",
            ScalarOp::Cos => "cos",
            ScalarOp::SinCos => "sincos",
            ScalarOp::Const(_) => return Err(PyValueError::new_err("the workload has a constant")),
        };
        ops.push(OP_NAMES.iter().position(|&o| o == name).unwrap_or(0) as i64);
        let args = &spec.args[a..a + op.input_count()];
        a += args.len();
        lhs.push(args[0] as i64);
        rhs.push(args.get(1).map_or(0, |&x| x as i64));
    }
    let outputs: Vec<i64> = spec.outputs.iter().map(|&o| o as i64).collect();
    let ids = |v: Vec<i64>| v.into_pyarray(py);
    Ok((spec.inputs, ids(ops), ids(lhs), ids(rhs), ids(outputs), w.inputs.clone().into_pyarray(py)))
}
