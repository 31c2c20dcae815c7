//! The hard cases of the transforms: repeated outputs, duplicated operations, symbolic
//! zeros, pruning, CSE across levels, linearity and rule errors.

use std::collections::HashMap;
use std::sync::Arc;

use computegraph::{LocalValueId, OperationRole, ValueRef, materialize_merge, resolve};
use scalar::{ScalarKey, ScalarOp};
use tidu::{
    ADRuleError, LinearizedGraph, fresh_pass_id, linear_transpose, linearize, linearize_with, try_linearize, vjp,
};

use proptest::prelude::*;

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

/// One operation of a random linear map over tangents `t0..tk`, by position among the
/// values made so far.
#[derive(Clone, Debug)]
enum LinearStep {
    Add(usize, usize),
    Neg(usize),
    /// Times a primal constant (a `Primary` operation of `L`).
    Scale(usize, i8),
    /// Emits an earlier step again: a second local copy of its key.
    Again(usize),
}

fn linear_step() -> impl Strategy<Value = LinearStep> {
    prop_oneof![
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| LinearStep::Add(a, b)),
        any::<usize>().prop_map(LinearStep::Neg),
        (any::<usize>(), -3i8..=3).prop_map(|(a, c)| LinearStep::Scale(a, c)),
        any::<usize>().prop_map(LinearStep::Again),
    ]
}

impl LinearStep {
    /// The step with its positions taken modulo `n`, the values made so far.
    fn within(self, n: usize) -> Self {
        match self {
            LinearStep::Add(a, b) => LinearStep::Add(a % n, b % n),
            LinearStep::Neg(a) => LinearStep::Neg(a % n),
            LinearStep::Scale(a, c) => LinearStep::Scale(a % n, c),
            LinearStep::Again(i) => LinearStep::Again(i),
        }
    }
}

/// Builds `L` from `steps` (on `interner`, which may know some of its keys already) and
/// its Jacobian: per value, its coefficient on each tangent input.
fn linear_map(
    interner: &Arc<computegraph::KeyInterner<ScalarOp>>,
    tangents: usize,
    steps: &[LinearStep],
    outputs: &[usize],
) -> (LinearizedGraph<ScalarOp>, Vec<Vec<f64>>) {
    let mut b = computegraph::GraphBuilder::with_interner(Arc::clone(interner));
    let mut values = Vec::new();
    let mut rows: Vec<Vec<f64>> = Vec::new();
    let mut tangent_inputs = Vec::new();
    for i in 0..tangents {
        let key = ScalarKey::var(100 + i as u32);
        let v = b.add_input(key.clone());
        tangent_inputs.push((key, v));
        values.push(v);
        rows.push((0..tangents).map(|j| f64::from(u8::from(i == j))).collect());
    }
    let active = |n| OperationRole::Linearized { active_mask: vec![true; n] };
    // The steps as emitted: an `Again` resolved to the step it repeats, positions in range.
    let mut emitted: Vec<LinearStep> = Vec::new();
    for step in steps {
        let n = values.len();
        let step = match step {
            LinearStep::Again(i) if !emitted.is_empty() => emitted[i % emitted.len()].clone(),
            LinearStep::Again(i) => LinearStep::Neg(*i),
            other => other.clone(),
        }
        .within(n);
        let (v, row) = match step {
            LinearStep::Add(a, c) => {
                let v = b.add_operation(
                    ScalarOp::Add,
                    vec![ValueRef::Local(values[a]), ValueRef::Local(values[c])],
                    active(2),
                )[0];
                (v, rows[a].iter().zip(&rows[c]).map(|(x, y)| x + y).collect())
            }
            LinearStep::Neg(a) => {
                let v = b.add_operation(ScalarOp::Neg, vec![ValueRef::Local(values[a])], active(1))[0];
                (v, rows[a].iter().map(|x| -x).collect())
            }
            LinearStep::Scale(a, c) => {
                let k = b.add_operation(ScalarOp::constant(f64::from(c)), vec![], OperationRole::Primary)[0];
                let role = OperationRole::Linearized { active_mask: vec![true, false] };
                let v = b.add_operation(ScalarOp::Mul, vec![ValueRef::Local(values[a]), ValueRef::Local(k)], role)[0];
                (v, rows[a].iter().map(|x| x * f64::from(c)).collect())
            }
            LinearStep::Again(_) => unreachable!("resolved above"),
        };
        // Positions are those of the steps' own values (a constant is not one).
        emitted.push(step);
        values.push(v);
        rows.push(row);
    }
    let outs: Vec<usize> = outputs.iter().map(|o| o % values.len()).collect();
    let g = Arc::new(b.build());
    let lin = LinearizedGraph::try_new(g, tangent_inputs, outs.iter().map(|&o| Some(values[o])).collect()).unwrap();
    (lin, outs.iter().map(|&o| rows[o].clone()).collect())
}

