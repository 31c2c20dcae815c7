//! A reusable checker for AD rules (`docs/SPEC.md` §7), generic over any primitive set.
//!
//! Behind the `testing` feature, on by default. A downstream primitive set implements
//! [`CheckOperand`] for its operand type (perturb, random, real inner product) and writes
//! [`RuleCase`]s: one operation with sample primal inputs. [`check_rules`] then checks, for
//! each case:
//!
//! - **(a) JVP** ([`CheckKind::Jvp`]): `J t` from [`linearize`](crate::linearize) against the
//!   central difference `(f(x + h t) - f(x - h t)) / 2h` along random directions `t`
//!   ([`Tolerance::step`], `atol`, `rtol`). For [multilinear](RuleCase::multilinear) cases the
//!   step is 1, one argument at a time, and the difference is exact up to round-off.
//! - **(b) transpose** ([`CheckKind::Transpose`]): the dot-product identity
//!   `⟨c, L t⟩ = ⟨Lᵀ c, t⟩` for random `t`, `c`, to round-off ([`Tolerance::exact_rtol`],
//!   [`Tolerance::exact_atol`]); and `(Lᵀ)ᵀ = L`.
//! - **(c) second order** ([`CheckKind::SecondOrder`]): all four nestings, forward over
//!   forward (FoF), forward over reverse (FoR), reverse over forward (RoF), reverse over
//!   reverse (RoR). With `H_c` the Hessian of `x ↦ ⟨c, f(x)⟩`: `⟨c, FoF(t, s)⟩`,
//!   `⟨FoR(s), t⟩`, `⟨RoF(t), s⟩` and `⟨RoR(t), s⟩` are one number, `FoR(t) = RoF(t) = RoR(t)
//!   = H_c t` as vectors, and FoF and FoR match central differences of the first
//!   derivatives `x ↦ J(x) t` and `x ↦ J(x)ᵀ c`.
//! - **(d) symbolic zeros** ([`CheckKind::SymbolicZeros`]): the rule called with every
//!   tangent `None` returns `None`s and emits nothing; with every input inactive, `linearize`
//!   emits nothing (the rule is not called); with one input made inactive, the linear
//!   graph passes [`LinearizedGraph::check_linear`](crate::LinearizedGraph::check_linear),
//!   emits no more operations than with it active, has no operation that reaches no
//!   output (work for the inactive input), gives a symbolic zero wherever the full JVP
//!   does, and agrees with the full JVP whose direction is zero on that input. The
//!   transpose has no dead operations either, also when only one output of a multi-output
//!   operation is seeded.
//! - **(e) linearity** ([`CheckKind::Linearity`]): the linear graphs pass
//!   [`LinearizedGraph::check_linear`](crate::LinearizedGraph::check_linear) (only
//!   `Linearized` operations, masks consistent), and `L(αt + βs) = αLt + βLs`
//!   numerically, for `L` and `Lᵀ`.
//! - **HVP symmetry** ([`CheckKind::HvpSymmetry`]): `⟨t, H_c s⟩ = ⟨s, H_c t⟩`, with `H_c s`
//!   from FoR.
//!
//! [`check_graph`] runs all of these but (d) on a whole graph ([`GraphCase`]), for property
//! tests over random graphs.
//!
//! A failure is a value, [`CheckFailure`], naming the case (operation and inputs), the
//! check and the numbers. Inner products are real: `⟨a, b⟩ = Re(conj(a)·b)` summed over
//! components ([`CheckOperand::inner`]), so for complex operands the checked transposes are
//! adjoints with respect to that real inner product.
//!
//! ```
//! use scalar::{ScalarKey, ScalarOp};
//! use tidu::testing::{check_rules, RuleCase, Tolerance};
//!
//! let x = |i: u32, v: f64| (ScalarKey::var(i), v);
//! let cases = vec![
//!     RuleCase::new(ScalarOp::Sin, vec![x(0, 0.3)]),
//!     RuleCase::new(ScalarOp::Exp, vec![x(0, 0.0)]),
//!     RuleCase::new(ScalarOp::Mul, vec![x(0, 2.0), x(1, -3.0)]).multilinear(),
//!     RuleCase::new(ScalarOp::Mul, vec![x(0, 2.0), x(1, -3.0)]).active(&[false, true]),
//! ];
//! let report = check_rules(&cases, Tolerance::F64).unwrap();
//! assert_eq!(report.cases, 4);
//! ```
//!
//! Cost: per case, about ten transforms, a dozen compilations and a few dozen evaluations
//! of graphs the size of the case; meant for small graphs.
//!
//! Files: `case.rs` (what a check is given and reports: operands, cases, tolerances,
//! failures), `run.rs` (the checks themselves, on one subject), this file (the entry
//! points and the [`Checker`] settings).

