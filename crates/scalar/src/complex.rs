//! A complex `f64` primitive set: [`Complex`] values, [`ComplexOp`] operations (add, mul,
//! neg, conj, exp, constants) with evaluation and AD rules ([`tidu::Primitive`]). Input keys
//! are [`ScalarKey`]s.
//!
//! # Conjugation convention
//!
//! A complex number is a pair of reals, and every tangent map is an ℝ-linear map on such
//! pairs. **Transposes are adjoints with respect to the real inner product**
//! `⟨a, b⟩ = Re(conj(a)·b) = a.re·b.re + a.im·b.im`: the transpose `Lᵀ` of a linear `L`
//! satisfies `⟨c, L t⟩ = ⟨Lᵀ c, t⟩`. Hence:
//!
//! | linear map        | JVP emits it for          | transpose        |
//! |-------------------|---------------------------|------------------|
//! | `t ↦ a·t`         | `mul`, `exp`              | `c ↦ conj(a)·c`  |
//! | `t ↦ conj(t)`     | `conj`                    | `c ↦ conj(c)`    |
//! | `(s, t) ↦ s + t`  | `add`                     | `c ↦ (c, c)`     |
//! | `t ↦ -t`          | `neg`                     | `c ↦ -c`         |
//!
//! JVPs are plain derivatives: `d(a·b) = a·db + da·b`, `d(conj z) = conj(dz)`,
//! `d(exp z) = exp(z)·dz`. Consequences for users:
//! - for a holomorphic `f`, `vjp(c) = conj(f'(z))·c`;
//! - for a real-valued `L(z)` (an output whose imaginary part is identically zero, such as
//!   `z·conj(z)`), `grad` with seed `1` is `∂L/∂x + i·∂L/∂y`, the direction of steepest
//!   ascent (what PyTorch returns), e.g. `grad |z|² = 2z`;
//! - Hessian-vector products are those of the real Hessian of `z ↦ ⟨c, f(z)⟩` on `ℝ²`,
//!   which is symmetric.
//!
//! [`Complex`] implements `tidu::testing::CheckOperand` with
//! this inner product, so `tidu::testing::check_rules` verifies the convention.
//!
//! ```
//! use scalar::complex::{Complex, ComplexOp};
//! assert_eq!(ComplexOp::Mul.apply(&[Complex::new(1.0, 2.0), Complex::I]), vec![Complex::new(-2.0, 1.0)]);
//! ```

use std::fmt;
use std::ops::{Add, Mul, Neg, Sub};

use computegraph::{EvaluableGraphOperation, GraphOperation, LocalValueId, OperationRole, Outputs, ValueKey};
use tidu::{ADRuleError, ADRuleResult, Primitive, PrimitiveBuilder, PrimitiveValue, RuleKind, emit};

use crate::ScalarKey;

/// A complex number `re + i·im` in `f64`.
#[derive(Clone, Copy, PartialEq, Default)]
pub struct Complex {
    /// The real part.
    pub re: f64,
    /// The imaginary part.
    pub im: f64,
}

impl Complex {
    /// `0`.
    pub const ZERO: Complex = Complex { re: 0.0, im: 0.0 };
    /// `1`.
    pub const ONE: Complex = Complex { re: 1.0, im: 0.0 };
    /// The imaginary unit.
    pub const I: Complex = Complex { re: 0.0, im: 1.0 };

    /// `re + i·im`.
    pub const fn new(re: f64, im: f64) -> Self {
        Complex { re, im }
    }

    /// The complex conjugate `re - i·im`.
    pub fn conj(self) -> Self {
        Complex { re: self.re, im: -self.im }
    }

    /// `exp(re)·(cos im + i·sin im)`.
    pub fn exp(self) -> Self {
        let r = self.re.exp();
        let (s, c) = self.im.sin_cos();
        Complex { re: r * c, im: r * s }
    }

    /// `s·self` for a real `s`.
    pub fn scale(self, s: f64) -> Self {
        Complex { re: s * self.re, im: s * self.im }
    }

