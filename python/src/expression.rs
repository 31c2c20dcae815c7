//! [`Expression`]: a contraction compiled once for fixed shapes, callable many times, with
//! gradients and Hessian-vector products; and [`contract`], which looks expressions up in
//! a bounded process-wide cache so that repeated calls compile once.
//!
//! An expression holds its [`Plan`] and, per element type, the einsum crate's compiled
//! [`Einsum`] (built on the first call with that type) and derivative programs by `wrt`
//! (built on first use). Work runs with the GIL released unless it is too small for that
//! to pay (`DETACH_MIN_WORK`). Before any allocation, the plan's largest intermediate is
//! checked against the memory limit (`MemoryError`).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, OnceLock};

use einsum::{Einsum, EinsumGradient, EinsumHvp, EinsumResult, Elem, PathChoice, Tensor, c64};
use numpy::Element;
use pyo3::exceptions::{PyMemoryError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::convert::{self, FromReal, Operands};
use crate::plan::Plan;
use crate::value_error;

/// Below this many multiply-adds a call keeps the GIL: releasing and taking it back costs
/// more than such a contraction.
const DETACH_MIN_WORK: f64 = 32_768.0;

/// Expressions kept by [`contract`]'s cache; past this the cache starts over.
const CACHE_CAPACITY: usize = 512;

/// The memory ceiling in bytes for an intermediate when no `memory_limit` is given: set
/// from Python at import (the machine's physical memory).
static MEMORY_CEILING: Mutex<f64> = Mutex::new(f64::INFINITY);

/// Sets the ceiling [`MEMORY_CEILING`] (bytes).
#[pyfunction]
pub fn set_memory_ceiling(bytes: f64) {
    *MEMORY_CEILING.lock().unwrap_or_else(|e| e.into_inner()) = bytes;
}

/// What one element type needs compiled.
struct Compiled<T: Elem> {
    einsum: OnceLock<Arc<Einsum<T>>>,
    gradients: Mutex<HashMap<Vec<usize>, Arc<EinsumGradient<T>>>>,
    hvps: Mutex<HashMap<Vec<usize>, Arc<EinsumHvp<T>>>>,
}

impl<T: Elem> Compiled<T> {
    fn new() -> Self {
        Compiled { einsum: OnceLock::new(), gradients: Mutex::default(), hvps: Mutex::default() }
    }
}

/// A plan and its compiled programs (shared by [`Expression`] and the cache).
struct Inner {
    plan: Plan,
    real: Compiled<f64>,
    complex: Compiled<c64>,
}

/// The element types, and where each keeps its compiled programs.
trait Dtype: FromReal + Element {
    fn compiled(inner: &Inner) -> &Compiled<Self>;
}

impl Dtype for f64 {
    fn compiled(inner: &Inner) -> &Compiled<f64> {
        &inner.real
    }
}

impl Dtype for c64 {
    fn compiled(inner: &Inner) -> &Compiled<c64> {
        &inner.complex
    }
}

/// Locks a mutex, ignoring poisoning (the maps stay consistent: entries are inserted whole).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` without the GIL when the work is large enough for that to pay.
fn run<R: Send>(py: Python<'_>, work: f64, f: impl FnOnce() -> R + Send) -> R {
    if work >= DETACH_MIN_WORK { py.detach(f) } else { f() }
}

impl Inner {
    fn new(expression: &str, shapes: Vec<Vec<usize>>, path: Option<Vec<[usize; 2]>>) -> PyResult<Inner> {
        let plan = Plan::new(expression, shapes, path).map_err(value_error)?;
        Ok(Inner { plan, real: Compiled::new(), complex: Compiled::new() })
    }

    /// `MemoryError` if the largest intermediate exceeds `limit` elements or, without a
    /// limit, the memory ceiling.
    fn check_memory<T: Elem>(&self, limit: Option<f64>) -> PyResult<()> {
        let largest = self.plan.largest_intermediate();
        let bytes = largest * std::mem::size_of::<T>() as f64;
        let ceiling = *lock(&MEMORY_CEILING);
        match limit {
            Some(l) if largest > l => Err(PyMemoryError::new_err(format!(
                "`{}`: the largest intermediate has {largest:.0} elements, more than memory_limit={l:.0}",
                self.plan.expression
            ))),
            None if bytes > ceiling => Err(PyMemoryError::new_err(format!(
                "`{}`: the largest intermediate needs {:.3e} bytes, more than this machine's memory ({:.3e} bytes)",
                self.plan.expression, bytes, ceiling
            ))),
            _ => Ok(()),
        }
    }

    fn einsum<T: Dtype>(&self) -> PyResult<&Arc<Einsum<T>>> {
        let cell = &T::compiled(self).einsum;
        if let Some(e) = cell.get() {
            return Ok(e);
        }
        let p = &self.plan;
        let e = Einsum::new(&p.expression, &p.shapes, PathChoice::Explicit(p.path.clone())).map_err(value_error)?;
        Ok(cell.get_or_init(|| Arc::new(e)))
    }

    fn wrt(&self, wrt: Option<Vec<usize>>) -> Vec<usize> {
        wrt.unwrap_or_else(|| (0..self.plan.shapes.len()).collect())
    }

    /// Checks that the operands have the shapes the expression was built for (the crate
    /// checks it too; this says it before anything is compiled for a new element type).
    fn check_shapes(&self, shapes: &[Vec<usize>]) -> PyResult<()> {
        let want = &self.plan.shapes;
        if shapes.len() != want.len() {
            return Err(PyValueError::new_err(format!(
                "shape error: `{}` takes {} operands but {} were given",
                self.plan.expression,
                want.len(),
                shapes.len()
            )));
        }
        match shapes.iter().zip(want).position(|(s, w)| s != w) {
            Some(i) => Err(PyValueError::new_err(format!(
                "shape error: operand {i} of `{}` has shape {:?} but the expression was built for {:?}",
                self.plan.expression, shapes[i], want[i]
            ))),
            None => Ok(()),
        }
    }

    fn eval<'py, T: Dtype>(
        &self,
        py: Python<'py>,
        operands: &[Tensor<T>],
        limit: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.check_memory::<T>(limit)?;
        let e = self.einsum::<T>()?;
        let refs: Vec<&Tensor<T>> = operands.iter().collect();
        let out = run(py, self.plan.multiply_adds(), || e.eval(&refs)).map_err(value_error)?;
        Ok(convert::to_numpy(py, out)?.into_any())
    }

    fn call<'py>(
        &self,
        py: Python<'py>,
        items: &Bound<'py, PyTuple>,
        limit: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (operands, shapes) = convert::operands(items)?;
        self.check_shapes(&shapes)?;
        match operands {
            Operands::Real(t) => self.eval(py, &t, limit),
            Operands::Complex(t) => self.eval(py, &t, limit),
        }
    }

    /// The cotangent: the given one, or 1 for a scalar output.
    fn cotangent<T: Dtype>(&self, cotangent: Option<&Bound<'_, PyAny>>) -> PyResult<Tensor<T>> {
        match cotangent {
            Some(c) => Ok(convert::tensors_like::<T>(std::slice::from_ref(c), "cotangent")?.remove(0)),
            None if self.plan.output_shape.is_empty() => Ok(Tensor::scalar(T::from_f64(1.0))),
            None => Err(PyValueError::new_err(format!(
                "`{}` has a non-scalar output of shape {:?}: pass a cotangent of that shape",
                self.plan.expression, self.plan.output_shape
            ))),
        }
    }

    fn value_and_grad<'py, T: Dtype>(
        &self,
        py: Python<'py>,
        operands: &[Tensor<T>],
        wrt: Vec<usize>,
        cotangent: Option<&Bound<'py, PyAny>>,
        limit: Option<f64>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        self.check_memory::<T>(limit)?;
        let e = self.einsum::<T>()?;
        let c = self.cotangent::<T>(cotangent)?;
        let g = cached(&T::compiled(self).gradients, wrt, |w| e.gradient(w))?;
        let refs: Vec<&Tensor<T>> = operands.iter().collect();
        let (value, grads) = run(py, 3.0 * self.plan.multiply_adds(), || -> EinsumResult<_> {
            Ok((e.eval(&refs)?, g.eval(&refs, &c)?))
        })
        .map_err(value_error)?;
        let grads = grads.into_iter().map(|t| convert::to_numpy(py, t)).collect::<PyResult<Vec<_>>>()?;
        PyTuple::new(py, [convert::to_numpy(py, value)?.into_any(), PyTuple::new(py, grads)?.into_any()])
    }

    fn hvp<'py, T: Dtype>(
        &self,
        py: Python<'py>,
        operands: &[Tensor<T>],
        directions: &[Bound<'py, PyAny>],
        wrt: Vec<usize>,
        cotangent: Option<&Bound<'py, PyAny>>,
        limit: Option<f64>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        self.check_memory::<T>(limit)?;
        let e = self.einsum::<T>()?;
        let c = self.cotangent::<T>(cotangent)?;
        let v = convert::tensors_like::<T>(directions, "direction")?;
        let h = cached(&T::compiled(self).hvps, wrt, |w| e.hvp(w))?;
        let refs: Vec<&Tensor<T>> = operands.iter().collect();
        let vrefs: Vec<&Tensor<T>> = v.iter().collect();
        let out = run(py, 4.0 * self.plan.multiply_adds(), || h.eval(&refs, &c, &vrefs)).map_err(value_error)?;
        PyTuple::new(py, out.into_iter().map(|t| convert::to_numpy(py, t)).collect::<PyResult<Vec<_>>>()?)
    }
}

