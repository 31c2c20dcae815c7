//! [`ElementwiseProduct`]: a contraction of two operands that sums nothing (`ij,ij->ij` of
//! any type, broadcasts such as `ij,j->ij`, permutations such as `ij,ji->ij`, outer
//! products), its value and gradients run outside the compiled program by the kernels
//! that program's steps run, each result's range ([`RangeScan`]) found while it is written.
//!
//! Why beside the compiled program: `strip_exponent=None`'s test needs the range of every
//! result, which the compiled program gives by a pass over the result after the call (the
//! forward) or by a `Range` step after each result's step (`ranged.rs`): a second read of
//! every result, which for a product that is itself one pass over memory is a large part
//! of the call (docs/PERFORMANCE.md, ew43 and ew44). Here the element-wise kernel scans each
//! unit of rows right after it writes it, from the first-level cache
//! (`ElementwisePlan::run_scanned`). [`Hadamard`](crate::Hadamard) does the same for the
//! float64 product of one layout with every result formed in registers, and the Python
//! extension tries it first.
//!
//! Input invariants ([`ElementwiseProduct::for_plan`] checks them): a plan of two operands,
//! unsliced, no label repeated in a tensor, every operand label an output label, the
//! operands' shapes those of the labels' sizes.
//!
//! Output invariants: the value is the element-wise kernel's on the plan's labels, as the
//! compiled program's one step forms it. A gradient is the transposed contraction
//! `Einsum::gradient` runs (`ContractSpec::transpose_a` and `transpose_b`, conjugations
//! for complex operands only): element-wise where the operand has every output label
//! (written once, scanned as written), else a sum over the labels it lacks by the
//! contraction kernels (scanned after: it is the smaller tensor). A scalar cotangent of a
//! non-scalar product stands for that value everywhere (`Einsum::gradient_of_sum`), and a
//! cotangent of 1 multiplies nothing, so such a gradient is the other operand's entries
//! themselves, bit for bit.
//!
//! Cost: the value reads `|a| + |b|` elements and writes `|out|`; a gradient of an operand
//! with every output label writes `|out|` and reads the other operand (and a cotangent
//! tensor), one of a broadcast operand reads the other operand (and the cotangent) once.
//! For a scalar cotangent, where the other operand has the output's labels in its order,
//! that sum is formed in the value's pass as each piece of the operand is read
//! (`ElementwisePlan::run_summing`), so the operand is read once for both.

use crate::buffer::begin_evaluation;
use crate::elem::Elem;
use crate::elementwise::{ElementwisePlan, PAR_ELEMENTWISE_MIN_ELEMENTS};
use crate::error::{EinsumError, EinsumResult};
use crate::kernel::{self, ContractSpec, UnarySpec};
use crate::plan::Plan;
use crate::scan::{RangeScan, SliceScan, slice_scan};
use crate::tensor::Tensor;

/// The value and gradients of [`ElementwiseProduct::value_and_grad`], and whether any of
/// them left float64's range.
#[derive(Debug)]
pub struct ProductOutputs<T: Elem> {
    /// The product.
    pub value: Tensor<T>,
    /// One per `wrt` entry, in its order.
    pub grads: Vec<Tensor<T>>,
    /// Whether the value or a gradient left float64's range ([`RangeScan::left_range`] of
    /// each, by moduli for complex results).
    pub left_range: bool,
}

