//! The direct loop over contiguous lanes: a contraction too small per batch entry for GEMM
//! (a batch of matrix-vector products such as `lm_batch`'s `ab,cdba->acd`, 1996 products
//! of `16 × 7` by `7`) whose largest operand holds a long label innermost, at unit stride.
//!
//! The plain direct loop (`kernel.rs`) would run that label innermost with the other
//! tensors' strides: a gather from the small operand and a scatter into the output per
//! multiply-add. Here the smaller tensors are permuted so that the label is innermost in
//! every tensor that holds it (operands before, the output after), and the loop's
//! innermost pass is then `out[0..n] += a[0..n]·b[0..n]` over contiguous slices
//! ([`triad`]), compiled for the processor's vector instructions.
//!
//! Chosen by [`LanesPlan::new`] only when the copies are small beside the largest
//! operand. Invariants: the labels of each tensor are distinct (permutations need it);
//! the lane label is the largest operand's innermost one and the output's; the loop order
//! puts it innermost. Cost: the direct loop's `O(Π sizes)` plus the copies of the smaller
//! tensors.

use smallvec::SmallVec;

use crate::buffer::{recycle, zeroed};
use crate::elem::Elem;
use crate::permute::{Group, loop_strides, permute, shape_of};

/// The shortest lane label worth the copies: a pass of fewer elements does not fill the
/// vector registers for long.
const MIN_LANE: usize = 16;

/// The copies may move at most this fraction (`1 / COPY_SHARE`) of the largest operand's
/// elements, so that they cost little beside the loop's reads of it.
const COPY_SHARE: usize = 3;

/// How a contraction runs over contiguous lanes (see the module docs).
pub(crate) struct LanesPlan {
    /// The layouts the loop reads and writes: `a`, `b` and the output with the lane label
    /// moved innermost where they hold it.
    labels: [Group; 3],
    /// The loop's sizes (lane label last) and per-label strides of `a`, `b`, the output.
    sizes: SmallVec<[usize; 8]>,
    strides: [SmallVec<[usize; 8]>; 3],
    out_len: usize,
}

impl LanesPlan {
    /// The plan for `a, b -> out` (labels as in a `ContractSpec`), if it suits: distinct
    /// labels in each tensor, the largest operand's innermost label of [`MIN_LANE`] or more
    /// and in the output, and copies under the largest operand's `1 / COPY_SHARE`.
    pub(crate) fn new(a: &[u32], b: &[u32], out: &[u32], sizes: &[usize]) -> Option<Self> {
        Self::with_copy_share(a, b, out, sizes, COPY_SHARE)
    }

    /// [`LanesPlan::new`] with copies of up to `1 / share` of the largest operand (`0`:
    /// any; the tests take every case).
    fn with_copy_share(a: &[u32], b: &[u32], out: &[u32], sizes: &[usize], share: usize) -> Option<Self> {
        let distinct = |l: &[u32]| l.iter().enumerate().all(|(i, c)| !l[..i].contains(c));
        if !(distinct(a) && distinct(b) && distinct(out)) {
            return None;
        }
        let len = |l: &[u32]| l.iter().map(|&c| sizes[c as usize]).product::<usize>();
        let big = if len(a) >= len(b) { a } else { b };
        let &lane = big.last()?;
        if sizes[lane as usize] < MIN_LANE || !out.contains(&lane) {
            return None;
        }
        // Each tensor with the lane label moved innermost, and the elements copied so.
        let moved = |l: &[u32]| -> Group {
            let mut g: Group = l.iter().copied().filter(|&c| c != lane).collect();
            if l.contains(&lane) {
                g.push(lane);
            }
            g
        };
        let labels = [moved(a), moved(b), moved(out)];
        let copied: usize = [a, b, out].iter().zip(&labels).filter(|(l, g)| l[..] != g[..]).map(|(l, _)| len(l)).sum();
        if copied.saturating_mul(share) > len(big) {
            return None;
        }
        // Output labels outside (each output row stays in cache while it is summed into),
        // the summed ones next, the lane innermost.
        let mut order: SmallVec<[u32; 8]> = labels[2].iter().copied().filter(|&c| c != lane).collect();
        for &c in labels[0].iter().chain(&labels[1]) {
            if c != lane && !order.contains(&c) {
                order.push(c);
            }
        }
        order.push(lane);
        let strides = [0, 1, 2].map(|i| loop_strides(&labels[i], &shape_of(&labels[i], sizes), &order));
        let sizes_in_order = order.iter().map(|&c| sizes[c as usize]).collect();
        Some(LanesPlan { labels, sizes: sizes_in_order, strides, out_len: len(out) })
    }

