//! The reduction kernel: binary contractions whose output has at most [`REDUCE_MAX_OUT`]
//! elements and whose summed labels are long, `out[e] = Σ op(a)·op(b)` over every label
//! not in the output, each operand read in place with its own strides.
//!
//! Why a kernel of its own: these are the transposes that make a small factor's gradient
//! from two large tensors (the queens network's `dA`: a `3 × 3` result summed over `3^10`
//! to `3^14` terms of the cotangent and of the factor's partner). The GEMM path ran them
//! as a GEMM of `m = n = 3` or, when the factor's two labels are batch labels or sit
//! between the summed ones, as many short products over packed copies; and a GEMM cut per
//! thread (`elem.rs`) has nothing to cut in a `3 × 3` output, so on two threads they ran
//! on one.
//!
//! The summed labels are ordered with the smallest strides innermost and fused where both
//! operands step over neighbours as over one; the innermost run is cut into chunks of at
//! most [`CHUNK`] elements, and each *unit* (one position of the outer summed labels, one
//! chunk) adds, for every output element, the dot product of the two operands' runs
//! (vectorized when both are contiguous). Units are grouped into *blocks* of fixed
//! content (at least `CHUNK` terms each, whatever the threads), each block's sums formed
//! alone and the blocks' sums added in order: inside a pool of several threads the blocks
//! of a reduction of `PAR_GEMM_MIN_MACS` multiply-adds or more are formed on all of them,
//! and two threads give the one-thread result bit for bit.
//!
//! Input invariants ([`ReducePlan::new`] checks them): no tensor repeats a label, the
//! output has at most `REDUCE_MAX_OUT` elements, the summed labels hold at least
//! [`REDUCE_MIN_TERMS`] terms. Cost: `|out| · Π summed sizes` multiply-adds; each operand
//! element is read `|out| / |operand's output part|` times, from the first level caches
//! after the first (a chunk's runs fit there); one allocation of the blocks' sums when the
//! threads share them.
//!
//! Two more sums live here: [`RowDotPlan`], many output elements each one dot product of
//! two contiguous runs (`ij,ij->i`), and [`SumPlan`], a one-operand sum read in the
//! operand's order (`ij->j`); their docs say why and what they take.

use smallvec::SmallVec;

use crate::elem::{Elem, PAR_GEMM_MIN_MACS};
use crate::elementwise::{distinct_labels, strides_along};

/// The most output elements the kernel takes: the `3 × 3` (and up to `4 × 4`) results of a
/// small factor's gradient, and scalar outputs.
pub(crate) const REDUCE_MAX_OUT: usize = 16;

/// The fewest summed terms per output element from which the kernel is used: below them
/// the direct loop or the GEMM path already costs about the multiply-adds.
pub(crate) const REDUCE_MIN_TERMS: usize = 1 << 12;

/// The longest run of the innermost summed label one unit reads: `2^9` elements, 4 KB per
/// run, so that the runs of one unit (at most `2 · REDUCE_MAX_OUT`, often a few shared by
/// several output elements) stay in the first level cache while every output element
/// reads them.
pub(crate) const CHUNK: usize = 1 << 9;

/// Terms (units' runs) of one block: the order of sums is fixed by it, not by the threads.
const BLOCK_TERMS: usize = 1 << 13;

/// The fixed cost of one dot product of [`ReducePlan::cost`]: its dispatch, its partial
/// sums' set-up and reduction.
const DOT_CALL_COST: f64 = 5.0;

/// Partial sums per dot product: one AVX2 vector of `f64`.
const LANES: usize = 4;

/// One summed loop: its length and the strides of `a` and `b` along it.
#[derive(Clone, Copy, Debug)]
struct Loop {
    len: usize,
    sa: usize,
    sb: usize,
}

/// How a reduction runs: the offsets of each output element in `a` and `b`, the outer
/// summed loops (outermost first), the innermost run cut into chunks, and the units per
/// block.
#[derive(Debug)]
pub(crate) struct ReducePlan {
    /// Per output element (row-major), its offset in `a` and in `b`.
    offsets: SmallVec<[[usize; 2]; REDUCE_MAX_OUT]>,
    outer: SmallVec<[Loop; 8]>,
    inner: Loop,
    /// Chunks per innermost run.
    chunks: usize,
    /// Units per block.
    per_block: usize,
    /// `|out| · Π summed sizes`.
    multiply_adds: usize,
}

impl ReducePlan {
    /// The plan for `a, b -> out` if it suits the kernel (module docs).
    pub(crate) fn new(a: &[u32], b: &[u32], out: &[u32], sizes: &[usize]) -> Option<Self> {
        if !distinct_labels(&[a, b, out]) {
            return None;
        }
        let size = |c: u32| sizes[c as usize];
        let out_len = out.iter().try_fold(1usize, |p, &c| p.checked_mul(size(c)))?;
        let mut summed: SmallVec<[u32; 16]> = SmallVec::new();
        for &c in a.iter().chain(b) {
            if !out.contains(&c) && !summed.contains(&c) && size(c) != 1 {
                summed.push(c);
            }
        }
        let terms = summed.iter().try_fold(1usize, |p, &c| p.checked_mul(size(c)))?;
        if out_len == 0 || out_len > REDUCE_MAX_OUT || terms < REDUCE_MIN_TERMS {
            return None;
        }
        // Output elements: row-major over the output's labels, each label's strides in the
        // operands (0 where an operand lacks it: a broadcast).
        let (oa, ob) = (strides_along(a, sizes, out), strides_along(b, sizes, out));
        let mut offsets = SmallVec::new();
        for e in 0..out_len {
            let (mut rest, mut at) = (e, [0usize; 2]);
            for (x, &c) in out.iter().enumerate().rev() {
                let i = rest % size(c);
                rest /= size(c);
                at[0] += i * oa[x];
                at[1] += i * ob[x];
            }
            offsets.push(at);
        }
        // Summed labels with the smallest strides innermost (the sum of the two, so that
        // the larger operand decides), neighbours fused where both step as over one.
        let (sa, sb) = (strides_along(a, sizes, &summed), strides_along(b, sizes, &summed));
        let mut order: SmallVec<[usize; 16]> = (0..summed.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(sa[i].saturating_add(sb[i])));
        let mut loops: SmallVec<[Loop; 8]> = SmallVec::new();
        for i in order {
            let l = Loop { len: size(summed[i]), sa: sa[i], sb: sb[i] };
            match loops.last_mut() {
                Some(prev) if prev.sa == l.sa * l.len && prev.sb == l.sb * l.len => {
                    *prev = Loop { len: prev.len * l.len, sa: l.sa, sb: l.sb };
                }
                _ => loops.push(l),
            }
        }
        let inner = loops.pop().expect("at least REDUCE_MIN_TERMS terms");
        let chunks = inner.len.div_ceil(CHUNK);
        let run = inner.len.div_ceil(chunks);
        Some(ReducePlan {
            offsets,
            outer: loops,
            inner,
            chunks,
            per_block: (BLOCK_TERMS / run).max(1),
            multiply_adds: out_len * terms,
        })
    }

