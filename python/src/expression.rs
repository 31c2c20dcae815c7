//! [`Expression`]: a contraction compiled once for fixed shapes, callable many times, with
//! gradients and Hessian-vector products; and [`contract`], which looks expressions up in
//! a bounded process-wide cache so that repeated calls compile once.
//!
//! An expression holds its [`Plan`] and, per element type, the einsum crate's compiled
//! [`Einsum`] (built on the first call with that type), the forward programs re-associated
//! for a call's thread count where that pays (`Plan::balanced_for`, built on first use per
//! count) and derivative programs by `wrt` (built on first use). Work runs with the GIL released unless it is too small for that
//! to pay (`DETACH_MIN_WORK`); planning (parsing, the path search, the slicing) always runs
//! without it, so that a long search leaves other Python threads (and Ctrl-C's handler,
//! once it returns) free. Work of `INTERRUPTIBLE_MIN_WORK` or more (contractions, sliced
//! or not, gradients, HVPs, slice ranges) runs on a worker thread (the call's pool's, or
//! the Python thread's own one, kept between calls: `threads::own_worker`) while the calling
//! thread runs Python's signal handlers (`crate::interrupt`): Ctrl-C raises
//! `KeyboardInterrupt` within a fraction of a second, the evaluation being stopped by
//! `einsum::with_stop`'s flag. Before any allocation, the plan's largest intermediate is
//! checked against the memory limit (`MemoryError`), and the einsum crate checks every
//! tensor of the contraction, and those alive together, against the memory budget
//! (`crate::budget_limit`, the crate's one policy; `MemoryError` with the crate's
//! message).
//!
//! One parse per expression: [`Inner::new`] makes the einsum crate's [`einsum::Plan`]
//! (the path searched there, by a name that [`PathChoice`]'s `FromStr` reads, or given),
//! and the report, the slice finder and the compiled programs all take that plan.
//!
//! Slicing: an expression whose largest intermediate exceeds `memory_limit` (elements) is
//! sliced ([`einsum::SlicedEinsum`], `Slicing::LargestIntermediate`) so that no
//! intermediate of a slice exceeds it; only an output larger than the limit, which is held
//! whole, is still a `MemoryError`, and so is a limit that asks for slicing an expression
//! with an ellipsis (the crate slices named labels only). `sliced_inds` slices on given
//! labels (cotengra's). The
//! compiled form is always a `SlicedEinsum` (one slice when nothing is sliced); slices can
//! be evaluated by index range (`_eval_slices`, `_grad_slices`, and `_value_and_grad_slices`
//! for both in one pass, `_hvp_slices` for Hessian-vector products) for distributed use,
//! the value as a sum of the output's shape or by output blocks (`blocks=True`: only the
//! blocks of the sliced output labels that the range touches). `_value_and_grad` runs the
//! forward steps once for value and gradients; `_hvp` of a sliced expression sums the
//! slices' Hessian-vector products ([`SlicedHvp`]). `_scaled` runs the einsum crate's
//! scaled contraction (value, and gradients on request) and gives each result as
//! `(mantissa, exponent)` in base 10, cotengra's form.
//!
//! An unsliced expression that is one element-wise product runs outside its compiled
//! program (`checked.rs`): float64 products of two or three operands of one layout by
//! `einsum::Hadamard` and `einsum::Hadamard3` on every call, any other product of two
//! operands that sums nothing, one of them as large as the product (not an outer product:
//! `ElementwiseProduct::beats_the_program`), by `einsum::ElementwiseProduct` on the checked calls
//! (`_call_checked`, `_value_and_grad_checked`, `_contract_checked`), each kernel finding
//! every result's range as it writes it, so that `strip_exponent=None` reads nothing twice.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, OnceLock};

