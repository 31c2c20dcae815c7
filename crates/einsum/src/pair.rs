//! A forward step's two gradients in one pass: [`PairSpec`] and its kernel, what the
//! fused operation `TensorOp::ContractPair` runs; `fuse.rs` makes it in gradient programs.
//!
//! Why: a memory-bound forward step `C = A ⊙ M` (a large operand times a small factor `M`,
//! a `3 × 3` matrix of the queens network, broadcast over `A`'s other labels) reads `A`
//! and writes `C`. Its reverse runs two transposes, `Ā = C̄ ⊙ M` (element-wise) and
//! `M̄ = Σ A·C̄` (a reduction to `M`'s few elements), each reading `C̄` and one of them
//! `A`: three large reads and one write, twice the forward's traffic. Fused, one loop
//! reads `C̄` and `A` once, writes `Ā` and accumulates `M̄` in a few registers: two reads
//! and one write.
//!
//! The pattern ([`PairSpec::new`] checks it), in the operand order of the fused operation
//! `(c, m, a) -> (x, y)`: `x = op(c)·op(m)` sums nothing (every label of `c` and `m` is a
//! label of `x`, which has `a`'s labels in `a`'s order), and `y = Σ op(a)·op(c)` has `m`'s
//! labels in `m`'s order, at most [`PAIR_ALWAYS_SMALL`] elements, or at most
//! [`PAIR_MAX_SMALL`] and [`PAIR_SMALL_RATIO`] times fewer than `x`. That is what tidu's
//! transposes of such a step are, whichever of the step's operands is the small one.
//!
//! The kernel loops over `x`'s labels in `x`'s order (sizes 1 dropped, neighbours fused
//! where `x`, `c` and `m` all step over them as over one), so `x` is written and `a` read
//! contiguously. Rows of at least [`PAIR_MIN_ROW`] elements are walked one by one (on
//! reals, a row along which `m` is fixed and `c` read in order in `f64` vectors);
//! shorter rows (queens' rows of 3, where a factor's label sits innermost or just before
//! the innermost run) in panels of one run of the next axis, row by row when `c` is read
//! in order along the rows and column by column when it steps less along the next axis
//! (`PairPlan::rows_in_panels`), or, where the next axis is short too, in groups of its
//! runs over the axis before it (`PairPlan::rows_in_groups`); rows that none suits run as
//! the two kernels. The loops are compiled for the processor's vector instructions by
//! run-time dispatch. Rows
//! are grouped into blocks of fixed content ([`BLOCK_ELEMENTS`]), each block's partial
//! `y` formed alone and the blocks' partials added in order, so the blocks may run on a
//! pool's threads and two threads give the one-thread result bit for bit. `x` equals the
//! element-wise kernel's result bit for bit (one product per element); `y` equals the
//! reduction kernel's to rounding (another order of sums).
//!
//! Cost: one pass over `x`; `|x|` elements of `c` and of `a` read, `|x|` written.

use smallvec::SmallVec;

use crate::buffer::overwritten;
use crate::elem::Elem;
use crate::elementwise::{PAR_ELEMENTWISE_MIN_ELEMENTS, fused_axes, sums_nothing};
use crate::kernel::ContractSpec;
use crate::tensor::Tensor;
use triple::Triple;

mod triple;

/// The most elements of the small operand `m` (and of `y`): a block's partial sums stay
/// in the first- and second-level caches. Queens' factors multiplied together first
/// (`merge.rs`, up to `3^7` elements) are this large; their pairs read the two large
/// tensors once, where the reduction alone went through the GEMM path's copies.
pub(crate) const PAIR_MAX_SMALL: usize = 4096;

/// How many times larger than `m` the large tensors must be when `m` has more than
/// [`PAIR_ALWAYS_SMALL`] elements: the blocks' partial `y` (one per block, added in
/// order) stay small beside the pass over `x`.
pub(crate) const PAIR_SMALL_RATIO: usize = 64;

/// Factors of at most this many elements pair whatever the size of `x` (the `3 × 3`
/// factors of queens' steps as they are).
pub(crate) const PAIR_ALWAYS_SMALL: usize = 16;

/// The shortest rows walked one by one; shorter rows are walked in panels (module docs).
pub(crate) const PAIR_MIN_ROW: usize = 16;

/// Rows per panel of short rows (`PairPlan::rows_in_panels`): a panel's part of `x` and
/// `a` (at most `PANEL_ROWS · PAIR_MIN_ROW` elements each, 16 KiB of `f64`) stays in the
/// first-level cache while its columns are written.
const PANEL_ROWS: usize = 128;

/// The fewest elements of `x` for which a pair is fused: below them both transposes'
/// operands stay in the first caches, and the second read costs little.
pub(crate) const PAIR_MIN_ELEMENTS: usize = 1 << 12;

/// Elements of `x` per block (rounded up to whole rows): 128 KiB of `f64` for each of the
/// three large tensors, enough that a block's partial sums cost nothing beside its work,
/// few enough that a step of `2^17` elements gives several blocks per thread.
const BLOCK_ELEMENTS: usize = 1 << 14;

/// Two contractions of one cotangent fused (`pair.rs`, ADR 0018): `x = Σ op(c)·op(m)` with
/// `a`'s labels and `y = Σ op(a)·op(c)` with `m`'s labels, from the operands `(c, m, a)`.
///
/// ```
/// use einsum::{ContractSpec, PairSpec};
///
/// // The forward step `ab,cab->cab` (a 2 × 2 factor times a 1024 × 2 × 2 tensor) has the
/// // transposes `ab,cab->cab` (the large operand's gradient, from the factor and the
/// // cotangent) and `cab,cab->ab` (the factor's, from the cotangent and the large operand);
/// // on reals without conjugations.
/// let step = ContractSpec::new(&[0, 1], &[2, 0, 1], &[2, 0, 1], &[2, 2, 1024]).unwrap();
/// let real = |s: ContractSpec| s.with_conj([false; 2]);
/// let pair = PairSpec::new(&real(step.transpose_b()), [1, 0], &real(step.transpose_a()), [1, 0]).unwrap();
/// assert_eq!(pair.x().to_string(), "abc,bc->abc");
/// assert_eq!(pair.y().to_string(), "abc,abc->bc");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PairSpec {
    /// `c, m -> a` with its conjugations.
    x: ContractSpec,
    /// `a, c -> m` with its conjugations.
    y: ContractSpec,
    /// A batch of bilinear forms' third product `z = m·a` and its loop ([`PairSpec::triple`]).
    triple: Option<(ContractSpec, Triple)>,
}

