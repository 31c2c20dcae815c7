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
    Ok(LinearizedGraph { tangent_outputs, ..hv })
}

/// A derivative graph compiled for evaluation, with its outputs mapped back to the
/// linear map's outputs (symbolic zeros stay `None`).
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
