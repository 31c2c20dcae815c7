//! The element-wise kernel: binary contractions that sum nothing (`ij,ij->ij`, broadcasts
//! such as `ij,j->ij`, outer products, any permutation of the output), where each output
//! element is one product `op(a)·op(b)`.
//!
//! Why a kernel of its own: the direct loop zeroes its output and then accumulates into it
//! (a zeroing pass and a read of the output besides the write), and the GEMM path would
//! run one `m × 1 × 1` GEMM per loop entry. Here the output comes unzeroed from the buffer
//! pool and every element is written once, so the memory traffic is the two operands read
//! and the output written, nothing else: no permutation copy, no temporary (conjugation is
//! applied in the loop).
//!
//! Input invariants ([`ElementwisePlan::new`] checks them): no tensor repeats a label, and
//! every label of `a` and `b` is an output label. The loop runs over the output's labels
//! in its order (row-major, so the output is written contiguously); axes of size 1 are
//! dropped and neighbouring axes fused wherever all three tensors step over them as over
//! one, so `ij,ij->ij` is one loop over all elements, which the compiler vectorizes.
//! Rows that gather an operand (a stride above one along the innermost axis) are written
//! in tiles of rows by columns, so that the gathered cache lines serve several rows.
//! Short rows (queens' rows of 3) are written by `product_tiles.rs`, in blocks of the
//! output's and the large operand's innermost axes, as a transpose is.
//! Outputs of [`PAR_ELEMENTWISE_MIN_ELEMENTS`] or more are cut into row-aligned chunks
//! over the current rayon pool's threads (inside a pool of more than one thread).
//!
//! The checked forms scan each piece of the output for values that left the finite range
//! right after writing it, while it is in cache (`run_scanned`); `run_summing` also sums
//! the broadcast operand along the labels the other lacks as it reads it (a broadcast
//! product's gradient for a scalar cotangent).
//!
//! Cost: `O(|out|)` multiplications, `|a| + |b| + |out|` elements of memory traffic.

use smallvec::SmallVec;

use crate::buffer::overwritten;
use crate::elem::Elem;
use crate::product_tiles::{Loop, run_tiles};
use crate::scan::{RangeScan, SliceScan};

/// Outputs of at least this many elements are written by the threads of the current
/// rayon pool: `2^17` elements take about 0.1 ms on one core, many times a fork and join
/// on threads already awake (an evaluation's threads spin between its steps). The queens
/// network's steps of `3^11` and `3^12` elements ran on one thread at `2^20`
/// (`docs/PERFORMANCE.md`, q2t40).
pub(crate) const PAR_ELEMENTWISE_MIN_ELEMENTS: usize = 1 << 17;

/// Columns per tile of [`ElementwisePlan::rows_in_tiles`]: a block's gathered cache lines
/// (one per element and row of the gathered operand at most) stay in the first-level
/// cache for a tile's rows.
const GATHER_BLOCK: usize = 128;

/// Rows per tile of [`ElementwisePlan::rows_in_tiles`]: the rows that reuse a block's
/// gathered lines before they leave the cache.
const GATHER_ROWS: usize = 64;

/// Rows shorter than this (of a loop of two axes or more) are written in blocks of the
/// output's and the large operand's innermost axes (`product_tiles.rs`).
const SHORT_ROW: usize = 16;

/// Elements of a unit that [`ElementwisePlan::rows_scanned`] writes and then scans: 16
/// KiB of `f64`, so the scan reads it from the first-level cache.
const SCAN_UNIT: usize = 1 << 11;

/// Per element of the output, in `GemmPlan::cost`'s units (about nanoseconds): a product
/// over contiguous rows runs at about the speed of a copy (0.92 ms for `3^13` elements).
const ELEMENT_COST: f64 = 0.6;

/// What rows of length 1 add per element, falling as the square root of the rows' length
/// (the row's set-up and the jump to the next). Fitted to steps of `3^13` elements, a
/// `3 × 3` factor times a large operand, written row by row: rows of 27 took 2.1 ms and
/// of 81 1.5, against 0.92 over contiguous rows.
const ROW_COST: f64 = 4.3;

/// What short rows, written in blocks (`product_tiles.rs`), add per element: the blocks'
/// offset tables read per element, and for a permuted output the large operand's lines
/// that a tile reads beside its output (`docs/PERFORMANCE.md`, q48).
const SHORT_ROW_COST: f64 = 0.9;

/// Operands up to this many elements stay in the first caches: gathering one costs no more
/// than reading it in order.
const CACHED_ELEMENTS: usize = 1 << 12;

/// Pieces of a row cut over threads are multiples of this many elements long (a 64-byte
/// cache line of `f64`), so that two threads share at most one line at each cut.
const PIECE_ALIGN: usize = 8;

/// The fused loop of an element-wise contraction: per loop axis its size and the strides
/// of `a`, `b` and the output (0 where a tensor lacks the axis).
#[derive(Debug)]
pub(crate) struct ElementwisePlan {
    sizes: SmallVec<[usize; 8]>,
    strides: [SmallVec<[usize; 8]>; 3],
    out_len: usize,
}

/// Whether `a, b -> out` is an element-wise product: no tensor repeats a label and every
/// label of `a` and `b` is one of `out`'s (nothing is summed). `pair.rs` asks it of the
/// large operand's gradient.
pub(crate) fn sums_nothing(a: &[u32], b: &[u32], out: &[u32]) -> bool {
    distinct_labels(&[a, b, out]) && a.iter().chain(b).all(|c| out.contains(c))
}

/// Whether no tensor of `tensors` repeats a label (no diagonal is read or written), the
/// first test of every kernel that walks its tensors by strides alone.
pub(crate) fn distinct_labels(tensors: &[&[u32]]) -> bool {
    tensors.iter().all(|l| l.iter().enumerate().all(|(i, c)| !l[..i].contains(c)))
}