impl PairSpec {
    /// The pair of `x` and `y`, given in any operand order: `x_order[i]` is the position
    /// among `(c, m)` of `x`'s operand `i`, `y_order[i]` the position among `(a, c)` of
    /// `y`'s operand `i` (`[0, 1]` is the fused order). `None` unless they form the
    /// pattern of the module docs.
    pub fn new(x: &ContractSpec, x_order: [usize; 2], y: &ContractSpec, y_order: [usize; 2]) -> Option<Self> {
        let x = ordered(x, x_order)?;
        let y = ordered(y, y_order)?;
        let sizes = x.sizes();
        let len = |l: &[u32]| l.iter().map(|&c| sizes[c as usize]).product::<usize>();
        let (lc, lm, la) = (x.a_labels(), x.b_labels(), x.out_labels());
        let small = len(lm) <= PAIR_ALWAYS_SMALL
            || (len(lm) <= PAIR_MAX_SMALL && len(lm).saturating_mul(PAIR_SMALL_RATIO) <= len(la));
        if !sums_nothing(lc, lm, la) || !small {
            return None;
        }
        // `y` must be `a, c -> m` on the same labels: compare in canonical form.
        let expected = ContractSpec::new(la, lc, lm, sizes).ok()?.with_conj(y.conj());
        (expected == y).then(|| PairSpec { x: x.clone(), y: expected, triple: None })
    }

    /// The three products `x = c·m`, `y = a·c` and `z = m·a` of a batch of bilinear forms
    /// (`m` and `a` vectors per batch element, `c` a matrix), in one pass over `c`
    /// (`pair/triple.rs`, whose module docs give the pattern), with the outputs
    /// `(x, y, z)`; `None` unless they form that pattern. `reassoc.rs` makes it of an
    /// expansion's rewritten gradients.
    pub(crate) fn triple(x: &ContractSpec, y: &ContractSpec, z: &ContractSpec) -> Option<Self> {
        let t = Triple::new(x, y, z)?;
        Some(PairSpec { x: x.clone(), y: y.clone(), triple: Some((z.clone(), t)) })
    }

    /// `m, a -> z`, the third product of a triple ([`PairSpec::triple`]).
    pub(crate) fn z(&self) -> Option<&ContractSpec> {
        self.triple.as_ref().map(|(z, _)| z)
    }

    /// How many outputs the fused operation has: two, or three for a triple.
    pub(crate) fn output_count(&self) -> usize {
        if self.triple.is_some() { 3 } else { 2 }
    }

    /// `c, m -> a`: the first output (a pair's large operand's gradient), in the fused
    /// operand order.
    pub fn x(&self) -> &ContractSpec {
        &self.x
    }

    /// `a, c -> m`: the second output (a pair's small operand's gradient), in the fused
    /// operand order.
    pub fn y(&self) -> &ContractSpec {
        &self.y
    }

    /// Elements of `x` (and of `a`, `c`).
    pub(crate) fn len(&self) -> usize {
        self.x.out_shape().iter().product()
    }

    /// Whether the fused loop walks the rows in panels (`Some(true)`), one by one
    /// (`Some(false)`), or the pair runs as the two kernels (`None`).
    #[cfg(test)]
    pub(crate) fn walks_in_panels(&self) -> Option<bool> {
        PairPlan::new(&self.x).map(|p| p.walk != Walk::Long)
    }

    /// Multiply-adds of the two contractions (three for a triple).
    pub fn multiply_adds(&self) -> u64 {
        let z = self.z().map_or(0, ContractSpec::multiply_adds);
        self.x.multiply_adds().saturating_add(self.y.multiply_adds()).saturating_add(z)
    }

    /// Runs the pair on `(c, m, a)` (shapes as the specs say): `[x, y]`, and `z` for a
    /// triple.
    ///
    /// # Panics
    /// On operands whose shapes do not fit.
    pub(crate) fn apply<T: Elem>(&self, c: &Tensor<T>, m: &Tensor<T>, a: &Tensor<T>) -> Vec<Tensor<T>> {
        for (what, t, shape) in [("c", c, self.x.a_shape()), ("m", m, self.x.b_shape()), ("a", a, self.y.a_shape())] {
            assert_eq!(t.shape(), shape.as_slice(), "operand {what} of the pair {self:?}");
        }
        if let Some((z, t)) = &self.triple {
            let [x, y, w] = t.run(c.data(), m.data(), a.data());
            return vec![
                Tensor::from_parts(&self.x.out_shape(), x),
                Tensor::from_parts(&self.y.out_shape(), y),
                Tensor::from_parts(&z.out_shape(), w),
            ];
        }
        match PairPlan::new(&self.x) {
            Some(plan) => {
                let [cx, cy] = [self.x.conj(), self.y.conj()];
                let (x, y) = plan.run(c.data(), m.data(), a.data(), cx, cy);
                vec![Tensor::from_parts(&self.x.out_shape(), x), Tensor::from_parts(&self.y.out_shape(), y)]
            }
            // Short rows that no panel suits: the two kernels one after the other.
            None => vec![crate::kernel::contract(&self.x, c, m), crate::kernel::contract(&self.y, a, c)],
        }
    }
}

/// `spec` with its operands in the order `order` says (`[1, 0]` swaps them).
fn ordered(spec: &ContractSpec, order: [usize; 2]) -> Option<ContractSpec> {
    match order {
        [0, 1] => Some(spec.clone()),
        [1, 0] => {
            let [ca, cb] = spec.conj();
            Some(
                ContractSpec::new(spec.b_labels(), spec.a_labels(), spec.out_labels(), spec.sizes())
                    .ok()?
                    .with_conj([cb, ca]),
            )
        }
        _ => None,
    }
}

/// The fused loop: per axis (in `x`'s order) its size and the strides of `x` (and `a`),
/// `c` and `m`.
#[derive(Debug)]
struct PairPlan {
    sizes: SmallVec<[usize; 8]>,
    strides: [SmallVec<[usize; 8]>; 3],
    len: usize,
    small: usize,
    walk: Walk,
}