mod case;
mod run;

use std::fmt;
use std::sync::Arc;

use computegraph::{EvaluableGraphOperation, GraphBuilder, KeyInterner, OperationRole, ValueRef};

pub use case::{CheckFailure, CheckKind, CheckOperand, CheckReport, CheckRng, GraphCase, RuleCase, Tolerance};

use crate::primitive::Primitive;
use run::Run;

/// Checks every case with [`Tolerance`] `tol`, a default evaluation context and the
/// default [`Checker`] settings; stops at the first failure.
///
/// ```
/// use scalar::{ScalarKey, ScalarOp};
/// use tidu::testing::{check_rules, CheckKind, RuleCase, Tolerance};
///
/// let cases = [RuleCase::new(ScalarOp::Cos, vec![(ScalarKey::var(0), 1.0)])];
/// let report = check_rules(&cases, Tolerance::F64).unwrap();
/// assert!(report.worst(CheckKind::Jvp).unwrap() <= 1.0);
/// ```
pub fn check_rules<Op>(cases: &[RuleCase<Op>], tol: Tolerance) -> Result<CheckReport, CheckFailure>
where
    Op: Primitive + EvaluableGraphOperation,
    Op::Operand: CheckOperand,
    Op::Context: Default,
{
    Checker::new(tol).check_rules(&mut Op::Context::default(), cases)
}

/// Checks a whole graph (all checks but symbolic zeros) with [`Tolerance`] `tol`, a
/// default evaluation context and the default [`Checker`] settings.
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{GraphBuilder, OperationRole::Primary, ValueRef::Local};
/// use scalar::{ScalarKey, ScalarOp};
/// use tidu::testing::{check_graph, GraphCase, Tolerance};
///
/// // f(x, y) = sin(x·y)
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// let y = b.add_input(ScalarKey::var(1));
/// let p = b.add_operation(ScalarOp::Mul, vec![Local(x), Local(y)], Primary)[0];
/// let s = b.add_operation(ScalarOp::Sin, vec![Local(p)], Primary)[0];
/// let g = Arc::new(b.build());
/// let case = GraphCase::new(
///     "sin(x·y)",
///     vec![g.clone()],
///     vec![g.global_key(s)],
///     vec![(ScalarKey::var(0), 0.7), (ScalarKey::var(1), 1.3)],
/// );
/// check_graph(&case, Tolerance::F64).unwrap();
/// ```
pub fn check_graph<Op>(case: &GraphCase<Op>, tol: Tolerance) -> Result<CheckReport, CheckFailure>
where
    Op: Primitive + EvaluableGraphOperation,
    Op::Operand: CheckOperand,
    Op::Context: Default,
{
    Checker::new(tol).check_graph(&mut Op::Context::default(), case)
}

/// Checker settings: tolerances, the random seed and the number of random directions.
#[derive(Clone, Debug)]
pub struct Checker {
    tol: Tolerance,
    seed: u64,
    directions: usize,
}

impl Default for Checker {
    fn default() -> Self {
        Checker::new(Tolerance::F64)
    }
}

impl Checker {
    /// A checker with tolerances `tol`, seed `0x5EED` and two random directions per check.
    pub fn new(tol: Tolerance) -> Self {
        Checker { tol, seed: 0x5EED, directions: 2 }
    }