/// A contraction of two operands that sums nothing, with its value and gradients found
/// with their ranges in the passes that write them (see the module docs).
///
/// ```
/// use einsum::{ElementwiseProduct, MemoryLimit, PathChoice, Plan, Tensor};
///
/// let plan = Plan::new("ij,j->ij", &[vec![2, 2], vec![2]], PathChoice::Greedy, MemoryLimit::Unlimited).unwrap();
/// let p = ElementwiseProduct::for_plan(&plan).expect("a product that sums nothing");
/// let a = Tensor::new(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
/// let b = Tensor::new(vec![2], vec![10.0, -1.0]).unwrap();
/// let (value, scan) = p.value_with_range(&a, &b).unwrap();
/// assert_eq!(value.data(), &[10.0, -2.0, 30.0, -4.0]);
/// assert!(!scan.left_range());
/// // The gradients of the product's sum (a scalar cotangent): `b` broadcast, `a`'s column sums.
/// let out = p.value_and_grad(&a, &b, &Tensor::scalar(1.0), &[0, 1]).unwrap();
/// assert_eq!((out.grads[0].data(), out.grads[1].data()), (&[10.0, -1.0, 10.0, -1.0][..], &[4.0, 6.0][..]));
/// // A product that sums a label is not one.
/// let dot = Plan::new("ij,j->i", &[vec![2, 2], vec![2]], PathChoice::Greedy, MemoryLimit::Unlimited).unwrap();
/// assert!(ElementwiseProduct::for_plan(&dot).is_none());
/// ```
#[derive(Debug)]
pub struct ElementwiseProduct {
    /// `a, b -> out`, neither conjugated.
    spec: ContractSpec,
    /// The element-wise kernel's loop for `spec`.
    plan: ElementwisePlan,
    /// When one operand has the output's labels in its order and the other fewer: the
    /// other's position and the loop with the full operand first, which sums the full
    /// operand into the other's layout as it forms the product
    /// (`ElementwisePlan::run_summing`, the small operand's gradient for a scalar cotangent).
    summing: Option<(usize, ElementwisePlan)>,
}

impl ElementwiseProduct {
    /// The product `plan` contracts, if it is one (module docs' input invariants).
    pub fn for_plan(plan: &Plan) -> Option<ElementwiseProduct> {
        let n = plan.network();
        let [a, b] = &n.inputs[..] else { return None };
        if !plan.sliced().is_empty() {
            return None;
        }
        let spec = ContractSpec::new(a, b, &n.output, &n.sizes).ok()?;
        if [spec.a_shape(), spec.b_shape()] != plan.shapes() {
            return None;
        }
        let p = ElementwisePlan::new(spec.a_labels(), spec.b_labels(), spec.out_labels(), spec.sizes())?;
        let labels = [spec.a_labels(), spec.b_labels()];
        let summing = (0..2).find_map(|k| {
            let (full, small) = (labels[1 - k], labels[k]);
            (full == spec.out_labels() && small.len() < full.len())
                .then(|| ElementwisePlan::new(full, small, spec.out_labels(), spec.sizes()))
                .flatten()
                .filter(ElementwisePlan::sums_a_along)
                .map(|p| (k, p))
        });
        Some(ElementwiseProduct { spec, plan: p, summing })
    }

    /// Whether a caller that can run either this type or the compiled program (the Python
    /// extension's checked calls) should run this type: when an operand has as many
    /// elements as the product, as in `ij,j->ij`, `ij,ji->ij` or `ijk,jk->ijk`; not for an
    /// outer product (`bi,bj->bij`, `i,j->ij`), where neither has.
    ///
    /// Why, from what the passes do: with such an operand every result is one pass over the
    /// product's size or less, as in the program, and this type saves the program's second
    /// read of each result (its range, scanned here as the result is written): the other
    /// operand broadcast, the full operand summed into the small one's layout (in the
    /// value's pass, for a scalar cotangent), or an element-wise product with the
    /// cotangent. Without one, a scalar cotangent's gradient of each operand is the other
    /// operand summed over the labels it alone has and broadcast over those it lacks
    /// (`bj -> bi`), which `kernel::unary` forms in the direct loop, one sum per element
    /// of the gradient: work of the product's size per gradient, where the program's
    /// gradient of the sum never reaches the product's size. Nor is the outer product's
    /// value alone a gain: written in units of its short rows between scans, it measured
    /// slower than the program's step with a scan after (docs/PERFORMANCE.md, ew46).
    pub fn beats_the_program(&self) -> bool {
        let out: usize = self.spec.out_shape().iter().product();
        [self.spec.a_shape(), self.spec.b_shape()].iter().any(|s| s.iter().product::<usize>() == out)
    }