use einsum::{
    EinsumError, EinsumResult, Elem, ElementwiseProduct, Hadamard, Hadamard3, MemoryLimit, OutputBlocks, PathChoice,
    RangeScan, ScaledTensor, SlicePlan, SlicedEinsum, SlicedGradient, SlicedHvp, Slicing, Subscripts, Tensor, c64,
};
use numpy::Element;
use pyo3::exceptions::{PyMemoryError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::convert::{self, FromReal, Operands};
use crate::einsum_error;
use crate::interrupt::interruptibly_in;
use crate::plan::Report;

mod checked;

/// Below this many multiply-adds a call keeps the GIL: releasing and taking it back costs
/// more than such a contraction.
const DETACH_MIN_WORK: f64 = 32_768.0;

/// From this many multiply-adds on (tens of milliseconds), a call runs where Ctrl-C can
/// end it ([`interruptibly_in`]): on a thread kept between calls, whose hand-off costs
/// microseconds.
const INTERRUPTIBLE_MIN_WORK: f64 = 1e8;

/// Below this many multiply-adds a call stays on the calling thread whatever threads it
/// asks for: no kernel of the einsum crate splits below `2^20` multiply-adds or elements,
/// and entering a pool costs microseconds. It is not higher because a call's work counts
/// an element-wise product's elements once: `2^24` kept a `2048 × 2048` product (`2^22`)
/// off the second core, which makes it 1.8 times faster (`docs/PERFORMANCE.md`, "Python
/// against the peers, final code of the twelfth session").
const POOL_MIN_WORK: f64 = 1_048_576.0;

/// Expressions kept by [`contract`]'s cache; past this the cache starts over.
const CACHE_CAPACITY: usize = 512;

/// What one element type needs compiled.
struct Compiled<T: Elem> {
    einsum: OnceLock<Arc<SlicedEinsum<T>>>,
    /// By thread count: the forward program along the path re-associated for those threads
    /// (`Plan::balanced_for`), or `None` where that does not pay and `einsum` serves.
    balanced: Mutex<HashMap<usize, Option<Arc<SlicedEinsum<T>>>>>,
    gradients: Mutex<HashMap<Vec<usize>, Arc<SlicedGradient<T>>>>,
    /// The gradients of the output's sum, for a scalar cotangent of a non-scalar output.
    sum_gradients: Mutex<HashMap<Vec<usize>, Arc<SlicedGradient<T>>>>,
    hvps: Mutex<HashMap<Vec<usize>, Arc<SlicedHvp<T>>>>,
}

impl<T: Elem> Compiled<T> {
    fn new() -> Self {
        Compiled {
            einsum: OnceLock::new(),
            balanced: Mutex::default(),
            gradients: Mutex::default(),
            sum_gradients: Mutex::default(),
            hvps: Mutex::default(),
        }
    }
}

/// A plan and its compiled programs (shared by [`Expression`] and the cache).
struct Inner {
    /// The einsum crate's plan: the one parse of the expression.
    plan: einsum::Plan,
    /// The plan as Python reads it (labels as characters, step sizes).
    report: Report,
    /// The operand shapes.
    shapes: Vec<Vec<usize>>,
    /// The output's shape.
    output_shape: Vec<usize>,
    /// The slicing plan (for 8-byte elements; labels and counts do not depend on the
    /// element type).
    slice_plan: SlicePlan,
    real: Compiled<f64>,
    complex: Compiled<c64>,
    /// For an unsliced element-wise product of one layout (`ij,ij->ij`), the kernel that
    /// writes float64 value and gradients in one pass and scans their range on the way.
    hadamard: Option<Hadamard>,
    /// The same for a product of three operands of one layout (`ij,ij,ij->ij`).
    hadamard3: Option<Hadamard3>,
    /// For an unsliced product of two operands that sums nothing (broadcasts, permuted
    /// layouts, complex operands), the kernels that scan each result as they write it;
    /// `None` where they would cost more than the compiled program (an outer product,
    /// `ElementwiseProduct::beats_the_program`).
    product: Option<ElementwiseProduct>,
}

/// The element types, and where each keeps its compiled programs.
trait Dtype: FromReal + Element + crate::scaled::Scanned {
    fn compiled(inner: &Inner) -> &Compiled<Self>;
    /// The tensors as float64 ones, if that is their type (`Hadamard` takes no other).
    fn real(t: &[Tensor<Self>]) -> Option<&[Tensor<f64>]>;
}

/// Whether any of the results `t` left float64's range (`crate::scaled`'s test, by moduli
/// for complex results), read on the current pool's threads.
fn left_range<T: Dtype>(t: &[&Tensor<T>]) -> bool {
    crate::scaled::any_outside_in_pool(&t.iter().map(|t| t.data()).collect::<Vec<_>>())
}

impl Dtype for f64 {
    fn compiled(inner: &Inner) -> &Compiled<f64> {
        &inner.real
    }
    fn real(t: &[Tensor<f64>]) -> Option<&[Tensor<f64>]> {
        Some(t)
    }
}

impl Dtype for c64 {
    fn compiled(inner: &Inner) -> &Compiled<c64> {
        &inner.complex
    }
    fn real(_: &[Tensor<c64>]) -> Option<&[Tensor<f64>]> {
        None
    }
}

/// Locks a mutex, ignoring poisoning (the maps stay consistent: entries are inserted whole).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `$body` with `$t` bound to the operands' tensors, whichever element type they have.
macro_rules! by_dtype {
    ($operands:expr, $t:ident => $body:expr) => {
        match $operands {
            Operands::Real($t) => $body,
            Operands::Complex($t) => $body,
        }
    };
}

/// Runs `f` without the GIL when the work is large enough for that to pay, and from
/// [`INTERRUPTIBLE_MIN_WORK`] on so that Ctrl-C ends it ([`interruptibly_in`]); on the
/// threads this call asks for (`threads.rs`) unless the work is too small to leave the
/// calling thread (inside the pool, the einsum crate weighs each program's cost before
/// using more than one of its threads).
fn run<R: Send>(py: Python<'_>, work: f64, f: impl FnOnce() -> EinsumResult<R> + Send) -> PyResult<R> {
    run_on(py, work, |_| true, f)
}

/// [`run`] for a program that says whether a pool of a given number of threads pays
/// (`uses_threads` of the einsum crate's programs): where it does not, the call stays on
/// the calling thread, since handing it to a pool's sleeping worker and back costs more
/// than such a call (`rrg_24_d3_bond4_seed0`, 0.24 ms, took 0.34 on two threads).
fn run_on<R: Send>(
    py: Python<'_>,
    work: f64,
    uses_threads: impl FnOnce(usize) -> bool,
    f: impl FnOnce() -> EinsumResult<R> + Send,
) -> PyResult<R> {
    if work < DETACH_MIN_WORK {
        return f().map_err(einsum_error);
    }
    let threads = crate::threads::get_num_threads();
    let pool =
        if work >= POOL_MIN_WORK && threads > 1 && uses_threads(threads) { crate::threads::call_pool()? } else { None };
    if work < INTERRUPTIBLE_MIN_WORK {
        py.detach(|| crate::threads::on(pool.as_deref(), f)).map_err(einsum_error)
    } else {
        // On a pool thread (the call's pool, or on one thread this Python thread's own
        // worker), where the flag is installed (the flag is per thread; `stop.rs` shares
        // it with the pool's other workers).
        let pool = match pool {
            Some(p) => p,
            None => crate::threads::own_worker()?,
        };
        interruptibly_in(py, &pool, move |flag| einsum::with_stop(flag, f).map_err(einsum_error))
    }
}

impl Inner {
    /// Plans the contraction along `path` (a finder or the pairs given); with `limit`
    /// (elements) below its largest intermediate, or with `sliced_inds`, plans its slicing
    /// too. Called without the GIL: a search asks for it back to run signal handlers
    /// ([`plan_interruptibly`]).
    fn new(
        expression: &str,
        shapes: Vec<Vec<usize>>,
        path: PathChoice,
        limit: Option<f64>,
        sliced_inds: Option<Vec<char>>,
    ) -> PyResult<Inner> {
        let plan = plan_interruptibly(expression, &shapes, path)?;
        let report = Report::new(expression, &plan);
        let output_shape = plan.output_shape();
        let output: f64 = output_shape.iter().map(|&d| d as f64).product();
        let slicing = match (sliced_inds, limit) {
            (Some(labels), _) => Slicing::Labels(labels),
            // An output over the limit cannot be sliced away: `check_memory` says so on use.
            (None, Some(l)) if report.largest_intermediate() > l && output <= l => {
                Slicing::LargestIntermediate(l as u64)
            }
            _ => Slicing::None,
        };
        let unlimited = plan.clone().with_memory_limit(MemoryLimit::Unlimited);
        let slice_plan = SlicePlan::for_plan(&unlimited, 8, &slicing).map_err(|e| match (&slicing, &e) {
            // `memory_limit` asked for slicing that the crate cannot do (an ellipsis):
            // the limit cannot be met, which is a memory error, not bad input.
            (Slicing::LargestIntermediate(l), EinsumError::Slice(_)) => PyMemoryError::new_err(format!(
                "`{expression}`: the largest intermediate has {:.0} elements, more than memory_limit={l}, and it cannot be sliced: {e}",
                report.largest_intermediate()
            )),
            _ => einsum_error(e),
        })?;
        let unsliced = slice_plan.labels().is_empty();
        let hadamard = if unsliced { Hadamard::for_plan(&plan) } else { None };
        let hadamard3 = if unsliced { Hadamard3::for_plan(&plan) } else { None };
        let product = ElementwiseProduct::for_plan(&plan).filter(|p| unsliced && p.beats_the_program());
        Ok(Inner {
            plan,
            report,
            shapes,
            output_shape,
            slice_plan,
            real: Compiled::new(),
            complex: Compiled::new(),
            hadamard,
            hadamard3,
            product,
        })
    }

    fn is_sliced(&self) -> bool {
        !self.slice_plan.labels().is_empty()
    }

    /// `MemoryError` if the largest intermediate exceeds `limit` elements or, without a
    /// limit, the memory ceiling.
    fn check_memory<T: Elem>(&self, limit: Option<f64>) -> PyResult<()> {
        let largest =
            if self.is_sliced() { self.slice_plan.largest_intermediate() } else { self.report.largest_intermediate() };
        let bytes = largest * std::mem::size_of::<T>() as f64;
        let ceiling = crate::memory_budget();
        match limit {
            Some(l) if largest > l => Err(PyMemoryError::new_err(format!(
                "`{}`: the largest intermediate has {largest:.0} elements, more than memory_limit={l:.0}",
                self.report.expression
            ))),
            None if bytes > ceiling => Err(PyMemoryError::new_err(format!(
                "`{}`: the largest intermediate needs {:.3e} bytes, more than the memory budget ({:.3e} bytes)",
                self.report.expression, bytes, ceiling
            ))),
            _ => Ok(()),
        }
    }

    fn einsum<T: Dtype>(&self) -> PyResult<&Arc<SlicedEinsum<T>>> {
        let cell = &T::compiled(self).einsum;
        if let Some(e) = cell.get() {
            return Ok(e);
        }
        // The labels found for 8-byte elements serve every element type.
        let slicing = if self.is_sliced() { Slicing::Labels(self.slice_plan.labels().to_vec()) } else { Slicing::None };
        // The memory budget of the module docs, checked by the crate.
        let plan = self.plan.clone().with_memory_limit(crate::budget_limit());
        let e = SlicedEinsum::from_plan(plan, &slicing).map_err(einsum_error)?;
        Ok(cell.get_or_init(|| Arc::new(e)))
    }

    /// The forward program for a call on `threads` threads: for an unsliced expression on
    /// more than one, the path re-associated so that the threads share a chain
    /// (`Plan::balanced_for`: the same multiply-adds within 1/32, no larger intermediate,
    /// the same contraction to rounding), compiled on first use per count, where that pays
    /// and the program along it would use the threads; the expression's own program
    /// otherwise. The gradients keep the path: the reverse
    /// pass of a balanced chain measured slower (`cgx einsum --grad` does the same).
    fn einsum_on<T: Dtype>(&self, threads: usize) -> PyResult<Arc<SlicedEinsum<T>>> {
        if threads < 2 || self.is_sliced() {
            return self.einsum::<T>().cloned();
        }
        let mut balanced = lock(&T::compiled(self).balanced);
        let e = match balanced.get(&threads) {
            Some(e) => e.clone(),
            None => {
                let e = match self.plan.balanced_for(threads) {
                    Some(plan) => {
                        let plan = plan.with_memory_limit(crate::budget_limit());
                        let e = SlicedEinsum::from_plan(plan, &Slicing::None).map_err(einsum_error)?;
                        // Only a program that uses the threads repays its other order: one
                        // that stays on the calling thread (too little work for a pool)
                        // would run the re-associated path alone, no faster than the
                        // expression's own and not equal to it bit for bit.
                        e.uses_threads(threads).then(|| Arc::new(e))
                    }
                    None => None,
                };
                balanced.insert(threads, e.clone());
                e
            }
        };
        drop(balanced);
        match e {
            Some(e) => Ok(e),
            None => self.einsum::<T>().cloned(),
        }
    }

    /// The slice range `start..stop`, checked against the slice count.
    fn range(&self, start: u64, stop: Option<u64>) -> std::ops::Range<u64> {
        start..stop.unwrap_or(self.slice_plan.n_slices())
    }

    /// The operands of a call, converted, with the shapes the expression was built for
    /// (the crate checks them too; this says it before anything is compiled for a new
    /// element type).
    fn operands(&self, items: &Bound<'_, PyTuple>) -> PyResult<Operands> {
        let (operands, shapes) = convert::operands(items)?;
        let want = &self.shapes;
        if shapes.len() != want.len() {
            return Err(PyValueError::new_err(format!(
                "shape error: `{}` takes {} operands but {} were given",
                self.report.expression,
                want.len(),
                shapes.len()
            )));
        }
        match shapes.iter().zip(want).position(|(s, w)| s != w) {
            Some(i) => Err(PyValueError::new_err(format!(
                "shape error: operand {i} of `{}` has shape {:?} but the expression was built for {:?}",
                self.report.expression, shapes[i], want[i]
            ))),
            None => Ok(operands),
        }
    }

    fn eval<'py, T: Dtype>(
        &self,
        py: Python<'py>,
        operands: &[Tensor<T>],
        limit: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.eval_slices(py, operands, limit, self.range(0, None), false)
    }

    /// The slices in `range`: their sum of the output's shape, or with `blocks` the pair
    /// `(first, blocks)` of [`OutputBlocks`].
    fn eval_slices<'py, T: Dtype>(
        &self,
        py: Python<'py>,
        operands: &[Tensor<T>],
        limit: Option<f64>,
        range: std::ops::Range<u64>,
        blocks: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        if range == (0..1) && !blocks {
            if let Some((value, _)) = self.hadamard_value(py, operands, limit)? {
                return Ok(value);
            }
        }
        self.check_memory::<T>(limit)?;
        if blocks {
            let (e, work, refs) = self.prepare_eval::<T>(operands)?;
            let out = run_on(py, work, |t| e.uses_threads(t), || e.eval_blocks(&refs, range))?;
            return blocks_to_py(py, out);
        }
        Ok(self.eval_sum(py, operands, range, false)?.0)
    }

    /// The compiled expression for the threads a call of this expression's work runs on,
    /// its multiply-adds and the operands as references.
    fn prepare_eval<'t, T: Dtype>(&self, operands: &'t [Tensor<T>]) -> PyResult<EvalCall<'t, T>> {
        let work = self.slice_plan.multiply_adds();
        // The threads `run` will use (one below `POOL_MIN_WORK`).
        let threads = if work >= POOL_MIN_WORK { crate::threads::get_num_threads() } else { 1 };
        Ok((self.einsum_on::<T>(threads)?, work, operands.iter().collect()))
    }

    /// The sum of the slices in `range` (memory already checked), and with `scan` whether it
    /// left float64's range (by moduli for complex results): read by the threads that ran the
    /// call, right after they wrote it and while it is in their caches, instead of by the
    /// calling thread after the hand-back, which reads every part from another core.
    fn eval_sum<'py, T: Dtype>(
        &self,
        py: Python<'py>,
        operands: &[Tensor<T>],
        range: std::ops::Range<u64>,
        scan: bool,
    ) -> PyResult<(Bound<'py, PyAny>, Option<bool>)> {
        let (e, work, refs) = self.prepare_eval::<T>(operands)?;
        let (out, left) = run_on(
            py,
            work,
            |t| e.uses_threads(t),
            || {
                let out = e.eval_slices(&refs, range)?;
                let left = scan.then(|| left_range(&[&out]));
                Ok((out, left))
            },
        )?;
        Ok((convert::to_numpy(py, out)?.into_any(), left))
    }

    /// The cotangent of the output's shape: the given one, a scalar given for a non-scalar
    /// output filled into that shape (the paths that take no scalar: scaled, checkpointed,
    /// HVP), or 1 for a scalar output.
    fn cotangent<T: Dtype>(&self, cotangent: Option<&Bound<'_, PyAny>>) -> PyResult<Tensor<T>> {
        let c = self.given_cotangent::<T>(cotangent)?;
        match c.data() {
            &[x] if self.stands_for_every_entry(&c) => {
                // One fill (`Tensor::from_fn` made each element by a call with its multi-index).
                Tensor::filled(self.output_shape.clone(), x).map_err(einsum_error)
            }
            _ => Ok(c),
        }
    }

    /// Whether cotangent `c` is a scalar given for a non-scalar output: the value of every
    /// entry, the gradient of `c` times the output's sum.
    fn stands_for_every_entry<T: Elem>(&self, c: &Tensor<T>) -> bool {
        c.shape().is_empty() && !self.output_shape.is_empty()
    }

    /// The cotangent as given (a scalar stays a scalar), or 1 for a scalar output.
    fn given_cotangent<T: Dtype>(&self, cotangent: Option<&Bound<'_, PyAny>>) -> PyResult<Tensor<T>> {
        match cotangent {
            Some(c) => Ok(convert::tensors_like::<T>(std::slice::from_ref(c), "cotangent")?.remove(0)),
            None if self.output_shape.is_empty() => Ok(Tensor::scalar(T::from_f64(1.0))),
            None => Err(PyValueError::new_err(format!(
                "`{}` has a non-scalar output of shape {:?}: pass a cotangent of that shape, or a scalar",
                self.report.expression, self.output_shape
            ))),
        }
    }

    /// What a gradient call needs, after the memory check: the compiled expression, the
    /// cotangent and the gradient program for `d.wrt` (built on first use). A scalar
    /// cotangent of a non-scalar output takes the gradient of the sum
    /// (`SlicedEinsum::gradient_of_sum`), which reads no cotangent of the output's shape.
    fn gradient<T: Dtype>(&self, d: &Derivative<'_, '_>) -> PyResult<GradientCall<'_, T>> {
        self.check_memory::<T>(d.limit)?;
        let e = self.einsum::<T>()?;
        let c = self.given_cotangent::<T>(d.cotangent)?;
        let g = if self.stands_for_every_entry(&c) {
            cached(&T::compiled(self).sum_gradients, &d.wrt, |w| e.gradient_of_sum(w))?
        } else {
            cached(&T::compiled(self).gradients, &d.wrt, |w| e.gradient(w))?
        };
        Ok((e, c, g))
    }

    /// `(value, grads)` summed over the slices in `range`, and with `scan` whether any of
    /// them left float64's range (by moduli for complex results), read by the threads that ran
    /// the call right after they wrote the results, as [`Inner::eval_sum`] reads a value.
    fn value_and_grad_sum<'py, T: Dtype>(
        &self,
        py: Python<'py>,
        operands: &[Tensor<T>],
        d: &Derivative<'_, 'py>,
        range: std::ops::Range<u64>,
        scan: bool,
    ) -> PyResult<(Bound<'py, PyTuple>, Option<bool>)> {
        // An element-wise product is never sliced: its one slice is the whole contraction.
        if range == (0..1) {
            if let Some((pair, left)) = self.hadamard_value_and_grad(py, operands, d)? {
                return Ok((pair, scan.then_some(left)));
            }
            // Only for the range test: without it the compiled program writes the same.
            if scan && let Some((pair, left)) = self.product_value_and_grad(py, operands, d)? {
                return Ok((pair, Some(left)));
            }
        }
        let (_, c, g) = self.gradient::<T>(d)?;
        let refs: Vec<&Tensor<T>> = operands.iter().collect();
        let work = 3.0 * self.slice_plan.multiply_adds();
        let (v, grads, left) = run_on(
            py,
            work,
            |t| g.uses_threads(t),
            || {
                if !scan {
                    let (v, grads) = g.eval_slices_with_value(&refs, &c, range)?;
                    return Ok((v, grads, None));
                }
                // Each result's range read right after the step that wrote it (by moduli
                // for complex results, as the caller's test reads them); for a sum of
                // slices, all of them after the run.
                let (v, grads, ranges) = g.eval_slices_with_value_and_range(&refs, &c, range)?;
                let left = match ranges {
                    Some(r) => Some(r.iter().any(RangeScan::left_range)),
                    None => Some(left_range(&std::iter::once(&v).chain(&grads).collect::<Vec<_>>())),
                };
                Ok((v, grads, left))
            },
        )?;
        Ok((PyTuple::new(py, [convert::to_numpy(py, v)?.into_any(), to_tuple(py, grads)?.into_any()])?, left))
    }

    /// Hessian-vector products summed over the slices in `range` (all of them for
    /// `hvp`): each slice's product on the slices of the operands, the directions and the
    /// cotangent, added at the slice's place.
    fn hvp_slices<'py, T: Dtype>(
        &self,
        py: Python<'py>,
        operands: &[Tensor<T>],
        directions: &[Bound<'py, PyAny>],
        d: &Derivative<'_, 'py>,
        range: std::ops::Range<u64>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        self.check_memory::<T>(d.limit)?;
        let e = self.einsum::<T>()?;
        let c = self.cotangent::<T>(d.cotangent)?;
        let v = convert::tensors_like::<T>(directions, "direction")?;
        let h = cached(&T::compiled(self).hvps, &d.wrt, |w| e.hvp(w))?;
        let refs: Vec<&Tensor<T>> = operands.iter().collect();
        let vrefs: Vec<&Tensor<T>> = v.iter().collect();
        let work = 4.0 * self.slice_plan.multiply_adds();
        let out = run(py, work, || h.eval_slices(&refs, &c, &vrefs, range))?;
        to_tuple(py, out)
    }
}

