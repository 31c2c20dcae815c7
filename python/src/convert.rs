//! numpy arrays in, einsum tensors out, and back.
//!
//! Operands are read through `PyReadonlyArrayDyn` (numpy's borrow checking: a writable
//! view of the same data elsewhere in Rust is refused). float64 and complex128 arrays are
//! read directly; anything else (other dtypes, lists, scalars) goes through
//! `numpy.asarray` first and becomes float64, or complex128 if its dtype is complex. If
//! any operand is complex, all are read as complex128.
//!
//! One copy in, one copy out: `einsum::Tensor::new` takes its data as an owned `Vec` (the
//! crate keeps it behind an `Arc` in a private pooled buffer and has no constructor over
//! borrowed memory), so each operand is copied once, contiguous or not (a non-contiguous
//! array is read in row-major order), and the result's data, shared inside the crate, is
//! copied once into a new numpy array.

use einsum::{Elem, Tensor, c64};
use numpy::ndarray::{ArrayViewD, IxDyn};
use numpy::{Element, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods, ToPyArray};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// Operands read from Python, all of one element type.
pub enum Operands {
    /// float64.
    Real(Vec<Tensor<f64>>),
    /// complex128 (float64 operands are promoted).
    Complex(Vec<Tensor<c64>>),
}

/// One operand, borrowed.
enum Read<'py> {
    Real(PyReadonlyArrayDyn<'py, f64>),
    Complex(PyReadonlyArrayDyn<'py, c64>),
}

impl Read<'_> {
    fn shape(&self) -> &[usize] {
        match self {
            Read::Real(a) => a.shape(),
            Read::Complex(a) => a.shape(),
        }
    }
}

/// Reads one operand, converting through `numpy.asarray` when it is not a float64 or
/// complex128 array.
fn read<'py>(index: usize, ob: &Bound<'py, PyAny>) -> PyResult<Read<'py>> {
    if let Ok(a) = ob.cast::<PyArrayDyn<f64>>() {
        return Ok(Read::Real(a.try_readonly().map_err(|e| PyValueError::new_err(e.to_string()))?));
    }
    if let Ok(a) = ob.cast::<PyArrayDyn<c64>>() {
        return Ok(Read::Complex(a.try_readonly().map_err(|e| PyValueError::new_err(e.to_string()))?));
    }
    let np = ob.py().import("numpy")?;
    let a = np.call_method1("asarray", (ob,))?;
    let dtype = a.getattr("dtype")?;
    let kind: String = dtype.getattr("kind")?.extract()?;
    let target = match kind.as_str() {
        "c" => "complex128",
        "f" | "i" | "u" | "b" => "float64",
        _ => {
            return Err(PyTypeError::new_err(format!(
                "operand {index} has dtype {}: only real and complex numbers can be contracted",
                dtype.str()?
            )));
        }
    };
    let a = a.call_method1("astype", (target,))?;
    read(index, &a)
}

/// Copies an array's elements in row-major order (see the module docs for why a copy).
fn to_vec<T: Element + Copy, U>(a: &PyReadonlyArrayDyn<'_, T>, f: impl Fn(T) -> U) -> Vec<U> {
    // `as_slice` also accepts Fortran order (memory order), so check C order first.
    match a.as_slice() {
        Ok(s) if a.is_c_contiguous() => s.iter().map(|&x| f(x)).collect(),
        _ => a.as_array().iter().map(|&x| f(x)).collect(),
    }
}

fn tensor<T: Element + Copy, U: Elem>(a: &PyReadonlyArrayDyn<'_, T>, f: impl Fn(T) -> U) -> PyResult<Tensor<U>> {
    Tensor::new(a.shape().to_vec(), to_vec(a, f)).map_err(crate::value_error)
}

/// Reads every operand of a tuple (one element type for all) and returns their shapes.
pub fn operands(items: &Bound<'_, PyTuple>) -> PyResult<(Operands, Vec<Vec<usize>>)> {
    let reads: Vec<Read<'_>> = items.iter().enumerate().map(|(i, ob)| read(i, &ob)).collect::<PyResult<_>>()?;
    let shapes = reads.iter().map(|r| r.shape().to_vec()).collect();
    let complex = reads.iter().any(|r| matches!(r, Read::Complex(_)));
    let operands = if complex {
        let to_c = |x: f64| c64::new(x, 0.0);
        Operands::Complex(
            reads
                .iter()
                .map(|r| match r {
                    Read::Real(a) => tensor(a, to_c),
                    Read::Complex(a) => tensor(a, |z| z),
                })
                .collect::<PyResult<_>>()?,
        )
    } else {
        Operands::Real(
            reads
                .iter()
                .map(|r| match r {
                    Read::Real(a) => tensor(a, |x| x),
                    Read::Complex(_) => unreachable!("no complex operand"),
                })
                .collect::<PyResult<_>>()?,
        )
    };
    Ok((operands, shapes))
}

/// Reads tensors of a given element type (cotangents, directions), converting as
/// [`operands`] does; a complex array where real numbers are expected is an error.
pub fn tensors_like<T: FromReal>(items: &[Bound<'_, PyAny>], what: &str) -> PyResult<Vec<Tensor<T>>> {
    items
        .iter()
        .enumerate()
        .map(|(i, ob)| match read(i, ob)? {
            Read::Real(a) => tensor(&a, T::from_real),
            Read::Complex(a) => T::from_complex(&a)
                .ok_or_else(|| PyTypeError::new_err(format!("{what} {i} is complex but the operands are real")))?,
        })
        .collect()
}

/// Element types that real (and possibly complex) arrays convert to.
pub trait FromReal: Elem + Element {
    /// A real number as this type.
    fn from_real(x: f64) -> Self;
    /// A complex array as a tensor of this type, if that is a conversion without loss.
    fn from_complex(a: &PyReadonlyArrayDyn<'_, c64>) -> Option<PyResult<Tensor<Self>>>;
}

impl FromReal for f64 {
    fn from_real(x: f64) -> Self {
        x
    }
    fn from_complex(_: &PyReadonlyArrayDyn<'_, c64>) -> Option<PyResult<Tensor<Self>>> {
        None
    }
}

impl FromReal for c64 {
    fn from_real(x: f64) -> Self {
        c64::new(x, 0.0)
    }
    fn from_complex(a: &PyReadonlyArrayDyn<'_, c64>) -> Option<PyResult<Tensor<Self>>> {
        Some(tensor(a, |z| z))
    }
}

/// A new numpy array holding a copy of the tensor.
pub fn to_numpy<'py, T: Elem + Element>(py: Python<'py>, t: &Tensor<T>) -> PyResult<Bound<'py, PyArrayDyn<T>>> {
    let view = ArrayViewD::from_shape(IxDyn(t.shape()), t.data()).map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(view.to_pyarray(py))
}
