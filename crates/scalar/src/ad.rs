//! The reference operation set's AD rules: the [`tidu::Primitive`] and [`tidu::ADKey`]
//! implementations of [`ScalarOp`] and [`ScalarKey`] (defined in `ops.rs`).
//!
//! JVP rules (tangents `da`, `db`; `None` is a symbolic zero and emits nothing):
//! - `add(a, b)`: `da + db` (just `da` or `db` when the other is zero; no operation);
//! - `mul(a, b)`: `a·db + da·b`, each term `mul` with the primal factor fixed;
//! - `neg(a)`: `neg(da)`;
//! - `exp(a)`: `exp(a)·da`, reusing the primal output;
//! - `sin(a)`: `cos(a)·da`; `cos(a)`: `neg(sin(a))·da`; `sincos(a)`: both, reusing the
//!   primal outputs. The primal factors `cos(a)`, `neg(sin(a))` are emitted with an
//!   all-fixed `Linearized` mask (constants of the linear map).
//!
//! Transpose rules (the linear operations the JVPs emit): `add` passes the cotangent to
//! each active operand; `neg` negates it; `mul` with one fixed operand `c` multiplies the
//! cotangent by `c`. `mul` with two active operands is not linear and is reported as a
//! missing rule.

use computegraph::{GraphOperation, LocalValueId, OperationRole, ValueKey};
use tidu::{ADKey, ADRuleError, ADRuleResult, DiffPassId, Primitive, PrimitiveBuilder, PrimitiveValue, RuleKind, emit};

use crate::ops::{ScalarKey, ScalarOp};

impl ADKey for ScalarKey {
    fn tangent_of(&self, pass: DiffPassId) -> Self {
        self.tangent(pass)
    }
}

impl Primitive for ScalarOp {
    type ADContext = ();

    fn add() -> Self {
        ScalarOp::Add
    }

    // The transpose rules read only fixed operands.
    const TRANSPOSE_READS_ACTIVE_INPUTS: bool = false;

    tidu::rules_from_try_forms!();

    fn try_jvp_rule(
        &self,
        b: &mut impl PrimitiveBuilder<Self>,
        x: &[ValueKey<Self>],
        y: &[ValueKey<Self>],
        t: &[Option<LocalValueId>],
        ctx: &mut (),
    ) -> ADRuleResult<Vec<Option<LocalValueId>>> {
        let mut out = Vec::with_capacity(self.output_count());
        self.try_jvp_rule_into(b, x, y, t, ctx, &mut out)?;
        Ok(out)
    }

    fn try_jvp_rule_into(
        &self,
        b: &mut impl PrimitiveBuilder<Self>,
        x: &[ValueKey<Self>],
        y: &[ValueKey<Self>],
        t: &[Option<LocalValueId>],
        _: &mut (),
        out: &mut Vec<Option<LocalValueId>>,
    ) -> ADRuleResult<()> {
        match *self {
            ScalarOp::Add => out.push(match (t[0], t[1]) {
                (Some(da), Some(db)) => Some(emit::add(b, da, db)),
                (da, db) => da.or(db),
            }),
            ScalarOp::Mul => {
                // d(a·b) = a·db + da·b (the order of the worked example, `docs/SPEC.md` §4.4).
                let tb = t[1].map(|db| emit::scaled(b, ScalarOp::Mul, emit::external(&x[0]), db));
                let ta = t[0].map(|da| {
                    emit::linear(b, ScalarOp::Mul, &[PrimitiveValue::Local(da), emit::external(&x[1])], &[true, false])
                });
                out.push(match (tb, ta) {
                    (Some(p), Some(q)) => Some(emit::add(b, p, q)),
                    (p, q) => p.or(q),
                })
            }
            ScalarOp::Neg => {
                out.push(t[0].map(|da| emit::linear(b, ScalarOp::Neg, &[PrimitiveValue::Local(da)], &[true])))
            }
            ScalarOp::Exp => out.push(t[0].map(|da| emit::scaled(b, ScalarOp::Mul, emit::external(&y[0]), da))),
            ScalarOp::Sin => out.push(t[0].map(|da| {
                let c = emit::fixed(b, ScalarOp::Cos, &[emit::external(&x[0])]);
                emit::scaled(b, ScalarOp::Mul, PrimitiveValue::Local(c), da)
            })),
            ScalarOp::Cos => out.push(t[0].map(|da| {
                let s = emit::fixed(b, ScalarOp::Sin, &[emit::external(&x[0])]);
                let ns = emit::fixed(b, ScalarOp::Neg, &[PrimitiveValue::Local(s)]);
                emit::scaled(b, ScalarOp::Mul, PrimitiveValue::Local(ns), da)
            })),
            ScalarOp::SinCos => match t[0] {
                None => out.extend([None, None]),
                Some(da) => {
                    let ds = emit::scaled(b, ScalarOp::Mul, emit::external(&y[1]), da);
                    let ns = emit::fixed(b, ScalarOp::Neg, &[emit::external(&y[0])]);
                    let dc = emit::scaled(b, ScalarOp::Mul, PrimitiveValue::Local(ns), da);
                    out.extend([Some(ds), Some(dc)]);
                }
            },
            ScalarOp::Const(_) => out.push(None),
        }
        Ok(())
    }

    fn try_linear_transpose_rule(
        &self,
        b: &mut impl PrimitiveBuilder<Self>,
        ct: &[Option<LocalValueId>],
        inputs: &[PrimitiveValue<Self>],
        role: &OperationRole,
        ctx: &mut (),
    ) -> ADRuleResult<Vec<Option<LocalValueId>>> {
        let mut out = Vec::with_capacity(self.input_count());
        self.try_linear_transpose_rule_into(b, ct, inputs, role, ctx, &mut out)?;
        Ok(out)
    }

    fn try_linear_transpose_rule_into(
        &self,
        b: &mut impl PrimitiveBuilder<Self>,
        ct: &[Option<LocalValueId>],
        inputs: &[PrimitiveValue<Self>],
        role: &OperationRole,
        _: &mut (),
        out: &mut Vec<Option<LocalValueId>>,
    ) -> ADRuleResult<()> {
        let mask = role.active_mask().unwrap_or(&[]);
        let active = |i: usize| mask.get(i).copied().unwrap_or(false);
        let missing = |why: &str| Err(ADRuleError::missing(self, RuleKind::Transpose, why));
        let Some(c) = ct.first().copied().flatten() else {
            out.extend(std::iter::repeat_n(None, self.input_count()));
            return Ok(());
        };
        match *self {
            ScalarOp::Add => out.extend([active(0).then_some(c), active(1).then_some(c)]),
            ScalarOp::Neg => out.push(Some(emit::linear(b, ScalarOp::Neg, &[PrimitiveValue::Local(c)], &[true]))),
            ScalarOp::Mul => match (active(0), active(1)) {
                (true, false) => out.extend([Some(emit::scaled(b, ScalarOp::Mul, inputs[1].clone(), c)), None]),
                (false, true) => out.extend([None, Some(emit::scaled(b, ScalarOp::Mul, inputs[0].clone(), c))]),
                (true, true) => return missing("a product of two active operands is not linear"),
                (false, false) => out.extend([None, None]),
            },
            _ => return missing("it is not linear in its operands"),
        }
        Ok(())
    }
}
