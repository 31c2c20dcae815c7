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
//! Outputs of [`PAR_ELEMENTWISE_MIN_ELEMENTS`] or more are cut into row-aligned chunks
//! over the current rayon pool's threads (inside a pool of more than one thread).
//!
//! Cost: `O(|out|)` multiplications, `|a| + |b| + |out|` elements of memory traffic.

use smallvec::SmallVec;

use crate::buffer::overwritten;
use crate::elem::Elem;

/// Outputs of at least this many elements are written by the threads of the current
/// rayon pool, as permutation copies are (`permute.rs`): below it a chunk's work (a few
/// hundred microseconds) is not much more than forking and joining.
pub(crate) const PAR_ELEMENTWISE_MIN_ELEMENTS: usize = 1 << 20;

/// Columns per tile of [`ElementwisePlan::rows_in_tiles`]: a block's gathered cache lines
/// (one per element and row of the gathered operand at most) stay in the first-level
/// cache for a tile's rows.
const GATHER_BLOCK: usize = 128;

/// Rows per tile of [`ElementwisePlan::rows_in_tiles`]: the rows that reuse a block's
/// gathered lines before they leave the cache.
const GATHER_ROWS: usize = 64;

/// The fused loop of an element-wise contraction: per loop axis its size and the strides
/// of `a`, `b` and the output (0 where a tensor lacks the axis).
#[derive(Debug)]
pub(crate) struct ElementwisePlan {
    sizes: SmallVec<[usize; 8]>,
    strides: [SmallVec<[usize; 8]>; 3],
    out_len: usize,
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
        let distinct = |l: &[u32]| l.iter().enumerate().all(|(i, c)| !l[..i].contains(c));
        if !distinct(a) || !distinct(b) || !distinct(out) || a.iter().chain(b).any(|c| !out.contains(c)) {
            return None;
        }
        let order: SmallVec<[u32; 8]> = out.iter().copied().filter(|&c| sizes[c as usize] != 1).collect();
        let raw = [strides_along(a, sizes, &order), strides_along(b, sizes, &order), strides_along(out, sizes, &order)];
        let mut plan = ElementwisePlan {
            sizes: SmallVec::new(),
            strides: Default::default(),
            out_len: out.iter().map(|&c| sizes[c as usize]).product(),
        };
        for (i, &c) in order.iter().enumerate() {
            let d = sizes[c as usize];
            // Axis `i` joins the previous one when every tensor steps over the previous
            // axis exactly as over `d` steps of this one.
            let fuses =
                !plan.sizes.is_empty() && (0..3).all(|t| *plan.strides[t].last().expect("an axis") == raw[t][i] * d);
            if fuses {
                *plan.sizes.last_mut().expect("an axis") *= d;
                for (s, r) in plan.strides.iter_mut().zip(&raw) {
                    *s.last_mut().expect("an axis") = r[i];
                }
            } else {
                plan.sizes.push(d);
                for (s, r) in plan.strides.iter_mut().zip(&raw) {
                    s.push(r[i]);
                }
            }
        }
        Some(plan)
    }

    /// The rows the kernel writes: their length (the fused innermost axis), their count,
    /// and the strides of `a` and `b` along them (0: broadcast, 1: contiguous, more: a
    /// gather). What `kernel::step_cost` prices a label order by.
    pub(crate) fn row_shape(&self) -> (usize, usize, [usize; 2]) {
        let n = self.sizes.last().copied().unwrap_or(1);
        let inner = |t: usize| self.strides[t].last().copied().unwrap_or(0);
        (n, self.out_len / n.max(1), [inner(0), inner(1)])
    }

    /// `out = op(a)·op(b)` element by element, `op` conjugating where `conj` says so.
    pub(crate) fn run<T: Elem>(&self, a: &[T], b: &[T], conj: [bool; 2]) -> Vec<T> {
        match (conj[0] && T::IS_COMPLEX, conj[1] && T::IS_COMPLEX) {
            (false, false) => self.run_with(a, b, |x: T, y: T| x * y),
            (true, false) => self.run_with(a, b, |x: T, y: T| x.conj() * y),
            (false, true) => self.run_with(a, b, |x: T, y: T| x * y.conj()),
            (true, true) => self.run_with(a, b, |x: T, y: T| x.conj() * y.conj()),
        }
    }

    fn run_with<T: Elem, F: Fn(T, T) -> T + Sync>(&self, a: &[T], b: &[T], f: F) -> Vec<T> {
        // Every element is written once.
        let mut out = overwritten(self.out_len);
        if self.out_len == 0 {
            return out;
        }
        let inner = self.sizes.last().copied().unwrap_or(1);
        let rows = self.out_len / inner;
        let threads = if self.out_len >= PAR_ELEMENTWISE_MIN_ELEMENTS && rayon::current_thread_index().is_some() {
            rayon::current_num_threads()
        } else {
            1
        };
        if threads > 1 && rows > 1 {
            use rayon::prelude::*;
            let per_chunk = rows.div_ceil(4 * threads);
            out.par_chunks_mut(per_chunk * inner)
                .enumerate()
                .for_each(|(i, chunk)| self.rows(i * per_chunk, chunk, a, b, &f));
        } else {
            self.rows(0, &mut out, a, b, &f);
        }
        out
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
