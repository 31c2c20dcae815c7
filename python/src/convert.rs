//! numpy arrays in, einsum tensors out, and back.
//!
//! Operands are read through `PyReadonlyArrayDyn` (numpy's borrow checking: a writable
//! view of the same data elsewhere in Rust is refused). float64 and complex128 arrays are
//! read directly; anything else (other dtypes, lists, scalars) goes through
//! `numpy.asarray` first and becomes float64, or complex128 if its dtype is complex. If
//! any operand is complex, all are read as complex128.
//!
//! No copy in where the layout allows: a C-contiguous, aligned float64 or complex128 array
//! of the contraction's element type becomes a tensor over the array's own memory
//! (`einsum::Tensor::from_shared` with [`NumpyData`], which holds a reference to the array so
//! it outlives every tensor over it). Anything else (Fortran order, strided views, other
//! dtypes, a real operand of a complex contraction) is copied once in row-major order; a
//! copy larger than the machine's memory (a broadcast view of 2^40 elements) or one the
//! allocator refuses is a `MemoryError`, not an abort.
//! No copy out: a result the engine holds alone becomes the numpy array's buffer; a result
//! shared with something else (an operand returned as it is) is copied. A result of at
//! least `einsum::POOL_MIN_BYTES` is held by a [`PooledData`] base object, so that when
//! numpy drops the array its allocation goes back to the einsum crate's buffer pool of
//! the dropping thread (the thread that called, for a caller that drops its results
//! itself), where the next call's outputs find it; smaller results, which the pool does
//! not keep, are handed to numpy as plain vectors.
//!
//! Borrowing: the operands are read with rust-numpy's borrow checking (no writable Rust
//! borrow of them exists meanwhile); the tensors over their memory live only during the
//! call that made them. As for numpy's own functions that release the GIL, a Python
//! thread that writes to an operand while a contraction runs races with it.

// The crate denies unsafe code; this module shares numpy's buffers and alone allows it.
#![allow(unsafe_code)]

use einsum::{Elem, POOL_MIN_BYTES, Tensor, c64};
use numpy::ndarray::{ArrayViewD, IxDyn};
use numpy::{Element, IntoPyArray, PyArray, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods};
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
/// A copy larger than the machine's memory, or one the allocator refuses, is a
/// `MemoryError` (a broadcast view such as `np.broadcast_to(x, (2**40,))` is tiny in
/// numpy and huge once copied).
fn to_vec<T: Element + Copy, U>(a: &PyReadonlyArrayDyn<'_, T>, f: impl Fn(T) -> U) -> PyResult<Vec<U>> {
    let mut v = crate::try_alloc(Some(a.len()), || format!("a copy of an operand of shape {:?}", a.shape()))?;
    // `as_slice` also accepts Fortran order (memory order), so check C order first.
    match a.as_slice() {
        Ok(s) if a.is_c_contiguous() => v.extend(s.iter().map(|&x| f(x))),
        _ => v.extend(a.as_array().iter().map(|&x| f(x))),
    }
    Ok(v)
}

fn tensor<T: Element + Copy, U: Elem>(a: &PyReadonlyArrayDyn<'_, T>, f: impl Fn(T) -> U) -> PyResult<Tensor<U>> {
    Tensor::new(a.shape().to_vec(), to_vec(a, f)?).map_err(crate::einsum_error)
}

/// A numpy array's elements, read in place: a reference to the array (which keeps it, and
/// so its buffer, alive) and the buffer's address and length.
pub struct NumpyData<T> {
    _array: Py<PyAny>,
    ptr: *const T,
    len: usize,
}

// SAFETY: the pointer is only read, through `as_ref`, and the elements are plain numbers
// (`f64`, `c64`), so sharing or sending the view between threads is sharing `&[T]`, which
// is `Send + Sync` for these `T`. `Py<PyAny>` is `Send + Sync` itself.
unsafe impl<T: Sync> Send for NumpyData<T> {}
// SAFETY: as for `Send`.
unsafe impl<T: Sync> Sync for NumpyData<T> {}

