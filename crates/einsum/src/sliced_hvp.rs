//! [`SlicedHvp`]: Hessian-vector products of a [`SlicedEinsum`], summed over its slices
//! ([`SlicedEinsum::hvp`]).
//!
//! The contraction is a sum of slice contractions, each of the operands' slices (placed
//! side by side where a sliced label is in the output), so `x ↦ ⟨c, f(x)⟩` is the sum over
//! slices `s` of `⟨c_s, f_s(x_s)⟩` and its Hessian-vector product is the sum of the
//! slices' products. Per slice: the slice program's HVP ([`EinsumHvp`], forward over
//! reverse) on the operands' slices, the cotangent's slice and the directions' slices (a
//! direction is sliced as its operand is), its products added into one accumulator per
//! `wrt` operand of the operand's full shape, at the slice's place (an operand without a
//! sliced label receives every slice's product in full).
//!
//! Invariants:
//! - slices are independent: [`SlicedHvp::eval_slices`] of disjoint ranges covering
//!   `0..n_slices` add up to [`SlicedHvp::eval`], so a range may run in any process;
//! - with nothing sliced, evaluation is the plain [`EinsumHvp`]'s (no copy, no
//!   accumulator);
//! - tensors allocated per slice are those of the slice program's HVP, checked by its own
//!   memory check, plus the operand and direction copies and the accumulators, all counted
//!   by [`crate::SlicePlan::hvp_peak_bytes`], which [`SlicedEinsum::hvp`] checks against
//!   the memory limit (plan with [`crate::Slicing::MemoryHvp`] to slice for it).
//!
//! Complexity: per slice, the slice program's HVP plus copies of the sliced operands,
//! directions and cotangent (each reused while its sliced labels' values do not change)
//! and one pass over the products to add them.

use std::ops::Range;
use std::sync::Arc;

use crate::elem::Elem;
use crate::error::{EinsumError, EinsumResult};
use crate::memory::MemoryLimit;
use crate::network::EinsumHvp;
use crate::sliced::{Layout, SliceOperands, SlicedEinsum, gather, scatter_add, zeros};
use crate::tensor::Tensor;

impl<T: Elem> SlicedEinsum<T> {
    /// Hessian-vector products of `x ↦ ⟨c, f(x)⟩` with respect to the operands `wrt`,
    /// summed over slices ([`SlicedHvp`]). Its estimated peak
    /// ([`crate::SlicePlan::hvp_peak_bytes`]) must fit the memory limit: plan with
    /// [`crate::Slicing::MemoryHvp`] to slice for it.
    ///
    /// ```
    /// use einsum::{Einsum, EinsumOptions, PathChoice, SlicedEinsum, Slicing, Tensor};
    ///
    /// // f(A, B, C) = Σ A_ij B_jk C_ki sliced on j (summed) and i (in two operands).
    /// let shapes = [vec![3, 4], vec![4, 5], vec![5, 3]];
    /// let t = |s: &[usize], x: f64| Tensor::from_fn(s.to_vec(), |i| x + (i[0] + 2 * i[1]) as f64).unwrap();
    /// let x = [t(&shapes[0], 0.5), t(&shapes[1], -1.0), t(&shapes[2], 0.25)];
    /// let v = [t(&shapes[0], 1.0), t(&shapes[1], 2.0), t(&shapes[2], -0.5)];
    /// let (xs, vs): (Vec<_>, Vec<_>) = (x.iter().collect(), v.iter().collect());
    /// let one = Tensor::scalar(1.0);
    /// let plain = Einsum::<f64>::new("ij,jk,ki->", &shapes, PathChoice::Greedy).unwrap();
    /// let want = plain.hvp(&[0, 1, 2]).unwrap().eval(&xs, &one, &vs).unwrap();
    /// let s = SlicedEinsum::<f64>::new("ij,jk,ki->", &shapes, PathChoice::Greedy,
    ///     &EinsumOptions::default(), &Slicing::Labels(vec!['j', 'i'])).unwrap();
    /// let h = s.hvp(&[0, 1, 2]).unwrap();
    /// let got = h.eval(&xs, &one, &vs).unwrap();
    /// for (g, w) in got.iter().zip(&want) {
    ///     assert!(g.max_abs_diff(w).unwrap() < 1e-9);
    /// }
    /// // Any split of the slice range adds up to the whole.
    /// let a = h.eval_slices(&xs, &one, &vs, 0..5).unwrap();
    /// let b = h.eval_slices(&xs, &one, &vs, 5..12).unwrap();
    /// assert!(a[1].zip_with(&b[1], |p, q| p + q).unwrap().max_abs_diff(&want[1]).unwrap() < 1e-9);
    /// ```
    pub fn hvp(&self, wrt: &[usize]) -> EinsumResult<SlicedHvp<T>> {
        let l = &*self.layout;
        if l.is_sliced() && !l.limit.allows(Some(l.plan.hvp_peak_bytes())) {
            return Err(EinsumError::Memory {
                what: format!(
                    "the Hessian-vector product of one slice of `{}` (sliced on `{}`; plan it with Slicing::MemoryHvp)",
                    l.expression,
                    l.plan.labels().iter().collect::<String>()
                ),
                bytes: Some(l.plan.hvp_peak_bytes()),
                limit: match l.limit {
                    MemoryLimit::Bytes(b) => Some(b),
                    MemoryLimit::Unlimited => None,
                },
            });
        }
        let hvp = self.einsum.hvp(wrt)?;
        Ok(SlicedHvp { layout: self.layout.clone(), hvp, wrt: wrt.to_vec() })
    }
}

