//! Scaled contraction: a contraction whose intermediates carry a shared binary exponent
//! beside their entries, so that products far outside `f64`'s range (a long MPS inner
//! product, a model count of 10^300 and beyond) come out as a mantissa and an exponent
//! instead of `inf`, `NaN` or `0` (cotengra's `strip_exponent`).
//!
//! Input: an [`Einsum`] or a [`SlicedEinsum`] (so the plan, its shapes and its memory
//! checks are theirs) and operands. On request (`eval_scaled`, `value_and_grad_scaled`),
//! or automatically (`eval_auto`: the plain contraction, run again scaled when its result
//! has left the range from finite operands). Output: a [`ScaledTensor`],
//! `mantissa · 2^exponent`, the mantissa's largest magnitude in `[1/2, 1)` (the larger of
//! `|re|` and `|im|` for a complex entry; or all zero, exponent 0); with gradients, one
//! [`ScaledTensor`] per operand differentiated.
//!
//! How: the plan's steps (the sums done first, the pairwise steps, the final reduction),
//! the same kernels and the same specs as the compiled program, are run one by one; after
//! each, a tensor whose largest magnitude has left `[2^-64, 2^64]` is multiplied by the
//! power of two that brings it to `[1/2, 1)` and the power is added to its exponent. An
//! operand is read as given (no pass over it) unless the step reading it loses range (a
//! result not finite, or of largest magnitude below `2^-894`): then it is rescaled alike
//! and the step runs again. A power of two is exact, so where the plain contraction stays
//! in the normal range the mantissa times `2^exponent` is the plain result bit for bit
//! (same kernels, same order of sums); the scaling only moves where rounding to zero and
//! overflow happen. A step's rescaled operands are bounded by
//! `2^64` each, so a step cannot overflow unless it sums more than `2^(1023-128)` terms.
//!
//! The reverse pass runs the transposed specs (those of the AD rules in `ad.rs`) on the
//! mantissas of the forward intermediates, each cotangent with its own exponent (the
//! cotangent's plus the other operand's), rescaled the same way. A path is a tree, so each
//! value has one consumer and no cotangent is ever summed.
//!
//! Sliced: each slice runs scaled; slices are combined at the largest exponent seen so
//! far (the accumulator, or the new slice, is scaled down to it), value and gradients
//! alike.
//!
//! Invariants: an exponent is an integer (held in an `f64`, exact below 2^53); a
//! `ScaledTensor` from this module has a mantissa of largest magnitude in `[1/2, 1)`, or
//! zero, or a non-finite entry (an operand was not finite).
//!
//! Complexity: the plain contraction's steps, plus one read of every intermediate (its
//! largest magnitude) and a rare rescaling pass; the forward intermediates are kept for the
//! reverse pass (counted by [`Einsum::gradient`]'s memory check).

use std::ops::Range;

use crate::elem::Elem;
use crate::error::{EinsumError, EinsumResult};
use crate::kernel::{self, ContractSpec, UnarySpec};
use crate::layout::step_output;
use crate::network::{Einsum, check_operand_shapes};
use crate::plan::Plan;
use crate::sliced::SlicedEinsum;
use crate::tensor::Tensor;

/// An intermediate whose largest magnitude has a binary exponent within `±KEEP_EXPONENT` is
/// left as it is (no pass over it): the product of two such tensors cannot overflow.
const KEEP_EXPONENT: i32 = 64;

/// A tensor as a mantissa and a binary exponent: the value `mantissa · 2^exponent`.
///
/// ```
/// use einsum::{ScaledTensor, Tensor};
///
/// let t = Tensor::new(vec![2], vec![3.0, -0.5]).unwrap();
/// let s = ScaledTensor::from_tensor(t.clone());
/// assert_eq!((s.mantissa().data(), s.exponent()), (&[0.75, -0.125][..], 2.0));
/// assert_eq!(s.to_tensor(), Some(t));
/// // 2^2000 does not fit in an f64.
/// let big = ScaledTensor::new(Tensor::scalar(0.5), 2000.0);
/// assert_eq!(big.to_tensor(), None);
/// assert!((big.exponent10() - 2000.0 * 2f64.log10()).abs() < 1e-9);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct ScaledTensor<T: Elem> {
    mantissa: Tensor<T>,
    exponent: f64,
}

impl<T: Elem> ScaledTensor<T> {
    /// `mantissa · 2^exponent`, as given (not normalized).
    pub fn new(mantissa: Tensor<T>, exponent: f64) -> Self {
        ScaledTensor { mantissa, exponent }
    }