impl Inner {
    /// `(value, grads)` with the reverse pass planned within `target` bytes: forward
    /// intermediates kept while they fit, recomputed otherwise (unsliced expressions only:
    /// a sliced one bounds its memory by its slices).
    fn value_and_grad_checkpointed<'py, T: Dtype>(
        &self,
        py: Python<'py>,
        operands: &[Tensor<T>],
        d: &Derivative<'_, 'py>,
        target: MemoryLimit,
    ) -> PyResult<Bound<'py, PyTuple>> {
        if self.is_sliced() {
            return Err(PyValueError::new_err(format!(
                "`{}` is sliced: checkpoint applies to an unsliced expression (its slices bound its memory)",
                self.report.expression
            )));
        }
        self.check_memory::<T>(d.limit)?;
        let e = self.einsum::<T>()?;
        let c = self.cotangent::<T>(d.cotangent)?;
        // Planned per call: the plan weighs sizes only, no tensor.
        let g = e.slice_einsum().gradient_within(&d.wrt, target).map_err(einsum_error)?;
        let refs: Vec<&Tensor<T>> = operands.iter().collect();
        let (v, grads) = run(py, g.multiply_adds(), || g.eval_with_value(&refs, &c))?;
        PyTuple::new(py, [convert::to_numpy(py, v)?.into_any(), to_tuple(py, grads)?.into_any()])
    }

    /// The gradients' sum over the slices in `range` (no value).
    fn grad_slices<'py, T: Dtype>(
        &self,
        py: Python<'py>,
        operands: &[Tensor<T>],
        d: &Derivative<'_, 'py>,
        range: std::ops::Range<u64>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let (_, c, g) = self.gradient::<T>(d)?;
        let refs: Vec<&Tensor<T>> = operands.iter().collect();
        let work = 2.0 * self.slice_plan.multiply_adds();
        let grads = run_on(py, work, |t| g.uses_threads(t), || g.eval_slices(&refs, &c, range))?;
        to_tuple(py, grads)
    }
}