    /// `Σ a·b` into a new output (labels `out`); `a` and `b` already conjugated where the
    /// spec says so. `sizes` are the spec's label sizes.
    pub(crate) fn run<T: Elem>(
        &self,
        sizes: &[usize],
        (a, la): (&[T], &[u32]),
        (b, lb): (&[T], &[u32]),
        out: &[u32],
    ) -> Vec<T> {
        let moved = |data: &[T], from: &[u32], to: &[u32]| (from != to).then(|| permute(sizes, data, from, to));
        let (pa, pb) = (moved(a, la, &self.labels[0]), moved(b, lb, &self.labels[1]));
        let mut c = zeroed(self.out_len);
        let [sa, sb, sc] = &self.strides;
        lane_loop(&self.sizes, pa.as_deref().unwrap_or(a), sa, pb.as_deref().unwrap_or(b), sb, &mut c, sc);
        for v in [pa, pb].into_iter().flatten() {
            recycle(v);
        }
        if self.labels[2][..] == *out {
            c
        } else {
            let result = permute(sizes, &c, &self.labels[2], out);
            recycle(c);
            result
        }
    }
}

/// `c[pc] += Σ a[pa]·b[pb]` over the loop `sizes`, whose innermost label has stride 1 in
/// `c` and stride 0 or 1 in `a` and `b`.
fn lane_loop<T: Elem>(sizes: &[usize], a: &[T], sa: &[usize], b: &[T], sb: &[usize], c: &mut [T], sc: &[usize]) {
    if sizes.contains(&0) {
        return;
    }
    let last = sizes.len() - 1;
    let n = sizes[last];
    let mut idx: SmallVec<[usize; 8]> = SmallVec::from_elem(0, last);
    let (mut pa, mut pb, mut pc) = (0usize, 0usize, 0usize);
    // Multiply-adds since the stop flag was last read: read as often as the direct loop
    // reads it, not once per lane (a lane is a few dozen multiply-adds).
    let mut unchecked = 0usize;
    loop {
        unchecked += n;
        if unchecked >= crate::stop::DIRECT_STOP_CHECK {
            unchecked = 0;
            if crate::stop::requested() {
                return; // the evaluation is ending with an error; the output is discarded
            }
        }
        triad(lane(a, pa, sa[last], n), lane(b, pb, sb[last], n), &mut c[pc..pc + n]);
        let mut k = last;
        loop {
            if k == 0 {
                return;
            }
            k -= 1;
            idx[k] += 1;
            pa += sa[k];
            pb += sb[k];
            pc += sc[k];
            if idx[k] < sizes[k] {
                break;
            }
            pa -= sa[k] * sizes[k];
            pb -= sb[k] * sizes[k];
            pc -= sc[k] * sizes[k];
            idx[k] = 0;
        }
    }
}

/// The lane of `n` elements of `x` from `p`, at stride `s` (0 or 1).
fn lane<T: Elem>(x: &[T], p: usize, s: usize, n: usize) -> Lane<'_, T> {
    if s == 0 { Lane::Scalar(x[p]) } else { Lane::Slice(&x[p..p + n]) }
}

/// One operand of a lane: a contiguous slice, or one value for every element.
#[derive(Copy, Clone)]
enum Lane<'a, T> {
    Slice(&'a [T]),
    Scalar(T),
}

/// `c += a·b` element by element, `a` and `b` slices of `c`'s length or scalars.
fn triad<T: Elem>(a: Lane<'_, T>, b: Lane<'_, T>, c: &mut [T]) {
    // The crate builds for baseline x86-64 (two doubles per vector); pulp runs the loop
    // compiled for the best instruction set the processor has.
    crate::small_gemm::arch().dispatch(Triad { a, b, c });
}

