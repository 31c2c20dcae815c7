//! [`RangeScan`], a float64 array's range (`strip_exponent`'s test) in one vector pass,
//! and a result's range as a tensor: [`range_of`] is what `TensorOp::Range` computes, the
//! two-entry tensor `[largest modulus (infinite when an entry is not finite), 1 if an entry
//! is not finite else 0]`, and [`scan_of`] reads it back as a [`RangeScan`]. Carrying the scan as a
//! program value lets a compiled program read each result right after the step that wrote
//! it (`ranged.rs`), on the thread that wrote it, rather than after the whole program,
//! when large results have left the cache.

use std::any::Any;

use crate::c64;
use crate::elem::Elem;
use crate::tensor::Tensor;

/// Lanes of the scan's accumulators: eight independent maxima and sums, which the compiler
/// keeps in vector registers; one accumulator would chain every element's comparison.
pub(crate) const LANES: usize = 8;

/// What a scan of a float64 array found: whether an entry is not finite (infinite or NaN),
/// and the largest modulus of its entries (infinite when one is not finite). Scans of parts of one array combine by
/// [`RangeScan::merge`] into the scan of the whole.
///
/// ```
/// use einsum::RangeScan;
/// let s = RangeScan::of(&[1.0, -3.0, 2.0]);
/// assert_eq!((s.not_finite(), s.largest()), (false, 3.0));
/// assert!(!s.left_range());
/// assert!(RangeScan::of(&[1.0, f64::NAN]).left_range());
/// assert!(RangeScan::of(&[1e-310, 0.0]).left_range()); // only subnormal entries
/// assert!(!RangeScan::of(&[0.0, 0.0]).left_range()); // all zero is in range
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RangeScan {
    not_finite: bool,
    largest: f64,
}

impl RangeScan {
    /// The scan of no element.
    pub const EMPTY: RangeScan = RangeScan { not_finite: false, largest: 0.0 };

    /// The scan whose parts are these ([`scan_of`] reads a scan back from a tensor).
    pub(crate) fn from_parts(not_finite: bool, largest: f64) -> Self {
        RangeScan { not_finite, largest }
    }

    /// The scan of `s`, in the lanes the pass uses, compiled for the vector instructions
    /// the processor has (chosen at run time).
    pub fn of(s: &[f64]) -> Self {
        crate::small_gemm::arch().dispatch(ScanOf(s))
    }

    /// The scan of complex entries by their moduli, read from their parts: every modulus
    /// is within a factor √2 of its larger part's, so where the largest part's modulus `p`
    /// is more than a factor 1.5 (√2 and a margin for rounding) from the normal range's
    /// bottom and float64's top, `largest` is `p` and [`RangeScan::left_range`] says what
    /// the moduli would; near either end the moduli are computed (`hypot`, many times a
    /// comparison's cost) and `largest` is theirs. Scans of parts of an array merge into a
    /// scan with the same `left_range` as the whole's.
    ///
    /// ```
    /// use einsum::{RangeScan, c64};
    /// let tiny = f64::MIN_POSITIVE;
    /// assert!(!RangeScan::of_complex(&[c64::new(3.0, -4.0)]).left_range());
    /// assert!(RangeScan::of_complex(&[c64::new(1.0, f64::NAN)]).left_range());
    /// assert!(RangeScan::of_complex(&[c64::new(0.6 * tiny, 0.0)]).left_range());
    /// // Parts below the normal range whose modulus is in it.
    /// assert!(!RangeScan::of_complex(&[c64::new(0.8 * tiny, 0.8 * tiny)]).left_range());
    /// // Finite parts whose modulus overflows.
    /// assert!(RangeScan::of_complex(&[c64::new(1.5e308, 1.5e308)]).left_range());
    /// ```
    pub fn of_complex(s: &[c64]) -> Self {
        let mut lanes = Lanes::new();
        let mut blocks = s.chunks_exact(LANES);
        for block in &mut blocks {
            for (i, z) in block.iter().enumerate() {
                lanes.see_two(i, z.re, z.im);
            }
        }
        for z in blocks.remainder() {
            lanes.see_two(0, z.re, z.im);
        }
        let parts = lanes.scan();
        let p = parts.largest;
        let near_an_end = p >= f64::MAX / 1.5 || (f64::MIN_POSITIVE / 1.5..f64::MIN_POSITIVE).contains(&p);
        if parts.not_finite || !near_an_end {
            return parts;
        }
        RangeScan::of_moduli(s)
    }