/// A derivative call's arguments: the operands it differentiates in, the cotangent (1 for
/// a scalar output if `None`) and the memory limit.
struct Derivative<'a, 'py> {
    wrt: Vec<usize>,
    cotangent: Option<&'a Bound<'py, PyAny>>,
    limit: Option<f64>,
}

/// What [`Inner::prepare_eval`] gives: the compiled expression for the call's threads, its
/// multiply-adds, the operands.
type EvalCall<'t, T> = (Arc<SlicedEinsum<T>>, f64, Vec<&'t Tensor<T>>);

/// What [`Inner::gradient`] gives: the compiled expression, the cotangent, the gradient
/// program.
type GradientCall<'a, T> = (&'a Arc<SlicedEinsum<T>>, Tensor<T>, Arc<SlicedGradient<T>>);

/// Tensors as a tuple of new numpy arrays.
fn to_tuple<'py, T: Dtype>(py: Python<'py>, tensors: Vec<Tensor<T>>) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(py, tensors.into_iter().map(|t| convert::to_numpy(py, t)).collect::<PyResult<Vec<_>>>()?)
}

impl Inner {
    /// The value (the sum, or with `blocks` the pair `(first, blocks)`) and the gradients of
    /// the slices in `range`, in one pass; with `cotangent_first`, the cotangent is output
    /// blocks `cotangent_first..` stacked (and the value comes by blocks). The sum is
    /// [`Inner::value_and_grad_sum`]'s, without the range check (the caller adds the parts).
    fn value_and_grad_slices<'py, T: Dtype>(
        &self,
        py: Python<'py>,
        operands: &[Tensor<T>],
        d: &Derivative<'_, 'py>,
        range: std::ops::Range<u64>,
        blocks: bool,
        cotangent_first: Option<u64>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        if !blocks && cotangent_first.is_none() {
            return Ok(self.value_and_grad_sum(py, operands, d, range, false)?.0);
        }
        let (_, c, g) = self.gradient::<T>(d)?;
        let refs: Vec<&Tensor<T>> = operands.iter().collect();
        let work = 3.0 * self.slice_plan.multiply_adds();
        let uses = |t| g.uses_threads(t);
        let (v, grads) = match cotangent_first {
            Some(first) => {
                let c = OutputBlocks::new(first, c);
                run_on(py, work, uses, || g.eval_blocks_with_value_by_blocks(&refs, &c, range))?
            }
            None => run_on(py, work, uses, || g.eval_blocks_with_value(&refs, &c, range))?,
        };
        PyTuple::new(py, [blocks_to_py(py, v)?, to_tuple(py, grads)?.into_any()])
    }
}

