//! The operation set of this crate's doc examples: scalar `f64` add, mul, neg, exp, sin,
//! cos and a two-output sincos, with input keys `ScalarKey::var(i)`.
//!
//! A pared-down copy of the graph-level half of the workspace's reference set (the
//! `scalar` crate, which depends on this one), so that the examples compile without a
//! dev-dependency loop. Each example declares it as a module,
//! `#[path = "../doc/scalar.rs"] mod scalar;`, on a hidden line.

use std::fmt;

use computegraph::{EvaluableGraphOperation, GraphOperation, Outputs};

/// A scalar operation (printed by name: `add`, `sin`, …).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScalarOp {
    Add,
    Mul,
    Neg,
    Exp,
    Sin,
    Cos,
    SinCos,
}

/// An input's name: `var(i)`, printed `x{i}`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ScalarKey(u32);

impl ScalarKey {
    /// Input `i`.
    pub fn var(i: u32) -> Self {
        ScalarKey(i)
    }
}

impl fmt::Debug for ScalarKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "x{}", self.0)
    }
}

impl fmt::Debug for ScalarOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ScalarOp::Add => "add",
            ScalarOp::Mul => "mul",
            ScalarOp::Neg => "neg",
            ScalarOp::Exp => "exp",
            ScalarOp::Sin => "sin",
            ScalarOp::Cos => "cos",
            ScalarOp::SinCos => "sincos",
        })
    }
}

impl GraphOperation for ScalarOp {
    type Operand = f64;
    type Context = ();
    type InputKey = ScalarKey;

    fn input_count(&self) -> usize {
        match self {
            ScalarOp::Add | ScalarOp::Mul => 2,
            _ => 1,
        }
    }

    fn output_count(&self) -> usize {
        if *self == ScalarOp::SinCos { 2 } else { 1 }
    }

    fn fmt_label(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl EvaluableGraphOperation for ScalarOp {
    #[inline(always)]
    fn eval_into(&self, _: &mut (), x: &[&f64], out: &mut Outputs<'_, f64>) {
        match *self {
            ScalarOp::Add => out.push(x[0] + x[1]),
            ScalarOp::Mul => out.push(x[0] * x[1]),
            ScalarOp::Neg => out.push(-x[0]),
            ScalarOp::Exp => out.push(x[0].exp()),
            ScalarOp::Sin => out.push(x[0].sin()),
            ScalarOp::Cos => out.push(x[0].cos()),
            ScalarOp::SinCos => {
                let (s, c) = x[0].sin_cos();
                out.push(s);
                out.push(c);
            }
        }
    }
}
