//! A reusable checker for AD rules (`AD-TESTING.md`), generic over any primitive set.
//!
//! Enabled by the `testing` feature. A downstream primitive set implements
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
//!   emits nothing (the rule is not called); with one input made inactive, the
//!   linear graph passes [`LinearizedGraph::check_linear`], emits no more operations than
//!   with it active, has no operation that reaches no output (work for the inactive
//!   input), gives a symbolic zero wherever the full JVP does, and agrees with the full JVP
//!   whose direction is zero on that input. The transpose has no dead operations either,
//!   also when only one output of a multi-output operation is seeded.
//! - **(e) linearity** ([`CheckKind::Linearity`]): the linear graphs pass
//!   [`LinearizedGraph::check_linear`] (only `Linearized` operations, masks consistent), and
//!   `L(αt + βs) = αLt + βLs` numerically, for `L` and `Lᵀ`.
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

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use computegraph::{
    CompiledProgram, EvaluableGraphOperation, Graph, GraphBuilder, GraphOperation, KeyInterner, OperationRole,
    ValueKey, ValueRef, try_compile, try_materialize_merge, try_resolve,
};
use rustc_hash::FxHashMap;

use crate::api::DerivativeProgram;
use crate::linearize::try_linearize;
use crate::linearized::LinearizedGraph;
use crate::primitive::Primitive;
use crate::transpose::try_linear_transpose;

/// What the checker needs of an operand: vector-space operations over the reals, a real
/// inner product, and random values of the same shape.
///
/// For complex values the inner product is `Re(conj(a)·b)` (summed over components), so
/// `‖a‖² = ⟨a, a⟩` and transposes are checked as adjoints with respect to it.
///
/// ```
/// use tidu::testing::{CheckOperand, CheckRng};
///
/// let x = 2.0_f64;
/// assert_eq!(x.add_scaled(0.5, &4.0), 4.0);
/// assert_eq!(x.inner(&3.0), 6.0);
/// assert_eq!(x.distance(&-1.0), 3.0);
/// let r = x.random_like(&mut CheckRng::new(7));
/// assert!((-1.0..=1.0).contains(&r));
/// ```
pub trait CheckOperand: Clone + fmt::Debug {
    /// `self + h·t` (`t` has the shape of `self`).
    fn add_scaled(&self, h: f64, t: &Self) -> Self;
    /// `s·self`.
    fn scale(&self, s: f64) -> Self;
    /// A random value shaped like `self`, components of magnitude about one (used for
    /// directions and cotangents).
    fn random_like(&self, rng: &mut CheckRng) -> Self;
    /// The real inner product `⟨self, other⟩` (`Re(conj(a)·b)` for complex values).
    fn inner(&self, other: &Self) -> f64;
    /// The norm `sqrt(⟨self, self⟩)`.
    fn norm(&self) -> f64 {
        self.inner(self).max(0.0).sqrt()
    }
    /// The distance `‖self - other‖`.
    fn distance(&self, other: &Self) -> f64 {
        self.add_scaled(-1.0, other).norm()
    }
}

impl CheckOperand for f64 {
    fn add_scaled(&self, h: f64, t: &Self) -> Self {
        self + h * t
    }
    fn scale(&self, s: f64) -> Self {
        s * self
    }
    fn random_like(&self, rng: &mut CheckRng) -> Self {
        rng.uniform(-1.0, 1.0)
    }
    fn inner(&self, other: &Self) -> f64 {
        self * other
    }
    fn norm(&self) -> f64 {
        self.abs()
    }
    fn distance(&self, other: &Self) -> f64 {
        (self - other).abs()
    }
}

/// A small deterministic random generator (SplitMix64) for directions and cotangents.
///
/// ```
/// use tidu::testing::CheckRng;
///
/// let mut rng = CheckRng::new(1);
/// assert!((-2.0..3.0).contains(&rng.uniform(-2.0, 3.0)));
/// assert_eq!(CheckRng::new(5).next_u64(), CheckRng::new(5).next_u64());
/// ```
#[derive(Clone, Debug)]
pub struct CheckRng(u64);

impl CheckRng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        CheckRng(seed)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// A uniform float in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    /// A uniform float in `[lo, hi)`.
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }
}

/// Tolerances of the checks.
///
/// ```
/// use tidu::testing::Tolerance;
///
/// // Looser finite-difference tolerances for an operation set whose data are f32.
/// let f32_like = Tolerance { step: 1e-3, atol: 1e-3, rtol: 1e-2, exact_rtol: 1e-5, exact_atol: 1e-6 };
/// assert!(f32_like.rtol > Tolerance::F64.rtol);
/// assert_eq!(Tolerance::default(), Tolerance::F64);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerance {
    /// The central-difference step `h`.
    pub step: f64,
    /// Absolute tolerance of finite-difference comparisons.
    pub atol: f64,
    /// Relative tolerance of finite-difference comparisons: `|Δ| ≤ atol + rtol·‖fd‖`.
    pub rtol: f64,
    /// Relative tolerance of identities that hold to round-off (dot products, linearity,
    /// agreement of the four nestings, exact differences of multilinear operations),
    /// relative to the sum of the magnitudes of the terms: `|Δ| ≤ exact_atol + exact_rtol·Σ|terms|`.
    pub exact_rtol: f64,
    /// Absolute tolerance of identities that hold to round-off: covers results that are
    /// small because terms cancel inside the graph (the checker sees only the results, not
    /// the magnitudes of the intermediate values). Set it to 0 for data far below unit scale.
    pub exact_atol: f64,
}

impl Tolerance {
    /// `f64`: `h = 1e-6`, `atol = 1e-5`, `rtol = 1e-3` (PyTorch's float64 defaults), and
    /// `1e-12` (relative and absolute) for identities that hold to round-off.
    pub const F64: Tolerance = Tolerance { step: 1e-6, atol: 1e-5, rtol: 1e-3, exact_rtol: 1e-12, exact_atol: 1e-12 };
}

impl Default for Tolerance {
    fn default() -> Self {
        Tolerance::F64
    }
}

