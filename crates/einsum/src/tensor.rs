//! [`Tensor`]: a dense, row-major, immutable tensor whose data is shared (cloning is cheap).

use std::fmt;
use std::sync::Arc;

use crate::buffer::{Buffer, PooledVec, overwritten};
use crate::elem::Elem;
use crate::error::{EinsumError, EinsumResult};

/// A dense row-major tensor of `T` with a shape. The data is behind an `Arc`, so clones
/// (which the evaluator makes of its inputs) cost a reference count, not a copy.
///
/// ```
/// use einsum::Tensor;
/// let t = Tensor::new(vec![2, 3], (0..6).map(f64::from).collect()).unwrap();
/// assert_eq!(t.get(&[1, 2]), Some(5.0));
/// assert!(Tensor::<f64>::new(vec![2, 3], vec![0.0; 5]).is_err());
/// ```
#[derive(Clone, PartialEq)]
pub struct Tensor<T: Elem> {
    shape: Arc<[usize]>,
    data: Arc<Buffer<T>>,
}

/// The number of elements of a shape, or `None` on overflow.
pub(crate) fn checked_len(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// The number of elements of a shape, or a shape error naming it.
fn element_count(shape: &[usize]) -> EinsumResult<usize> {
    checked_len(shape).ok_or_else(|| EinsumError::Shape(format!("shape {shape:?} overflows usize")))
}

/// An empty vector with room for `n` elements, or an error (not an abort) when the
/// allocator refuses.
fn try_vec<T>(shape: &[usize], n: usize) -> EinsumResult<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| EinsumError::Memory {
        what: format!("a tensor of shape {shape:?}"),
        bytes: crate::memory::tensor_bytes(shape, std::mem::size_of::<T>()),
        limit: None,
    })?;
    Ok(v)
}

/// A copy of `data` in a buffer from the pool.
fn copied<T: Elem>(data: &[T]) -> Vec<T> {
    let mut v = overwritten(data.len());
    v.copy_from_slice(data);
    v
}

/// Row-major strides of a shape.
pub(crate) fn row_major_strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![0; shape.len()];
    let mut acc = 1;
    for (i, &d) in shape.iter().enumerate().rev() {
        s[i] = acc;
        acc *= d;
    }
    s
}

impl<T: Elem> Tensor<T> {
    /// A tensor from its shape and row-major data; the data length must be the product of
    /// the shape.
    pub fn new(shape: Vec<usize>, data: Vec<T>) -> EinsumResult<Self> {
        match checked_len(&shape) {
            Some(n) if n == data.len() => Ok(Tensor { shape: shape.into(), data: Arc::new(Buffer::new(data)) }),
            Some(n) => Err(EinsumError::Shape(format!(
                "shape {shape:?} has {n} elements but {} values were given",
                data.len()
            ))),
            None => Err(EinsumError::Shape(format!("shape {shape:?} overflows usize"))),
        }
    }

    /// A tensor over elements it does not copy: any owner of row-major data (an `Arc<[T]>`,
    /// a memory map, another library's array), kept alive as long as the tensor or one of
    /// its clones lives. The length is checked against the shape here, once: `data.as_ref()`
    /// must return the same elements on every call, and they must not change while the
    /// tensor lives (a tensor is immutable).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use einsum::Tensor;
    /// let data: Arc<[f64]> = Arc::from(vec![1.0, 2.0, 3.0, 4.0]);
    /// let t = Tensor::from_shared(vec![2, 2], Arc::clone(&data)).unwrap();
    /// assert_eq!(t.data().as_ptr(), data.as_ptr()); // no copy
    /// assert_eq!(t, Tensor::new(vec![2, 2], data.to_vec()).unwrap());
    /// assert!(Tensor::from_shared(vec![3], data).is_err());
    /// ```
    pub fn from_shared(shape: Vec<usize>, data: impl AsRef<[T]> + Send + Sync + 'static) -> EinsumResult<Self> {
        let len = data.as_ref().len();
        match checked_len(&shape) {
            Some(n) if n == len => Ok(Tensor { shape: shape.into(), data: Arc::new(Buffer::Shared(Box::new(data))) }),
            Some(n) => Err(EinsumError::Shape(format!("shape {shape:?} has {n} elements but {len} values were given"))),
            None => Err(EinsumError::Shape(format!("shape {shape:?} overflows usize"))),
        }
    }