    /// The product's shape.
    pub fn out_shape(&self) -> Vec<usize> {
        self.spec.out_shape()
    }

    /// Whether a pass inside a rayon pool of `threads` threads would use more than the
    /// calling thread (as `Einsum::uses_threads`): only for products large enough that a
    /// piece's work dwarfs handing it over.
    pub fn uses_threads(&self, threads: usize) -> bool {
        threads > 1 && self.spec.out_shape().iter().product::<usize>() >= PAR_ELEMENTWISE_MIN_ELEMENTS
    }

    /// The product and the scan of it, made while it was written. Errors: operands of
    /// other shapes ([`EinsumError::Shape`]), or the stop flag raised
    /// ([`EinsumError::Interrupted`]).
    pub fn value_with_range<T: Elem>(&self, a: &Tensor<T>, b: &Tensor<T>) -> EinsumResult<(Tensor<T>, RangeScan)> {
        self.check_operands(a, b)?;
        let _evaluation = begin_evaluation();
        let (out, scan) = self.plan.run_scanned(a.data(), b.data(), [false; 2], Some(slice_scan::<T>()));
        crate::stop::check()?;
        Ok((Tensor::from_parts(&self.spec.out_shape(), out), scan))
    }

    /// The value and the gradients of `⟨C, a·b⟩` with respect to the operands `wrt` (each
    /// 0 or 1, in any order and with repeats) for the cotangent `c`, with whether any of
    /// them left float64's range. A scalar `c` of a product that is not a scalar stands
    /// for that value everywhere. Errors: tensors of other shapes, a `wrt` entry above 1
    /// ([`EinsumError::Shape`]), or the stop flag raised.
    pub fn value_and_grad<T: Elem>(
        &self,
        a: &Tensor<T>,
        b: &Tensor<T>,
        c: &Tensor<T>,
        wrt: &[usize],
    ) -> EinsumResult<ProductOutputs<T>> {
        self.check_operands(a, b)?;
        let out_shape = self.spec.out_shape();
        let scalar = c.shape().is_empty() && !out_shape.is_empty();
        if !scalar && c.shape() != out_shape {
            return Err(EinsumError::Shape(format!(
                "the cotangent of the element-wise product has shape {:?}, expected {out_shape:?} or a scalar",
                c.shape()
            )));
        }
        if let Some(w) = wrt.iter().find(|&&w| w > 1) {
            return Err(EinsumError::Shape(format!("an element-wise product has two operands, not operand {w}")));
        }
        let _evaluation = begin_evaluation();
        let scan = slice_scan::<T>();
        let operands = [a, b];
        // With a scalar cotangent a broadcast operand's gradient is the other operand summed
        // over the labels it lacks: formed in the value's pass where the loop allows.
        let fused = match &self.summing {
            Some((k, p)) if scalar && wrt.contains(k) => {
                let (full, small) = (operands[1 - k], operands[*k]);
                // The product in `a·b`'s order: the small operand first when it is `a`.
                p.run_summing(full.data(), small.data(), small.len(), *k == 0, scan).map(|r| (*k, r))
            }
            _ => None,
        };
        let (value, s, mut summed) = match fused {
            Some((k, (value, sum, s))) => (value, s, Some((k, sum))),
            None => {
                let (value, s) = self.plan.run_scanned(a.data(), b.data(), [false; 2], Some(scan));
                (value, s, None)
            }
        };
        let mut left_range = s.left_range();
        let mut made: [Option<Tensor<T>>; 2] = [None, None];
        for (k, slot) in made.iter_mut().enumerate() {
            if wrt.contains(&k) {
                let sum = summed.take_if(|(j, _)| *j == k).map(|(_, sum)| sum);
                let (g, s) = self.gradient(k, operands, c, scalar, sum, scan)?;
                left_range |= s.left_range();
                *slot = Some(g);
            }
        }
        crate::stop::check()?;
        // Tensors share their buffer when cloned: a repeated `wrt` entry costs no copy.
        let grads = wrt.iter().map(|&w| made[w].clone().expect("computed for every wrt entry")).collect();
        Ok(ProductOutputs { value: Tensor::from_parts(&out_shape, value), grads, left_range })
    }

