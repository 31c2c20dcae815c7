//! [`Hadamard`]: the element-wise product of two float64 operands of one shape whose labels
//! and the output's are in one order (`ij,ij->ij`), its value and both gradients in one
//! pass, and each result's range ([`RangeScan`], `scan.rs`) found while the pass writes it.
//!
//! Why a kernel beside the element-wise one (`elementwise.rs`): as a compiled program the
//! value and gradients are three steps, `A ⊙ B`, `C ⊙ B` and `C ⊙ A`, each reading two
//! operands and writing one output, and the Python layer then reads all three results
//! again for `strip_exponent`'s range test. That is nine array reads and three writes where
//! the minimum is three reads (`A`, `B`, the cotangent `C`) and three writes: the product
//! is memory-bound, so time follows the traffic. Here one loop reads each element of the
//! three inputs once, writes the three outputs, and keeps each output's largest modulus
//! and a not-finite flag in registers on the way.
//!
//! Input invariants ([`Hadamard::for_plan`] checks them): a plan of two operands, unsliced,
//! whose resolved labels both equal the output's (so one shape, row-major, nothing summed,
//! nothing broadcast or permuted). Outputs of `PAR_ELEMENTWISE_MIN_ELEMENTS` or more are
//! cut into pieces of whole cache lines over the current rayon pool's threads (inside a
//! pool of several); each element's value does not depend on the cut, so any number of
//! threads gives the same bits, and the range scans combine by `or` and `max`.
//!
//! Cost: `O(n)` multiplications; `3n` elements read and `3n` written for value and both
//! gradients (`2n` and `n` for the value alone).

use crate::buffer::{begin_evaluation, overwritten};
use crate::elementwise::PAR_ELEMENTWISE_MIN_ELEMENTS;
use crate::error::{EinsumError, EinsumResult};
use crate::plan::Plan;
use crate::scan::{LANES, Lanes, RangeScan};
use crate::tensor::Tensor;

/// Pieces per thread of a parallel pass: more than one so that a thread slowed by another
/// process does not hold the others back at the join.
pub(crate) const PIECES_PER_THREAD: usize = 4;

/// Elements written between two reads of the stop flag on one thread (as
/// `stop::COPY_CHECK_ELEMENTS`: a few milliseconds of memory traffic).
pub(crate) const STOP_CHECK: usize = crate::stop::COPY_CHECK_ELEMENTS;

/// The value and gradients of [`Hadamard::value_and_grad`], with the range of all of them.
#[derive(Debug)]
pub struct HadamardOutputs {
    /// `A ⊙ B`.
    pub value: Tensor<f64>,
    /// One per `wrt` entry, in its order: `C ⊙ B` for operand 0, `C ⊙ A` for operand 1.
    pub grads: Vec<Tensor<f64>>,
    /// Whether the value or a gradient left float64's range ([`RangeScan::left_range`] of
    /// each).
    pub left_range: bool,
}

/// An element-wise product `A ⊙ B` of two float64 operands of one shape and label order,
/// output in that order too: the value, the value with the range of the result, and the
/// value with gradients, each in one pass at memory bandwidth (see the module docs).
///
/// ```
/// use einsum::{Hadamard, MemoryLimit, PathChoice, Plan, Tensor};
///
/// let plan = Plan::new("ij,ij->ij", &[vec![2, 2], vec![2, 2]], PathChoice::Greedy, MemoryLimit::Unlimited).unwrap();
/// let h = Hadamard::for_plan(&plan).expect("an element-wise product");
/// let a = Tensor::new(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
/// let b = Tensor::new(vec![2, 2], vec![2.0, 0.5, -1.0, 0.0]).unwrap();
/// let c = Tensor::ones(vec![2, 2]).unwrap();
/// let out = h.value_and_grad(&a, &b, &c, &[0, 1]).unwrap();
/// assert_eq!(out.value.data(), &[2.0, 1.0, -3.0, 0.0]);
/// assert_eq!((out.grads[0].data(), out.grads[1].data()), (b.data(), a.data()));
/// assert!(!out.left_range);
/// // A transposed output is not one: its gradients are not element-wise in one order.
/// let t = Plan::new("ij,ij->ji", &[vec![2, 2], vec![2, 2]], PathChoice::Greedy, MemoryLimit::Unlimited).unwrap();
/// assert!(Hadamard::for_plan(&t).is_none());
/// ```
#[derive(Clone, Debug)]
pub struct Hadamard {
    shape: Vec<usize>,
}

