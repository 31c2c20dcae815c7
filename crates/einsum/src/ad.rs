//! AD rules for [`TensorOp`] ([`tidu::Primitive`]).
//!
//! JVP rules (tangents `da`, `db`; `None` is a symbolic zero and emits nothing):
//! - `contract(a, b)`: `contract(da, b) + contract(a, db)` with the same spec, the primal
//!   operand fixed in each term (a contraction is bilinear);
//! - `unary`, `neg`, `conj`, `scale(s)`: the same operation on the tangent (they are linear);
//! - `add`: `da + db`.
//!
//! Transpose rules, adjoints for the real inner product `⟨x, y⟩ = Σ Re(conj(x)·y)` (the
//! convention of `scalar::complex`: `⟨c, L t⟩ = ⟨Lᵀ c, t⟩`):
//!
//! | linear map                     | transpose                                      |
//! |--------------------------------|------------------------------------------------|
//! | `t ↦ contract[a,b→o](t, b)`    | `c ↦ contract[o,b*→a](c, b)`: `Σ c·conj(b)`    |
//! | `t ↦ contract[a,b→o](a, t)`    | `c ↦ contract[a*,o→b](a, c)`: `Σ conj(a)·c`    |
//! | `t ↦ contract[a*,b→o](t, b)`   | `c ↦ contract[o*,b→a](c, b)`: `Σ conj(c)·b`    |
//! | `t ↦ unary[a→o](t)`            | `c ↦ unary[o→a](c)` (sum ↔ broadcast, diagonal ↔ embedding, permutation ↔ inverse) |
//! | `t ↦ s·t`                      | `c ↦ conj(s)·c`                                |
//! | `t ↦ conj(t)`, `t ↦ -t`        | `c ↦ conj(c)`, `c ↦ -c`                        |
//! | `(s, t) ↦ s + t`               | `c ↦ (c, c)`                                   |
//!
//! So the transpose of a contraction is a contraction (the general form of
//! [`ContractSpec`](crate::kernel::ContractSpec), with its per-operand conjugation flags,
//! is closed under it; the GEMM applies the conjugation, no `conj` copy is made), and the
//! set is closed under both transforms. On reals the flags are dropped.
//! A contraction with two active operands is not linear: its transpose is an error.
//! `ContractPair` (`pair.rs`) and `Range` (`ranged.rs`) are made after the transforms, in
//! compiled gradient programs only: their rules are errors.

use std::sync::Arc;

use computegraph::{GraphOperation, LocalValueId, OperationRole, ValueKey};
use tidu::{ADRuleError, ADRuleResult, Primitive, PrimitiveBuilder, PrimitiveValue, RuleKind, emit};

use crate::elem::Elem;
use crate::kernel::ContractSpec;
use crate::op::TensorOp;

type Value<T> = PrimitiveValue<TensorOp<T>>;

/// A transposed spec: with its conjugation flags on complex values, without on reals
/// (where they would change nothing but the operation's identity).
fn adjoint<T: Elem>(spec: ContractSpec) -> TensorOp<T> {
    TensorOp::contract(if T::IS_COMPLEX { spec } else { spec.with_conj([false; 2]) })
}

/// The error of a rule asked of a fused pair or a range, which no graph given to the
/// transforms holds.
fn fused<T: Elem>(op: &TensorOp<T>, rule: RuleKind) -> ADRuleError {
    ADRuleError::missing(op, rule, "fused pairs and ranges are made after the transforms, in compiled programs only")
}

impl<T: Elem> Primitive for TensorOp<T> {
    type ADContext = ();

    fn add() -> Self {
        TensorOp::Add
    }

    tidu::rules_from_try_forms!();

    fn try_jvp_rule(
        &self,
        b: &mut impl PrimitiveBuilder<Self>,
        x: &[ValueKey<Self>],
        _y: &[ValueKey<Self>],
        t: &[Option<LocalValueId>],
        _: &mut (),
    ) -> ADRuleResult<Vec<Option<LocalValueId>>> {
        let same = |b: &mut _, da: Option<LocalValueId>| {
            da.map(|da| emit::linear(b, self.clone(), &[Value::Local(da)], &[true]))
        };
        Ok(vec![match self {
            TensorOp::Contract(_) => {
                let ta = t[0].map(|da| {
                    emit::linear(b, self.clone(), &[Value::Local(da), emit::external(&x[1])], &[true, false])
                });
                let tb = t[1].map(|db| {
                    emit::linear(b, self.clone(), &[emit::external(&x[0]), Value::Local(db)], &[false, true])
                });
                emit::accumulate(b, ta, tb)
            }
            TensorOp::Add => emit::accumulate(b, t[0], t[1]),
            TensorOp::Unary(_) | TensorOp::Neg | TensorOp::Conj | TensorOp::Scale(_) => same(b, t[0]),
            TensorOp::ContractPair(_) | TensorOp::Range => return Err(fused(self, RuleKind::Jvp)),
        }])
    }

    fn try_linear_transpose_rule(
        &self,
        b: &mut impl PrimitiveBuilder<Self>,
        ct: &[Option<LocalValueId>],
        inputs: &[PrimitiveValue<Self>],
        role: &OperationRole,
        _: &mut (),
    ) -> ADRuleResult<Vec<Option<LocalValueId>>> {
        let mask = role.active_mask().unwrap_or(&[]);
        let active = |i: usize| mask.get(i).copied().unwrap_or(false);
        let Some(cid) = ct.first().copied().flatten() else {
            return Ok(vec![None; self.input_count()]);
        };
        let c = Value::Local(cid);
        let one = |b: &mut _, op: TensorOp<T>| vec![Some(emit::linear(b, op, std::slice::from_ref(&c), &[true]))];
        Ok(match self {
            TensorOp::Contract(s) => match (active(0), active(1)) {
                (true, false) => {
                    let op = adjoint(s.transpose_a());
                    vec![Some(emit::linear(b, op, &[c, inputs[1].clone()], &[true, false])), None]
                }
                (false, true) => {
                    let op = adjoint(s.transpose_b());
                    vec![None, Some(emit::linear(b, op, &[inputs[0].clone(), c], &[false, true]))]
                }
                (true, true) => {
                    return Err(ADRuleError::missing(
                        self,
                        RuleKind::Transpose,
                        "a contraction of two active operands is not linear",
                    ));
                }
                (false, false) => vec![None, None],
            },
            TensorOp::Add => vec![active(0).then_some(cid), active(1).then_some(cid)],
            TensorOp::Unary(s) => one(b, TensorOp::Unary(Arc::new(s.transpose()))),
            TensorOp::Neg => one(b, TensorOp::Neg),
            TensorOp::Conj => one(b, TensorOp::Conj),
            TensorOp::Scale(s) => one(b, TensorOp::Scale(s.conj())),
            TensorOp::ContractPair(_) | TensorOp::Range => return Err(fused(self, RuleKind::Transpose)),
        })
    }
}