    /// `|z|² = re² + im²`.
    pub fn norm_sqr(self) -> f64 {
        self.re * self.re + self.im * self.im
    }

    /// `|z|`.
    pub fn abs(self) -> f64 {
        self.re.hypot(self.im)
    }

    /// The real inner product `⟨self, other⟩ = Re(conj(self)·other)` (see the module docs).
    pub fn inner(self, other: Complex) -> f64 {
        self.re * other.re + self.im * other.im
    }
}

impl Add for Complex {
    type Output = Complex;
    fn add(self, b: Complex) -> Complex {
        Complex { re: self.re + b.re, im: self.im + b.im }
    }
}

impl Sub for Complex {
    type Output = Complex;
    fn sub(self, b: Complex) -> Complex {
        Complex { re: self.re - b.re, im: self.im - b.im }
    }
}

impl Mul for Complex {
    type Output = Complex;
    fn mul(self, b: Complex) -> Complex {
        Complex { re: self.re * b.re - self.im * b.im, im: self.re * b.im + self.im * b.re }
    }
}

impl Neg for Complex {
    type Output = Complex;
    fn neg(self) -> Complex {
        Complex { re: -self.re, im: -self.im }
    }
}

impl From<f64> for Complex {
    fn from(re: f64) -> Self {
        Complex { re, im: 0.0 }
    }
}

impl fmt::Debug for Complex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}{}{:?}i", self.re, if self.im.is_sign_negative() { "-" } else { "+" }, self.im.abs())
    }
}

impl tidu::testing::CheckOperand for Complex {
    fn add_scaled(&self, h: f64, t: &Self) -> Self {
        *self + t.scale(h)
    }
    fn scale(&self, s: f64) -> Self {
        Complex::scale(*self, s)
    }
    fn random_like(&self, rng: &mut tidu::testing::CheckRng) -> Self {
        Complex::new(rng.uniform(-1.0, 1.0), rng.uniform(-1.0, 1.0))
    }
    fn inner(&self, other: &Self) -> f64 {
        Complex::inner(*self, *other)
    }
    fn norm(&self) -> f64 {
        self.abs()
    }
}

/// A complex operation.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum ComplexOp {
    /// `a + b`
    Add,
    /// `a · b`
    Mul,
    /// `-a`
    Neg,
    /// `conj(a)`
    Conj,
    /// `exp(a)`
    Exp,
    /// A constant: the bits of its real and imaginary parts; no inputs.
    Const(u64, u64),
}

impl ComplexOp {
    /// A constant operation.
    pub fn constant(z: Complex) -> Self {
        ComplexOp::Const(z.re.to_bits(), z.im.to_bits())
    }

    /// Every operation kind with a sample constant, for exhaustive tests.
    pub const ALL: [ComplexOp; 6] = [
        ComplexOp::Add,
        ComplexOp::Mul,
        ComplexOp::Neg,
        ComplexOp::Conj,
        ComplexOp::Exp,
        ComplexOp::Const(0x3FF8_0000_0000_0000, 0xBFE0_0000_0000_0000), // 1.5 - 0.5i
    ];

    /// Applies the operation to plain values (the reference semantics).
    pub fn apply(&self, args: &[Complex]) -> Vec<Complex> {
        vec![match *self {
            ComplexOp::Add => args[0] + args[1],
            ComplexOp::Mul => args[0] * args[1],
            ComplexOp::Neg => -args[0],
            ComplexOp::Conj => args[0].conj(),
            ComplexOp::Exp => args[0].exp(),
            ComplexOp::Const(re, im) => Complex::new(f64::from_bits(re), f64::from_bits(im)),
        }]
    }
}

impl fmt::Debug for ComplexOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ComplexOp::Add => f.write_str("cadd"),
            ComplexOp::Mul => f.write_str("cmul"),
            ComplexOp::Neg => f.write_str("cneg"),
            ComplexOp::Conj => f.write_str("conj"),
            ComplexOp::Exp => f.write_str("cexp"),
            ComplexOp::Const(re, im) => {
                write!(f, "cconst {:?}", Complex::new(f64::from_bits(re), f64::from_bits(im)))
            }
        }
    }
}