/// `(first, blocks)` as a Python pair of an int and a numpy array.
fn blocks_to_py<'py, T: Dtype>(py: Python<'py>, b: OutputBlocks<T>) -> PyResult<Bound<'py, PyAny>> {
    let (first, blocks) = b.into_parts();
    Ok(PyTuple::new(py, [first.into_pyobject(py)?.into_any(), convert::to_numpy(py, blocks)?.into_any()])?.into_any())
}

impl Inner {
    /// The scaled contraction (the einsum crate's `ScaledTensor`): the value, and with `d`
    /// the gradients too, each as `(mantissa, exponent)` with the value
    /// `mantissa * 10**exponent`; with `fit`, a plain array instead for each one that fits
    /// in the element type.
    fn scaled<'py, T: Dtype>(
        &self,
        py: Python<'py>,
        operands: &[Tensor<T>],
        limit: Option<f64>,
        d: Option<&Derivative<'_, 'py>>,
        fit: bool,
        range: std::ops::Range<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.check_memory::<T>(limit)?;
        let e = self.einsum::<T>()?;
        let refs: Vec<&Tensor<T>> = operands.iter().collect();
        let work = self.slice_plan.multiply_adds();
        let to_py = |s: ScaledTensor<T>| -> PyResult<Bound<'py, PyAny>> {
            if let Some(t) = if fit { s.to_tensor() } else { None } {
                return Ok(convert::to_numpy(py, t)?.into_any());
            }
            let e10 = s.exponent10();
            let m = convert::to_numpy(py, s.into_parts().0)?.into_any();
            Ok(PyTuple::new(py, [m, e10.into_pyobject(py)?.into_any()])?.into_any())
        };
        let Some(d) = d else {
            return to_py(run(py, work, || e.eval_slices_scaled(&refs, range))?);
        };
        let c = self.cotangent::<T>(d.cotangent)?;
        let wrt = &d.wrt;
        let (v, grads) = run(py, 3.0 * work, || e.value_and_grad_slices_scaled(&refs, wrt, &c, range))?;
        let grads = PyTuple::new(py, grads.into_iter().map(to_py).collect::<PyResult<Vec<_>>>()?)?;
        Ok(PyTuple::new(py, [to_py(v)?, grads.into_any()])?.into_any())
    }
}

