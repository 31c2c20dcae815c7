//! [`Hadamard3`]: the element-wise product of three float64 operands of one shape whose
//! labels and the output's are in one order (`ij,ij,ij->ij`): the value, and the value
//! with the three gradients, each in one pass that finds every result's range
//! ([`RangeScan`]) while it writes it.
//!
//! Why a kernel of its own: as a compiled program the product is two steps and a
//! temporary (`T = A ⊙ B`, then `T ⊙ D`), which read `4n` elements and write `2n` where
//! the minimum is `3n` and `n`, and its value and gradients are six steps more, each a
//! pass over memory; the Python layer's range test then reads every result again. Here
//! one loop reads each element of the operands (and of the cotangent) once, keeps the
//! partial products in registers and writes each result once, as `hadamard.rs` does for
//! two operands.
//!
//! Input invariants ([`Hadamard3::for_plan`] checks them): a plan of three operands,
//! unsliced, whose resolved labels all equal the output's. Output invariants: the value
//! is `(a·b)·d` and the gradients `c·(b·d)`, `c·(a·d)` and `c·(a·b)`, element by element,
//! whatever the number of threads (pieces of whole cache lines over the current rayon
//! pool's threads, as in `hadamard.rs`), so any number of threads gives the same bits.
//!
//! Cost: `O(n)` multiplications; `3n` elements read and `n` written for the value, `4n`
//! read (`3n` for a scalar cotangent) and `4n` written for the value and three gradients.

use crate::buffer::{begin_evaluation, overwritten};
use crate::elementwise::PAR_ELEMENTWISE_MIN_ELEMENTS;
use crate::error::{EinsumError, EinsumResult};
use crate::hadamard::{Cotangent, CotangentBlocks, HadamardOutputs, Same, Slab, block_at, block_at_mut, over_pieces};
use crate::plan::Plan;
use crate::scan::{LANES, Lanes, RangeScan};
use crate::tensor::Tensor;

/// An element-wise product `A ⊙ B ⊙ D` of three float64 operands of one shape and label
/// order, output in that order too: the value, and the value with gradients, each in one
/// pass at memory bandwidth with the range of every result (see the module docs).
///
/// ```
/// use einsum::{Hadamard3, MemoryLimit, PathChoice, Plan, Tensor};
///
/// let shapes = [vec![3], vec![3], vec![3]];
/// let plan = Plan::new("i,i,i->i", &shapes, PathChoice::Greedy, MemoryLimit::Unlimited).unwrap();
/// let h = Hadamard3::for_plan(&plan).expect("a product of one layout");
/// let a = Tensor::new(vec![3], vec![1.0, 2.0, 3.0]).unwrap();
/// let b = Tensor::new(vec![3], vec![2.0, 0.5, -1.0]).unwrap();
/// let d = Tensor::new(vec![3], vec![4.0, 4.0, 0.5]).unwrap();
/// let out = h.value_and_grad([&a, &b, &d], &Tensor::scalar(1.0), &[0, 1, 2]).unwrap();
/// assert_eq!(out.value.data(), &[8.0, 4.0, -1.5]);
/// assert_eq!(out.grads[2].data(), &[2.0, 1.0, -3.0]);
/// assert!(!out.left_range);
/// ```
#[derive(Clone, Debug)]
pub struct Hadamard3 {
    shape: Vec<usize>,
}

impl Hadamard3 {
    /// The product that `plan` contracts, if it is one: three operands whose labels, as
    /// resolved, all equal the output's, and no sliced label.
    pub fn for_plan(plan: &Plan) -> Option<Hadamard3> {
        let n = plan.network();
        let [a, b, d] = &n.inputs[..] else { return None };
        ([a, b, d].iter().all(|l| **l == n.output) && plan.sliced().is_empty())
            .then(|| Hadamard3 { shape: n.output.iter().map(|&c| n.sizes[c as usize]).collect() })
    }

