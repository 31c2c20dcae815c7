//! [`LinearizedGraph`]: a linear map as a graph, and its linearity check.

use std::fmt;
use std::sync::{Arc, OnceLock};

use smallvec::SmallVec;

use computegraph::stop::Poll;
use computegraph::{
    CompiledProgram, EvalState, EvaluableGraphOperation, Graph, GraphError, GraphOperation, GraphResult, LocalValueDef,
    LocalValueId, ValueKey, try_compile, try_materialize_fragment,
};

use crate::error::{ADRuleError, ADRuleResult};
use crate::primitive::DiffPassId;

/// A linear map as a graph: the result of `linearize` (a JVP) or `linear_transpose` (a VJP).
///
/// - [`graph`](Self::graph): the operations, in `OperationRole::Linearized` roles, and
///   primal computations the rules need in `Primary` (operands all fixed); primal
///   values are referenced by key (`External`), and the graph lists the source graphs as
///   parents, so `resolve(vec![lin.graph().clone()])` sees everything it needs.
/// - [`tangent_inputs`](Self::tangent_inputs): the map's inputs, as `(key, local value)`: for
///   `linearize`, one tangent input per `wrt` key (its key is `wrt.tangent_of(pass)`); for
///   `linear_transpose`, one cotangent seed per non-zero output of the transposed map.
/// - [`tangent_outputs`](Self::tangent_outputs): the map's outputs; `None` is a symbolic zero
///   (no tangent or cotangent reaches that output).
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{resolve, GraphBuilder, OperationRole::Primary, ValueRef::Local};
/// use scalar::{ScalarKey, ScalarOp};
/// use tidu::{linear_transpose, linearize};
///
/// // f(x, y) = sin(x), differentiated with respect to x and y.
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// b.add_input(ScalarKey::var(1));
/// let s = b.add_operation(ScalarOp::Sin, vec![Local(x)], Primary)[0];
/// let f = Arc::new(b.build());
///
/// let lin = linearize(&resolve(vec![f.clone()]), &[f.global_key(s)], &[ScalarKey::var(0), ScalarKey::var(1)]);
/// assert_eq!(lin.tangent_inputs().len(), 2); // dx and dy
/// assert!(lin.tangent_outputs()[0].is_some());
/// lin.check_linear().unwrap();
///
/// let t = linear_transpose(&lin);
/// assert_eq!(t.tangent_inputs().len(), 1); // one seed
/// assert!(t.tangent_outputs()[0].is_some()); // the cotangent of x
/// assert!(t.tangent_outputs()[1].is_none()); // of y: a symbolic zero
/// ```
pub struct LinearizedGraph<Op: GraphOperation> {
    pub(crate) graph: Arc<Graph<Op>>,
    pub(crate) tangent_inputs: Vec<(Op::InputKey, LocalValueId)>,
    pub(crate) tangent_outputs: Vec<Option<LocalValueId>>,
    pub(crate) pass: DiffPassId,
    /// The map compiled on its own ([`Self::eval_standalone`]), on first use; shared by
    /// clones, which have the same graph, inputs and outputs.
    pub(crate) standalone: Arc<OnceLock<Standalone<Op>>>,
}

/// A [`LinearizedGraph`] compiled on its own: its graph materialized alone
/// ([`try_materialize_fragment`]), so that the values it reads from other graphs (primal
/// values, by key) are the program's external values.
pub(crate) struct Standalone<Op: GraphOperation> {
    program: CompiledProgram<Op>,
    /// Where each of the program's positional inputs (its inputs, then its external values) comes
    /// from.
    sources: Vec<Source<Op>>,
    /// For each output of the map, whether it is computed (the program's outputs are the
    /// computed ones, in order) rather than a symbolic zero.
    computed: Vec<bool>,
}

/// Where [`LinearizedGraph::eval_standalone`] finds one of the program's inputs.
enum Source<Op: GraphOperation> {
    /// Tangent (or cotangent seed) `i` of the map.
    Tangent(usize),
    /// A value the map reads from outside its graph: a primal input or a derived value.
    Primal(ValueKey<Op>),
}

