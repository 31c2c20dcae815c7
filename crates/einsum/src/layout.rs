//! The label order of each intermediate, chosen for the step that consumes it.
//!
//! A pairwise step writes its result in the order batch, left, right ([`step_output`]), so
//! that its own GEMM writes in place. The step that reads that result may want another
//! order: `lm_batch`'s `abcde,fbgec->cadfg` (1996 products of 16 × 16 × 16) found its
//! batch label `c` in the middle of one operand and innermost in the other, and packed
//! both by permutation copies before every evaluation. A GEMM also writes in place into
//! orders other than batch, left, right: batch labels may sit anywhere, and the left and
//! right groups may come in either order (a column-major block). So the copy at the
//! consumer can often be removed at no cost to the producer.
//!
//! [`result_order`] tries a few orders of a result (the consumer's batch, free and
//! contracted groups in each of the six arrangements, the groups' inner orders taken from
//! the default order or from the consumer's other operand) and keeps the one whose
//! producer and consumer the kernel planner estimates cheapest together
//! (`kernel::step_cost`: for the GEMM path copies, calls and multiply-adds; for the
//! element-wise kernel the length of its rows; for the reduction kernel its own
//! multiply-adds and runs), if it beats the default by [`MIN_GAIN`]. A candidate that
//! changes which kernel either step runs is refused, and a producer or consumer on the
//! direct loop or the lanes leaves the default order (their preferences for strides are
//! not modelled).
//!
//! The same intermediate is read and written again by the reverse pass: the producer's two
//! transposes read its cotangent in its order, and the consumer's write that cotangent and
//! read the result. So, against the order chosen for the forward pass, [`result_order`]
//! then prices each candidate with those four transposes added, and takes the cheapest
//! if it saves a smaller share of that total than the forward choice needs (the
//! transposes' GEMMs are the same in every order: what an order changes is its copies) and
//! costs the forward steps little more, where all six run the GEMM path. MERA's heaviest
//! step (990 × 2187 × 4620) packed its right operand, written `l c P Á Â q B Ã` by its
//! producer across the step's contracted `l q c B`, and the transpose writing its
//! cotangent went through a permutation of the same 81 MB; laid out `P Á Â Ã l c q B`,
//! both run in place, and the producer's transposes pay less for reading it out of their
//! order.
//!
//! The element-wise steps are what the queens network is made of: a `3 × 3` factor times
//! a tensor of `3^13` elements, whose default result (batch labels first) put the factor's
//! labels outermost in the output but left one of them deep inside the large operand, so
//! that the kernel wrote rows of 3 elements (in panels, about 2.5 times a contiguous
//! step's time). The producer can write its result with the consumer's factor labels
//! outermost instead, and the consumer's rows are then the whole rest of the tensor.
//!
//! Invariants: the order returned is a permutation of the default's labels; the default
//! is returned unless both steps run a priced kernel, and a candidate is kept only if
//! both run the same kernels as in the default (and, for the gradient's choice, the four
//! transposes the same kernels as under the forward choice, all six the GEMM path). Cost: at most 13 orders,
//! each planned six times (`O(labels²)` per plan), per step consumed by another step.

use smallvec::SmallVec;

use crate::error::EinsumResult;
use crate::kernel::{ContractSpec, PricedKernel, step_cost};

/// A candidate must be estimated this fraction cheaper than the default order, so that
/// estimates within their noise leave the graph as it was.
const MIN_GAIN: f64 = 0.1;

/// The share of the value-and-gradient estimate (the two steps and their four transposes)
/// an order must save against the forward pass's choice to be taken instead. Smaller than
/// [`MIN_GAIN`]: the transposes run the same GEMMs whatever the order, so what differs
/// between orders is the copies, a few percent of the total.
const GRADIENT_GAIN: f64 = 0.02;

/// How much more the forward steps may be estimated to cost under the order chosen for
/// the value and gradients, as a share of the forward pass's choice: a forward-only
/// caller pays it.
const GRADIENT_FORWARD_LOSS: f64 = 0.05;