    /// The scan of entries of any element type by their moduli, one at a time (the plain
    /// test that [`RangeScan::of`] and [`RangeScan::of_complex`] vectorize).
    pub(crate) fn of_moduli<T: Elem>(s: &[T]) -> Self {
        s.iter().fold(RangeScan::EMPTY, |acc, v| {
            let m = v.modulus();
            acc.merge(if m.is_finite() {
                RangeScan::from_parts(false, m)
            } else {
                RangeScan::from_parts(true, f64::INFINITY)
            })
        })
    }

    /// The scan of an array made of the parts `self` and `other` scanned.
    pub fn merge(self, other: RangeScan) -> RangeScan {
        RangeScan { not_finite: self.not_finite || other.not_finite, largest: self.largest.max(other.largest) }
    }

    /// Whether an entry is infinite or NaN.
    pub fn not_finite(&self) -> bool {
        self.not_finite
    }

    /// The largest modulus of the entries: 0 for none, infinite when one is not finite
    /// (of a complex scan, [`RangeScan::of_complex`], away from the ends of the range the
    /// largest modulus of a part, within a factor √2 of it).
    pub fn largest(&self) -> f64 {
        self.largest
    }

    /// Whether the array has left float64's range as a contraction's result does when an
    /// intermediate overflowed or underflowed: an entry that is not finite, or a largest
    /// modulus that is not zero but below the normal range (`strip_exponent`'s test).
    pub fn left_range(&self) -> bool {
        self.not_finite || (self.largest > 0.0 && self.largest < f64::MIN_POSITIVE)
    }
}

/// The scan's accumulators, lane by lane: the largest modulus, and a sum of `x · 0`, which
/// turns NaN at the first entry that is not finite and stays NaN (a comparison per entry
/// and a branch would keep the loop scalar).
#[derive(Clone, Copy)]
pub(crate) struct Lanes {
    largest: [f64; LANES],
    poison: [f64; LANES],
}

impl Lanes {
    pub(crate) fn new() -> Self {
        Lanes { largest: [0.0; LANES], poison: [0.0; LANES] }
    }

    #[inline(always)]
    pub(crate) fn see(&mut self, i: usize, x: f64) {
        let m = x.abs();
        // NaN compares false and leaves the maximum alone; the poisoned sum has caught it.
        self.largest[i] = if m > self.largest[i] { m } else { self.largest[i] };
        self.poison[i] += x * 0.0;
    }

    /// [`Lanes::see`] of a block's entries, one per lane: a loop short enough that the
    /// compiler unrolls it and keeps the accumulators in vector registers, which a block
    /// loop writing several outputs and calling [`Lanes::see`] per entry did not.
    #[inline(always)]
    pub(crate) fn see_block(&mut self, block: &[f64; LANES]) {
        for (i, &x) in block.iter().enumerate() {
            self.see(i, x);
        }
    }

    /// [`Lanes::see`] of two entries of lane `i`, folded together before they meet the
    /// accumulators: each accumulator is a chain of four-cycle operations (a maximum, a
    /// sum), so folding first halves the chains' steps per entry.
    #[inline(always)]
    pub(crate) fn see_two(&mut self, i: usize, x: f64, y: f64) {
        let (mx, my) = (x.abs(), y.abs());
        let m = if mx > my { mx } else { my };
        self.largest[i] = if m > self.largest[i] { m } else { self.largest[i] };
        self.poison[i] += x * 0.0 + y * 0.0;
    }

