//! The graph-level half of the workspace's reference operation set: [`ScalarOp`] (scalar
//! `f64` add, mul, neg, exp, sin, cos, a two-output sincos, constants) and [`ScalarKey`]
//! (inputs `var(i)` and the tangent keys of AD passes), with their `GraphOperation` and
//! `EvaluableGraphOperation` implementations.
//!
//! The AD rules are `ad.rs`. This file names the engine by its crate path
//! (`computegraph::…`) and nothing of its own crate, because tidu's unit tests declare it
//! too (`#[path]`, under `#[cfg(test)]`): a unit test of tidu cannot use the `scalar`
//! crate, which is built against tidu's library, not its test build (ADR 0012, *Tests
//! beside their crates*).

use std::fmt;
use std::sync::Arc;

use computegraph::{EvaluableGraphOperation, GraphOperation, Outputs};

/// A scalar operation on `f64`.
///
/// ```
/// use computegraph::{EvaluableGraphOperation, GraphOperation};
/// use scalar::ScalarOp;
///
/// assert_eq!(ScalarOp::Mul.eval(&mut (), &[&3.0, &4.0]), vec![12.0]);
/// assert_eq!(ScalarOp::SinCos.output_count(), 2);
/// assert_eq!(ScalarOp::constant(1.5).eval(&mut (), &[]), vec![1.5]);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScalarOp {
    /// `a + b`
    Add,
    /// `a * b`
    Mul,
    /// `-a`
    Neg,
    /// `exp(a)`
    Exp,
    /// `sin(a)`
    Sin,
    /// `cos(a)`
    Cos,
    /// `(sin(a), cos(a))`: the two-output operation.
    SinCos,
    /// A constant (the `f64` bits), no inputs.
    Const(u64),
}

impl ScalarOp {
    /// A constant operation.
    pub fn constant(x: f64) -> Self {
        ScalarOp::Const(x.to_bits())
    }

    /// Every operation kind with a sample constant, for exhaustive tests.
    pub const ALL: [ScalarOp; 8] = [
        ScalarOp::Add,
        ScalarOp::Mul,
        ScalarOp::Neg,
        ScalarOp::Exp,
        ScalarOp::Sin,
        ScalarOp::Cos,
        ScalarOp::SinCos,
        ScalarOp::Const(0x3FF8_0000_0000_0000), // 1.5
    ];

    /// Applies the operation to plain values (the reference semantics).
    pub fn apply(&self, args: &[f64]) -> Vec<f64> {
        match *self {
            ScalarOp::Add => vec![args[0] + args[1]],
            ScalarOp::Mul => vec![args[0] * args[1]],
            ScalarOp::Neg => vec![-args[0]],
            ScalarOp::Exp => vec![args[0].exp()],
            ScalarOp::Sin => vec![args[0].sin()],
            ScalarOp::Cos => vec![args[0].cos()],
            ScalarOp::SinCos => vec![args[0].sin(), args[0].cos()],
            ScalarOp::Const(bits) => vec![f64::from_bits(bits)],
        }
    }

    fn name(&self) -> &'static str {
        match self {
            ScalarOp::Add => "add",
            ScalarOp::Mul => "mul",
            ScalarOp::Neg => "neg",
            ScalarOp::Exp => "exp",
            ScalarOp::Sin => "sin",
            ScalarOp::Cos => "cos",
            ScalarOp::SinCos => "sincos",
            ScalarOp::Const(_) => "const",
        }
    }
}

impl fmt::Debug for ScalarOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScalarOp::Const(bits) => write!(f, "const {}", f64::from_bits(*bits)),
            _ => f.write_str(self.name()),
        }
    }
}

/// Input keys: user variables and (for AD passes) tangent keys derived from them.
///
/// ```
/// use scalar::ScalarKey;
/// use tidu::ADKey;
///
/// let x = ScalarKey::var(0);
/// assert_ne!(x.tangent_of(1), x.tangent_of(2)); // one tangent per pass
/// assert_eq!(x.tangent_of(1), x.tangent_of(1));
/// assert_ne!(x.tangent_of(1), ScalarKey::var(1).tangent_of(1));
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum ScalarKey {
    /// A user variable.
    Var(u32),
    /// The tangent (or cotangent seed) of a key in a differentiation pass.
    Tangent(Arc<(ScalarKey, u64)>),
}

impl ScalarKey {
    /// The user variable `i`.
    pub fn var(i: u32) -> Self {
        ScalarKey::Var(i)
    }
    /// The key derived from `self` for pass `pass`.
    pub fn tangent(&self, pass: u64) -> Self {
        ScalarKey::Tangent(Arc::new((self.clone(), pass)))
    }
}

impl fmt::Debug for ScalarKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ScalarKey::Var(i) => write!(f, "x{i}"),
            ScalarKey::Tangent(t) => write!(f, "d{}({:?})", t.1, t.0),
        }
    }
}

impl GraphOperation for ScalarOp {
    type Operand = f64;
    type Context = ();
    type InputKey = ScalarKey;

    #[inline]
    fn input_count(&self) -> usize {
        match self {
            ScalarOp::Add | ScalarOp::Mul => 2,
            ScalarOp::Neg | ScalarOp::Exp | ScalarOp::Sin | ScalarOp::Cos | ScalarOp::SinCos => 1,
            ScalarOp::Const(_) => 0,
        }
    }

    #[inline]
    fn output_count(&self) -> usize {
        match self {
            ScalarOp::SinCos => 2,
            _ => 1,
        }
    }

    fn fmt_label(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl EvaluableGraphOperation for ScalarOp {
    #[inline(always)]
    fn eval_into(&self, _: &mut (), x: &[&f64], out: &mut Outputs<'_, f64>) {
        let value = match *self {
            ScalarOp::Add => x[0] + x[1],
            ScalarOp::Mul => x[0] * x[1],
            ScalarOp::Neg => -x[0],
            ScalarOp::Exp => x[0].exp(),
            ScalarOp::Sin => x[0].sin(),
            ScalarOp::Cos => x[0].cos(),
            ScalarOp::SinCos => {
                let (s, c) = x[0].sin_cos();
                out.push(s);
                c
            }
            ScalarOp::Const(bits) => f64::from_bits(bits),
        };
        out.push(value);
    }
}