/// Labels of the result of contracting `a` and `b` that are still `needed` (by a remaining
/// operand or the output). Ordered batch (in both, `a`'s order), left (`a` only), right
/// (`b` only), so the GEMM kernel can write the result in place.
pub(crate) fn step_output(a: &[u32], b: &[u32], needed: impl Fn(u32) -> bool) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::new();
    let mut push = |c: u32| {
        if needed(c) && !out.contains(&c) {
            out.push(c);
        }
    };
    a.iter().filter(|c| b.contains(c)).for_each(|&c| push(c));
    a.iter().filter(|c| !b.contains(c)).for_each(|&c| push(c));
    b.iter().filter(|c| !a.contains(c)).for_each(|&c| push(c));
    out
}

/// The step that consumes a result: where the result enters, the labels of its other
/// operand (in that operand's layout) and of its output when fixed (the last step's
/// output is the contraction's), with the labels still needed after it.
pub(crate) struct Consumer<'a> {
    /// `0` when the result is the consumer's `a`, `1` when it is its `b`.
    pub position: usize,
    /// The other operand's labels.
    pub other: &'a [u32],
    /// The consumer's output labels when they are fixed (the last step), else `None`.
    pub output: Option<&'a [u32]>,
    /// The labels the consumer's result keeps (when `output` is `None`).
    pub needed: &'a dyn Fn(u32) -> bool,
}

impl Consumer<'_> {
    /// The consumer's spec when the result has labels `r`.
    fn spec(&self, r: &[u32], sizes: &[usize]) -> EinsumResult<ContractSpec> {
        let (a, b) = if self.position == 0 { (r, self.other) } else { (self.other, r) };
        match self.output {
            Some(out) => ContractSpec::new(a, b, out, sizes),
            None => ContractSpec::new(a, b, &step_output(a, b, self.needed), sizes),
        }
    }
}

/// The order of the result of `la, lb -> default` (the labels `step_output` kept) for
/// `consumer` (see the module docs): first the order the forward pass prices cheapest,
/// then, against it, the order that prices the forward pass and the reverse pass together
/// cheapest ([`GRADIENT_GAIN`]).
pub(crate) fn result_order(
    [la, lb]: [&[u32]; 2],
    default: Vec<u32>,
    consumer: &Consumer<'_>,
    sizes: &[usize],
) -> EinsumResult<Vec<u32>> {
    let costs = |r: &[u32]| Priced::new([la, lb], r, consumer, sizes);
    let base = costs(&default)?;
    let [Some((kp, p0)), Some((kc, c0))] = base.forward else { return Ok(default) };
    // Every order priced with the default's forward kernels, the default first.
    let mut priced = vec![(default, base)];
    for cand in candidates(&priced[0].0, consumer) {
        let c = costs(&cand)?;
        // The same kernels only: the estimates of two kernels are not comparable enough.
        if matches!(c.forward, [Some((k, _)), Some((l, _))] if (k, l) == (kp, kc)) {
            priced.push((cand, c));
        }
    }
    let mut forward = (0, (p0 + c0) * (1.0 - MIN_GAIN));
    for (i, (_, c)) in priced.iter().enumerate().skip(1) {
        if c.forward_cost() < forward.1 {
            forward = (i, c.forward_cost());
        }
    }
    // Against the forward pass's choice, the order that the value and gradients of every
    // operand price cheapest: the forward steps and the four transposes above, with the
    // same kernels throughout, if it saves `GRADIENT_GAIN` of their total and adds at most
    // `GRADIENT_FORWARD_LOSS` to the forward steps.
    // GEMMs only: their estimates price copies and calls, which is what an order changes
    // for them; the element-wise and reduction kernels' orders were tuned on their forward
    // steps alone (the queens network), and are left to that choice.
    let f = &priced[forward.0].1;
    let gemms = f.kernels().iter().all(|k| *k == Some(PricedKernel::Gemm));
    let mut chosen = (forward.0, f.total() * (1.0 - GRADIENT_GAIN));
    for (i, (_, c)) in priced.iter().enumerate().filter(|_| gemms) {
        if c.kernels() == f.kernels()
            && c.total() < chosen.1
            && c.forward_cost() <= f.forward_cost() * (1.0 + GRADIENT_FORWARD_LOSS)
        {
            chosen = (i, c.total());
        }
    }
    Ok(priced.swap_remove(chosen.0).0)
}