/// A derivative program from `map`, built and inserted on first use.
fn cached<P>(
    map: &Mutex<HashMap<Vec<usize>, Arc<P>>>,
    wrt: Vec<usize>,
    build: impl FnOnce(&[usize]) -> EinsumResult<P>,
) -> PyResult<Arc<P>> {
    if let Some(p) = lock(map).get(&wrt) {
        return Ok(p.clone());
    }
    let p = Arc::new(build(&wrt).map_err(value_error)?);
    lock(map).insert(wrt, p.clone());
    Ok(p)
}

/// A contraction compiled once for fixed shapes (the `_core` half of
/// `cgx.ContractExpression`).
#[pyclass(frozen, subclass, module = "cgx._core")]
pub struct Expression {
    inner: Arc<Inner>,
    memory_limit: Option<f64>,
}

#[pymethods]
impl Expression {
    /// `Expression(eq, shapes, path=None, memory_limit=None)`: `path` is a list of pairs
    /// (opt_einsum's format) or `None` for the greedy path.
    #[new]
    #[pyo3(signature = (eq, shapes, path=None, memory_limit=None))]
    fn new(
        eq: &str,
        shapes: Vec<Vec<usize>>,
        path: Option<Vec<(usize, usize)>>,
        memory_limit: Option<f64>,
    ) -> PyResult<Self> {
        let path = path.map(|p| p.into_iter().map(|(i, j)| [i, j]).collect());
        Ok(Expression { inner: Arc::new(Inner::new(eq, shapes, path)?), memory_limit })
    }

