//! Emitters for AD rules: the few shapes that the JVP and transpose rules of every
//! operation set write, so that sets call them instead of each writing its own.
//!
//! - [`linear`]: one operation in `Linearized { active_mask }`; its first output;
//! - [`scaled`]: `op(fixed, t)`, linear in `t` alone (a product by a fixed factor);
//! - [`fixed`]: a primal computation a rule needs (`cos x` in `sin`'s JVP), in the
//!   all-fixed `Linearized` role (the specification's style, `Primary`, works too; see
//!   `docs/SPEC.md` §3.2);
//! - [`add`] and [`accumulate`]: the sum of two tangents or cotangents by
//!   [`Primitive::add`], where `accumulate` treats `None` as a symbolic zero;
//! - [`external`]: a fixed operand read by global key.
//!
//! Roles of up to two operands come from a table made once, so emitting through these
//! allocates no role; longer masks build theirs.
//!
//! ```
//! use computegraph::{GraphBuilder, KeyInterner, ValueKey, ValueRef::Local};
//! use scalar::{ScalarKey, ScalarOp};
//! use tidu::emit;
//!
//! // The JVP of sin at x along t: cos(x)·t.
//! let mut b = GraphBuilder::<ScalarOp>::with_interner(KeyInterner::new());
//! let t = b.add_input(ScalarKey::var(1));
//! let x = emit::external(&ValueKey::Input(ScalarKey::var(0)));
//! let cos_x = emit::fixed(&mut b, ScalarOp::Cos, &[x]);
//! let dy = emit::scaled(&mut b, ScalarOp::Mul, Local(cos_x), t);
//! assert_eq!(emit::accumulate(&mut b, Some(dy), None), Some(dy)); // a symbolic zero adds nothing
//! assert_eq!(b.build().operation_count(), 2);
//! ```

use std::sync::LazyLock;

use computegraph::{LocalValueId, OperationRole, ValueKey};

use crate::error::ADRuleResult;
use crate::primitive::{Primitive, PrimitiveBuilder, PrimitiveValue};

/// The `Linearized` roles of one and two operands, indexed by [`small_role`]'s rule.
static SMALL_ROLES: LazyLock<[OperationRole; 6]> = LazyLock::new(|| {
    let r = |m: &[bool]| OperationRole::Linearized { active_mask: m.to_vec() };
    [r(&[false]), r(&[true]), r(&[false, false]), r(&[true, false]), r(&[false, true]), r(&[true, true])]
});

/// The index in [`SMALL_ROLES`] of `[true, true]`, the role of every sum.
const BOTH_ACTIVE: usize = 5;

/// The cached role of a mask of one or two flags.
fn small_role(mask: &[bool]) -> Option<&'static OperationRole> {
    let bit = |i: usize| mask[i] as usize;
    match mask.len() {
        1 => Some(&SMALL_ROLES[bit(0)]),
        2 => Some(&SMALL_ROLES[2 + bit(0) + 2 * bit(1)]),
        _ => None,
    }
}

/// Emits `op(operands)` in `Linearized { active_mask: mask }` and returns its first output.
///
/// # Panics
/// If the builder rejects the operation (a wrong arity or mask length: a bug in the rule).
pub fn linear<Op: Primitive>(
    b: &mut impl PrimitiveBuilder<Op>,
    op: Op,
    operands: &[PrimitiveValue<Op>],
    mask: &[bool],
) -> LocalValueId {
    match small_role(mask) {
        Some(role) => b.add_primitive_from(op, operands, role),
        None => b.add_primitive_from(op, operands, &OperationRole::Linearized { active_mask: mask.to_vec() }),
    }
}

/// `op(fixed, t)`, linear in `t`: a product (or any bilinear operation) by a fixed factor.
pub fn scaled<Op: Primitive>(
    b: &mut impl PrimitiveBuilder<Op>,
    op: Op,
    fixed: PrimitiveValue<Op>,
    t: LocalValueId,
) -> LocalValueId {
    linear(b, op, &[fixed, PrimitiveValue::Local(t)], &[false, true])
}

/// A primal computation `op(operands)` a rule needs, every operand fixed.
pub fn fixed<Op: Primitive>(
    b: &mut impl PrimitiveBuilder<Op>,
    op: Op,
    operands: &[PrimitiveValue<Op>],
) -> LocalValueId {
    match operands.len() {
        1 => linear(b, op, operands, &[false]),
        2 => linear(b, op, operands, &[false, false]),
        n => linear(b, op, operands, &vec![false; n]),
    }
}

/// `p + q` by [`Primitive::add`], both linear.
pub fn add<Op: Primitive>(b: &mut impl PrimitiveBuilder<Op>, p: LocalValueId, q: LocalValueId) -> LocalValueId {
    linear(b, Op::add(), &[PrimitiveValue::Local(p), PrimitiveValue::Local(q)], &[true, true])
}

/// [`add`] reporting the builder's refusal as an error instead of panicking: the
/// transpose's accumulation of cotangents, whose failures are the caller's errors.
pub(crate) fn try_add<Op: Primitive>(
    b: &mut impl PrimitiveBuilder<Op>,
    p: LocalValueId,
    q: LocalValueId,
) -> ADRuleResult<LocalValueId> {
    b.try_add_primitive_from(
        Op::add(),
        &[PrimitiveValue::Local(p), PrimitiveValue::Local(q)],
        &SMALL_ROLES[BOTH_ACTIVE],
    )
}

/// `p + q` where either may be a symbolic zero (`None`): emits an addition only when both
/// are present.
pub fn accumulate<Op: Primitive>(
    b: &mut impl PrimitiveBuilder<Op>,
    p: Option<LocalValueId>,
    q: Option<LocalValueId>,
) -> Option<LocalValueId> {
    match (p, q) {
        (Some(p), Some(q)) => Some(add(b, p, q)),
        (p, q) => p.or(q),
    }
}

/// A fixed operand read by its global key (a primal input or output).
pub fn external<Op: Primitive>(key: &ValueKey<Op>) -> PrimitiveValue<Op> {
    PrimitiveValue::External(key.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_roles_match_their_masks() {
        for mask in [&[false][..], &[true], &[false, false], &[true, false], &[false, true], &[true, true]] {
            let role = small_role(mask).expect("cached");
            assert_eq!(role.active_mask(), Some(mask), "{mask:?}");
        }
        assert!(small_role(&[true, true, false]).is_none());
        // `try_add` uses the both-active role by its index.
        assert_eq!(SMALL_ROLES[BOTH_ACTIVE].active_mask(), Some(&[true, true][..]));
    }
}