    /// The row-major data as a vector: the tensor's own allocation, without a copy, when
    /// this tensor is its only holder (no clone alive) and the data is not shared
    /// ([`Tensor::from_shared`]); a copy otherwise. The allocation leaves the crate's
    /// buffer pool.
    ///
    /// ```
    /// use einsum::Tensor;
    /// let t = Tensor::new(vec![2], vec![1.0, 2.0]).unwrap();
    /// let ptr = t.data().as_ptr();
    /// let copy = t.clone().into_vec(); // a clone is alive: copied
    /// let v = t.into_vec();
    /// assert_eq!((v.as_ptr(), copy), (ptr, vec![1.0, 2.0]));
    /// ```
    pub fn into_vec(self) -> Vec<T> {
        match Arc::try_unwrap(self.data) {
            Ok(mut b) => b.take(),
            Err(shared) => shared.to_vec(),
        }
    }

    /// The row-major data as a [`PooledVec`], which returns its allocation to the current
    /// thread's buffer pool when dropped: the tensor's own allocation when it is the only
    /// holder and the data is not shared, a copy (in a pooled buffer) otherwise. For
    /// handing results to another library without a copy and without losing the pool.
    pub fn into_pooled_vec(self) -> PooledVec<T> {
        match Arc::try_unwrap(self.data) {
            Ok(mut b @ Buffer::Owned(_)) => PooledVec::new(b.take()),
            Ok(b) => PooledVec::new(copied(&b)),
            Err(shared) => PooledVec::new(copied(&shared)),
        }
    }

    /// Internal constructor for kernels whose output length is right by construction.
    pub(crate) fn from_parts(shape: &[usize], data: Vec<T>) -> Self {
        debug_assert_eq!(checked_len(shape), Some(data.len()));
        Tensor { shape: shape.into(), data: Arc::new(Buffer::new(data)) }
    }

    /// A tensor from its shape and row-major data, the same as [`Tensor::new`] under the
    /// name `Vec`-minded users look for: the shape is checked against the data's length.
    ///
    /// ```
    /// use einsum::Tensor;
    /// let t = Tensor::from_vec(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
    /// assert_eq!(t.get(&[1, 0]), Some(3.0));
    /// let e = Tensor::<f64>::from_vec(vec![2, 2], vec![1.0]).unwrap_err();
    /// assert_eq!(e.to_string(), "shape error: shape [2, 2] has 4 elements but 1 values were given");
    /// ```
    pub fn from_vec(shape: Vec<usize>, data: Vec<T>) -> EinsumResult<Self> {
        Self::new(shape, data)
    }

    /// A tensor of zeros. A shape whose element count overflows, or whose memory the
    /// allocator cannot give, is an error (never an abort).
    ///
    /// ```
    /// use einsum::Tensor;
    /// let z = Tensor::<f64>::zeros(vec![2, 3]).unwrap();
    /// assert_eq!((z.len(), z.get(&[1, 2])), (6, Some(0.0)));
    /// assert!(Tensor::<f64>::zeros(vec![1 << 40, 1 << 30]).is_err());
    /// ```
    pub fn zeros(shape: Vec<usize>) -> EinsumResult<Self> {
        Self::filled(shape, T::zero())
    }

    /// A tensor of ones (errors as [`Tensor::zeros`]).
    ///
    /// ```
    /// use einsum::{c64, Tensor};
    /// let o = Tensor::<c64>::ones(vec![2]).unwrap();
    /// assert_eq!(o.data(), &[c64::new(1.0, 0.0); 2]);
    /// ```
    pub fn ones(shape: Vec<usize>) -> EinsumResult<Self> {
        Self::filled(shape, T::one())
    }