/// How [`PairPlan::rows`] walks the rows.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Walk {
    /// Row by row: rows of at least [`PAIR_MIN_ROW`] elements.
    Long,
    /// Shorter rows in panels of one run of the next axis, row by row within a panel: `c`
    /// is read in order (or not at all) along the rows.
    PanelRows,
    /// Shorter rows in panels, column by column: `c` steps less along the next axis than
    /// along the rows (a factor's label innermost in `x`, far apart in `c`).
    PanelColumns,
    /// Shorter rows whose next axis is short too (under [`GROUPS_MAX_RUN`]), where `c` is
    /// read in order along the rows and steps less along the axis before the next than
    /// along the next: panels of several runs of the next axis (the rows of one index of
    /// the axis before it form a group), walked one index of the next axis at a time
    /// ([`PairPlan::rows_in_groups`]).
    PanelGroups,
}

/// The longest next axis for which short rows are walked in groups ([`Walk::PanelGroups`]):
/// panels of one run of a next axis this short hold too few rows to fill the vector lanes
/// and pay their set-up.
const GROUPS_MAX_RUN: usize = 8;

/// Elements of `x` per panel of [`PairPlan::rows_in_groups`]: the panel's part of `x` and
/// of `a`, 8 KiB of `f64` each, stays in the first-level cache while each index of the
/// next axis fills in its rows.
const GROUP_PANEL_ELEMENTS: usize = 1 << 10;

impl PairPlan {
    /// The loop of `x = c, m -> a` (already checked by [`PairSpec::new`]): rows of at least
    /// [`PAIR_MIN_ROW`] elements, or shorter rows that a panel suits ([`Walk`]).
    fn new(x: &ContractSpec) -> Option<Self> {
        let sizes = x.sizes();
        let (lc, lm, la) = (x.a_labels(), x.b_labels(), x.out_labels());
        let (axes, strides) = fused_axes([la, lc, lm], la, sizes);
        let n = axes.last().copied().unwrap_or(1);
        let walk = if n >= PAIR_MIN_ROW {
            Walk::Long
        } else {
            // Short rows need a next axis to form panels.
            let last = axes.len().checked_sub(1)?;
            let next = last.checked_sub(1)?;
            let c = &strides[1];
            let across = next.checked_sub(1).filter(|&outer| c[outer] < c[next] && axes[next] <= GROUPS_MAX_RUN);
            if c[last] <= 1 && across.is_some() {
                Walk::PanelGroups
            } else if c[last] <= 1 {
                Walk::PanelRows
            } else if c[next] < c[last] {
                Walk::PanelColumns
            } else {
                return None;
            }
        };
        Some(PairPlan {
            sizes: axes,
            strides,
            len: la.iter().map(|&c| sizes[c as usize]).product(),
            small: lm.iter().map(|&c| sizes[c as usize]).product(),
            walk,
        })
    }

    /// `x` and `y` from `c`, `m` and `a`, conjugating the operands as `cx` (of `c`, `m`)
    /// and `cy` (of `a`, `c`) say.
    fn run<T: Elem>(&self, c: &[T], m: &[T], a: &[T], cx: [bool; 2], cy: [bool; 2]) -> (Vec<T>, Vec<T>) {
        // On reals the flags change nothing and are dropped, so the loops carry no test.
        let flag = |f: bool| f && T::IS_COMPLEX;
        let ops = Ops { cx: [flag(cx[0]), flag(cx[1])], cy: [flag(cy[0]), flag(cy[1])] };
        let n = *self.sizes.last().expect("a row");
        let mut per_block = BLOCK_ELEMENTS.div_ceil(n);
        if self.walk == Walk::PanelGroups {
            // Whole groups, so that each block starts a run of the next axis.
            per_block = per_block.next_multiple_of(self.sizes[self.sizes.len() - 2]);
        }
        let rows = self.len / n;
        let blocks = rows.div_ceil(per_block);
        let mut x = overwritten(self.len);
        let mut partial = vec![T::zero(); blocks * self.small];
        let threads = if self.len >= PAR_ELEMENTWISE_MIN_ELEMENTS && rayon::current_thread_index().is_some() {
            rayon::current_num_threads()
        } else {
            1
        };
        let block = |(i, (dst, sums)): (usize, (&mut [T], &mut [T]))| {
            if !crate::stop::requested() {
                let rows = Rows { plan: self, first: i * per_block, dst, sums, operands: (c, m, a), ops: &ops };
                crate::small_gemm::arch().dispatch(rows);
            }
        };
        if threads > 1 && blocks > 1 {
            use rayon::prelude::*;
            x.par_chunks_mut(per_block * n).zip(partial.par_chunks_mut(self.small)).enumerate().for_each(block);
        } else {
            x.chunks_mut(per_block * n).zip(partial.chunks_mut(self.small)).enumerate().for_each(block);
        }
        // The blocks' sums in order, whatever the threads.
        let mut y = vec![T::zero(); self.small];
        for sums in partial.chunks_exact(self.small) {
            for (t, &s) in y.iter_mut().zip(sums) {
                *t += s;
            }
        }
        (x, y)
    }

    /// Writes the rows from `first` on into `dst` (a whole number of rows) and adds their
    /// terms of `y` into `sums`. Inlined into [`Rows`]'s dispatch, so that its loops are
    /// compiled for the processor's vector instructions.
    #[inline(always)]
    fn rows<T: Elem, S: pulp::Simd>(
        &self,
        simd: S,
        first: usize,
        dst: &mut [T],
        sums: &mut [T],
        (c, m, a): (&[T], &[T], &[T]),
        ops: &Ops,
    ) {
        match self.walk {
            Walk::Long => {}
            Walk::PanelGroups => return self.rows_in_groups(first, dst, sums, (c, m, a), ops),
            Walk::PanelRows | Walk::PanelColumns => return self.rows_in_panels(simd, first, dst, sums, (c, m, a), ops),
        }
        let last = self.sizes.len() - 1;
        let n = self.sizes[last];
        let (ic, im) = (self.strides[1][last], self.strides[2][last]);
        // Offsets of the row in `c` and `m` (`x` and `a` share `dst`'s: `first · n` on),
        // the outer axes counting in row-major order.
        let mut at = Cursor::at(self, first);
        let mut pa = first * n;
        for row in dst.chunks_exact_mut(n) {
            let ar = &a[pa..pa + n];
            if im == 0 {
                sums[at.pm] += row_fixed_m(simd, row, ar, (c, at.pc, ic), m[at.pm], ops);
            } else {
                for (k, (o, &av)) in row.iter_mut().zip(ar).enumerate() {
                    let (cv, j) = (c[at.pc + k * ic], at.pm + k * im);
                    *o = ops.x(cv, m[j]);
                    sums[j] += ops.y(av, cv);
                }
            }
            pa += n;
            at.advance(self);
        }
    }
}

