//! Conveniences built only from the two transforms: [`jvp`], [`vjp`], [`grad`], [`hvp`],
//! and [`DerivativeProgram`], which turns a derivative graph into an evaluable program in
//! one call.

use computegraph::{
    CompiledProgram, EvaluableGraphOperation, GraphError, GraphOperation, ResolvedView, ValueKey, try_compile,
    try_materialize_merge, try_resolve,
};

use crate::error::ADRuleResult;
use crate::linearize::try_linearize;
use crate::linearized::LinearizedGraph;
use crate::primitive::Primitive;
use crate::transpose::try_linear_transpose;

/// Forward mode: the linear map `t ↦ J t` of `outputs` with respect to `wrt`. Same as
/// [`linearize`](crate::linearize), under the name users look for.
///
/// ```
/// // f(x, y) = x·y + sin(x), with `f` its graph and `f_out` its output key.
/// # use std::sync::Arc;
/// # use computegraph::{resolve, GraphBuilder, OperationRole::Primary, ValueRef::Local};
/// # use scalar::{ScalarKey, ScalarOp};
/// # let (x, y) = (ScalarKey::var(0), ScalarKey::var(1));
/// # let mut b = GraphBuilder::<ScalarOp>::new();
/// # let (px, py) = (b.add_input(x.clone()), b.add_input(y.clone()));
/// # let p = b.add_operation(ScalarOp::Mul, vec![Local(px), Local(py)], Primary)[0];
/// # let s = b.add_operation(ScalarOp::Sin, vec![Local(px)], Primary)[0];
/// # let out = b.add_operation(ScalarOp::Add, vec![Local(p), Local(s)], Primary)[0];
/// # let f = Arc::new(b.build());
/// # let f_out = f.global_key(out);
/// use std::collections::HashMap;
/// use tidu::{jvp, DerivativeProgram};
///
/// let lin = jvp(&resolve(vec![f]), &[f_out], &[x.clone(), y.clone()]).unwrap();
/// let (tx, ty) = (lin.tangent_inputs()[0].0.clone(), lin.tangent_inputs()[1].0.clone());
/// // J·t at (x, y) = (2, 3) along t = (1, 1): (y + cos x) + x.
/// let at = HashMap::from([(x, 2.0), (y, 3.0), (tx, 1.0), (ty, 1.0)]);
/// let out = DerivativeProgram::new(&lin).unwrap().eval(&mut (), |k| at.get(k)).unwrap();
/// assert_eq!(out, vec![Some(3.0 + 2f64.cos() + 2.0)]);
/// ```
pub fn jvp<Op: Primitive>(
    view: &ResolvedView<Op>,
    outputs: &[ValueKey<Op>],
    wrt: &[Op::InputKey],
) -> ADRuleResult<LinearizedGraph<Op>> {
    try_linearize(view, outputs, wrt)
}

/// Reverse mode: the linear map `c ↦ Jᵀ c` of `outputs` with respect to `wrt`
/// (`linear_transpose ∘ linearize`). Its inputs are one cotangent seed per output that
/// depends on `wrt`; its outputs are one cotangent per `wrt` key.
///
/// ```
/// // f(x, y) = x·y + sin(x), with `f` its graph and `f_out` its output key.
/// # use std::sync::Arc;
/// # use computegraph::{resolve, GraphBuilder, OperationRole::Primary, ValueRef::Local};
/// # use scalar::{ScalarKey, ScalarOp};
/// # let (x, y) = (ScalarKey::var(0), ScalarKey::var(1));
/// # let mut b = GraphBuilder::<ScalarOp>::new();
/// # let (px, py) = (b.add_input(x.clone()), b.add_input(y.clone()));
/// # let p = b.add_operation(ScalarOp::Mul, vec![Local(px), Local(py)], Primary)[0];
/// # let s = b.add_operation(ScalarOp::Sin, vec![Local(px)], Primary)[0];
/// # let out = b.add_operation(ScalarOp::Add, vec![Local(p), Local(s)], Primary)[0];
/// # let f = Arc::new(b.build());
/// # let f_out = f.global_key(out);
/// use std::collections::HashMap;
/// use tidu::{vjp, DerivativeProgram};
///
/// let t = vjp(&resolve(vec![f]), &[f_out], &[x.clone(), y.clone()]).unwrap();
/// let seed = t.tangent_inputs()[0].0.clone();
/// // cᵀJ at (2, 3) with c = 2: (2(y + cos x), 2x).
/// let at = HashMap::from([(x, 2.0), (y, 3.0), (seed, 2.0)]);
/// let out = DerivativeProgram::new(&t).unwrap().eval(&mut (), |k| at.get(k)).unwrap();
/// assert_eq!(out, vec![Some(2.0 * (3.0 + 2f64.cos())), Some(4.0)]);
/// ```
pub fn vjp<Op: Primitive>(
    view: &ResolvedView<Op>,
    outputs: &[ValueKey<Op>],
    wrt: &[Op::InputKey],
) -> ADRuleResult<LinearizedGraph<Op>> {
    try_linear_transpose(&try_linearize(view, outputs, wrt)?)
}