    /// The estimated time of [`Self::run`] in the units of `kernel::step_cost` (about
    /// nanoseconds on one thread), so that `layout.rs` weighs the orders of a reduction's
    /// operands by this kernel and not by the GEMM it replaced: the multiply-adds at the
    /// rate of vectorized dot products when the innermost run is contiguous in both
    /// operands, at one per element otherwise (a gather), and a call per unit and output
    /// element (short runs pay it often).
    pub(crate) fn cost(&self) -> f64 {
        let contiguous = self.inner.sa <= 1 && self.inner.sb <= 1;
        let per_mac = if contiguous { 0.25 } else { 1.0 };
        self.multiply_adds as f64 * per_mac + (self.units() * self.offsets.len()) as f64 * DOT_CALL_COST
    }

    /// The units: every position of the outer loops times the chunks of the innermost run.
    fn units(&self) -> usize {
        self.outer.iter().map(|l| l.len).product::<usize>() * self.chunks
    }

    /// The output (row-major over the output's labels) of `a` and `b` (conjugated as
    /// `conj` says).
    pub(crate) fn run<T: Elem>(&self, a: &[T], b: &[T], conj: [bool; 2]) -> Vec<T> {
        let blocks = self.units().div_ceil(self.per_block);
        let pooled = crate::elem::caller_pool_threads() > 1;
        let mut total: SmallVec<[T; REDUCE_MAX_OUT]> = SmallVec::from_elem(T::zero(), self.offsets.len());
        let add = |total: &mut [T], s: &[T]| total.iter_mut().zip(s).for_each(|(t, &x)| *t += x);
        if pooled && self.multiply_adds >= par_min_macs() && blocks > 1 {
            use rayon::prelude::*;
            let sums: Vec<SmallVec<[T; REDUCE_MAX_OUT]>> =
                (0..blocks).into_par_iter().map(|j| self.block(j, a, b, conj)).collect();
            for s in &sums {
                add(&mut total, s);
            }
        } else {
            for j in 0..blocks {
                if j % 64 == 63 && crate::stop::requested() {
                    break; // the evaluation is ending with an error; the output is discarded
                }
                add(&mut total, &self.block(j, a, b, conj));
            }
        }
        total.into_vec()
    }

    /// The sums of block `j`: its units in order, each adding its runs' dot products.
    fn block<T: Elem>(&self, j: usize, a: &[T], b: &[T], conj: [bool; 2]) -> SmallVec<[T; REDUCE_MAX_OUT]> {
        let mut sums: SmallVec<[T; REDUCE_MAX_OUT]> = SmallVec::from_elem(T::zero(), self.offsets.len());
        let (first, end) = (j * self.per_block, ((j + 1) * self.per_block).min(self.units()));
        // The outer loops' position of the first unit, then an odometer.
        let (mut pos, mut chunk) = (first / self.chunks, first % self.chunks);
        let mut idx: SmallVec<[usize; 8]> = SmallVec::from_elem(0, self.outer.len());
        let (mut pa, mut pb) = (0usize, 0usize);
        for (x, l) in self.outer.iter().enumerate().rev() {
            idx[x] = pos % l.len;
            pos /= l.len;
            pa += idx[x] * l.sa;
            pb += idx[x] * l.sb;
        }
        let run = self.inner.len.div_ceil(self.chunks);
        for _ in first..end {
            let (s0, s1) = (chunk * run, ((chunk + 1) * run).min(self.inner.len));
            let (ia, ib) = (self.inner.sa, self.inner.sb);
            for (sum, &[oa, ob]) in sums.iter_mut().zip(&self.offsets) {
                let (xa, xb) = (pa + oa + s0 * ia, pb + ob + s0 * ib);
                *sum += dot(&a[xa..], ia, &b[xb..], ib, s1 - s0, conj);
            }
            chunk += 1;
            if chunk == self.chunks {
                chunk = 0;
                for x in (0..self.outer.len()).rev() {
                    let l = self.outer[x];
                    idx[x] += 1;
                    pa += l.sa;
                    pb += l.sb;
                    if idx[x] < l.len {
                        break;
                    }
                    idx[x] = 0;
                    pa -= l.sa * l.len;
                    pb -= l.sb * l.len;
                }
            }
        }
        sums
    }
}