impl Hadamard {
    /// The product that `plan` contracts, if it is one: two operands whose labels, as
    /// resolved, both equal the output's, and no sliced label.
    pub fn for_plan(plan: &Plan) -> Option<Hadamard> {
        let n = plan.network();
        let [a, b] = &n.inputs[..] else { return None };
        (a == &n.output && b == &n.output && plan.sliced().is_empty())
            .then(|| Hadamard { shape: n.output.iter().map(|&c| n.sizes[c as usize]).collect() })
    }

    /// The operands' (and the output's) shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Whether a pass inside a rayon pool of `threads` threads would use more than the
    /// calling thread (as `Einsum::uses_threads`): only for outputs large enough that a
    /// piece's work dwarfs handing it over.
    pub fn uses_threads(&self, threads: usize) -> bool {
        threads > 1 && self.shape.iter().product::<usize>() >= PAR_ELEMENTWISE_MIN_ELEMENTS
    }

    /// `A ⊙ B`. Errors: operands of another shape, or the stop flag raised
    /// ([`EinsumError::Interrupted`]).
    pub fn value(&self, a: &Tensor<f64>, b: &Tensor<f64>) -> EinsumResult<Tensor<f64>> {
        Ok(self.value_with_range(a, b)?.0)
    }

    /// `A ⊙ B` and the scan of it, made while it was written.
    pub fn value_with_range(&self, a: &Tensor<f64>, b: &Tensor<f64>) -> EinsumResult<(Tensor<f64>, RangeScan)> {
        self.check(&[("operand 0", a), ("operand 1", b)])?;
        let _evaluation = begin_evaluation();
        let mut out = overwritten::<f64>(a.len());
        let [scan, ..] = fused(a.data(), b.data(), None, [&mut out, &mut [], &mut []]);
        crate::stop::check()?;
        Ok((Tensor::from_parts(&self.shape, out), scan))
    }

    /// The value and the gradients of `⟨C, A ⊙ B⟩` with respect to the operands `wrt`
    /// (each 0 or 1, in any order and with repeats), for the cotangent `c`: `C ⊙ B` and
    /// `C ⊙ A`. A scalar `c` (shape `[]`) of a product that is not a scalar stands for
    /// that value everywhere (the gradients of `c · Σ A ⊙ B`), and no tensor of the
    /// product's shape is read for it. Errors: tensors of another shape, a `wrt` entry
    /// above 1 ([`EinsumError::Shape`]), or the stop flag raised.
    pub fn value_and_grad(
        &self,
        a: &Tensor<f64>,
        b: &Tensor<f64>,
        c: &Tensor<f64>,
        wrt: &[usize],
    ) -> EinsumResult<HadamardOutputs> {
        self.check(&[("operand 0", a), ("operand 1", b)])?;
        let cotangent = match c.data() {
            &[x] if c.shape().is_empty() => Cotangent::Scalar(x),
            _ => {
                self.check(&[("cotangent", c)])?;
                Cotangent::Tensor(c.data())
            }
        };
        if let Some(w) = wrt.iter().find(|&&w| w > 1) {
            return Err(EinsumError::Shape(format!("an element-wise product has two operands, not operand {w}")));
        }
        let _evaluation = begin_evaluation();
        let n = a.len();
        let want = [wrt.contains(&0), wrt.contains(&1)];
        let mut out = overwritten::<f64>(n);
        let mut da = if want[0] { overwritten::<f64>(n) } else { Vec::new() };
        let mut db = if want[1] { overwritten::<f64>(n) } else { Vec::new() };
        let scans = fused(a.data(), b.data(), Some(cotangent), [&mut out, &mut da, &mut db]);
        crate::stop::check()?;
        let left_range = scans.iter().any(RangeScan::left_range);
        let made = [
            want[0].then(|| Tensor::from_parts(&self.shape, da)),
            want[1].then(|| Tensor::from_parts(&self.shape, db)),
        ];
        // Tensors share their buffer when cloned: a repeated `wrt` entry costs no copy.
        let grads = wrt.iter().map(|&w| made[w].clone().expect("computed for every wrt entry")).collect();
        Ok(HadamardOutputs { value: Tensor::from_parts(&self.shape, out), grads, left_range })
    }

    /// `EinsumError::Shape` unless every tensor has the product's shape.
    fn check(&self, tensors: &[(&str, &Tensor<f64>)]) -> EinsumResult<()> {
        match tensors.iter().find(|(_, t)| t.shape() != self.shape) {
            Some((what, t)) => Err(EinsumError::Shape(format!(
                "{what} of the element-wise product has shape {:?}, expected {:?}",
                t.shape(),
                self.shape
            ))),
            None => Ok(()),
        }
    }
}

/// The outputs of one pass: the value, and the gradients with respect to `a` and `b`
/// (empty when not wanted).
type Outputs<'a> = [&'a mut [f64]; 3];