    /// The operands' (and the output's) shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Whether a pass inside a rayon pool of `threads` threads would use more than the
    /// calling thread (as `Einsum::uses_threads`).
    pub fn uses_threads(&self, threads: usize) -> bool {
        threads > 1 && self.shape.iter().product::<usize>() >= PAR_ELEMENTWISE_MIN_ELEMENTS
    }

    /// `A ⊙ B ⊙ D` and the scan of it, made while it was written. Errors: operands of
    /// another shape, or the stop flag raised ([`EinsumError::Interrupted`]).
    pub fn value_with_range(&self, x: [&Tensor<f64>; 3]) -> EinsumResult<(Tensor<f64>, RangeScan)> {
        self.check(x.iter().map(|t| ("an operand", *t)))?;
        let _evaluation = begin_evaluation();
        let mut out = overwritten::<f64>(x[0].len());
        let [scan, ..] = pass(x.map(Tensor::data), None, &mut out, [&mut [], &mut [], &mut []]);
        crate::stop::check()?;
        Ok((Tensor::from_parts(&self.shape, out), scan))
    }

    /// The value and the gradients of `⟨C, A ⊙ B ⊙ D⟩` with respect to the operands `wrt`
    /// (each 0, 1 or 2, in any order and with repeats) for the cotangent `c`, with whether
    /// any of them left float64's range. A scalar `c` (shape `[]`) of a product that is not
    /// a scalar stands for that value everywhere. Errors: tensors of another shape, a
    /// `wrt` entry above 2 ([`EinsumError::Shape`]), or the stop flag raised.
    pub fn value_and_grad(
        &self,
        x: [&Tensor<f64>; 3],
        c: &Tensor<f64>,
        wrt: &[usize],
    ) -> EinsumResult<HadamardOutputs> {
        self.check(x.iter().map(|t| ("an operand", *t)))?;
        let cotangent = match c.data() {
            &[v] if c.shape().is_empty() => Cotangent::Scalar(v),
            _ => {
                self.check([("the cotangent", c)].into_iter())?;
                Cotangent::Tensor(c.data())
            }
        };
        if let Some(w) = wrt.iter().find(|&&w| w > 2) {
            return Err(EinsumError::Shape(format!("this element-wise product has three operands, not operand {w}")));
        }
        let _evaluation = begin_evaluation();
        let n = x[0].len();
        let want: [bool; 3] = std::array::from_fn(|k| wrt.contains(&k));
        let mut out = overwritten::<f64>(n);
        let mut grads: [Vec<f64>; 3] = want.map(|w| if w { overwritten::<f64>(n) } else { Vec::new() });
        let [g0, g1, g2] = &mut grads;
        let scans = pass(x.map(Tensor::data), Some(cotangent), &mut out, [&mut g0[..], &mut g1[..], &mut g2[..]]);
        crate::stop::check()?;
        let left_range = scans.iter().any(RangeScan::left_range);
        let mut made = [None, None, None];
        for ((m, g), w) in made.iter_mut().zip(grads).zip(want) {
            *m = w.then(|| Tensor::from_parts(&self.shape, g));
        }
        // Tensors share their buffer when cloned: a repeated `wrt` entry costs no copy.
        let grads = wrt.iter().map(|&w| made[w].clone().expect("computed for every wrt entry")).collect();
        Ok(HadamardOutputs { value: Tensor::from_parts(&self.shape, out), grads, left_range })
    }

    /// `EinsumError::Shape` unless every tensor has the product's shape.
    fn check<'t>(&self, tensors: impl Iterator<Item = (&'static str, &'t Tensor<f64>)>) -> EinsumResult<()> {
        for (what, t) in tensors {
            if t.shape() != self.shape {
                return Err(EinsumError::Shape(format!(
                    "{what} of the element-wise product has shape {:?}, expected {:?}",
                    t.shape(),
                    self.shape
                )));
            }
        }
        Ok(())
    }
}

