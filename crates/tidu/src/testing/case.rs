//! What a check is given and what it reports: [`CheckOperand`] (with its `f64`
//! implementation), [`CheckRng`], [`Tolerance`], [`RuleCase`] and [`GraphCase`], and the
//! outcomes [`CheckKind`], [`CheckFailure`] and [`CheckReport`].
//!
//! Nothing here runs a transform: `run.rs` does, reading these types.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use computegraph::{Graph, GraphOperation, ValueKey};
use rand_core::{Rng as _, SeedableRng};
use rand_xoshiro::SplitMix64;

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

/// The workspace's one seeded generator (`rand_xoshiro`'s SplitMix64): the checker's
/// directions and cotangents, and elsewhere the scalar workloads
/// (`scalar::workloads::Rng` is this type), einsum's instance operands and its randomized
/// path search.
///
/// ```
/// use tidu::testing::CheckRng;
///
/// let mut rng = CheckRng::new(1);
/// assert!((-2.0..3.0).contains(&rng.uniform(-2.0, 3.0)));
/// assert!(rng.below(10) < 10);
/// assert_eq!(CheckRng::new(5).next_u64(), CheckRng::new(5).next_u64());
/// ```
#[derive(Clone, Debug)]
pub struct CheckRng(SplitMix64);

impl CheckRng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        CheckRng(SplitMix64::seed_from_u64(seed))
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }
    /// A uniform integer in `0..n` (`n > 0`; multiply-shift, no rejection).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
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
    pub(super) worst: BTreeMap<CheckKind, f64>,
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

    pub(super) fn record(&mut self, kind: CheckKind, ratio: f64) {
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

/// One operation with sample primal inputs, for [`check_rules`](super::check_rules).
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
    pub(super) op: Op,
    pub(super) inputs: Vec<(Op::InputKey, Op::Operand)>,
    pub(super) active: Vec<bool>,
    pub(super) multilinear: bool,
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

/// A whole graph with sample inputs, for [`check_graph`](super::check_graph).
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