impl<Op: GraphOperation> LinearizedGraph<Op> {
    /// Wraps a hand-built linear graph: `tangent_inputs` are the map's inputs (inputs of
    /// `graph`), `tangent_outputs` its outputs. Checked with [`Self::check_linear`]; gets a
    /// fresh pass id.
    pub fn try_new(
        graph: Arc<Graph<Op>>,
        tangent_inputs: Vec<(Op::InputKey, LocalValueId)>,
        tangent_outputs: Vec<Option<LocalValueId>>,
    ) -> ADRuleResult<Self> {
        let n = graph.value_count();
        if let Some(v) =
            tangent_inputs.iter().map(|(_, v)| v).chain(tangent_outputs.iter().flatten()).find(|v| v.index() >= n)
        {
            return Err(ADRuleError::Graph(computegraph::GraphError::UnknownLocalValue {
                value: format!("{v:?}"),
                len: n,
            }));
        }
        // A tangent input is the graph input of its key (`eval_standalone` binds it by key).
        if let Some((k, v)) = tangent_inputs
            .iter()
            .find(|(k, v)| !matches!(graph.value_def(*v), Some(LocalValueDef::Input(key)) if key == k))
        {
            return Err(ADRuleError::Graph(GraphError::Invalid {
                phase: "linearized graph",
                message: format!("tangent input {v:?} is not the graph input {k:?}"),
            }));
        }
        let lin =
            LinearizedGraph::from_parts(graph, tangent_inputs, tangent_outputs, crate::primitive::fresh_pass_id());
        lin.check_linear()?;
        Ok(lin)
    }

    /// A linear graph from its parts (not checked).
    pub(crate) fn from_parts(
        graph: Arc<Graph<Op>>,
        tangent_inputs: Vec<(Op::InputKey, LocalValueId)>,
        tangent_outputs: Vec<Option<LocalValueId>>,
        pass: DiffPassId,
    ) -> Self {
        LinearizedGraph { graph, tangent_inputs, tangent_outputs, pass, standalone: Arc::default() }
    }

    /// Bytes held by the standalone program, once compiled ([`Self::eval_standalone`]).
    pub(crate) fn standalone_heap_bytes(&self) -> usize {
        self.standalone.get().map_or(0, |s| {
            s.program.heap_bytes() + s.sources.capacity() * std::mem::size_of::<Source<Op>>() + s.computed.capacity()
        })
    }

    /// The linear graph.
    pub fn graph(&self) -> &Arc<Graph<Op>> {
        &self.graph
    }
    /// The linear graph, borrowed.
    pub fn as_graph(&self) -> &Graph<Op> {
        &self.graph
    }
    /// The map's inputs: `(input key, local value)`.
    pub fn tangent_inputs(&self) -> &[(Op::InputKey, LocalValueId)] {
        &self.tangent_inputs
    }
    /// The map's outputs (`None`: symbolic zero).
    pub fn tangent_outputs(&self) -> &[Option<LocalValueId>] {
        &self.tangent_outputs
    }
    /// The global keys of the map's outputs.
    pub fn tangent_output_keys(&self) -> Vec<Option<ValueKey<Op>>> {
        self.tangent_outputs.iter().map(|o| o.map(|v| self.graph.global_key(v))).collect()
    }
    /// The keys of the map's inputs, in order.
    pub fn tangent_input_keys(&self) -> impl ExactSizeIterator<Item = &Op::InputKey> {
        self.tangent_inputs.iter().map(|(k, _)| k)
    }
    /// The pass id of the transform that made this graph.
    pub fn pass(&self) -> DiffPassId {
        self.pass
    }

    /// Checks linearity: an operand marked active depends on the map's inputs, an operand
    /// marked fixed does not, and a `Primary` operation (a primal computation a rule
    /// needs) reads only fixed operands; every output depends on the inputs. External
    /// operands are fixed (primal) values.
    pub fn check_linear(&self) -> ADRuleResult<()> {
        check_linear(&self.graph, self.tangent_inputs.iter().map(|(_, v)| *v), &self.tangent_outputs)
    }
}