/// The gradient of one output: [`vjp`] of `[output]`. Evaluate it with the seed set to one.
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{resolve, GraphBuilder, OperationRole::Primary, ValueRef::Local};
/// use scalar::{ScalarOp, ScalarKey};
/// use tidu::{grad, DerivativeProgram};
///
/// // f(x) = (x + x) * x, f'(x) = 4x
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// let s = b.add_operation(ScalarOp::Add, vec![Local(x), Local(x)], Primary)[0];
/// let y = b.add_operation(ScalarOp::Mul, vec![Local(s), Local(x)], Primary)[0];
/// let f = Arc::new(b.build());
///
/// let g = grad(&resolve(vec![f.clone()]), &f.global_key(y), &[ScalarKey::var(0)]).unwrap();
/// let program = DerivativeProgram::new(&g).unwrap();
/// let seed = g.tangent_inputs()[0].0.clone();
/// let out = program.eval(&mut (), |k| if *k == seed { Some(&1.0) } else { Some(&3.0) }).unwrap();
/// assert_eq!(out, vec![Some(12.0)]);
/// ```
pub fn grad<Op: Primitive>(
    view: &ResolvedView<Op>,
    output: &ValueKey<Op>,
    wrt: &[Op::InputKey],
) -> ADRuleResult<LinearizedGraph<Op>> {
    vjp(view, std::slice::from_ref(output), wrt)
}

/// Hessian-vector products by forward-over-reverse: linearizes the gradient of `output`
/// with respect to `wrt` again with respect to `wrt`. The result's inputs are the
/// direction `v` (one tangent per `wrt` key); the program also reads the primal inputs and
/// the gradient's cotangent seed (set it to one); its outputs are `H v` per `wrt` key.
///
/// ```
/// // f(x, y) = x·y + sin(x), with `f` its graph and `f_out` its output key.
/// # use std::sync::Arc;
/// # use computegraph::{resolve, GraphBuilder, OperationRole::Primary, ValueRef::Local};
/// # use scalar::{ScalarKey, ScalarOp};
/// # let (x, y) = (ScalarKey::var(0), ScalarKey::var(1));
/// # let mut b = GraphBuilder::<ScalarOp>::new();
/// # let (px, py) = (b.add_input(x.clone()), b.add_input(y.clone()));
/// # let p = b.add_operation(ScalarOp::Mul, vec![Local(px), Local(py)], Primary)[0];
/// # let s = b.add_operation(ScalarOp::Sin, vec![Local(px)], Primary)[0];
/// # let out = b.add_operation(ScalarOp::Add, vec![Local(p), Local(s)], Primary)[0];
/// # let f = Arc::new(b.build());
/// # let f_out = f.global_key(out);
/// use std::collections::HashMap;
/// use tidu::{hvp, DerivativeProgram};
///
/// let hv = hvp(&resolve(vec![f]), &f_out, &[x.clone(), y.clone()]).unwrap();
/// let program = DerivativeProgram::new(&hv).unwrap();
/// // H = [[-sin x, 1], [1, 0]]; v = (1, 0) gives its first column.
/// let (vx, vy) = (hv.tangent_inputs()[0].0.clone(), hv.tangent_inputs()[1].0.clone());
/// let mut at = HashMap::from([(x, 2.0), (y, 3.0), (vx, 1.0), (vy, 0.0)]);
/// for k in program.program().input_keys() {
///     at.entry(k.clone()).or_insert(1.0); // the gradient's seed
/// }
/// let out = program.eval(&mut (), |k| at.get(k)).unwrap();
/// assert_eq!(out, vec![Some(-2f64.sin()), Some(1.0)]);
/// ```
pub fn hvp<Op: Primitive>(
    view: &ResolvedView<Op>,
    output: &ValueKey<Op>,
    wrt: &[Op::InputKey],
) -> ADRuleResult<LinearizedGraph<Op>> {
    let g = grad(view, output, wrt)?;
    let keys: Vec<ValueKey<Op>> = g.tangent_output_keys().into_iter().flatten().collect();
    let hv = try_linearize(&try_resolve(vec![g.graph().clone()])?, &keys, wrt)?;
    // Re-align outputs with `wrt`: a gradient entry that is a symbolic zero has a zero HVP.
    let mut it = hv.tangent_outputs.iter().copied();
    let tangent_outputs = g.tangent_outputs().iter().map(|o| o.and_then(|_| it.next().flatten())).collect();
    Ok(LinearizedGraph::from_parts(hv.graph, hv.tangent_inputs, tangent_outputs, hv.pass))
}

