//! The primitive set: [`TensorOp`] (contraction, unary einsum, add, neg, conj, scale) on
//! [`Tensor`] operands, with [`TensorKey`] input keys, and the two operations that only
//! compiled gradient programs hold: the fused pair of a step's two gradients (`pair.rs`)
//! and the range of a result (`scan.rs`, placed by `ranged.rs`). AD rules are in `ad.rs`.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use computegraph::{EvaluableGraphOperation, GraphOperation, Outputs};

use crate::elem::Elem;
use crate::kernel::{self, ContractSpec, UnarySpec};
use crate::pair::PairSpec;
use crate::tensor::Tensor;

/// A tensor operation. Shape-specific operations (`Contract`, `Unary`) carry their label
/// sizes; the element-wise ones work on any shape (their operands must agree).
///
/// Operations compare and hash structurally (a `Scale` by the bits of its factor), so
/// equal contractions of equal inputs are one value after `materialize_merge`.
///
/// ```
/// use computegraph::EvaluableGraphOperation;
/// use einsum::{ContractSpec, Tensor, TensorOp};
///
/// let op = TensorOp::<f64>::contract(ContractSpec::new(&[0, 1], &[1], &[0], &[2, 2]).unwrap());
/// let m = Tensor::new(vec![2, 2], vec![1.0, 2.0, 3.0, 4.0]).unwrap();
/// let v = Tensor::new(vec![2], vec![1.0, 1.0]).unwrap();
/// assert_eq!(op.eval(&mut (), &[&m, &v])[0].data(), &[3.0, 7.0]);
/// ```
// Why `non_exhaustive`: kernels gain operations (a range read, a fused pair), and a match
// outside this crate must not break when one is added.
#[non_exhaustive]
#[derive(Clone)]
pub enum TensorOp<T> {
    /// A binary contraction (see [`ContractSpec`]); also element-wise products, outer
    /// products, traces and batched products.
    Contract(Arc<ContractSpec>),
    /// A one-operand einsum (see [`UnarySpec`]): permute, sum over axes, broadcast, diagonal.
    Unary(Arc<UnarySpec>),
    /// `a + b` (same shapes); the cotangent accumulation.
    Add,
    /// `-a`.
    Neg,
    /// `conj(a)` (the identity on reals).
    Conj,
    /// `s·a` for a constant `s`.
    Scale(T),
    /// Two contractions of one cotangent in one pass, from the operands `(c, m, a)` to the
    /// outputs `(x, y)`, or `(x, y, z)` for a triple (see [`PairSpec`]): made by
    /// [`Einsum::gradient`](crate::Einsum::gradient) in its compiled program, after the
    /// transform, so it has no AD rules of its own.
    ContractPair(Arc<PairSpec>),
    /// The range of its operand, as the two-entry tensor `[largest modulus, 1 if an entry
    /// is not finite else 0]` ([`crate::RangeScan`]): placed by
    /// [`EinsumGradient::eval_with_value_and_range`](crate::EinsumGradient::eval_with_value_and_range)'s
    /// program right after each result's defining operation, so that a program that keeps
    /// its order (compile keeps it for costly operations) reads the result while it is in
    /// the cache of the thread that wrote it. Like `ContractPair`, it is made after
    /// the transforms and has no AD rules.
    Range,
}

impl<T: Elem> TensorOp<T> {
    /// A contraction.
    pub fn contract(spec: ContractSpec) -> Self {
        TensorOp::Contract(Arc::new(spec))
    }

    /// A unary einsum.
    pub fn unary(spec: UnarySpec) -> Self {
        TensorOp::Unary(Arc::new(spec))
    }

    /// Applies the operation to plain values (what evaluation does); a
    /// [`TensorOp::ContractPair`] gives its first output (all of them: [`Self::apply_all`]).
    ///
    /// # Panics
    /// On operands whose shapes do not fit the operation.
    pub fn apply(&self, x: &[&Tensor<T>]) -> Tensor<T> {
        let elementwise = |r: Result<Tensor<T>, _>| r.unwrap_or_else(|e| panic!("{self:?}: {e}"));
        match self {
            TensorOp::Contract(s) => kernel::contract(s, x[0], x[1]),
            TensorOp::Unary(s) => kernel::unary(s, x[0]),
            TensorOp::Add => elementwise(x[0].zip_with(x[1], |a, b| a + b)),
            TensorOp::Neg => x[0].map(|&a| -a),
            TensorOp::Conj if !T::IS_COMPLEX => x[0].clone(),
            TensorOp::Conj => x[0].map(|&a| a.conj()),
            TensorOp::Scale(s) => x[0].map(|&a| *s * a),
            TensorOp::ContractPair(_) => self.apply_all(x).swap_remove(0),
            TensorOp::Range => crate::scan::range_of(x[0]),
        }
    }

    /// Applies the operation to plain values: every output, in order.
    ///
    /// # Panics
    /// As [`Self::apply`].
    pub fn apply_all(&self, x: &[&Tensor<T>]) -> Vec<Tensor<T>> {
        match self {
            TensorOp::ContractPair(p) => p.apply(x[0], x[1], x[2]),
            _ => vec![self.apply(x)],
        }
    }