    /// `t` with its largest magnitude (`|x|`; for complex entries the larger of `|re|` and
    /// `|im|`) moved to `[1/2, 1)` and the power of two moved to the exponent (exponent 0
    /// for a zero or non-finite tensor).
    pub fn from_tensor(t: Tensor<T>) -> Self {
        let (mantissa, exponent) = rescale(t, 0.0, true);
        ScaledTensor { mantissa, exponent }
    }

    /// Whether a plain tensor is in range: every entry finite and the largest magnitude
    /// zero or a normal `f64`. A contraction whose result is not, from finite operands, had an
    /// intermediate leave the range ([`Einsum::eval_auto`] then runs it scaled).
    ///
    /// ```
    /// use einsum::{ScaledTensor, Tensor};
    /// assert!(ScaledTensor::fits(&Tensor::new(vec![2], vec![0.0, 1e300]).unwrap()));
    /// assert!(!ScaledTensor::fits(&Tensor::new(vec![2], vec![f64::INFINITY, 1.0]).unwrap()));
    /// assert!(!ScaledTensor::fits(&Tensor::new(vec![1], vec![1e-310]).unwrap()));
    /// ```
    pub fn fits(t: &Tensor<T>) -> bool {
        let m = max_modulus(t.data());
        m.is_finite() && (m == 0.0 || m >= f64::MIN_POSITIVE)
    }

    /// The mantissa.
    pub fn mantissa(&self) -> &Tensor<T> {
        &self.mantissa
    }

    /// The binary exponent (an integer).
    pub fn exponent(&self) -> f64 {
        self.exponent
    }

    /// The exponent in base 10, cotengra's: the value is `mantissa · 10^exponent10`.
    pub fn exponent10(&self) -> f64 {
        self.exponent * std::f64::consts::LOG10_2
    }

    /// The mantissa and the binary exponent.
    pub fn into_parts(self) -> (Tensor<T>, f64) {
        (self.mantissa, self.exponent)
    }

    /// The value as a plain tensor when it fits: every entry finite and the largest
    /// magnitude, unless zero, a normal `f64` (entries far below the largest may still round
    /// to zero, as they would in any `f64` result). `None` otherwise.
    pub fn to_tensor(&self) -> Option<Tensor<T>> {
        let m = max_modulus(self.mantissa.data());
        if !m.is_finite() {
            return None;
        }
        if m == 0.0 {
            return Some(self.mantissa.clone());
        }
        let e = self.exponent + binary_exponent(m) as f64;
        // The largest value is in [2^(e-1), 2^e): normal and finite.
        if !(-1021.0..=1024.0).contains(&e) {
            return None;
        }
        let mut data = self.mantissa.data().to_vec();
        scale(&mut data, self.exponent as i32);
        Some(Tensor::from_parts(self.mantissa.shape(), data))
    }
}

/// The magnitude the scaling goes by: `|x|` for a real, the larger of `|re|` and `|im|`
/// for a complex number (within a factor √2 of the modulus, without `hypot`'s cost);
/// `NaN` if a part is `NaN`.
fn magnitude<T: Elem>(x: T) -> f64 {
    let [re, im] = x.to_bits().map(|b| f64::from_bits(b).abs());
    if re >= im {
        re
    } else if im > re {
        im
    } else {
        re + im // a NaN
    }
}

/// The largest [`magnitude`] in `data`, `NaN` if an entry is `NaN`, 0 for no entries. In
/// eight lanes, so that the loop vectorizes (a scalar running maximum with a `NaN` test
/// cost more than a small contraction's GEMM).
fn max_modulus<T: Elem>(data: &[T]) -> f64 {
    let mut lanes = [0.0f64; 8];
    let mut nan = false;
    let chunks = data.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (l, &x) in lanes.iter_mut().zip(c) {
            let v = magnitude(x);
            nan |= v.is_nan();
            *l = if v > *l { v } else { *l };
        }
    }
    for &x in rest {
        let v = magnitude(x);
        nan |= v.is_nan();
        lanes[0] = if v > lanes[0] { v } else { lanes[0] };
    }
    if nan { f64::NAN } else { lanes.into_iter().fold(0.0, f64::max) }
}

/// `k` with `m = f · 2^k`, `f` in `[1/2, 1)`, for a finite `m > 0`.
fn binary_exponent(m: f64) -> i32 {
    let bits = m.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    if biased == 0 {
        // Subnormal: exact after scaling by 2^64.
        return binary_exponent(m * pow2(64)) - 64;
    }
    biased - 1022
}

/// `2^k` for `k` in `[-1022, 1023]`.
fn pow2(k: i32) -> f64 {
    debug_assert!((-1022..=1023).contains(&k));
    f64::from_bits(((k + 1023) as u64) << 52)
}

