//! The hard cases of the transforms: repeated outputs, duplicated operations, symbolic
//! zeros, pruning, CSE across levels, linearity and rule errors.

use std::collections::HashMap;
use std::sync::Arc;

use computegraph::{OperationRole, ValueRef, materialize_merge, resolve};
use scalar::{ScalarKey, ScalarOp};
use tidu::{
    ADRuleError, LinearizedGraph, fresh_pass_id, linear_transpose, linearize, linearize_with, try_linearize, vjp,
};

use crate::support::{builder, count_ops, eval, op};

#[test]
fn two_requested_outputs_that_are_the_same_value_add_their_seeds() {
    // y = x·x requested twice: Jᵀ(c1, c2) = 2x·(c1 + c2).
    let mut b = builder();
    let x = b.add_input(ScalarKey::var(0));
    let y = op(&mut b, ScalarOp::Mul, &[x, x]);
    let f = Arc::new(b.build());
    let t = vjp(&resolve(vec![f.clone()]), &[f.global_key(y), f.global_key(y)], &[ScalarKey::var(0)]).unwrap();
    assert_eq!(t.tangent_inputs().len(), 2);
    assert_ne!(t.tangent_inputs()[0].0, t.tangent_inputs()[1].0, "seed keys are distinct");
    let values = HashMap::from([
        (ScalarKey::var(0), 3.0),
        (t.tangent_inputs()[0].0.clone(), 1.0),
        (t.tangent_inputs()[1].0.clone(), 10.0),
    ]);
    assert_eq!(eval(&t, &values), vec![Some(2.0 * 3.0 * 11.0)]);
}

#[test]
fn identical_operations_emitted_twice_are_transposed_once() {
    // L(t) = neg(t) + neg(t), with the two negs as separate local copies of one key.
    let mut b = builder();
    let t0 = b.add_input(ScalarKey::var(9));
    let lin = OperationRole::Linearized { active_mask: vec![true] };
    let a = b.add_operation(ScalarOp::Neg, vec![ValueRef::Local(t0)], lin.clone())[0];
    let a2 = b.add_operation(ScalarOp::Neg, vec![ValueRef::Local(t0)], lin)[0];
    let out =
        b.add_operation(ScalarOp::Add, vec![ValueRef::Local(a), ValueRef::Local(a2)], OperationRole::all_active(2))[0];
    let g = Arc::new(b.build());
    assert_eq!(g.key_id(a), g.key_id(a2), "the two copies share a key");
    let l = LinearizedGraph::try_new(g, vec![(ScalarKey::var(9), t0)], vec![Some(out)]).unwrap();
    let t = linear_transpose(&l);
    assert_eq!(count_ops(t.graph(), ScalarOp::Neg), 1, "{}", t.graph());
    let values = HashMap::from([(t.tangent_inputs()[0].0.clone(), 1.0)]);
    assert_eq!(eval(&t, &values), vec![Some(-2.0)]);
}

#[test]
fn cotangent_flow_that_reaches_no_output_emits_nothing() {
    // L(t) = t + t, with a dangling neg(t) that no output uses.
    let mut b = builder();
    let t0 = b.add_input(ScalarKey::var(9));
    let _dangling = b.add_operation(
        ScalarOp::Neg,
        vec![ValueRef::Local(t0)],
        OperationRole::Linearized { active_mask: vec![true] },
    );
    let out =
        b.add_operation(ScalarOp::Add, vec![ValueRef::Local(t0), ValueRef::Local(t0)], OperationRole::all_active(2))[0];
    let l = LinearizedGraph::try_new(Arc::new(b.build()), vec![(ScalarKey::var(9), t0)], vec![Some(out)]).unwrap();
    let t = linear_transpose(&l);
    assert_eq!(count_ops(t.graph(), ScalarOp::Neg), 0, "{}", t.graph());
    assert_eq!(t.graph().operation_count(), 1, "one accumulation add: {}", t.graph());
}

#[test]
fn inactive_inputs_get_symbolic_zeros_and_no_work() {
    // f(x, y) = x·y + exp(y), linearized w.r.t. x only: one mul(dx, y), nothing for exp.
    let mut b = builder();
    let x = b.add_input(ScalarKey::var(0));
    let y = b.add_input(ScalarKey::var(1));
    let p = op(&mut b, ScalarOp::Mul, &[x, y]);
    let e = op(&mut b, ScalarOp::Exp, &[y]);
    let z = op(&mut b, ScalarOp::Add, &[p, e]);
    let w = op(&mut b, ScalarOp::Sin, &[y]);
    let f = Arc::new(b.build());
    let lin = linearize(&resolve(vec![f.clone()]), &[f.global_key(z), f.global_key(w)], &[ScalarKey::var(0)]);
    assert_eq!(lin.graph().operation_count(), 1, "{}", lin.graph());
    assert!(lin.tangent_outputs()[0].is_some());
    assert_eq!(lin.tangent_outputs()[1], None, "sin(y) does not depend on x");
    let values =
        HashMap::from([(ScalarKey::var(0), 2.0), (ScalarKey::var(1), 5.0), (lin.tangent_inputs()[0].0.clone(), 1.0)]);
    assert_eq!(eval(&lin, &values), vec![Some(5.0), None]);
}

