//! `tidu::testing::check_rules` over every scalar and complex rule, and over deliberately
//! wrong rules, which it must catch and name.

use scalar::complex::{Complex, ComplexOp};
use scalar::{ScalarKey, ScalarOp};
use tidu::testing::{CheckKind, Checker, RuleCase, Tolerance, check_rules};

fn x(i: u32) -> ScalarKey {
    ScalarKey::var(i)
}

/// Every scalar operation at ordinary and special points (0, 1, large), with every
/// activity pattern of the binary operations. Linear and bilinear operations are checked
/// with the exact step of 1 everywhere, and with random directions and the small step only
/// at moderate values: at |x| = 1e8 a step of 1e-6 is below the rounding of `x + h·t`.
fn scalar_cases() -> Vec<RuleCase<ScalarOp>> {
    let mut cases = Vec::new();
    for op in ScalarOp::ALL {
        match op {
            ScalarOp::Add | ScalarOp::Mul => {
                for (a, b) in [(0.7, -1.3), (0.0, 2.0), (1.0, 1.0), (1e6, -3e5), (0.0, 0.0)] {
                    for mask in [[true, true], [true, false], [false, true]] {
                        let case = RuleCase::new(op, vec![(x(0), a), (x(1), b)]).active(&mask);
                        cases.push(case.clone().multilinear());
                        if f64::max(a.abs(), b.abs()) <= 10.0 {
                            cases.push(case); // random directions and a small step too
                        }
                    }
                }
            }
            ScalarOp::Neg => {
                for a in [0.7, 0.0, 1.0, -1e8] {
                    cases.push(RuleCase::new(op, vec![(x(0), a)]).multilinear());
                    if a.abs() <= 10.0 {
                        cases.push(RuleCase::new(op, vec![(x(0), a)]));
                    }
                }
            }
            ScalarOp::Exp => {
                for a in [0.7, 0.0, 1.0, -2.5, 30.0, -30.0] {
                    cases.push(RuleCase::new(op, vec![(x(0), a)]));
                }
            }
            ScalarOp::Sin | ScalarOp::Cos | ScalarOp::SinCos => {
                for a in [0.7, 0.0, 1.0, -2.5, std::f64::consts::FRAC_PI_2, 100.0] {
                    cases.push(RuleCase::new(op, vec![(x(0), a)]));
                }
            }
            ScalarOp::Const(_) => cases.push(RuleCase::new(op, vec![])),
        }
    }
    cases
}

#[test]
fn every_scalar_rule_passes() {
    let cases = scalar_cases();
    let report = check_rules(&cases, Tolerance::F64).unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(report.cases, cases.len());
    for kind in [
        CheckKind::Jvp,
        CheckKind::Transpose,
        CheckKind::SecondOrder,
        CheckKind::SymbolicZeros,
        CheckKind::Linearity,
        CheckKind::HvpSymmetry,
    ] {
        let worst = report.worst(kind).unwrap_or_else(|| panic!("no {kind} comparison ran"));
        assert!(worst <= 1.0, "{kind}: {worst}");
    }
}

#[test]
fn every_scalar_rule_passes_with_other_seeds_and_more_directions() {
    let cases = scalar_cases();
    for seed in [1, 2, 3] {
        Checker::new(Tolerance::F64)
            .seed(seed)
            .directions(4)
            .check_rules(&mut (), &cases)
            .unwrap_or_else(|f| panic!("seed {seed}: {f}"));
    }
}

fn c(re: f64, im: f64) -> Complex {
    Complex::new(re, im)
}

fn complex_cases() -> Vec<RuleCase<ComplexOp>> {
    let mut cases = Vec::new();
    for op in ComplexOp::ALL {
        match op {
            ComplexOp::Add | ComplexOp::Mul => {
                for (a, b) in [(c(0.7, -0.4), c(-1.3, 2.0)), (c(0.0, 0.0), c(1.0, 0.0)), (c(1e5, -2e5), c(0.0, 1.0))] {
                    for mask in [[true, true], [true, false], [false, true]] {
                        let case = RuleCase::new(op, vec![(x(0), a), (x(1), b)]).active(&mask);
                        cases.push(case.clone().multilinear());
                        if f64::max(a.abs(), b.abs()) <= 10.0 {
                            cases.push(case);
                        }
                    }
                }
            }
            ComplexOp::Neg | ComplexOp::Conj => {
                for a in [c(0.7, -0.4), c(0.0, 0.0), c(1.0, 0.0), c(-3e7, 1e7)] {
                    cases.push(RuleCase::new(op, vec![(x(0), a)]).multilinear());
                    if a.abs() <= 10.0 {
                        cases.push(RuleCase::new(op, vec![(x(0), a)]));
                    }
                }
            }
            ComplexOp::Exp => {
                for a in [c(0.7, -0.4), c(0.0, 0.0), c(1.0, 0.0), c(0.0, std::f64::consts::PI), c(20.0, 3.0)] {
                    cases.push(RuleCase::new(op, vec![(x(0), a)]));
                }
            }
            ComplexOp::Const(..) => cases.push(RuleCase::new(op, vec![])),
        }
    }
    cases
}