/// The loop over the labels of `outer` (those of size 1 left out) that walks the three
/// tensors labelled `tensors` (distinct labels, row-major, sizes `sizes[label]`): the axis
/// sizes and each tensor's stride per axis, an axis joined to the previous one when every
/// tensor steps over the previous axis exactly as over its whole extent. `pair.rs`'s
/// loop is planned the same way.
pub(crate) fn fused_axes(
    tensors: [&[u32]; 3],
    outer: &[u32],
    sizes: &[usize],
) -> (SmallVec<[usize; 8]>, [SmallVec<[usize; 8]>; 3]) {
    let order: SmallVec<[u32; 8]> = outer.iter().copied().filter(|&c| sizes[c as usize] != 1).collect();
    let raw = tensors.map(|l| strides_along(l, sizes, &order));
    let mut axes: SmallVec<[usize; 8]> = SmallVec::new();
    let mut strides: [SmallVec<[usize; 8]>; 3] = Default::default();
    for (i, &c) in order.iter().enumerate() {
        let d = sizes[c as usize];
        let fuses = !axes.is_empty() && (0..3).all(|t| *strides[t].last().expect("an axis") == raw[t][i] * d);
        if fuses {
            *axes.last_mut().expect("an axis") *= d;
            for (s, r) in strides.iter_mut().zip(&raw) {
                *s.last_mut().expect("an axis") = r[i];
            }
        } else {
            axes.push(d);
            for (s, r) in strides.iter_mut().zip(&raw) {
                s.push(r[i]);
            }
        }
    }
    (axes, strides)
}

/// Row-major strides of `labels` (distinct) with sizes `sizes[label]`, per label of `order`
/// (0 where `labels` lacks it); `reduce`'s plans use it too.
pub(crate) fn strides_along(labels: &[u32], sizes: &[usize], order: &[u32]) -> SmallVec<[usize; 8]> {
    let mut own: SmallVec<[usize; 8]> = SmallVec::from_elem(0, labels.len());
    let mut s = 1usize;
    for (i, &c) in labels.iter().enumerate().rev() {
        own[i] = s;
        s *= sizes[c as usize];
    }
    order.iter().map(|c| labels.iter().position(|l| l == c).map_or(0, |p| own[p])).collect()
}

impl ElementwisePlan {
    /// The plan for `a, b -> out` if it sums nothing and no tensor repeats a label.
    pub(crate) fn new(a: &[u32], b: &[u32], out: &[u32], sizes: &[usize]) -> Option<Self> {
        if !sums_nothing(a, b, out) {
            return None;
        }
        let (axes, strides) = fused_axes([a, b, out], out, sizes);
        Some(ElementwisePlan { sizes: axes, strides, out_len: out.iter().map(|&c| sizes[c as usize]).product() })
    }

    /// The plan of a one-operand broadcast `a -> out`: every label of `a` in `out`, in
    /// `a`'s order, and no label repeated (`j->ij`, `i->ij`, `jk->ijk`: the gradient of a
    /// broadcast product with respect to its large operand, for a scalar cotangent).
    ///
    /// Why: the direct loop zeroed the output and then added the operand into it, two
    /// passes over an output many times the operand's size; `a->ab`, a row of one value
    /// each, took three times the product `ab,a->ab` that writes as much. As a product with
    /// a scalar 1 (each element `x`, exactly) it is written once, row by row: a copy of the
    /// operand's row or a fill of one value, over the pool's threads when large.
    pub(crate) fn broadcast(a: &[u32], out: &[u32], sizes: &[usize]) -> Option<Self> {
        let in_order = out.iter().filter(|c| a.contains(c)).eq(a.iter());
        if in_order { Self::new(a, &[], out, sizes) } else { None }
    }

    /// `out = a` broadcast along the labels `a` lacks ([`Self::broadcast`]'s plan).
    pub(crate) fn run_broadcast<T: Elem>(&self, a: &[T]) -> Vec<T> {
        self.run_with(a, &[T::one()], |x: T, _| x, None).0
    }

    /// `out = x·op(a)`, `a` broadcast and permuted along the plan's labels (a plan of `a`
    /// alone, `Self::new(a, &[], out, sizes)`), `op` conjugating when `conj`; no product
    /// at all when `x` is `None` (a factor of 1), so each element is then `op` of `a`'s
    /// own bits. With `scan`, as [`Self::run_scanned`].
    pub(crate) fn run_times<T: Elem>(
        &self,
        a: &[T],
        x: Option<T>,
        conj: bool,
        scan: Option<SliceScan<T>>,
    ) -> (Vec<T>, RangeScan) {
        let one = [T::one()];
        match (x, conj && T::IS_COMPLEX) {
            (None, false) => self.run_with(a, &one, |v: T, _| v, scan),
            (None, true) => self.run_with(a, &one, |v: T, _| v.conj(), scan),
            (Some(x), false) => self.run_with(a, &one, move |v: T, _| x * v, scan),
            (Some(x), true) => self.run_with(a, &one, move |v: T, _| x * v.conj(), scan),
        }
    }

    /// The rows the kernel writes: their length (the fused innermost axis), their count,
    /// and the strides of `a` and `b` along them (0: broadcast, 1: contiguous, more: a
    /// gather), as [`Self::cost`] prices them.
    pub(crate) fn row_shape(&self) -> (usize, usize, [usize; 2]) {
        let n = self.sizes.last().copied().unwrap_or(1);
        let inner = |t: usize| self.strides[t].last().copied().unwrap_or(0);
        (n, self.out_len / n.max(1), [inner(0), inner(1)])
    }