/// Multiply-adds from which the blocks are formed on the pool's threads:
/// `PAR_GEMM_MIN_MACS`, as for a GEMM; in tests `2^12`, so that the property tests' small
/// reductions take the pool's path too.
fn par_min_macs() -> usize {
    if cfg!(test) { 1 << 12 } else { PAR_GEMM_MIN_MACS }
}

/// `Σ op(a[i·sa])·op(b[i·sb])` for `i < n`, in [`LANES`] partial sums (added in order at
/// the end) when both strides are 1, in one otherwise.
fn dot<T: Elem>(a: &[T], sa: usize, b: &[T], sb: usize, n: usize, conj: [bool; 2]) -> T {
    crate::small_gemm::arch().dispatch(Dot { a, sa, b, sb, n, conj })
}

/// The arguments of [`dot`], as the value pulp dispatches (a closure would not be inlined
/// into the function compiled for the processor's instructions).
struct Dot<'a, T> {
    a: &'a [T],
    sa: usize,
    b: &'a [T],
    sb: usize,
    n: usize,
    conj: [bool; 2],
}

impl<T: Elem> pulp::WithSimd for Dot<'_, T> {
    type Output = T;

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) -> T {
        let Dot { a, sa, b, sb, n, conj: [ca, cb] } = self;
        // (A no-op for reals.)
        let op = |x: T, on: bool| if on && T::IS_COMPLEX { x.conj() } else { x };
        if sa == 1 && sb == 1 {
            let (a, b) = (&a[..n], &b[..n]);
            let mut acc = [T::zero(); LANES];
            let (ca_, cb_) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
            let (ra, rb) = (ca_.remainder(), cb_.remainder());
            for (x, y) in ca_.zip(cb_) {
                for l in 0..LANES {
                    acc[l] += op(x[l], ca) * op(y[l], cb);
                }
            }
            let mut s = acc.iter().fold(T::zero(), |s, &x| s + x);
            for (&x, &y) in ra.iter().zip(rb) {
                s += op(x, ca) * op(y, cb);
            }
            s
        } else {
            let mut s = T::zero();
            for i in 0..n {
                s += op(a[i * sa], ca) * op(b[i * sb], cb);
            }
            s
        }
    }
}

/// Summed runs shorter than this are left to the other kernels ([`RowDotPlan::new`]): a dot
/// product's set-up and the reduction of its partial sums would weigh on each output
/// element.
pub(crate) const ROW_DOT_MIN_RUN: usize = 16;

/// Output elements per check of the stop flag in [`RowDotPlan`] and [`SumPlan`] rows.
const ROWS_PER_STOP_CHECK: usize = 1 << 12;

/// Binary contractions whose every output element is one dot product of two contiguous
/// runs, `out[e] = Σ_k op(a[pa(e) + k])·op(b[pb(e) + k])`: the summed labels are the
/// innermost labels of both operands, in the same order (`ij,ij->i`, a batch of dot
/// products; `bij,bij->b`).
///
/// Why: with more than [`REDUCE_MAX_OUT`] outputs [`ReducePlan`] declines them, and the
/// GEMM path ran one `1 × 1 × k` GEMM per output element, the direct loop one serial
/// sum (each addition waiting for the last). Here each element is written once into an
/// unzeroed buffer, each dot product in [`LANES`] partial sums compiled for the
/// processor's vector instructions, the output cut in chunks over the pool's threads
/// (each element formed alone, so two threads give one thread's bits).
///
/// Input invariants ([`RowDotPlan::new`] checks them): no tensor repeats a label; every
/// summed label is in both operands and the summed labels (size 1 left out) are the last
/// ones of both, in one order, together at least [`ROW_DOT_MIN_RUN`] elements; the
/// output's labels of size above 1 held by one operand alone are all `a`'s or all `b`'s
/// (a batch of dot products or of matrix–vector products, never a GEMM). Cost:
/// `|out| · run` multiply-adds, each operand read once in order where its output part is
/// not broadcast.
#[derive(Debug)]
pub(crate) struct RowDotPlan {
    /// The output's axes (size 1 dropped, neighbours fused) and the strides of `a` and `b`
    /// along them.
    sizes: SmallVec<[usize; 8]>,
    strides: [SmallVec<[usize; 8]>; 2],
    /// Length of each dot product (the summed labels' product).
    run: usize,
    out_len: usize,
}

impl RowDotPlan {
    /// The plan for `a, b -> out` if it suits the kernel (the type's docs).
    pub(crate) fn new(a: &[u32], b: &[u32], out: &[u32], sizes: &[usize]) -> Option<Self> {
        if !distinct_labels(&[a, b, out]) {
            return None;
        }
        let size = |c: u32| sizes[c as usize];
        // Each operand's labels but those of size 1, and its summed ones among them.
        let kept = |l: &[u32]| l.iter().copied().filter(|&c| size(c) != 1).collect::<SmallVec<[u32; 8]>>();
        let (ka, kb) = (kept(a), kept(b));
        let summed = |k: &[u32]| k.iter().copied().filter(|c| !out.contains(c)).collect::<SmallVec<[u32; 8]>>();
        let (sa, sb) = (summed(&ka), summed(&kb));
        if sa.is_empty() || sa != sb || !ka.ends_with(&sa) || !kb.ends_with(&sb) {
            return None;
        }
        // A label of each operand's own in the output makes the step a GEMM (`ik,jk->ij`,
        // every matrix product's `dA = dC·Bᵀ`): one dot per element would read `b` again for
        // each row of `a`, with no blocking, where the GEMM kernels reuse it from cache.
        let own = |k: &[u32], other: &[u32]| k.iter().any(|&c| size(c) > 1 && out.contains(&c) && !other.contains(&c));
        if own(&ka, &kb) && own(&kb, &ka) {
            return None;
        }
        let run = sa.iter().try_fold(1usize, |p, &c| p.checked_mul(size(c)))?;
        let out_len = out.iter().try_fold(1usize, |p, &c| p.checked_mul(size(c)))?;
        if run < ROW_DOT_MIN_RUN {
            return None;
        }
        let (sizes, [sa, sb, _]) = crate::elementwise::fused_axes([a, b, out], out, sizes);
        Some(RowDotPlan { sizes, strides: [sa, sb], run, out_len })
    }