/// Multiplies every entry by `2^k`, in factors that are normal numbers (each product is
/// exact unless it leaves the normal range).
fn scale<T: Elem>(data: &mut [T], mut k: i32) {
    while k != 0 {
        let step = k.clamp(-1000, 1000);
        let f = T::from_f64(pow2(step));
        data.iter_mut().for_each(|x| *x = *x * f);
        k -= step;
        if k != 0 && data.iter().all(|x| *x == T::zero()) {
            return;
        }
    }
}

/// `t · 2^exponent` rescaled: when `always`, or when its largest magnitude has left
/// `[2^-KEEP_EXPONENT, 2^KEEP_EXPONENT]`, divided by the power of two that brings that to
/// `[1/2, 1)`, which is added to the exponent. A zero or non-finite tensor is left as is
/// (with exponent 0 when `always`: a zero has no scale).
fn rescale<T: Elem>(t: Tensor<T>, exponent: f64, always: bool) -> (Tensor<T>, f64) {
    let m = max_modulus(t.data());
    let (t, e, _) = rescale_known(t, exponent, always, m);
    (t, e)
}

/// [`rescale`] of a tensor whose largest magnitude `m` is known; also gives the largest
/// magnitude after (a power of two moves it exactly), so that no later pass recomputes it.
fn rescale_known<T: Elem>(t: Tensor<T>, exponent: f64, always: bool, m: f64) -> (Tensor<T>, f64, f64) {
    if !m.is_finite() || m == 0.0 {
        return (t, if always && m == 0.0 { 0.0 } else { exponent }, m);
    }
    let k = binary_exponent(m);
    if k == 0 || (!always && k.abs() <= KEEP_EXPONENT) {
        return (t, exponent, m);
    }
    let shape = t.shape().to_vec();
    let mut data = t.into_vec();
    scale(&mut data, -k);
    let mut after = [m];
    scale(&mut after, -k);
    (Tensor::from_parts(&shape, data), exponent + k as f64, after[0])
}

/// Whether a step's result of largest magnitude `m` may have lost products to overflow or
/// underflow. Only a step that read an operand as the caller gave it can: every other
/// operand is within `2^±KEEP_EXPONENT`.
fn lost_range(m: f64) -> bool {
    !m.is_finite() || m < pow2(-(1022 - 2 * KEEP_EXPONENT))
}

/// A value as the steps read it: `tensor · 2^exponent`; `raw` while it is an operand as
/// given, not yet rescaled (operands are read as they are, without a pass over them,
/// unless a step that reads one loses range: [`lost_range`]).
struct Value<T: Elem> {
    tensor: Tensor<T>,
    exponent: f64,
    raw: bool,
    /// The tensor's largest magnitude (unknown, `NaN`, while raw).
    magnitude: f64,
}

impl<T: Elem> Value<T> {
    /// An operand (or a cotangent) as the caller gave it.
    fn raw(tensor: Tensor<T>) -> Self {
        Value { tensor, exponent: 0.0, raw: true, magnitude: f64::NAN }
    }

    /// A step's result `r · 2^e` of largest magnitude `m`, rescaled if out of bounds.
    fn result(r: Tensor<T>, e: f64, m: f64) -> Self {
        let (tensor, exponent, magnitude) = rescale_known(r, e, false, m);
        Value { tensor, exponent, raw: false, magnitude }
    }

    /// Rescales a raw value (into `[2^-KEEP_EXPONENT, 2^KEEP_EXPONENT]`, if outside).
    fn settle(&mut self) {
        if self.raw {
            let t = std::mem::replace(&mut self.tensor, Tensor::scalar(T::zero()));
            let m = max_modulus(t.data());
            *self = Value::result(t, self.exponent, m);
        }
    }

    /// The value normalized: the largest magnitude in `[1/2, 1)`.
    fn finish(self) -> ScaledTensor<T> {
        let m = if self.raw { max_modulus(self.tensor.data()) } else { self.magnitude };
        let (mantissa, exponent, _) = rescale_known(self.tensor, self.exponent, true, m);
        ScaledTensor { mantissa, exponent }
    }
}

/// `f(a, b)`, the kernel of a step on two values; when its result lost range and a value
/// was raw, the raw ones are rescaled and `f` runs again. The result and its largest
/// magnitude.
fn guarded<T: Elem>(
    a: &mut Value<T>,
    b: &mut Value<T>,
    f: impl Fn(&Tensor<T>, &Tensor<T>) -> Tensor<T>,
) -> (Tensor<T>, f64) {
    let r = f(&a.tensor, &b.tensor);
    let m = max_modulus(r.data());
    if !(a.raw || b.raw) || !lost_range(m) {
        return (r, m);
    }
    drop(r);
    a.settle();
    b.settle();
    let r = f(&a.tensor, &b.tensor);
    let m = max_modulus(r.data());
    (r, m)
}