    /// The estimated time of the step on operands of `lens` elements, in `GemmPlan::cost`'s
    /// units (about nanoseconds): per element of the output, [`ELEMENT_COST`] plus what its
    /// rows add. What `kernel::step_cost` and so `layout.rs` weigh label orders by.
    ///
    /// Short rows (written in blocks, [`Self::in_blocks`]) add [`SHORT_ROW_COST`]; other rows add
    /// [`ROW_COST`] over the square root of their length, a row that gathers an operand
    /// too large for the first caches counting as rows of one.
    pub(crate) fn cost(&self, lens: [usize; 2]) -> f64 {
        let (n, rows, strides) = self.row_shape();
        let gathers = strides.iter().zip(lens).any(|(&s, len)| s > 1 && len > CACHED_ELEMENTS);
        let per_row = if self.in_blocks() {
            SHORT_ROW_COST
        } else if gathers {
            ROW_COST
        } else {
            ROW_COST / (n as f64).sqrt()
        };
        (n * rows) as f64 * (ELEMENT_COST + per_row)
    }

    /// `out = op(a)·op(b)` element by element, `op` conjugating where `conj` says so.
    pub(crate) fn run<T: Elem>(&self, a: &[T], b: &[T], conj: [bool; 2]) -> Vec<T> {
        self.run_scanned(a, b, conj, None).0
    }

    /// [`Self::run`], and with `scan` the scan of the output, made unit by unit right
    /// after each unit is written ([`Self::rows_scanned`]) rather than by a pass after
    /// the call, which reads a large output back from memory.
    pub(crate) fn run_scanned<T: Elem>(
        &self,
        a: &[T],
        b: &[T],
        conj: [bool; 2],
        scan: Option<SliceScan<T>>,
    ) -> (Vec<T>, RangeScan) {
        match (conj[0] && T::IS_COMPLEX, conj[1] && T::IS_COMPLEX) {
            (false, false) => self.run_with(a, b, |x: T, y: T| x * y, scan),
            (true, false) => self.run_with(a, b, |x: T, y: T| x.conj() * y, scan),
            (false, true) => self.run_with(a, b, |x: T, y: T| x * y.conj(), scan),
            (true, true) => self.run_with(a, b, |x: T, y: T| x.conj() * y.conj(), scan),
        }
    }

    fn run_with<T: Elem, F: Fn(T, T) -> T + Sync>(
        &self,
        a: &[T],
        b: &[T],
        f: F,
        scan: Option<SliceScan<T>>,
    ) -> (Vec<T>, RangeScan) {
        // Every element is written once.
        let mut out = overwritten(self.out_len);
        if self.out_len == 0 {
            return (out, RangeScan::EMPTY);
        }
        let inner = self.sizes.last().copied().unwrap_or(1);
        let rows = self.out_len / inner;
        let threads = if self.out_len >= PAR_ELEMENTWISE_MIN_ELEMENTS && rayon::current_thread_index().is_some() {
            rayon::current_num_threads()
        } else {
            1
        };
        let merge = |x: RangeScan, y: RangeScan| x.merge(y);
        let scanned = if self.in_blocks() {
            let l = Loop { sizes: &self.sizes, strides: [&self.strides[0], &self.strides[1], &self.strides[2]] };
            run_tiles(&l, (a, b), &mut out, &f, threads, scan)
        } else if threads > 1 && rows >= 2 * threads {
            use rayon::prelude::*;
            let per_chunk = rows.div_ceil(4 * threads);
            out.par_chunks_mut(per_chunk * inner)
                .enumerate()
                .map(|(i, chunk)| self.rows_scanned(i * per_chunk, chunk, a, b, &f, scan))
                .reduce(|| RangeScan::EMPTY, merge)
        } else if threads > 1 {
            // Fewer rows than threads' worth of chunks: fused `ij,ij->ij` is one row of
            // every element, which whole-row chunks left to one thread. Each row is cut
            // into pieces of whole cache lines instead.
            use rayon::prelude::*;
            let pieces = (4 * threads).div_ceil(rows);
            let width = inner.div_ceil(pieces).next_multiple_of(PIECE_ALIGN);
            out.par_chunks_mut(inner)
                .enumerate()
                .map(|(r, row)| {
                    row.par_chunks_mut(width)
                        .enumerate()
                        .map(|(p, piece)| self.piece_scanned(r, p * width, piece, a, b, &f, scan))
                        .reduce(|| RangeScan::EMPTY, merge)
                })
                .reduce(|| RangeScan::EMPTY, merge)
        } else {
            self.rows_scanned(0, &mut out, a, b, &f, scan)
        };
        (out, scanned)
    }

    /// Whether the product is written in blocks (`product_tiles.rs`): rows shorter than
    /// [`SHORT_ROW`] in a loop of two axes or more.
    ///
    /// Why: row by row, a row of three elements paid the row's set-up per three elements
    /// and, where the output permutes the large operand, read a far-apart cache line of it
    /// per element, whose neighbours later rows reached only after many others; panels of
    /// one run of the next axis (the loop before the blocks) helped only where that axis
    /// stepped less through the operands.
    fn in_blocks(&self) -> bool {
        self.sizes.len() >= 2 && self.sizes.last().is_some_and(|&n| n < SHORT_ROW)
    }