    /// A tensor of the output's shape with unspecified values, made without computing:
    /// what a stopped evaluation's remaining operations produce (`stop.rs`).
    fn placeholders(&self, x: &[&Tensor<T>], out: &mut Outputs<'_, Tensor<T>>) {
        let shaped = |shape: Vec<usize>| {
            let n = shape.iter().product();
            Tensor::from_parts(&shape, crate::buffer::overwritten(n))
        };
        match self {
            TensorOp::Contract(s) => out.push(shaped(s.out_shape())),
            TensorOp::Unary(s) => out.push(shaped(s.out_shape())),
            TensorOp::ContractPair(p) => {
                out.push(shaped(p.x().out_shape()));
                out.push(shaped(p.y().out_shape()));
                if let Some(z) = p.z() {
                    out.push(shaped(z.out_shape()));
                }
            }
            TensorOp::Add | TensorOp::Neg | TensorOp::Conj | TensorOp::Scale(_) => out.push(x[0].clone()),
            TensorOp::Range => out.push(shaped(vec![2])),
        }
    }
}

impl<T: Elem> PartialEq for TensorOp<T> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (TensorOp::Contract(a), TensorOp::Contract(b)) => a == b,
            (TensorOp::Unary(a), TensorOp::Unary(b)) => a == b,
            (TensorOp::ContractPair(a), TensorOp::ContractPair(b)) => a == b,
            (TensorOp::Scale(a), TensorOp::Scale(b)) => a.to_bits() == b.to_bits(),
            (a, b) => {
                std::mem::discriminant(a) == std::mem::discriminant(b)
                    && matches!(a, TensorOp::Add | TensorOp::Neg | TensorOp::Conj | TensorOp::Range)
            }
        }
    }
}

impl<T: Elem> Eq for TensorOp<T> {}

impl<T: Elem> Hash for TensorOp<T> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        std::mem::discriminant(self).hash(h);
        match self {
            TensorOp::Contract(s) => s.hash(h),
            TensorOp::Unary(s) => s.hash(h),
            TensorOp::ContractPair(p) => p.hash(h),
            TensorOp::Scale(s) => s.to_bits().hash(h),
            TensorOp::Add | TensorOp::Neg | TensorOp::Conj | TensorOp::Range => {}
        }
    }
}

impl<T: Elem> fmt::Debug for TensorOp<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TensorOp::Contract(s) => write!(f, "contract {s:?}"),
            TensorOp::Unary(s) => write!(f, "unary {s:?}"),
            TensorOp::ContractPair(p) => match p.z() {
                Some(z) => write!(f, "contract_triple {:?} & {:?} & {:?}", p.x(), p.y(), z),
                None => write!(f, "contract_pair {:?} & {:?}", p.x(), p.y()),
            },
            TensorOp::Add => f.write_str("add"),
            TensorOp::Neg => f.write_str("neg"),
            TensorOp::Conj => f.write_str("conj"),
            TensorOp::Scale(s) => write!(f, "scale {s:?}"),
            TensorOp::Range => f.write_str("range"),
        }
    }
}

/// Input keys: user variables and (for AD passes) tangent keys derived from them.
///
/// ```
/// use einsum::TensorKey;
/// use tidu::ADKey;
///
/// let a = TensorKey::var(0);
/// assert_ne!(a.tangent_of(1), a.tangent_of(2));
/// assert_eq!(a.tangent_of(1), a.tangent_of(1));
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum TensorKey {
    /// Operand `i` of a contraction, or any user variable.
    Var(u32),
    /// The tangent (or cotangent seed) of a key in a differentiation pass.
    Tangent(Arc<(TensorKey, u64)>),
}

impl TensorKey {
    /// The user variable `i`.
    pub fn var(i: u32) -> Self {
        TensorKey::Var(i)
    }
}

impl fmt::Debug for TensorKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TensorKey::Var(i) => write!(f, "t{i}"),
            TensorKey::Tangent(t) => write!(f, "d{}({:?})", t.1, t.0),
        }
    }
}

impl tidu::ADKey for TensorKey {
    fn tangent_of(&self, pass: tidu::DiffPassId) -> Self {
        TensorKey::Tangent(Arc::new((self.clone(), pass)))
    }
}

impl<T: Elem> GraphOperation for TensorOp<T> {
    type Operand = Tensor<T>;
    type Context = ();
    type InputKey = TensorKey;

    fn input_count(&self) -> usize {
        match self {
            TensorOp::Contract(_) | TensorOp::Add => 2,
            TensorOp::ContractPair(_) => 3,
            TensorOp::Unary(_) | TensorOp::Neg | TensorOp::Conj | TensorOp::Scale(_) | TensorOp::Range => 1,
        }
    }

    fn output_count(&self) -> usize {
        if let TensorOp::ContractPair(p) = self { p.output_count() } else { 1 }
    }