/// One step of a plan: which values it reads (operands `0..n`, then step results in order)
/// and its kernel.
pub(crate) enum Step {
    Unary { a: usize, spec: UnarySpec },
    Contract { a: usize, b: usize, spec: ContractSpec },
}

/// The steps of a plan as `network.rs` builds them into a graph: the sums done first, the
/// pairwise steps (labels kept batch, left, right), the final reduction; step `s` writes
/// value `n + s`. `checkpoint.rs` runs the same steps unscaled.
pub(crate) struct Steps {
    pub(crate) n: usize,
    pub(crate) steps: Vec<Step>,
    /// The value that is the output.
    pub(crate) out: usize,
}

impl Steps {
    pub(crate) fn new(plan: &Plan) -> EinsumResult<Steps> {
        let net = plan.network();
        let (inputs, output, sizes) = (&net.inputs, &net.output, &net.sizes);
        let n = inputs.len();
        let followed = plan.followed();
        let mut steps = Vec::new();
        // Per path operand: its value and its labels.
        let mut at: Vec<(usize, Vec<u32>)> = inputs.iter().cloned().enumerate().collect();
        for (i, kept) in plan.reduced_inputs().iter().enumerate().filter(|&(i, _)| plan.summed_first(i)) {
            steps.push(Step::Unary { a: at[i].0, spec: UnarySpec::new(&inputs[i], kept, sizes)? });
            at[i] = (n + steps.len() - 1, kept.clone());
        }
        let pair_steps = followed.steps();
        for (s, step) in pair_steps.iter().enumerate() {
            let [si, sj] = step.operands;
            let (va, la) = (at[si.index()].0, std::mem::take(&mut at[si.index()].1));
            let (vb, lb) = (at[sj.index()].0, std::mem::take(&mut at[sj.index()].1));
            let kept = if s + 1 == pair_steps.len() {
                output.clone()
            } else {
                let needed = followed.labels(step.result);
                step_output(&la, &lb, |c| needed.contains(&c))
            };
            steps.push(Step::Contract { a: va, b: vb, spec: ContractSpec::new(&la, &lb, &kept, sizes)? });
            at.push((n + steps.len() - 1, kept));
        }
        let (mut out, labels) = at.swap_remove(followed.last().index());
        if followed.final_reduction().is_some() {
            steps.push(Step::Unary { a: out, spec: UnarySpec::new(&labels, output, sizes)? });
            out = n + steps.len() - 1;
        }
        Ok(Steps { n, steps, out })
    }

    /// Every value, scaled: operands first, then each step's result. Values a later step
    /// reads are dropped after it unless `keep` (the reverse pass reads them all).
    fn forward<T: Elem>(&self, operands: &[&Tensor<T>], keep: bool) -> Vec<Option<Value<T>>> {
        let mut values: Vec<Option<Value<T>>> = operands.iter().map(|&t| Some(Value::raw(t.clone()))).collect();
        let read = |values: &mut Vec<Option<Value<T>>>, v: usize| {
            values[v].take().expect("a path reads each value once, after it is made")
        };
        for step in &self.steps {
            let (r, e, m) = match step {
                Step::Unary { a, spec } => {
                    let mut va = read(&mut values, *a);
                    let mut none = Value::result(Tensor::scalar(T::zero()), 0.0, 0.0);
                    let (r, m) = guarded(&mut va, &mut none, |t, _| kernel::unary(spec, t));
                    let e = va.exponent;
                    if keep {
                        values[*a] = Some(va);
                    }
                    (r, e, m)
                }
                Step::Contract { a, b, spec } => {
                    let (mut va, mut vb) = (read(&mut values, *a), read(&mut values, *b));
                    let (r, m) = guarded(&mut va, &mut vb, |x, y| kernel::contract(spec, x, y));
                    let e = va.exponent + vb.exponent;
                    if keep {
                        (values[*a], values[*b]) = (Some(va), Some(vb));
                    }
                    (r, e, m)
                }
            };
            values.push(Some(Value::result(r, e, m)));
        }
        values
    }

    /// The scaled output of `operands` (of the plan's shapes, checked by the caller).
    fn eval<T: Elem>(&self, operands: &[&Tensor<T>]) -> ScaledTensor<T> {
        let mut values = self.forward(operands, false);
        values[self.out].take().expect("the output is made").finish()
    }

