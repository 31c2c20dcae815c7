//! [`SlicedEinsum`]: a contraction evaluated slice by slice within a memory target, and
//! its gradient ([`SlicedGradient`]) summed over slices.
//!
//! Plan once ([`Plan`]): the path (given or found), the sliced labels
//! ([`SlicePlan::for_plan`]), and one compiled program for a slice: the plan of one slice
//! ([`Plan::slice`], the network with the sliced labels dropped, no string reparsed), on
//! shapes without their axes. Evaluate: for each slice index, copy the operands that hold
//! a sliced label at the slice's values (a copy is reused while its values do not change),
//! run the program, and add its result into an accumulator of the output's full shape, at
//! the slice's place when sliced labels are in the output. By blocks
//! ([`SlicedEinsum::eval_blocks`]), a slice's result is instead added into the row of its
//! output block (one value of each sliced output label), and a range holds only the rows
//! of the blocks it touches; [`SlicedEinsum::assemble`] places rows into the output. The
//! gradient runs the slice program's VJP per slice, on the slice of the cotangent, and adds
//! each operand's slice gradient into a buffer of the operand's full shape, at the slice's
//! place; with the value ([`SlicedGradient::eval_slices_with_value`]) the slice program's
//! forward steps run once for both.
//!
//! Invariants:
//! - slices are independent: [`SlicedEinsum::eval_slices`] of disjoint ranges covering
//!   `0..n_slices` sum to [`SlicedEinsum::eval`] (a summed label adds, an output label
//!   writes disjoint places of the accumulator and leaves zeros elsewhere), so any split
//!   of the range, in any process, gives the result by one sum; likewise gradients, and
//!   the blocks of such ranges, placed and added where two ranges share a block;
//! - a block's row is a slice result's shape (the output without its sliced axes), in
//!   the output's axis order;
//! - with nothing sliced, evaluation is the plain [`Einsum`]'s (no copy, no accumulator);
//! - tensors allocated per slice are those of the slice program, checked by its own
//!   memory check, plus the operand copies and the accumulators that the plan's estimate
//!   counts ([`SlicePlan::peak_bytes`]).

use std::ops::Range;
use std::sync::Arc;

use computegraph::EvalState;

use crate::elem::Elem;
use crate::error::{EinsumError, EinsumResult};
use crate::memory::MemoryLimit;
use crate::network::{Einsum, EinsumGradient, EinsumOptions, check_operand_shapes};
use crate::path::ContractionPath;
use crate::path::PathChoice;
use crate::plan::Plan;
use crate::scan::RangeScan;
use crate::slice::{SlicePlan, Slicing};
use crate::tensor::{Tensor, row_major_strides};

/// Where the sliced labels sit: for every axis of every operand and of the output, the
/// position of its label in the plan's labels, if sliced.
pub(crate) struct Layout {
    pub(crate) plan: SlicePlan,
    pub(crate) expression: String,
    pub(crate) shapes: Vec<Vec<usize>>,
    pub(crate) output_shape: Vec<usize>,
    pub(crate) operand_axes: Vec<Vec<Option<usize>>>,
    pub(crate) output_axes: Vec<Option<usize>>,
    /// The plan positions of the sliced labels that are in the output, in plan order: a
    /// block's index counts over their values, the last fastest.
    block_labels: Vec<usize>,
    /// The output's shape without its sliced axes: the shape of a slice's result.
    block_shape: Vec<usize>,
    pub(crate) limit: MemoryLimit,
}

impl Layout {
    pub(crate) fn is_sliced(&self) -> bool {
        !self.plan.labels().is_empty()
    }

    fn n_blocks(&self) -> u64 {
        self.block_labels.iter().map(|&j| self.plan.sizes()[j] as u64).product()
    }

    /// The block of the slice with `values`.
    fn block_of(&self, values: &[usize]) -> u64 {
        self.block_labels.iter().fold(0, |b, &j| b * self.plan.sizes()[j] as u64 + values[j] as u64)
    }

    /// Values of the plan's labels that put a slice in block `b` (the others are 0).
    fn block_values(&self, mut b: u64) -> Vec<usize> {
        let mut values = vec![0; self.plan.labels().len()];
        for &j in self.block_labels.iter().rev() {
            let d = self.plan.sizes()[j] as u64;
            values[j] = (b % d) as usize;
            b /= d;
        }
        values
    }

    pub(crate) fn check(&self, operands: &[&Tensor<impl Elem>]) -> EinsumResult<()> {
        check_operand_shapes(&self.expression, &self.shapes, operands)
    }

    pub(crate) fn check_range(&self, range: &Range<u64>) -> EinsumResult<()> {
        let n = self.plan.n_slices();
        if range.start > range.end || range.end > n {
            return Err(EinsumError::Slice(format!(
                "slice range {}..{} is not within 0..{n} (`{}` has {n} slices)",
                range.start, range.end, self.expression
            )));
        }
        Ok(())
    }
}

/// The operands of one slice: the copies of operands holding sliced labels, kept while
/// their labels' values stay the same.
pub(crate) struct SliceOperands<T: Elem> {
    copies: Vec<Option<(Vec<usize>, Tensor<T>)>>,
}

impl<T: Elem> SliceOperands<T> {
    pub(crate) fn new(n: usize) -> Self {
        SliceOperands { copies: (0..n).map(|_| None).collect() }
    }

    /// The operands of the slice with `values`, as references.
    pub(crate) fn refs<'a>(
        &'a mut self,
        layout: &Layout,
        operands: &[&'a Tensor<T>],
        values: &[usize],
    ) -> Vec<&'a Tensor<T>> {
        for (i, axes) in layout.operand_axes.iter().enumerate() {
            if axes.iter().all(Option::is_none) {
                continue;
            }
            let key: Vec<usize> = axes.iter().flatten().map(|&j| values[j]).collect();
            if self.copies[i].as_ref().is_none_or(|(k, _)| *k != key) {
                self.copies[i] = None; // free the old copy before making the new one
                self.copies[i] = Some((key, gather(operands[i], axes, values)));
            }
        }
        operands.iter().zip(&self.copies).map(|(&o, c)| c.as_ref().map_or(o, |(_, t)| t)).collect()
    }
}