impl GraphOperation for ComplexOp {
    type Operand = Complex;
    type Context = ();
    type InputKey = ScalarKey;

    fn input_count(&self) -> usize {
        match self {
            ComplexOp::Add | ComplexOp::Mul => 2,
            ComplexOp::Neg | ComplexOp::Conj | ComplexOp::Exp => 1,
            ComplexOp::Const(..) => 0,
        }
    }

    fn output_count(&self) -> usize {
        1
    }
}

impl EvaluableGraphOperation for ComplexOp {
    fn eval_into(&self, _: &mut (), x: &[&Complex], out: &mut Outputs<'_, Complex>) {
        out.push(match *self {
            ComplexOp::Add => *x[0] + *x[1],
            ComplexOp::Mul => *x[0] * *x[1],
            ComplexOp::Neg => -*x[0],
            ComplexOp::Conj => x[0].conj(),
            ComplexOp::Exp => x[0].exp(),
            ComplexOp::Const(re, im) => Complex::new(f64::from_bits(re), f64::from_bits(im)),
        });
    }
}

type Value = PrimitiveValue<ComplexOp>;

/// `conj(a) · c` with `a` fixed and `c` active: the transpose of `t ↦ a·t`.
fn scale_conj(b: &mut impl PrimitiveBuilder<ComplexOp>, a: Value, c: LocalValueId) -> LocalValueId {
    let ca = emit::fixed(b, ComplexOp::Conj, &[a]);
    emit::scaled(b, ComplexOp::Mul, Value::Local(ca), c)
}

impl Primitive for ComplexOp {
    type ADContext = ();

    fn add() -> Self {
        ComplexOp::Add
    }

    tidu::rules_from_try_forms!();