/// Hessian-vector products of a [`SlicedEinsum`] ([`SlicedEinsum::hvp`]): per slice the
/// slice program's HVP, accumulated into buffers of the operands' full shapes.
pub struct SlicedHvp<T: Elem> {
    layout: Arc<Layout>,
    hvp: EinsumHvp<T>,
    wrt: Vec<usize>,
}

impl<T: Elem> SlicedHvp<T> {
    /// The operands the products are taken with respect to, in the order of the
    /// directions and of the results.
    pub fn wrt(&self) -> &[usize] {
        &self.wrt
    }

    /// `H_c v` summed over all slices, for `H_c` the Hessian of `x ↦ ⟨c, f(x)⟩` in the
    /// `wrt` operands and `v` one direction per `wrt` operand (of its shape); one tensor per
    /// `wrt` operand, as [`EinsumHvp::eval`] of the unsliced contraction gives it.
    pub fn eval(
        &self,
        operands: &[&Tensor<T>],
        cotangent: &Tensor<T>,
        directions: &[&Tensor<T>],
    ) -> EinsumResult<Vec<Tensor<T>>> {
        self.summed(operands, cotangent, directions, 0..self.layout.plan.n_slices(), &mut |_| ())
    }

    /// [`SlicedHvp::eval`], calling `done(k)` after each slice with the number of slices
    /// done so far.
    pub fn eval_with_progress(
        &self,
        operands: &[&Tensor<T>],
        cotangent: &Tensor<T>,
        directions: &[&Tensor<T>],
        mut done: impl FnMut(u64),
    ) -> EinsumResult<Vec<Tensor<T>>> {
        self.summed(operands, cotangent, directions, 0..self.layout.plan.n_slices(), &mut done)
    }

    /// The products' sum over the slices in `range` (of `0..n_slices`); disjoint ranges
    /// add up to [`SlicedHvp::eval`].
    pub fn eval_slices(
        &self,
        operands: &[&Tensor<T>],
        cotangent: &Tensor<T>,
        directions: &[&Tensor<T>],
        range: Range<u64>,
    ) -> EinsumResult<Vec<Tensor<T>>> {
        self.summed(operands, cotangent, directions, range, &mut |_| ())
    }