    pub(crate) fn scan(&self) -> RangeScan {
        let not_finite = self.poison.iter().any(|p| p.is_nan());
        let largest = self.largest.iter().fold(0.0f64, |m, &x| if x > m { x } else { m });
        // An infinite entry poisoned its lane; the maximum then holds it, but `not_finite`
        // says so and `largest` is documented for finite entries.
        RangeScan { not_finite, largest: if not_finite { f64::INFINITY } else { largest } }
    }
}

/// A scan of contiguous entries of one element type, as a kernel that scans what it writes
/// takes it ([`slice_scan`]).
pub(crate) type SliceScan<T> = fn(&[T]) -> RangeScan;

/// The scan of `T`'s entries: float64 by [`RangeScan::of`]'s vector pass, complex by
/// [`RangeScan::of_complex`]'s, any other type by the moduli one by one.
///
/// Why a function pointer: kernels generic over [`Elem`] choose it once per call, and a
/// function pointer type is `'static`, so it is found by downcasting without a bound on
/// `T` beyond [`Elem`].
pub(crate) fn slice_scan<T: Elem>() -> SliceScan<T> {
    let real: SliceScan<f64> = RangeScan::of;
    let complex: SliceScan<c64> = RangeScan::of_complex;
    let known: [&dyn Any; 2] = [&real, &complex];
    known.iter().find_map(|f| f.downcast_ref::<SliceScan<T>>()).copied().unwrap_or(RangeScan::of_moduli::<T>)
}

/// [`RangeScan::of`]'s argument, as the value pulp dispatches (a closure would not be
/// inlined into the function compiled for the processor's instructions).
struct ScanOf<'a>(&'a [f64]);

impl pulp::WithSimd for ScanOf<'_> {
    type Output = RangeScan;

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) -> RangeScan {
        let mut lanes = Lanes::new();
        let mut pairs = self.0.chunks_exact(2 * LANES);
        for pair in &mut pairs {
            let pair = <&[f64; 2 * LANES]>::try_from(pair).expect("a whole pair of blocks");
            for i in 0..LANES {
                lanes.see_two(i, pair[i], pair[i + LANES]);
            }
        }
        for (i, &x) in pairs.remainder().iter().enumerate() {
            lanes.see(i % LANES, x);
        }
        lanes.scan()
    }
}

/// The range of `x` as a two-entry tensor (module docs).
pub(crate) fn range_of<T: Elem>(x: &Tensor<T>) -> Tensor<T> {
    let scan = range(x);
    let flag = if scan.not_finite() { 1.0 } else { 0.0 };
    Tensor::new(vec![2], vec![T::from_f64(scan.largest()), T::from_f64(flag)])
        .expect("two entries make a tensor of shape [2]")
}

/// The [`RangeScan`] of `x` ([`slice_scan`]'s for its element type).
fn range<T: Elem>(x: &Tensor<T>) -> RangeScan {
    slice_scan::<T>()(x.data())
}