    /// The estimated time of [`Self::run`] in `kernel::step_cost`'s units, as
    /// [`ReducePlan::cost`] prices contiguous dot products.
    pub(crate) fn cost(&self) -> f64 {
        self.out_len as f64 * (self.run as f64 * 0.25 + DOT_CALL_COST)
    }

    /// The output (row-major over the output's labels) of `a` and `b` (conjugated as
    /// `conj` says).
    pub(crate) fn run<T: Elem>(&self, a: &[T], b: &[T], conj: [bool; 2]) -> Vec<T> {
        // Every element is written once.
        let mut out = crate::buffer::overwritten(self.out_len);
        if self.out_len == 0 {
            return out;
        }
        let pooled = crate::elem::caller_pool_threads() > 1;
        if pooled && self.out_len >= 2 && self.out_len.saturating_mul(self.run) >= par_min_macs() {
            use rayon::prelude::*;
            let per_chunk = self.out_len.div_ceil(4 * rayon::current_num_threads());
            out.par_chunks_mut(per_chunk)
                .enumerate()
                .for_each(|(i, chunk)| self.write(i * per_chunk, chunk, a, b, conj));
        } else {
            self.write(0, &mut out, a, b, conj);
        }
        out
    }

    /// Writes output elements `first..first + dst.len()` into `dst`.
    fn write<T: Elem>(&self, first: usize, dst: &mut [T], a: &[T], b: &[T], conj: [bool; 2]) {
        crate::small_gemm::arch().dispatch(RowDots { plan: self, first, dst, a, b, conj });
    }
}

/// The arguments of [`RowDotPlan::write`], as the value pulp dispatches: the loop over the
/// output elements is compiled with [`Dot`]'s, for the processor's instructions.
struct RowDots<'a, T> {
    plan: &'a RowDotPlan,
    first: usize,
    dst: &'a mut [T],
    a: &'a [T],
    b: &'a [T],
    conj: [bool; 2],
}

impl<T: Elem> pulp::WithSimd for RowDots<'_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        let RowDots { plan, first, dst, a, b, conj } = self;
        let (sizes, [sa, sb]) = (&plan.sizes, &plan.strides);
        // The output index of `first`, and its offsets in `a` and `b`; then an odometer.
        let mut idx: SmallVec<[usize; 8]> = SmallVec::from_elem(0, sizes.len());
        let (mut pa, mut pb, mut rest) = (0usize, 0usize, first);
        for x in (0..sizes.len()).rev() {
            idx[x] = rest % sizes[x];
            rest /= sizes[x];
            pa += idx[x] * sa[x];
            pb += idx[x] * sb[x];
        }
        for (e, o) in dst.iter_mut().enumerate() {
            if e % ROWS_PER_STOP_CHECK == ROWS_PER_STOP_CHECK - 1 && crate::stop::requested() {
                return; // the evaluation is ending with an error; the output is discarded
            }
            *o = Dot { a: &a[pa..], sa: 1, b: &b[pb..], sb: 1, n: plan.run, conj }.with_simd(simd);
            for x in (0..sizes.len()).rev() {
                idx[x] += 1;
                pa += sa[x];
                pb += sb[x];
                if idx[x] < sizes[x] {
                    break;
                }
                idx[x] = 0;
                pa -= sa[x] * sizes[x];
                pb -= sb[x] * sizes[x];
            }
        }
    }
}

/// The kernel of a one-operand einsum `a -> out` (operand `data`) when one suits it, for
/// `kernel::unary`: a sum in the operand's order ([`SumPlan`]), or a broadcast written once
/// by the element-wise kernel's rows (`ElementwisePlan::broadcast`); `None` for the direct
/// loop (permutations, diagonals).
pub(crate) fn one_operand<T: Elem>(a: &[u32], out: &[u32], sizes: &[usize], data: &[T]) -> Option<Vec<T>> {
    if let Some(p) = SumPlan::new(a, out, sizes) {
        return Some(p.run(data));
    }
    crate::elementwise::ElementwisePlan::broadcast(a, out, sizes).map(|p| p.run_broadcast(data))
}

/// One-operand sums (`ij->j`, `ijk->ik`: every output label in the operand, at least one
/// operand label of size above 1 summed, no label repeated), walked in the operand's
/// order and added into a zeroed output.
///
/// Why: the direct loop walks the output's labels outside and the summed ones inside, so
/// `ij->j` (the gradient of a row broadcast `ij,j->ij`, summed over its rows) read the
/// operand column by column, a gather, each column summed serially. In the operand's
/// order every read is contiguous and the inner pass is a vector addition of a row into
/// the output's (`ij->j`) or a sum of a run in [`LANES`] partial sums (`ij->i`).
///
/// Threads: inside a pool of several threads, an operand of at least [`par_sum_min`]
/// elements is cut over them (a sum is one read of memory, so one core leaves the
/// bandwidth of the others unused). The cut is along the output's outermost axis when it
/// has a piece for every thread (long enough, when it is the operand's innermost axis, to
/// keep the rows vector additions): each thread writes its own block of the output and
/// walks the operand in the same order over it, so every element's sum is formed as on one
/// thread, bit for bit. Otherwise, when the output is small beside the operand
/// (`ij->` or `ij->j` of a few columns), it is cut along the outermost summed axis that
/// has a piece for every thread: each thread sums its piece into an output of its own and
/// those are added in order, which rounds differently from one thread (and the same on
/// every run of one thread count).
///
/// Cost: one read of the operand; the output (zeroed once) is read and written once per
/// run of the operand's labels after its innermost kept one, plus one output per thread
/// when the summed axis is cut.
#[derive(Debug)]
pub(crate) struct SumPlan {
    /// The operand's axes (size 1 dropped, neighbours fused) and the strides of the
    /// operand and the output along them (0 for a summed axis).
    sizes: SmallVec<[usize; 8]>,
    strides: [SmallVec<[usize; 8]>; 2],
    out_len: usize,
}