/// The gradients a pass writes, with respect to each operand (empty when not wanted).
type Grads<'a> = [&'a mut [f64]; 3];

/// Writes `value = (a·b)·d` and, with `c`, the gradients not empty in `grads`, over the
/// current pool's threads when the output is large; the scans of the value and of each
/// gradient (of nothing for an empty one).
fn pass(x: [&[f64]; 3], c: Option<Cotangent<'_>>, value: &mut [f64], grads: Grads<'_>) -> [RangeScan; 4] {
    let [g0, g1, g2] = grads;
    over_pieces([value, g0, g1, g2], |start, [value, g0, g1, g2]| {
        let end = start + value.len();
        let (x, c) = (x.map(|x| &x[start..end]), c.map(|c| c.range(start, end)));
        crate::small_gemm::arch().dispatch(Write3 { x, c, value, grads: [g0, g1, g2] })
    })
}

/// The arguments of [`write3`], as the value pulp dispatches (compiled again for the
/// processor's vector instructions, as `hadamard.rs`'s `Write`).
struct Write3<'a, 'c> {
    x: [&'a [f64]; 3],
    c: Option<Cotangent<'c>>,
    value: &'a mut [f64],
    grads: Grads<'a>,
}

impl pulp::WithSimd for Write3<'_, '_> {
    type Output = [RangeScan; 4];

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) -> [RangeScan; 4] {
        write3(self.x, self.c, self.value, self.grads)
    }
}

/// One piece of [`pass`]: the cotangent as whole blocks and the rest, and the loop
/// compiled for the gradients asked for (each a constant of [`body`], so that a gradient
/// not asked for costs no branch in the loop).
#[inline(always)]
fn write3(x: [&[f64]; 3], c: Option<Cotangent<'_>>, value: &mut [f64], grads: Grads<'_>) -> [RangeScan; 4] {
    let want = [!grads[0].is_empty(), !grads[1].is_empty(), !grads[2].is_empty()];
    let block = match c {
        Some(Cotangent::Scalar(v)) => [v; LANES],
        _ => [0.0; LANES],
    };
    let tail = &block[..value.len() % LANES];
    match c {
        Some(Cotangent::Tensor(c)) => {
            let whole = c.len() / LANES * LANES;
            masked(want, x, (Slab(&c[..whole]), &c[whole..]), value, grads)
        }
        // Every block of the cotangent is this one (none is read for the value alone).
        _ => masked(want, x, (Same(block), tail), value, grads),
    }
}

/// [`body`] for the gradients `want` asks for.
#[inline(always)]
fn masked(
    want: [bool; 3],
    x: [&[f64]; 3],
    c: (impl CotangentBlocks, &[f64]),
    value: &mut [f64],
    grads: Grads<'_>,
) -> [RangeScan; 4] {
    match want {
        [false, false, false] => body::<false, false, false>(x, c, value, grads),
        [true, false, false] => body::<true, false, false>(x, c, value, grads),
        [false, true, false] => body::<false, true, false>(x, c, value, grads),
        [false, false, true] => body::<false, false, true>(x, c, value, grads),
        [true, true, false] => body::<true, true, false>(x, c, value, grads),
        [true, false, true] => body::<true, false, true>(x, c, value, grads),
        [false, true, true] => body::<false, true, true>(x, c, value, grads),
        [true, true, true] => body::<true, true, true>(x, c, value, grads),
    }
}