    /// The scaled output and the scaled cotangents of the operands `wrt` for `cotangent`
    /// (of the output's shape).
    fn value_and_grad<T: Elem>(
        &self,
        operands: &[&Tensor<T>],
        wrt: &[usize],
        cotangent: &Tensor<T>,
    ) -> (ScaledTensor<T>, Vec<ScaledTensor<T>>) {
        let mut values = self.forward(operands, true);
        let value = values[self.out].take().expect("the output is made").finish();
        // Which values lead to an operand in `wrt` (their cotangents are needed).
        let mut needed = vec![false; values.len()];
        wrt.iter().for_each(|&i| needed[i] = true);
        for (s, step) in self.steps.iter().enumerate() {
            needed[self.n + s] = match step {
                Step::Unary { a, .. } => needed[*a],
                Step::Contract { a, b, .. } => needed[*a] || needed[*b],
            };
        }
        let settled = |r: Tensor<T>, e: f64, m: f64| Some(Value::result(r, e, m));
        let mut cot: Vec<Option<Value<T>>> = (0..values.len()).map(|_| None).collect();
        cot[self.out] = Some(Value::raw(cotangent.clone()));
        for (s, step) in self.steps.iter().enumerate().rev() {
            let Some(mut c) = cot[self.n + s].take() else { continue };
            match step {
                Step::Unary { a, spec } if needed[*a] => {
                    let t = spec.transpose();
                    let mut none = Value::result(Tensor::scalar(T::zero()), 0.0, 0.0);
                    let (r, m) = guarded(&mut c, &mut none, |x, _| kernel::unary(&t, x));
                    cot[*a] = settled(r, c.exponent, m);
                }
                Step::Contract { a, b, spec } => {
                    // Each value is read by one step: this one's operands are done with after it.
                    let take = |values: &mut Vec<Option<Value<T>>>, v: usize| {
                        values[v].take().expect("kept for the reverse pass")
                    };
                    let (mut va, mut vb) = (take(&mut values, *a), take(&mut values, *b));
                    if needed[*a] {
                        let t = adjoint::<T>(spec.transpose_a());
                        let (r, m) = guarded(&mut c, &mut vb, |x, y| kernel::contract(&t, x, y));
                        cot[*a] = settled(r, c.exponent + vb.exponent, m);
                    }
                    if needed[*b] {
                        let t = adjoint::<T>(spec.transpose_b());
                        let (r, m) = guarded(&mut va, &mut c, |x, y| kernel::contract(&t, x, y));
                        cot[*b] = settled(r, va.exponent + c.exponent, m);
                    }
                }
                Step::Unary { .. } => {}
            }
        }
        let grads = wrt
            .iter()
            .map(|&i| {
                // Every operand reaches the output (a path is a tree over all of them).
                cot[i].take().expect("an operand in `wrt` gets a cotangent").finish()
            })
            .collect();
        (value, grads)
    }
}

/// A transposed spec as the AD rules make it: conjugation flags on complex values only.
pub(crate) fn adjoint<T: Elem>(spec: ContractSpec) -> ContractSpec {
    if T::IS_COMPLEX { spec } else { spec.with_conj([false; 2]) }
}

/// `wrt` checked: operand positions below `n`, none twice.
pub(crate) fn check_wrt(name: &str, wrt: &[usize], n: usize) -> EinsumResult<()> {
    for (k, &i) in wrt.iter().enumerate() {
        if i >= n {
            return Err(EinsumError::Shape(format!(
                "cannot differentiate `{name}` with respect to operand {i}: there are {n}"
            )));
        }
        if wrt[..k].contains(&i) {
            return Err(EinsumError::Shape(format!("operand {i} is listed twice in `wrt`")));
        }
    }
    Ok(())
}

impl<T: Elem> Einsum<T> {
    /// The contraction as a mantissa and a binary exponent (see [`ScaledTensor`]): finite
    /// where the plain result ([`Einsum::eval`]) overflows or underflows, and equal to it
    /// (mantissa times `2^exponent`) where that stays in the normal range.
    ///
    /// ```
    /// use einsum::{Einsum, PathChoice, Tensor};
    ///
    /// // Σ_i Π_k x_ik for 400 factors of 10: 2·10^400, past f64's range.
    /// let shapes = vec![vec![2]; 400];
    /// let expr: String = (0..400).map(|_| "i").collect::<Vec<_>>().join(",") + "->";
    /// let e = Einsum::<f64>::new(&expr, &shapes, PathChoice::Greedy).unwrap();
    /// let ten = Tensor::filled(vec![2], 10.0).unwrap();
    /// let ops = vec![&ten; 400];
    /// assert!(e.eval(&ops).unwrap().data()[0].is_infinite());
    /// let s = e.eval_scaled(&ops).unwrap();
    /// let log10 = s.mantissa().data()[0].log10() + s.exponent10();
    /// assert!((log10 - (400.0 + 2f64.log10())).abs() < 1e-10);
    /// ```
    pub fn eval_scaled(&self, operands: &[&Tensor<T>]) -> EinsumResult<ScaledTensor<T>> {
        check_operand_shapes(&self.plan().name_display(), self.shapes(), operands)?;
        let steps = Steps::new(self.plan())?;
        let _evaluation = crate::buffer::begin_evaluation();
        Ok(steps.eval(operands))
    }