/// Which check failed, or which a [`CheckReport`] entry is about.
///
/// ```
/// use tidu::testing::CheckKind;
///
/// assert_eq!(CheckKind::ALL[0], CheckKind::Setup); // the order the checks run
/// assert_eq!(CheckKind::SecondOrder.to_string(), "second order (FoF/FoR/RoF/RoR)");
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum CheckKind {
    /// The case could not be built, compiled or evaluated.
    Setup,
    /// (a) The JVP against central finite differences.
    Jvp,
    /// (b) The transpose by the dot-product identity.
    Transpose,
    /// (c) Second derivatives in the four nestings, against each other and finite differences.
    SecondOrder,
    /// (d) Symbolic zeros: no work for inactive inputs.
    SymbolicZeros,
    /// (e) Linearity of the linear graphs, structural and numerical.
    Linearity,
    /// Symmetry of Hessian-vector products.
    HvpSymmetry,
}

impl CheckKind {
    /// Every kind, in the order the checks run.
    pub const ALL: [CheckKind; 7] = [
        CheckKind::Setup,
        CheckKind::Linearity,
        CheckKind::Jvp,
        CheckKind::Transpose,
        CheckKind::SymbolicZeros,
        CheckKind::SecondOrder,
        CheckKind::HvpSymmetry,
    ];
}

impl fmt::Display for CheckKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CheckKind::Setup => "setup",
            CheckKind::Jvp => "JVP vs finite differences",
            CheckKind::Transpose => "transpose (dot-product identity)",
            CheckKind::SecondOrder => "second order (FoF/FoR/RoF/RoR)",
            CheckKind::SymbolicZeros => "symbolic zeros",
            CheckKind::Linearity => "linearity",
            CheckKind::HvpSymmetry => "HVP symmetry",
        })
    }
}

/// A failed check: the case, the check, and a message with the numbers.
///
/// ```
/// use tidu::testing::{CheckFailure, CheckKind};
///
/// let f = CheckFailure { case: "mul(x0 = 2.0, x1 = 3.0)".into(), check: CheckKind::Jvp, message: "3 vs 2".into() };
/// assert_eq!(f.to_string(), "JVP vs finite differences check failed for `mul(x0 = 2.0, x1 = 3.0)`: 3 vs 2");
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct CheckFailure {
    /// The case: the operation and its inputs (`mul(x0 = 2.0, x1 = 3.0)`), or the graph
    /// case's name.
    pub case: String,
    /// Which check.
    pub check: CheckKind,
    /// What differs, with the values.
    pub message: String,
}

impl fmt::Display for CheckFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} check failed for `{}`: {}", self.check, self.case, self.message)
    }
}

impl std::error::Error for CheckFailure {}

/// What passed: counts, and the worst error per check as a fraction of what was allowed.
///
/// ```
/// use scalar::{ScalarKey, ScalarOp};
/// use tidu::testing::{check_rules, CheckKind, CheckReport, RuleCase, Tolerance};
///
/// let mut total = CheckReport::default();
/// for x in [0.5, 2.0] {
///     let report = check_rules(&[RuleCase::new(ScalarOp::Exp, vec![(ScalarKey::var(0), x)])], Tolerance::F64).unwrap();
///     total.merge(&report);
/// }
/// assert_eq!(total.cases, 2);
/// assert!(total.worst(CheckKind::Transpose).unwrap() <= 1.0);
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckReport {
    /// Cases checked.
    pub cases: usize,
    /// Numerical comparisons made.
    pub comparisons: usize,
    worst: BTreeMap<CheckKind, f64>,
}

impl CheckReport {
    /// The largest `error / allowed` seen for `kind` (at most 1 in a passing report), or
    /// `None` if no comparison of that kind ran.
    pub fn worst(&self, kind: CheckKind) -> Option<f64> {
        self.worst.get(&kind).copied()
    }

    /// Adds `other`'s counts and worst errors to `self`.
    pub fn merge(&mut self, other: &CheckReport) {
        self.cases += other.cases;
        self.comparisons += other.comparisons;
        for (&k, &v) in &other.worst {
            self.record(k, v);
        }
    }

    fn record(&mut self, kind: CheckKind, ratio: f64) {
        let w = self.worst.entry(kind).or_insert(0.0);
        *w = w.max(ratio);
    }
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{} cases, {} comparisons", self.cases, self.comparisons)?;
        for (k, v) in &self.worst {
            writeln!(f, "  {k}: worst error {v:.2e} of allowed")?;
        }
        Ok(())
    }
}

/// One operation with sample primal inputs, for [`check_rules`].
///
/// Inputs are bound by key; all are active (differentiated) unless [`RuleCase::active`]
/// says otherwise.
///
/// ```
/// use scalar::{ScalarKey, ScalarOp};
/// use tidu::testing::{check_rules, RuleCase, Tolerance};
///
/// let (a, b) = ((ScalarKey::var(0), 2.0), (ScalarKey::var(1), -3.0));
/// let cases = [
///     RuleCase::new(ScalarOp::Mul, vec![a.clone(), b.clone()]).multilinear(),
///     // The product as a function of its second argument only.
///     RuleCase::new(ScalarOp::Mul, vec![a, b]).active(&[false, true]),
/// ];
/// assert_eq!(cases[1].name(), "mul(x0 = 2.0 [fixed], x1 = -3.0)");
/// check_rules(&cases, Tolerance::F64).unwrap();
/// ```
pub struct RuleCase<Op: GraphOperation> {
    op: Op,
    inputs: Vec<(Op::InputKey, Op::Operand)>,
    active: Vec<bool>,
    multilinear: bool,
}

impl<Op: GraphOperation> RuleCase<Op> {
    /// `op` applied to `inputs` (one `(key, value)` per operand, distinct keys), all active.
    pub fn new(op: Op, inputs: Vec<(Op::InputKey, Op::Operand)>) -> Self {
        let active = vec![true; inputs.len()];
        RuleCase { op, inputs, active, multilinear: false }
    }

    /// Which inputs are active (differentiated); the others are fixed.
    ///
    /// # Panics
    /// If `mask` does not have one flag per input (a bug in the test).
    pub fn active(mut self, mask: &[bool]) -> Self {
        assert_eq!(mask.len(), self.inputs.len(), "one active flag per input");
        self.active = mask.to_vec();
        self
    }

    /// Declares the operation linear in each argument separately (`add`, `mul`, `neg`,
    /// `conj`...): finite differences then use a step of 1, one argument at a time, and must
    /// hold to round-off.
    pub fn multilinear(mut self) -> Self {
        self.multilinear = true;
        self
    }