    /// [`Self::rows`], and with `scan` the scan of `dst`, each unit of about
    /// [`SCAN_UNIT`] elements scanned right after it is written, while it is in the first
    /// caches: whole rows, or pieces of rows longer than a unit. Rows written in tiles
    /// (a gather) go by at least a tile's rows, so that their gathered lines still serve
    /// a tile; a long row that gathers goes whole. Each element is written as without
    /// `scan`, so the units change no bit.
    fn rows_scanned<T: Elem, F: Fn(T, T) -> T>(
        &self,
        first: usize,
        dst: &mut [T],
        a: &[T],
        b: &[T],
        f: &F,
        scan: Option<SliceScan<T>>,
    ) -> RangeScan {
        let Some(scan) = scan else {
            self.rows(first, dst, a, b, f);
            return RangeScan::EMPTY;
        };
        let Some(last) = self.sizes.len().checked_sub(1) else {
            self.rows(first, dst, a, b, f);
            return scan(dst);
        };
        let n = self.sizes[last];
        let gathers = self.strides[0][last] > 1 || self.strides[1][last] > 1;
        if n > SCAN_UNIT && !gathers {
            let mut s = RangeScan::EMPTY;
            for (r, row) in dst.chunks_exact_mut(n).enumerate() {
                s = s.merge(self.piece_scanned(first + r, 0, row, a, b, f, Some(scan)));
            }
            return s;
        }
        let mut per = (SCAN_UNIT / n).max(1);
        if gathers && n >= GATHER_BLOCK {
            per = per.max(GATHER_ROWS);
        }
        let mut s = RangeScan::EMPTY;
        for (u, unit) in dst.chunks_mut(per * n).enumerate() {
            self.rows(first + u * per, unit, a, b, f);
            s = s.merge(scan(unit));
        }
        s
    }

    /// [`Self::piece`], and with `scan` the scan of `dst`, in units of [`SCAN_UNIT`]
    /// elements each scanned right after it is written.
    #[allow(clippy::too_many_arguments, reason = "`piece`'s arguments and the scan")]
    fn piece_scanned<T: Elem, F: Fn(T, T) -> T>(
        &self,
        row: usize,
        start: usize,
        dst: &mut [T],
        a: &[T],
        b: &[T],
        f: &F,
        scan: Option<SliceScan<T>>,
    ) -> RangeScan {
        let Some(scan) = scan else {
            self.piece(row, start, dst, a, b, f);
            return RangeScan::EMPTY;
        };
        let mut s = RangeScan::EMPTY;
        for (k, unit) in dst.chunks_mut(SCAN_UNIT).enumerate() {
            self.piece(row, start + k * SCAN_UNIT, unit, a, b, f);
            s = s.merge(scan(unit));
        }
        s
    }

    /// Writes columns `start..start + dst.len()` of row `row` into `dst`.
    fn piece<T: Elem, F: Fn(T, T) -> T>(&self, row: usize, start: usize, dst: &mut [T], a: &[T], b: &[T], f: &F) {
        if crate::stop::requested() {
            return; // the evaluation is ending with an error; the output is discarded
        }
        let Some(last) = self.sizes.len().checked_sub(1) else {
            dst[0] = f(a[0], b[0]);
            return;
        };
        let (ia, ib) = (self.strides[0][last], self.strides[1][last]);
        let at = RowCursor::at(self, row);
        run(dst, (a, at.pa + start * ia, ia), (b, at.pb + start * ib, ib), f);
    }

    /// Writes the rows (runs of the innermost axis) from `first` on into `dst`, which
    /// holds a whole number of them.
    fn rows<T: Elem, F: Fn(T, T) -> T>(&self, first: usize, dst: &mut [T], a: &[T], b: &[T], f: &F) {
        let Some(last) = self.sizes.len().checked_sub(1) else {
            dst[0] = f(a[0], b[0]);
            return;
        };
        let n = self.sizes[last];
        let [sa, sb, so] = &self.strides;
        let (ia, ib) = (sa[last], sb[last]);
        if (ia > 1 || ib > 1) && n >= GATHER_BLOCK && dst.len() > n {
            return self.rows_in_tiles(first, dst, a, b, f);
        }
        let mut at = RowCursor::at(self, first);
        debug_assert!(last == 0 || so[last - 1] == n, "output rows are contiguous");
        // Elements written since the stop flag was last read.
        let mut unchecked = 0usize;
        for row in dst.chunks_exact_mut(n) {
            unchecked += n;
            if unchecked >= crate::stop::COPY_CHECK_ELEMENTS {
                unchecked = 0;
                if crate::stop::requested() {
                    return; // the evaluation is ending with an error; the output is discarded
                }
            }
            run(row, (a, at.pa, ia), (b, at.pb, ib), f);
            at.advance(self);
        }
    }

    /// [`Self::rows`] for rows that gather an operand (a stride above one along the
    /// innermost axis), in tiles of [`GATHER_ROWS`] rows by [`GATHER_BLOCK`] columns.
    ///
    /// Why: row by row, each row's gather touches one cache line per element of the
    /// gathered operand, and the rows that follow touch the same lines again only after
    /// a whole row's worth of others (`lm_batch`'s `ab,acd->cdba`, the transpose of its
    /// `ab,cdba->acd`: 112 rows of 1996, each gathering both operands, took twice its
    /// step). Within a tile, the gathered lines of one block of columns serve every row
    /// of the tile while they are in the first-level cache, as in a tiled transpose; the
    /// output is still written in runs of a block.
    fn rows_in_tiles<T: Elem, F: Fn(T, T) -> T>(&self, first: usize, dst: &mut [T], a: &[T], b: &[T], f: &F) {
        let last = self.sizes.len() - 1;
        let n = self.sizes[last];
        let (ia, ib) = (self.strides[0][last], self.strides[1][last]);
        let mut at = RowCursor::at(self, first);
        let mut offsets: SmallVec<[(usize, usize); GATHER_ROWS]> = SmallVec::new();
        for tile in dst.chunks_mut(GATHER_ROWS * n) {
            if crate::stop::requested() {
                return; // the evaluation is ending with an error; the output is discarded
            }
            // Each row's offsets in `a` and `b`.
            offsets.clear();
            for _ in 0..tile.len() / n {
                offsets.push((at.pa, at.pb));
                at.advance(self);
            }
            for start in (0..n).step_by(GATHER_BLOCK) {
                let len = GATHER_BLOCK.min(n - start);
                for (row, &(ra, rb)) in tile.chunks_exact_mut(n).zip(&offsets) {
                    let (qa, qb) = (ra + start * ia, rb + start * ib);
                    run(&mut row[start..start + len], (a, qa, ia), (b, qb, ib), f);
                }
            }
        }
    }
}