#[test]
fn every_complex_rule_passes() {
    let cases = complex_cases();
    let report = check_rules(&cases, Tolerance::F64).unwrap_or_else(|f| panic!("{f}"));
    assert_eq!(report.cases, cases.len());
    assert!(report.worst(CheckKind::Transpose).unwrap() <= 1.0);
}

/// A small operation set with two deliberately wrong rules, for the checker's failure paths.
mod toy {
    use computegraph::{EvaluableGraphOperation, GraphOperation, LocalValueId, OperationRole, Outputs, ValueKey};
    use scalar::ScalarKey;
    use tidu::{ADRuleError, Primitive, PrimitiveBuilder, PrimitiveValue, RuleKind, emit};

    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub enum Toy {
        Add,
        /// `a · b`, correct rules.
        Mul,
        /// `x²`, correct rules: d = 2x·dx, emitted as `mul(x, dx) + mul(x, dx)`.
        Square,
        /// `x²` with a wrong JVP: `x·dx` (the factor 2 is missing).
        BadSquare,
        /// `2x`, correct rules (transpose `c ↦ 2c`).
        Double,
        /// `2x` with a wrong transpose: `c ↦ c`.
        BadDouble,
        /// `x³` whose JVP emits an unused operation: `3x²·dx` plus a dangling `double(dx)`.
        Wasteful,
        /// `x²` with a right JVP, `mul(bad_double(x), dx)`, through an operation whose
        /// transpose is wrong: only reverse-over-forward sees it.
        SquareVia,
    }

    impl GraphOperation for Toy {
        type Operand = f64;
        type Context = ();
        type InputKey = ScalarKey;
        fn input_count(&self) -> usize {
            match self {
                Toy::Add | Toy::Mul => 2,
                _ => 1,
            }
        }
        fn output_count(&self) -> usize {
            1
        }
    }

    impl EvaluableGraphOperation for Toy {
        fn eval_into(&self, _: &mut (), x: &[&f64], out: &mut Outputs<'_, f64>) {
            out.push(match self {
                Toy::Add => x[0] + x[1],
                Toy::Mul => x[0] * x[1],
                Toy::Square | Toy::BadSquare | Toy::SquareVia => x[0] * x[0],
                Toy::Double | Toy::BadDouble => 2.0 * x[0],
                Toy::Wasteful => x[0] * x[0] * x[0],
            });
        }
    }

    use computegraph::ValueRef::{External, Local};

