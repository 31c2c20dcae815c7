//! Element-wise steps whose rows would be short: the larger operand is permuted to the
//! output's order first ([`PermutedProduct`]), and the product then runs over long rows.
//! Also the cost estimate of an element-wise step ([`elementwise_cost`]) that decides it
//! and that `layout.rs` weighs label orders by (through `kernel::step_cost`).
//!
//! Why: the element-wise kernel writes the output row by row, a row being the run of
//! axes that all three tensors step over contiguously (or not at all). The queens
//! network's steps multiply a `3 × 3` factor into a tensor of up to `3^14` elements and
//! write the factor's labels outermost; when one of them sits near the inner end of the
//! large operand, the rows are 3 elements long, and each row's set-up and the jump to the
//! next (which breaks the hardware prefetcher's stream) cost several times the elements
//! themselves. `permute.rs` moves the same elements in square tiles, reading and writing
//! whole cache lines, so the copy and a product over contiguous rows cost less than the
//! product over short rows, at the price of one pooled temporary.
//!
//! Input invariants: those of `ElementwisePlan::new` (no repeated label, nothing summed).
//! Output: exactly what the element-wise kernel gives (each element is one product, so
//! the result is bit for bit the same). Cost: one permutation copy of the larger operand
//! (`O(|operand|)`, on the pool's threads from `PAR_PERMUTE_MIN_ELEMENTS`) and the product.

use smallvec::SmallVec;

use crate::buffer::recycle;
use crate::elem::Elem;
use crate::elementwise::ElementwisePlan;
use crate::permute::permute;

/// Per element of an element-wise step's output, in `GemmPlan::cost`'s units (about
/// nanoseconds): a product over contiguous rows runs at about the speed of a copy.
const ELEMENT_COST: f64 = 0.6;

/// What rows of length 1 add per element, falling as the square root of the rows' length
/// (the row's set-up and the jump to the next). Fitted to steps of `3^13` elements, a
/// `3 × 3` factor times a large operand, against the same step over contiguous rows
/// (0.92 ms): rows of 3 took 4.9 ms, of 9 2.6, of 27 2.1, of 81 1.5.
const ROW_COST: f64 = 4.3;

/// Per element of a permutation copy in `permute.rs`'s tiles (2.1 ms for `3^13`
/// elements, a label moved from the inner end to the outer).
const PERMUTE_ELEMENT_COST: f64 = 1.3;

/// Operands up to this many elements stay in the first caches: gathering one costs no more
/// than reading it in order.
const CACHED_ELEMENTS: usize = 1 << 12;

/// The copy is made only when it is estimated this factor cheaper than the short rows, so
/// that estimates near each other leave the kernel as it was.
const MIN_GAIN: f64 = 1.25;

/// The estimated time of `plan` on operands of `lens` elements, in `GemmPlan::cost`'s units:
/// per element of the output, [`ELEMENT_COST`] plus [`ROW_COST`] over the square root of
/// the rows' length, a row gathering a large operand (a stride above one) counting as
/// rows of one.
pub(crate) fn elementwise_cost(plan: &ElementwisePlan, lens: [usize; 2]) -> f64 {
    let (n, rows, strides) = plan.row_shape();
    let gathers = strides.iter().zip(lens).any(|(&s, len)| s > 1 && len > CACHED_ELEMENTS);
    let run = if gathers { 1.0 } else { n as f64 };
    (n * rows) as f64 * (ELEMENT_COST + ROW_COST / run.sqrt())
}

/// An element-wise step run as the permutation of one operand to the output's order,
/// then the element-wise kernel over long rows.
#[derive(Debug)]
pub(crate) struct PermutedProduct {
    /// The operand permuted: 0 for `a`, 1 for `b`.
    which: usize,
    /// Its labels as given, and in the output's order.
    from: SmallVec<[u32; 8]>,
    to: SmallVec<[u32; 8]>,
    /// The product with the permuted operand.
    plan: ElementwisePlan,
    /// The estimated time, copy included ([`elementwise_cost`]'s units).
    cost: f64,
}

impl PermutedProduct {
    /// The permuted form of `a, b -> out` (whose element-wise plan is `direct`) when it is
    /// estimated at least [`MIN_GAIN`] times cheaper than `direct`; the larger operand is
    /// the one permuted.
    pub(crate) fn new(a: &[u32], b: &[u32], out: &[u32], sizes: &[usize], direct: &ElementwisePlan) -> Option<Self> {
        let len = |l: &[u32]| l.iter().try_fold(1usize, |p, &c| p.checked_mul(sizes[c as usize]));
        let lens = [len(a)?, len(b)?];
        let which = usize::from(lens[1] > lens[0]);
        let from: SmallVec<[u32; 8]> = [a, b][which].iter().copied().collect();
        let to: SmallVec<[u32; 8]> = out.iter().copied().filter(|c| from.contains(c)).collect();
        if to == from || to.len() != from.len() {
            return None;
        }
        let plan = if which == 0 {
            ElementwisePlan::new(&to, b, out, sizes)
        } else {
            ElementwisePlan::new(a, &to, out, sizes)
        }?;
        let cost = lens[which] as f64 * PERMUTE_ELEMENT_COST + elementwise_cost(&plan, lens);
        (cost * MIN_GAIN < elementwise_cost(direct, lens)).then_some(PermutedProduct { which, from, to, plan, cost })
    }