#[test]
fn relinearizing_with_the_same_pass_adds_no_duplicate_operations() {
    let (f, y) = crate::support::worked_example();
    let view = resolve(vec![f.clone()]);
    let pass = fresh_pass_id();
    let wrt = [ScalarKey::var(0)];
    let l1 = linearize_with(&view, &[f.global_key(y)], &wrt, &mut (), pass);
    let l2 = linearize_with(&view, &[f.global_key(y)], &wrt, &mut (), pass);
    let k1 = l1.tangent_output_keys()[0].clone().unwrap();
    let k2 = l2.tangent_output_keys()[0].clone().unwrap();
    assert_eq!(k1, k2, "structural keys make the two linearizations the same value");
    let both = materialize_merge(&resolve(vec![l1.graph().clone(), l2.graph().clone()]), &[k1.clone(), k2]);
    let one = materialize_merge(&resolve(vec![l1.graph().clone()]), &[k1]);
    assert_eq!(both.operation_count(), one.operation_count());
    // Transposing the same linear graph twice gives fresh seeds: the programs differ in
    // their seed inputs but share every primal operation.
    let t1 = linear_transpose(&l1);
    let t2 = linear_transpose(&l1);
    assert_ne!(t1.tangent_inputs()[0].0, t2.tangent_inputs()[0].0);
}

/// An operation set that breaks the contract in chosen ways, for the error paths.
mod bad {
    use computegraph::{GraphOperation, LocalValueId, OperationRole, ValueKey};
    use scalar::ScalarKey;
    use tidu::{ADRuleError, ADRuleResult, Primitive, PrimitiveBuilder, PrimitiveValue, RuleKind};

    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum Bad {
        Add,
        /// JVP emits a Primary operation.
        PrimaryInJvp,
        /// JVP marks the tangent fixed.
        WrongMask,
        /// No JVP rule at all.
        NoRule,
        /// JVP returns two tangents for one output.
        TooMany,
        /// JVP is the identity; the transpose rule emits the operand it transposes for.
        Leaky,
    }

    impl GraphOperation for Bad {
        type Operand = f64;
        type Context = ();
        type InputKey = ScalarKey;
        fn input_count(&self) -> usize {
            if *self == Bad::Add { 2 } else { 1 }
        }
        fn output_count(&self) -> usize {
            1
        }
    }

    impl Primitive for Bad {
        type ADContext = ();
        const TRANSPOSE_READS_ACTIVE_INPUTS: bool = false;
        fn add() -> Self {
            Bad::Add
        }
        fn jvp_rule(
            &self,
            b: &mut impl PrimitiveBuilder<Self>,
            x: &[ValueKey<Self>],
            y: &[ValueKey<Self>],
            t: &[Option<LocalValueId>],
            c: &mut (),
        ) -> Vec<Option<LocalValueId>> {
            self.try_jvp_rule(b, x, y, t, c).unwrap()
        }
        fn transpose_rule(
            &self,
            b: &mut impl PrimitiveBuilder<Self>,
            ct: &[Option<LocalValueId>],
            inputs: &[PrimitiveValue<Self>],
            role: &OperationRole,
            c: &mut (),
        ) -> Vec<Option<LocalValueId>> {
            self.try_linear_transpose_rule(b, ct, inputs, role, c).unwrap()
        }
        fn try_jvp_rule(
            &self,
            b: &mut impl PrimitiveBuilder<Self>,
            x: &[ValueKey<Self>],
            _: &[ValueKey<Self>],
            t: &[Option<LocalValueId>],
            _: &mut (),
        ) -> ADRuleResult<Vec<Option<LocalValueId>>> {
            let dt = t[0].unwrap();
            Ok(match self {
                Bad::Add => vec![Some(dt)],
                Bad::PrimaryInJvp => b
                    .add_primitive(
                        Bad::Add,
                        vec![PrimitiveValue::Local(dt), PrimitiveValue::External(x[0].clone())],
                        OperationRole::Primary,
                    )
                    .into_iter()
                    .map(Some)
                    .collect(),
                Bad::WrongMask => b
                    .add_primitive(
                        Bad::WrongMask,
                        vec![PrimitiveValue::Local(dt)],
                        OperationRole::Linearized { active_mask: vec![false] },
                    )
                    .into_iter()
                    .map(Some)
                    .collect(),
                Bad::NoRule => return Err(ADRuleError::missing(self, RuleKind::Jvp, "not differentiable")),
                Bad::TooMany => vec![Some(dt), Some(dt)],
                Bad::Leaky => b
                    .add_primitive(Bad::Leaky, vec![PrimitiveValue::Local(dt)], OperationRole::all_active(1))
                    .into_iter()
                    .map(Some)
                    .collect(),
            })
        }
        fn try_linear_transpose_rule(
            &self,
            b: &mut impl PrimitiveBuilder<Self>,
            _: &[Option<LocalValueId>],
            inputs: &[PrimitiveValue<Self>],
            _: &OperationRole,
            _: &mut (),
        ) -> ADRuleResult<Vec<Option<LocalValueId>>> {
            Ok(match self {
                // References the unknown instead of transposing.
                Bad::Leaky => b
                    .try_add_primitive(
                        Bad::Leaky,
                        vec![inputs[0].clone()],
                        OperationRole::Linearized { active_mask: vec![false] },
                    )?
                    .into_iter()
                    .map(Some)
                    .collect(),
                _ => vec![None; self.input_count()],
            })
        }
    }
}