impl PairPlan {
    /// [`Self::rows`] for rows shorter than [`PAIR_MIN_ROW`], in panels of up to
    /// [`PANEL_ROWS`] rows of one run of the next axis, row by row or column by column as
    /// [`Walk`] says.
    ///
    /// Why: row by row with the cursor's step per row, a row of three elements paid the
    /// row's set-up per three elements, and a row that gathers `c` read three far-apart
    /// places of it. In a panel, each row's (or column's) offsets are the panel's start
    /// plus a multiple of the next axis's strides, and a column reads `c` along the next
    /// axis, where it steps least; the panel's part of `x` and `a` (at most
    /// `PANEL_ROWS · PAIR_MIN_ROW` elements) stays in the first-level cache while its
    /// columns fill it in. Where `m` is fixed along a row (or column), its terms of `y`
    /// are summed in registers and added to `sums` once.
    #[inline(always)]
    fn rows_in_panels<T: Elem, S: pulp::Simd>(
        &self,
        simd: S,
        first: usize,
        dst: &mut [T],
        sums: &mut [T],
        (c, m, a): (&[T], &[T], &[T]),
        ops: &Ops,
    ) {
        let last = self.sizes.len() - 1;
        let next = last - 1;
        let (n, runs) = (self.sizes[last], self.sizes[next]);
        let [_, sc, sm] = &self.strides;
        let (ic, im, jc, jm) = (sc[last], sm[last], sc[next], sm[next]);
        // The cursor over the axes before the rows' (`idx[next]` counts rows within a run).
        let mut at = Cursor::at(self, first);
        let mut pa = first * n;
        let mut rest = dst;
        while !rest.is_empty() {
            // The rows left in this run of the next axis, at most a panel's.
            let count = (runs - at.idx[next]).min(rest.len() / n).min(PANEL_ROWS);
            let (panel, tail) = std::mem::take(&mut rest).split_at_mut(count * n);
            let ap = &a[pa..pa + count * n];
            match self.walk {
                Walk::PanelColumns => {
                    for k in 0..n {
                        let (qc, qm) = (at.pc + k * ic, at.pm + k * im);
                        let (xs, as_) = (&mut panel[k..], &ap[k..]);
                        if jm == 0 {
                            sums[qm] += column_fixed_m((xs, as_, n), (c, qc, jc), count, m[qm], ops);
                        } else {
                            for j in 0..count {
                                let (cv, e, mi) = (c[qc + j * jc], j * n, qm + j * jm);
                                xs[e] = ops.x(cv, m[mi]);
                                sums[mi] += ops.y(as_[e], cv);
                            }
                        }
                    }
                }
                _ => {
                    for (j, (row, ar)) in panel.chunks_exact_mut(n).zip(ap.chunks_exact(n)).enumerate() {
                        let (qc, qm) = (at.pc + j * jc, at.pm + j * jm);
                        if im == 0 && n < 4 {
                            // Too short for `row_fixed_m`'s four partial sums: one.
                            let (mv, mut s) = (m[qm], T::zero());
                            for (k, (o, &av)) in row.iter_mut().zip(ar).enumerate() {
                                let cv = c[qc + k * ic];
                                *o = ops.x(cv, mv);
                                s += ops.y(av, cv);
                            }
                            sums[qm] += s;
                        } else if im == 0 {
                            sums[qm] += row_fixed_m(simd, row, ar, (c, qc, ic), m[qm], ops);
                        } else {
                            for (k, (o, &av)) in row.iter_mut().zip(ar).enumerate() {
                                let (cv, mi) = (c[qc + k * ic], qm + k * im);
                                *o = ops.x(cv, m[mi]);
                                sums[mi] += ops.y(av, cv);
                            }
                        }
                    }
                }
            }
            pa += count * n;
            rest = tail;
            // `count - 1` rows within the run, then one step of the cursor.
            at.idx[next] += count - 1;
            at.pc += (count - 1) * jc;
            at.pm += (count - 1) * jm;
            at.advance(self);
        }
    }
}

impl PairPlan {
    /// [`Self::rows`] for [`Walk::PanelGroups`]: `first` starts a run of the next axis and
    /// `dst` holds whole runs. A panel is `count` consecutive indices of the axis before
    /// the next (`outer`), each with the whole run of the next axis (a group of `runs · n`
    /// elements of `x`); it is walked one index `b` of the next axis at a time, whose
    /// `count` rows read `c` along `outer`, where `c` continues (queens' `3^13`-element
    /// pair reads `c` in order over a whole panel's rows at each `b`).
    ///
    /// Why: with a next axis of 3, [`Self::rows_in_panels`] formed panels of 3 rows of 3.
    #[inline(always)]
    fn rows_in_groups<T: Elem>(
        &self,
        first: usize,
        dst: &mut [T],
        sums: &mut [T],
        (c, m, a): (&[T], &[T], &[T]),
        ops: &Ops,
    ) {
        let last = self.sizes.len() - 1;
        let (next, outer) = (last - 1, last - 2);
        let (n, runs, size) = (self.sizes[last], self.sizes[next], self.sizes[outer]);
        let group = runs * n;
        let most = (GROUP_PANEL_ELEMENTS / group).max(1);
        let [_, sc, sm] = &self.strides;
        let (ic, im, jc, jm, kc, km) = (sc[last], sm[last], sc[next], sm[next], sc[outer], sm[outer]);
        let mut at = Cursor::at(self, first);
        debug_assert_eq!(at.idx[next], 0, "a block starts a run of the next axis");
        let mut pa = first * n;
        let mut rest = dst;
        while !rest.is_empty() {
            // The groups left in this run of `outer`, at most a panel's.
            let count = (size - at.idx[outer]).min(rest.len() / group).min(most);
            let (panel, tail) = std::mem::take(&mut rest).split_at_mut(count * group);
            let ap = &a[pa..pa + count * group];
            for b in 0..runs {
                let (qc, qm) = (at.pc + b * jc, at.pm + b * jm);
                if im == 0 && km == 0 {
                    // `m` fixed over the index's rows: their terms of `y` in registers.
                    let rows = (&mut panel[b * n..], &ap[b * n..], group, n);
                    sums[qm] += rows_fixed_m(rows, (c, qc, kc, ic), count, m[qm], ops);
                } else {
                    for j in 0..count {
                        for k in 0..n {
                            let (cv, e, mi) = (c[qc + j * kc + k * ic], j * group + b * n + k, qm + j * km + k * im);
                            panel[e] = ops.x(cv, m[mi]);
                            sums[mi] += ops.y(ap[e], cv);
                        }
                    }
                }
            }
            pa += count * group;
            rest = tail;
            // To the panel's last row, then one step of the cursor.
            at.idx[outer] += count - 1;
            at.idx[next] += runs - 1;
            at.pc += (count - 1) * kc + (runs - 1) * jc;
            at.pm += (count - 1) * km + (runs - 1) * jm;
            at.advance(self);
        }
    }
}