/// The cotangent of a value+gradient pass: a tensor of the product's shape, or one value
/// for every element (read from a block of [`LANES`] copies, so the loops are the same).
#[derive(Clone, Copy)]
pub(crate) enum Cotangent<'a> {
    Tensor(&'a [f64]),
    Scalar(f64),
}

/// Writes `out[0] = a ⊙ b` and, with `c`, `out[1] = c ⊙ b` and `out[2] = c ⊙ a` where
/// those are not empty, over the current pool's threads when the output is large; the
/// scan of each output (of nothing for an empty one).
fn fused(a: &[f64], b: &[f64], c: Option<Cotangent<'_>>, out: Outputs<'_>) -> [RangeScan; 3] {
    over_pieces(out, |start, out| {
        let end = start + out[0].len();
        let c = c.map(|c| c.range(start, end));
        crate::small_gemm::arch().dispatch(Write { a: &a[start..end], b: &b[start..end], c, out })
    })
}

impl<'a> Cotangent<'a> {
    /// The cotangent of elements `start..end`: a tensor's slice, a scalar as it is.
    pub(crate) fn range(self, start: usize, end: usize) -> Cotangent<'a> {
        match self {
            Cotangent::Tensor(c) => Cotangent::Tensor(&c[start..end]),
            scalar => scalar,
        }
    }
}

/// Runs `piece` on pieces of the outputs `outs` (each as long as the first, or empty),
/// given each piece's first element, over the current pool's threads when the outputs are
/// large, and merges the scans the pieces give, output by output. A piece is skipped once
/// the stop flag is raised (the evaluation is ending with an error).
pub(crate) fn over_pieces<const N: usize>(
    outs: [&mut [f64]; N],
    piece: impl Fn(usize, [&mut [f64]; N]) -> [RangeScan; N] + Sync,
) -> [RangeScan; N] {
    let n = outs[0].len();
    let threads = if n >= PAR_ELEMENTWISE_MIN_ELEMENTS && rayon::current_thread_index().is_some() {
        rayon::current_num_threads()
    } else {
        1
    };
    // Pieces of whole cache lines (8 `f64`), so that two threads share none.
    let width = if threads > 1 { n.div_ceil(PIECES_PER_THREAD * threads) } else { STOP_CHECK }.next_multiple_of(LANES);
    let mut pieces: Vec<(usize, [&mut [f64]; N])> = Vec::with_capacity(n.div_ceil(width.max(1)));
    let (mut rest, mut start) = (outs, 0);
    while start < n {
        let len = width.min(n - start);
        let mut heads: [&mut [f64]; N] = std::array::from_fn(|_| <&mut [f64]>::default());
        let mut tails: [&mut [f64]; N] = std::array::from_fn(|_| <&mut [f64]>::default());
        for (k, s) in rest.into_iter().enumerate() {
            (heads[k], tails[k]) = cut(s, len);
        }
        pieces.push((start, heads));
        (rest, start) = (tails, start + len);
    }
    let run = |(start, outs): (usize, [&mut [f64]; N])| {
        if crate::stop::requested() {
            return [RangeScan::EMPTY; N];
        }
        piece(start, outs)
    };
    let merge = |x: [RangeScan; N], y: [RangeScan; N]| -> [RangeScan; N] { std::array::from_fn(|k| x[k].merge(y[k])) };
    if threads > 1 {
        use rayon::prelude::*;
        pieces.into_par_iter().map(run).reduce(|| [RangeScan::EMPTY; N], merge)
    } else {
        pieces.into_iter().map(run).fold([RangeScan::EMPTY; N], merge)
    }
}

/// `s` cut after `len` elements (after all of them if it is shorter: an output not
/// wanted is empty).
pub(crate) fn cut(s: &mut [f64], len: usize) -> (&mut [f64], &mut [f64]) {
    let k = len.min(s.len());
    s.split_at_mut(k)
}

/// The arguments of [`write`], as the value pulp dispatches: the crate builds for baseline
/// x86-64 (two doubles per vector), and the pass is compiled again for the processor's
/// vector instructions, which needs every call inside it inlined (a closure is not).
struct Write<'a, 'c> {
    a: &'a [f64],
    b: &'a [f64],
    c: Option<Cotangent<'c>>,
    out: Outputs<'a>,
}

impl pulp::WithSimd for Write<'_, '_> {
    type Output = [RangeScan; 3];

    #[inline(always)]
    fn with_simd<S: pulp::Simd>(self, _: S) -> [RangeScan; 3] {
        write(self.a, self.b, self.c, self.out)
    }
}