/// Operand elements from which a sum is cut over the pool's threads: about 0.1 ms of
/// one core's reading against the tens of microseconds that forking and joining cost; in
/// tests 64, so that the property tests' small sums take the pool's paths too.
fn par_sum_min() -> usize {
    if cfg!(test) { 1 << 6 } else { 1 << 16 }
}

/// The shortest piece of the operand's innermost axis a thread takes when that axis is
/// the one cut among kept ones: shorter rows would leave the vector additions little to
/// do per row.
const MIN_PIECE_ROW: usize = 64;

/// How [`SumPlan::run`] shares the operand among threads.
#[derive(Clone, Copy, Debug, PartialEq)]
enum SumCut {
    /// One thread walks it all.
    Whole,
    /// Axis `axis` (the output's outermost) cut in pieces of `piece`: each thread writes
    /// its own block of the output.
    Kept { axis: usize, piece: usize },
    /// Summed axis `axis` cut in pieces of `piece`: each thread sums into an output of its
    /// own, added in order at the end.
    Summed { axis: usize, piece: usize },
}

impl SumPlan {
    /// The plan for `a -> out` if it suits the kernel (the type's docs).
    pub(crate) fn new(a: &[u32], out: &[u32], sizes: &[usize]) -> Option<Self> {
        let size = |c: u32| sizes[c as usize];
        if !distinct_labels(&[a, out]) || !out.iter().all(|c| a.contains(c)) {
            return None;
        }
        if !a.iter().any(|&c| !out.contains(&c) && size(c) != 1) {
            return None; // nothing summed: a permutation
        }
        let out_len = out.iter().try_fold(1usize, |p, &c| p.checked_mul(size(c)))?;
        let (sizes, [sa, _, so]) = crate::elementwise::fused_axes([a, a, out], a, sizes);
        Some(SumPlan { sizes, strides: [sa, so], out_len })
    }

    /// How `threads` threads share the operand (the type's docs).
    fn cut(&self, threads: usize) -> SumCut {
        let (sizes, [_, so]) = (&self.sizes, &self.strides);
        let a_len: usize = sizes.iter().product();
        if threads < 2 || a_len < par_sum_min() {
            return SumCut::Whole;
        }
        let last = sizes.len() - 1;
        let pieces = |d: usize| d.div_ceil(d.div_ceil(threads));
        // The output's outermost axis: the kept one of the largest output stride.
        let outer = (0..sizes.len()).filter(|&x| so[x] != 0).max_by_key(|&x| so[x]);
        if let Some(x) = outer {
            let long_enough = x != last || sizes[x] / threads >= MIN_PIECE_ROW;
            if pieces(sizes[x]) >= threads && long_enough {
                return SumCut::Kept { axis: x, piece: sizes[x].div_ceil(threads) };
            }
        }
        // Partial outputs cost one output per thread, small beside the operand here.
        if self.out_len.saturating_mul(threads) <= a_len / 8 {
            if let Some(x) = (0..sizes.len()).find(|&x| so[x] == 0 && pieces(sizes[x]) >= threads) {
                return SumCut::Summed { axis: x, piece: sizes[x].div_ceil(threads) };
            }
        }
        SumCut::Whole
    }

    /// The sums (row-major over the output's labels) of `a`.
    pub(crate) fn run<T: Elem>(&self, a: &[T]) -> Vec<T> {
        let mut out = crate::buffer::zeroed(self.out_len);
        if self.out_len == 0 || self.sizes.contains(&0) {
            return out; // an empty sum is zero
        }
        self.run_cut(a, &mut out, self.cut(crate::elem::caller_pool_threads()));
        out
    }

    /// Adds the sums of `a` into the zeroed `out`, shared among threads as `cut` says.
    fn run_cut<T: Elem>(&self, a: &[T], out: &mut [T], cut: SumCut) {
        let (sizes, [sa, so]) = (&self.sizes, &self.strides);
        // Axis `axis` restricted to `lo..hi`: the sizes and the operand's first element.
        let piece = |axis: usize, lo: usize, hi: usize| {
            let mut s = sizes.clone();
            s[axis] = hi - lo;
            (s, lo * sa[axis])
        };
        let walk = |sizes: &[usize], first: usize, out: &mut [T]| {
            crate::small_gemm::arch().dispatch(Sums { plan: self, sizes, a, first, out });
        };
        use rayon::prelude::*;
        match cut {
            SumCut::Whole => walk(sizes, 0, out),
            SumCut::Kept { axis, piece: len } => {
                debug_assert_eq!(so[axis] * sizes[axis], out.len(), "the output's outermost axis");
                out.par_chunks_mut(len * so[axis]).enumerate().for_each(|(i, block)| {
                    let lo = i * len;
                    let (s, first) = piece(axis, lo, (lo + len).min(sizes[axis]));
                    walk(&s, first, block);
                });
            }
            SumCut::Summed { axis, piece: len } => {
                let parts: Vec<Vec<T>> = (0..sizes[axis].div_ceil(len))
                    .into_par_iter()
                    .map(|i| {
                        let lo = i * len;
                        let (s, first) = piece(axis, lo, (lo + len).min(sizes[axis]));
                        let mut part = crate::buffer::zeroed(self.out_len);
                        walk(&s, first, &mut part);
                        part
                    })
                    .collect();
                for part in parts {
                    out.iter_mut().zip(&part).for_each(|(o, &x)| *o += x);
                    crate::buffer::recycle(part);
                }
            }
        }
    }
}