/// A result order's estimates: the producer and the consumer, and the four transposes
/// that read or write the result (or its cotangent); `None` where the kernel is not one
/// `step_cost` prices.
struct Priced {
    forward: [Option<(PricedKernel, f64)>; 2],
    reverse: [Option<(PricedKernel, f64)>; 4],
}

impl Priced {
    /// The estimates of the result of `la, lb` in order `r`, read by `consumer`.
    fn new([la, lb]: [&[u32]; 2], r: &[u32], consumer: &Consumer<'_>, sizes: &[usize]) -> EinsumResult<Self> {
        let (producer, next) = (ContractSpec::new(la, lb, r, sizes)?, consumer.spec(r, sizes)?);
        // The transposes that read or write the result in this order: the producer's two
        // read its cotangent, the consumer's write that cotangent and read the result.
        let reverse = [producer.transpose_a(), producer.transpose_b(), next.transpose_a(), next.transpose_b()];
        Ok(Priced { forward: [step_cost(&producer), step_cost(&next)], reverse: reverse.map(|t| step_cost(&t)) })
    }

    fn kernels(&self) -> [Option<PricedKernel>; 6] {
        let k = |x: &Option<(PricedKernel, f64)>| x.map(|(k, _)| k);
        [
            k(&self.forward[0]),
            k(&self.forward[1]),
            k(&self.reverse[0]),
            k(&self.reverse[1]),
            k(&self.reverse[2]),
            k(&self.reverse[3]),
        ]
    }
    fn forward_cost(&self) -> f64 {
        self.forward.iter().flatten().map(|(_, c)| c).sum()
    }
    fn total(&self) -> f64 {
        self.forward_cost() + self.reverse.iter().flatten().map(|(_, c)| c).sum::<f64>()
    }
}