impl<Op: EvaluableGraphOperation> LinearizedGraph<Op> {
    /// Evaluates the map on its own: `tangents[i]` is the value of
    /// `tangent_inputs()[i]`, and every value the graph reads from outside itself (the
    /// primal values, by key: inputs as `ValueKey::Input`, derived values as they are) comes
    /// from `primal`. Returns one value per [`tangent_outputs`](Self::tangent_outputs)
    /// entry, `None` where it is a symbolic zero.
    ///
    /// Unlike [`DerivativeProgram`](crate::DerivativeProgram), nothing primal is
    /// recomputed: this is how a runtime that holds the primal values (an eager
    /// [`BackwardExecutor`](crate::eager::BackwardExecutor)) runs a transposed graph. The
    /// graph is materialized alone and compiled on the first call
    /// ([`try_materialize_fragment`]); later calls, and clones, reuse that program.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use computegraph::{resolve, GraphBuilder, OperationRole::Primary, ValueRef::Local};
    /// use scalar::{ScalarKey, ScalarOp};
    /// use tidu::{linear_transpose, linearize};
    ///
    /// // f(x) = sin x; its transposed linearization maps a seed c to cos(x)·c.
    /// let mut b = GraphBuilder::<ScalarOp>::new();
    /// let x = b.add_input(ScalarKey::var(0));
    /// let y = b.add_operation(ScalarOp::Sin, vec![Local(x)], Primary)[0];
    /// let f = Arc::new(b.build());
    /// let lin = linearize(&resolve(vec![f.clone()]), &[f.global_key(y)], &[ScalarKey::var(0)]);
    /// let vjp = linear_transpose(&lin);
    ///
    /// // The primal values it reads, as a runtime holding them supplies them: here only
    /// // `cos x`, which the linearization computed from x.
    /// let cos_x = lin.as_graph().operations().find(|op| *op.operation() == ScalarOp::Cos).unwrap().outputs().next();
    /// let cos_x = lin.as_graph().global_key(cos_x.unwrap());
    /// let cos_x0 = 0.5_f64.cos();
    /// let out = vjp.eval_standalone(&mut (), &[&2.0], |k| (*k == cos_x).then_some(&cos_x0));
    /// assert_eq!(out.unwrap(), vec![Some(2.0 * cos_x0)]);
    /// ```
    pub fn eval_standalone<'a, F>(
        &self,
        ctx: &mut Op::Context,
        tangents: &[&'a Op::Operand],
        primal: F,
    ) -> GraphResult<Vec<Option<Op::Operand>>>
    where
        F: FnMut(&ValueKey<Op>) -> Option<&'a Op::Operand>,
    {
        let mut outputs = Vec::with_capacity(self.tangent_outputs.len());
        self.eval_standalone_with_each(&mut EvalState::new(), ctx, tangents, primal, |x| outputs.push(x))?;
        Ok(outputs)
    }

    /// [`Self::eval_standalone`] reusing `state`'s allocations and handing each output,
    /// in order, to `each` (`None` for a symbolic zero) instead of returning a vector: a
    /// runtime that runs many small transposed graphs allocates nothing here.
    pub fn eval_standalone_with_each<'a, F, E>(
        &self,
        state: &mut EvalState<Op::Operand>,
        ctx: &mut Op::Context,
        tangents: &[&'a Op::Operand],
        mut primal: F,
        mut each: E,
    ) -> GraphResult<()>
    where
        F: FnMut(&ValueKey<Op>) -> Option<&'a Op::Operand>,
        E: FnMut(Option<Op::Operand>),
    {
        if tangents.len() != self.tangent_inputs.len() {
            return Err(GraphError::InputCountMismatch { expected: self.tangent_inputs.len(), found: tangents.len() });
        }
        let alone = self.standalone()?;
        let mut bound: SmallVec<[&Op::Operand; 8]> = SmallVec::with_capacity(alone.sources.len());
        for source in &alone.sources {
            bound.push(match source {
                Source::Tangent(i) => tangents[*i],
                Source::Primal(k) => primal(k).ok_or_else(|| GraphError::UnboundInput { key: format!("{k:?}") })?,
            });
        }
        // The program's outputs are the map's non-zero outputs, in order: each one goes
        // after the zeros before it.
        let mut computed = alone.computed.iter();
        alone.program.eval_with_each(state, ctx, &bound, |x| {
            while let Some(false) = computed.next() {
                each(None);
            }
            each(Some(x));
        })?;
        computed.for_each(|_| each(None));
        Ok(())
    }