impl ElementwisePlan {
    /// Whether [`Self::run_summing`] takes this plan: `a` laid out as the output (every
    /// output label, in its order) and rows that read `b` in order or not at all.
    pub(crate) fn sums_a_along(&self) -> bool {
        let along_b = self.strides[1].last().copied();
        self.strides[0] == self.strides[2] && matches!(along_b, Some(0 | 1))
    }

    /// For a plan that [`Self::sums_a_along`]: the product `out = a·b` with its scan, and
    /// beside it `a` summed over the labels `b` lacks, in `b`'s layout (`b_len` elements),
    /// each piece of `a` added right after the product read it, so `a` is read once for
    /// both. `None` for another plan, or when the threads' partial sums would be large
    /// beside the output (each thread's chunk sums into a buffer of `b`'s size).
    ///
    /// Why: for a scalar cotangent the gradient of a broadcast product's small operand is
    /// this sum (`ij,j->ij`: `Σ_i a`), and in a pass of its own it read `a` again.
    ///
    /// Sums: in row order within a chunk of rows, the chunks' sums added in chunk order,
    /// so a thread count gives the same bits on every run. Products: `b·a` with `b_first`
    /// (the order of the plan this one stands in for: a NaN's sign and payload depend on it).
    pub(crate) fn run_summing<T: Elem>(
        &self,
        a: &[T],
        b: &[T],
        b_len: usize,
        b_first: bool,
        scan: SliceScan<T>,
    ) -> Option<(Vec<T>, Vec<T>, RangeScan)> {
        if b_first {
            self.run_summing_with(a, b, b_len, |x: T, y: T| y * x, scan)
        } else {
            self.run_summing_with(a, b, b_len, |x: T, y: T| x * y, scan)
        }
    }

    fn run_summing_with<T: Elem, F: Fn(T, T) -> T + Sync>(
        &self,
        a: &[T],
        b: &[T],
        b_len: usize,
        f: F,
        scan: SliceScan<T>,
    ) -> Option<(Vec<T>, Vec<T>, RangeScan)> {
        if !self.sums_a_along() {
            return None;
        }
        let mut out = overwritten(self.out_len);
        let n = self.sizes.last().copied().unwrap_or(1);
        if self.out_len == 0 {
            return Some((out, vec![T::zero(); b_len], RangeScan::EMPTY));
        }
        let rows = self.out_len / n;
        let threads = if self.out_len >= PAR_ELEMENTWISE_MIN_ELEMENTS && rayon::current_thread_index().is_some() {
            rayon::current_num_threads()
        } else {
            1
        };
        if threads == 1 {
            let mut sum = vec![T::zero(); b_len];
            let s = self.rows_summing(0, &mut out, (a, b, &f), &mut sum, scan);
            return Some((out, sum, s));
        }
        let chunks = 4 * threads;
        if rows < 2 * threads || chunks * b_len > self.out_len / 4 {
            return None;
        }
        use rayon::prelude::*;
        let per_chunk = rows.div_ceil(chunks);
        let parts: Vec<(Vec<T>, RangeScan)> = out
            .par_chunks_mut(per_chunk * n)
            .enumerate()
            .map(|(i, chunk)| {
                let mut sum = vec![T::zero(); b_len];
                let s = self.rows_summing(i * per_chunk, chunk, (a, b, &f), &mut sum, scan);
                (sum, s)
            })
            .collect();
        let mut parts = parts.into_iter();
        let (mut sum, mut s) = parts.next().expect("a chunk");
        for (part, ps) in parts {
            sum.iter_mut().zip(&part).for_each(|(x, &y)| *x += y);
            s = s.merge(ps);
        }
        Some((out, sum, s))
    }

    /// [`Self::run_summing`]'s rows from `first` on into `dst` (a whole number of them),
    /// each cut into units of [`SCAN_UNIT`]: a unit's products, its scan, then its part of
    /// `a` added into `sum`. The plan has an axis (it [`Self::sums_a_along`] its last).
    fn rows_summing<T: Elem, F: Fn(T, T) -> T>(
        &self,
        first: usize,
        dst: &mut [T],
        (a, b, f): (&[T], &[T], &F),
        sum: &mut [T],
        scan: SliceScan<T>,
    ) -> RangeScan {
        let n = self.sizes.last().copied().unwrap_or(1);
        let ib = self.strides[1].last().copied().unwrap_or(0);
        let mut s = RangeScan::EMPTY;
        let mut at = RowCursor::at(self, first);
        for row in dst.chunks_exact_mut(n) {
            if crate::stop::requested() {
                return s; // the evaluation is ending with an error; the output is discarded
            }
            for (k, unit) in row.chunks_mut(SCAN_UNIT).enumerate() {
                let start = k * SCAN_UNIT;
                let x = &a[at.pa + start..at.pa + start + unit.len()];
                if ib == 1 {
                    let y = &b[at.pb + start..at.pb + start + unit.len()];
                    unit.iter_mut().zip(x).zip(y).for_each(|((o, &x), &y)| *o = f(x, y));
                    let into = &mut sum[at.pb + start..at.pb + start + unit.len()];
                    into.iter_mut().zip(x).for_each(|(o, &x)| *o += x);
                } else {
                    let y = b[at.pb];
                    unit.iter_mut().zip(x).for_each(|(o, &x)| *o = f(x, y));
                    sum[at.pb] += lanes_sum(x);
                }
                s = s.merge(scan(unit));
            }
            at.advance(self);
        }
        s
    }
}