/// The arguments of [`SumPlan::run`], as the value pulp dispatches: the operand's axes
/// `sizes` (the plan's, or with one cut to a piece) from its element `first`, added into
/// `out` (the output, or the block of it those axes write).
struct Sums<'a, T> {
    plan: &'a SumPlan,
    sizes: &'a [usize],
    a: &'a [T],
    first: usize,
    out: &'a mut [T],
}

impl<T: Elem> pulp::WithSimd for Sums<'_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        let Sums { plan, sizes, a, first, out } = self;
        let Some(last) = sizes.len().checked_sub(1) else {
            out[0] += a[0]; // every label of size 1
            return;
        };
        let [sa, so] = &plan.strides;
        let (n, ia, io) = (sizes[last], sa[last], so[last]);
        let rows: usize = sizes[..last].iter().product();
        let mut idx: SmallVec<[usize; 8]> = SmallVec::from_elem(0, last);
        let (mut pa, mut po) = (first, 0usize);
        for r in 0..rows {
            if r % ROWS_PER_STOP_CHECK == ROWS_PER_STOP_CHECK - 1 && crate::stop::requested() {
                return; // the evaluation is ending with an error; the output is discarded
            }
            match (ia, io) {
                (1, 1) => out[po..po + n].iter_mut().zip(&a[pa..pa + n]).for_each(|(o, &x)| *o += x),
                (1, 0) => out[po] += Sum { a: &a[pa..pa + n] }.with_simd(simd),
                (_, 0) => out[po] += a[pa..].iter().step_by(ia).take(n).fold(T::zero(), |s, &x| s + x),
                _ => {
                    out[po..].iter_mut().step_by(io).zip(a[pa..].iter().step_by(ia)).take(n).for_each(|(o, &x)| *o += x)
                }
            }
            for x in (0..last).rev() {
                idx[x] += 1;
                pa += sa[x];
                po += so[x];
                if idx[x] < sizes[x] {
                    break;
                }
                idx[x] = 0;
                pa -= sa[x] * sizes[x];
                po -= so[x] * sizes[x];
            }
        }
    }
}

/// `Σ a[i]` in [`LANES`] partial sums, added in order at the end.
struct Sum<'a, T> {
    a: &'a [T],
}