/// A derivative program from `map`, built and inserted on first use.
fn cached<P>(
    map: &Mutex<HashMap<Vec<usize>, Arc<P>>>,
    wrt: &[usize],
    build: impl FnOnce(&[usize]) -> EinsumResult<P>,
) -> PyResult<Arc<P>> {
    if let Some(p) = lock(map).get(wrt) {
        return Ok(p.clone());
    }
    let p = Arc::new(build(wrt).map_err(einsum_error)?);
    lock(map).insert(wrt.to_vec(), p.clone());
    Ok(p)
}

/// A contraction compiled once for fixed shapes (the `_core` half of
/// `cgx.ContractExpression`).
#[pyclass(frozen, subclass, module = "cgx._core")]
pub struct Expression {
    inner: Arc<Inner>,
    memory_limit: Option<f64>,
}

impl Expression {
    /// A derivative call's arguments: `wrt` (every operand if `None`), the cotangent and
    /// the expression's memory limit.
    fn derivative<'a, 'py>(
        &self,
        wrt: Option<Vec<usize>>,
        cotangent: Option<&'a Bound<'py, PyAny>>,
    ) -> Derivative<'a, 'py> {
        let wrt = wrt.unwrap_or_else(|| (0..self.inner.shapes.len()).collect());
        Derivative { wrt, cotangent, limit: self.memory_limit }
    }
}

#[pymethods]
impl Expression {
    /// `Expression(eq, shapes, path=None, memory_limit=None, sliced_inds=None)`: `path` is
    /// a list of pairs (opt_einsum's format), the name of one of the einsum crate's path
    /// finders (`PathChoice`'s `FromStr`) or `None` for the greedy path; a
    /// `memory_limit` (elements) below the largest intermediate slices the contraction, as
    /// do explicit `sliced_inds` (one-character labels).
    #[new]
    #[pyo3(signature = (eq, shapes, path=None, memory_limit=None, sliced_inds=None))]
    fn new(
        py: Python<'_>,
        eq: &str,
        shapes: Vec<Vec<usize>>,
        path: Option<PathArg>,
        memory_limit: Option<f64>,
        sliced_inds: Option<Vec<char>>,
    ) -> PyResult<Self> {
        let path = path_choice(path)?;
        // Planning (the path search, the slicing) runs without the GIL.
        let inner = py.detach(|| Inner::new(eq, shapes, path, memory_limit, sliced_inds))?;
        Ok(Expression { inner: Arc::new(inner), memory_limit })
    }