    /// The estimated time, the copy included ([`elementwise_cost`]'s units).
    pub(crate) fn cost(&self) -> f64 {
        self.cost
    }

    /// `out = op(a)·op(b)` element by element (as `ElementwisePlan::run`), `sizes` the
    /// labels' sizes.
    pub(crate) fn run<T: Elem>(&self, a: &[T], b: &[T], conj: [bool; 2], sizes: &[usize]) -> Vec<T> {
        let moved = permute(sizes, [a, b][self.which], &self.from, &self.to);
        let out = if self.which == 0 { self.plan.run(&moved, b, conj) } else { self.plan.run(a, &moved, conj) };
        recycle(moved);
        out
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::reference::{ramp_from, reference_labels};

    #[test]
    fn a_queens_step_with_rows_of_three_is_permuted_and_long_rows_are_not() {
        let sizes = [3usize; 13];
        // `ab,acdefghijklbm->abcdefghijklm`: `b` next to the inner end of the large operand.
        let (f, big, out) = ([0, 1], [0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 1, 12], (0u32..13).collect::<Vec<_>>());
        let direct = ElementwisePlan::new(&f, &big, &out, &sizes).unwrap();
        assert_eq!(direct.row_shape().0, 3);
        let p = PermutedProduct::new(&f, &big, &out, &sizes, &direct).expect("rows of 3 are worth a copy");
        assert_eq!(p.which, 1);
        assert!(p.cost() * MIN_GAIN < elementwise_cost(&direct, [9, 3usize.pow(13)]));
        // `ab,acdefghibjklm->abcdefghijklm`: rows of 81, left as they are.
        let big = [0, 2, 3, 4, 5, 6, 7, 8, 1, 9, 10, 11, 12];
        let direct = ElementwisePlan::new(&f, &big, &out, &sizes).unwrap();
        assert_eq!(direct.row_shape().0, 81);
        assert!(PermutedProduct::new(&f, &big, &out, &sizes, &direct).is_none());
        // The same shape on `3^9` elements, the factor second: permuted, and equal to the
        // reference.
        let (big, out) = ([0, 2, 3, 4, 5, 6, 7, 1, 8], (0u32..9).collect::<Vec<_>>());
        let direct = ElementwisePlan::new(&big, &f, &out, &sizes).unwrap();
        let p = PermutedProduct::new(&big, &f, &out, &sizes, &direct).expect("rows of 3");
        assert_eq!(p.which, 0);
        let (ta, tb) = (ramp_from(vec![3; 9], 0.5), ramp_from(vec![3, 3], 2.0));
        let want = reference_labels(&[(&ta, &big[..]), (&tb, &f[..])], &out, &sizes).unwrap();
        assert_eq!(&p.run(ta.data(), tb.data(), [false; 2], &sizes)[..], want.data());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// A small factor times a large operand whose labels come in a random order, into
        /// a random output order (some factor labels broadcast, some shared), either side:
        /// where the permuted form is chosen, it equals the reference bit for bit (each
        /// element is one product), and so does the plain kernel.
        #[test]
        fn permuted_products_equal_the_reference(
            big in Just((0u32..9).collect::<Vec<_>>()).prop_shuffle(),
            factor in proptest::sample::subsequence((0u32..10).collect::<Vec<_>>(), 1..=3).prop_shuffle(),
            order in Just((0u32..10).collect::<Vec<_>>()).prop_shuffle(),
            factor_first in any::<bool>(),
        ) {
            let sizes = [3usize, 3, 3, 3, 3, 3, 3, 2, 2, 3];
            let out: Vec<u32> = order.into_iter().filter(|c| big.contains(c) || factor.contains(c)).collect();
            let (a, b) = if factor_first { (&factor, &big) } else { (&big, &factor) };
            let shape = |l: &[u32]| l.iter().map(|&c| sizes[c as usize]).collect::<Vec<_>>();
            let (ta, tb) = (ramp_from(shape(a), 0.5), ramp_from(shape(b), 3.0));
            let want = reference_labels(&[(&ta, &a[..]), (&tb, &b[..])], &out, &sizes).expect("the reference");
            let direct = ElementwisePlan::new(a, b, &out, &sizes).expect("sums nothing");
            prop_assert_eq!(&direct.run(ta.data(), tb.data(), [false; 2])[..], want.data());
            if let Some(p) = PermutedProduct::new(a, b, &out, &sizes, &direct) {
                prop_assert_eq!(&p.run(ta.data(), tb.data(), [false; 2], &sizes)[..], want.data());
            }
        }
    }
}