/// Calls `f(offset, len, stride, slice_offset)` for each run of the slice with `values`
/// of a tensor of `shape` (runs along its last free axis, in the slice's row-major order).
fn runs(shape: &[usize], axes: &[Option<usize>], values: &[usize], mut f: impl FnMut(usize, usize, usize, usize)) {
    let strides = row_major_strides(shape);
    let mut base = 0;
    let mut free: Vec<(usize, usize)> = Vec::with_capacity(shape.len());
    for (p, ax) in axes.iter().enumerate() {
        match ax {
            // A size-1 axis of a larger label is broadcast: its one index serves every value.
            Some(j) => base += if shape[p] == 1 { 0 } else { values[*j] } * strides[p],
            None => free.push((shape[p], strides[p])),
        }
    }
    let (len, stride) = free.pop().unwrap_or((1, 1));
    if len == 0 || free.iter().any(|&(d, _)| d == 0) {
        return;
    }
    let mut idx = vec![0usize; free.len()];
    let (mut off, mut slice_off) = (base, 0);
    loop {
        f(off, len, stride, slice_off);
        slice_off += len;
        let mut k = free.len();
        loop {
            if k == 0 {
                return;
            }
            k -= 1;
            idx[k] += 1;
            off += free[k].1;
            if idx[k] < free[k].0 {
                break;
            }
            off -= free[k].1 * free[k].0;
            idx[k] = 0;
        }
    }
}

/// The slice of `t` with the sliced axes fixed at `values` (a copy).
pub(crate) fn gather<T: Elem>(t: &Tensor<T>, axes: &[Option<usize>], values: &[usize]) -> Tensor<T> {
    let shape: Vec<usize> = t.shape().iter().zip(axes).filter(|(_, a)| a.is_none()).map(|(&d, _)| d).collect();
    let data = t.data();
    // From the pool: one slice's copy is dropped before the next slice's is made.
    let mut out = crate::buffer::reserved(shape.iter().product());
    runs(t.shape(), axes, values, |off, len, stride, _| {
        if stride == 1 {
            out.extend_from_slice(&data[off..off + len]);
        } else {
            out.extend((0..len).map(|j| data[off + j * stride]));
        }
    });
    Tensor::from_parts(&shape, out)
}

/// Adds `p` (the data of a slice with `values`) into `acc`, a tensor of `shape`.
pub(crate) fn scatter_add<T: Elem>(acc: &mut [T], shape: &[usize], axes: &[Option<usize>], values: &[usize], p: &[T]) {
    runs(shape, axes, values, |off, len, stride, s| {
        for j in 0..len {
            acc[off + j * stride] += p[s + j];
        }
    });
}

/// A zeroed buffer of `shape`'s length (its bytes are counted by the plan's estimate).
/// It is filled in parts with the stop flag read between them: an accumulator of hundreds
/// of megabytes faults in fresh pages as it is zeroed, which on a loaded or virtual machine
/// takes longer than Ctrl-C may wait ([`EinsumError::Interrupted`] then).
pub(crate) fn zeros<T: Elem>(shape: &[usize]) -> EinsumResult<Vec<T>> {
    let n = crate::tensor::checked_len(shape)
        .ok_or_else(|| EinsumError::Shape(format!("shape {shape:?} overflows usize")))?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| EinsumError::Memory {
        what: format!("an accumulator of shape {shape:?}"),
        bytes: crate::memory::tensor_bytes(shape, std::mem::size_of::<T>()),
        limit: None,
    })?;
    while v.len() < n {
        crate::stop::check()?;
        v.resize(n.min(v.len() + crate::stop::COPY_CHECK_ELEMENTS), T::zero());
    }
    Ok(v)
}

/// What [`SlicedEinsum::for_each_slice`] calls per slice: the values of the sliced labels,
/// the slice's operands and its cotangent.
type SliceVisitor<'a, T> = dyn FnMut(&[usize], &[&Tensor<T>], Option<&Tensor<T>>) -> EinsumResult<()> + 'a;