    /// Contracts operands of the expression's shapes; a new numpy array.
    #[pyo3(signature = (*operands))]
    fn __call__<'py>(&self, py: Python<'py>, operands: &Bound<'py, PyTuple>) -> PyResult<Bound<'py, PyAny>> {
        self.inner.call(py, operands, self.memory_limit)
    }

    /// `(value, grads)`: the contraction and the vector-Jacobian products with respect to
    /// the operands `wrt` (all if `None`) for `cotangent` (1 for a scalar output if `None`).
    #[pyo3(signature = (operands, wrt=None, cotangent=None))]
    fn _value_and_grad<'py>(
        &self,
        py: Python<'py>,
        operands: &Bound<'py, PyTuple>,
        wrt: Option<Vec<usize>>,
        cotangent: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let (ops, shapes) = convert::operands(operands)?;
        self.inner.check_shapes(&shapes)?;
        let (inner, wrt) = (&self.inner, self.inner.wrt(wrt));
        match ops {
            Operands::Real(t) => inner.value_and_grad(py, &t, wrt, cotangent.as_ref(), self.memory_limit),
            Operands::Complex(t) => inner.value_and_grad(py, &t, wrt, cotangent.as_ref(), self.memory_limit),
        }
    }

    /// Hessian-vector products of `x ↦ ⟨cotangent, f(x)⟩` in the operands `wrt`, one
    /// direction per `wrt` operand.
    #[pyo3(signature = (operands, directions, wrt=None, cotangent=None))]
    fn _hvp<'py>(
        &self,
        py: Python<'py>,
        operands: &Bound<'py, PyTuple>,
        directions: Vec<Bound<'py, PyAny>>,
        wrt: Option<Vec<usize>>,
        cotangent: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let (ops, shapes) = convert::operands(operands)?;
        self.inner.check_shapes(&shapes)?;
        let (inner, wrt) = (&self.inner, self.inner.wrt(wrt));
        match ops {
            Operands::Real(t) => inner.hvp(py, &t, &directions, wrt, cotangent.as_ref(), self.memory_limit),
            Operands::Complex(t) => inner.hvp(py, &t, &directions, wrt, cotangent.as_ref(), self.memory_limit),
        }
    }

    /// The subscripts as given.
    #[getter]
    fn eq(&self) -> &str {
        &self.inner.plan.expression
    }

    /// The operand shapes.
    #[getter]
    fn shapes(&self) -> Vec<Vec<usize>> {
        self.inner.plan.shapes.clone()
    }

    /// The output shape.
    #[getter]
    fn output_shape(&self) -> Vec<usize> {
        self.inner.plan.output_shape.clone()
    }

    /// The pairwise path, opt_einsum's format.
    #[getter]
    fn path(&self) -> Vec<(usize, usize)> {
        self.inner.plan.path.steps().iter().map(|s| (s[0], s[1])).collect()
    }

    /// The memory limit in elements, if any.
    #[getter]
    fn memory_limit(&self) -> Option<f64> {
        self.memory_limit
    }

    /// `(inputs, output, size_dict, steps)`: the parsed subscripts, the label sizes and per
    /// step `(positions, (a, b, result), size, multiply_adds)`, labels as strings.
    fn _plan(&self) -> PlanTuple {
        let p = &self.inner.plan;
        let s = |l: &[char]| l.iter().collect::<String>();
        (
            p.inputs.iter().map(|l| s(l)).collect(),
            s(&p.output),
            p.sizes.iter().map(|(&c, &n)| (c, n)).collect(),
            p.steps
                .iter()
                .map(|st| {
                    (
                        (st.positions[0], st.positions[1]),
                        (s(&st.labels[0]), s(&st.labels[1]), s(&st.labels[2])),
                        st.size,
                        st.multiply_adds,
                    )
                })
                .collect(),
        )
    }
}