    /// The map compiled on its own, compiling it on first use.
    fn standalone(&self) -> GraphResult<&Standalone<Op>> {
        if let Some(alone) = self.standalone.get() {
            return Ok(alone);
        }
        let outputs = self.tangent_output_keys();
        let computed = outputs.iter().map(Option::is_some).collect();
        let keys: Vec<ValueKey<Op>> = outputs.into_iter().flatten().collect();
        let program = try_compile(&try_materialize_fragment(&self.graph, &keys)?)?;
        let tangent = |k: &Op::InputKey| self.tangent_inputs.iter().position(|(t, _)| t == k);
        let sources = (program.input_keys().iter())
            .map(|k| tangent(k).map_or_else(|| Source::Primal(ValueKey::Input(k.clone())), Source::Tangent))
            .chain(program.external_keys().iter().map(|k| Source::Primal(k.clone())))
            .collect();
        // Two threads may both compile; the first one's program is kept.
        Ok(self.standalone.get_or_init(|| Standalone { program, sources, computed }))
    }
}

impl<Op: GraphOperation> Clone for LinearizedGraph<Op> {
    fn clone(&self) -> Self {
        LinearizedGraph {
            graph: Arc::clone(&self.graph),
            tangent_inputs: self.tangent_inputs.clone(),
            tangent_outputs: self.tangent_outputs.clone(),
            pass: self.pass,
            standalone: Arc::clone(&self.standalone),
        }
    }
}

impl<Op: GraphOperation> fmt::Debug for LinearizedGraph<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LinearizedGraph")
            .field("pass", &self.pass)
            .field("graph", &self.graph)
            .field("tangent_inputs", &self.tangent_inputs)
            .field("tangent_outputs", &self.tangent_outputs)
            .finish()
    }
}

impl<Op: GraphOperation> fmt::Display for LinearizedGraph<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.graph)?;
        let outs: Vec<String> =
            self.tangent_outputs.iter().map(|o| o.map_or("0".into(), |v| format!("{v:?}"))).collect();
        writeln!(f, "  tangent outputs: {}", outs.join(", "))
    }
}

/// The linearity check of [`LinearizedGraph::check_linear`], on parts.
///
/// One plain loop over each operation's operands: the transpose checks every graph it
/// builds, and iterator adapters with closures cost it about a tenth of its instructions
/// (`docs/PERFORMANCE.md`, reg38b).
pub(crate) fn check_linear<Op: GraphOperation>(
    graph: &Graph<Op>,
    inputs: impl IntoIterator<Item = LocalValueId>,
    outputs: &[Option<LocalValueId>],
) -> ADRuleResult<()> {
    let mut linear = vec![false; graph.value_count()];
    for v in inputs {
        linear[v.index()] = true;
    }
    let mut poll = Poll::new();
    for op in graph.operations() {
        poll.tick()?;
        // `None`: a primal computation (`Primary`), every operand fixed. Otherwise one
        // entry per operand (checked when the operation was added).
        let mask = op.role().active_mask();
        let mut any_active = false;
        for (i, input) in op.local_inputs().enumerate() {
            // External operands are primal (fixed) values.
            let reads_linear = input.is_some_and(|v| linear[v.index()]);
            let active = mask.is_some_and(|m| m[i]);
            if active != reads_linear {
                return Err(nonlinear_operand(op.operation(), mask.is_some(), i, active));
            }
            any_active |= active;
        }
        for v in op.outputs() {
            linear[v.index()] = any_active;
        }
    }
    for v in outputs.iter().flatten() {
        if !linear[v.index()] {
            return Err(ADRuleError::NonLinear {
                operation: format!("output {v:?}"),
                message: "a tangent output does not depend on the tangent inputs".into(),
            });
        }
    }
    Ok(())
}

/// The error for operand `i` of `operation`, whose dependence on the tangent inputs
/// disagrees with its role (`linearized`: a `Linearized` role whose mask says `active`;
/// otherwise `Primary`).
#[cold]
#[inline(never)]
fn nonlinear_operand<Op: GraphOperation>(operation: &Op, linearized: bool, i: usize, active: bool) -> ADRuleError {
    let message = if !linearized {
        format!(
            "it has the Primary role but operand {i} depends on the tangent inputs; \
             an operation that reads a tangent must be Linearized"
        )
    } else if active {
        format!("operand {i} is marked active but does not depend on the tangent inputs")
    } else {
        format!("operand {i} is marked fixed but depends on the tangent inputs")
    };
    ADRuleError::NonLinear { operation: format!("{operation:?}"), message }
}