/// `count` rows of `n` elements (row `j` at `j · step` in `x` and `a`, at `pc + j · jc`
/// in `c`, stepping `ic` along it) along which `m` is fixed (`mv`): `x = op(c)·op(mv)`,
/// and the rows' sum of `op(a)·op(c)`, each row summed alone and the rows into four
/// partial sums, so that the additions overlap.
#[inline(always)]
fn rows_fixed_m<T: Elem>(
    (x, a, step, n): (&mut [T], &[T], usize, usize),
    (c, pc, jc, ic): (&[T], usize, usize, usize),
    count: usize,
    mv: T,
    ops: &Ops,
) -> T {
    let mut row = |j: usize| {
        let (xr, ar) = (&mut x[j * step..j * step + n], &a[j * step..j * step + n]);
        let q = pc + j * jc;
        let mut s = T::zero();
        for (k, (o, &av)) in xr.iter_mut().zip(ar).enumerate() {
            let cv = c[q + k * ic];
            *o = ops.x(cv, mv);
            s += ops.y(av, cv);
        }
        s
    };
    let mut acc = [T::zero(); 4];
    let mut j = 0;
    while j + 4 <= count {
        for (l, s) in acc.iter_mut().enumerate() {
            *s += row(j + l);
        }
        j += 4;
    }
    for j in j..count {
        acc[0] += row(j);
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

/// Where a row of a [`PairPlan`] starts: the outer axes' indices (row-major) and the
/// row's offsets in `c` and `m`; [`PairPlan::rows`] and [`PairPlan::rows_in_panels`] step it.
struct Cursor {
    idx: SmallVec<[usize; 8]>,
    pc: usize,
    pm: usize,
}

impl Cursor {
    /// Row `first` of `plan`.
    #[inline(always)]
    fn at(plan: &PairPlan, first: usize) -> Self {
        let last = plan.sizes.len() - 1;
        let mut at = Cursor { idx: SmallVec::from_elem(0, last), pc: 0, pm: 0 };
        let mut r = first;
        for k in (0..last).rev() {
            at.idx[k] = r % plan.sizes[k];
            r /= plan.sizes[k];
            at.pc += at.idx[k] * plan.strides[1][k];
            at.pm += at.idx[k] * plan.strides[2][k];
        }
        at
    }

    /// Steps to the next row, the outer indices counting in row-major order.
    #[inline(always)]
    fn advance(&mut self, plan: &PairPlan) {
        let [_, sc, sm] = &plan.strides;
        for k in (0..self.idx.len()).rev() {
            self.idx[k] += 1;
            self.pc += sc[k];
            self.pm += sm[k];
            if self.idx[k] < plan.sizes[k] {
                break;
            }
            self.pc -= sc[k] * plan.sizes[k];
            self.pm -= sm[k] * plan.sizes[k];
            self.idx[k] = 0;
        }
    }
}

/// One column of a panel along which `m` is fixed (`mv`): `x[j·n] = op(c)·op(mv)` for
/// the `count` rows `j`, `c` read from `pc` on with stride `jc` (0: one element), and the
/// column's sum of `op(a[j·n])·op(c)`, in four partial sums.
#[inline(always)]
fn column_fixed_m<T: Elem>(
    (x, a, n): (&mut [T], &[T], usize),
    (c, pc, jc): (&[T], usize, usize),
    count: usize,
    mv: T,
    ops: &Ops,
) -> T {
    let mut acc = [T::zero(); 4];
    let mut j = 0;
    while j + 4 <= count {
        for (l, s) in acc.iter_mut().enumerate() {
            let (cv, e) = (c[pc + (j + l) * jc], (j + l) * n);
            x[e] = ops.x(cv, mv);
            *s += ops.y(a[e], cv);
        }
        j += 4;
    }
    for j in j..count {
        let (cv, e) = (c[pc + j * jc], j * n);
        x[e] = ops.x(cv, mv);
        acc[0] += ops.y(a[e], cv);
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

/// The arguments of [`PairPlan::rows`], as the value pulp dispatches to the widest vector
/// instructions the processor has (AVX2 on x86-64), as `reduce.rs`'s dot products are: on
/// the baseline target the compiler keeps the loop in two-lane or scalar form. (A closure
/// would not be inlined into the function compiled for those instructions.) No product
/// and sum is fused into one rounding (Rust never contracts `a·b + c`), so the results
/// equal the baseline loop's bit for bit.
struct Rows<'a, T> {
    plan: &'a PairPlan,
    first: usize,
    dst: &'a mut [T],
    sums: &'a mut [T],
    operands: (&'a [T], &'a [T], &'a [T]),
    ops: &'a Ops,
}

impl<T: Elem> pulp::WithSimd for Rows<'_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, simd: S) {
        let Rows { plan, first, dst, sums, operands, ops } = self;
        plan.rows(simd, first, dst, sums, operands, ops);
    }
}

/// The conjugations of the pair's two products (never set on reals).
struct Ops {
    cx: [bool; 2],
    cy: [bool; 2],
}

impl Ops {
    #[inline(always)]
    fn x<T: Elem>(&self, c: T, m: T) -> T {
        cj(c, self.cx[0]) * cj(m, self.cx[1])
    }

    #[inline(always)]
    fn y<T: Elem>(&self, a: T, c: T) -> T {
        cj(a, self.cy[0]) * cj(c, self.cy[1])
    }
}

#[inline(always)]
fn cj<T: Elem>(v: T, conj: bool) -> T {
    if conj { v.conj() } else { v }
}

/// One row along which `m` is fixed (`mv`): `row[k] = op(c)·op(mv)`, and the row's sum of
/// `op(a)·op(c)`, in four partial sums (so that the loop vectorizes and the adds overlap).
#[inline(always)]
fn row_fixed_m<T: Elem, S: pulp::Simd>(
    simd: S,
    row: &mut [T],
    a: &[T],
    (c, pc, ic): (&[T], usize, usize),
    mv: T,
    ops: &Ops,
) -> T {
    let mut acc = [T::zero(); 4];
    if ic == 1 {
        let cr = &c[pc..pc + row.len()];
        // On reals (no conjugation to apply) the loop over `f64` blocks.
        let reals = (T::as_f64s(a), T::as_f64s(cr), T::as_f64s(std::slice::from_ref(&mv)));
        if let ((Some(a), Some(cr), Some(&[mv])), Some(row)) = (reals, T::as_f64s_mut(row)) {
            return T::from_f64(row_fixed_m_f64(simd, row, a, cr, mv));
        }
        let mut rows = row.chunks_exact_mut(4);
        let mut cs = cr.chunks_exact(4);
        let mut as_ = a.chunks_exact(4);
        for ((o, cv), av) in (&mut rows).zip(&mut cs).zip(&mut as_) {
            for l in 0..4 {
                o[l] = ops.x(cv[l], mv);
                acc[l] += ops.y(av[l], cv[l]);
            }
        }
        for ((o, &cv), &av) in rows.into_remainder().iter_mut().zip(cs.remainder()).zip(as_.remainder()) {
            *o = ops.x(cv, mv);
            acc[0] += ops.y(av, cv);
        }
    } else {
        for (k, (o, &av)) in row.iter_mut().zip(a).enumerate() {
            let cv = c[pc + k * ic];
            *o = ops.x(cv, mv);
            acc[k % 4] += ops.y(av, cv);
        }
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

/// [`row_fixed_m`] on reals with `c` contiguous (`cr`, the row's part): `row[k] =
/// cr[k]·mv` and the sum of `a[k]·cr[k]`, in the processor's vectors (four lanes under
/// AVX2) with two registers of partial sums, so that two additions overlap; the elements
/// past the last whole pair of vectors into a scalar sum. Why explicit vectors: written
/// over arrays, the compiler vectorized the products into `x` but kept the partial sums
/// in scalars and half registers.
#[inline(always)]
fn row_fixed_m_f64<S: pulp::Simd>(simd: S, row: &mut [f64], a: &[f64], cr: &[f64], mv: f64) -> f64 {
    let len = row.len();
    let (xv, xt) = S::as_mut_simd_f64s(row);
    let (av, at) = S::as_simd_f64s(&a[..len]);
    let (cv, ct) = S::as_simd_f64s(cr);
    let m = simd.splat_f64s(mv);
    let mut acc = [simd.splat_f64s(0.0); 2];
    let mut xs = xv.chunks_exact_mut(2);
    let (mut as_, mut cs) = (av.chunks_exact(2), cv.chunks_exact(2));
    for ((o, a), c) in (&mut xs).zip(&mut as_).zip(&mut cs) {
        for h in 0..2 {
            o[h] = simd.mul_f64s(c[h], m);
            acc[h] = simd.add_f64s(acc[h], simd.mul_f64s(a[h], c[h]));
        }
    }
    let mut tail = 0.0;
    // At most one vector, then the elements past the whole vectors.
    for ((o, &a), &c) in xs.into_remainder().iter_mut().zip(as_.remainder()).zip(cs.remainder()) {
        *o = simd.mul_f64s(c, m);
        acc[0] = simd.add_f64s(acc[0], simd.mul_f64s(a, c));
    }
    for ((o, &a), &c) in xt.iter_mut().zip(at).zip(ct) {
        *o = c * mv;
        tail += a * c;
    }
    simd.reduce_sum_f64s(simd.add_f64s(acc[0], acc[1])) + tail
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::elem::c64;
    use crate::reference::reference_labels;

    /// `spec` on `(p, q)` by the brute-force reference, conjugations applied first.
    fn reference<T: Elem>(spec: &ContractSpec, p: &Tensor<T>, q: &Tensor<T>) -> Tensor<T> {
        let [cp, cq] = spec.conj();
        let cj = |t: &Tensor<T>, c: bool| if c { t.map(|&v| v.conj()) } else { t.clone() };
        let (p, q) = (cj(p, cp), cj(q, cq));
        reference_labels(&[(&p, spec.a_labels()), (&q, spec.b_labels())], spec.out_labels(), spec.sizes()).unwrap()
    }
    use proptest::prelude::*;

    pub(crate) fn seeded<T: Elem>(shape: &[usize], seed: u64) -> Tensor<T> {
        let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        Tensor::from_fn(shape.to_vec(), |_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let u = (s >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
            let v = (s.rotate_left(17) >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
            T::from_parts(u, v)
        })
        .expect("a shape")
    }

    /// `large` labels (a permutation of `0..n`) and the small factor's labels (a subset),
    /// the cotangent's labels (another permutation of the large ones).
    /// Checks the pair against the reference; returns how the fused loop walked it
    /// (`None`: it ran as the two kernels).
    fn case<T: Elem>(
        sizes: &[usize],
        la: &[u32],
        lm: &[u32],
        lc: &[u32],
        conj: [bool; 2],
        small_first: bool,
        seed: u64,
    ) -> Option<Walk> {
        let step = if small_first {
            ContractSpec::new(lm, la, lc, sizes).unwrap().with_conj(conj)
        } else {
            ContractSpec::new(la, lm, lc, sizes).unwrap().with_conj(conj)
        };
        // tidu's transposes, as `ad.rs` emits them.
        let adj = |s: ContractSpec| if T::IS_COMPLEX { s } else { s.with_conj([false; 2]) };
        let (ta, tb) = (adj(step.transpose_a()), adj(step.transpose_b()));
        // The large operand's gradient reads (c, small) and the small one's (large, c)
        // when the small operand is `b`; otherwise the roles swap.
        let (pair, x_spec, y_spec) = if small_first {
            (PairSpec::new(&tb, [1, 0], &ta, [1, 0]), tb, ta)
        } else {
            (PairSpec::new(&ta, [0, 1], &tb, [0, 1]), ta, tb)
        };
        let pair = pair.expect("tidu's transposes of a step with a small operand form a pair");
        let big_shape: Vec<usize> = la.iter().map(|&l| sizes[l as usize]).collect();
        let small_shape: Vec<usize> = lm.iter().map(|&l| sizes[l as usize]).collect();
        let c_shape: Vec<usize> = lc.iter().map(|&l| sizes[l as usize]).collect();
        let (a, m, c) =
            (seeded::<T>(&big_shape, seed), seeded::<T>(&small_shape, seed + 1), seeded::<T>(&c_shape, seed + 2));
        let [x, y]: [Tensor<T>; 2] = pair.apply(&c, &m, &a).try_into().expect("two outputs");
        // Against the reference, in the transposes' own operand orders.
        let (rx, ry) = if small_first {
            (reference(&x_spec, &m, &c), reference(&y_spec, &c, &a))
        } else {
            (reference(&x_spec, &c, &m), reference(&y_spec, &a, &c))
        };
        assert_eq!(x.shape(), rx.shape());
        assert_eq!(y.shape(), ry.shape());
        let close = |p: &Tensor<T>, q: &Tensor<T>, tol: f64| {
            p.data().iter().zip(q.data()).all(|(&u, &v)| (u - v).modulus() <= tol)
        };
        assert!(close(&x, &rx, 1e-12), "x of {pair:?}");
        assert!(close(&y, &ry, 1e-9), "y of {pair:?}");
        // The element-wise kernel's `x` bit for bit; two threads equal one bit for bit.
        let kx = if small_first {
            crate::kernel::contract(&x_spec, &m, &c)
        } else {
            crate::kernel::contract(&x_spec, &c, &m)
        };
        assert_eq!(x.data(), kx.data());
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let [x2, y2]: [Tensor<T>; 2] = pool.install(|| pair.apply(&c, &m, &a)).try_into().expect("two outputs");
        assert_eq!(x2.data(), x.data());
        assert_eq!(y2.data(), y.data());
        PairPlan::new(pair.x()).map(|p| p.walk)
    }

    /// A seeded in-place shuffle (xorshift), so that a case's label orders follow from one
    /// seed.
    fn shuffler(seed: u64) -> impl FnMut(&mut Vec<u32>) {
        let mut s = seed | 1;
        move |v: &mut Vec<u32>| {
            for i in (1..v.len()).rev() {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                v.swap(i, (s % (i as u64 + 1)) as usize);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn pairs_equal_the_reference(
            n in 2usize..7, row in 16usize..40, sizes_seed in any::<u64>(), perm_seed in any::<u64>(), small in 1usize..3,
            conj in any::<[bool; 2]>(), small_first in any::<bool>(), complex in any::<bool>(), row_last in any::<bool>(),
        ) {
            // Sizes 2 to 5 (a few 1s) and one label of `row` innermost in the large
            // operand, the large labels otherwise in a random order, the small factor on
            // `small` of the others, the cotangent's labels in another order (with
            // `row_last`, the row's label innermost in it too: rows read in order, the
            // loop over `f64` blocks on reals).
            let mut sizes: Vec<usize> = (0..n).map(|i| [2, 3, 4, 5, 1, 3][((sizes_seed >> (3 * i)) % 6) as usize]).collect();
            sizes.push(row);
            let mut shuffle = shuffler(perm_seed);
            let mut la: Vec<u32> = (0..n as u32).collect();
            shuffle(&mut la);
            let mut lm: Vec<u32> = la[..small.min(n)].to_vec();
            // At most `PAIR_ALWAYS_SMALL` elements in the factor.
            while lm.iter().map(|&l| sizes[l as usize]).product::<usize>() > PAIR_ALWAYS_SMALL {
                lm.pop();
            }
            shuffle(&mut lm);
            la.push(n as u32);
            let mut lc = la.clone();
            shuffle(&mut lc);
            if row_last {
                lc.retain(|&l| l != n as u32);
                lc.push(n as u32);
            }
            let fused = if complex {
                case::<c64>(&sizes, &la, &lm, &lc, conj, small_first, perm_seed)
            } else {
                case::<f64>(&sizes, &la, &lm, &lc, conj, small_first, perm_seed)
            };
            prop_assert_eq!(fused, Some(Walk::Long), "rows of at least {} elements are walked one by one", row);
        }

        #[test]
        fn short_rows_equal_the_reference(
            n in 2usize..7, sizes_seed in any::<u64>(), perm_seed in any::<u64>(), small in 1usize..3,
            conj in any::<[bool; 2]>(), small_first in any::<bool>(), complex in any::<bool>(), summed in any::<bool>(),
        ) {
            // Labels of sizes 1 to 5 in random orders, so that rows are short and the
            // factor's labels may be innermost; with `summed`, the forward step sums one of
            // the factor's labels away, so that the cotangent lacks it (a broadcast of `c`
            // along that label).
            let sizes: Vec<usize> = (0..n).map(|i| [2, 3, 4, 5, 1, 3][((sizes_seed >> (3 * i)) % 6) as usize]).collect();
            let mut shuffle = shuffler(perm_seed);
            let mut la: Vec<u32> = (0..n as u32).collect();
            shuffle(&mut la);
            let mut lm: Vec<u32> = la[n - small.min(n)..].to_vec();
            while lm.iter().map(|&l| sizes[l as usize]).product::<usize>() > PAIR_ALWAYS_SMALL {
                lm.pop();
            }
            shuffle(&mut lm);
            shuffle(&mut la);
            let mut lc = la.clone();
            if summed && !lm.is_empty() {
                lc.retain(|&l| l != lm[0]);
            }
            shuffle(&mut lc);
            if complex {
                case::<c64>(&sizes, &la, &lm, &lc, conj, small_first, perm_seed);
            } else {
                case::<f64>(&sizes, &la, &lm, &lc, conj, small_first, perm_seed);
            }
        }
    }

    #[test]
    fn a_queens_like_step_fuses_and_two_threads_equal_one() {
        // A `3 × 3` factor on labels 0 and 1 of a `3^11` tensor (past the threads'
        // threshold), the cotangent with the factor's labels outermost: rows of `3^3`.
        let sizes = [3usize; 11];
        let la = [2, 3, 0, 4, 5, 6, 1, 7, 8, 9, 10];
        let lc = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        assert_eq!(case::<f64>(&sizes, &la, &[0, 1], &lc, [false; 2], true, 7), Some(Walk::Long));
        assert_eq!(case::<c64>(&sizes, &la, &[1, 0], &lc, [true, false], false, 8), Some(Walk::Long));
        // Rows of 3 with a factor's label innermost, far apart in the cotangent: columns.
        let la = [2, 3, 0, 4, 5, 6, 7, 8, 9, 10, 1];
        assert_eq!(case::<f64>(&sizes, &la, &[0, 1], &lc, [false; 2], true, 9), Some(Walk::PanelColumns));
        assert_eq!(case::<c64>(&sizes, &la, &[0, 1], &lc, [false, true], false, 10), Some(Walk::PanelColumns));
        // Rows of 3 contiguous in the cotangent, a factor's label just before them, the
        // cotangent continuing along the axes before that (queens' `acdefghijklbm`):
        // groups, the factor fixed along each index's rows; a factor on the axis before
        // the next too (`m` not fixed along a column of rows).
        let la = [0, 2, 3, 4, 5, 6, 7, 8, 9, 1, 10];
        assert_eq!(case::<f64>(&sizes, &la, &[0, 1], &lc, [false; 2], false, 11), Some(Walk::PanelGroups));
        assert_eq!(case::<c64>(&sizes, &la, &[1, 0], &lc, [true, true], true, 13), Some(Walk::PanelGroups));
        assert_eq!(case::<f64>(&sizes, &la, &[9, 1], &lc, [false; 2], true, 14), Some(Walk::PanelGroups));
        assert_eq!(case::<c64>(&sizes, &la, &[1, 9], &lc, [false, true], false, 15), Some(Walk::PanelGroups));
        // The same with the cotangent far apart along the axes before the next: rows.
        let lc_far = [9, 0, 1, 2, 3, 4, 5, 6, 7, 8, 10];
        assert_eq!(case::<f64>(&sizes, &la, &[0, 1], &lc_far, [false; 2], false, 16), Some(Walk::PanelRows));
        // The cotangent without the factor's innermost label (the forward step summed it).
        let la = [2, 3, 0, 4, 5, 6, 7, 8, 9, 10, 1];
        let lc = [0, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        assert_eq!(case::<f64>(&sizes, &la, &[0, 1], &lc, [false; 2], true, 12), Some(Walk::PanelRows));
    }

    #[test]
    fn merged_factors_of_several_labels_pair() {
        // Queens' factors multiplied together first (`merge.rs`): 3 to 7 labels of a `3^11`
        // tensor, scattered among its labels, the cotangent in another order; against the
        // reference, the element-wise kernel and one thread (`case`).
        let sizes = [3usize; 11];
        let la = [2, 3, 0, 4, 5, 6, 1, 7, 8, 9, 10];
        let lc = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        let factors: [&[u32]; 4] = [&[0, 1, 4], &[6, 0, 9, 3], &[1, 4, 7, 10, 2], &[8, 0, 5, 1, 6, 2, 10]];
        for (k, lm) in factors.into_iter().enumerate() {
            let seed = 20 + 2 * k as u64;
            assert!(case::<f64>(&sizes, &la, lm, &lc, [false; 2], k % 2 == 0, seed).is_some(), "{lm:?}");
            assert!(case::<c64>(&sizes, &la, lm, &la, [true, false], k % 2 == 1, seed + 1).is_some(), "{lm:?}");
        }
        // 3^8 elements: over `PAIR_MAX_SMALL`, no pair.
        let x = ContractSpec::new(&lc, &[0, 1, 2, 3, 4, 5, 6, 7], &la, &sizes).unwrap();
        let y = ContractSpec::new(&la, &lc, &[0, 1, 2, 3, 4, 5, 6, 7], &sizes).unwrap();
        assert!(PairSpec::new(&x, [0, 1], &y, [0, 1]).is_none());
    }

    #[test]
    fn a_row_along_the_factor_accumulates_each_element() {
        // The factor's one label (16) innermost: `y` gathers along the rows.
        assert_eq!(case::<f64>(&[300, 16], &[0, 1], &[1], &[1, 0], [false; 2], false, 3), Some(Walk::Long));
        assert_eq!(case::<c64>(&[300, 16], &[0, 1], &[1], &[0, 1], [false, true], true, 4), Some(Walk::Long));
    }

    #[test]
    fn non_pairs_are_refused() {
        // A summed label in `x`: not element-wise.
        let x = ContractSpec::new(&[0, 1, 2], &[1, 3], &[0, 2, 3], &[64, 3, 64, 3]).unwrap();
        let y = ContractSpec::new(&[0, 2, 3], &[0, 1, 2], &[1, 3], &[64, 3, 64, 3]).unwrap();
        assert!(PairSpec::new(&x, [0, 1], &y, [0, 1]).is_none());
        // A small operand over the limit, or not small enough beside the large ones.
        for sizes in [[1024, 8192], [16, 256]] {
            let x = ContractSpec::new(&[0, 1], &[1], &[0, 1], &sizes).unwrap();
            let y = ContractSpec::new(&[0, 1], &[0, 1], &[1], &sizes).unwrap();
            assert!(PairSpec::new(&x, [0, 1], &y, [0, 1]).is_none(), "{sizes:?}");
        }
        // Within both: a pair.
        let x = ContractSpec::new(&[0, 1], &[1], &[0, 1], &[64, 64]).unwrap();
        let y = ContractSpec::new(&[0, 1], &[0, 1], &[1], &[64, 64]).unwrap();
        assert!(PairSpec::new(&x, [0, 1], &y, [0, 1]).is_some());
    }
}