    /// The sum of the slices `start..stop` (all from `start` if `stop` is `None`), of the
    /// output's full shape: results of disjoint ranges covering every slice add up to the
    /// contraction.
    /// With `blocks`, the pair `(first, blocks)` instead: the output blocks the range touches
    /// (one value of each sliced output label, in plan order, the last fastest), stacked
    /// along a new first axis.
    #[pyo3(signature = (operands, start=0, stop=None, blocks=false))]
    fn _eval_slices<'py>(
        &self,
        py: Python<'py>,
        operands: &Bound<'py, PyTuple>,
        start: u64,
        stop: Option<u64>,
        blocks: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (inner, range) = (&self.inner, self.inner.range(start, stop));
        by_dtype!(inner.operands(operands)?, t => inner.eval_slices(py, &t, self.memory_limit, range, blocks))
    }

    /// `(value, grads)` of the slices `start..stop` in one pass: the value as
    /// `_eval_slices` gives it (with `blocks` too), the gradients as `_grad_slices`. With
    /// `cotangent_first`, `cotangent` is output blocks `cotangent_first..` stacked as the
    /// value's blocks are (at least those the range touches), or a scalar for every entry
    /// of every block, and the value comes by blocks.
    #[pyo3(signature = (operands, start=0, stop=None, wrt=None, cotangent=None, blocks=false, cotangent_first=None))]
    #[allow(clippy::too_many_arguments)]
    fn _value_and_grad_slices<'py>(
        &self,
        py: Python<'py>,
        operands: &Bound<'py, PyTuple>,
        start: u64,
        stop: Option<u64>,
        wrt: Option<Vec<usize>>,
        cotangent: Option<Bound<'py, PyAny>>,
        blocks: bool,
        cotangent_first: Option<u64>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let (inner, d, range) = (&self.inner, self.derivative(wrt, cotangent.as_ref()), self.inner.range(start, stop));
        by_dtype!(inner.operands(operands)?, t => inner.value_and_grad_slices(py, &t, &d, range, blocks, cotangent_first))
    }

    /// The gradients (vector-Jacobian products) summed over the slices `start..stop`.
    #[pyo3(signature = (operands, start=0, stop=None, wrt=None, cotangent=None))]
    fn _grad_slices<'py>(
        &self,
        py: Python<'py>,
        operands: &Bound<'py, PyTuple>,
        start: u64,
        stop: Option<u64>,
        wrt: Option<Vec<usize>>,
        cotangent: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let (inner, d, range) = (&self.inner, self.derivative(wrt, cotangent.as_ref()), self.inner.range(start, stop));
        by_dtype!(inner.operands(operands)?, t => inner.grad_slices(py, &t, &d, range))
    }

    /// The sliced labels (empty when nothing is sliced).
    #[getter]
    fn sliced_inds(&self) -> Vec<char> {
        self.inner.slice_plan.labels().to_vec()
    }

    /// The number of slices.
    #[getter]
    fn n_slices(&self) -> u64 {
        self.inner.slice_plan.n_slices()
    }

    /// Flops of all slices over the unsliced flops.
    #[getter]
    fn slicing_overhead(&self) -> f64 {
        self.inner.slice_plan.overhead()
    }

    /// Contracts operands of the expression's shapes; a new numpy array.
    #[pyo3(signature = (*operands))]
    fn __call__<'py>(&self, py: Python<'py>, operands: &Bound<'py, PyTuple>) -> PyResult<Bound<'py, PyAny>> {
        by_dtype!(self.inner.operands(operands)?, t => self.inner.eval(py, &t, self.memory_limit))
    }

    /// `(result, left)`: the contraction as `__call__` gives it, and whether it left
    /// float64's range (`scaled.rs`'s `left_range`), found by the element-wise kernel as
    /// it wrote the result or read by the call's threads right after (by moduli for a
    /// complex result). Saves `strip_exponent=None` a pass over the
    /// result on the calling thread, after the hand-back.
    #[pyo3(signature = (*operands))]
    fn _call_checked<'py>(
        &self,
        py: Python<'py>,
        operands: &Bound<'py, PyTuple>,
    ) -> PyResult<(Bound<'py, PyAny>, Option<bool>)> {
        by_dtype!(self.inner.operands(operands)?, t => self.inner.eval_checked(py, &t, self.memory_limit))
    }

    /// `(value, grads, left)`: `_value_and_grad` without a checkpoint, and whether the
    /// value or a gradient left float64's range, found out on the call's threads as
    /// `_call_checked` finds it.
    #[pyo3(signature = (operands, wrt=None, cotangent=None))]
    fn _value_and_grad_checked<'py>(
        &self,
        py: Python<'py>,
        operands: &Bound<'py, PyTuple>,
        wrt: Option<Vec<usize>>,
        cotangent: Option<Bound<'py, PyAny>>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyAny>, Option<bool>)> {
        let (inner, d) = (&self.inner, self.derivative(wrt, cotangent.as_ref()));
        let (pair, left) = by_dtype!(inner.operands(operands)?, t => inner.value_and_grad_sum(py, &t, &d, inner.range(0, None), true)?);
        Ok((pair.get_item(0)?, pair.get_item(1)?, left))
    }

    /// `(value, grads)`: the contraction and the vector-Jacobian products with respect to
    /// the operands `wrt` (all if `None`) for `cotangent` (1 for a scalar output if `None`).
    /// With `checkpoint` (a byte target, `"64MiB"` or a number of bytes, read by
    /// [`MemoryLimit`]'s `FromStr`), the reverse pass keeps the forward intermediates that
    /// fit the target and recomputes the others (`Einsum::gradient_within`).
    #[pyo3(signature = (operands, wrt=None, cotangent=None, checkpoint=None))]
    fn _value_and_grad<'py>(
        &self,
        py: Python<'py>,
        operands: &Bound<'py, PyTuple>,
        wrt: Option<Vec<usize>>,
        cotangent: Option<Bound<'py, PyAny>>,
        checkpoint: Option<&str>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let (inner, d) = (&self.inner, self.derivative(wrt, cotangent.as_ref()));
        let Some(target) = checkpoint else {
            return by_dtype!(inner.operands(operands)?, t => Ok(inner.value_and_grad_sum(py, &t, &d, inner.range(0, None), false)?.0));
        };
        let target: MemoryLimit = target.parse().map_err(|e: einsum::ParseBytesError| {
            PyValueError::new_err(format!("checkpoint: {e} (a byte target such as 64MiB or 1000000)"))
        })?;
        by_dtype!(inner.operands(operands)?, t => inner.value_and_grad_checkpointed(py, &t, &d, target))
    }

    /// The scaled contraction: `(mantissa, exponent)`, the value being
    /// `mantissa * 10**exponent` (intermediates rescaled by powers of two, so it is finite
    /// where the plain value overflows or underflows); with `grads`, `(value, grads)` with
    /// one such pair per operand in `wrt` (all if `None`) for `cotangent`. With `fit`, each
    /// result that fits the element type comes as a plain array instead. Over the slices
    /// `start..stop` only (all by default), for the distributed executors.
    #[pyo3(signature = (operands, grads=false, wrt=None, cotangent=None, fit=false, start=0, stop=None))]
    #[allow(clippy::too_many_arguments)]
    fn _scaled<'py>(
        &self,
        py: Python<'py>,
        operands: &Bound<'py, PyTuple>,
        grads: bool,
        wrt: Option<Vec<usize>>,
        cotangent: Option<Bound<'py, PyAny>>,
        fit: bool,
        start: u64,
        stop: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (inner, d, range) = (&self.inner, self.derivative(wrt, cotangent.as_ref()), self.inner.range(start, stop));
        let d = grads.then_some(&d);
        by_dtype!(inner.operands(operands)?, t => inner.scaled(py, &t, self.memory_limit, d, fit, range))
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
        let (inner, d, range) = (&self.inner, self.derivative(wrt, cotangent.as_ref()), self.inner.range(0, None));
        by_dtype!(inner.operands(operands)?, t => inner.hvp_slices(py, &t, &directions, &d, range))
    }

    /// Hessian-vector products summed over the slices `start..stop` (to the last if
    /// `None`): results of disjoint ranges covering every slice add up to `_hvp`'s.
    #[pyo3(signature = (operands, directions, start=0, stop=None, wrt=None, cotangent=None))]
    #[allow(clippy::too_many_arguments)]
    fn _hvp_slices<'py>(
        &self,
        py: Python<'py>,
        operands: &Bound<'py, PyTuple>,
        directions: Vec<Bound<'py, PyAny>>,
        start: u64,
        stop: Option<u64>,
        wrt: Option<Vec<usize>>,
        cotangent: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let (inner, d, range) = (&self.inner, self.derivative(wrt, cotangent.as_ref()), self.inner.range(start, stop));
        by_dtype!(inner.operands(operands)?, t => inner.hvp_slices(py, &t, &directions, &d, range))
    }

    /// The subscripts as given.
    #[getter]
    fn eq(&self) -> &str {
        &self.inner.report.expression
    }

    /// The operand shapes.
    #[getter]
    fn shapes(&self) -> Vec<Vec<usize>> {
        self.inner.shapes.clone()
    }

    /// The output shape.
    #[getter]
    fn output_shape(&self) -> Vec<usize> {
        self.inner.output_shape.clone()
    }

    /// The pairwise path, opt_einsum's format.
    #[getter]
    fn path(&self) -> Vec<(usize, usize)> {
        let n = self.inner.shapes.len();
        // A found path is pairwise already; a given one was given as pairs.
        self.inner.plan.path().pairwise(n).unwrap_or_default().into_iter().map(|[i, j]| (i, j)).collect()
    }

    /// The memory limit in elements, if any.
    #[getter]
    fn memory_limit(&self) -> Option<f64> {
        self.memory_limit
    }

    /// `(inputs, output, size_dict, steps)`: the parsed subscripts, the label sizes and per
    /// step `(positions, (a, b, result), size, multiply_adds)`, labels as strings.
    fn _plan(&self) -> PlanTuple {
        let p = &self.inner.report;
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

/// A path from Python: a finder's name or pairs (opt_einsum's format).
#[derive(FromPyObject, Clone, PartialEq, Eq, Hash)]
pub enum PathArg {
    /// A finder's name, read by [`PathChoice`]'s `FromStr`.
    Name(String),
    /// Pairs of positions.
    Pairs(Vec<(usize, usize)>),
}

/// The choice a path argument makes (`None`: greedy).
fn path_choice(path: Option<PathArg>) -> PyResult<PathChoice> {
    match path {
        None => Ok(PathChoice::Greedy),
        Some(PathArg::Name(name)) => name.parse::<PathChoice>().map_err(einsum_error),
        Some(PathArg::Pairs(p)) => {
            Ok(PathChoice::Explicit(einsum::ContractionPath::new(p.into_iter().map(|(i, j)| [i, j]).collect())))
        }
    }
}

/// The cache key of [`contract`]: expression, shapes, path, memory limit (bits), sliced labels.
type Key = (String, Vec<Vec<usize>>, Option<PathArg>, Option<u64>, Option<Vec<char>>);

static CACHE: LazyLock<Mutex<HashMap<Key, Arc<Inner>>>> = LazyLock::new(Mutex::default);

/// `contract(eq, operands, path=None, memory_limit=None, sliced_inds=None)`: contracts a
/// tuple of operands along `path` (pairs, opt_einsum's format, or a finder's name) or the
/// greedy path, sliced as `memory_limit` (elements) or `sliced_inds` need; a new numpy
/// array.
#[pyfunction]
#[pyo3(signature = (eq, operands, path=None, memory_limit=None, sliced_inds=None))]
pub fn contract<'py>(
    py: Python<'py>,
    eq: &str,
    operands: &Bound<'py, PyTuple>,
    path: Option<PathArg>,
    memory_limit: Option<f64>,
    sliced_inds: Option<Vec<char>>,
) -> PyResult<Bound<'py, PyAny>> {
    let (ops, shapes) = convert::operands(operands)?;
    let inner = cached_inner(py, eq, shapes, path, memory_limit, sliced_inds)?;
    by_dtype!(ops, t => inner.eval(py, &t, memory_limit))
}