    /// Contractions: a quarter of their multiply-adds plus their output size (the GEMM
    /// path runs at several multiply-adds per nanosecond); unary einsums: their loop size
    /// (`contraction_cost` and `one_operand_cost` in this file, which `closed_sum.rs`
    /// counts by too).
    /// Element-wise operations do not know their shape and report 1.
    fn cost_hint(&self) -> u64 {
        let contract = |s: &ContractSpec| contraction_cost(s.multiply_adds(), elements(&s.out_shape()));
        match self {
            TensorOp::Contract(s) => contract(s),
            TensorOp::ContractPair(p) => {
                contract(p.x()).saturating_add(contract(p.y())).saturating_add(p.z().map_or(0, contract))
            }
            TensorOp::Unary(s) => one_operand_cost(s.multiply_adds()),
            _ => 1,
        }
    }
}

/// The estimated time of a contraction of `multiply_adds` that writes `written`
/// elements, in the units of [`GraphOperation::cost_hint`]: a quarter of its multiply-adds
/// (the GEMM path runs at several multiply-adds per nanosecond) plus its output size. The
/// one model of a contraction's time: [`TensorOp::cost_hint`] and the closed-sum
/// gradient's choice between two plans not yet built (`closed_sum.rs`) both count by it.
pub(crate) fn contraction_cost(multiply_adds: u64, written: u64) -> u64 {
    (multiply_adds / 4).saturating_add(written).max(1)
}

/// The estimated time of a one-operand einsum (a sum, a broadcast, a permutation) whose
/// loop has `multiply_adds` iterations, in the units of [`contraction_cost`]: one per
/// iteration, as a pass over memory.
pub(crate) fn one_operand_cost(multiply_adds: u64) -> u64 {
    multiply_adds.max(1)
}

/// Elements of a shape (saturating).
pub(crate) fn elements(shape: &[usize]) -> u64 {
    shape.iter().fold(1u64, |a, &d| a.saturating_mul(d as u64))
}

impl<T: Elem> EvaluableGraphOperation for TensorOp<T> {
    fn eval_into(&self, _: &mut (), x: &[&Tensor<T>], out: &mut Outputs<'_, Tensor<T>>) {
        if crate::stop::requested() {
            // The evaluation was stopped and will return an error (`stop.rs`): the rest of
            // the program runs on placeholders of the right shapes, doing no work.
            self.placeholders(x, out);
            return;
        }
        if let TensorOp::ContractPair(p) = self {
            for t in p.apply(x[0], x[1], x[2]) {
                out.push(t);
            }
            return;
        }
        out.push(self.apply(x));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elem::c64;

    #[test]
    // The specs' cached kernel plans are interior-mutable but not part of `Hash`/`Eq`.
    #[allow(clippy::mutable_key_type)]
    fn equality_and_hash_are_structural() {
        use std::collections::HashSet;
        let s = |x: f64| TensorOp::<c64>::Scale(c64::new(x, 1.0));
        let set: HashSet<TensorOp<c64>> = [s(1.0), s(1.0), s(2.0), TensorOp::Add, TensorOp::Add, TensorOp::Neg].into();
        assert_eq!(set.len(), 4);
        let m =
            |sizes: &[usize]| TensorOp::<f64>::contract(ContractSpec::new(&[0, 1], &[1, 2], &[0, 2], sizes).unwrap());
        assert_eq!(m(&[2, 3, 4]), m(&[2, 3, 4]));
        assert_ne!(m(&[2, 3, 4]), m(&[2, 3, 5]));
        assert_eq!(format!("{:?}", m(&[2, 3, 4])), "contract ab,bc->ac [2, 3, 4]");
    }

    #[test]
    fn cost_hints_follow_the_work() {
        let mm =
            |n: usize| TensorOp::<f64>::contract(ContractSpec::new(&[0, 1], &[1, 2], &[0, 2], &[n, n, n]).unwrap());
        assert_eq!(mm(64).cost_hint(), 64 * 64 * 64 / 4 + 64 * 64);
        assert!(mm(64).cost_hint() > 100 * mm(8).cost_hint());
        assert_eq!(TensorOp::<f64>::Add.cost_hint(), 1);
    }

    #[test]
    fn elementwise_ops() {
        let a = Tensor::new(vec![2], vec![c64::new(1.0, 2.0), c64::new(-1.0, 0.5)]).unwrap();
        let b = Tensor::new(vec![2], vec![c64::new(0.5, 0.0), c64::new(0.0, 1.0)]).unwrap();
        assert_eq!(TensorOp::Add.apply(&[&a, &b]).data()[1], c64::new(-1.0, 1.5));
        assert_eq!(TensorOp::Neg.apply(&[&a]).data()[0], c64::new(-1.0, -2.0));
        assert_eq!(TensorOp::Conj.apply(&[&a]).data()[0], c64::new(1.0, -2.0));
        assert_eq!(TensorOp::Scale(c64::new(0.0, 1.0)).apply(&[&a]).data()[0], c64::new(-2.0, 1.0));
        assert_eq!(TensorOp::<c64>::Add.input_count(), 2);
    }
}