/// One piece of [`fused`]: every output of the same length as `a` (or empty), one loop of
/// [`LANES`]-element blocks for the variants the outputs ask for.
#[inline(always)]
fn write(a: &[f64], b: &[f64], c: Option<Cotangent<'_>>, out: Outputs<'_>) -> [RangeScan; 3] {
    match c {
        None => {
            let [o, ..] = out;
            let [v] = value(a, b, o);
            [v, RangeScan::EMPTY, RangeScan::EMPTY]
        }
        Some(Cotangent::Tensor(c)) => {
            let whole = c.len() / LANES * LANES;
            write_with(a, b, (Slab(&c[..whole]), &c[whole..]), out)
        }
        Some(Cotangent::Scalar(x)) => {
            // Every block of `c` is this one; the tail is its first `len % LANES` copies.
            let block = [x; LANES];
            let tail = &block[..a.len() % LANES];
            write_with(a, b, (Same(block), tail), out)
        }
    }
}

/// A cotangent's whole blocks, read by index: a tensor's, or one value's everywhere.
///
/// Why by index: the loops below read every slice by the block's number, with no chain of
/// zipped block iterators, which the compiler left as a call to `Zip::next` per block
/// when one of the six was a scalar cotangent's (docs/PERFORMANCE.md, ew46 and the
/// section after it).
pub(crate) trait CotangentBlocks: Copy {
    /// Block `i` (`i` below the number of whole blocks of the piece).
    fn block(self, i: usize) -> [f64; LANES];
}

/// A cotangent tensor's whole blocks.
#[derive(Clone, Copy)]
pub(crate) struct Slab<'c>(pub(crate) &'c [f64]);

impl CotangentBlocks for Slab<'_> {
    #[inline(always)]
    fn block(self, i: usize) -> [f64; LANES] {
        block_at(self.0, i)
    }
}

/// A scalar cotangent: the same block everywhere.
#[derive(Clone, Copy)]
pub(crate) struct Same(pub(crate) [f64; LANES]);

impl CotangentBlocks for Same {
    #[inline(always)]
    fn block(self, _: usize) -> [f64; LANES] {
        self.0
    }
}

/// Block `i` of `s`, by value.
#[inline(always)]
pub(crate) fn block_at(s: &[f64], i: usize) -> [f64; LANES] {
    *<&[f64; LANES]>::try_from(&s[i * LANES..(i + 1) * LANES]).expect("a whole block")
}

/// Block `i` of `s`, to write.
#[inline(always)]
pub(crate) fn block_at_mut(s: &mut [f64], i: usize) -> &mut [f64; LANES] {
    <&mut [f64; LANES]>::try_from(&mut s[i * LANES..(i + 1) * LANES]).expect("a whole block")
}

/// [`write`] with the cotangent as whole blocks and the rest.
#[inline(always)]
fn write_with(a: &[f64], b: &[f64], c: (impl CotangentBlocks, &[f64]), out: Outputs<'_>) -> [RangeScan; 3] {
    let [o, da, db] = out;
    match (da.is_empty(), db.is_empty()) {
        (false, false) => both(a, b, c, o, da, db),
        // `c ⊙ b` beside `a ⊙ b`; for `db` the operands swap (`b ⊙ a` is `a ⊙ b`: IEEE
        // multiplication commutes; only which NaN payload survives may differ).
        (false, true) => {
            let [v, g] = one(a, b, c, o, da);
            [v, g, RangeScan::EMPTY]
        }
        (true, false) => {
            let [v, g] = one(b, a, c, o, db);
            [v, RangeScan::EMPTY, g]
        }
        _ => {
            let [v] = value(a, b, o);
            [v, RangeScan::EMPTY, RangeScan::EMPTY]
        }
    }
}

/// `o = a ⊙ b`, scanned.
#[inline(always)]
fn value(a: &[f64], b: &[f64], o: &mut [f64]) -> [RangeScan; 1] {
    let mut l = Lanes::new();
    let ((ob, ot), (xb, xt), (yb, yt)) = (blocks_mut(o), blocks(a), blocks(b));
    for ((o, x), y) in ob.zip(xb).zip(yb) {
        *o = std::array::from_fn(|i| x[i] * y[i]);
        l.see_block(o);
    }
    for ((o, x), y) in ot.iter_mut().zip(xt).zip(yt) {
        *o = x * y;
        l.see(0, *o);
    }
    [l.scan()]
}