/// The cotangent a reverse pass reads: of the output's full shape, by output blocks, or one
/// value for every entry of a gradient program that takes the output's shape (filled into
/// one block, which every slice reads).
enum Cotangent<'a, T: Elem> {
    Full(&'a Tensor<T>),
    Blocks(&'a OutputBlocks<T>),
    Filled(T),
}

/// Where the results of a slice range go: added into the output's full shape, or into the
/// rows of the blocks the range touches.
enum Sink<T: Elem> {
    Sum(Vec<T>),
    Blocks { first: u64, n: usize, rows: Vec<T> },
}

impl<T: Elem> Sink<T> {
    /// The least and the greatest block of the slices in `range` (none for an empty range).
    fn touched(l: &Layout, range: &Range<u64>) -> Option<(u64, u64)> {
        let (mut first, mut last) = (u64::MAX, 0);
        for k in range.clone() {
            let b = l.block_of(&l.plan.slice_values(k));
            (first, last) = (first.min(b), last.max(b));
        }
        (first != u64::MAX).then_some((first, last))
    }

    /// Rows for the blocks `min..=max` of the slices in `range` (none for an empty range).
    fn blocks(l: &Layout, range: &Range<u64>) -> EinsumResult<Self> {
        let (first, n) = match Self::touched(l, range) {
            Some((first, last)) => (first, last - first + 1),
            None => (0, 0),
        };
        let mut shape = vec![n as usize];
        shape.extend(&l.block_shape);
        Ok(Sink::Blocks { first, n: n as usize, rows: zeros(&shape)? })
    }

    fn add(&mut self, l: &Layout, values: &[usize], part: &Tensor<T>) {
        match self {
            Sink::Sum(acc) => scatter_add(acc, &l.output_shape, &l.output_axes, values, part.data()),
            Sink::Blocks { first, rows, .. } => {
                let len = part.data().len();
                let at = (l.block_of(values) - *first) as usize * len;
                for (r, &p) in rows[at..at + len].iter_mut().zip(part.data()) {
                    *r += p;
                }
            }
        }
    }

    fn into_sum(self, l: &Layout) -> EinsumResult<Tensor<T>> {
        match self {
            Sink::Sum(acc) => Tensor::new(l.output_shape.clone(), acc),
            Sink::Blocks { .. } => unreachable!("a block sink is read by into_blocks"),
        }
    }

    fn into_blocks(self, l: &Layout) -> EinsumResult<OutputBlocks<T>> {
        match self {
            Sink::Blocks { first, n, rows } => {
                let mut shape = vec![n];
                shape.extend(&l.block_shape);
                Ok(OutputBlocks { first, blocks: Tensor::new(shape, rows)? })
            }
            Sink::Sum(_) => unreachable!("a sum sink is read by into_sum"),
        }
    }
}

/// The value of a slice range by output blocks ([`SlicedEinsum::eval_blocks`]). A block is
/// the output at one value of each sliced label of the output (block `b` counts over
/// those labels' values in plan order, the last fastest; there is one block when no
/// output label is sliced), summed over the range's values of the other sliced labels.
/// The blocks `first..first + n` that the range touches are stacked along a new first
/// axis: `blocks()` has the shape `[n, ...block_shape]`.
///
/// With the output's sliced labels first in the plan, a range of `r` slices touches at
/// most `r / (slices per block) + 2` blocks, only its first and last partly; in any order
/// it holds the blocks between the least and the greatest it touches.
#[derive(Clone, Debug)]
pub struct OutputBlocks<T: Elem> {
    first: u64,
    blocks: Tensor<T>,
}

impl<T: Elem> OutputBlocks<T> {
    /// Blocks `first..first + blocks.shape()[0]`, stacked along the first axis of `blocks`
    /// (a cotangent by blocks, [`SlicedGradient::eval_blocks_with_value_by_blocks`]).
    pub fn new(first: u64, blocks: Tensor<T>) -> Self {
        OutputBlocks { first, blocks }
    }
    /// The whole output as block 0 of one.
    fn one(output: Tensor<T>) -> Self {
        let mut shape = vec![1];
        shape.extend(output.shape());
        OutputBlocks { first: 0, blocks: Tensor::from_parts(&shape, output.into_vec()) }
    }
    /// The first block's index.
    pub fn first(&self) -> u64 {
        self.first
    }
    /// The blocks, stacked along the first axis.
    pub fn blocks(&self) -> &Tensor<T> {
        &self.blocks
    }
    /// `(first, blocks)`.
    pub fn into_parts(self) -> (u64, Tensor<T>) {
        (self.first, self.blocks)
    }
}

/// A contraction planned with slicing ([`Slicing`]) and evaluated slice by slice.
///
/// ```
/// use einsum::{Einsum, EinsumOptions, MemoryLimit, PathChoice, SlicedEinsum, Slicing, Tensor};
///
/// let shapes = [vec![8, 8], vec![8, 8]];
/// let t = |s: &[usize]| Tensor::from_fn(s.to_vec(), |i| (i[0] * 3 + i[1]) as f64).unwrap();
/// let (a, b) = (t(&shapes[0]), t(&shapes[1]));
/// let plain = Einsum::<f64>::new("ij,jk->ik", &shapes, PathChoice::Greedy).unwrap().eval(&[&a, &b]).unwrap();
///
/// // Slice on `j` (summed) and `i` (in the output: slices are placed, not summed).
/// let slicing = Slicing::Labels(vec!['j', 'i']);
/// let s = SlicedEinsum::<f64>::new("ij,jk->ik", &shapes, PathChoice::Greedy, &EinsumOptions::default(), &slicing).unwrap();
/// assert_eq!(s.plan().n_slices(), 64);
/// assert!(s.eval(&[&a, &b]).unwrap().max_abs_diff(&plain).unwrap() < 1e-12);
///
/// // Any split of the slice range sums to the whole.
/// let x = s.eval_slices(&[&a, &b], 0..20).unwrap();
/// let y = s.eval_slices(&[&a, &b], 20..64).unwrap();
/// assert!(x.zip_with(&y, |p, q| p + q).unwrap().max_abs_diff(&plain).unwrap() < 1e-12);
/// assert!(s.eval_slices(&[&a, &b], 0..65).is_err());
/// ```
pub struct SlicedEinsum<T: Elem> {
    pub(crate) layout: Arc<Layout>,
    pub(crate) einsum: Einsum<T>,
    /// The whole contraction's plan (the slice program's is `einsum.plan()`).
    plan: Plan,
}

impl<T: Elem> SlicedEinsum<T> {
    /// Plans (path, sliced labels) and compiles the slice program. Errors: those of
    /// [`Einsum::with_options`], an unknown or repeated sliced label
    /// ([`EinsumError::Slice`]), and a target that slicing cannot meet or explicit labels
    /// that leave a slice over the memory limit ([`EinsumError::Memory`]).
    pub fn new(
        expression: &str,
        shapes: &[Vec<usize>],
        path: PathChoice,
        options: &EinsumOptions,
        slicing: &Slicing,
    ) -> EinsumResult<Self> {
        Self::check_operands_fit(shapes, options.limit())?;
        Self::from_plan(Plan::new(expression, shapes, path, options.limit())?, slicing)
    }

    /// An operand over the limit alone is named as the plain contraction names it.
    fn check_operands_fit(shapes: &[Vec<usize>], limit: MemoryLimit) -> EinsumResult<()> {
        let limit_bytes = match limit {
            MemoryLimit::Bytes(b) => Some(b),
            MemoryLimit::Unlimited => None,
        };
        for (i, s) in shapes.iter().enumerate() {
            let bytes = crate::memory::tensor_bytes(s, std::mem::size_of::<T>());
            if !limit.allows(bytes) {
                return Err(EinsumError::Memory {
                    what: format!("operand {i} of shape {s:?}"),
                    bytes,
                    limit: limit_bytes,
                });
            }
        }
        Ok(())
    }

    /// Slices a plan (its memory budget is the target of [`Slicing::Memory`]) and compiles
    /// the plan of one slice ([`Plan::slice`]), or the plan itself when nothing is sliced.
    pub fn from_plan(plan: Plan, slicing: &Slicing) -> EinsumResult<Self> {
        let limit = plan.memory_limit();
        Self::check_operands_fit(plan.shapes(), limit)?;
        let slices = SlicePlan::for_plan(&plan, std::mem::size_of::<T>(), slicing)?;
        let ids = slices.label_ids().to_vec();
        if slices.n_slices() > 1 || !ids.is_empty() {
            let bytes = Some(slices.peak_bytes());
            if !limit.allows(bytes) {
                return Err(EinsumError::Memory {
                    what: format!(
                        "one slice of `{}` sliced on `{}` ({} slices; the operands and the output held whole)",
                        plan.name(),
                        slices.labels().iter().collect::<String>(),
                        slices.n_slices()
                    ),
                    bytes,
                    limit: match limit {
                        MemoryLimit::Bytes(b) => Some(b),
                        MemoryLimit::Unlimited => None,
                    },
                });
            }
        }
        let not_sliced = ids.is_empty();
        // Nothing sliced: the whole contraction, an ellipsis included.
        let einsum = if not_sliced { Einsum::from_plan(plan.clone())? } else { Einsum::from_plan(plan.slice(&ids)?)? };
        let position = |c: &u32| ids.iter().position(|l| l == c);
        let output_shape = plan.output_shape();
        let resolved = plan.resolved();
        let output_axes: Vec<Option<usize>> = resolved.output.iter().map(position).collect();
        let block_shape = output_shape.iter().zip(&output_axes).filter(|(_, a)| a.is_none()).map(|(&d, _)| d).collect();
        let block_labels = (0..ids.len()).filter(|&j| resolved.output.contains(&ids[j])).collect();
        let layout = Layout {
            expression: plan.name(),
            shapes: plan.shapes().to_vec(),
            output_shape,
            operand_axes: resolved.inputs.iter().map(|l| l.iter().map(position).collect()).collect(),
            output_axes,
            block_labels,
            block_shape,
            plan: slices,
            limit,
        };
        Ok(SlicedEinsum { layout: Arc::new(layout), einsum, plan })
    }

    /// The slicing plan: labels, slice count, overhead, estimated peaks.
    pub fn plan(&self) -> &SlicePlan {
        &self.layout.plan
    }
    /// The path of the whole contraction (and of each slice).
    pub fn path(&self) -> &ContractionPath {
        self.plan.path()
    }
    /// The whole contraction's plan (each slice runs [`Plan::slice`] of it).
    pub fn contraction_plan(&self) -> &Plan {
        &self.plan
    }
    /// The compiled contraction of one slice (the whole contraction when nothing is sliced).
    pub fn slice_einsum(&self) -> &Einsum<T> {
        &self.einsum
    }
    /// The output's full shape.
    pub fn output_shape(&self) -> &[usize] {
        &self.layout.output_shape
    }
    /// Multiply-adds of all slices.
    pub fn multiply_adds(&self) -> f64 {
        if self.layout.is_sliced() { self.layout.plan.multiply_adds() } else { self.einsum.multiply_adds() }
    }

    /// Whether an evaluation inside a pool of `threads` threads would use more than the
    /// calling thread: the slices run one after the other, each as [`Einsum::uses_threads`]
    /// says of the slice program.
    pub fn uses_threads(&self, threads: usize) -> bool {
        self.einsum.uses_threads(threads)
    }

    /// The contraction: all slices, summed or placed.
    pub fn eval(&self, operands: &[&Tensor<T>]) -> EinsumResult<Tensor<T>> {
        self.eval_slices(operands, 0..self.layout.plan.n_slices())
    }

    /// [`SlicedEinsum::eval`], calling `done(k)` after each slice with the number of
    /// slices done so far (for a progress bar over a long run).
    ///
    /// ```
    /// use einsum::{EinsumOptions, PathChoice, SlicedEinsum, Slicing, Tensor};
    ///
    /// let shapes = [vec![4, 6], vec![6, 5]];
    /// let s = SlicedEinsum::<f64>::new("ij,jk->ik", &shapes, PathChoice::Greedy,
    ///     &EinsumOptions::default(), &Slicing::Labels(vec!['j'])).unwrap();
    /// let (a, b) = (Tensor::ones(vec![4, 6]).unwrap(), Tensor::ones(vec![6, 5]).unwrap());
    /// let mut seen = Vec::new();
    /// let r = s.eval_with_progress(&[&a, &b], |k| seen.push(k)).unwrap();
    /// assert_eq!(r.get(&[0, 0]), Some(6.0));
    /// assert_eq!(seen, [1, 2, 3, 4, 5, 6]); // one call per slice of `j`
    /// ```
    pub fn eval_with_progress(&self, operands: &[&Tensor<T>], mut done: impl FnMut(u64)) -> EinsumResult<Tensor<T>> {
        self.summed(operands, 0..self.layout.plan.n_slices(), &mut done)
    }

    /// The sum of the slices in `range` (of `0..n_slices`), of the output's full shape:
    /// slices with sliced output labels are placed, the other places are zero. Results of
    /// disjoint ranges add up to [`SlicedEinsum::eval`].
    pub fn eval_slices(&self, operands: &[&Tensor<T>], range: Range<u64>) -> EinsumResult<Tensor<T>> {
        self.summed(operands, range, &mut |_| ())
    }

    /// [`SlicedEinsum::eval_slices`], calling `done` with the count of slices done after each.
    fn summed(&self, operands: &[&Tensor<T>], range: Range<u64>, done: &mut dyn FnMut(u64)) -> EinsumResult<Tensor<T>> {
        let l = &*self.layout;
        l.check(operands)?;
        l.check_range(&range)?;
        if !l.is_sliced() && range == (0..1) {
            let r = self.einsum.eval(operands)?;
            done(1);
            return Ok(r);
        }
        let mut sink = Sink::Sum(zeros::<T>(&l.output_shape)?);
        self.forward(operands, range, &mut sink, done)?;
        sink.into_sum(l)
    }

    /// The slices in `range` by output blocks ([`OutputBlocks`]): only the blocks the range
    /// touches, never the output's full shape. [`SlicedEinsum::assemble`] places the blocks
    /// of disjoint ranges covering `0..n_slices` into the contraction.
    pub fn eval_blocks(&self, operands: &[&Tensor<T>], range: Range<u64>) -> EinsumResult<OutputBlocks<T>> {
        let l = &*self.layout;
        l.check(operands)?;
        l.check_range(&range)?;
        if !l.is_sliced() && range == (0..1) {
            return Ok(OutputBlocks::one(self.einsum.eval(operands)?));
        }
        let mut sink = Sink::blocks(l, &range)?;
        self.forward(operands, range, &mut sink, &mut |_| ())?;
        sink.into_blocks(l)
    }

    /// Adds the slices of `range` into `sink`, calling `done` with the count of slices
    /// done after each.
    fn forward(
        &self,
        operands: &[&Tensor<T>],
        range: Range<u64>,
        sink: &mut Sink<T>,
        done: &mut dyn FnMut(u64),
    ) -> EinsumResult<()> {
        let l = &*self.layout;
        // One evaluation running for the buffer pool (each slice's counts as begun).
        let _evaluation = crate::buffer::begin_evaluation();
        let mut copies = SliceOperands::new(operands.len());
        let mut state = EvalState::new();
        for (n, k) in range.enumerate() {
            let values = l.plan.slice_values(k);
            let refs = copies.refs(l, operands, &values);
            let r = self.einsum.eval_with(&mut state, &refs)?;
            sink.add(l, &values, &r);
            done(n as u64 + 1);
        }
        Ok(())
    }

    /// Whether any label is sliced (the scaled contraction of `scaled.rs` runs the slice
    /// program directly when none is).
    pub(crate) fn is_sliced(&self) -> bool {
        self.layout.is_sliced()
    }

    /// Calls `f(values, slice operands, slice cotangent)` for every slice of `range` in
    /// order, after checking the operands, the range (and the cotangent, of the output's
    /// shape): the loop of [`SlicedEinsum::eval`] and of the gradient, for `scaled.rs`,
    /// which combines the slices' results itself (each with its own exponent).
    pub(crate) fn for_each_slice(
        &self,
        operands: &[&Tensor<T>],
        cotangent: Option<&Tensor<T>>,
        range: Range<u64>,
        f: &mut SliceVisitor<'_, T>,
    ) -> EinsumResult<()> {
        let l = &*self.layout;
        l.check(operands)?;
        l.check_range(&range)?;
        if let Some(c) = cotangent.filter(|c| c.shape() != l.output_shape.as_slice()) {
            return Err(EinsumError::Shape(format!(
                "cotangent 0 of `{}` has shape {:?}, expected {:?}",
                l.expression,
                c.shape(),
                l.output_shape
            )));
        }
        let _evaluation = crate::buffer::begin_evaluation();
        let mut copies = SliceOperands::new(operands.len());
        let out_sliced = l.output_axes.iter().any(Option::is_some);
        for k in range {
            let values = l.plan.slice_values(k);
            let refs = copies.refs(l, operands, &values);
            let part = cotangent.filter(|_| out_sliced).map(|c| gather(c, &l.output_axes, &values));
            f(&values, &refs, part.as_ref().or(cotangent))?;
        }
        Ok(())
    }

    /// Adds `part`, a slice's result at `values`, into `acc` (the output's full shape), at
    /// the slice's place.
    pub(crate) fn add_output_slice(&self, acc: &mut [T], values: &[usize], part: &[T]) {
        let l = &*self.layout;
        scatter_add(acc, &l.output_shape, &l.output_axes, values, part);
    }

    /// Adds `part`, a slice's gradient of operand `i` at `values`, into `acc` (the
    /// operand's full shape), at the slice's place.
    pub(crate) fn add_operand_slice(&self, i: usize, acc: &mut [T], values: &[usize], part: &[T]) {
        let l = &*self.layout;
        scatter_add(acc, &l.shapes[i], &l.operand_axes[i], values, part);
    }

    /// The operand shapes.
    pub(crate) fn shapes(&self) -> &[Vec<usize>] {
        &self.layout.shapes
    }

    /// The memory check of [`SlicedEinsum::gradient`] for a sliced contraction: the
    /// estimated peak of one slice's reverse pass against the limit.
    pub(crate) fn check_gradient_fits(&self) -> EinsumResult<()> {
        let l = &*self.layout;
        if l.is_sliced() && !l.limit.allows(Some(l.plan.gradient_peak_bytes())) {
            return Err(EinsumError::Memory {
                what: format!(
                    "the gradient of one slice of `{}` (sliced on `{}`; plan it with Slicing::Memory {{ gradient: true }})",
                    l.expression,
                    l.plan.labels().iter().collect::<String>()
                ),
                bytes: Some(l.plan.gradient_peak_bytes()),
                limit: match l.limit {
                    MemoryLimit::Bytes(b) => Some(b),
                    MemoryLimit::Unlimited => None,
                },
            });
        }
        Ok(())
    }

    /// The number of output blocks: the product of the sizes of the sliced labels in the
    /// output (1 when none is).
    pub fn n_blocks(&self) -> u64 {
        self.layout.n_blocks()
    }
    /// The shape of one output block: the output's shape without its sliced axes.
    pub fn block_shape(&self) -> &[usize] {
        &self.layout.block_shape
    }

    /// The output of the full shape with every block of `parts` added at its place (blocks
    /// that several parts hold partly add up). Errors: a part whose blocks do not have the
    /// block shape or reach past [`SlicedEinsum::n_blocks`] ([`EinsumError::Shape`]).
    pub fn assemble(&self, parts: &[OutputBlocks<T>]) -> EinsumResult<Tensor<T>> {
        let l = &*self.layout;
        let mut acc = zeros::<T>(&l.output_shape)?;
        let len: usize = l.block_shape.iter().product();
        for p in parts {
            let shape = p.blocks.shape();
            let n = shape.first().copied().unwrap_or(0) as u64;
            if shape.get(1..) != Some(l.block_shape.as_slice())
                || p.first.checked_add(n).is_none_or(|e| e > l.n_blocks())
            {
                return Err(EinsumError::Shape(format!(
                    "blocks {}.. of shape {shape:?} do not fit `{}`: {} blocks of shape {:?}",
                    p.first,
                    l.expression,
                    l.n_blocks(),
                    l.block_shape
                )));
            }
            for (r, row) in p.blocks.data().chunks(len.max(1)).take(n as usize).enumerate() {
                if l.block_labels.is_empty() {
                    // One block, the whole output in its own order.
                    acc.iter_mut().zip(row).for_each(|(a, &x)| *a += x);
                } else {
                    let values = l.block_values(p.first + r as u64);
                    scatter_add(&mut acc, &l.output_shape, &l.output_axes, &values, row);
                }
            }
        }
        Tensor::new(l.output_shape.clone(), acc)
    }

    /// The gradient (vector-Jacobian product) with respect to the operands `wrt`, summed
    /// over slices. Its estimated peak ([`SlicePlan::gradient_peak_bytes`]) must fit the
    /// memory limit: plan with `Slicing::Memory { gradient: true }` to slice for it.
    pub fn gradient(&self, wrt: &[usize]) -> EinsumResult<SlicedGradient<T>> {
        self.check_gradient_peak()?;
        let gradient = self.einsum.gradient(wrt)?;
        Ok(SlicedGradient { layout: self.layout.clone(), gradient, wrt: wrt.to_vec(), sum: false })
    }

    /// [`Einsum::gradient_of_sum`] summed over slices: the gradient of `c·Σ f` for a
    /// scalar cotangent `c`, which every slice takes as it is (no slice of a cotangent of
    /// ones is made). Memory as [`Self::gradient`].
    pub fn gradient_of_sum(&self, wrt: &[usize]) -> EinsumResult<SlicedGradient<T>> {
        self.gradient_of_sum_by(wrt, crate::SumGradient::Cheaper)
    }

    /// [`Self::gradient_of_sum`] with each slice's gradient taken the way `way` names
    /// ([`Einsum::gradient_of_sum_by`]).
    pub fn gradient_of_sum_by(&self, wrt: &[usize], way: crate::SumGradient) -> EinsumResult<SlicedGradient<T>> {
        self.check_gradient_peak()?;
        let gradient = self.einsum.gradient_of_sum_by(wrt, way)?;
        Ok(SlicedGradient { layout: self.layout.clone(), gradient, wrt: wrt.to_vec(), sum: true })
    }

    /// Whether one slice's gradient fits the memory limit.
    fn check_gradient_peak(&self) -> EinsumResult<()> {
        let l = &*self.layout;
        if l.is_sliced() && !l.limit.allows(Some(l.plan.gradient_peak_bytes())) {
            return Err(EinsumError::Memory {
                what: format!(
                    "the gradient of one slice of `{}` (sliced on `{}`; plan it with Slicing::Memory {{ gradient: true }})",
                    l.expression,
                    l.plan.labels().iter().collect::<String>()
                ),
                bytes: Some(l.plan.gradient_peak_bytes()),
                limit: match l.limit {
                    MemoryLimit::Bytes(b) => Some(b),
                    MemoryLimit::Unlimited => None,
                },
            });
        }
        Ok(())
    }
}

/// The gradient of a [`SlicedEinsum`] ([`SlicedEinsum::gradient`]): per slice the slice
/// program's VJP, accumulated into buffers of the operands' full shapes.
///
/// ```
/// use einsum::{Einsum, EinsumOptions, PathChoice, SlicedEinsum, Slicing, Tensor};
///
/// let shapes = [vec![3, 4], vec![4, 5]];
/// let t = |s: &[usize]| Tensor::from_fn(s.to_vec(), |i| 0.5 + (i[0] + 2 * i[1]) as f64).unwrap();
/// let (a, b) = (t(&shapes[0]), t(&shapes[1]));
/// let c = Tensor::from_fn(vec![3, 5], |i| i[1] as f64 - 1.0).unwrap();
/// let plain = Einsum::<f64>::new("ij,jk->ik", &shapes, PathChoice::Greedy).unwrap();
/// let want = plain.gradient(&[0, 1]).unwrap().eval(&[&a, &b], &c).unwrap();
/// let s = SlicedEinsum::<f64>::new("ij,jk->ik", &shapes, PathChoice::Greedy,
///     &EinsumOptions::default(), &Slicing::Labels(vec!['j', 'k'])).unwrap();
/// let got = s.gradient(&[0, 1]).unwrap().eval(&[&a, &b], &c).unwrap();
/// for (g, w) in got.iter().zip(&want) {
///     assert!(g.max_abs_diff(w).unwrap() < 1e-12);
/// }
/// ```
pub struct SlicedGradient<T: Elem> {
    layout: Arc<Layout>,
    gradient: EinsumGradient<T>,
    wrt: Vec<usize>,
    /// [`SlicedEinsum::gradient_of_sum`]'s: the cotangent is a scalar every slice takes.
    sum: bool,
}

impl<T: Elem> SlicedGradient<T> {
    /// Whether an evaluation inside a pool of `threads` threads would use more than the
    /// calling thread: the slices run one after the other, each as
    /// [`EinsumGradient::uses_threads`] says of the slice program.
    pub fn uses_threads(&self, threads: usize) -> bool {
        self.gradient.uses_threads(threads)
    }

    /// `Jᵀ c` summed over all slices: one tensor per `wrt` operand.
    pub fn eval(&self, operands: &[&Tensor<T>], cotangent: &Tensor<T>) -> EinsumResult<Vec<Tensor<T>>> {
        self.eval_slices(operands, cotangent, 0..self.layout.plan.n_slices())
    }

    /// [`SlicedGradient::eval`], calling `done(k)` after each slice with the number of
    /// slices done so far (as [`SlicedEinsum::eval_with_progress`]).
    ///
    /// ```
    /// use einsum::{EinsumOptions, PathChoice, SlicedEinsum, Slicing, Tensor};
    ///
    /// let shapes = [vec![4, 3], vec![3, 5]];
    /// let s = SlicedEinsum::<f64>::new("ij,jk->ik", &shapes, PathChoice::Greedy,
    ///     &EinsumOptions::default(), &Slicing::Labels(vec!['i', 'j'])).unwrap();
    /// let a = Tensor::from_fn(vec![4, 3], |i| (i[0] + 2 * i[1]) as f64).unwrap();
    /// let b = Tensor::from_fn(vec![3, 5], |i| 1.0 - (i[0] * i[1]) as f64).unwrap();
    /// let c = Tensor::ones(vec![4, 5]).unwrap();
    /// let g = s.gradient(&[0, 1]).unwrap();
    /// let mut calls = 0;
    /// let with = g.eval_with_progress(&[&a, &b], &c, |k| { calls += 1; assert_eq!(k, calls) }).unwrap();
    /// assert_eq!(calls, 12); // 4 values of `i` times 3 of `j`
    /// assert_eq!(with, g.eval(&[&a, &b], &c).unwrap());
    /// ```
    pub fn eval_with_progress(
        &self,
        operands: &[&Tensor<T>],
        cotangent: &Tensor<T>,
        mut done: impl FnMut(u64),
    ) -> EinsumResult<Vec<Tensor<T>>> {
        self.summed(operands, cotangent, 0..self.layout.plan.n_slices(), &mut done)
    }

    /// The gradients' sum over the slices in `range`; disjoint ranges add up to
    /// [`SlicedGradient::eval`].
    pub fn eval_slices(
        &self,
        operands: &[&Tensor<T>],
        cotangent: &Tensor<T>,
        range: Range<u64>,
    ) -> EinsumResult<Vec<Tensor<T>>> {
        self.summed(operands, cotangent, range, &mut |_| ())
    }

    /// [`SlicedGradient::eval_slices`], calling `done` with the count of slices done after
    /// each.
    fn summed(
        &self,
        operands: &[&Tensor<T>],
        cotangent: &Tensor<T>,
        range: Range<u64>,
        done: &mut dyn FnMut(u64),
    ) -> EinsumResult<Vec<Tensor<T>>> {
        self.check(operands, cotangent, &range)?;
        if !self.layout.is_sliced() && range == (0..1) {
            let g = self.gradient.eval(operands, cotangent)?;
            done(1);
            return Ok(g);
        }
        self.reverse(operands, Cotangent::Full(cotangent), range, None, done)
    }

    /// `(value, gradients)` of the slices in `range` in one pass: per slice, the forward
    /// steps run once for both ([`EinsumGradient::eval_with_value`]). Equal to
    /// [`SlicedEinsum::eval_slices`] and [`SlicedGradient::eval_slices`] on the same range.
    pub fn eval_slices_with_value(
        &self,
        operands: &[&Tensor<T>],
        cotangent: &Tensor<T>,
        range: Range<u64>,
    ) -> EinsumResult<(Tensor<T>, Vec<Tensor<T>>)> {
        self.check(operands, cotangent, &range)?;
        let l = &*self.layout;
        if !l.is_sliced() && range == (0..1) {
            return self.gradient.eval_with_value(operands, cotangent);
        }
        let mut sink = Sink::Sum(zeros::<T>(&l.output_shape)?);
        let grads = self.reverse(operands, Cotangent::Full(cotangent), range, Some(&mut sink), &mut |_| ())?;
        Ok((sink.into_sum(l)?, grads))
    }

    /// [`SlicedGradient::eval_slices_with_value`], and for the whole of an unsliced
    /// contraction the range of the value and of each gradient, in that order, each read
    /// right after the step that wrote it ([`EinsumGradient::eval_with_value_and_range`]);
    /// `None` for a sum of slices, whose results are whole only at the end.
    #[allow(clippy::type_complexity)] // written out: an alias would hide it in the docs
    pub fn eval_slices_with_value_and_range(
        &self,
        operands: &[&Tensor<T>],
        cotangent: &Tensor<T>,
        range: Range<u64>,
    ) -> EinsumResult<(Tensor<T>, Vec<Tensor<T>>, Option<Vec<RangeScan>>)> {
        self.check(operands, cotangent, &range)?;
        if !self.layout.is_sliced() && range == (0..1) {
            let (value, grads, ranges) = self.gradient.eval_with_value_and_range(operands, cotangent)?;
            return Ok((value, grads, Some(ranges)));
        }
        let (value, grads) = self.eval_slices_with_value(operands, cotangent, range)?;
        Ok((value, grads, None))
    }

    /// [`SlicedGradient::eval_slices_with_value`] with the value by output blocks, as
    /// [`SlicedEinsum::eval_blocks`] gives it.
    pub fn eval_blocks_with_value(
        &self,
        operands: &[&Tensor<T>],
        cotangent: &Tensor<T>,
        range: Range<u64>,
    ) -> EinsumResult<(OutputBlocks<T>, Vec<Tensor<T>>)> {
        self.check(operands, cotangent, &range)?;
        self.blocks_with_value(operands, Cotangent::Full(cotangent), range)
    }

    /// [`SlicedGradient::eval_blocks_with_value`] with the cotangent by output blocks too:
    /// `cotangent` holds (at least) the blocks the range touches, stacked as
    /// [`SlicedEinsum::eval_blocks`] stacks the value, so that a range never needs the
    /// cotangent's full shape. A scalar `cotangent` (its tensor of shape `[]`, whatever its
    /// `first`) is that value in every entry of every block: the gradients of `c·Σ f`, as
    /// [`SlicedGradient::eval_blocks_with_value`] gives them for a cotangent filled with
    /// `c` (a gradient of the sum, [`SlicedEinsum::gradient_of_sum`], takes it as it is;
    /// any other fills one block, which every slice reads). Errors: blocks not of the block
    /// shape, missing a block the range touches, or blocks given to a gradient of the sum
    /// ([`EinsumError::Shape`]).
    ///
    /// ```
    /// use einsum::{EinsumOptions, OutputBlocks, PathChoice, SlicedEinsum, Slicing, Tensor};
    ///
    /// let shapes = [vec![4, 3], vec![3, 5]];
    /// let s = SlicedEinsum::<f64>::new("ij,jk->ik", &shapes, PathChoice::Greedy,
    ///     &EinsumOptions::default(), &Slicing::Labels(vec!['i', 'j'])).unwrap();
    /// let a = Tensor::from_fn(vec![4, 3], |i| (i[0] + 2 * i[1]) as f64).unwrap();
    /// let b = Tensor::from_fn(vec![3, 5], |i| 1.0 - (i[0] * i[1]) as f64).unwrap();
    /// let filled = Tensor::filled(vec![4, 5], 2.5).unwrap();
    /// let scalar = OutputBlocks::new(0, Tensor::scalar(2.5));
    /// let (want_value, want) = s.gradient(&[0, 1]).unwrap().eval_blocks_with_value(&[&a, &b], &filled, 3..9).unwrap();
    /// for g in [s.gradient(&[0, 1]).unwrap(), s.gradient_of_sum(&[0, 1]).unwrap()] {
    ///     let (value, grads) = g.eval_blocks_with_value_by_blocks(&[&a, &b], &scalar, 3..9).unwrap();
    ///     assert!(value.blocks().max_abs_diff(want_value.blocks()).unwrap() < 1e-12);
    ///     for (g, w) in grads.iter().zip(&want) {
    ///         assert!(g.max_abs_diff(w).unwrap() < 1e-12);
    ///     }
    /// }
    /// ```
    pub fn eval_blocks_with_value_by_blocks(
        &self,
        operands: &[&Tensor<T>],
        cotangent: &OutputBlocks<T>,
        range: Range<u64>,
    ) -> EinsumResult<(OutputBlocks<T>, Vec<Tensor<T>>)> {
        let l = &*self.layout;
        let shape = cotangent.blocks.shape();
        // A scalar output's blocks are `[n]`, never `[]`: a tensor of shape `[]` is a scalar
        // cotangent for any output.
        if shape.is_empty() {
            let c = &cotangent.blocks;
            if self.sum || l.output_shape.is_empty() {
                self.check(operands, c, &range)?;
                return self.blocks_with_value(operands, Cotangent::Full(c), range);
            }
            l.check(operands)?;
            l.check_range(&range)?;
            return self.blocks_with_value(operands, Cotangent::Filled(c.data()[0]), range);
        }
        if self.sum {
            return Err(EinsumError::Shape(format!(
                "the gradient of the sum of `{}` takes a scalar cotangent, not output blocks of shape {shape:?}",
                l.expression
            )));
        }
        l.check(operands)?;
        l.check_range(&range)?;
        let needed = Sink::<T>::touched(l, &range);
        let n = shape.first().copied().unwrap_or(0) as u64;
        let covers = needed.is_none_or(|(a, b)| cotangent.first <= a && b < cotangent.first.saturating_add(n));
        if shape.get(1..) != Some(l.block_shape.as_slice()) || !covers {
            return Err(EinsumError::Shape(format!(
                "cotangent blocks {}.. of shape {shape:?} do not hold the blocks {needed:?} of slices {range:?} of `{}` (blocks of shape {:?})",
                cotangent.first, l.expression, l.block_shape
            )));
        }
        self.blocks_with_value(operands, Cotangent::Blocks(cotangent), range)
    }

    /// The value by output blocks and the gradients of the slices in `range` (checked), for
    /// a cotangent of the output's full shape or by blocks.
    fn blocks_with_value(
        &self,
        operands: &[&Tensor<T>],
        cotangent: Cotangent<'_, T>,
        range: Range<u64>,
    ) -> EinsumResult<(OutputBlocks<T>, Vec<Tensor<T>>)> {
        let l = &*self.layout;
        if !l.is_sliced() && range == (0..1) {
            let whole;
            let c = match cotangent {
                Cotangent::Full(c) => c,
                Cotangent::Blocks(b) => {
                    whole = Tensor::new(l.output_shape.clone(), b.blocks.data().to_vec())?;
                    &whole
                }
                Cotangent::Filled(x) => {
                    whole = Tensor::filled(l.output_shape.clone(), x)?;
                    &whole
                }
            };
            let (value, grads) = self.gradient.eval_with_value(operands, c)?;
            return Ok((OutputBlocks::one(value), grads));
        }
        let mut sink = Sink::blocks(l, &range)?;
        let grads = self.reverse(operands, cotangent, range, Some(&mut sink), &mut |_| ())?;
        Ok((sink.into_blocks(l)?, grads))
    }

    fn check(&self, operands: &[&Tensor<T>], cotangent: &Tensor<T>, range: &Range<u64>) -> EinsumResult<()> {
        let l = &*self.layout;
        l.check(operands)?;
        l.check_range(range)?;
        let expected: &[usize] = if self.sum { &[] } else { &l.output_shape };
        if cotangent.shape() != expected {
            return Err(EinsumError::Shape(format!(
                "cotangent 0 of `{}` has shape {:?}, expected {expected:?}",
                l.expression,
                cotangent.shape(),
            )));
        }
        Ok(())
    }

    /// The gradients summed over `range`, and each slice's value added into `value`;
    /// `done` is called with the count of slices done after each.
    fn reverse(
        &self,
        operands: &[&Tensor<T>],
        cotangent: Cotangent<'_, T>,
        range: Range<u64>,
        mut value: Option<&mut Sink<T>>,
        done: &mut dyn FnMut(u64),
    ) -> EinsumResult<Vec<Tensor<T>>> {
        let l = &*self.layout;
        // One evaluation running for the buffer pool (each slice's counts as begun).
        let _evaluation = crate::buffer::begin_evaluation();
        let mut accs: Vec<Vec<T>> = self.wrt.iter().map(|&i| zeros::<T>(&l.shapes[i])).collect::<EinsumResult<_>>()?;
        let mut copies = SliceOperands::new(operands.len());
        let out_sliced = l.output_axes.iter().any(Option::is_some);
        // Every slice's cotangent block is the same when it is filled: made once.
        let filled = match cotangent {
            Cotangent::Filled(x) => Some(Tensor::filled(l.block_shape.clone(), x)?),
            _ => None,
        };
        for (n, k) in range.enumerate() {
            let values = l.plan.slice_values(k);
            let refs = copies.refs(l, operands, &values);
            // The slice's cotangent: the caller's whole one when no output label is sliced
            // (not a copy), else a copy from the pool, which the next slice's reuses.
            let part;
            let c = match cotangent {
                Cotangent::Full(c) if out_sliced && !self.sum => {
                    part = gather(c, &l.output_axes, &values);
                    &part
                }
                Cotangent::Full(c) => c,
                Cotangent::Blocks(b) => {
                    let len: usize = l.block_shape.iter().product();
                    let at = (l.block_of(&values) - b.first) as usize * len;
                    let mut data = crate::buffer::reserved(len);
                    data.extend_from_slice(&b.blocks.data()[at..at + len]);
                    part = Tensor::new(l.block_shape.clone(), data)?;
                    &part
                }
                Cotangent::Filled(_) => filled.as_ref().expect("made before the loop"),
            };
            let grads = match value.as_deref_mut() {
                Some(sink) => {
                    let (r, grads) = self.gradient.eval_with_value(&refs, c)?;
                    sink.add(l, &values, &r);
                    grads
                }
                None => self.gradient.eval(&refs, c)?,
            };
            for ((acc, &i), g) in accs.iter_mut().zip(&self.wrt).zip(&grads) {
                scatter_add(acc, &l.shapes[i], &l.operand_axes[i], &values, g.data());
            }
            done(n as u64 + 1);
        }
        accs.into_iter().zip(&self.wrt).map(|(a, &i)| Tensor::new(l.shapes[i].clone(), a)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroing_an_accumulator_reads_the_stop_flag() {
        use std::sync::Arc;
        use std::sync::atomic::AtomicBool;
        let shape = [3, crate::stop::COPY_CHECK_ELEMENTS / 2];
        let zero = |up: bool| crate::stop::with_stop(Arc::new(AtomicBool::new(up)), || zeros::<f64>(&shape));
        let v = zero(false).unwrap();
        assert_eq!(v.len(), shape.iter().product::<usize>());
        assert!(v.iter().all(|&x| x == 0.0));
        assert_eq!(zero(true).unwrap_err(), EinsumError::Interrupted);
    }

    #[test]
    fn gather_and_scatter_are_inverse_on_a_diagonal_and_a_broadcast_axis() {
        // A 3x4x3 tensor with axes 0 and 2 sliced on one label (a diagonal) at value 2.
        let t = Tensor::from_fn(vec![3, 4, 3], |i| (i[0] * 100 + i[1] * 10 + i[2]) as f64).unwrap();
        let axes = [Some(0), None, Some(0)];
        let s = gather(&t, &axes, &[2]);
        assert_eq!(s.shape(), &[4]);
        assert_eq!(s.data(), &[202.0, 212.0, 222.0, 232.0]);
        let mut acc = vec![0.0; 36];
        scatter_add(&mut acc, &[3, 4, 3], &axes, &[2], s.data());
        let back = Tensor::new(vec![3, 4, 3], acc).unwrap();
        assert_eq!(back.get(&[2, 3, 2]), Some(232.0));
        assert_eq!(back.get(&[2, 3, 1]), Some(0.0));
        // A size-1 axis of a sliced label serves every value.
        let u = Tensor::new(vec![1, 2], vec![5.0, 6.0]).unwrap();
        assert_eq!(gather(&u, &[Some(0), None], &[7]).data(), &[5.0, 6.0]);
        // Strided runs (the last axis sliced).
        assert_eq!(gather(&t, &[None, None, Some(0)], &[1]).get(&[1, 2]), Some(121.0));
    }
}