/// Orders of `default`'s labels made of the consumer's three groups (batch: in the other
/// operand and kept; free: kept only; contracted: in the other operand only) in each
/// arrangement, each group ordered as in `default` or, for batch and contracted labels, as
/// in the other operand. Excludes `default` itself; no duplicates.
fn candidates(default: &[u32], consumer: &Consumer<'_>) -> Vec<Vec<u32>> {
    let other = consumer.other;
    let kept = |c: u32| consumer.output.map_or_else(|| (consumer.needed)(c), |o| o.contains(&c));
    let in_other = |c: u32| other.contains(&c);
    let group = |f: &dyn Fn(u32) -> bool, from: &[u32]| -> SmallVec<[u32; 8]> {
        from.iter().copied().filter(|&c| default.contains(&c) && f(c)).fold(SmallVec::new(), |mut g, c| {
            if !g.contains(&c) {
                g.push(c);
            }
            g
        })
    };
    let batch = |c: u32| in_other(c) && kept(c);
    let free = |c: u32| !in_other(c);
    let contracted = |c: u32| in_other(c) && !kept(c);
    let inner = [
        [group(&batch, default), group(&free, default), group(&contracted, default)],
        [group(&batch, other), group(&free, default), group(&contracted, other)],
    ];
    // Row-major matrices first (the consumer's `a` as free × contracted, its `b` as
    // contracted × free): the estimate rates a transposed view like a plain one, but the
    // small-GEMM kernel gathers a transposed `b` (`abcde,cfgbe->cadfg` 2.99 ms against
    // 0.95 for `abcde,cbefg->cadfg`), and the first of equal estimates is kept.
    let arrangements: [[usize; 3]; 6] = if consumer.position == 0 {
        [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]]
    } else {
        [[0, 2, 1], [0, 1, 2], [2, 0, 1], [2, 1, 0], [1, 0, 2], [1, 2, 0]]
    };
    let mut out: Vec<Vec<u32>> = Vec::new();
    for arrangement in arrangements {
        for groups in &inner {
            let cand: Vec<u32> = arrangement.iter().flat_map(|&g| groups[g].iter().copied()).collect();
            if cand.len() == default.len() && cand != default && !out.contains(&cand) {
                out.push(cand);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::kernel::contract;
    use crate::reference::{ramp_from, reference_labels};

    /// Up to four distinct labels of `0..7` in a random order.
    fn labels() -> impl Strategy<Value = Vec<u32>> {
        proptest::sample::subsequence((0u32..7).collect::<Vec<_>>(), 1..=4).prop_shuffle()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        /// A producer `x, y -> r` and its consumer `r, other -> out` (or `other, r`), with
        /// random labels, orders and sizes: the order chosen is a permutation of the
        /// default, and both steps evaluated in it give the reference's contraction of
        /// the three operands.
        #[test]
        fn chosen_orders_contract_as_the_reference(
            sizes in proptest::collection::vec(2usize..=5, 7),
            (x, y, other) in (labels(), labels(), labels()),
            kept_after in proptest::collection::vec(any::<bool>(), 7),
            position in 0usize..2,
            last in proptest::option::of(Just((0u32..7).collect::<Vec<_>>()).prop_shuffle()),
        ) {
            let keeps = |c: u32| kept_after[c as usize];
            let default = step_output(&x, &y, |c| other.contains(&c) || keeps(c));
            let out: Option<Vec<u32>> = last.map(|order| {
                order.into_iter().filter(|&c| keeps(c) && (default.contains(&c) || other.contains(&c))).collect()
            });
            let consumer = Consumer { position, other: &other, output: out.as_deref(), needed: &keeps };
            let chosen = result_order([&x, &y], default.clone(), &consumer, &sizes).unwrap();
            let (mut p, mut q) = (chosen.clone(), default.clone());
            p.sort_unstable();
            q.sort_unstable();
            prop_assert_eq!(p, q);
            let shape = |l: &[u32]| l.iter().map(|&c| sizes[c as usize]).collect::<Vec<_>>();
            let (tx, ty, to) = (ramp_from(shape(&x), 0.0), ramp_from(shape(&y), 5.0), ramp_from(shape(&other), 9.0));
            let r = contract(&ContractSpec::new(&x, &y, &chosen, &sizes).unwrap(), &tx, &ty);
            let spec = consumer.spec(&chosen, &sizes).unwrap();
            let got = if position == 0 { contract(&spec, &r, &to) } else { contract(&spec, &to, &r) };
            // The consumer's output labels, in the spec's canonical numbering mapped back.
            let (ra, rb) = if position == 0 { (&chosen[..], &other[..]) } else { (&other[..], &chosen[..]) };
            let out_labels = out.clone().unwrap_or_else(|| step_output(ra, rb, keeps));
            let want = reference_labels(&[(&tx, &x[..]), (&ty, &y[..]), (&to, &other[..])], &out_labels, &sizes).unwrap();
            let err = got.max_abs_diff(&want).unwrap();
            prop_assert!(err <= 1e-10 * (1.0 + want.max_abs()), "{:?} {:?} {:?} -> {:?}: {}", x, y, other, chosen, err);
        }
    }

    #[test]
    fn queens_like_products_get_an_order_priced_below_the_default() {
        // A `3 × 3` factor on labels 0 and 1 times a tensor of `3^10` elements holding label 1
        // deep inside; its result is multiplied by a second factor on labels 2 and 9.
        let sizes = [3usize; 10];
        let (x, y) = (vec![0, 1], vec![0, 2, 3, 4, 5, 6, 7, 8, 1, 9]);
        let default = step_output(&x, &y, |_| true);
        let other = [2, 9];
        let consumer = Consumer { position: 0, other: &other, output: None, needed: &|_| true };
        let chosen = result_order([&x, &y], default.clone(), &consumer, &sizes).unwrap();
        let priced = |r: &[u32]| {
            let p = step_cost(&ContractSpec::new(&x, &y, r, &sizes).unwrap()).unwrap();
            let c = step_cost(&consumer.spec(r, &sizes).unwrap()).unwrap();
            assert!(p.0 == PricedKernel::Elementwise && c.0 == PricedKernel::Elementwise, "{r:?}");
            p.1 + c.1
        };
        assert_ne!(chosen, default);
        assert!(priced(&chosen) < priced(&default) * (1.0 - MIN_GAIN), "{chosen:?} against {default:?}");
    }

    /// The estimates of `r` as `result_order` makes them.
    fn priced(x: &[u32], y: &[u32], consumer: &Consumer<'_>, r: &[u32], sizes: &[usize]) -> Priced {
        Priced::new([x, y], r, consumer, sizes).unwrap()
    }

    #[test]
    fn mera_heaviest_steps_left_operand_gets_an_order_priced_for_the_gradient() {
        // MERA's heaviest step (990 × 2187 × 4620) contracts `l q c B` of its left operand,
        // which its producer writes `E f l q c B Ä` by default: the step packs it, and the
        // transposes pack it again and permute its cotangent. Labels E f l q c B Ä v D P Á Â Ã.
        let sizes = [11, 10, 6, 22, 5, 7, 9, 6, 4, 3, 9, 9, 9];
        let (x, y) = (vec![7, 8, 0], vec![1, 7, 2, 3, 4, 5, 8, 6]);
        let kept_next = [0u32, 1, 6, 9, 10, 11, 12];
        let default = step_output(&x, &y, |c| c != 7 && c != 8);
        assert_eq!(default, vec![0, 1, 2, 3, 4, 5, 6]);
        let other = [2, 4, 9, 10, 11, 3, 5, 12];
        let consumer = Consumer { position: 0, other: &other, output: None, needed: &|c| kept_next.contains(&c) };
        let chosen = result_order([&x, &y], default.clone(), &consumer, &sizes).unwrap();
        assert_ne!(chosen, default);
        let (c, d) = (priced(&x, &y, &consumer, &chosen, &sizes), priced(&x, &y, &consumer, &default, &sizes));
        assert_eq!(c.kernels(), d.kernels());
        assert!(c.total() < d.total() * (1.0 - GRADIENT_GAIN), "{chosen:?}: {} against {}", c.total(), d.total());
        assert!(c.forward_cost() <= d.forward_cost() * (1.0 + GRADIENT_FORWARD_LOSS));
    }

    #[test]
    fn lm_batch_heaviest_step_gets_its_batch_label_outside() {
        // Labels: a b c d e f g = 0..7, c (2) the batch of 1996.
        let sizes = [4, 4, 1996, 4, 4, 4, 4];
        // A producer whose default result is `fbgec` (c innermost): f b g from `x`, e c from `y`,
        // summing label 7 (size 4).
        let sizes_p = [sizes.to_vec(), vec![4]].concat();
        let (x, y) = (vec![5, 1, 6, 7], vec![7, 4, 2]);
        let default = step_output(&x, &y, |c| c != 7);
        assert_eq!(default, vec![5, 1, 6, 4, 2]);
        let a = [0, 1, 2, 3, 4];
        let out = [2, 0, 3, 5, 6];
        let consumer = Consumer { position: 1, other: &a, output: Some(&out), needed: &|_| true };
        let chosen = result_order([&x, &y], default.clone(), &consumer, &sizes_p).unwrap();
        let mut sorted = chosen.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, vec![1, 2, 4, 5, 6], "a permutation of the default");
        assert_ne!(chosen, default, "the default packs the consumer's b");
        let cost = |r: &[u32]| {
            let spec = consumer.spec(r, &sizes_p).unwrap();
            step_cost(&ContractSpec::new(&x, &y, r, &sizes_p).unwrap()).unwrap().1 + step_cost(&spec).unwrap().1
        };
        assert!(cost(&chosen) < cost(&default) * (1.0 - MIN_GAIN), "{chosen:?}");
    }
}