    impl Primitive for Toy {
        type ADContext = ();
        fn add() -> Self {
            Toy::Add
        }
        fn jvp_rule(
            &self,
            b: &mut impl PrimitiveBuilder<Self>,
            x: &[ValueKey<Self>],
            _: &[ValueKey<Self>],
            t: &[Option<LocalValueId>],
            _: &mut (),
        ) -> Vec<Option<LocalValueId>> {
            let xs = |i: usize| External(x[i].clone());
            vec![match self {
                Toy::Add => emit::accumulate(b, t[0], t[1]),
                Toy::Mul => {
                    let p = t[1].map(|d| emit::linear(b, Toy::Mul, &[xs(0), Local(d)], &[false, true]));
                    let q = t[0].map(|d| emit::linear(b, Toy::Mul, &[Local(d), xs(1)], &[true, false]));
                    emit::accumulate(b, p, q)
                }
                Toy::Square => t[0].map(|d| {
                    let h = emit::linear(b, Toy::Mul, &[xs(0), Local(d)], &[false, true]);
                    emit::linear(b, Toy::Add, &[Local(h), Local(h)], &[true, true])
                }),
                Toy::BadSquare => t[0].map(|d| emit::linear(b, Toy::Mul, &[xs(0), Local(d)], &[false, true])),
                Toy::Double | Toy::BadDouble => t[0].map(|d| emit::linear(b, *self, &[Local(d)], &[true])),
                Toy::SquareVia => t[0].map(|d| {
                    let two_x = emit::linear(b, Toy::BadDouble, &[xs(0)], &[false]);
                    emit::linear(b, Toy::Mul, &[Local(two_x), Local(d)], &[false, true])
                }),
                Toy::Wasteful => t[0].map(|d| {
                    let _unused = emit::linear(b, Toy::Double, &[Local(d)], &[true]);
                    let x2 = emit::linear(b, Toy::Mul, &[xs(0), xs(0)], &[false, false]);
                    let h = emit::linear(b, Toy::Mul, &[Local(x2), Local(d)], &[false, true]);
                    let h2 = emit::linear(b, Toy::Add, &[Local(h), Local(h)], &[true, true]);
                    emit::linear(b, Toy::Add, &[Local(h2), Local(h)], &[true, true])
                }),
            }]
        }
        fn transpose_rule(
            &self,
            b: &mut impl PrimitiveBuilder<Self>,
            ct: &[Option<LocalValueId>],
            inputs: &[PrimitiveValue<Self>],
            role: &OperationRole,
            ctx: &mut (),
        ) -> Vec<Option<LocalValueId>> {
            self.try_linear_transpose_rule(b, ct, inputs, role, ctx).unwrap()
        }
        fn try_linear_transpose_rule(
            &self,
            b: &mut impl PrimitiveBuilder<Self>,
            ct: &[Option<LocalValueId>],
            inputs: &[PrimitiveValue<Self>],
            role: &OperationRole,
            _: &mut (),
        ) -> Result<Vec<Option<LocalValueId>>, ADRuleError> {
            let mask = role.active_mask().unwrap_or(&[]);
            let Some(c) = ct[0] else { return Ok(vec![None; self.input_count()]) };
            Ok(match (self, mask) {
                (Toy::Add, _) => vec![mask[0].then_some(c), mask[1].then_some(c)],
                (Toy::Mul, [true, false]) => {
                    vec![Some(emit::linear(b, Toy::Mul, &[Local(c), inputs[1].clone()], mask)), None]
                }
                (Toy::Mul, [false, true]) => {
                    vec![None, Some(emit::linear(b, Toy::Mul, &[inputs[0].clone(), Local(c)], mask))]
                }
                (Toy::Double, _) => vec![Some(emit::linear(b, Toy::Double, &[Local(c)], &[true]))],
                (Toy::BadDouble, _) => vec![Some(c)],
                _ => return Err(ADRuleError::missing(self, RuleKind::Transpose, "not linear")),
            })
        }
    }
}

use toy::Toy;

fn toy_case(op: Toy) -> RuleCase<Toy> {
    let inputs: Vec<(ScalarKey, f64)> =
        [0.8, -1.7][..op_arity(op)].iter().enumerate().map(|(i, &v)| (x(i as u32), v)).collect();
    RuleCase::new(op, inputs)
}

fn op_arity(op: Toy) -> usize {
    use computegraph::GraphOperation;
    op.input_count()
}

#[test]
fn the_correct_toy_rules_pass() {
    let cases: Vec<RuleCase<Toy>> = [Toy::Add, Toy::Mul, Toy::Square, Toy::Double].into_iter().map(toy_case).collect();
    check_rules(&cases, Tolerance::F64).unwrap_or_else(|f| panic!("{f}"));
}

#[test]
fn a_wrong_jvp_is_caught_and_named() {
    let f = check_rules(&[toy_case(Toy::Square), toy_case(Toy::BadSquare)], Tolerance::F64).unwrap_err();
    assert_eq!(f.check, CheckKind::Jvp, "{f}");
    assert!(f.case.starts_with("BadSquare(x0 = 0.8)"), "{f}");
    let text = f.to_string();
    assert!(text.contains("BadSquare") && text.contains("JVP vs finite differences"), "{text}");
    // The numbers: J·t = x·t where the central difference gives 2x·t.
    assert!(text.contains("central difference"), "{text}");
}

#[test]
fn a_wrong_transpose_is_caught_and_named() {
    let f = check_rules(&[toy_case(Toy::Double), toy_case(Toy::BadDouble)], Tolerance::F64).unwrap_err();
    assert_eq!(f.check, CheckKind::Transpose, "{f}");
    assert!(f.case.starts_with("BadDouble"), "{f}");
    let text = f.to_string();
    assert!(text.contains("BadDouble") && text.contains("⟨c, L t⟩") && text.contains("⟨Lᵀ c, t⟩"), "{text}");
}

#[test]
fn a_wrong_rule_that_only_second_order_uses_is_caught() {
    let f = check_rules(&[toy_case(Toy::SquareVia)], Tolerance::F64).unwrap_err();
    assert_eq!(f.check, CheckKind::SecondOrder, "{f}");
    assert!(f.case.starts_with("SquareVia") && f.message.contains("RoF"), "{f}");
}

#[test]
fn dangling_work_in_a_rule_is_caught() {
    // The values are right; the rule emits an operation that reaches no output.
    let f = check_rules(&[toy_case(Toy::Wasteful)], Tolerance::F64).unwrap_err();
    assert_eq!(f.check, CheckKind::SymbolicZeros, "{f}");
    assert!(f.message.contains("reach no tangent output") && f.message.contains("Double"), "{f}");
}