    fn try_jvp_rule(
        &self,
        b: &mut impl PrimitiveBuilder<Self>,
        x: &[ValueKey<Self>],
        y: &[ValueKey<Self>],
        t: &[Option<LocalValueId>],
        _: &mut (),
    ) -> ADRuleResult<Vec<Option<LocalValueId>>> {
        Ok(vec![match *self {
            ComplexOp::Add => emit::accumulate(b, t[0], t[1]),
            ComplexOp::Mul => {
                // d(a·b) = a·db + da·b
                let tb = t[1].map(|db| emit::scaled(b, ComplexOp::Mul, emit::external(&x[0]), db));
                let ta = t[0].map(|da| {
                    emit::linear(b, ComplexOp::Mul, &[Value::Local(da), emit::external(&x[1])], &[true, false])
                });
                emit::accumulate(b, tb, ta)
            }
            ComplexOp::Neg => t[0].map(|da| emit::linear(b, ComplexOp::Neg, &[Value::Local(da)], &[true])),
            ComplexOp::Conj => t[0].map(|da| emit::linear(b, ComplexOp::Conj, &[Value::Local(da)], &[true])),
            ComplexOp::Exp => t[0].map(|da| emit::scaled(b, ComplexOp::Mul, emit::external(&y[0]), da)),
            ComplexOp::Const(..) => None,
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
        let Some(c) = ct.first().copied().flatten() else {
            return Ok(vec![None; self.input_count()]);
        };
        Ok(match *self {
            ComplexOp::Add => vec![active(0).then_some(c), active(1).then_some(c)],
            ComplexOp::Neg => vec![Some(emit::linear(b, ComplexOp::Neg, &[Value::Local(c)], &[true]))],
            ComplexOp::Conj => vec![Some(emit::linear(b, ComplexOp::Conj, &[Value::Local(c)], &[true]))],
            ComplexOp::Mul => match (active(0), active(1)) {
                (true, false) => vec![Some(scale_conj(b, inputs[1].clone(), c)), None],
                (false, true) => vec![None, Some(scale_conj(b, inputs[0].clone(), c))],
                (true, true) => {
                    return Err(ADRuleError::missing(
                        self,
                        RuleKind::Transpose,
                        "a product of two active operands is not linear",
                    ));
                }
                (false, false) => vec![None, None],
            },
            ComplexOp::Exp | ComplexOp::Const(..) => {
                return Err(ADRuleError::missing(self, RuleKind::Transpose, "it is not linear in its operands"));
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: Complex, b: Complex) -> bool {
        (a - b).abs() <= 1e-15 * (1.0 + a.abs().max(b.abs()))
    }

    #[test]
    fn arithmetic() {
        let a = Complex::new(1.0, 2.0);
        let b = Complex::new(-3.0, 0.5);
        assert_eq!(a + b, Complex::new(-2.0, 2.5));
        assert_eq!(a - b, Complex::new(4.0, 1.5));
        assert_eq!(a * b, Complex::new(-3.0 - 1.0, 0.5 - 6.0));
        assert_eq!(-a, Complex::new(-1.0, -2.0));
        assert_eq!(Complex::I * Complex::I, -Complex::ONE);
        assert_eq!(a * Complex::ONE, a);
        assert_eq!(a.scale(2.0), Complex::new(2.0, 4.0));
        assert_eq!(Complex::from(2.5), Complex::new(2.5, 0.0));
    }

    #[test]
    fn conjugate_modulus_and_inner_product() {
        let a = Complex::new(3.0, -4.0);
        let b = Complex::new(0.5, 2.0);
        assert_eq!(a.conj(), Complex::new(3.0, 4.0));
        assert_eq!(a.conj().conj(), a);
        assert_eq!(a.abs(), 5.0);
        assert_eq!(a.norm_sqr(), 25.0);
        assert_eq!(a * a.conj(), Complex::new(25.0, 0.0));
        assert_eq!((a * b).conj(), a.conj() * b.conj());
        // ⟨a, b⟩ = Re(conj(a)·b)
        assert_eq!(a.inner(b), (a.conj() * b).re);
        assert_eq!(a.inner(a), a.norm_sqr());
        // Multiplication by `a` has adjoint multiplication by `conj(a)`.
        let (t, c) = (Complex::new(0.3, -0.7), Complex::new(-1.1, 0.2));
        assert!((c.inner(a * t) - (a.conj() * c).inner(t)).abs() < 1e-15);
    }

    #[test]
    fn exponential() {
        let pi = std::f64::consts::PI;
        assert!(close(Complex::new(0.0, pi).exp(), -Complex::ONE), "Euler");
        assert!(close(Complex::new(0.0, pi / 2.0).exp(), Complex::I));
        assert_eq!(Complex::ZERO.exp(), Complex::ONE);
        assert!(close(Complex::new(1.0, 0.0).exp(), Complex::new(std::f64::consts::E, 0.0)));
        let (a, b) = (Complex::new(0.3, -1.2), Complex::new(-0.4, 2.5));
        assert!(close((a + b).exp(), a.exp() * b.exp()));
        assert!(close(a.conj().exp(), a.exp().conj()));
    }

    #[test]
    fn debug_format() {
        assert_eq!(format!("{:?}", Complex::new(1.5, -0.5)), "1.5-0.5i");
        assert_eq!(format!("{:?}", Complex::new(-2.0, 3.0)), "-2.0+3.0i");
        assert_eq!(format!("{:?}", ComplexOp::constant(Complex::new(1.0, 0.0))), "cconst 1.0+0.0i");
    }

    #[test]
    fn eval_into_matches_apply() {
        let args = [Complex::new(0.7, -0.2), Complex::new(-1.3, 0.4)];
        for op in ComplexOp::ALL {
            let n = op.input_count();
            let refs: Vec<&Complex> = args[..n].iter().collect();
            assert_eq!(op.eval(&mut (), &refs), op.apply(&args[..n]), "{op:?}");
        }
    }
}