/// The sum of `x` in eight partial sums (one would chain every addition), added in order.
fn lanes_sum<T: Elem>(x: &[T]) -> T {
    let mut part = [T::zero(); 8];
    let mut blocks = x.chunks_exact(8);
    for block in &mut blocks {
        for (p, &v) in part.iter_mut().zip(block) {
            *p += v;
        }
    }
    for (p, &v) in part.iter_mut().zip(blocks.remainder()) {
        *p += v;
    }
    part.iter().fold(T::zero(), |acc, &p| acc + p)
}

/// A row of an [`ElementwisePlan`] (a run of its innermost axis): the index of its outer
/// axes and the offsets in `a` and `b` that index gives.
struct RowCursor {
    idx: SmallVec<[usize; 8]>,
    pa: usize,
    pb: usize,
}

impl RowCursor {
    /// Row `first` of `plan`.
    fn at(plan: &ElementwisePlan, first: usize) -> Self {
        let last = plan.sizes.len() - 1;
        let mut at = RowCursor { idx: SmallVec::from_elem(0, last), pa: 0, pb: 0 };
        let mut r = first;
        for k in (0..last).rev() {
            at.idx[k] = r % plan.sizes[k];
            r /= plan.sizes[k];
            at.pa += at.idx[k] * plan.strides[0][k];
            at.pb += at.idx[k] * plan.strides[1][k];
        }
        at
    }

    /// Steps to the next row, the outer index counting in row-major order.
    #[inline]
    fn advance(&mut self, plan: &ElementwisePlan) {
        let [sa, sb, _] = &plan.strides;
        for k in (0..self.idx.len()).rev() {
            self.idx[k] += 1;
            self.pa += sa[k];
            self.pb += sb[k];
            if self.idx[k] < plan.sizes[k] {
                return;
            }
            self.pa -= sa[k] * plan.sizes[k];
            self.pb -= sb[k] * plan.sizes[k];
            self.idx[k] = 0;
        }
    }
}