/// `o = a ⊙ b` and `g = c ⊙ b`, scanned (`c` as whole blocks and the rest).
#[inline(always)]
fn one(a: &[f64], b: &[f64], c: (impl CotangentBlocks, &[f64]), o: &mut [f64], g: &mut [f64]) -> [RangeScan; 2] {
    let mut l = [Lanes::new(); 2];
    let whole = a.len() / LANES * LANES;
    let (zb, zt) = c;
    let ((ob, ot), (gb, gt)) = (o.split_at_mut(whole), g.split_at_mut(whole));
    let ((xb, xt), (yb, yt)) = (a.split_at(whole), b.split_at(whole));
    for i in 0..whole / LANES {
        // Every block computed from registers before any store (stores between the loads
        // kept the products scalar: the compiler could not move a load past a store into
        // another slice), and scanned from those registers.
        let (x, y, z) = (block_at(xb, i), block_at(yb, i), zb.block(i));
        let (vo, vg): ([f64; LANES], [f64; LANES]) =
            (std::array::from_fn(|i| x[i] * y[i]), std::array::from_fn(|i| z[i] * y[i]));
        (*block_at_mut(ob, i), *block_at_mut(gb, i)) = (vo, vg);
        l[0].see_block(&vo);
        l[1].see_block(&vg);
    }
    for (((o, g), x), (y, z)) in ot.iter_mut().zip(gt.iter_mut()).zip(xt).zip(yt.iter().zip(zt)) {
        *o = x * y;
        *g = z * y;
        l[0].see(0, *o);
        l[1].see(0, *g);
    }
    l.map(|l| l.scan())
}

/// `o = a ⊙ b`, `da = c ⊙ b` and `db = c ⊙ a`, scanned (`c` as whole blocks and the rest).
#[inline(always)]
fn both(
    a: &[f64],
    b: &[f64],
    c: (impl CotangentBlocks, &[f64]),
    o: &mut [f64],
    da: &mut [f64],
    db: &mut [f64],
) -> [RangeScan; 3] {
    let mut l = [Lanes::new(); 3];
    let whole = a.len() / LANES * LANES;
    let (zb, zt) = c;
    let ((ob, ot), (gb, gt), (hb, ht)) = (o.split_at_mut(whole), da.split_at_mut(whole), db.split_at_mut(whole));
    let ((xb, xt), (yb, yt)) = (a.split_at(whole), b.split_at(whole));
    for i in 0..whole / LANES {
        // As in `one`: the loads, then the products and the stores.
        let (x, y, z) = (block_at(xb, i), block_at(yb, i), zb.block(i));
        let vo: [f64; LANES] = std::array::from_fn(|i| x[i] * y[i]);
        let vg: [f64; LANES] = std::array::from_fn(|i| z[i] * y[i]);
        let vh: [f64; LANES] = std::array::from_fn(|i| z[i] * x[i]);
        (*block_at_mut(ob, i), *block_at_mut(gb, i), *block_at_mut(hb, i)) = (vo, vg, vh);
        l[0].see_block(&vo);
        l[1].see_block(&vg);
        l[2].see_block(&vh);
    }
    let outs = ot.iter_mut().zip(gt.iter_mut()).zip(ht.iter_mut());
    for (((o, g), h), ((x, y), z)) in outs.zip(xt.iter().zip(yt).zip(zt)) {
        *o = x * y;
        *g = z * y;
        *h = z * x;
        l[0].see(0, *o);
        l[1].see(0, *g);
        l[2].see(0, *h);
    }
    l.map(|l| l.scan())
}

/// `s` as whole blocks of [`LANES`] elements (arrays, so that the loops over a block's
/// lanes need no bounds checks and vectorize) and the rest.
#[inline(always)]
fn blocks(s: &[f64]) -> (impl Iterator<Item = &[f64; LANES]>, &[f64]) {
    let whole = s.len() / LANES * LANES;
    let (head, tail) = s.split_at(whole);
    (head.chunks_exact(LANES).map(|x| <&[f64; LANES]>::try_from(x).expect("a whole block")), tail)
}