/// A derivative graph compiled for evaluation, with its outputs mapped back to the
/// linear map's outputs (symbolic zeros stay `None`).
///
/// ```
/// // f(x, y) = x·y + sin(x), with `f` its graph and `f_out` its output key.
/// # use std::sync::Arc;
/// # use computegraph::{resolve, GraphBuilder, OperationRole::Primary, ValueRef::Local};
/// # use scalar::{ScalarKey, ScalarOp};
/// # let (x, y) = (ScalarKey::var(0), ScalarKey::var(1));
/// # let mut b = GraphBuilder::<ScalarOp>::new();
/// # let (px, py) = (b.add_input(x.clone()), b.add_input(y.clone()));
/// # let p = b.add_operation(ScalarOp::Mul, vec![Local(px), Local(py)], Primary)[0];
/// # let s = b.add_operation(ScalarOp::Sin, vec![Local(px)], Primary)[0];
/// # let out = b.add_operation(ScalarOp::Add, vec![Local(p), Local(s)], Primary)[0];
/// # let f = Arc::new(b.build());
/// # let f_out = f.global_key(out);
/// use tidu::{linearize, DerivativeProgram};
///
/// let view = resolve(vec![f]);
/// let lin = linearize(&view, &[f_out.clone()], &[y.clone()]);
/// let program = DerivativeProgram::new(&lin).unwrap();
/// let ty = lin.tangent_inputs()[0].0.clone();
/// let out = program.eval(&mut (), |k| if *k == ty { Some(&1.0) } else { Some(&2.0) }).unwrap();
/// assert_eq!(out, vec![Some(2.0)]); // ∂f/∂y = x
///
/// // With respect to a key f does not read, the derivative is a symbolic zero: `None`,
/// // never computed.
/// let zero = linearize(&view, &[f_out], &[ScalarKey::var(5)]);
/// assert_eq!(DerivativeProgram::new(&zero).unwrap().eval(&mut (), |_| Some(&1.0)).unwrap(), vec![None]);
/// ```
pub struct DerivativeProgram<Op: GraphOperation> {
    program: CompiledProgram<Op>,
    /// For each output of the linear map, its position among the program's outputs.
    positions: Vec<Option<usize>>,
}

impl<Op: GraphOperation> DerivativeProgram<Op> {
    /// Resolves, materializes and compiles a derivative graph in one call.
    pub fn new(linear: &LinearizedGraph<Op>) -> Result<Self, GraphError> {
        let view = try_resolve(vec![linear.graph().clone()])?;
        let mut keys = Vec::new();
        let mut positions = Vec::with_capacity(linear.tangent_outputs().len());
        for key in linear.tangent_output_keys() {
            positions.push(key.map(|k| {
                keys.push(k);
                keys.len() - 1
            }));
        }
        let program = try_compile(&try_materialize_merge(&view, &keys)?)?;
        Ok(DerivativeProgram { program, positions })
    }

    /// The compiled program (its `input_keys()` name everything it reads: primal inputs,
    /// tangent inputs or cotangent seeds).
    pub fn program(&self) -> &CompiledProgram<Op> {
        &self.program
    }
}

impl<Op: EvaluableGraphOperation> DerivativeProgram<Op> {
    /// Evaluates with inputs looked up by key; `None` outputs are symbolic zeros.
    pub fn eval<'a, F>(&self, ctx: &mut Op::Context, lookup: F) -> Result<Vec<Option<Op::Operand>>, GraphError>
    where
        F: FnMut(&Op::InputKey) -> Option<&'a Op::Operand>,
    {
        let mut out: Vec<Option<Op::Operand>> =
            self.program.try_eval_by_key(ctx, lookup)?.into_iter().map(Some).collect();
        Ok(self.positions.iter().map(|p| p.and_then(|i| out[i].take())).collect())
    }
}