/// `_contract_checked(eq, operands)`: `(result, left)`, `contract`'s result along the
/// greedy path and whether it left float64's range (by moduli for a complex result), as
/// `Expression._call_checked` says it for `strip_exponent=None`.
#[pyfunction]
pub fn _contract_checked<'py>(
    py: Python<'py>,
    eq: &str,
    operands: &Bound<'py, PyTuple>,
) -> PyResult<(Bound<'py, PyAny>, Option<bool>)> {
    let (ops, shapes) = convert::operands(operands)?;
    let inner = cached_inner(py, eq, shapes, None, None, None)?;
    by_dtype!(ops, t => inner.eval_checked(py, &t, None))
}

/// [`contract`]'s plan for these arguments: from the cache, or made and cached.
fn cached_inner(
    py: Python<'_>,
    eq: &str,
    shapes: Vec<Vec<usize>>,
    path: Option<PathArg>,
    memory_limit: Option<f64>,
    sliced_inds: Option<Vec<char>>,
) -> PyResult<Arc<Inner>> {
    let key: Key = (eq.to_string(), shapes, path, memory_limit.map(f64::to_bits), sliced_inds);
    let found = lock(&CACHE).get(&key).cloned();
    let inner = match found {
        Some(i) => i,
        None => {
            let (eq, shapes, path, _, sliced) = key.clone();
            let choice = path_choice(path)?;
            let i = Arc::new(py.detach(|| Inner::new(&eq, shapes, choice, memory_limit, sliced))?);
            let mut c = lock(&CACHE);
            if c.len() >= CACHE_CAPACITY {
                c.clear();
            }
            c.insert(key, i.clone());
            i
        }
    };
    Ok(inner)
}

/// Whether `name` names one of the einsum crate's path finders (`PathChoice`'s `FromStr`,
/// the one parser of those names; an explicit path written as text is not a name).
#[pyfunction]
pub fn is_path_finder(name: &str) -> bool {
    !name.trim_start().starts_with('[') && name.parse::<PathChoice>().is_ok()
}

/// The plan of `eq` on `shapes` along `choice`, made without the GIL: the search takes it
/// back every `einsum::search::STOP_CHECK_WORK` units of work to run Python's signal
/// handlers, so Ctrl-C ends a long search: the handler's exception (`KeyboardInterrupt`)
/// is raised, with a note (Python 3.11 and later) saying which search it ended.
fn plan_interruptibly(eq: &str, shapes: &[Vec<usize>], choice: PathChoice) -> PyResult<einsum::Plan> {
    let subscripts = Subscripts::parse(eq).map_err(einsum_error)?;
    let what = choice.name();
    // What a signal handler raised, which ends the search.
    let raised: RefCell<Option<PyErr>> = RefCell::new(None);
    let stop = || match Python::attach(|py| py.check_signals()) {
        Ok(()) => false,
        Err(e) => {
            *raised.borrow_mut() = Some(e);
            true
        }
    };
    match einsum::Plan::until(subscripts, shapes, choice, MemoryLimit::Unlimited, &stop) {
        Err(EinsumError::Interrupted) => {
            let e = raised.into_inner().expect("the search stops only when a handler raised");
            Err(Python::attach(|py| {
                // `add_note` exists from Python 3.11 on; without it the exception is as raised.
                let _ = e.value(py).call_method1(
                    "add_note",
                    (format!("raised during the `{what}` path search of `{eq}`, which it ended"),),
                );
                e
            }))
        }
        other => other.map_err(einsum_error),
    }
}

/// `search_path(eq, shapes, method)`: the einsum crate's path search `method` (a name
/// [`PathChoice`]'s `FromStr` reads: `"optimal"`, `"dp"`, `"random-greedy"`, `"auto"`, …)
/// on the expression; a pairwise path. The search runs without the GIL, and Ctrl-C ends it
/// ([`plan_interruptibly`]).
#[pyfunction]
pub fn search_path(py: Python<'_>, eq: &str, shapes: Vec<Vec<usize>>, method: &str) -> PyResult<Vec<(usize, usize)>> {
    let choice = method.parse::<PathChoice>().map_err(einsum_error)?;
    let search = || -> PyResult<Vec<(usize, usize)>> {
        let plan = plan_interruptibly(eq, &shapes, choice)?;
        let pairs = plan.path().pairwise(shapes.len()).map_err(einsum_error)?;
        Ok(pairs.into_iter().map(|[i, j]| (i, j)).collect())
    };
    py.detach(search)
}