    /// The operation.
    pub fn op(&self) -> &Op {
        &self.op
    }
}

impl<Op: GraphOperation<Operand: fmt::Debug>> RuleCase<Op> {
    /// The case as text: `mul(x0 = 2.0, x1 = 3.0 [fixed])`.
    pub fn name(&self) -> String {
        let args: Vec<String> = self
            .inputs
            .iter()
            .zip(&self.active)
            .map(|((k, v), &a)| format!("{k:?} = {v:?}{}", if a { "" } else { " [fixed]" }))
            .collect();
        format!("{:?}({})", self.op, args.join(", "))
    }
}

impl<Op: GraphOperation> Clone for RuleCase<Op> {
    fn clone(&self) -> Self {
        RuleCase {
            op: self.op.clone(),
            inputs: self.inputs.clone(),
            active: self.active.clone(),
            multilinear: self.multilinear,
        }
    }
}

impl<Op: GraphOperation<Operand: fmt::Debug>> fmt::Debug for RuleCase<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// A whole graph with sample inputs, for [`check_graph`].
pub struct GraphCase<Op: GraphOperation> {
    /// Shown in failures.
    pub name: String,
    /// The graphs to resolve (fragments; parents are found through them).
    pub roots: Vec<Arc<Graph<Op>>>,
    /// The outputs to differentiate.
    pub outputs: Vec<ValueKey<Op>>,
    /// Values of every input the outputs read, by key.
    pub inputs: Vec<(Op::InputKey, Op::Operand)>,
    /// The inputs to differentiate with respect to (keys of `inputs`).
    pub wrt: Vec<Op::InputKey>,
}

impl<Op: GraphOperation> GraphCase<Op> {
    /// A case differentiating `outputs` with respect to every input.
    pub fn new(
        name: impl Into<String>,
        roots: Vec<Arc<Graph<Op>>>,
        outputs: Vec<ValueKey<Op>>,
        inputs: Vec<(Op::InputKey, Op::Operand)>,
    ) -> Self {
        let wrt = inputs.iter().map(|(k, _)| k.clone()).collect();
        GraphCase { name: name.into(), roots, outputs, inputs, wrt }
    }
}

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
        b.try_set_outputs(outs.clone()).map_err(|e| setup(&e))?;
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

type Env<Op> = FxHashMap<<Op as GraphOperation>::InputKey, <Op as GraphOperation>::Operand>;

/// One subject under check: a function of `x` given by `outputs` over `roots`.
struct Run<'c, Op: GraphOperation> {
    name: String,
    tol: Tolerance,
    directions: usize,
    ctx: &'c mut Op::Context,
    rng: CheckRng,
    report: CheckReport,
    roots: Vec<Arc<Graph<Op>>>,
    outputs: Vec<ValueKey<Op>>,
    /// Every input, by key.
    x: Vec<(Op::InputKey, Op::Operand)>,
    /// The active inputs (indices into `x`).
    wrt: Vec<usize>,
    multilinear: bool,
}

/// The transforms of one subject and their programs.
struct Derivatives<Op: GraphOperation> {
    lin: LinearizedGraph<Op>,
    lin_p: DerivativeProgram<Op>,
    tr: LinearizedGraph<Op>,
    tr_p: DerivativeProgram<Op>,
    /// Output indices of `lin`'s non-zero outputs (the seeds of `tr`, in order).
    lin_some: Vec<usize>,
}