    /// The automatic form: [`Einsum::eval`], and when its result does not
    /// [fit](ScaledTensor::fits) although every operand is finite (an intermediate
    /// overflowed or underflowed), [`Einsum::eval_scaled`]. The plain result comes back as
    /// a mantissa with exponent 0 (not normalized); [`ScaledTensor::to_tensor`] gives a
    /// plain tensor whenever the value fits.
    ///
    /// ```
    /// use einsum::{Einsum, PathChoice, Tensor};
    ///
    /// let e = Einsum::<f64>::new("i,i->", &[vec![2], vec![2]], PathChoice::Greedy).unwrap();
    /// let (small, big) = (Tensor::filled(vec![2], 3.0).unwrap(), Tensor::filled(vec![2], 1e300).unwrap());
    /// assert_eq!(e.eval_auto(&[&small, &small]).unwrap().to_tensor(), Some(Tensor::scalar(18.0)));
    /// let s = e.eval_auto(&[&big, &big]).unwrap();
    /// assert!(s.to_tensor().is_none() && (s.mantissa().data()[0].log10() + s.exponent10() - 600.30103).abs() < 1e-5);
    /// ```
    pub fn eval_auto(&self, operands: &[&Tensor<T>]) -> EinsumResult<ScaledTensor<T>> {
        let plain = self.eval(operands)?;
        if ScaledTensor::fits(&plain) || !operands.iter().all(|t| max_modulus(t.data()).is_finite()) {
            return Ok(ScaledTensor::new(plain, 0.0));
        }
        self.eval_scaled(operands)
    }

    /// The scaled value and the scaled gradients (vector-Jacobian products for
    /// `cotangent`, of the output's shape) with respect to the operands `wrt`, each
    /// gradient with its own exponent. Memory is checked as [`Einsum::gradient`] checks it.
    ///
    /// ```
    /// use einsum::{Einsum, PathChoice, Tensor};
    ///
    /// let e = Einsum::<f64>::new("i,i->", &[vec![2], vec![2]], PathChoice::Greedy).unwrap();
    /// let (x, y) = (Tensor::new(vec![2], vec![1e300, 2e300]).unwrap(), Tensor::filled(vec![2], 1e300).unwrap());
    /// let (v, g) = e.value_and_grad_scaled(&[&x, &y], &[1], &Tensor::scalar(1.0)).unwrap();
    /// assert!((v.mantissa().data()[0].log10() + v.exponent10() - (600.0 + 3f64.log10())).abs() < 1e-10);
    /// assert_eq!(g[0].to_tensor(), Some(x)); // ∂(x·y)/∂y = x, which fits
    /// ```
    pub fn value_and_grad_scaled(
        &self,
        operands: &[&Tensor<T>],
        wrt: &[usize],
        cotangent: &Tensor<T>,
    ) -> EinsumResult<(ScaledTensor<T>, Vec<ScaledTensor<T>>)> {
        let name = self.plan().name();
        check_operand_shapes(&name, self.shapes(), operands)?;
        check_wrt(&name, wrt, operands.len())?;
        if cotangent.shape() != self.output_shape() {
            return Err(EinsumError::Shape(format!(
                "cotangent 0 of `{name}` has shape {:?}, expected {:?}",
                cotangent.shape(),
                self.output_shape()
            )));
        }
        self.check_reverse("the scaled gradient", wrt, &[])?;
        let steps = Steps::new(self.plan())?;
        let _evaluation = crate::buffer::begin_evaluation();
        Ok(steps.value_and_grad(operands, wrt, cotangent))
    }
}

/// A sum of scaled slices at one shared exponent: the largest seen so far.
struct Accumulator<T: Elem> {
    data: Vec<T>,
    shape: Vec<usize>,
    /// `None` until a non-zero part is added.
    exponent: Option<f64>,
}

impl<T: Elem> Accumulator<T> {
    fn new(shape: &[usize]) -> EinsumResult<Self> {
        Ok(Accumulator { data: Tensor::<T>::zeros(shape.to_vec())?.into_vec(), shape: shape.to_vec(), exponent: None })
    }