#[cfg(test)]
mod tests {
    use computegraph::{GraphBuilder, KeyInterner, OperationRole, ValueRef::Local};

    use super::*;
    use crate::scalar_ops::{ScalarKey, ScalarOp};

    /// `t·p` with the tangent input `t`, the primal input `p` and the given mask; checked
    /// with `t` as the map's input and the product as its output.
    fn mul_check(role: OperationRole) -> ADRuleResult<()> {
        let mut b = GraphBuilder::<ScalarOp>::with_interner(KeyInterner::new());
        let t = b.add_input(ScalarKey::var(0));
        let p = b.add_input(ScalarKey::var(1));
        let y = b.add_operation(ScalarOp::Mul, vec![Local(t), Local(p)], role)[0];
        check_linear(&b.build(), [t], &[Some(y)])
    }

    /// Each way an operand's mask can disagree with whether it reads a tangent is its own
    /// error, and the right mask passes.
    #[test]
    fn every_mask_error_names_the_operand() {
        let mask = |m: [bool; 2]| OperationRole::Linearized { active_mask: m.to_vec() };
        mul_check(mask([true, false])).unwrap();
        let message = |role| mul_check(role).unwrap_err().to_string();
        assert!(message(mask([false, false])).contains("operand 0 is marked fixed but depends"));
        assert!(message(mask([true, true])).contains("operand 1 is marked active but does not depend"));
        assert!(message(OperationRole::Primary).contains("Primary role but operand 0 depends"));
        // An output that does not depend on the map's input.
        let mut b = GraphBuilder::<ScalarOp>::with_interner(KeyInterner::new());
        let t = b.add_input(ScalarKey::var(0));
        let p = b.add_input(ScalarKey::var(1));
        let y = b.add_operation(ScalarOp::Neg, vec![Local(p)], OperationRole::Primary)[0];
        let e = check_linear(&b.build(), [t], &[Some(y)]).unwrap_err();
        assert!(e.to_string().contains("does not depend on the tangent inputs"), "{e}");
    }

    /// `t·p` as a map of `t`, wrapped by `try_new` (the role must be linear).
    fn scaled() -> (LinearizedGraph<ScalarOp>, Arc<Graph<ScalarOp>>, LocalValueId) {
        let mut b = GraphBuilder::<ScalarOp>::with_interner(KeyInterner::new());
        let t = b.add_input(ScalarKey::var(0));
        let p = b.add_input(ScalarKey::var(1));
        let role = OperationRole::Linearized { active_mask: vec![true, false] };
        let y = b.add_operation(ScalarOp::Mul, vec![Local(t), Local(p)], role)[0];
        let g = Arc::new(b.build());
        (LinearizedGraph::try_new(g.clone(), vec![(ScalarKey::var(0), t)], vec![Some(y), None]).unwrap(), g, p)
    }

    /// The standalone program is compiled on the first call only, and clones share it.
    #[test]
    fn the_standalone_program_is_compiled_once_and_shared_by_clones() {
        let (lin, _, _) = scaled();
        let copy = lin.clone();
        assert!(lin.standalone.get().is_none());
        let primal = |k: &ValueKey<ScalarOp>| (*k == ValueKey::Input(ScalarKey::var(1))).then_some(&3.0);
        assert_eq!(lin.eval_standalone(&mut (), &[&2.0], primal).unwrap(), vec![Some(6.0), None]);
        let first = lin.standalone.get().map(|s| &s.program as *const CompiledProgram<ScalarOp>);
        assert!(first.is_some());
        assert_eq!(copy.eval_standalone(&mut (), &[&0.5], primal).unwrap(), vec![Some(1.5), None]);
        assert_eq!(copy.standalone.get().map(|s| &s.program as *const CompiledProgram<ScalarOp>), first);
    }

    /// `try_new` rejects a tangent input whose key is not its value's key (which
    /// `eval_standalone` would bind to the wrong value).
    #[test]
    fn a_tangent_input_must_be_the_graph_input_of_its_key() {
        let (_, g, p) = scaled();
        let e = LinearizedGraph::try_new(g, vec![(ScalarKey::var(0), p)], vec![None]).unwrap_err();
        assert!(e.to_string().contains("is not the graph input"), "{e}");
    }
}