/// A graph of the constants `Scale` uses, in reverse order: a linear map built after it
/// on the same interner meets their keys out of local order.
fn constants_in_reverse(interner: &Arc<computegraph::KeyInterner<ScalarOp>>) -> computegraph::Graph<ScalarOp> {
    let mut b = computegraph::GraphBuilder::with_interner(Arc::clone(interner));
    for c in (-3i8..=3).rev() {
        b.add_operation(ScalarOp::constant(f64::from(c)), vec![], OperationRole::Primary);
    }
    b.build()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The transpose of a random linear map is its Jacobian's transpose, whether `L` is
    /// walked as built (distinct keys, in local order or not) or through its
    /// materialization (copies of an operation, from `Again` steps).
    #[test]
    fn transpose_is_the_jacobian_transpose_with_or_without_copies(
        tangents in 1usize..4,
        steps in proptest::collection::vec(linear_step(), 1..24),
        outputs in proptest::collection::vec(any::<usize>(), 1..4),
        constants_first in any::<bool>(),
    ) {
        // Constants interned by an earlier graph, in reverse order: `L` meets their keys
        // out of local order.
        let interner = computegraph::KeyInterner::new();
        let _constants = constants_first.then(|| constants_in_reverse(&interner));
        let (lin, jacobian) = linear_map(&interner, tangents, &steps, &outputs);
        let t = linear_transpose(&lin);
        // Row j of the Jacobian is the transpose applied to seed e_j.
        for (j, row) in jacobian.iter().enumerate() {
            let values: HashMap<ScalarKey, f64> = t.tangent_inputs().iter().enumerate()
                .map(|(i, (k, _))| (k.clone(), f64::from(u8::from(i == j)))).collect();
            let got = eval(&t, &values);
            prop_assert_eq!(got.len(), tangents);
            for (i, (g, want)) in got.iter().zip(row).enumerate() {
                let g = g.unwrap_or(0.0);
                prop_assert!((g - want).abs() <= 1e-9 * want.abs().max(1.0), "d out{} / d t{}: {} != {}\n{}", j, i, g, want, lin.graph());
            }
        }
    }
}

/// The generator above makes the three kinds of linear map: distinct keys in local order,
/// distinct keys out of order, and copies (which take the materialized path).
#[test]
fn random_linear_maps_have_copies_and_distinct_keys() {
    let interner = computegraph::KeyInterner::new();
    let _constants = constants_in_reverse(&interner);
    let plain = [LinearStep::Neg(0), LinearStep::Add(0, 1)];
    let scaled = [LinearStep::Scale(0, 2), LinearStep::Scale(1, -1)];
    let copied = [LinearStep::Neg(0), LinearStep::Again(0), LinearStep::Add(1, 2)];
    let (a, ja) = linear_map(&interner, 1, &plain, &[2]);
    let (s, js) = linear_map(&interner, 1, &scaled, &[2]);
    let (b, jb) = linear_map(&interner, 1, &copied, &[3]);
    let in_order = |l: &LinearizedGraph<ScalarOp>| {
        let g = l.graph();
        (1..g.value_count()).all(|v| g.key_id(LocalValueId::new(v - 1)) < g.key_id(LocalValueId::new(v)))
    };
    assert!(in_order(&a) && a.graph().distinct_keys().is_some());
    assert!(!in_order(&s) && s.graph().distinct_keys().is_some(), "{}", s.graph());
    assert!(b.graph().distinct_keys().is_none(), "{}", b.graph());
    assert_eq!((ja, js, jb), (vec![vec![0.0]], vec![vec![-2.0]], vec![vec![-2.0]]));
    // -t + -t, transposed: the copy is one operation of the materialization.
    let t = linear_transpose(&b);
    assert_eq!(count_ops(t.graph(), ScalarOp::Neg), 1, "{}", t.graph());
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