    /// Adds the scaled `part` with `place(acc, part data)`, rescaling the accumulator or
    /// the part to the larger exponent. Zero parts add nothing (their exponent means
    /// nothing).
    fn add(&mut self, part: ScaledTensor<T>, place: impl FnOnce(&mut [T], &[T])) {
        let (t, e) = part.into_parts();
        if max_modulus(t.data()) == 0.0 {
            return;
        }
        let at = match self.exponent {
            Some(a) if a >= e => a,
            Some(a) => {
                scale(&mut self.data, saturating_i32(a - e));
                e
            }
            None => e,
        };
        self.exponent = Some(at);
        if at == e {
            place(&mut self.data, t.data());
        } else {
            let mut d = t.into_vec();
            scale(&mut d, saturating_i32(e - at));
            place(&mut self.data, &d);
        }
    }

    fn finish(self) -> ScaledTensor<T> {
        let t = Tensor::from_parts(&self.shape, self.data);
        let (mantissa, exponent) = rescale(t, self.exponent.unwrap_or(0.0), true);
        ScaledTensor { mantissa, exponent }
    }
}

/// `x` (an integer difference of exponents, at most 0 here) as an `i32`; below -2^20 the
/// scaling gives zero either way.
fn saturating_i32(x: f64) -> i32 {
    x.clamp(-1_048_576.0, 1_048_576.0) as i32
}

impl<T: Elem> SlicedEinsum<T> {
    /// The contraction as a mantissa and a binary exponent ([`Einsum::eval_scaled`]), each
    /// slice scaled and the slices combined at the largest exponent.
    ///
    /// ```
    /// use einsum::{EinsumOptions, PathChoice, SlicedEinsum, Slicing, Tensor};
    ///
    /// let shapes = [vec![3, 4], vec![4, 5]];
    /// let s = SlicedEinsum::<f64>::new("ij,jk->ik", &shapes, PathChoice::Greedy,
    ///     &EinsumOptions::default(), &Slicing::Labels(vec!['j', 'k'])).unwrap();
    /// let a = Tensor::from_fn(vec![3, 4], |i| (1 + i[0] + i[1]) as f64 * 1e200).unwrap();
    /// let b = Tensor::from_fn(vec![4, 5], |i| (2 + i[0] * i[1]) as f64 * 1e200).unwrap();
    /// assert!(s.eval(&[&a, &b]).unwrap().data().iter().all(|x| x.is_infinite()));
    /// let r = s.eval_scaled(&[&a, &b]).unwrap();
    /// // Entry (0, 0): Σ_j (1 + j)·2 · 10^400 = 20 · 10^400.
    /// let got = r.mantissa().get(&[0, 0]).unwrap().log10() + r.exponent10();
    /// assert!((got - (400.0 + 20f64.log10())).abs() < 1e-10);
    /// ```
    pub fn eval_scaled(&self, operands: &[&Tensor<T>]) -> EinsumResult<ScaledTensor<T>> {
        self.eval_slices_scaled(operands, 0..self.plan().n_slices())
    }

    /// The scaled sum of the slices in `range` (of `0..n_slices`), of the output's full
    /// shape, as [`SlicedEinsum::eval_slices`] gives it plain: the scaled results of
    /// disjoint ranges, brought to one exponent and added, are [`SlicedEinsum::eval_scaled`]
    /// (what the distributed executors do with their ranges).
    ///
    /// ```
    /// use einsum::{EinsumOptions, PathChoice, SlicedEinsum, Slicing, Tensor};
    ///
    /// let s = SlicedEinsum::<f64>::new("i,i->", &[vec![4], vec![4]], PathChoice::Greedy,
    ///     &EinsumOptions::default(), &Slicing::Labels(vec!['i'])).unwrap();
    /// let x = Tensor::new(vec![4], vec![1e200, 2e200, 3e200, 4e200]).unwrap();
    /// let (a, b) = (s.eval_slices_scaled(&[&x, &x], 0..2).unwrap(), s.eval_slices_scaled(&[&x, &x], 2..4).unwrap());
    /// let log10 = |t: &einsum::ScaledTensor<f64>| t.mantissa().data()[0].log10() + t.exponent10();
    /// // (1² + 2²)·10^400 and (3² + 4²)·10^400, each past f64's range.
    /// assert!((log10(&a) - (400.0 + 5f64.log10())).abs() < 1e-12);
    /// assert!((log10(&b) - (400.0 + 25f64.log10())).abs() < 1e-12);
    /// ```
    pub fn eval_slices_scaled(&self, operands: &[&Tensor<T>], range: Range<u64>) -> EinsumResult<ScaledTensor<T>> {
        if !self.is_sliced() && range == (0..1) {
            return self.slice_einsum().eval_scaled(operands);
        }
        let steps = Steps::new(self.slice_einsum().plan())?;
        let mut acc = Accumulator::new(self.output_shape())?;
        self.for_each_slice(operands, None, range, &mut |values, refs, _| {
            acc.add(steps.eval(refs), |a, p| self.add_output_slice(a, values, p));
            Ok(())
        })?;
        Ok(acc.finish())
    }