/// The arguments of [`triad`], as the value pulp dispatches.
struct Triad<'a, T> {
    a: Lane<'a, T>,
    b: Lane<'a, T>,
    c: &'a mut [T],
}

impl<T: Elem> pulp::WithSimd for Triad<'_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) {
        let c = self.c;
        match (self.a, self.b) {
            (Lane::Slice(a), Lane::Slice(b)) => {
                for ((o, &x), &y) in c.iter_mut().zip(a).zip(b) {
                    *o += x * y;
                }
            }
            (Lane::Slice(v), Lane::Scalar(s)) | (Lane::Scalar(s), Lane::Slice(v)) => {
                for (o, &x) in c.iter_mut().zip(v) {
                    *o += x * s;
                }
            }
            (Lane::Scalar(x), Lane::Scalar(y)) => {
                let p = x * y;
                for o in c.iter_mut() {
                    *o += p;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::{ramp_from, reference_labels};

    #[test]
    fn lm_batch_matrix_vector_steps_run_over_lanes() {
        // `ab,cdba->acd`: the lane `a` (1996) is innermost in the large operand.
        let sizes = [1996, 7, 4, 4];
        assert!(LanesPlan::new(&[0, 1], &[2, 3, 1, 0], &[0, 2, 3], &sizes).is_some());
        // Not when the lane label is short, or summed, or the copies are large.
        assert!(LanesPlan::new(&[0, 1], &[2, 3, 1, 0], &[0, 2, 3], &[8, 7, 4, 4]).is_none());
        assert!(LanesPlan::new(&[0, 1], &[2, 3, 1, 0], &[2, 3], &sizes).is_none());
        assert!(LanesPlan::new(&[0, 2, 3, 1], &[2, 3, 1, 0], &[0, 2, 3], &sizes).is_none());
    }

    proptest::proptest! {
        /// Any binary contraction on up to five distinct labels (sizes 1 to 4, the lane 16
        /// to 40) that the plan accepts equals the reference: labels dropped from one
        /// tensor or another give broadcasts, sums and scalar lanes.
        #[test]
        fn lanes_match_the_reference(
            sizes in proptest::collection::vec(1usize..5, 5),
            lane in 16usize..41,
            keys in proptest::collection::vec(0u32..1000, 15),
            masks in proptest::collection::vec(0u32..8, 5),
        ) {
            let mut sizes = sizes;
            sizes[0] = lane;
            // Label `c` is in a, b, out per the bits of its mask; the lane in b and out,
            // innermost in b; the order of each tensor shuffled by `keys`.
            let pick = |bit: u32, i0: usize| -> Vec<u32> {
                let mut l: Vec<u32> = (1..5u32).filter(|&c| masks[c as usize] & bit != 0).collect();
                l.sort_by_key(|&c| keys[i0 + c as usize]);
                l
            };
            let mut la = pick(1, 0);
            let mut lb = pick(2, 5);
            let mut lo = pick(4, 10);
            if masks[0] & 1 != 0 {
                la.insert(keys[0] as usize % (la.len() + 1), 0);
            }
            lb.push(0);
            lo.insert(keys[10] as usize % (lo.len() + 1), 0);
            let (a, b) = (ramp_from(shape_of(&la, &sizes), 0.5), ramp_from(shape_of(&lb, &sizes), 2.0));
            // Every copy allowed, so that most cases run (b is not always the larger).
            if let Some(p) = LanesPlan::with_copy_share(&la, &lb, &lo, &sizes, 0) {
                let got = p.run(&sizes, (a.data(), &la), (b.data(), &lb), &lo);
                let want = reference_labels(&[(&a, &la), (&b, &lb)], &lo, &sizes).unwrap();
                let err = want.data().iter().zip(&got).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max);
                proptest::prop_assert!(err < 1e-12 * (1.0 + want.max_abs()), "{la:?},{lb:?}->{lo:?}: {err}");
            }
        }
    }
}