/// `value = (a·b)·d`, and `c·(b·d)`, `c·(a·d)`, `c·(a·b)` into the gradients `G0`, `G1`,
/// `G2` say, each scanned from the registers that hold it (`c` as whole blocks and the
/// rest).
#[inline(always)]
fn body<const G0: bool, const G1: bool, const G2: bool>(
    x: [&[f64]; 3],
    c: (impl CotangentBlocks, &[f64]),
    value: &mut [f64],
    grads: Grads<'_>,
) -> [RangeScan; 4] {
    let mut l = [Lanes::new(); 4];
    let [g0, g1, g2] = grads;
    let whole = value.len() - value.len() % LANES;
    let ((pb, pt), (qb, qt), (rb, rt), (zb, zt)) =
        (x[0].split_at(whole), x[1].split_at(whole), x[2].split_at(whole), c);
    let (vb, vt) = value.split_at_mut(whole);
    // By the block's number, not a zip of the blocks: see `hadamard::CotangentBlocks`.
    for i in 0..whole / LANES {
        // Every block's loads, then the products from registers, then the stores (as in
        // `hadamard.rs`: stores between loads kept the loop scalar).
        let (p, q, r, z) = (block_at(pb, i), block_at(qb, i), block_at(rb, i), zb.block(i));
        let pq: [f64; LANES] = std::array::from_fn(|k| p[k] * q[k]);
        let v: [f64; LANES] = std::array::from_fn(|k| pq[k] * r[k]);
        *block_at_mut(vb, i) = v;
        l[0].see_block(&v);
        if G0 {
            let h: [f64; LANES] = std::array::from_fn(|k| z[k] * (q[k] * r[k]));
            *block_at_mut(g0, i) = h;
            l[1].see_block(&h);
        }
        if G1 {
            let h: [f64; LANES] = std::array::from_fn(|k| z[k] * (p[k] * r[k]));
            *block_at_mut(g1, i) = h;
            l[2].see_block(&h);
        }
        if G2 {
            let h: [f64; LANES] = std::array::from_fn(|k| z[k] * pq[k]);
            *block_at_mut(g2, i) = h;
            l[3].see_block(&h);
        }
    }
    for (k, o) in vt.iter_mut().enumerate() {
        let (p, q, r, z) = (pt[k], qt[k], rt[k], zt[k]);
        let pq = p * q;
        *o = pq * r;
        l[0].see(0, *o);
        let at = whole + k;
        if G0 {
            g0[at] = z * (q * r);
            l[1].see(0, g0[at]);
        }
        if G1 {
            g1[at] = z * (p * r);
            l[2].see(0, g1[at]);
        }
        if G2 {
            g2[at] = z * pq;
            l[3].see(0, g2[at]);
        }
    }
    l.map(|l| l.scan())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::{MemoryLimit, PathChoice, reference_einsum};

    fn plan(eq: &str, shapes: &[Vec<usize>]) -> Plan {
        Plan::new(eq, shapes, PathChoice::Greedy, MemoryLimit::Unlimited).expect("a valid expression")
    }

    /// Entries with specials: ordinary values, signed zeros, infinities, NaN (no magnitude
    /// that leaves the range in one order of the products and not in another, where an
    /// infinity would meet a zero in one order only).
    fn entry() -> impl Strategy<Value = f64> {
        prop_oneof![
            8 => -4.0f64..4.0,
            1 => Just(0.0),
            1 => Just(-0.0),
            1 => Just(f64::INFINITY),
            1 => Just(f64::NEG_INFINITY),
            1 => Just(f64::NAN),
        ]
    }

    /// Both NaN, equal (zeros of either sign: the reference adds its products to `+0`), or
    /// within the rounding of products formed in another order.
    fn agree(x: &[f64], y: &[f64]) -> bool {
        x.len() == y.len()
            && x.iter().zip(y).all(|(&x, &y)| {
                (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= 1e-14 * (1.0 + x.abs().max(y.abs()))
            })
    }

    fn left_range_plainly(s: &[f64]) -> bool {
        s.iter().any(|x| !x.is_finite()) || {
            let m = s.iter().fold(0.0f64, |m, x| m.max(x.abs()));
            m > 0.0 && m < f64::MIN_POSITIVE
        }
    }

    #[test]
    fn only_three_operands_of_one_layout_are_taken() {
        let sq = vec![3usize, 4];
        assert!(Hadamard3::for_plan(&plan("ij,ij,ij->ij", &[sq.clone(), sq.clone(), sq.clone()])).is_some());
        assert!(Hadamard3::for_plan(&plan("ij,ij->ij", &[sq.clone(), sq.clone()])).is_none());
        assert!(Hadamard3::for_plan(&plan("ij,ij,ji->ij", &[sq.clone(), sq.clone(), vec![4, 3]])).is_none());
        assert!(Hadamard3::for_plan(&plan("ij,ij,j->ij", &[sq.clone(), sq.clone(), vec![4]])).is_none());
        assert!(Hadamard3::for_plan(&plan("ij,ij,ij->i", &[sq.clone(), sq.clone(), sq.clone()])).is_none());
        let h = Hadamard3::for_plan(&plan("ij,ij,ij->ij", &[sq.clone(), sq.clone(), sq.clone()])).expect("one");
        let (a, t) = (Tensor::<f64>::ones(sq.clone()).unwrap(), Tensor::<f64>::ones(vec![4, 3]).unwrap());
        assert!(matches!(h.value_with_range([&a, &a, &t]), Err(EinsumError::Shape(_))));
        assert!(matches!(h.value_and_grad([&a, &a, &a], &t, &[0]), Err(EinsumError::Shape(_))));
        assert!(matches!(h.value_and_grad([&a, &a, &a], &a, &[3]), Err(EinsumError::Shape(_))));
    }

    /// NaNs of four payloads and both signs, meeting each other in every product, past the
    /// parallel threshold: two and three threads give one thread's bits for the value and
    /// every gradient, with a tensor and a scalar cotangent.
    #[test]
    fn nan_payloads_do_not_depend_on_the_threads() {
        // Past the threshold, with a tail; two threads cut it into pieces of an odd
        // number of lane blocks (a loop unrolled by two would start some in its other half).
        let n = PAR_ELEMENTWISE_MIN_ELEMENTS + 3 * 1024 + 5;
        let nan = |payload: u64, negative: bool| {
            f64::from_bits(0x7ff8_0000_0000_0000 | payload | (u64::from(negative) << 63))
        };
        // Operand `k`'s entry `i` a NaN of its own where bit `k` of `i / 3` is set.
        let make = |k: usize| {
            let data = (0..n)
                .map(|i| if ((i / 3) >> k) & 1 == 1 { nan(k as u64 + 1, (i + k) % 2 == 0) } else { 1.5 + k as f64 })
                .collect();
            Tensor::new(vec![n], data).expect("a tensor")
        };
        let (a, b, d, c) = (make(0), make(1), make(2), make(3));
        let h = Hadamard3::for_plan(&plan("i,i,i->i", &[vec![n], vec![n], vec![n]])).expect("one layout");
        let bits = |t: &Tensor<f64>| t.data().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        for cotangent in [c, Tensor::scalar(nan(7, true))] {
            let one = h.value_and_grad([&a, &b, &d], &cotangent, &[0, 1, 2]).expect("one thread");
            let (value, _) = h.value_with_range([&a, &b, &d]).expect("one thread");
            for threads in [2, 3] {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a pool");
                let many = pool.install(|| h.value_and_grad([&a, &b, &d], &cotangent, &[0, 1, 2])).expect("threads");
                assert_eq!(bits(&many.value), bits(&one.value), "{threads} threads");
                for (g, o) in many.grads.iter().zip(&one.grads) {
                    assert_eq!(bits(g), bits(o), "{threads} threads");
                }
                let (v, _) = pool.install(|| h.value_with_range([&a, &b, &d])).expect("threads");
                assert_eq!(bits(&v), bits(&value), "{threads} threads");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Value and gradients, for every `wrt` (orders and repeats too) and a tensor, a
        /// scalar or a unit cotangent, equal the reference contractions (`ij,ij,ij->ij` of
        /// the cotangent and the other two operands) to rounding, specials included; the
        /// range verdict equals the plain test of each result; lengths cover whole lane
        /// blocks and tails, and now and then the pool's threshold, where two threads give
        /// one thread's bits.
        #[test]
        fn value_and_gradients_equal_the_reference(
            shape in proptest::collection::vec(1usize..6, 0..4),
            long in proptest::option::of(Just(PAR_ELEMENTWISE_MIN_ELEMENTS + 13)),
            seed in proptest::collection::vec(entry(), 1..60),
            scale in proptest::sample::select(vec![1.0, 1e-110, 1e100]),
            wrt in proptest::sample::select(vec![vec![], vec![0], vec![2], vec![1, 2], vec![2, 0, 1], vec![1, 1]]),
            scalar in proptest::option::of(proptest::sample::select(vec![1.0, -0.5, 0.0])),
        ) {
            let shape = long.map_or(shape, |n| vec![n]);
            let n: usize = shape.iter().product();
            let make = |k: usize| {
                let data = (0..n).map(|i| seed[(i * 7 + k * 13) % seed.len()] * scale).collect();
                Tensor::new(shape.clone(), data).expect("a tensor")
            };
            let (a, b, d, ct) = (make(0), make(1), make(2), make(3));
            let x = [&a, &b, &d];
            let eq = if shape.is_empty() { ",,->".to_string() } else {
                let l: String = (0..shape.len()).map(|i| char::from(b'i' + i as u8)).collect();
                format!("{l},{l},{l}->{l}")
            };
            let h = Hadamard3::for_plan(&plan(&eq, &[shape.clone(), shape.clone(), shape.clone()])).expect("one layout");
            let (value, scan) = h.value_with_range(x).expect("the value");
            let want = reference_einsum(&eq, &x).expect("the reference");
            prop_assert!(agree(value.data(), want.data()), "{eq}");
            prop_assert_eq!(scan.left_range(), left_range_plainly(value.data()));
            let c = match scalar {
                Some(v) if !shape.is_empty() => Tensor::scalar(v),
                _ => ct.clone(),
            };
            let full = match c.data() {
                &[v] if c.shape().is_empty() => Tensor::filled(shape.clone(), v).expect("a tensor"),
                _ => c.clone(),
            };
            let out = h.value_and_grad(x, &c, &wrt).expect("value and gradients");
            // The value alone and beside gradients are two loops, which may put a
            // product's operands in other orders: bits, every NaN as one (a product of
            // two NaNs keeps the first one's sign and payload).
            let nan_as_one = |t: &Tensor<f64>| t.data().iter().map(|v| if v.is_nan() { u64::MAX } else { v.to_bits() }).collect::<Vec<_>>();
            prop_assert_eq!(nan_as_one(&out.value), nan_as_one(&value));
            prop_assert_eq!(out.grads.len(), wrt.len());
            let mut left = left_range_plainly(value.data());
            for (g, &w) in out.grads.iter().zip(&wrt) {
                let others: Vec<&Tensor<f64>> = (0..3).filter(|&k| k != w).map(|k| x[k]).collect();
                let want = reference_einsum(&eq, &[&full, others[0], others[1]]).expect("the reference");
                prop_assert!(agree(g.data(), want.data()), "{eq}, wrt {w}");
                left |= left_range_plainly(g.data());
            }
            prop_assert_eq!(out.left_range, left);
            // Two threads run one thread's loop on every element: bits, NaNs' too.
            let bits = |t: &Tensor<f64>| t.data().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a pool");
            let two = pool.install(|| h.value_and_grad(x, &c, &wrt)).expect("on two threads");
            prop_assert_eq!(bits(&two.value), bits(&out.value));
            for (g, o) in two.grads.iter().zip(&out.grads) {
                prop_assert_eq!(bits(g), bits(o));
            }
            prop_assert_eq!(two.left_range, out.left_range);
            let (two_value, two_scan) = pool.install(|| h.value_with_range(x)).expect("on two threads");
            prop_assert_eq!(bits(&two_value), bits(&value));
            prop_assert_eq!(two_scan.left_range(), scan.left_range());
        }
    }
}