impl<T: Elem> pulp::WithSimd for Sum<'_, T> {
    type Output = T;

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) -> T {
        let mut acc = [T::zero(); LANES];
        let chunks = self.a.chunks_exact(LANES);
        let rest = chunks.remainder();
        for x in chunks {
            for l in 0..LANES {
                acc[l] += x[l];
            }
        }
        rest.iter().fold(acc.iter().fold(T::zero(), |s, &x| s + x), |s, &x| s + x)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use crate::elem::c64;
    use crate::kernel::{ContractSpec, contract};
    use crate::reference::reference_labels;
    use crate::tensor::Tensor;

    /// The label lists of `a`, `b` and the output for a random spec: `n` labels (of sizes
    /// `sizes`), each in `a`, `b` or both, kept in the output or summed, in orders drawn
    /// from `perm`.
    fn labels(roles: &[u8], perm: u64) -> [Vec<u32>; 3] {
        let mut p = perm;
        let mut shuffle = |mut l: Vec<u32>| -> Vec<u32> {
            for i in (1..l.len()).rev() {
                l.swap(i, (p % (i as u64 + 1)) as usize);
                p = (p / (i as u64 + 1)) ^ p.rotate_left(17);
            }
            l
        };
        let pick = |f: &dyn Fn(u8) -> bool| (0..roles.len() as u32).filter(|&c| f(roles[c as usize])).collect();
        // Role: bit 0 in a, bit 1 in b (never neither), bit 2 in the output.
        let a = shuffle(pick(&|r| r & 1 == 1));
        let b = shuffle(pick(&|r| r & 2 == 2));
        let out = shuffle(pick(&|r| r & 4 == 4));
        [a, b, out]
    }

    proptest! {
        // (About one case in six is a reduction the kernel takes; the others check that
        // declining leaves the other kernels' results.)
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// Random reductions (output labels of 1 to 4 in `a`, `b` or both, summed labels in
        /// either or both, every order), complex, conjugated or not: the kernel equals
        /// `reference_labels` where it is chosen, and a pool of two threads gives the same
        /// bits as one.
        #[test]
        fn reductions_equal_the_reference_and_one_thread(
            roles in proptest::collection::vec(1u8..8, 3..8),
            dims in proptest::collection::vec(1usize..12, 8),
            perm in any::<u64>(),
            conj in 0u32..4,
        ) {
            let [a, b, out] = labels(&roles, perm);
            // Output labels short, so that the output often fits; a label in neither
            // operand (role 4) broadcasts (both strides 0). The reference loops over every
            // assignment of all labels, so their product is bounded.
            let sizes: Vec<usize> = (0..roles.len())
                .map(|c| if roles[c] & 4 == 4 { dims[c].min(4) } else { 3 * dims[c] + 4 })
                .collect();
            prop_assume!(sizes.iter().product::<usize>() <= 1 << 18);
            let spec = ContractSpec::new(&a, &b, &out, &sizes).unwrap().with_conj([conj & 1 == 1, conj & 2 == 2]);
            let shape = |l: &[u32]| l.iter().map(|&c| sizes[c as usize]).collect::<Vec<_>>();
            let mut x = 0.0f64;
            let mut next = |_: &[usize]| {
                x += 1.0;
                c64::new((0.37 * x).sin(), (0.11 * x).cos())
            };
            let ta = Tensor::from_fn(shape(&a), &mut next).unwrap();
            let tb = Tensor::from_fn(shape(&b), &mut next).unwrap();
            let chosen = super::ReducePlan::new(spec.a_labels(), spec.b_labels(), spec.out_labels(), spec.sizes());
            let got = contract(&spec, &ta, &tb);
            let ca = if conj & 1 == 1 { ta.map(|x| x.conj()) } else { ta.clone() };
            let cb = if conj & 2 == 2 { tb.map(|x| x.conj()) } else { tb.clone() };
            let want = reference_labels(&[(&ca, &a[..]), (&cb, &b[..])], &out, &sizes).unwrap();
            let err = got.max_abs_diff(&want).unwrap();
            prop_assert!(err <= 1e-10 * (1.0 + want.max_abs()), "{:?}: {}", spec, err);
            if let Some(p) = chosen {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
                let two = pool.install(|| p.run(ta.data(), tb.data(), spec.conj()));
                prop_assert_eq!(&two[..], got.data(), "{:?}: two threads differ from one", spec);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Batches of dot products: up to three kept labels (sizes 0 to 5, so empty and
        /// size-1 axes too) in random orders in `a`, `b` and the output, each in `a`, `b`
        /// or both (a broadcast), before one or two summed labels in one order in both
        /// operands; complex, conjugated or not. `contract` takes the row kernel when the
        /// summed run is long enough and equals the reference; a pool of two threads gives
        /// one thread's bits.
        #[test]
        fn row_dots_equal_the_reference_and_one_thread(
            kept in proptest::collection::vec((0usize..6, 1u8..4), 0..=3),
            summed in proptest::collection::vec(1usize..40, 1..=2),
            perm in any::<u64>(),
            conj in 0u32..4,
        ) {
            let k = kept.len() as u32;
            let sizes: Vec<usize> = kept.iter().map(|&(d, _)| d).chain(summed.iter().copied()).collect();
            let tail: Vec<u32> = (k..sizes.len() as u32).collect();
            let [_, _, order] = labels(&vec![7u8; kept.len()], perm);
            let [_, _, order_b] = labels(&vec![7u8; kept.len()], perm.rotate_left(23));
            let [_, _, out] = labels(&vec![7u8; kept.len()], perm.rotate_left(41));
            let side = |l: &[u32], bit: u8| l.iter().copied().filter(|&c| kept[c as usize].1 & bit != 0).chain(tail.iter().copied()).collect::<Vec<u32>>();
            let (a, b) = (side(&order, 1), side(&order_b, 2));
            let spec = ContractSpec::new(&a, &b, &out, &sizes).unwrap().with_conj([conj & 1 == 1, conj & 2 == 2]);
            let shape = |l: &[u32]| l.iter().map(|&c| sizes[c as usize]).collect::<Vec<_>>();
            let mut x = 0.0f64;
            let mut next = |_: &[usize]| {
                x += 1.0;
                c64::new((0.37 * x).sin(), (0.11 * x).cos())
            };
            let ta = Tensor::from_fn(shape(&a), &mut next).unwrap();
            let tb = Tensor::from_fn(shape(&b), &mut next).unwrap();
            let plan = super::RowDotPlan::new(spec.a_labels(), spec.b_labels(), spec.out_labels(), spec.sizes());
            let run: usize = summed.iter().product();
            // A kept label of size above 1 in `a` alone and one in `b` alone: a GEMM.
            let alone = |bit: u8| kept.iter().any(|&(d, s)| d > 1 && s == bit);
            let gemm = alone(1) && alone(2);
            prop_assert_eq!(plan.is_some(), run >= super::ROW_DOT_MIN_RUN && !gemm, "{:?}", spec);
            let got = contract(&spec, &ta, &tb);
            let ca = if conj & 1 == 1 { ta.map(|x| x.conj()) } else { ta.clone() };
            let cb = if conj & 2 == 2 { tb.map(|x| x.conj()) } else { tb.clone() };
            let want = reference_labels(&[(&ca, &a[..]), (&cb, &b[..])], &out, &sizes).unwrap();
            let err = got.max_abs_diff(&want).unwrap();
            prop_assert!(err <= 1e-10 * (1.0 + want.max_abs()), "{:?}: {}", spec, err);
            if let Some(p) = plan {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
                let two = pool.install(|| p.run(ta.data(), tb.data(), spec.conj()));
                prop_assert_eq!(&two[..], got.data(), "{:?}: two threads differ from one", spec);
            }
        }

        /// One-operand sums over every subset and order of up to four labels (sizes 0 to
        /// 6: empty and size-1 axes, gathered outputs), complex: `kernel::unary` equals the
        /// reference, and takes the sum kernel whenever a label of size above 1 is summed.
        #[test]
        fn sums_in_the_operands_order_equal_the_reference(
            dims in proptest::collection::vec(0usize..7, 1..=4),
            keep in proptest::collection::vec(any::<bool>(), 4),
            perm in any::<u64>(),
        ) {
            let n = dims.len();
            let [a, _, _] = labels(&vec![1u8; n], perm);
            let [_, _, order] = labels(&vec![4u8; n], perm.rotate_left(29));
            let out: Vec<u32> = order.into_iter().filter(|&c| keep[c as usize]).collect();
            let spec = crate::kernel::UnarySpec::new(&a, &out, &dims).unwrap();
            let summing = a.iter().any(|&c| !out.contains(&c) && dims[c as usize] != 1);
            prop_assert_eq!(super::SumPlan::new(spec.a_labels(), spec.out_labels(), spec.sizes()).is_some(), summing);
            let mut x = 0.0f64;
            let ta = Tensor::from_fn(spec.a_shape(), |_| {
                x += 1.0;
                c64::new((0.29 * x).sin(), (0.13 * x).cos())
            })
            .unwrap();
            let got = crate::kernel::unary(&spec, &ta);
            let want = reference_labels(&[(&ta, spec.a_labels())], spec.out_labels(), spec.sizes()).unwrap();
            let err = got.max_abs_diff(&want).unwrap();
            prop_assert!(err <= 1e-12 * (1.0 + want.max_abs()), "{:?}: {}", spec, err);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// One-operand sums cut over two threads: one to four labels, each short (0 to 6)
        /// or long (up to 300, so that a cut innermost row is long enough), in every order,
        /// any subset kept in any order; float64 and complex. A cut of the kept axes gives
        /// one thread's bits; a cut of a summed axis equals the reference to rounding.
        #[test]
        fn sums_on_two_threads_equal_one_thread(
            dims in proptest::collection::vec(prop_oneof![0usize..7, 60usize..300], 1..=4),
            keep in proptest::collection::vec(any::<bool>(), 4),
            perm in any::<u64>(),
        ) {
            prop_assume!(dims.iter().product::<usize>() <= 1 << 17);
            let n = dims.len();
            let [a, _, _] = labels(&vec![1u8; n], perm);
            let [_, _, order] = labels(&vec![4u8; n], perm.rotate_left(29));
            let out: Vec<u32> = order.into_iter().filter(|&c| keep[c as usize]).collect();
            let Some(plan) = super::SumPlan::new(&a, &out, &dims) else {
                return Ok(()); // nothing summed (the test above checks the choice)
            };
            let shape: Vec<usize> = a.iter().map(|&c| dims[c as usize]).collect();
            let mut x = 0.0f64;
            let t = Tensor::from_fn(shape.clone(), |_| {
                x += 1.0;
                c64::new((0.29 * x).sin(), (0.13 * x).cos())
            })
            .unwrap();
            let re: Tensor<f64> = Tensor::from_parts(&shape, t.data().iter().map(|z| z.re).collect());
            let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
            let one = (plan.run(t.data()), plan.run(re.data()));
            let two = pool.install(|| (plan.run(t.data()), plan.run(re.data())));
            match plan.cut(2) {
                super::SumCut::Summed { .. } => {
                    // Each order of a sum of `terms` entries of modulus at most √2 is
                    // within `terms` roundings of the exact sum.
                    let terms = (t.data().len() / want_len(&out, &dims)) as f64;
                    let tol = 4.0 * f64::EPSILON * terms;
                    let want = reference_labels(&[(&t, &a[..])], &out, &dims).unwrap();
                    let got = Tensor::from_parts(want.shape(), two.0.clone());
                    let err = got.max_abs_diff(&want).unwrap();
                    prop_assert!(err <= tol * (1.0 + want.max_abs()), "{:?} -> {:?}: {}", a, out, err);
                    let want = reference_labels(&[(&re, &a[..])], &out, &dims).unwrap();
                    let got = Tensor::from_parts(want.shape(), two.1.clone());
                    let err = got.max_abs_diff(&want).unwrap();
                    prop_assert!(err <= tol * (1.0 + want.max_abs()), "{:?} -> {:?}: {}", a, out, err);
                }
                _ => {
                    prop_assert_eq!(&one.0, &two.0, "{:?} -> {:?}: two threads differ from one", &a, &out);
                    prop_assert_eq!(&one.1, &two.1, "{:?} -> {:?}: two threads differ from one", &a, &out);
                }
            }
        }
    }

    /// The elements of an output of labels `out`.
    fn want_len(out: &[u32], dims: &[usize]) -> usize {
        out.iter().map(|&c| dims[c as usize]).product()
    }

    /// The cut a sum takes on two threads: the output's outermost axis when it has a long
    /// enough piece per thread, else a summed axis when the output is small, never for a
    /// small operand or one thread.
    #[test]
    fn sums_cut_the_output_when_they_can() {
        use super::SumCut::{Kept, Summed, Whole};
        let cut = |a: &[u32], out: &[u32], s: &[usize], threads| super::SumPlan::new(a, out, s).unwrap().cut(threads);
        let s = [1000, 1000, 8];
        assert!(matches!(cut(&[0, 1], &[1], &s, 2), Kept { axis: 1, .. }), "ij->j: the columns");
        assert!(matches!(cut(&[0, 1], &[0], &s, 2), Kept { axis: 0, .. }), "ij->i: the rows");
        assert!(matches!(cut(&[0, 1], &[], &s, 2), Summed { .. }), "ij->: the sum itself");
        assert!(matches!(cut(&[0, 2], &[2], &s, 2), Summed { axis: 0, .. }), "8 columns: the rows");
        assert_eq!(cut(&[0, 1], &[1], &s, 1), Whole);
        assert_eq!(cut(&[0, 1], &[1], &[4, 4], 2), Whole, "16 elements");
    }

    /// The queens network's `dA` transposes (the factor's labels batch labels, or between
    /// the summed ones) are reductions; larger outputs and short sums are not.
    #[test]
    fn small_factors_gradients_are_reductions() {
        let s = [3usize; 14];
        let take = |a: &[u32], b: &[u32], out: &[u32]| super::ReducePlan::new(a, b, out, &s).is_some();
        let big: Vec<u32> = (0..13).collect();
        // `ab,cdefgabhijklm->abcdefghijklm`'s `dA`: (dC, B) -> ab.
        let b: Vec<u32> = [2, 3, 4, 5, 6, 0, 1, 7, 8, 9, 10, 11, 12].to_vec();
        assert!(take(&big, &b, &[0, 1]));
        assert!(take(&big, &big, &[]), "a long dot product");
        assert!(!take(&big, &b, &[0, 1, 2]), "27 outputs");
        assert!(!take(&[0, 1, 2], &[0, 1, 2], &[0]), "9 terms");
    }
}