/// `row[k] = f(a[pa + k·ia], b[pb + k·ib])` for every `k` of `row`.
fn run<T: Elem, F: Fn(T, T) -> T>(
    row: &mut [T],
    (a, pa, ia): (&[T], usize, usize),
    (b, pb, ib): (&[T], usize, usize),
    f: &F,
) {
    let n = row.len();
    match (ia, ib) {
        (1, 1) => row.iter_mut().zip(&a[pa..pa + n]).zip(&b[pb..pb + n]).for_each(|((o, &x), &y)| *o = f(x, y)),
        (0, 1) => row.iter_mut().zip(&b[pb..pb + n]).for_each(|(o, &y)| *o = f(a[pa], y)),
        (1, 0) => row.iter_mut().zip(&a[pa..pa + n]).for_each(|(o, &x)| *o = f(x, b[pb])),
        (0, 0) => row.fill(f(a[pa], b[pb])),
        // Strided reads as iterators: no bounds check per element.
        (0, _) => row.iter_mut().zip(b[pb..].iter().step_by(ib)).for_each(|(o, &y)| *o = f(a[pa], y)),
        (_, 0) => row.iter_mut().zip(a[pa..].iter().step_by(ia)).for_each(|(o, &x)| *o = f(x, b[pb])),
        _ => row
            .iter_mut()
            .zip(a[pa..].iter().step_by(ia))
            .zip(b[pb..].iter().step_by(ib))
            .for_each(|((o, &x), &y)| *o = f(x, y)),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::reference::{ramp_from, reference_labels};

    #[test]
    fn plans_fuse_axes_and_refuse_sums_and_diagonals() {
        // `ij,ij->ij`: one loop over all elements.
        let p = ElementwisePlan::new(&[0, 1], &[0, 1], &[0, 1], &[20, 30]).unwrap();
        assert_eq!((&p.sizes[..], &p.strides[0][..], &p.strides[1][..]), (&[600][..], &[1][..], &[1][..]));
        // `ij,j->ij`: `b` broadcast along `i`, so two axes.
        let p = ElementwisePlan::new(&[0, 1], &[1], &[0, 1], &[20, 30]).unwrap();
        assert_eq!((&p.sizes[..], &p.strides[1][..]), (&[20, 30][..], &[0, 1][..]));
        // A summed label, a diagonal: not element-wise.
        assert!(ElementwisePlan::new(&[0, 1], &[1], &[0], &[2, 3]).is_none());
        assert!(ElementwisePlan::new(&[0, 0], &[0], &[0], &[2]).is_none());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Products, broadcasts and outer products of up to four labels, one of them long
        /// enough for tiles, in random orders (so that either operand, or both, may be
        /// gathered along the output's innermost axis, which may be long or short), written
        /// whole and in two chunks cut at a random row (as the threads' chunks are): equal
        /// to the reference.
        #[test]
        fn gathered_rows_in_tiles_equal_the_reference(
            long in GATHER_BLOCK..2 * GATHER_BLOCK + 7,
            short in proptest::collection::vec(1usize..=5, 3),
            a in proptest::sample::subsequence(vec![0u32, 1, 2, 3], 1..=4).prop_shuffle(),
            b in proptest::sample::subsequence(vec![0u32, 1, 2, 3], 1..=4).prop_shuffle(),
            extra in proptest::sample::subsequence(vec![0u32, 1, 2, 3], 0..=4),
            order in Just(vec![0u32, 1, 2, 3]).prop_shuffle(),
            cut in 0.0f64..1.0,
        ) {
            let sizes = [long, short[0], short[1], short[2]];
            let out: Vec<u32> = order.into_iter().filter(|c| a.contains(c) || b.contains(c) || extra.contains(c)).collect();
            let shape = |l: &[u32]| l.iter().map(|&c| sizes[c as usize]).collect::<Vec<_>>();
            let (ta, tb) = (ramp_from(shape(&a), 0.5), ramp_from(shape(&b), 3.0));
            let plan = ElementwisePlan::new(&a, &b, &out, &sizes).expect("sums nothing");
            let got = plan.run(ta.data(), tb.data(), [false; 2]);
            let want = reference_labels(&[(&ta, &a[..]), (&tb, &b[..])], &out, &sizes).expect("the reference");
            prop_assert_eq!(&got[..], want.data());
            let n = plan.sizes.last().copied().unwrap_or(1);
            let rows = plan.out_len / n;
            let at = ((cut * rows as f64) as usize).min(rows) * n;
            let mut parts = vec![f64::NAN; plan.out_len];
            let (head, tail) = parts.split_at_mut(at);
            let f = |x: f64, y: f64| x * y;
            if !head.is_empty() {
                plan.rows(0, head, ta.data(), tb.data(), &f);
            }
            if !tail.is_empty() {
                plan.rows(at / n, tail, ta.data(), tb.data(), &f);
            }
            prop_assert_eq!(&parts[..], want.data());
            // Every row cut into pieces at two random columns, as threads cut few rows.
            let mut pieces = vec![f64::NAN; plan.out_len];
            let cuts = [((cut * n as f64) as usize).min(n), ((cut * cut * n as f64) as usize).min(n)];
            let (lo, hi) = (cuts[0].min(cuts[1]), cuts[0].max(cuts[1]));
            for (r, row) in pieces.chunks_exact_mut(n).enumerate() {
                let (head, rest) = row.split_at_mut(lo);
                let (mid, tail) = rest.split_at_mut(hi - lo);
                for (start, piece) in [(0, head), (lo, mid), (hi, tail)] {
                    if !piece.is_empty() {
                        plan.piece(r, start, piece, ta.data(), tb.data(), &f);
                    }
                }
            }
            prop_assert_eq!(&pieces[..], want.data());
        }
    }

    /// The cost ranks the queens steps' label orders as they were measured (a `3 × 3`
    /// factor times `3^13` elements, the factor's label `b` moved inward in the large
    /// operand): contiguous rows, then rows of 81, rows of 27, and rows of 3 in blocks.
    #[test]
    fn the_cost_ranks_row_lengths_as_measured() {
        let sizes = [3usize; 14];
        let out: Vec<u32> = (0..14).collect();
        let cost = |big: &[u32]| {
            let plan = ElementwisePlan::new(&[0, 1], big, &out, &sizes).expect("sums nothing");
            (plan.row_shape().0, plan.cost([9, 3usize.pow(13)]))
        };
        // `b` (label 1) second in the large operand, then at depths leaving 81, 27, 3 after it.
        let at = |depth: usize| {
            let mut big: Vec<u32> = (0..14).filter(|&c| c != 1).collect();
            big.insert(depth, 1);
            big
        };
        let (contiguous, r81, r27, r3) = (cost(&at(1)), cost(&at(9)), cost(&at(10)), cost(&at(12)));
        assert_eq!([contiguous.0, r81.0, r27.0, r3.0], [3usize.pow(12), 81, 27, 3]);
        assert!(contiguous.1 < r81.1 && r81.1 < r27.1 && r27.1 < r3.1, "{contiguous:?} {r81:?} {r27:?} {r3:?}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Products of a large operand of eleven axes of 3 (over the parallel threshold)
        /// and a small one of some of its labels, both in random orders, into a random
        /// order of the labels (queens' permuted element-wise steps, whose short rows go in
        /// blocks): equal to the reference, and on two threads to one thread bit for bit.
        #[test]
        fn permuted_short_rows_equal_the_reference_and_one_thread(
            big in Just((0u32..11).collect::<Vec<_>>()).prop_shuffle(),
            small in proptest::sample::subsequence((0u32..11).collect::<Vec<_>>(), 0..=7).prop_shuffle(),
            out in Just((0u32..11).collect::<Vec<_>>()).prop_shuffle(),
            swap in any::<bool>(),
        ) {
            let sizes = [3usize; 11];
            let shape = |l: &[u32]| l.iter().map(|&c| sizes[c as usize]).collect::<Vec<_>>();
            let (tb, ts) = (ramp_from(shape(&big), 0.5), ramp_from(shape(&small), 3.0));
            let ((ta, a), (tb, b)) = if swap { ((&ts, &small), (&tb, &big)) } else { ((&tb, &big), (&ts, &small)) };
            let plan = ElementwisePlan::new(a, b, &out, &sizes).expect("sums nothing");
            let want = reference_labels(&[(ta, &a[..]), (tb, &b[..])], &out, &sizes).expect("the reference");
            let one = plan.run(ta.data(), tb.data(), [false; 2]);
            prop_assert_eq!(&one[..], want.data());
            let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a pool");
            let two = pool.install(|| plan.run(ta.data(), tb.data(), [false; 2]));
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            prop_assert_eq!(bits(&two), bits(&one));
        }
    }

    /// On a pool of two threads, products of few rows (one row of every element for
    /// `ij,ij->ij`, three rows for a broadcast) over the parallel threshold, cut into
    /// pieces of rows, equal the products on one thread bit for bit, and the reference.
    #[test]
    fn few_long_rows_on_two_threads_equal_one_thread() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a pool");
        let n = PAR_ELEMENTWISE_MIN_ELEMENTS + 13;
        for (a_labels, b_labels, out, sizes) in [
            (vec![0u32, 1], vec![0u32, 1], vec![0u32, 1], vec![7usize, n / 7 + 1]),
            (vec![0, 1], vec![1], vec![0, 1], vec![3, n / 3 + 1]),
            (vec![1], vec![0, 1], vec![1, 0], vec![n / 3 + 1, 3]),
        ] {
            let shape = |l: &[u32]| l.iter().map(|&c| sizes[c as usize]).collect::<Vec<_>>();
            let (ta, tb) = (ramp_from(shape(&a_labels), 0.5), ramp_from(shape(&b_labels), 3.0));
            let plan = ElementwisePlan::new(&a_labels, &b_labels, &out, &sizes).expect("sums nothing");
            let one = plan.run(ta.data(), tb.data(), [false; 2]);
            let two = pool.install(|| plan.run(ta.data(), tb.data(), [false; 2]));
            assert_eq!(one, two, "{a_labels:?},{b_labels:?}->{out:?}");
            let want =
                reference_labels(&[(&ta, &a_labels[..]), (&tb, &b_labels[..])], &out, &sizes).expect("the reference");
            assert_eq!(&two[..], want.data(), "{a_labels:?},{b_labels:?}->{out:?}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        /// Broadcasts of an operand of up to three labels into an output of up to four, its
        /// labels in the operand's order among the others anywhere, sizes 0 to 5 and one
        /// long enough to pass the parallel threshold now and then: equal to the reference
        /// bit for bit (NaN and signed zeros in the operand included) and, on two threads,
        /// to one thread's; an operand out of the output's order is refused.
        #[test]
        fn broadcasts_equal_the_reference_and_one_thread(
            sizes in proptest::collection::vec(0usize..=5, 4),
            long in proptest::option::of(Just(PAR_ELEMENTWISE_MIN_ELEMENTS / 5 + 3)),
            a in proptest::sample::subsequence(vec![0u32, 1, 2, 3], 0..=3),
            extra in proptest::sample::subsequence(vec![0u32, 1, 2, 3], 0..=4),
            order in Just(vec![0u32, 1, 2, 3]).prop_shuffle(),
            specials in proptest::collection::vec(proptest::sample::select(vec![f64::NAN, -0.0, f64::INFINITY, 2.5]), 1..4),
        ) {
            let mut sizes = sizes;
            if let (Some(n), Some(&c)) = (long, extra.iter().find(|c| !a.contains(c))) {
                sizes[c as usize] = n;
            }
            // A random order of the output's labels, the operand's then put back in its order.
            let mut out: Vec<u32> = order.into_iter().filter(|c| a.contains(c) || extra.contains(c)).collect();
            let mut own = a.iter();
            for c in out.iter_mut().filter(|c| a.contains(c)) {
                *c = *own.next().expect("as many as the operand's labels");
            }
            let shape = |l: &[u32]| l.iter().map(|&c| sizes[c as usize]).collect::<Vec<_>>();
            let mut ta = ramp_from(shape(&a), 0.5).data().to_vec();
            for (x, s) in ta.iter_mut().zip(&specials) {
                *x = *s;
            }
            let ta = crate::Tensor::new(shape(&a), ta).expect("a tensor");
            let plan = ElementwisePlan::broadcast(&a, &out, &sizes).expect("a broadcast");
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            let one = plan.run_broadcast(ta.data());
            let want = reference_labels(&[(&ta, &a[..])], &out, &sizes).expect("the reference");
            // The reference adds each value to `+0`: equal values, NaN for NaN, any zero.
            let same = |x: f64, y: f64| x == y || (x.is_nan() && y.is_nan());
            prop_assert!(one.iter().zip(want.data()).all(|(&x, &y)| same(x, y)));
            prop_assert_eq!(one.len(), want.len());
            // Each element is the operand's own bits.
            let at_of = |e: usize| {
                let (mut rest, mut pa) = (e, 0usize);
                let strides = strides_along(&a, &sizes, &out);
                for (x, &c) in out.iter().enumerate().rev() {
                    let d = sizes[c as usize];
                    pa += rest % d * strides[x];
                    rest /= d;
                }
                pa
            };
            prop_assert!(one.iter().enumerate().all(|(e, x)| x.to_bits() == ta.data()[at_of(e)].to_bits()));
            let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a pool");
            prop_assert_eq!(bits(&pool.install(|| plan.run_broadcast(ta.data()))), bits(&one));
            if a.len() >= 2 {
                let mut swapped = out.clone();
                let (i, j) = (out.iter().position(|&c| c == a[0]).expect("in out"), out.iter().position(|&c| c == a[1]).expect("in out"));
                swapped.swap(i, j);
                prop_assert!(ElementwisePlan::broadcast(&a, &swapped, &sizes).is_none());
            }
        }
    }

    /// A product of more than `COPY_CHECK_ELEMENTS` elements ends early once the stop flag
    /// is up, and is whole with the flag down.
    #[test]
    fn a_long_product_stops_inside_its_rows() {
        use std::sync::Arc;
        use std::sync::atomic::AtomicBool;
        let n = 4 * crate::stop::COPY_CHECK_ELEMENTS;
        let (a, b): (Vec<f64>, Vec<f64>) = ((0..n).map(|x| x as f64 + 1.0).collect(), vec![2.0; n]);
        let plan = ElementwisePlan::new(&[0, 1], &[0, 1], &[0, 1], &[n / 1024, 1024]).unwrap();
        let run = |up: bool| crate::stop::with_stop(Arc::new(AtomicBool::new(up)), || plan.run(&a, &b, [false; 2]));
        let whole = run(false);
        assert!(whole.iter().zip(&a).all(|(&o, &x)| o == 2.0 * x));
        let written = run(true).iter().filter(|&&x| x != 0.0).count();
        assert!(written < n / 2, "{written} of {n} elements written after the stop");
    }
}