    /// A tensor whose every element is `x` (errors as [`Tensor::zeros`]).
    pub fn filled(shape: Vec<usize>, x: T) -> EinsumResult<Self> {
        let n = element_count(&shape)?;
        let mut data = try_vec::<T>(&shape, n)?;
        data.resize(n, x);
        Self::new(shape, data)
    }

    /// A rank-0 tensor.
    pub fn scalar(x: T) -> Self {
        Tensor { shape: Arc::from(Vec::new()), data: Arc::new(Buffer::new(vec![x])) }
    }

    /// A tensor whose element at multi-index `i` is `f(i)`.
    pub fn from_fn(shape: Vec<usize>, mut f: impl FnMut(&[usize]) -> T) -> EinsumResult<Self> {
        let n = element_count(&shape)?;
        let mut data = try_vec::<T>(&shape, n)?;
        let mut idx = vec![0; shape.len()];
        for _ in 0..n {
            data.push(f(&idx));
            for k in (0..shape.len()).rev() {
                idx[k] += 1;
                if idx[k] < shape[k] {
                    break;
                }
                idx[k] = 0;
            }
        }
        Self::new(shape, data)
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The row-major data.
    pub fn data(&self) -> &[T] {
        &self.data
    }

    /// The number of axes.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The element at a multi-index, or `None` if out of range.
    pub fn get(&self, index: &[usize]) -> Option<T> {
        if index.len() != self.rank() {
            return None;
        }
        let mut off = 0;
        for (&i, &d) in index.iter().zip(self.shape.iter()) {
            if i >= d {
                return None;
            }
            off = off * d + i;
        }
        Some(self.data[off])
    }

    /// Element-wise map.
    pub fn map(&self, mut f: impl FnMut(&T) -> T) -> Self {
        let mut out = overwritten(self.len());
        for (o, x) in out.iter_mut().zip(self.data.iter()) {
            *o = f(x);
        }
        Tensor { shape: self.shape.clone(), data: Arc::new(Buffer::new(out)) }
    }

    /// Element-wise combination of two tensors of the same shape.
    pub fn zip_with(&self, other: &Self, mut f: impl FnMut(T, T) -> T) -> EinsumResult<Self> {
        if self.shape != other.shape {
            return Err(EinsumError::Shape(format!(
                "element-wise operation on shapes {:?} and {:?}",
                self.shape(),
                other.shape()
            )));
        }
        let mut out = overwritten(self.len());
        for (o, (&a, &b)) in out.iter_mut().zip(self.data.iter().zip(other.data.iter())) {
            *o = f(a, b);
        }
        Ok(Tensor { shape: self.shape.clone(), data: Arc::new(Buffer::new(out)) })
    }

    /// The real inner product `Σ Re(conj(a)·b)`; `None` if the shapes differ.
    pub fn inner(&self, other: &Self) -> Option<f64> {
        (self.shape == other.shape).then(|| self.data.iter().zip(other.data.iter()).map(|(a, b)| a.inner(*b)).sum())
    }

    /// The Euclidean norm `sqrt(Σ |x|²)`.
    pub fn norm(&self) -> f64 {
        self.data.iter().map(|x| x.inner(*x)).sum::<f64>().sqrt()
    }

    /// The largest `|a - b|` over elements, or `None` if the shapes differ.
    pub fn max_abs_diff(&self, other: &Self) -> Option<f64> {
        (self.shape == other.shape)
            .then(|| self.data.iter().zip(other.data.iter()).map(|(&a, &b)| (a - b).modulus()).fold(0.0, f64::max))
    }

    /// The largest `|x|`.
    pub fn max_abs(&self) -> f64 {
        self.data.iter().map(|x| x.modulus()).fold(0.0, f64::max)
    }
}

impl<T: Elem> fmt::Debug for Tensor<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tensor<{}>{:?}", T::NAME, self.shape())?;
        if self.len() <= 16 {
            f.write_str(" [")?;
            for (i, x) in self.data().iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                x.fmt_short(f)?;
            }
            f.write_str("]")?;
        } else {
            write!(f, " [{} elements, |max| {:.3e}]", self.len(), self.max_abs())?;
        }
        Ok(())
    }
}