    /// The gradient with respect to operand `k` and its scan: the transposed contraction
    /// (`k = 0`: `c, b -> a`; `k = 1`: `a, c -> b`), the cotangent `c` a scalar for every
    /// entry when `scalar`, and `summed` the other operand's sum over the labels operand
    /// `k` lacks when the value's pass formed it.
    fn gradient<T: Elem>(
        &self,
        k: usize,
        operands: [&Tensor<T>; 2],
        c: &Tensor<T>,
        scalar: bool,
        summed: Option<Vec<T>>,
        scan: SliceScan<T>,
    ) -> EinsumResult<(Tensor<T>, RangeScan)> {
        let t = if k == 0 { self.spec.transpose_a() } else { self.spec.transpose_b() };
        // Real operands take no conjugation (as `ad.rs`'s adjoint).
        let t = if T::IS_COMPLEX { t } else { t.with_conj([false; 2]) };
        // The cotangent is the transposed contraction's operand `k`, the other operand the rest.
        let other = operands[1 - k];
        let (labels, conj) = (if k == 0 { t.b_labels() } else { t.a_labels() }, t.conj());
        let (conj_c, conj_other) = (conj[k], conj[1 - k]);
        let out_shape = t.out_shape();
        if scalar {
            let x = c.data()[0];
            let x = if conj_c { x.conj() } else { x };
            let factor = (x != T::one()).then_some(x);
            if let Some(p) = ElementwisePlan::new(labels, &[], t.out_labels(), t.sizes()) {
                let (g, s) = p.run_times(other.data(), factor, conj_other, Some(scan));
                return Ok((Tensor::from_parts(&out_shape, g), s));
            }
            // A sum of the other operand over the labels the gradient lacks, times `x`.
            let sum = match summed {
                Some(sum) => Tensor::from_parts(&out_shape, sum),
                None => kernel::unary(&UnarySpec::new(labels, t.out_labels(), t.sizes())?, other),
            };
            let g = match (factor, conj_other) {
                (None, false) => sum,
                (None, true) => sum.map(|v| v.conj()),
                (Some(x), false) => sum.map(|&v| x * v),
                (Some(x), true) => sum.map(|v| x * v.conj()),
            };
            let s = scan(g.data());
            return Ok((g, s));
        }
        let (x, y) = if k == 0 { (c, other) } else { (other, c) };
        if let Some(p) = ElementwisePlan::new(t.a_labels(), t.b_labels(), t.out_labels(), t.sizes()) {
            let (g, s) = p.run_scanned(x.data(), y.data(), conj, Some(scan));
            return Ok((Tensor::from_parts(&out_shape, g), s));
        }
        let g = kernel::contract(&t, x, y);
        let s = scan(g.data());
        Ok((g, s))
    }