/// The [`RangeScan`] a [`range_of`] tensor holds, or `None` for a tensor of another shape.
pub(crate) fn scan_of<T: Elem>(t: &Tensor<T>) -> Option<RangeScan> {
    match t.data() {
        [largest, flag] if t.shape() == [2] => Some(RangeScan::from_parts(flag.modulus() != 0.0, largest.modulus())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::c64;

    /// Arrays with specials and values near the ends of the range.
    fn cases() -> Vec<Vec<f64>> {
        let tiny = f64::MIN_POSITIVE / 4.0;
        vec![
            vec![],
            vec![0.0, -0.0],
            vec![1.0, -3.5, 2.0],
            vec![tiny, -tiny / 2.0],
            vec![1e308, -1.7e308],
            vec![1.0, f64::INFINITY],
            vec![f64::NAN, 2.0],
            vec![-f64::INFINITY, tiny, 5.0],
            (0..1000).map(|i| (i as f64 - 500.0) * 1e-3).collect(),
        ]
    }

    #[test]
    fn a_range_tensor_reads_back_as_the_scan_of_its_array() {
        for v in cases() {
            let n = v.len();
            let want = RangeScan::of(&v);
            let got = scan_of(&range_of(&Tensor::new(vec![n], v.clone()).unwrap())).unwrap();
            assert_eq!(got.not_finite(), want.not_finite(), "{v:?}");
            assert_eq!(got.left_range(), want.left_range(), "{v:?}");
            if !want.not_finite() {
                assert_eq!(got.largest(), want.largest(), "{v:?}");
            }
            // Complex: the same verdicts on the moduli of `x + 0i` and of `0 + xi`.
            for z in
                [v.iter().map(|&x| c64::new(x, 0.0)).collect::<Vec<_>>(), v.iter().map(|&x| c64::new(0.0, x)).collect()]
            {
                let got = scan_of(&range_of(&Tensor::new(vec![n], z).unwrap())).unwrap();
                assert_eq!((got.not_finite(), got.left_range()), (want.not_finite(), want.left_range()), "{v:?}");
            }
        }
        assert_eq!(scan_of(&Tensor::new(vec![3], vec![1.0, 2.0, 3.0]).unwrap()), None);
    }

    #[test]
    fn slice_scans_are_the_element_types_own() {
        for v in cases() {
            let want = RangeScan::of(&v);
            let got = slice_scan::<f64>()(&v);
            assert_eq!((got.not_finite(), got.left_range()), (want.not_finite(), want.left_range()), "{v:?}");
            let z: Vec<c64> = v.iter().map(|&x| c64::new(0.0, x)).collect();
            let got = slice_scan::<c64>()(&z);
            assert_eq!((got.not_finite(), got.left_range()), (want.not_finite(), want.left_range()), "{v:?}");
        }
    }

    /// A part drawn near the ends of the range now and then: ordinary values, values
    /// within a factor 1.5 of the normal range's bottom and of float64's top (where a
    /// modulus may cross the bound its parts do not), and specials.
    fn part() -> impl proptest::strategy::Strategy<Value = f64> {
        use proptest::prelude::*;
        let tiny = f64::MIN_POSITIVE;
        prop_oneof![
            4 => -4.0f64..4.0,
            2 => Just(0.0),
            2 => (0.5f64..1.2).prop_map(move |x| x * tiny),
            1 => (0.01f64..0.5).prop_map(move |x| x * tiny),
            2 => (0.5f64..0.9).prop_map(|x| x * f64::MAX),
            1 => Just(f64::INFINITY),
            1 => Just(f64::NAN),
        ]
    }

    proptest::proptest! {
        /// `of_complex`'s verdict, of the whole and of two parts merged, equals the one of
        /// the moduli computed one by one (`hypot`), the plain reference.
        #[test]
        fn complex_scans_decide_as_the_moduli(
            entries in proptest::collection::vec((part(), part()), 0..40),
            scale in proptest::sample::select(vec![1.0, 1e-300, 0.0]),
            cut in 0usize..40,
        ) {
            let z: Vec<c64> = entries.iter().map(|&(re, im)| c64::new(re * scale, im * scale)).collect();
            let want = RangeScan::of_moduli(&z);
            let whole = RangeScan::of_complex(&z);
            let (a, b) = z.split_at(cut.min(z.len()));
            let merged = RangeScan::of_complex(a).merge(RangeScan::of_complex(b));
            for got in [whole, merged] {
                proptest::prop_assert_eq!(got.left_range(), want.left_range(), "{:?}", z);
                proptest::prop_assert_eq!(got.not_finite(), want.not_finite(), "{:?}", z);
            }
            let tensor = Tensor::new(vec![z.len()], z.clone()).unwrap();
            proptest::prop_assert_eq!(scan_of(&range_of(&tensor)).unwrap().left_range(), want.left_range());
        }
    }
}