impl<Op> Run<'_, Op>
where
    Op: Primitive + EvaluableGraphOperation,
    Op::Operand: CheckOperand,
{
    fn fail(&self, check: CheckKind, message: impl Into<String>) -> CheckFailure {
        CheckFailure { case: self.name.clone(), check, message: message.into() }
    }

    /// Passes if `err ≤ allowed` (a NaN fails), recording the ratio.
    fn compare(
        &mut self,
        check: CheckKind,
        err: f64,
        allowed: f64,
        what: impl FnOnce() -> String,
    ) -> Result<(), CheckFailure> {
        self.report.comparisons += 1;
        if err <= allowed {
            self.report.record(check, if allowed > 0.0 { err / allowed } else { 0.0 });
            Ok(())
        } else {
            Err(self.fail(check, format!("{}; |Δ| = {err:.3e} > allowed {allowed:.3e}", what())))
        }
    }

    fn wrt_keys(&self) -> Vec<Op::InputKey> {
        self.wrt.iter().map(|&i| self.x[i].0.clone()).collect()
    }

    fn inputs_text(&self) -> String {
        let v: Vec<String> = self.x.iter().map(|(k, v)| format!("{k:?} = {v:?}")).collect();
        v.join(", ")
    }

    /// The primal inputs.
    fn env(&self) -> Env<Op> {
        self.x.iter().cloned().collect()
    }

    /// `env` with the active inputs moved to `x + h·dir`.
    fn shifted(&self, env: &Env<Op>, h: f64, dir: &[Op::Operand]) -> Env<Op> {
        let mut e = env.clone();
        for (&i, d) in self.wrt.iter().zip(dir) {
            let (k, v) = &self.x[i];
            e.insert(k.clone(), v.add_scaled(h, d));
        }
        e
    }

    /// A random direction over the active inputs.
    fn direction(&mut self) -> Vec<Op::Operand> {
        let rng = &mut self.rng;
        self.wrt.iter().map(|&i| self.x[i].1.random_like(rng)).collect()
    }

    /// A direction that is random in active argument `k` only.
    fn direction_along(&mut self, k: usize) -> Vec<Op::Operand> {
        let rng = &mut self.rng;
        self.wrt
            .iter()
            .enumerate()
            .map(|(j, &i)| if j == k { self.x[i].1.random_like(rng) } else { self.x[i].1.scale(0.0) })
            .collect()
    }

    /// The directions of finite-difference checks and their step: random ones with the
    /// tolerance's step, or (multilinear) one per argument with step 1.
    fn fd_directions(&mut self) -> (f64, Vec<Vec<Op::Operand>>) {
        if self.multilinear {
            (1.0, (0..self.wrt.len()).map(|k| self.direction_along(k)).collect())
        } else {
            (self.tol.step, (0..self.directions).map(|_| self.direction()).collect())
        }
    }

    /// The allowed error of an identity that holds to round-off, for terms of total size `scale`.
    fn roundoff(&self, scale: f64) -> f64 {
        self.tol.exact_atol + self.tol.exact_rtol * scale
    }

    /// The allowed error of a finite difference `fd` (from values of norm `n_plus`,
    /// `n_minus`) against `got`.
    fn fd_allowed(&self, fd: f64, got: f64, n_plus: f64, n_minus: f64, h: f64) -> f64 {
        if self.multilinear {
            self.roundoff((n_plus + n_minus) / (2.0 * h) + got + fd)
        } else {
            self.tol.atol + self.tol.rtol * fd
        }
    }

    fn program(
        &self,
        lin: &LinearizedGraph<Op>,
        check: CheckKind,
        what: &str,
    ) -> Result<DerivativeProgram<Op>, CheckFailure> {
        DerivativeProgram::new(lin).map_err(|e| self.fail(check, format!("compiling the {what} failed: {e}")))
    }

    fn eval(
        &mut self,
        p: &DerivativeProgram<Op>,
        env: &Env<Op>,
        check: CheckKind,
        what: &str,
    ) -> Result<Vec<Option<Op::Operand>>, CheckFailure> {
        match p.eval(self.ctx, |k| env.get(k)) {
            Ok(v) => Ok(v),
            Err(e) => Err(self.fail(check, format!("evaluating the {what} failed: {e}"))),
        }
    }

    fn eval_primal(&mut self, p: &CompiledProgram<Op>, env: &Env<Op>) -> Result<Vec<Op::Operand>, CheckFailure> {
        match p.try_eval_by_key(self.ctx, |k| env.get(k)) {
            Ok(v) => Ok(v),
            Err(e) => Err(self.fail(CheckKind::Setup, format!("evaluating the primal failed: {e}"))),
        }
    }

    fn run(&mut self, rule: Option<&Op>) -> Result<(), CheckFailure> {
        let view = try_resolve(self.roots.clone())
            .map_err(|e| self.fail(CheckKind::Setup, format!("resolving the primal failed: {e}")))?;
        let primal = try_materialize_merge(&view, &self.outputs)
            .and_then(|m| try_compile(&m))
            .map_err(|e| self.fail(CheckKind::Setup, format!("compiling the primal failed: {e}")))?;
        let env = self.env();
        let f0 = self.eval_primal(&primal, &env)?;

        let wrt = self.wrt_keys();
        let lin = try_linearize(&view, &self.outputs, &wrt)
            .map_err(|e| self.fail(CheckKind::Jvp, format!("linearize failed: {e}")))?;
        self.check_structure(&lin, "JVP")?;
        let lin_p = self.program(&lin, CheckKind::Jvp, "JVP")?;
        let lin_some = some_positions(lin.tangent_outputs());
        let tr = try_linear_transpose(&lin)
            .map_err(|e| self.fail(CheckKind::Transpose, format!("linear_transpose failed: {e}")))?;
        if tr.tangent_outputs().len() != self.wrt.len() {
            return Err(self.fail(
                CheckKind::Transpose,
                format!("the transpose has {} outputs for {} inputs", tr.tangent_outputs().len(), self.wrt.len()),
            ));
        }
        self.check_structure(&tr, "transpose")?;
        let tr_p = self.program(&tr, CheckKind::Transpose, "transpose")?;
        let d = Derivatives { lin, lin_p, tr, tr_p, lin_some };

        self.check_jvp(&primal, &env, &d)?;
        self.check_linearity(&env, &f0, &d)?;
        self.check_transpose(&env, &f0, &d)?;
        if let Some(op) = rule {
            self.check_zeros(op, &view, &env, &d)?;
        }
        self.check_second_order(&env, &f0, &d)
    }

    /// (e), structural: only `Linearized` operations, masks consistent.
    fn check_structure(&self, lin: &LinearizedGraph<Op>, what: &str) -> Result<(), CheckFailure> {
        lin.check_linear().map_err(|e| self.fail(CheckKind::Linearity, format!("the {what} graph: {e}")))
    }

    /// (a) `J t` against central differences.
    fn check_jvp(
        &mut self,
        primal: &CompiledProgram<Op>,
        env: &Env<Op>,
        d: &Derivatives<Op>,
    ) -> Result<(), CheckFailure> {
        let (h, dirs) = self.fd_directions();
        for t in dirs {
            let mut e = env.clone();
            bind(&mut e, d.lin.tangent_inputs().iter().map(|(k, _)| k), &t);
            let jt = self.eval(&d.lin_p, &e, CheckKind::Jvp, "JVP")?;
            let fp = self.eval_primal(primal, &self.shifted(env, h, &t))?;
            let fm = self.eval_primal(primal, &self.shifted(env, -h, &t))?;
            for (j, got) in jt.iter().enumerate() {
                let fd = fp[j].add_scaled(-1.0, &fm[j]).scale(0.5 / h);
                let err = dist_opt(got.as_ref(), Some(&fd));
                let allowed = self.fd_allowed(fd.norm(), norm_opt(got.as_ref()), fp[j].norm(), fm[j].norm(), h);
                let inputs = self.inputs_text();
                self.compare(CheckKind::Jvp, err, allowed, || {
                    format!(
                        "output {j}: J·t = {} but the central difference (step {h:e}) is {fd:?}; inputs {inputs}, \
                         direction {t:?}",
                        show(got.as_ref())
                    )
                })?;
            }
        }
        Ok(())
    }

    /// (e), numerical: `L(αt + βs) = αLt + βLs` for the JVP and the transpose.
    fn check_linearity(&mut self, env: &Env<Op>, f0: &[Op::Operand], d: &Derivatives<Op>) -> Result<(), CheckFailure> {
        let (alpha, beta) = (self.rng.uniform(-2.0, 2.0), self.rng.uniform(-2.0, 2.0));
        let (t1, t2) = (self.direction(), self.direction());
        let t3: Vec<Op::Operand> = t1.iter().zip(&t2).map(|(a, b)| a.scale(alpha).add_scaled(beta, b)).collect();
        let keys: Vec<Op::InputKey> = d.lin.tangent_inputs().iter().map(|(k, _)| k.clone()).collect();
        let mut outs = Vec::new();
        for t in [&t1, &t2, &t3] {
            let mut e = env.clone();
            bind(&mut e, keys.iter(), t);
            outs.push(self.eval(&d.lin_p, &e, CheckKind::Linearity, "JVP")?);
        }
        self.compare_combination("JVP", &outs, alpha, beta)?;

        let seeds: Vec<Op::InputKey> = d.tr.tangent_inputs().iter().map(|(k, _)| k.clone()).collect();
        let c1: Vec<Op::Operand> = d.lin_some.iter().map(|&j| f0[j].random_like(&mut self.rng)).collect();
        let c2: Vec<Op::Operand> = d.lin_some.iter().map(|&j| f0[j].random_like(&mut self.rng)).collect();
        let c3: Vec<Op::Operand> = c1.iter().zip(&c2).map(|(a, b)| a.scale(alpha).add_scaled(beta, b)).collect();
        let mut outs = Vec::new();
        for c in [&c1, &c2, &c3] {
            let mut e = env.clone();
            bind(&mut e, seeds.iter(), c);
            outs.push(self.eval(&d.tr_p, &e, CheckKind::Linearity, "transpose")?);
        }
        self.compare_combination("transpose", &outs, alpha, beta)
    }

    /// `outs[2] = α·outs[0] + β·outs[1]`, componentwise.
    fn compare_combination(
        &mut self,
        what: &str,
        outs: &[Vec<Option<Op::Operand>>],
        alpha: f64,
        beta: f64,
    ) -> Result<(), CheckFailure> {
        for (j, ((a, b), c)) in outs[0].iter().zip(&outs[1]).zip(&outs[2]).enumerate() {
            let (a, b, c) = (a.as_ref(), b.as_ref(), c.as_ref());
            let want = match (a, b) {
                (Some(a), Some(b)) => Some(a.scale(alpha).add_scaled(beta, b)),
                (Some(a), None) => Some(a.scale(alpha)),
                (None, Some(b)) => Some(b.scale(beta)),
                (None, None) => None,
            };
            let err = dist_opt(c, want.as_ref());
            let allowed = self.roundoff(alpha.abs() * norm_opt(a) + beta.abs() * norm_opt(b) + norm_opt(c));
            let inputs = self.inputs_text();
            self.compare(CheckKind::Linearity, err, allowed, || {
                format!(
                    "{what} output {j}: L(αt + βs) = {} but αLt + βLs = {} (α = {alpha}, β = {beta}); inputs {inputs}",
                    show(c),
                    show(want.as_ref())
                )
            })?;
        }
        Ok(())
    }

    /// (b) `⟨c, L t⟩ = ⟨Lᵀ c, t⟩`, and `(Lᵀ)ᵀ = L`.
    fn check_transpose(&mut self, env: &Env<Op>, f0: &[Op::Operand], d: &Derivatives<Op>) -> Result<(), CheckFailure> {
        let tt = try_linear_transpose(&d.tr)
            .map_err(|e| self.fail(CheckKind::Transpose, format!("transposing the transpose failed: {e}")))?;
        self.check_structure(&tt, "transpose of the transpose")?;
        let tt_p = self.program(&tt, CheckKind::Transpose, "transpose of the transpose")?;
        let tr_some = some_positions(d.tr.tangent_outputs());
        for _ in 0..self.directions {
            let t = self.direction();
            let c: Vec<Op::Operand> = d.lin_some.iter().map(|&j| f0[j].random_like(&mut self.rng)).collect();
            let mut e = env.clone();
            bind(&mut e, d.lin.tangent_inputs().iter().map(|(k, _)| k), &t);
            bind(&mut e, d.tr.tangent_inputs().iter().map(|(k, _)| k), &c);
            let lt = self.eval(&d.lin_p, &e, CheckKind::Transpose, "JVP")?;
            let tc = self.eval(&d.tr_p, &e, CheckKind::Transpose, "transpose")?;
            let lt_some: Vec<Option<Op::Operand>> = d.lin_some.iter().map(|&j| lt[j].clone()).collect();
            let (lhs, s1) = dot(c.iter().map(Some), lt_some.iter().map(Option::as_ref));
            let (rhs, s2) = dot(tc.iter().map(Option::as_ref), t.iter().map(Some));
            let allowed = self.roundoff(s1 + s2);
            let inputs = self.inputs_text();
            self.compare(CheckKind::Transpose, (lhs - rhs).abs(), allowed, || {
                format!(
                    "⟨c, L t⟩ = {lhs:e} but ⟨Lᵀ c, t⟩ = {rhs:e}; inputs {inputs}, t = {t:?}, c = {c:?}, L t = {}, \
                     Lᵀ c = {}",
                    show_all(&lt),
                    show_all(&tc)
                )
            })?;

            // (Lᵀ)ᵀ t = L t, on L's non-zero outputs.
            let mut e2 = env.clone();
            let t_seeds: Vec<Op::Operand> = tr_some.iter().map(|&i| t[i].clone()).collect();
            bind(&mut e2, tt.tangent_inputs().iter().map(|(k, _)| k), &t_seeds);
            let ttt = self.eval(&tt_p, &e2, CheckKind::Transpose, "transpose of the transpose")?;
            for (k, &j) in d.lin_some.iter().enumerate() {
                let got = ttt.get(k).and_then(Option::as_ref);
                let err = dist_opt(got, lt[j].as_ref());
                let allowed = self.roundoff(norm_opt(got) + norm_opt(lt[j].as_ref()));
                let inputs = self.inputs_text();
                self.compare(CheckKind::Transpose, err, allowed, || {
                    format!(
                        "output {j}: (Lᵀ)ᵀ t = {} but L t = {}; inputs {inputs}, t = {t:?}",
                        show(got),
                        show(lt[j].as_ref())
                    )
                })?;
            }
        }
        Ok(())
    }

    /// (d) Symbolic zeros of one rule.
    fn check_zeros(
        &mut self,
        op: &Op,
        view: &computegraph::ResolvedView<Op>,
        env: &Env<Op>,
        d: &Derivatives<Op>,
    ) -> Result<(), CheckFailure> {
        const Z: CheckKind = CheckKind::SymbolicZeros;
        // The rule called with every tangent `None` emits nothing and returns `None`s.
        let g = &self.roots[0];
        let mut b = GraphBuilder::with_interner(Arc::clone(g.interner()));
        b.try_add_parent(Arc::clone(g)).map_err(|e| self.fail(CheckKind::Setup, e.to_string()))?;
        let xs: Vec<ValueKey<Op>> = g.inputs().iter().map(|&v| g.global_key(v)).collect();
        let nones = vec![None; xs.len()];
        let got = op
            .try_jvp_rule(&mut b, &xs, &self.outputs, &nones, &mut Op::ADContext::default())
            .map_err(|e| self.fail(Z, format!("the JVP rule called with every tangent None failed: {e}")))?;
        if got.iter().any(Option::is_some) || got.len() != self.outputs.len() || b.operation_count() > 0 {
            return Err(self.fail(
                Z,
                format!(
                    "the JVP rule called with every tangent None returned {got:?} and emitted {} operations; \
                     expected {} Nones and no operation",
                    b.operation_count(),
                    self.outputs.len()
                ),
            ));
        }

        let dead = dead_operations(&d.lin);
        if !dead.is_empty() {
            return Err(self.fail(Z, format!("the JVP emits operations that reach no tangent output: {dead:?}")));
        }
        let dead = dead_operations(&d.tr);
        if !dead.is_empty() {
            return Err(self.fail(Z, format!("the transpose emits operations that reach no cotangent: {dead:?}")));
        }

        // One input inactive at a time.
        let full_ops = d.lin.as_graph().operation_count();
        for k in 0..self.wrt.len() {
            let sub: Vec<usize> = (0..self.wrt.len()).filter(|&j| j != k).collect();
            let sub_keys: Vec<Op::InputKey> = sub.iter().map(|&j| self.x[self.wrt[j]].0.clone()).collect();
            let inactive = format!("{:?}", self.x[self.wrt[k]].0);
            let lin = try_linearize(view, &self.outputs, &sub_keys)
                .map_err(|e| self.fail(Z, format!("linearize with {inactive} inactive failed: {e}")))?;
            lin.check_linear()
                .map_err(|e| self.fail(Z, format!("with {inactive} inactive the JVP graph is not linear: {e}")))?;
            let ops = lin.as_graph().operation_count();
            if sub.is_empty() && (ops > 0 || lin.tangent_outputs().iter().any(Option::is_some)) {
                return Err(self.fail(
                    Z,
                    format!(
                        "with every input inactive the JVP graph has {ops} operations and outputs {:?}; \
                         expected no operation and only symbolic zeros",
                        lin.tangent_outputs()
                    ),
                ));
            }
            if ops > full_ops {
                return Err(self.fail(
                    Z,
                    format!(
                        "with {inactive} inactive the JVP emits {ops} operations, more than {full_ops} with it active"
                    ),
                ));
            }
            let dead = dead_operations(&lin);
            if !dead.is_empty() {
                return Err(self.fail(
                    Z,
                    format!("with {inactive} inactive the JVP emits operations that reach no output: {dead:?}"),
                ));
            }
            for (j, (a, f)) in lin.tangent_outputs().iter().zip(d.lin.tangent_outputs()).enumerate() {
                if a.is_some() && f.is_none() {
                    return Err(self.fail(
                        Z,
                        format!(
                            "with {inactive} inactive output {j} has a tangent, but with all inputs active it is zero"
                        ),
                    ));
                }
            }
            let p = self.program(&lin, Z, "JVP with an inactive input")?;
            let mut t = self.direction();
            t[k] = t[k].scale(0.0);
            let t_sub: Vec<Op::Operand> = sub.iter().map(|&j| t[j].clone()).collect();
            let mut e = env.clone();
            bind(&mut e, d.lin.tangent_inputs().iter().map(|(k, _)| k), &t);
            bind(&mut e, lin.tangent_inputs().iter().map(|(k, _)| k), &t_sub);
            let full = self.eval(&d.lin_p, &e, Z, "JVP")?;
            let part = self.eval(&p, &e, Z, "JVP with an inactive input")?;
            for j in 0..full.len() {
                let (a, f) = (part[j].as_ref(), full[j].as_ref());
                let err = dist_opt(a, f);
                let allowed = self.roundoff(norm_opt(a) + norm_opt(f));
                self.compare(Z, err, allowed, || {
                    format!(
                        "output {j}: with {inactive} inactive the JVP is {} but with a zero direction on it {}",
                        show(a),
                        show(f)
                    )
                })?;
            }
        }

        // Seeding one output of a multi-output operation at a time.
        if self.outputs.len() > 1 {
            for &j in &d.lin_some {
                let lin = try_linearize(view, std::slice::from_ref(&self.outputs[j]), &self.wrt_keys())
                    .map_err(|e| self.fail(Z, format!("linearize of output {j} alone failed: {e}")))?;
                let tr = try_linear_transpose(&lin)
                    .map_err(|e| self.fail(Z, format!("transpose with only output {j} seeded failed: {e}")))?;
                let dead = dead_operations(&tr);
                if !dead.is_empty() {
                    return Err(self.fail(
                        Z,
                        format!(
                            "with only output {j} seeded the transpose emits operations that reach nothing: {dead:?}"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// (c) All four nestings and HVP symmetry.
    fn check_second_order(
        &mut self,
        env: &Env<Op>,
        f0: &[Op::Operand],
        d: &Derivatives<Op>,
    ) -> Result<(), CheckFailure> {
        const S: CheckKind = CheckKind::SecondOrder;
        let wrt = self.wrt_keys();
        let n = self.wrt.len();
        let m = self.outputs.len();
        let fail = |run: &Self, what: &str, e: &dyn fmt::Display| run.fail(S, format!("{what} failed: {e}"));

        // FoF: linearize J t again in x (direction s).
        let lkeys: Vec<ValueKey<Op>> = d.lin.tangent_output_keys().into_iter().flatten().collect();
        let lview = try_resolve(vec![d.lin.graph().clone()]).map_err(|e| fail(self, "resolving the JVP", &e))?;
        let fof = try_linearize(&lview, &lkeys, &wrt).map_err(|e| fail(self, "forward over forward", &e))?;
        self.check_structure(&fof, "forward-over-forward")?;
        // FoR: linearize Jᵀ c in x (direction s).
        let tr_some = some_positions(d.tr.tangent_outputs());
        let tkeys: Vec<ValueKey<Op>> = d.tr.tangent_output_keys().into_iter().flatten().collect();
        let tview = try_resolve(vec![d.tr.graph().clone()]).map_err(|e| fail(self, "resolving the transpose", &e))?;
        let for_ = try_linearize(&tview, &tkeys, &wrt).map_err(|e| fail(self, "forward over reverse", &e))?;
        self.check_structure(&for_, "forward-over-reverse")?;
        // RoF and RoR: transpose those (linear in s).
        let rof = try_linear_transpose(&fof).map_err(|e| fail(self, "reverse over forward", &e))?;
        self.check_structure(&rof, "reverse-over-forward")?;
        let ror = try_linear_transpose(&for_).map_err(|e| fail(self, "reverse over reverse", &e))?;
        self.check_structure(&ror, "reverse-over-reverse")?;
        let fof_p = self.program(&fof, S, "forward-over-forward")?;
        let for_p = self.program(&for_, S, "forward-over-reverse")?;
        let rof_p = self.program(&rof, S, "reverse-over-forward")?;
        let ror_p = self.program(&ror, S, "reverse-over-reverse")?;
        let fof_some = some_positions(fof.tangent_outputs()); // indices into lkeys
        let for_some = some_positions(for_.tangent_outputs()); // indices into tkeys

        let (h, s_dirs) = self.fd_directions();
        for s in s_dirs {
            let t = self.direction();
            let c: Vec<Op::Operand> = f0.iter().map(|y| y.random_like(&mut self.rng)).collect();
            let mut e = env.clone();
            bind(&mut e, d.lin.tangent_inputs().iter().map(|(k, _)| k), &t);
            let c_some: Vec<Op::Operand> = d.lin_some.iter().map(|&j| c[j].clone()).collect();
            bind(&mut e, d.tr.tangent_inputs().iter().map(|(k, _)| k), &c_some);
            bind(&mut e, fof.tangent_inputs().iter().map(|(k, _)| k), &s);
            bind(&mut e, for_.tangent_inputs().iter().map(|(k, _)| k), &s);
            let rof_seeds: Vec<Op::Operand> = fof_some.iter().map(|&q| c[d.lin_some[q]].clone()).collect();
            bind(&mut e, rof.tangent_inputs().iter().map(|(k, _)| k), &rof_seeds);
            let ror_seeds: Vec<Op::Operand> = for_some.iter().map(|&q| t[tr_some[q]].clone()).collect();
            bind(&mut e, ror.tangent_inputs().iter().map(|(k, _)| k), &ror_seeds);

            // FoF(t, s) per output; FoR(s) per input; RoF(t), RoR(t) per input.
            let fof_v = spread(m, &d.lin_some, self.eval(&fof_p, &e, S, "forward-over-forward")?);
            let for_v = spread(n, &tr_some, self.eval(&for_p, &e, S, "forward-over-reverse")?);
            let rof_v = self.eval(&rof_p, &e, S, "reverse-over-forward")?;
            let ror_v = self.eval(&ror_p, &e, S, "reverse-over-reverse")?;
            let mut e_t = e.clone();
            bind(&mut e_t, for_.tangent_inputs().iter().map(|(k, _)| k), &t);
            let for_t = spread(n, &tr_some, self.eval(&for_p, &e_t, S, "forward-over-reverse")?);

            // One number four ways: ⟨c, FoF⟩ = ⟨FoR(s), t⟩ = ⟨RoF, s⟩ = ⟨RoR, s⟩.
            let (v_fof, s_fof) = dot(c.iter().map(Some), fof_v.iter().map(Option::as_ref));
            let (v_for, s_for) = dot(for_v.iter().map(Option::as_ref), t.iter().map(Some));
            let (v_rof, s_rof) = dot(rof_v.iter().map(Option::as_ref), s.iter().map(Some));
            let (v_ror, s_ror) = dot(ror_v.iter().map(Option::as_ref), s.iter().map(Some));
            let inputs = self.inputs_text();
            for (name, v, sc) in [("⟨FoR(s), t⟩", v_for, s_for), ("⟨RoF, s⟩", v_rof, s_rof), ("⟨RoR, s⟩", v_ror, s_ror)]
            {
                let allowed = self.roundoff(sc + s_fof);
                self.compare(S, (v - v_fof).abs(), allowed, || {
                    format!(
                        "⟨c, FoF(t, s)⟩ = {v_fof:e} but {name} = {v:e}; inputs {inputs}, t = {t:?}, s = {s:?}, c = {c:?}"
                    )
                })?;
            }
            // H_c t three ways: FoR(t) = RoF(t) = RoR(t), to round-off relative to the
            // size of the vectors.
            let size: f64 = (0..n)
                .map(|i| norm_opt(rof_v[i].as_ref()) + norm_opt(ror_v[i].as_ref()) + norm_opt(for_t[i].as_ref()))
                .sum();
            for i in 0..n {
                for (name, v) in [("RoF", rof_v[i].as_ref()), ("RoR", ror_v[i].as_ref())] {
                    let w = for_t[i].as_ref();
                    let allowed = self.roundoff(size);
                    self.compare(S, dist_opt(v, w), allowed, || {
                        format!(
                            "input {i}: FoR(t) = {} but {name}(t) = {}; inputs {inputs}, t = {t:?}",
                            show(w),
                            show(v)
                        )
                    })?;
                }
            }

            // Against central differences of the first derivatives along s.
            let (ep, em) = (self.shifted(&e, h, &s), self.shifted(&e, -h, &s));
            let (jp, jm) = (self.eval(&d.lin_p, &ep, S, "JVP")?, self.eval(&d.lin_p, &em, S, "JVP")?);
            for j in 0..m {
                let fd = fd_opt(jp[j].as_ref(), jm[j].as_ref(), h);
                let got = fof_v[j].as_ref();
                let allowed = self.fd_allowed(
                    norm_opt(fd.as_ref()),
                    norm_opt(got),
                    norm_opt(jp[j].as_ref()),
                    norm_opt(jm[j].as_ref()),
                    h,
                );
                self.compare(S, dist_opt(got, fd.as_ref()), allowed, || {
                    format!(
                        "output {j}: FoF(t, s) = {} but the central difference of J·t along s (step {h:e}) is {}; \
                         inputs {inputs}, t = {t:?}, s = {s:?}",
                        show(got),
                        show(fd.as_ref())
                    )
                })?;
            }
            let (tp, tm) = (self.eval(&d.tr_p, &ep, S, "transpose")?, self.eval(&d.tr_p, &em, S, "transpose")?);
            for i in 0..n {
                let fd = fd_opt(tp[i].as_ref(), tm[i].as_ref(), h);
                let got = for_v[i].as_ref();
                let allowed = self.fd_allowed(
                    norm_opt(fd.as_ref()),
                    norm_opt(got),
                    norm_opt(tp[i].as_ref()),
                    norm_opt(tm[i].as_ref()),
                    h,
                );
                self.compare(S, dist_opt(got, fd.as_ref()), allowed, || {
                    format!(
                        "input {i}: FoR(s) = {} but the central difference of Jᵀ·c along s (step {h:e}) is {}; \
                         inputs {inputs}, s = {s:?}, c = {c:?}",
                        show(got),
                        show(fd.as_ref())
                    )
                })?;
            }

            // HVP symmetry: ⟨t, H_c s⟩ = ⟨s, H_c t⟩.
            let (a, sa) = dot(t.iter().map(Some), for_v.iter().map(Option::as_ref));
            let (b, sb) = dot(s.iter().map(Some), for_t.iter().map(Option::as_ref));
            let allowed = self.roundoff(sa + sb);
            self.compare(CheckKind::HvpSymmetry, (a - b).abs(), allowed, || {
                format!("⟨t, H s⟩ = {a:e} but ⟨s, H t⟩ = {b:e}; inputs {inputs}, t = {t:?}, s = {s:?}, c = {c:?}")
            })?;
        }
        Ok(())
    }
}

/// Binds `keys[i] → values[i]`.
fn bind<'k, K: Clone + std::hash::Hash + Eq + 'k, V: Clone>(
    env: &mut FxHashMap<K, V>,
    keys: impl Iterator<Item = &'k K>,
    values: &[V],
) {
    for (k, v) in keys.zip(values) {
        env.insert(k.clone(), v.clone());
    }
}

/// Indices of the `Some` entries.
fn some_positions<T>(v: &[Option<T>]) -> Vec<usize> {
    v.iter().enumerate().filter(|(_, x)| x.is_some()).map(|(i, _)| i).collect()
}

/// A vector of length `n` with `values[k]` at `positions[k]` and `None` elsewhere.
fn spread<T>(n: usize, positions: &[usize], values: Vec<Option<T>>) -> Vec<Option<T>> {
    let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
    for (&p, v) in positions.iter().zip(values) {
        out[p] = v;
    }
    out
}

/// `Σ ⟨a_i, b_i⟩` (`None` is zero) and its scale `Σ ‖a_i‖·‖b_i‖`.
fn dot<'a, T: CheckOperand + 'a>(
    a: impl Iterator<Item = Option<&'a T>>,
    b: impl Iterator<Item = Option<&'a T>>,
) -> (f64, f64) {
    let (mut sum, mut scale) = (0.0, 0.0);
    for (x, y) in a.zip(b) {
        if let (Some(x), Some(y)) = (x, y) {
            sum += x.inner(y);
            scale += x.norm() * y.norm();
        }
    }
    (sum, scale)
}

fn norm_opt<T: CheckOperand>(a: Option<&T>) -> f64 {
    a.map_or(0.0, CheckOperand::norm)
}

fn dist_opt<T: CheckOperand>(a: Option<&T>, b: Option<&T>) -> f64 {
    match (a, b) {
        (Some(a), Some(b)) => a.distance(b),
        (Some(a), None) | (None, Some(a)) => a.norm(),
        (None, None) => 0.0,
    }
}

/// `(p - m) / 2h`, `None` being zero.
fn fd_opt<T: CheckOperand>(p: Option<&T>, m: Option<&T>, h: f64) -> Option<T> {
    match (p, m) {
        (Some(p), Some(m)) => Some(p.add_scaled(-1.0, m).scale(0.5 / h)),
        (Some(p), None) => Some(p.scale(0.5 / h)),
        (None, Some(m)) => Some(m.scale(-0.5 / h)),
        (None, None) => None,
    }
}

fn show<T: fmt::Debug>(a: Option<&T>) -> String {
    a.map_or_else(|| "0 (symbolic zero)".to_string(), |a| format!("{a:?}"))
}

fn show_all<T: fmt::Debug>(v: &[Option<T>]) -> String {
    let parts: Vec<String> =
        v.iter().map(|a| a.as_ref().map_or_else(|| "0".to_string(), |a| format!("{a:?}"))).collect();
    format!("[{}]", parts.join(", "))
}

/// Operations of a linear graph that no output of the map depends on.
fn dead_operations<Op: GraphOperation>(lin: &LinearizedGraph<Op>) -> Vec<String> {
    let g = lin.as_graph();
    let mut needed = vec![false; g.value_count()];
    for v in lin.tangent_outputs().iter().flatten() {
        needed[v.index()] = true;
    }
    let mut dead = Vec::new();
    for op in g.operations().rev() {
        if op.outputs().any(|v| needed[v.index()]) {
            for r in op.inputs() {
                if let ValueRef::Local(v) = r {
                    needed[v.index()] = true;
                }
            }
        } else {
            dead.push(format!("{:?} {}", op.operation(), op.role()));
        }
    }
    dead
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_deterministic_and_in_range() {
        let (mut a, mut b) = (CheckRng::new(3), CheckRng::new(3));
        for _ in 0..100 {
            let x = a.uniform(-1.0, 1.0);
            assert_eq!(x, b.uniform(-1.0, 1.0));
            assert!((-1.0..1.0).contains(&x));
        }
    }

    #[test]
    fn f64_operand_ops() {
        assert_eq!(1.5f64.add_scaled(2.0, &0.25), 2.0);
        assert_eq!(1.5f64.scale(-2.0), -3.0);
        assert_eq!((-3.0f64).norm(), 3.0);
        assert_eq!(dist_opt(Some(&1.0), None), 1.0);
        assert_eq!(fd_opt(Some(&3.0), Some(&1.0), 0.5), Some(2.0));
        assert_eq!(dot([Some(&2.0), None].into_iter(), [Some(&-3.0), Some(&1.0)].into_iter()), (-6.0, 6.0));
    }

    #[test]
    fn failure_message_names_case_and_check() {
        let f = CheckFailure { case: "sin(x0 = 1.0)".into(), check: CheckKind::Jvp, message: "output 0".into() };
        assert_eq!(f.to_string(), "JVP vs finite differences check failed for `sin(x0 = 1.0)`: output 0");
    }
}