fn bad_linearize(which: bad::Bad) -> Result<LinearizedGraph<bad::Bad>, ADRuleError> {
    let mut b = computegraph::GraphBuilder::with_interner(computegraph::KeyInterner::new());
    let x = b.add_input(ScalarKey::var(0));
    let y = b.add_operation(which, vec![ValueRef::Local(x)], OperationRole::Primary)[0];
    let g = Arc::new(b.build());
    try_linearize(&resolve(vec![g.clone()]), &[g.global_key(y)], &[ScalarKey::var(0)])
}

#[test]
fn a_rule_that_emits_a_primary_operation_is_a_linearity_error() {
    let e = bad_linearize(bad::Bad::PrimaryInJvp).unwrap_err();
    assert!(matches!(e, ADRuleError::NonLinear { .. }), "{e:?}");
    assert!(e.to_string().contains("Add") && e.to_string().contains("Primary"), "{e}");
}

#[test]
fn a_rule_that_marks_a_tangent_fixed_is_a_linearity_error() {
    let e = bad_linearize(bad::Bad::WrongMask).unwrap_err();
    assert!(matches!(e, ADRuleError::NonLinear { .. }), "{e:?}");
    assert!(e.to_string().contains("WrongMask") && e.to_string().contains("fixed"), "{e}");
}

#[test]
fn a_missing_rule_names_the_operation_and_the_rule() {
    let e = bad_linearize(bad::Bad::NoRule).unwrap_err();
    assert!(matches!(e, ADRuleError::MissingRule { .. }), "{e:?}");
    assert_eq!(e.to_string(), "operation `NoRule` has no JVP rule: not differentiable");
}

#[test]
fn a_rule_returning_the_wrong_number_of_tangents_is_reported() {
    let e = bad_linearize(bad::Bad::TooMany).unwrap_err();
    assert!(matches!(e, ADRuleError::RuleContract { .. }), "{e:?}");
    assert!(e.to_string().contains("TooMany") && e.to_string().contains("2 tangents"), "{e}");
}

#[test]
fn a_transpose_rule_that_emits_the_operand_it_transposes_for_is_an_error() {
    // `Bad` does not read active operands, so the rule gets `unknown_operand()` there.
    let lin = bad_linearize(bad::Bad::Leaky).unwrap();
    let e = tidu::try_linear_transpose(&lin).unwrap_err();
    assert!(matches!(e, ADRuleError::Graph(computegraph::GraphError::UnknownLocalValue { .. })), "{e:?}");
}

#[test]
fn transposing_a_product_of_two_tangents_is_an_error_not_a_wrong_answer() {
    // A hand-made "linear" graph mul(t, t) marked all-active: not linear.
    let mut b = builder();
    let t0 = b.add_input(ScalarKey::var(9));
    let sq =
        b.add_operation(ScalarOp::Mul, vec![ValueRef::Local(t0), ValueRef::Local(t0)], OperationRole::all_active(2))[0];
    let l = LinearizedGraph::try_new(Arc::new(b.build()), vec![(ScalarKey::var(9), t0)], vec![Some(sq)]).unwrap();
    let e = tidu::try_linear_transpose(&l).unwrap_err();
    assert!(matches!(e, ADRuleError::MissingRule { .. }), "{e:?}");
    assert!(e.to_string().contains("mul") && e.to_string().contains("transpose"), "{e}");
}

#[test]
fn unresolved_outputs_are_errors() {
    let (f, y) = crate::support::worked_example();
    let other = resolve(vec![Arc::new(builder().build())]);
    let e = try_linearize(&other, &[f.global_key(y)], &[ScalarKey::var(0)]).unwrap_err();
    assert!(matches!(e, ADRuleError::Graph(_)), "{e:?}");
}