    /// [`Einsum::eval_auto`] for a sliced contraction: [`SlicedEinsum::eval`], run again
    /// scaled when its result does not fit although every operand is finite.
    pub fn eval_auto(&self, operands: &[&Tensor<T>]) -> EinsumResult<ScaledTensor<T>> {
        let plain = self.eval(operands)?;
        if ScaledTensor::fits(&plain) || !operands.iter().all(|t| max_modulus(t.data()).is_finite()) {
            return Ok(ScaledTensor::new(plain, 0.0));
        }
        self.eval_scaled(operands)
    }

    /// The scaled value and gradients ([`Einsum::value_and_grad_scaled`]) summed over the
    /// slices, each combined at its largest exponent. Memory is checked as
    /// [`SlicedEinsum::gradient`] checks it.
    pub fn value_and_grad_scaled(
        &self,
        operands: &[&Tensor<T>],
        wrt: &[usize],
        cotangent: &Tensor<T>,
    ) -> EinsumResult<(ScaledTensor<T>, Vec<ScaledTensor<T>>)> {
        self.value_and_grad_slices_scaled(operands, wrt, cotangent, 0..self.plan().n_slices())
    }

    /// [`SlicedEinsum::value_and_grad_scaled`] over the slices in `range` (of
    /// `0..n_slices`): the value as [`SlicedEinsum::eval_slices_scaled`] gives it and the
    /// gradients summed over the range; disjoint ranges' results, brought to one exponent
    /// each and added, are those of every slice.
    pub fn value_and_grad_slices_scaled(
        &self,
        operands: &[&Tensor<T>],
        wrt: &[usize],
        cotangent: &Tensor<T>,
        range: Range<u64>,
    ) -> EinsumResult<(ScaledTensor<T>, Vec<ScaledTensor<T>>)> {
        if !self.is_sliced() && range == (0..1) {
            return self.slice_einsum().value_and_grad_scaled(operands, wrt, cotangent);
        }
        let name = self.contraction_plan().name();
        check_wrt(&name, wrt, operands.len())?;
        self.check_gradient_fits()?;
        let steps = Steps::new(self.slice_einsum().plan())?;
        let mut value = Accumulator::new(self.output_shape())?;
        let mut grads: Vec<Accumulator<T>> =
            wrt.iter().map(|&i| Accumulator::new(&self.shapes()[i])).collect::<EinsumResult<_>>()?;
        self.for_each_slice(operands, Some(cotangent), range, &mut |values, refs, c| {
            let (v, gs) = steps.value_and_grad(refs, wrt, c.expect("a cotangent was given"));
            value.add(v, |a, p| self.add_output_slice(a, values, p));
            for ((acc, g), &i) in grads.iter_mut().zip(gs).zip(wrt) {
                acc.add(g, |a, p| self.add_operand_slice(i, a, values, p));
            }
            Ok(())
        })?;
        Ok((value.finish(), grads.into_iter().map(Accumulator::finish).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_exponents_and_powers() {
        assert_eq!(binary_exponent(1.0), 1);
        assert_eq!(binary_exponent(0.75), 0);
        assert_eq!(binary_exponent(f64::MAX), 1024);
        assert_eq!(binary_exponent(f64::MIN_POSITIVE), -1021);
        assert_eq!(binary_exponent(f64::from_bits(1)), -1073);
        assert_eq!(pow2(-1022), f64::MIN_POSITIVE);
        let mut v = vec![f64::from_bits(1), 2f64.powi(-100)];
        scale(&mut v, 1073);
        assert_eq!(v, [0.5, 2f64.powi(973)]);
    }

    #[test]
    fn rescaling_keeps_moderate_tensors_and_moves_far_ones() {
        let t = Tensor::new(vec![2], vec![3.0, 1.0]).unwrap();
        assert_eq!(rescale(t.clone(), 5.0, false), (t.clone(), 5.0));
        let (m, e) = rescale(t, 5.0, true);
        assert_eq!((m.data(), e), (&[0.75, 0.25][..], 7.0));
        let tiny = Tensor::new(vec![2], vec![1e-300, -2e-300]).unwrap();
        let (m, e) = rescale(tiny.clone(), 0.0, false);
        assert!((0.5..1.0).contains(&m.max_abs()));
        assert_eq!(ScaledTensor::new(m, e).to_tensor(), Some(tiny));
        let zero = Tensor::<f64>::zeros(vec![3]).unwrap();
        assert_eq!(rescale(zero.clone(), 9.0, true), (zero, 0.0));
    }
}