    /// Checks every argument before any slice is cut (a copy of a tensor of the wrong
    /// shape would read out of its bounds).
    fn check(
        &self,
        operands: &[&Tensor<T>],
        cotangent: &Tensor<T>,
        directions: &[&Tensor<T>],
        range: &Range<u64>,
    ) -> EinsumResult<()> {
        let l = &*self.layout;
        l.check(operands)?;
        l.check_range(range)?;
        if cotangent.shape() != l.output_shape.as_slice() {
            return Err(EinsumError::Shape(format!(
                "cotangent 0 of `{}` has shape {:?}, expected {:?}",
                l.expression,
                cotangent.shape(),
                l.output_shape
            )));
        }
        if directions.len() != self.wrt.len() {
            return Err(EinsumError::Shape(format!(
                "direction of `{}`: {} tensors given, {} expected (one per operand in wrt)",
                l.expression,
                directions.len(),
                self.wrt.len()
            )));
        }
        for (p, (d, &i)) in directions.iter().zip(&self.wrt).enumerate() {
            if d.shape() != l.shapes[i].as_slice() {
                return Err(EinsumError::Shape(format!(
                    "direction {p} of `{}` has shape {:?}, expected {:?} (operand {i}'s)",
                    l.expression,
                    d.shape(),
                    l.shapes[i]
                )));
            }
        }
        Ok(())
    }

    fn summed(
        &self,
        operands: &[&Tensor<T>],
        cotangent: &Tensor<T>,
        directions: &[&Tensor<T>],
        range: Range<u64>,
        done: &mut dyn FnMut(u64),
    ) -> EinsumResult<Vec<Tensor<T>>> {
        self.check(operands, cotangent, directions, &range)?;
        let l = &*self.layout;
        if !l.is_sliced() && range == (0..1) {
            let h = self.hvp.eval(operands, cotangent, directions)?;
            done(1);
            return Ok(h);
        }
        // One evaluation running for the buffer pool (each slice's counts as begun).
        let _evaluation = crate::buffer::begin_evaluation();
        let mut accs: Vec<Vec<T>> = self.wrt.iter().map(|&i| zeros::<T>(&l.shapes[i])).collect::<EinsumResult<_>>()?;
        let mut copies = SliceOperands::new(operands.len());
        let mut direction_copies = SliceDirections::new(&self.wrt);
        let out_sliced = l.output_axes.iter().any(Option::is_some);
        for (n, k) in range.enumerate() {
            let values = l.plan.slice_values(k);
            let refs = copies.refs(l, operands, &values);
            let drefs = direction_copies.refs(l, directions, &values);
            // The caller's cotangent when no output label is sliced (not a copy).
            let part;
            let c = if out_sliced {
                part = gather(cotangent, &l.output_axes, &values);
                &part
            } else {
                cotangent
            };
            let products = self.hvp.eval(&refs, c, &drefs)?;
            for ((acc, &i), h) in accs.iter_mut().zip(&self.wrt).zip(&products) {
                scatter_add(acc, &l.shapes[i], &l.operand_axes[i], &values, h.data());
            }
            done(n as u64 + 1);
        }
        accs.into_iter().zip(&self.wrt).map(|(a, &i)| Tensor::new(l.shapes[i].clone(), a)).collect()
    }
}

/// The directions of one slice: copies of those whose operand holds a sliced label, kept
/// while their labels' values stay the same (as the operands' copies are).
struct SliceDirections<'w, T: Elem> {
    wrt: &'w [usize],
    copies: Vec<Option<(Vec<usize>, Tensor<T>)>>,
}

impl<'w, T: Elem> SliceDirections<'w, T> {
    fn new(wrt: &'w [usize]) -> Self {
        SliceDirections { wrt, copies: wrt.iter().map(|_| None).collect() }
    }

    /// The directions of the slice with `values`, as references (one per `wrt` operand).
    fn refs<'a>(&'a mut self, l: &Layout, directions: &[&'a Tensor<T>], values: &[usize]) -> Vec<&'a Tensor<T>> {
        for (p, &i) in self.wrt.iter().enumerate() {
            let axes = &l.operand_axes[i];
            if axes.iter().all(Option::is_none) {
                continue;
            }
            let key: Vec<usize> = axes.iter().flatten().map(|&j| values[j]).collect();
            if self.copies[p].as_ref().is_none_or(|(k, _)| *k != key) {
                self.copies[p] = None; // free the old copy before making the new one
                self.copies[p] = Some((key, gather(directions[p], axes, values)));
            }
        }
        directions.iter().zip(&self.copies).map(|(&d, c)| c.as_ref().map_or(d, |(_, t)| t)).collect()
    }
}