impl<T: Elem> tidu::testing::CheckOperand for Tensor<T> {
    fn add_scaled(&self, h: f64, t: &Self) -> Self {
        let h = T::from_f64(h);
        self.zip_with(t, |a, b| a + h * b).unwrap_or_else(|e| panic!("checker: {e}"))
    }
    fn scale(&self, s: f64) -> Self {
        let s = T::from_f64(s);
        self.map(|&x| s * x)
    }
    fn random_like(&self, rng: &mut tidu::testing::CheckRng) -> Self {
        self.map(|_| T::from_parts(rng.uniform(-1.0, 1.0), rng.uniform(-1.0, 1.0)))
    }
    fn inner(&self, other: &Self) -> f64 {
        Tensor::inner(self, other).unwrap_or_else(|| panic!("checker: inner product of {self:?} and {other:?}"))
    }
    fn norm(&self) -> f64 {
        Tensor::norm(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn construction_and_access() {
        let t = Tensor::from_fn(vec![2, 3, 4], |i| (100 * i[0] + 10 * i[1] + i[2]) as f64).unwrap();
        assert_eq!(t.get(&[1, 2, 3]), Some(123.0));
        assert_eq!(t.data()[23], 123.0);
        assert_eq!(t.get(&[2, 0, 0]), None);
        assert_eq!(t.get(&[0, 0]), None);
        assert_eq!(row_major_strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(Tensor::scalar(2.0).get(&[]), Some(2.0));
        assert!(Tensor::<f64>::zeros(vec![usize::MAX, 3]).is_err());
        let e = Tensor::<f64>::new(vec![2], vec![1.0]).unwrap_err();
        assert_eq!(e.to_string(), "shape error: shape [2] has 2 elements but 1 values were given");
    }

    #[test]
    fn shared_data_is_read_in_place_and_never_recycled() {
        let data: Arc<[f64]> = (0..6).map(f64::from).collect();
        let t = Tensor::from_shared(vec![2, 3], Arc::clone(&data)).unwrap();
        assert_eq!(t.data().as_ptr(), data.as_ptr());
        assert_eq!(t.get(&[1, 2]), Some(5.0));
        let e = crate::Einsum::<f64>::new("ij,kj->ik", &[vec![2, 3], vec![2, 3]], crate::PathChoice::Greedy).unwrap();
        let owned = Tensor::new(vec![2, 3], data.to_vec()).unwrap();
        assert_eq!(e.eval(&[&t, &t]).unwrap(), e.eval(&[&owned, &owned]).unwrap());
        // Taking the data of a shared tensor copies it; the owner keeps its memory.
        let v = t.clone().into_vec();
        assert_ne!(v.as_ptr(), data.as_ptr());
        drop(t);
        assert_eq!(Arc::strong_count(&data), 1);
        assert_eq!(&data[..], &v[..]);
    }

    #[test]
    fn norms_and_inner() {
        let a = Tensor::new(vec![2], vec![3.0, 4.0]).unwrap();
        assert_eq!(a.norm(), 5.0);
        assert_eq!(format!("{a:?}"), "Tensor<f64>[2] [3.0, 4.0]");
        let z = Tensor::new(vec![2], vec![crate::c64::new(1.5, -0.5), crate::c64::new(0.0, 2.0)]).unwrap();
        assert_eq!(format!("{z:?}"), "Tensor<c64>[2] [1.5-0.5i, 0.0+2.0i]");
        assert_eq!(a.inner(&a), Some(25.0));
        assert_eq!(a.inner(&Tensor::scalar(1.0)), None);
        assert!(a.zip_with(&Tensor::scalar(1.0), |x, _| x).is_err());
    }
}
