//! A downstream crate written from the specification's documents alone (their newest
//! names; `docs/SPEC.md` summarizes what it relies on), the way a new user writes one.
//!
//! It names nothing that the documents do not name, except where the compiler asked for it:
//! `EvaluableGraphOperation::eval_into` (the one required evaluation method; implementing
//! the documents' `eval` alone is a compile error that names it). It depends on
//! `computegraph` and `tidu` only: its own input keys ([`Key`], the recursive enum of
//! `docs/SPEC.md` §3.6), its own scalar operation set ([`Op`]), rules in the documents' form
//! (`jvp_rule`, `transpose_rule`, `add_primitive` with a `Vec`, primal computations such as
//! `cos x` emitted in `OperationRole::Primary`), and graphs built through
//! `GraphBuilder::add_operation` with an array of `ValueRef`s, as the README's first example
//! writes it.
//!
//! [`Dag`] is a plain description of a scalar DAG with a tree-walking reference
//! interpreter, for the tests and for the benches (`benches/benches/pipeline.rs` runs this
//! set beside the project's own and the baselines).

#![forbid(unsafe_code)]

use std::sync::Arc;

use computegraph::{
    EvaluableGraphOperation, Graph, GraphBuilder, GraphOperation, LocalValueId, OperationRole, Outputs, ValueKey,
    ValueRef,
};
use tidu::PrimitiveValue::{External, Local};
use tidu::{ADKey, DiffPassId, Primitive, PrimitiveBuilder, PrimitiveValue};

/// Input keys: the user's variables, and tangent keys derived per pass (`docs/SPEC.md` §3.6).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Key {
    /// A user variable.
    User(u32),
    /// The tangent of `of` in pass `pass`.
    Tangent {
        /// The key this is a tangent of.
        of: Box<Key>,
        /// The differentiation pass.
        pass: DiffPassId,
    },
}

impl ADKey for Key {
    fn tangent_of(&self, pass: DiffPassId) -> Self {
        Key::Tangent { of: Box::new(self.clone()), pass }
    }
}

/// A scalar `f64` operation set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `a + b`
    Add,
    /// `a · b`
    Mul,
    /// `-a`
    Neg,
    /// `exp a`
    Exp,
    /// `sin a`
    Sin,
    /// `cos a`
    Cos,
    /// `(sin a, cos a)`, two outputs.
    SinCos,
}

impl GraphOperation for Op {
    type Operand = f64;
    type Context = ();
    type InputKey = Key;

    fn input_count(&self) -> usize {
        match self {
            Op::Add | Op::Mul => 2,
            _ => 1,
        }
    }

    fn output_count(&self) -> usize {
        if *self == Op::SinCos { 2 } else { 1 }
    }
}

impl EvaluableGraphOperation for Op {
    #[inline(always)]
    fn eval_into(&self, _: &mut (), x: &[&f64], out: &mut Outputs<'_, f64>) {
        let value = match self {
            Op::Add => x[0] + x[1],
            Op::Mul => x[0] * x[1],
            Op::Neg => -x[0],
            Op::Exp => x[0].exp(),
            Op::Sin => x[0].sin(),
            Op::Cos => x[0].cos(),
            Op::SinCos => {
                out.push(x[0].sin());
                x[0].cos()
            }
        };
        out.push(value);
    }
}

fn linear(mask: &[bool]) -> OperationRole {
    OperationRole::Linearized { active_mask: mask.to_vec() }
}

/// `fixed · t`, linear in `t`.
fn times(b: &mut impl PrimitiveBuilder<Op>, fixed: PrimitiveValue<Op>, t: LocalValueId) -> LocalValueId {
    b.add_primitive(Op::Mul, vec![fixed, Local(t)], linear(&[false, true]))[0]
}

/// `p + q` where either may be a symbolic zero.
fn sum(b: &mut impl PrimitiveBuilder<Op>, p: Option<LocalValueId>, q: Option<LocalValueId>) -> Option<LocalValueId> {
    match (p, q) {
        (Some(p), Some(q)) => Some(b.add_primitive(Op::Add, vec![Local(p), Local(q)], linear(&[true, true]))[0]),
        (p, q) => p.or(q),
    }
}

/// A primal computation a rule needs, in the primal role.
fn primal(b: &mut impl PrimitiveBuilder<Op>, op: Op, x: PrimitiveValue<Op>) -> PrimitiveValue<Op> {
    Local(b.add_primitive(op, vec![x], OperationRole::Primary)[0])
}

impl Primitive for Op {
    type ADContext = ();

    fn add() -> Self {
        Op::Add
    }

    fn jvp_rule(
        &self,
        b: &mut impl PrimitiveBuilder<Self>,
        x: &[ValueKey<Self>],
        y: &[ValueKey<Self>],
        t: &[Option<LocalValueId>],
        _: &mut (),
    ) -> Vec<Option<LocalValueId>> {
        let ext = |k: &ValueKey<Op>| External(k.clone());
        match self {
            Op::Add => vec![sum(b, t[0], t[1])],
            // d(a·b) = a·db + da·b
            Op::Mul => {
                let l = t[1].map(|db| times(b, ext(&x[0]), db));
                let r = t[0].map(|da| times(b, ext(&x[1]), da));
                vec![sum(b, l, r)]
            }
            Op::Neg => vec![t[0].map(|da| b.add_primitive(Op::Neg, vec![Local(da)], linear(&[true]))[0])],
            // d(exp a) = exp(a)·da: the primal output, reused.
            Op::Exp => vec![t[0].map(|da| times(b, ext(&y[0]), da))],
            Op::Sin => vec![t[0].map(|da| {
                let cos = primal(b, Op::Cos, ext(&x[0]));
                times(b, cos, da)
            })],
            Op::Cos => vec![t[0].map(|da| {
                let sin = primal(b, Op::Sin, ext(&x[0]));
                let minus_sin = primal(b, Op::Neg, sin);
                times(b, minus_sin, da)
            })],
            Op::SinCos => match t[0] {
                None => vec![None, None],
                Some(da) => {
                    let ds = times(b, ext(&y[1]), da);
                    let minus_sin = primal(b, Op::Neg, ext(&y[0]));
                    vec![Some(ds), Some(times(b, minus_sin, da))]
                }
            },
        }
    }