/// What [`Expression::_plan`] returns.
type PlanTuple = (Vec<String>, String, HashMap<char, usize>, Vec<((usize, usize), (String, String, String), f64, f64)>);

/// The cache key of [`contract`]: expression, shapes, path.
type Key = (String, Vec<Vec<usize>>, Option<Vec<[usize; 2]>>);

static CACHE: LazyLock<Mutex<HashMap<Key, Arc<Inner>>>> = LazyLock::new(Mutex::default);

/// `contract(eq, operands, path=None, memory_limit=None)`: contracts a tuple of operands
/// along `path` (pairs, opt_einsum's format) or the greedy path; a new numpy array.
#[pyfunction]
#[pyo3(signature = (eq, operands, path=None, memory_limit=None))]
pub fn contract<'py>(
    py: Python<'py>,
    eq: &str,
    operands: &Bound<'py, PyTuple>,
    path: Option<Vec<(usize, usize)>>,
    memory_limit: Option<f64>,
) -> PyResult<Bound<'py, PyAny>> {
    let (ops, shapes) = convert::operands(operands)?;
    let path = path.map(|p| p.into_iter().map(|(i, j)| [i, j]).collect());
    let key: Key = (eq.to_string(), shapes, path);
    let found = lock(&CACHE).get(&key).cloned();
    let inner = match found {
        Some(i) => i,
        None => {
            let (eq, shapes, path) = key.clone();
            let i = Arc::new(Inner::new(&eq, shapes, path)?);
            let mut c = lock(&CACHE);
            if c.len() >= CACHE_CAPACITY {
                c.clear();
            }
            c.insert(key, i.clone());
            i
        }
    };
    match ops {
        Operands::Real(t) => inner.eval(py, &t, memory_limit),
        Operands::Complex(t) => inner.eval(py, &t, memory_limit),
    }
}

/// `search_path(eq, shapes, method)`: the einsum crate's path search `method` (`"optimal"`,
/// `"dp"`, `"random-greedy"`, `"auto"`) on the expression; a pairwise path.
#[pyfunction]
pub fn search_path(eq: &str, shapes: Vec<Vec<usize>>, method: &str) -> PyResult<Vec<(usize, usize)>> {
    let choice = match method {
        "optimal" => PathChoice::Optimal,
        "dp" => PathChoice::Dp,
        "random-greedy" => PathChoice::RandomGreedy { trials: einsum::search::RANDOM_GREEDY_TRIALS, seed: 0 },
        "auto" => PathChoice::Auto,
        m => return Err(PyValueError::new_err(format!("`{m}` is not a built-in path search"))),
    };
    let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let net =
        einsum::Subscripts::parse(eq).and_then(|s| s.resolve(&refs)).map_err(value_error)?.squeeze_broadcast(&refs);
    let path = einsum::search::find_path(choice, &net.inputs, &net.output, &net.sizes).map_err(value_error)?;
    let pairs = path.pairwise(net.inputs.len()).map_err(value_error)?;
    Ok(pairs.into_iter().map(|[i, j]| (i, j)).collect())
}