/// [`blocks`] of a slice written.
#[inline(always)]
fn blocks_mut(s: &mut [f64]) -> (impl Iterator<Item = &mut [f64; LANES]>, &mut [f64]) {
    let whole = s.len() / LANES * LANES;
    let (head, tail) = s.split_at_mut(whole);
    (head.chunks_exact_mut(LANES).map(|x| <&mut [f64; LANES]>::try_from(x).expect("a whole block")), tail)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::{MemoryLimit, PathChoice, reference_einsum};

    fn plan(eq: &str, shapes: &[Vec<usize>]) -> Plan {
        Plan::new(eq, shapes, PathChoice::Greedy, MemoryLimit::Unlimited).expect("a valid expression")
    }

    /// `strip_exponent`'s test read plainly: an entry not finite, or a largest modulus
    /// that is not zero but subnormal.
    fn left_range_plainly(s: &[f64]) -> bool {
        s.iter().any(|x| !x.is_finite()) || {
            let m = s.iter().fold(0.0f64, |m, x| m.max(x.abs()));
            m > 0.0 && m < f64::MIN_POSITIVE
        }
    }

    /// Entries drawn to leave the range now and then: ordinary values, huge ones whose
    /// products overflow, tiny ones whose products are subnormal, infinities and NaN.
    fn entry() -> impl Strategy<Value = f64> {
        prop_oneof![
            8 => -4.0f64..4.0,
            1 => Just(1e200),
            1 => Just(-3e-160),
            1 => Just(1e-300),
            1 => Just(f64::INFINITY),
            1 => Just(f64::NAN),
        ]
    }

    #[test]
    fn only_products_of_one_layout_are_hadamard() {
        let sq = vec![3usize, 4];
        assert!(Hadamard::for_plan(&plan("ij,ij->ij", &[sq.clone(), sq.clone()])).is_some());
        // numpy's implicit output keeps the labels seen once: none here, a sum.
        assert!(Hadamard::for_plan(&plan("ij,ij", &[sq.clone(), sq.clone()])).is_none());
        assert!(Hadamard::for_plan(&plan("...,...->...", &[sq.clone(), sq.clone()])).is_some());
        assert!(Hadamard::for_plan(&plan("ij,ji->ij", &[sq.clone(), vec![4, 3]])).is_none());
        assert!(Hadamard::for_plan(&plan("ij,ij->i", &[sq.clone(), sq.clone()])).is_none());
        assert!(Hadamard::for_plan(&plan("ij,j->ij", &[sq.clone(), vec![4]])).is_none());
        // A broadcast axis of size 1 gets a label of its own (`squeeze_broadcast`).
        assert!(Hadamard::for_plan(&plan("ij,ij->ij", &[sq.clone(), vec![1, 4]])).is_none());
        assert!(Hadamard::for_plan(&plan("ij,ij,ij->ij", &[sq.clone(), sq.clone(), sq.clone()])).is_none());
        let sliced = plan("ij,ij->ij", &[sq.clone(), sq.clone()]).slice(&[0]).expect("a label to slice");
        assert!(Hadamard::for_plan(&sliced).is_none());
    }

    #[test]
    fn wrong_shapes_and_operands_are_errors() {
        let h = Hadamard::for_plan(&plan("ij,ij->ij", &[vec![2, 3], vec![2, 3]])).expect("a product");
        let (a, b) = (Tensor::<f64>::ones(vec![2, 3]).unwrap(), Tensor::<f64>::ones(vec![3, 2]).unwrap());
        assert!(matches!(h.value(&a, &b), Err(EinsumError::Shape(_))));
        assert!(matches!(h.value_and_grad(&a, &a, &b, &[0]), Err(EinsumError::Shape(_))));
        assert!(matches!(h.value_and_grad(&a, &a, &a, &[2]), Err(EinsumError::Shape(_))));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Value and gradients, for every `wrt` (orders and repeats too), equal the
        /// reference contraction's (`ij,ij->ij` and `ij,ij->ij` of the cotangent with the
        /// other operand) exactly, up to the sign of zeros (the reference adds its product
        /// to `+0`), and the range verdict equals the plain test
        /// of each result; lengths cover whole lane blocks and tails.
        #[test]
        fn value_and_gradients_equal_the_reference(
            shape in proptest::collection::vec(1usize..6, 0..4),
            seed in proptest::collection::vec(entry(), 3 * 125),
            wrt in proptest::sample::select(vec![vec![], vec![0], vec![1], vec![0, 1], vec![1, 0], vec![1, 1]]),
        ) {
            let n: usize = shape.iter().product();
            let t = |k: usize| Tensor::new(shape.clone(), seed[k * n..(k + 1) * n].to_vec()).expect("a tensor");
            let (a, b, c) = (t(0), t(1), t(2));
            let labels: String = ['i', 'j', 'k', 'l'][..shape.len()].iter().collect();
            let eq = format!("{labels},{labels}->{labels}");
            let h = Hadamard::for_plan(&plan(&eq, &[shape.clone(), shape.clone()])).expect("a product");
            // Equal values, or both NaN; `+0 == -0`.
            let values = |t: &Tensor<f64>| t.data().iter().map(|&x| if x.is_nan() { None } else { Some(x) }).collect::<Vec<_>>();
            let want = reference_einsum(&eq, &[&a, &b]).expect("the reference");
            let (value, scan) = h.value_with_range(&a, &b).expect("the value");
            prop_assert_eq!(values(&value), values(&want));
            prop_assert_eq!(scan.left_range(), left_range_plainly(want.data()));
            let out = h.value_and_grad(&a, &b, &c, &wrt).expect("value and gradients");
            prop_assert_eq!(values(&out.value), values(&want));
            let grad = |w: usize| reference_einsum(&eq, &[&c, if w == 0 { &b } else { &a }]).expect("the reference");
            prop_assert_eq!(out.grads.len(), wrt.len());
            let mut left = left_range_plainly(want.data());
            for (g, &w) in out.grads.iter().zip(&wrt) {
                let r = grad(w);
                prop_assert_eq!(values(g), values(&r));
                left |= left_range_plainly(r.data());
            }
            prop_assert_eq!(out.left_range, left);
        }

        /// A scalar cotangent gives what that value filled into the product's shape gives,
        /// bit for bit, for every `wrt` and lengths with and without a partial block.
        #[test]
        fn a_scalar_cotangent_is_the_filled_one(
            shape in proptest::collection::vec(1usize..7, 1..4),
            seed in proptest::collection::vec(entry(), 2 * 216),
            c in entry(),
            wrt in proptest::sample::select(vec![vec![], vec![0], vec![1], vec![0, 1], vec![1, 0]]),
        ) {
            let n: usize = shape.iter().product();
            let t = |k: usize| Tensor::new(shape.clone(), seed[k * n..(k + 1) * n].to_vec()).expect("a tensor");
            let (a, b) = (t(0), t(1));
            let labels: String = ['i', 'j', 'k'][..shape.len()].iter().collect();
            let eq = format!("{labels},{labels}->{labels}");
            let h = Hadamard::for_plan(&plan(&eq, &[shape.clone(), shape.clone()])).expect("a product");
            let bits = |t: &Tensor<f64>| t.data().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            let filled = Tensor::new(shape.clone(), vec![c; n]).expect("a tensor");
            let want = h.value_and_grad(&a, &b, &filled, &wrt).expect("value and gradients");
            let got = h.value_and_grad(&a, &b, &Tensor::scalar(c), &wrt).expect("value and gradients");
            prop_assert_eq!(bits(&got.value), bits(&want.value));
            prop_assert_eq!(got.grads.len(), want.grads.len());
            for (g, w) in got.grads.iter().zip(&want.grads) {
                prop_assert_eq!(bits(g), bits(w));
            }
            prop_assert_eq!(got.left_range, want.left_range);
        }

        /// The pass compiled for the processor's vector instructions (what [`fused`]
        /// dispatches to) writes the bits and finds the scans the baseline build does (pulp's
        /// scalar level), for each set of outputs and both kinds of cotangent, over lengths
        /// of several lane blocks and a tail.
        #[test]
        fn the_dispatched_pass_equals_the_baseline_one(
            seed in proptest::collection::vec(entry(), 3 * 70),
            n in 0usize..70,
            scalar in proptest::option::of(entry()),
            want in proptest::sample::select(vec![[false, false], [true, false], [false, true], [true, true]]),
            grads in proptest::bool::ANY,
        ) {
            let (a, b, c) = (&seed[..n], &seed[70..70 + n], &seed[140..140 + n]);
            let cotangent = grads.then(|| scalar.map_or(Cotangent::Tensor(c), Cotangent::Scalar));
            let len = |on: bool| if on && grads { n } else { 0 };
            let run = |dispatched: bool| {
                let mut out = [vec![0.0; n], vec![0.0; len(want[0])], vec![0.0; len(want[1])]];
                let [o, da, db] = &mut out;
                let w = Write { a, b, c: cotangent, out: [o, da, db] };
                let scans = if dispatched { crate::small_gemm::arch().dispatch(w) } else { pulp::WithSimd::with_simd(w, pulp::Scalar::new()) };
                (out.map(|v| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>()), scans.map(|s| (s.not_finite(), s.largest().to_bits())))
            };
            prop_assert_eq!(run(true), run(false));
        }

        /// The scan of any array, and of it cut in two and merged, is the plain test's, and
        /// its largest modulus the plain maximum; lengths cover pairs of lane blocks, an odd
        /// block and a tail.
        #[test]
        fn scans_merge_to_the_whole(s in proptest::collection::vec(entry(), 0..80), cut in 0usize..80) {
            let cut = cut.min(s.len());
            let whole = RangeScan::of(&s);
            prop_assert_eq!(whole.left_range(), left_range_plainly(&s));
            prop_assert_eq!(whole.not_finite(), s.iter().any(|x| !x.is_finite()));
            if !whole.not_finite() {
                prop_assert_eq!(whole.largest(), s.iter().fold(0.0f64, |m, x| m.max(x.abs())));
            }
            prop_assert_eq!(RangeScan::of(&s[..cut]).merge(RangeScan::of(&s[cut..])), whole);
        }
    }

    /// Above the parallel threshold, on a pool of two and of three threads, value and
    /// gradients equal one thread's bit for bit and the range verdicts agree, with an
    /// entry out of range in one piece only.
    #[test]
    fn threads_equal_one_thread() {
        let n = PAR_ELEMENTWISE_MIN_ELEMENTS + 13;
        let shape = vec![7, n / 7 + 1];
        let len = 7 * (n / 7 + 1);
        let h = Hadamard::for_plan(&plan("ij,ij->ij", &[shape.clone(), shape.clone()])).expect("a product");
        let (a, b) = (crate::reference::ramp_from(shape.clone(), 0.5), crate::reference::ramp_from(shape.clone(), 3.0));
        let mut cdata = crate::reference::ramp_from(shape.clone(), 7.0).data().to_vec();
        for poison in [None, Some(f64::INFINITY), Some(1e-310)] {
            if let Some(x) = poison {
                cdata[len - 5] = x; // in the last piece, past the last whole lane block of some
            }
            let c = Tensor::new(shape.clone(), cdata.clone()).expect("a tensor");
            let one = h.value_and_grad(&a, &b, &c, &[0, 1]).expect("one thread");
            for threads in [2, 3] {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a pool");
                let many = pool.install(|| h.value_and_grad(&a, &b, &c, &[0, 1])).expect("threads");
                assert_eq!(many.value.data(), one.value.data());
                assert_eq!(many.grads[0].data(), one.grads[0].data());
                assert_eq!(many.grads[1].data(), one.grads[1].data());
                assert_eq!(many.left_range, one.left_range, "{poison:?}");
                let (v, s) = pool.install(|| h.value_with_range(&a, &b)).expect("threads");
                assert_eq!((v.data(), s), (one.value.data(), RangeScan::of(one.value.data())));
            }
            // A subnormal gradient entry beside larger ones is in range; infinity is not.
            assert_eq!(one.left_range, poison == Some(f64::INFINITY), "{poison:?}");
        }
    }

    /// NaNs of three payloads and both signs, meeting each other in every product, past
    /// the parallel threshold: two and three threads give one thread's bits for the value
    /// and both gradients, with a tensor and a scalar cotangent.
    #[test]
    fn nan_payloads_do_not_depend_on_the_threads() {
        // Past the threshold, with a tail; two threads cut it into pieces of an odd
        // number of lane blocks (a loop unrolled by two would start some in its other half).
        let n = PAR_ELEMENTWISE_MIN_ELEMENTS + 3 * 1024 + 5;
        let nan = |payload: u64, negative: bool| {
            f64::from_bits(0x7ff8_0000_0000_0000 | payload | (u64::from(negative) << 63))
        };
        // Tensor `k`'s entry `i` a NaN of its own where bit `k` of `i / 3` is set.
        let make = |k: usize| {
            let data = (0..n)
                .map(|i| if ((i / 3) >> k) & 1 == 1 { nan(k as u64 + 1, (i + k) % 2 == 0) } else { 1.5 + k as f64 })
                .collect();
            Tensor::new(vec![n], data).expect("a tensor")
        };
        let (a, b, c) = (make(0), make(1), make(2));
        let h = Hadamard::for_plan(&plan("i,i->i", &[vec![n], vec![n]])).expect("a product");
        let bits = |t: &Tensor<f64>| t.data().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        for cotangent in [c, Tensor::scalar(nan(7, true))] {
            let one = h.value_and_grad(&a, &b, &cotangent, &[0, 1]).expect("one thread");
            let (value, _) = h.value_with_range(&a, &b).expect("one thread");
            for threads in [2, 3] {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a pool");
                let many = pool.install(|| h.value_and_grad(&a, &b, &cotangent, &[0, 1])).expect("threads");
                assert_eq!(bits(&many.value), bits(&one.value), "{threads} threads");
                for (g, o) in many.grads.iter().zip(&one.grads) {
                    assert_eq!(bits(g), bits(o), "{threads} threads");
                }
                let (v, _) = pool.install(|| h.value_with_range(&a, &b)).expect("threads");
                assert_eq!(bits(&v), bits(&value), "{threads} threads");
            }
        }
    }

    /// With the stop flag up the pass ends with `Interrupted`.
    #[test]
    fn a_raised_flag_interrupts() {
        use std::sync::Arc;
        use std::sync::atomic::AtomicBool;
        let shape = vec![4, 1024];
        let h = Hadamard::for_plan(&plan("ij,ij->ij", &[shape.clone(), shape.clone()])).expect("a product");
        let a = Tensor::<f64>::ones(shape).unwrap();
        let up = Arc::new(AtomicBool::new(true));
        let r = crate::stop::with_stop(up, || h.value_and_grad(&a, &a, &a, &[0, 1]));
        assert!(matches!(r, Err(EinsumError::Interrupted)));
    }
}