    /// `EinsumError::Shape` unless `a` and `b` have the product's operand shapes.
    fn check_operands<T: Elem>(&self, a: &Tensor<T>, b: &Tensor<T>) -> EinsumResult<()> {
        for (what, t, want) in [("operand 0", a, self.spec.a_shape()), ("operand 1", b, self.spec.b_shape())] {
            if t.shape() != want {
                return Err(EinsumError::Shape(format!(
                    "{what} of the element-wise product has shape {:?}, expected {want:?}",
                    t.shape()
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::{MemoryLimit, PathChoice, c64};

    /// An entry drawn from ordinary values and specials (NaN, infinities, signed zeros).
    fn entry() -> impl Strategy<Value = f64> {
        prop_oneof![
            8 => -4.0f64..4.0,
            1 => Just(0.0),
            1 => Just(-0.0),
            1 => Just(f64::INFINITY),
            1 => Just(f64::NEG_INFINITY),
            1 => Just(f64::NAN),
            1 => Just(1e-310),
        ]
    }

    /// Whether `x` and `y` agree: both NaN, equal (zeros of either sign), or within
    /// rounding of a few sums.
    fn agree(x: f64, y: f64) -> bool {
        (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= 1e-12 * (1.0 + x.abs().max(y.abs()))
    }

    /// [`agree`] part by part; complex entries with a part not finite agree with any such
    /// entry (where an infinity meets a zero depends on whether a sum comes before or
    /// after a product, which the program and the kernels order differently).
    fn agree_all<T: Elem>(got: &Tensor<T>, want: &Tensor<T>) -> bool {
        let finite = |v: [u64; 2]| v.iter().all(|&x| f64::from_bits(x).is_finite());
        got.shape() == want.shape()
            && got.data().iter().zip(want.data()).all(|(x, y)| {
                let (x, y) = (x.to_bits(), y.to_bits());
                if T::IS_COMPLEX && !(finite(x) && finite(y)) {
                    return !finite(x) && !finite(y);
                }
                x.iter().zip(&y).all(|(&p, &q)| agree(f64::from_bits(p), f64::from_bits(q)))
            })
    }

    /// The scan's verdict for a whole tensor, by moduli one by one.
    fn left(t: &Tensor<impl Elem>) -> bool {
        RangeScan::of_moduli(t.data()).left_range()
    }

    /// The label lists of a product that sums nothing: `a` and `b` subsets of `0..4` in
    /// any order, the output their union (and nothing else) in any order.
    fn labels() -> impl Strategy<Value = (Vec<u32>, Vec<u32>, Vec<u32>)> {
        (
            proptest::sample::subsequence(vec![0u32, 1, 2, 3], 0..=3).prop_shuffle(),
            proptest::sample::subsequence(vec![0u32, 1, 2, 3], 0..=3).prop_shuffle(),
            Just(vec![0u32, 1, 2, 3]).prop_shuffle(),
        )
            .prop_map(|(a, b, order)| {
                let out = order.into_iter().filter(|c| a.contains(c) || b.contains(c)).collect();
                (a, b, out)
            })
    }

    fn letters(l: &[u32]) -> String {
        l.iter().map(|&c| char::from(b'i' + c as u8)).collect()
    }

    /// Runs the product of `eq` on tensors of `T` made from `entries`, and checks it
    /// against the compiled program (value, gradients for a tensor and a scalar
    /// cotangent) and, for the value, the reference; on two threads, bit for bit equal to
    /// one thread.
    fn check<T: Elem>(
        eq: &str,
        shapes: &[Vec<usize>],
        entries: &[f64],
        scale: f64,
        wrt: &[usize],
    ) -> Result<(), TestCaseError> {
        let mut it = entries.iter().cycle().enumerate();
        let mut make = |shape: &[usize]| {
            let n: usize = shape.iter().product();
            let data: Vec<T> = (0..n)
                .map(|_| {
                    it.next().map_or(T::zero(), |(i, &x)| T::from_parts(x * scale, ((i % 3) as f64 - 1.0) * scale))
                })
                .collect();
            Tensor::new(shape.to_vec(), data).expect("a tensor")
        };
        let (a, b) = (make(&shapes[0]), make(&shapes[1]));
        let plan = Plan::new(eq, shapes, PathChoice::Greedy, MemoryLimit::Unlimited).expect("a plan");
        let p = ElementwiseProduct::for_plan(&plan).expect("a product that sums nothing");
        let e = crate::Einsum::<T>::new(eq, shapes, PathChoice::Greedy).expect("an einsum");
        let (value, scan) = p.value_with_range(&a, &b).expect("the value");
        // The reference forms complex products with non-finite parts another way (a NaN
        // where an infinity and a zero meet); the program is compared for those.
        if !T::IS_COMPLEX || entries.iter().all(|x| x.is_finite()) {
            let want = crate::reference_einsum(eq, &[&a, &b]).expect("the reference");
            prop_assert!(agree_all(&value, &want), "{eq}");
        }
        prop_assert!(agree_all(&value, &e.eval(&[&a, &b]).expect("the program")), "{eq}");
        prop_assert_eq!(scan.left_range(), left(&value), "{}", eq);
        let c = make(&p.out_shape());
        // Bits, every NaN as one (its sign and payload follow the compiled code's operand order).
        let canonical = |x: u64| if f64::from_bits(x).is_nan() { u64::MAX } else { x };
        let bits = |t: &[Tensor<T>]| {
            t.iter()
                .map(|t| t.data().iter().map(|v| v.to_bits().map(canonical)).collect::<Vec<_>>())
                .collect::<Vec<_>>()
        };
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a pool");
        let mut cotangents = vec![(c.clone(), e.gradient(wrt).expect("a gradient"))];
        if !p.out_shape().is_empty() {
            for x in [T::from_f64(1.0), T::from_parts(-0.5, 0.25)] {
                cotangents.push((Tensor::scalar(x), e.gradient_of_sum(wrt).expect("a gradient of the sum")));
            }
        }
        for (cot, g) in cotangents {
            let got = p.value_and_grad(&a, &b, &cot, wrt).expect("value and gradients");
            let (v, grads) = g.eval_with_value(&[&a, &b], &cot).expect("the program");
            prop_assert!(agree_all(&got.value, &v), "{eq}");
            prop_assert_eq!(got.grads.len(), grads.len());
            for (x, y) in got.grads.iter().zip(&grads) {
                prop_assert!(
                    agree_all(x, y),
                    "{eq} wrt {wrt:?} c {:?}: {:?} against {:?}",
                    cot.shape(),
                    x.data(),
                    y.data()
                );
            }
            let want_left = left(&got.value) || got.grads.iter().any(left);
            prop_assert_eq!(got.left_range, want_left, "{}", eq);
            // Two threads: every element-wise result bit for bit; a broadcast operand's
            // sums may be cut over the threads' partial sums, so to rounding.
            let two = pool.install(|| p.value_and_grad(&a, &b, &cot, wrt)).expect("on two threads");
            prop_assert_eq!(bits(std::slice::from_ref(&two.value)), bits(std::slice::from_ref(&got.value)));
            for ((&w, x), y) in wrt.iter().zip(&two.grads).zip(&got.grads) {
                let own = if w == 0 { p.spec.a_labels() } else { p.spec.b_labels() };
                if p.spec.out_labels().iter().all(|l| own.contains(l)) {
                    prop_assert_eq!(bits(std::slice::from_ref(x)), bits(std::slice::from_ref(y)), "{}", eq);
                } else {
                    prop_assert!(agree_all(x, y), "{eq}");
                }
            }
            prop_assert_eq!(two.left_range, got.left_range);
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Products, broadcasts, permutations and outer products of up to four labels,
        /// sizes 0 to 5 and now and then one long enough for the pool's threads and for
        /// rows cut into units, entries with specials and values scaled to the ends of
        /// the range, float64 and complex: value, gradients and range verdicts against the
        /// compiled program and the reference, two threads bit for bit as one.
        #[test]
        fn products_equal_the_program_and_the_reference(
            (a, b, out) in labels(),
            sizes in proptest::collection::vec(0usize..=5, 4),
            long in proptest::option::of(Just(PAR_ELEMENTWISE_MIN_ELEMENTS / 4 + 5)),
            entries in proptest::collection::vec(entry(), 1..40),
            scale in proptest::sample::select(vec![1.0, 1e-300, 1e300]),
            wrt in proptest::sample::select(vec![vec![0usize], vec![1], vec![0, 1], vec![1, 0]]),
            innermost in proptest::bool::ANY,
        ) {
            let mut sizes = sizes;
            // One label long (the outermost or the innermost: rows cut into units), the
            // others short.
            let long_label = if innermost { out.last() } else { out.first() };
            if let (Some(n), Some(&c)) = (long, long_label) {
                for &d in &out {
                    sizes[d as usize] = if d == c { n } else { sizes[d as usize].min(2) };
                }
            }
            let eq = format!("{},{}->{}", letters(&a), letters(&b), letters(&out));
            let shape = |l: &[u32]| l.iter().map(|&c| sizes[c as usize]).collect::<Vec<_>>();
            let shapes = [shape(&a), shape(&b)];
            check::<f64>(&eq, &shapes, &entries, scale, &wrt)?;
            check::<c64>(&eq, &shapes, &entries, scale, &wrt)?;
        }
    }

    #[test]
    fn only_unsliced_products_that_sum_nothing_are_taken() {
        let plan = |eq: &str, shapes: &[Vec<usize>]| {
            Plan::new(eq, shapes, PathChoice::Greedy, MemoryLimit::Unlimited).expect("a plan")
        };
        assert!(ElementwiseProduct::for_plan(&plan("ij,ji->ij", &[vec![2, 3], vec![3, 2]])).is_some());
        assert!(ElementwiseProduct::for_plan(&plan("i,j->ij", &[vec![2], vec![3]])).is_some());
        assert!(ElementwiseProduct::for_plan(&plan("ij,j->i", &[vec![2, 3], vec![3]])).is_none());
        assert!(ElementwiseProduct::for_plan(&plan("ii,i->i", &[vec![2, 2], vec![2]])).is_none());
        assert!(ElementwiseProduct::for_plan(&plan("i,i,i->i", &[vec![2], vec![2], vec![2]])).is_none());
    }

    /// The rule the Python extension takes this type by: an operand of the product's size
    /// (in any layout, whatever the other's labels), not an outer product, unless the
    /// labels only one operand has are of size 1 (then the other is as large).
    #[test]
    fn only_products_with_an_operand_of_their_size_beat_the_program() {
        let beats = |eq: &str, shapes: &[Vec<usize>]| {
            let plan = Plan::new(eq, shapes, PathChoice::Greedy, MemoryLimit::Unlimited).expect("a plan");
            ElementwiseProduct::for_plan(&plan).expect("a product that sums nothing").beats_the_program()
        };
        for (eq, shapes) in [
            ("ij,ij->ij", vec![vec![3, 4], vec![3, 4]]),
            ("ij,ji->ij", vec![vec![3, 4], vec![4, 3]]),
            ("ij,j->ij", vec![vec![3, 4], vec![4]]),
            ("i,ij->ji", vec![vec![3], vec![3, 4]]),
            ("ijk,jk->kij", vec![vec![2, 3, 4], vec![3, 4]]),
            ("bi,bj->bij", vec![vec![5, 3], vec![5, 1]]),
        ] {
            assert!(beats(eq, &shapes), "{eq} {shapes:?}");
        }
        for (eq, shapes) in [
            ("bi,bj->bij", vec![vec![5, 3], vec![5, 4]]),
            ("i,j->ij", vec![vec![3], vec![4]]),
            ("ij,jk->ijk", vec![vec![2, 3], vec![3, 4]]),
            ("ij,k->kji", vec![vec![2, 3], vec![2]]),
        ] {
            assert!(!beats(eq, &shapes), "{eq} {shapes:?}");
        }
    }
}