impl<T> AsRef<[T]> for NumpyData<T> {
    fn as_ref(&self) -> &[T] {
        // SAFETY: `ptr` and `len` come from a slice of the array's buffer (`as_slice` of a
        // C-contiguous, aligned array, so non-null and aligned), and `_array` keeps that
        // array alive: numpy frees or moves a buffer only when its array dies (or on
        // `resize`, which numpy refuses while another reference such as ours exists).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// A tensor over the array's memory when it is C-contiguous and aligned, else a copy.
fn shared<T: Elem + Element>(a: &PyReadonlyArrayDyn<'_, T>) -> PyResult<Tensor<T>> {
    match a.as_slice() {
        Ok(s) if a.is_c_contiguous() && s.as_ptr().is_aligned() => {
            let data = NumpyData { _array: a.as_any().clone().unbind(), ptr: s.as_ptr(), len: s.len() };
            Tensor::from_shared(a.shape().to_vec(), data).map_err(crate::einsum_error)
        }
        _ => tensor(a, |x| x),
    }
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
                    Read::Complex(a) => shared(a),
                })
                .collect::<PyResult<_>>()?,
        )
    } else {
        Operands::Real(
            reads
                .iter()
                .map(|r| match r {
                    Read::Real(a) => shared(a),
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
            Read::Real(a) => T::from_real_array(&a),
            Read::Complex(a) => T::from_complex(&a)
                .ok_or_else(|| PyTypeError::new_err(format!("{what} {i} is complex but the operands are real")))?,
        })
        .collect()
}

/// Element types that real (and possibly complex) arrays convert to.
pub trait FromReal: Elem + Element {
    /// A real number as this type.
    fn from_real(x: f64) -> Self;
    /// A real array as a tensor of this type (in place when the layout allows).
    fn from_real_array(a: &PyReadonlyArrayDyn<'_, f64>) -> PyResult<Tensor<Self>>;
    /// A complex array as a tensor of this type, if that is a conversion without loss.
    fn from_complex(a: &PyReadonlyArrayDyn<'_, c64>) -> Option<PyResult<Tensor<Self>>>;
}

impl FromReal for f64 {
    fn from_real(x: f64) -> Self {
        x
    }
    fn from_real_array(a: &PyReadonlyArrayDyn<'_, f64>) -> PyResult<Tensor<Self>> {
        shared(a)
    }
    fn from_complex(_: &PyReadonlyArrayDyn<'_, c64>) -> Option<PyResult<Tensor<Self>>> {
        None
    }
}

impl FromReal for c64 {
    fn from_real(x: f64) -> Self {
        c64::new(x, 0.0)
    }
    fn from_real_array(a: &PyReadonlyArrayDyn<'_, f64>) -> PyResult<Tensor<Self>> {
        tensor(a, Self::from_real)
    }
    fn from_complex(a: &PyReadonlyArrayDyn<'_, c64>) -> Option<PyResult<Tensor<Self>>> {
        Some(shared(a))
    }
}

/// The base object of a result array: the einsum crate's pooled allocation of its elements
/// (an `einsum::PooledVec`), which returns to the buffer pool of the thread that drops it.
///
/// Why: results handed to numpy as plain vectors are freed together when the caller drops
/// them, glibc then gives the top of its heap back to the system, and the next call's
/// outputs come from fresh pages (480 page faults per value and gradient of the batched
/// product instance, `docs/performance-history.md`, *einsum against JAX*).
#[pyclass(frozen, module = "cgx._core")]
pub struct PooledData {
    _data: Box<dyn std::any::Any + Send + Sync>,
}

/// A numpy array over the tensor's data: its own allocation when the tensor holds it
/// alone, else a copy; held by a [`PooledData`] when the pool keeps buffers of its size.
pub fn to_numpy<'py, T: Elem + Element>(py: Python<'py>, t: Tensor<T>) -> PyResult<Bound<'py, PyArrayDyn<T>>> {
    let shape = t.shape().to_vec();
    if std::mem::size_of_val(t.data()) < POOL_MIN_BYTES {
        return t.into_vec().into_pyarray(py).reshape(shape);
    }
    let mut data = t.into_pooled_vec();
    let ptr = data.as_mut_slice().as_mut_ptr();
    // Moving `data` into the box moves the vector, not its heap allocation, so `ptr` stays
    // valid for as long as the base object lives.
    let owner = Bound::new(py, PooledData { _data: Box::new(data) })?.into_any();
    // SAFETY: `ptr` points at the row-major elements of `shape` (the tensor's length, checked
    // when it was made), initialized, aligned and non-null (a vector's pointer), owned by
    // `owner` alone: nothing else reads or writes them. `borrow_from_array` makes `owner`
    // the array's base object, so the elements live as long as the array and its views.
    let view = unsafe { ArrayViewD::from_shape_ptr(IxDyn(&shape), ptr.cast_const()) };
    // SAFETY: as above; numpy may write the elements through the array (they are the
    // array's alone), and `owner` is dropped only after the array.
    Ok(unsafe { PyArray::borrow_from_array(&view, owner) })
}