    /// Sets the seed of the random directions and cotangents.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Sets how many random directions each check tries (at least one).
    pub fn directions(mut self, n: usize) -> Self {
        self.directions = n.max(1);
        self
    }

    /// Checks every case (see the [module docs](self)); stops at the first failure.
    pub fn check_rules<Op>(&self, ctx: &mut Op::Context, cases: &[RuleCase<Op>]) -> Result<CheckReport, CheckFailure>
    where
        Op: Primitive + EvaluableGraphOperation,
        Op::Operand: CheckOperand,
    {
        let mut report = CheckReport::default();
        for (i, case) in cases.iter().enumerate() {
            let r = self.check_rule_seeded(ctx, case, self.seed.wrapping_add(i as u64))?;
            report.merge(&r);
        }
        Ok(report)
    }

    /// Checks one case.
    pub fn check_rule<Op>(&self, ctx: &mut Op::Context, case: &RuleCase<Op>) -> Result<CheckReport, CheckFailure>
    where
        Op: Primitive + EvaluableGraphOperation,
        Op::Operand: CheckOperand,
    {
        self.check_rule_seeded(ctx, case, self.seed)
    }

    fn check_rule_seeded<Op>(
        &self,
        ctx: &mut Op::Context,
        case: &RuleCase<Op>,
        seed: u64,
    ) -> Result<CheckReport, CheckFailure>
    where
        Op: Primitive + EvaluableGraphOperation,
        Op::Operand: CheckOperand,
    {
        let name = case.name();
        let setup = |e: &dyn fmt::Display| CheckFailure {
            case: name.clone(),
            check: CheckKind::Setup,
            message: format!("building the one-operation graph failed: {e}"),
        };
        let mut b = GraphBuilder::with_interner(KeyInterner::new());
        let mut locals = Vec::with_capacity(case.inputs.len());
        for (k, _) in &case.inputs {
            locals.push(ValueRef::Local(b.try_add_input(k.clone()).map_err(|e| setup(&e))?));
        }
        let outs = b.try_add_operation(case.op.clone(), locals, OperationRole::Primary).map_err(|e| setup(&e))?;
        b.try_set_outputs(outs.to_vec()).map_err(|e| setup(&e))?;
        let g = Arc::new(b.try_build().map_err(|e| setup(&e))?);
        let outputs = outs.iter().map(|&v| g.global_key(v)).collect();
        let wrt = case.active.iter().enumerate().filter(|&(_, &a)| a).map(|(i, _)| i).collect();
        let mut run = Run {
            name,
            tol: self.tol,
            directions: self.directions,
            ctx,
            rng: CheckRng::new(seed),
            report: CheckReport { cases: 1, ..Default::default() },
            roots: vec![g],
            outputs,
            x: case.inputs.clone(),
            wrt,
            multilinear: case.multilinear,
        };
        run.run(Some(&case.op))?;
        Ok(run.report)
    }

    /// Checks a whole graph: everything but (d), which is about one rule.
    pub fn check_graph<Op>(&self, ctx: &mut Op::Context, case: &GraphCase<Op>) -> Result<CheckReport, CheckFailure>
    where
        Op: Primitive + EvaluableGraphOperation,
        Op::Operand: CheckOperand,
    {
        let mut wrt = Vec::with_capacity(case.wrt.len());
        for k in &case.wrt {
            match case.inputs.iter().position(|(i, _)| i == k) {
                Some(i) => wrt.push(i),
                None => {
                    return Err(CheckFailure {
                        case: case.name.clone(),
                        check: CheckKind::Setup,
                        message: format!("wrt key {k:?} has no value in `inputs`"),
                    });
                }
            }
        }
        let mut run = Run {
            name: case.name.clone(),
            tol: self.tol,
            directions: self.directions,
            ctx,
            rng: CheckRng::new(self.seed),
            report: CheckReport { cases: 1, ..Default::default() },
            roots: case.roots.clone(),
            outputs: case.outputs.clone(),
            x: case.inputs.clone(),
            wrt,
            multilinear: false,
        };
        run.run(None)?;
        Ok(run.report)
    }
}
