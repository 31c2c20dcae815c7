//! The fast paths of an expression that is one element-wise product, run outside its
//! compiled program by the einsum crate's kernels that scan each result as they write it
//! (`einsum::Hadamard` and `einsum::Hadamard3` for float64 products of two and three
//! operands of one layout, `einsum::ElementwiseProduct` for an unsliced product of two
//! operands that sums nothing where it beats the compiled program: one operand as large
//! as the product, `ElementwiseProduct::beats_the_program`), so that
//! `strip_exponent=None`'s range test reads no result a second time. Each path says
//! `None` for an expression or call it does not take, and the caller runs the compiled
//! program.

use einsum::Tensor;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::{Derivative, Dtype, Inner, run_on, to_tuple};
use crate::convert;

impl Inner {
    /// The value of an element-wise product of two or three float64 operands of one
    /// layout and whether it left float64's range, from one pass that scans the result as
    /// it writes it ([`einsum::Hadamard`], [`einsum::Hadamard3`]); `None` for any other
    /// expression or element type.
    pub(super) fn hadamard_value<'py, T: Dtype>(
        &self,
        py: Python<'py>,
        operands: &[Tensor<T>],
        limit: Option<f64>,
    ) -> PyResult<Option<(Bound<'py, PyAny>, bool)>> {
        let work = self.slice_plan.multiply_adds();
        let (value, scan) = match (&self.hadamard, &self.hadamard3, T::real(operands)) {
            (Some(h), _, Some([a, b])) => {
                self.check_memory::<f64>(limit)?;
                run_on(py, work, |t| h.uses_threads(t), || h.value_with_range(a, b))?
            }
            (_, Some(h), Some([a, b, d])) => {
                self.check_memory::<f64>(limit)?;
                run_on(py, work, |t| h.uses_threads(t), || h.value_with_range([a, b, d]))?
            }
            _ => return Ok(None),
        };
        Ok(Some((convert::to_numpy(py, value)?.into_any(), scan.left_range())))
    }

    /// The value of a product that sums nothing, of either element type, and whether it
    /// left float64's range (by moduli for a complex one), found by the element-wise
    /// kernel as it wrote it; `None` for any other expression.
    fn product_value<'py, T: Dtype>(
        &self,
        py: Python<'py>,
        operands: &[Tensor<T>],
        limit: Option<f64>,
    ) -> PyResult<Option<(Bound<'py, PyAny>, bool)>> {
        let (Some(p), [a, b]) = (&self.product, operands) else { return Ok(None) };
        self.check_memory::<T>(limit)?;
        let work = self.slice_plan.multiply_adds();
        let (value, scan) = run_on(py, work, |t| p.uses_threads(t), || p.value_with_range(a, b))?;
        Ok(Some((convert::to_numpy(py, value)?.into_any(), scan.left_range())))
    }

    /// [`Inner::eval`]'s result for the whole contraction, and whether it left float64's
    /// range: found by the element-wise kernels while they wrote the result, or read by the
    /// call's threads right after ([`Inner::eval_sum`]; by moduli for a complex result).
    pub(super) fn eval_checked<'py, T: Dtype>(
        &self,
        py: Python<'py>,
        operands: &[Tensor<T>],
        limit: Option<f64>,
    ) -> PyResult<(Bound<'py, PyAny>, Option<bool>)> {
        if let Some((value, left)) = self.hadamard_value(py, operands, limit)? {
            return Ok((value, Some(left)));
        }
        if let Some((value, left)) = self.product_value(py, operands, limit)? {
            return Ok((value, Some(left)));
        }
        self.check_memory::<T>(limit)?;
        self.eval_sum(py, operands, self.range(0, None), true)
    }

    /// `(value, grads)` of an element-wise product of two or three float64 operands of
    /// one layout and whether any of them left float64's range, from one pass that reads
    /// the operands and the cotangent once and scans the results as it writes them
    /// ([`einsum::Hadamard::value_and_grad`], [`einsum::Hadamard3::value_and_grad`]); `None`
    /// for any other expression or element type, and for a `wrt` entry or a cotangent shape
    /// that the compiled program's call is to refuse with its own message.
    pub(super) fn hadamard_value_and_grad<'py, T: Dtype>(
        &self,
        py: Python<'py>,
        operands: &[Tensor<T>],
        d: &Derivative<'_, 'py>,
    ) -> PyResult<Option<(Bound<'py, PyTuple>, bool)>> {
        let (hadamard, hadamard3, real) = (&self.hadamard, &self.hadamard3, T::real(operands));
        if !matches!((hadamard, hadamard3, real), (Some(_), _, Some([_, _])) | (_, Some(_), Some([_, _, _]))) {
            return Ok(None);
        }
        let Some(c) = self.kernel_cotangent::<f64>(d, operands.len())? else { return Ok(None) };
        let work = 3.0 * self.slice_plan.multiply_adds();
        let wrt = &d.wrt;
        let out = match (hadamard, hadamard3, real) {
            (Some(h), _, Some([a, b])) => run_on(py, work, |t| h.uses_threads(t), || h.value_and_grad(a, b, &c, wrt))?,
            (_, Some(h), Some([a, b, x])) => {
                run_on(py, work, |t| h.uses_threads(t), || h.value_and_grad([a, b, x], &c, wrt))?
            }
            _ => unreachable!("matched above"),
        };
        let value = convert::to_numpy(py, out.value)?.into_any();
        Ok(Some((PyTuple::new(py, [value, to_tuple(py, out.grads)?.into_any()])?, out.left_range)))
    }

    /// `(value, grads)` of a product that sums nothing, of either element type, and whether
    /// any of them left float64's range, each result scanned as it is written
    /// ([`einsum::ElementwiseProduct::value_and_grad`]); `None` for any other expression,
    /// and for a `wrt` entry or a cotangent shape that the compiled program's call is to
    /// refuse with its own message.
    pub(super) fn product_value_and_grad<'py, T: Dtype>(
        &self,
        py: Python<'py>,
        operands: &[Tensor<T>],
        d: &Derivative<'_, 'py>,
    ) -> PyResult<Option<(Bound<'py, PyTuple>, bool)>> {
        let (Some(p), [a, b]) = (&self.product, operands) else { return Ok(None) };
        let Some(c) = self.kernel_cotangent::<T>(d, 2)? else { return Ok(None) };
        let work = 3.0 * self.slice_plan.multiply_adds();
        let wrt = &d.wrt;
        let out = run_on(py, work, |t| p.uses_threads(t), || p.value_and_grad(a, b, &c, wrt))?;
        let value = convert::to_numpy(py, out.value)?.into_any();
        Ok(Some((PyTuple::new(py, [value, to_tuple(py, out.grads)?.into_any()])?, out.left_range)))
    }

    /// For an element-wise kernel's call on `n` operands, after the memory check: the
    /// cotangent (a scalar stays a scalar: the kernels read it as that value everywhere),
    /// or `None` for a `wrt` entry past the operands or a cotangent of another shape than
    /// the output's, which the compiled program's call is to refuse with its own message.
    fn kernel_cotangent<T: Dtype>(&self, d: &Derivative<'_, '_>, n: usize) -> PyResult<Option<Tensor<T>>> {
        if d.wrt.iter().any(|&w| w >= n) {
            return Ok(None);
        }
        self.check_memory::<T>(d.limit)?;
        let c = self.given_cotangent::<T>(d.cotangent)?;
        Ok((c.shape().is_empty() || c.shape() == self.output_shape).then_some(c))
    }
}