    fn transpose_rule(
        &self,
        b: &mut impl PrimitiveBuilder<Self>,
        ct: &[Option<LocalValueId>],
        inputs: &[PrimitiveValue<Self>],
        role: &OperationRole,
        _: &mut (),
    ) -> Vec<Option<LocalValueId>> {
        let OperationRole::Linearized { active_mask: active } = role else {
            unreachable!("only linearized operations are transposed")
        };
        let Some(c) = ct[0] else { return vec![None; inputs.len()] };
        match (self, active.as_slice()) {
            (Op::Add, _) => active.iter().map(|&a| a.then_some(c)).collect(),
            (Op::Neg, _) => vec![Some(b.add_primitive(Op::Neg, vec![Local(c)], linear(&[true]))[0])],
            (Op::Mul, [false, true]) => vec![None, Some(times(b, inputs[0].clone(), c))],
            (Op::Mul, [true, false]) => vec![Some(times(b, inputs[1].clone(), c)), None],
            _ => unreachable!("the JVP rules never emit {self:?} with mask {active:?}"),
        }
    }
}

/// A scalar DAG: values `0..inputs` are the inputs (keyed `Key::User(i)`), then each node
/// appends its outputs (one, or two for `SinCos`).
#[derive(Clone, Debug, Default)]
pub struct Dag {
    /// Number of inputs.
    pub inputs: u32,
    /// The nodes: an operation and its operand values (the second unused for one operand).
    pub nodes: Vec<(Op, [u32; 2])>,
    /// Output values.
    pub outputs: Vec<u32>,
}

impl Dag {
    /// Number of values (inputs and node outputs).
    pub fn value_count(&self) -> usize {
        self.inputs as usize + self.nodes.iter().map(|(op, _)| op.output_count()).sum::<usize>()
    }

    /// Builds the DAG with `b`, the way the specification builds a graph (`add_input`,
    /// `add_operation` with an array of operands, `set_outputs`, `build`); returns the graph
    /// and the keys of its outputs.
    pub fn build(&self, mut b: GraphBuilder<Op>) -> (Arc<Graph<Op>>, Vec<ValueKey<Op>>) {
        let mut values: Vec<LocalValueId> = Vec::with_capacity(self.value_count());
        for i in 0..self.inputs {
            values.push(b.add_input(Key::User(i)));
        }
        for &(op, [a, c]) in &self.nodes {
            let (a, c) = (ValueRef::Local(values[a as usize]), ValueRef::Local(values[c as usize]));
            let outputs = match op.input_count() {
                1 => b.add_operation(op, [a], OperationRole::Primary),
                _ => b.add_operation(op, [a, c], OperationRole::Primary),
            };
            values.extend(outputs);
        }
        let outputs: Vec<LocalValueId> = self.outputs.iter().map(|&o| values[o as usize]).collect();
        b.set_outputs(outputs.clone());
        let g = Arc::new(b.build());
        let keys = outputs.iter().map(|&o| g.global_key(o)).collect();
        (g, keys)
    }

    /// The reference: every node evaluated in order, with plain `f64` arithmetic.
    pub fn eval_reference(&self, inputs: &[f64]) -> Vec<f64> {
        let mut v: Vec<f64> = inputs.to_vec();
        for &(op, [a, c]) in &self.nodes {
            let (a, c) = (v[a as usize], v.get(c as usize).copied().unwrap_or(0.0));
            match op {
                Op::Add => v.push(a + c),
                Op::Mul => v.push(a * c),
                Op::Neg => v.push(-a),
                Op::Exp => v.push(a.exp()),
                Op::Sin => v.push(a.sin()),
                Op::Cos => v.push(a.cos()),
                Op::SinCos => v.extend([a.sin(), a.cos()]),
            }
        }
        self.outputs.iter().map(|&o| v[o as usize]).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tangent_keys_differ_by_pass_and_from_their_key() {
        let x = Key::User(0);
        assert_ne!(x.tangent_of(1), x.tangent_of(2));
        assert_ne!(x.tangent_of(1), x);
        assert_eq!(x.tangent_of(1), x.tangent_of(1));
    }

    #[test]
    fn eval_matches_the_reference_per_operation() {
        for op in [Op::Add, Op::Mul, Op::Neg, Op::Exp, Op::Sin, Op::Cos, Op::SinCos] {
            let dag =
                Dag { inputs: 2, nodes: vec![(op, [0, 1])], outputs: (2..2 + op.output_count() as u32).collect() };
            let got = op.eval(&mut (), &[&0.3, &-1.7]);
            assert_eq!(got, dag.eval_reference(&[0.3, -1.7]), "{op:?}");
        }
    }
}
