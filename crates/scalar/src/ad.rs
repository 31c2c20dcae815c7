//! AD rules for the scalar set ([`tidu::Primitive`]).
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

use std::sync::LazyLock;

use computegraph::{GraphOperation, LocalValueId, OperationRole, ValueKey};
use tidu::{ADKey, ADRuleError, ADRuleResult, DiffPassId, Primitive, PrimitiveBuilder, PrimitiveValue, RuleKind};

use crate::{ScalarKey, ScalarOp};

impl ADKey for ScalarKey {
    fn tangent_of(&self, pass: DiffPassId) -> Self {
        self.tangent(pass)
    }
}

/// The `Linearized` roles the rules emit, made once.
struct Roles {
    a: OperationRole,
    f: OperationRole,
    aa: OperationRole,
    fa: OperationRole,
    af: OperationRole,
}

fn roles() -> &'static Roles {
    static ROLES: LazyLock<Roles> = LazyLock::new(|| {
        let r = |m: &[bool]| OperationRole::Linearized { active_mask: m.to_vec() };
        Roles { a: r(&[true]), f: r(&[false]), aa: r(&[true, true]), fa: r(&[false, true]), af: r(&[true, false]) }
    });
    &ROLES
}

/// `c · t` with `c` fixed.
fn scale(b: &mut impl PrimitiveBuilder<ScalarOp>, c: PrimitiveValue<ScalarOp>, t: LocalValueId) -> LocalValueId {
    b.add_primitive_from(ScalarOp::Mul, &[c, PrimitiveValue::Local(t)], &roles().fa)
}

/// `p + q`, both linear.
fn sum(b: &mut impl PrimitiveBuilder<ScalarOp>, p: LocalValueId, q: LocalValueId) -> LocalValueId {
    b.add_primitive_from(ScalarOp::Add, &[PrimitiveValue::Local(p), PrimitiveValue::Local(q)], &roles().aa)
}

fn ext(k: &ValueKey<ScalarOp>) -> PrimitiveValue<ScalarOp> {
    PrimitiveValue::External(k.clone())
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
        let r = roles();
        match *self {
            ScalarOp::Add => out.push(match (t[0], t[1]) {
                (Some(da), Some(db)) => Some(sum(b, da, db)),
                (da, db) => da.or(db),
            }),
            ScalarOp::Mul => {
                // d(a·b) = a·db + da·b (the order of the worked example, `docs/SPEC.md` §4.4).
                let tb = t[1].map(|db| scale(b, ext(&x[0]), db));
                let ta =
                    t[0].map(|da| b.add_primitive_from(ScalarOp::Mul, &[PrimitiveValue::Local(da), ext(&x[1])], &r.af));
                out.push(match (tb, ta) {
                    (Some(p), Some(q)) => Some(sum(b, p, q)),
                    (p, q) => p.or(q),
                })
            }
            ScalarOp::Neg => {
                out.push(t[0].map(|da| b.add_primitive_from(ScalarOp::Neg, &[PrimitiveValue::Local(da)], &r.a)))
            }
            ScalarOp::Exp => out.push(t[0].map(|da| scale(b, ext(&y[0]), da))),
            ScalarOp::Sin => out.push(t[0].map(|da| {
                let c = b.add_primitive_from(ScalarOp::Cos, &[ext(&x[0])], &r.f);
                scale(b, PrimitiveValue::Local(c), da)
            })),
            ScalarOp::Cos => out.push(t[0].map(|da| {
                let s = b.add_primitive_from(ScalarOp::Sin, &[ext(&x[0])], &r.f);
                let ns = b.add_primitive_from(ScalarOp::Neg, &[PrimitiveValue::Local(s)], &r.f);
                scale(b, PrimitiveValue::Local(ns), da)
            })),
            ScalarOp::SinCos => match t[0] {
                None => out.extend([None, None]),
                Some(da) => {
                    let ds = scale(b, ext(&y[1]), da);
                    let ns = b.add_primitive_from(ScalarOp::Neg, &[ext(&y[0])], &r.f);
                    let dc = scale(b, PrimitiveValue::Local(ns), da);
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
            ScalarOp::Neg => {
                out.push(Some(b.add_primitive_from(ScalarOp::Neg, &[PrimitiveValue::Local(c)], &roles().a)))
            }
            ScalarOp::Mul => match (active(0), active(1)) {
                (true, false) => out.extend([Some(scale(b, inputs[1].clone(), c)), None]),
                (false, true) => out.extend([None, Some(scale(b, inputs[0].clone(), c))]),
                (true, true) => return missing("a product of two active operands is not linear"),
                (false, false) => out.extend([None, None]),
            },
            _ => return missing("it is not linear in its operands"),
        }
        Ok(())
    }
}
