//! Errors are values: one test per error row. Each checks the variant, its fields, and
//! that the message names the offending key, value or operation.

use std::fmt;
use std::sync::Arc;

use computegraph::{
    EvaluableGraphOperation, Graph, GraphBuilder, GraphError, GraphOperation, KeyInterner, OperationRole,
    OperationRole::Primary, Outputs, ValueKey, ValueRef, ValueRef::External, ValueRef::Local, compile,
    materialize_merge, resolve, try_materialize_merge, try_resolve,
};
use scalar::{ScalarKey, ScalarOp};

use crate::support::{compile_checked, eval_vars, fresh};

/// `x0 → op`: a one-operation graph on `interner`; returns the graph and the output key.
fn unary(
    interner: &Arc<KeyInterner<ScalarOp>>,
    op: ScalarOp,
    input: u32,
) -> (Arc<Graph<ScalarOp>>, ValueKey<ScalarOp>) {
    let mut b = GraphBuilder::with_interner(interner.clone());
    let x = b.add_input(ScalarKey::var(input));
    let y = b.add_operation(op, vec![Local(x)], Primary)[0];
    b.set_outputs(vec![y]);
    let g = Arc::new(b.build());
    let k = g.global_key(y);
    (g, k)
}

/// Whether `msg` names `key`: either as the key prints (`ok3.0`, or `ok3@i7.0` on an
/// interner other than #1) or as the interner describes it (`ok3.0 = neg(x0)`).
fn names_key(msg: &str, key: &ValueKey<ScalarOp>) -> bool {
    match key {
        ValueKey::Derived { operation, output_slot } => {
            msg.contains(&format!("{key:?}")) || msg.contains(&format!("{:?}.{output_slot}", operation.id()))
        }
        ValueKey::Input(k) => msg.contains(&format!("{k:?}")),
    }
}

/// Asserts that a failed `try_add_operation` left the builder unchanged and usable:
/// adding a valid operation afterwards builds a graph that verifies and evaluates.
fn assert_builder_untouched(
    mut b: GraphBuilder<ScalarOp>,
    values: usize,
    operations: usize,
    x: computegraph::LocalValueId,
) {
    assert_eq!((b.value_count(), b.operation_count()), (values, operations), "a failed add must add nothing");
    let y = b.add_operation(ScalarOp::Neg, vec![Local(x)], Primary)[0];
    assert_eq!(y.index(), values, "the next value gets the next id");
    b.set_outputs(vec![y]);
    let g = Arc::new(b.build());
    g.verify().unwrap();
    assert_eq!(g.operation_count(), operations + 1);
    assert!(!g.to_dot().contains("ext0"), "a failed add must keep no external reference");
    let (_, p) = compile_checked(&resolve(vec![g.clone()]), &[g.global_key(y)]);
    assert_eq!(eval_vars(&p, &[4.0]), vec![-4.0]);
}

#[test]
fn unresolved_external_derived_key() {
    let interner = fresh();
    let (a, a_key) = unary(&interner, ScalarOp::Exp, 0);
    // B reads A's value by key but neither lists A as a parent nor is resolved with it.
    let mut b = GraphBuilder::with_interner(interner.clone());
    let y = b.add_operation(ScalarOp::Neg, vec![External(a_key.clone())], Primary)[0];
    let b = Arc::new(b.build());
    let view = resolve(vec![b.clone()]);
    assert!(view.resolve_value(&a_key).is_none());
    for err in [
        view.try_resolve_value(&a_key).expect_err("resolve_value must fail"),
        try_materialize_merge(&view, &[b.global_key(y)]).expect_err("materialize must fail"),
        try_materialize_merge(&view, std::slice::from_ref(&a_key)).expect_err("materialize must fail"),
    ] {
        match &err {
            GraphError::UnresolvedKey { key } => assert!(names_key(key, &a_key), "{key:?} should name {a_key:?}"),
            other => panic!("expected UnresolvedKey, got {other:?}"),
        }
        let msg = err.to_string();
        assert!(names_key(&msg, &a_key) && msg.contains("exp"), "message {msg:?} should name {a_key:?} = exp");
    }
    // With A in the view it resolves.
    let (_, p) = compile_checked(&resolve(vec![b.clone(), a]), &[b.global_key(y)]);
    assert_eq!(p.eval(&mut (), &[&0.0]), vec![-1.0]);
    // The cache reports the same error and caches nothing.
    let cache = computegraph::CompileCache::<ScalarOp>::new(4);
    assert!(matches!(cache.get_or_compile(&view, &[b.global_key(y)]), Err(GraphError::UnresolvedKey { .. })));
    assert_eq!(cache.stats().entries, 0);
}

#[test]
fn output_slot_out_of_range() {
    let interner = fresh();
    let (g, key) = unary(&interner, ScalarOp::Sin, 0);
    let ValueKey::Derived { operation, .. } = key else { unreachable!() };
    let bad = ValueKey::Derived { operation, output_slot: 1 };
    let mut b = GraphBuilder::with_interner(interner.clone());
    let x = b.add_input(ScalarKey::var(0));
    let err = b.try_add_operation(ScalarOp::Neg, vec![External(bad.clone())], Primary).unwrap_err();
    assert!(matches!(&err, GraphError::UnresolvedKey { key } if names_key(key, &bad)), "{err:?}");
    assert_builder_untouched(b, 1, 0, x);
    let err = try_materialize_merge(&resolve(vec![g]), std::slice::from_ref(&bad)).unwrap_err();
    assert!(matches!(&err, GraphError::UnresolvedKey { .. }), "{err:?}");
    assert!(names_key(&err.to_string(), &bad), "{err}");
}

#[test]
fn wrong_arity() {
    let interner = fresh();
    let mut b = GraphBuilder::with_interner(interner.clone());
    let x = b.add_input(ScalarKey::var(0));
    let err = b.try_add_operation(ScalarOp::Add, vec![Local(x)], Primary).unwrap_err();
    assert_eq!(err, GraphError::ArityMismatch { operation: "add".into(), expected: 2, found: 1 });
    let msg = err.to_string();
    assert!(msg.contains("`add`") && msg.contains('2') && msg.contains('1'), "{msg}");
    let err = b.try_add_operation(ScalarOp::constant(1.5), vec![Local(x)], Primary).unwrap_err();
    assert_eq!(err, GraphError::ArityMismatch { operation: "const 1.5".into(), expected: 0, found: 1 });
    // The interner checks too.
    let k = interner.intern_input(ScalarKey::var(0));
    let err = interner.intern_operation(&ScalarOp::Neg, &[k, k], &Primary).unwrap_err();
    assert_eq!(err, GraphError::ArityMismatch { operation: "neg".into(), expected: 1, found: 2 });
    assert_builder_untouched(b, 1, 0, x);
}

#[test]
fn active_mask_length_mismatch() {
    let interner = fresh();
    let mut b = GraphBuilder::with_interner(interner.clone());
    let x = b.add_input(ScalarKey::var(0));
    let role = OperationRole::Linearized { active_mask: vec![true] };
    let err = b.try_add_operation(ScalarOp::Mul, vec![Local(x), Local(x)], role.clone()).unwrap_err();
    assert_eq!(err, GraphError::ActiveMaskMismatch { operation: "mul".into(), expected: 2, found: 1 });
    assert!(err.to_string().contains("`mul`"), "{err}");
    let k = interner.intern_input(ScalarKey::var(0));
    let err = interner.intern_operation(&ScalarOp::Mul, &[k, k], &role).unwrap_err();
    assert_eq!(err, GraphError::ActiveMaskMismatch { operation: "mul".into(), expected: 2, found: 1 });
    assert_builder_untouched(b, 1, 0, x);
}

#[test]
fn unknown_local_value() {
    let interner = fresh();
    let mut b = GraphBuilder::with_interner(interner.clone());
    let x = b.add_input(ScalarKey::var(0));
    let ghost = computegraph::LocalValueId::new(7);
    let err = b.try_add_operation(ScalarOp::Add, vec![Local(x), Local(ghost)], Primary).unwrap_err();
    assert_eq!(err, GraphError::UnknownLocalValue { value: "v7".into(), len: 1 });
    assert!(err.to_string().contains("v7"), "{err}");
    let err = b.try_set_outputs(vec![x, ghost]).unwrap_err();
    assert_eq!(err, GraphError::UnknownLocalValue { value: "v7".into(), len: 1 });
    // An operand may not name its own operation's output (it does not exist yet).
    let next = computegraph::LocalValueId::new(1);
    let err = b.try_add_operation(ScalarOp::Neg, vec![Local(next)], Primary).unwrap_err();
    assert_eq!(err, GraphError::UnknownLocalValue { value: "v1".into(), len: 1 });
    assert!(b.try_global_key(ghost).is_err());
    // A failure after an external operand was stored takes that back too.
    let (_, exp_key) = unary(&interner, ScalarOp::Exp, 0);
    let err = b.try_add_operation_from(ScalarOp::Add, &[External(exp_key), Local(ghost)], &Primary).unwrap_err();
    assert_eq!(err, GraphError::UnknownLocalValue { value: "v7".into(), len: 1 });
    assert_builder_untouched(b, 1, 0, x);
    let (g, _) = unary(&interner, ScalarOp::Neg, 0);
    let err = g.try_global_key(ghost).unwrap_err();
    assert_eq!(err, GraphError::UnknownLocalValue { value: "v7".into(), len: 2 });
}

#[test]
fn foreign_key_in_builder_and_materialize() {
    let (mine, theirs) = (fresh(), fresh());
    let (their_graph, their_key) = unary(&theirs, ScalarOp::Cos, 0);
    let name = format!("{their_key:?}");
    let expected = GraphError::ForeignKey { key: name.clone(), key_interner: theirs.id(), used_with: mine.id() };
    // In a builder.
    let mut b = GraphBuilder::with_interner(mine.clone());
    let x = b.add_input(ScalarKey::var(0));
    let err = b.try_add_operation(ScalarOp::Add, vec![Local(x), External(their_key.clone())], Primary).unwrap_err();
    assert_eq!(err, expected);
    let msg = err.to_string();
    assert!(msg.contains(&name), "{msg} should name {name}");
    assert!(msg.contains(&format!("#{}", theirs.id())) && msg.contains(&format!("#{}", mine.id())), "{msg}");
    // In materialize, the resolved view, and operation_parts.
    let (my_graph, _) = unary(&mine, ScalarOp::Cos, 0);
    let view = resolve(vec![my_graph]);
    assert_eq!(try_materialize_merge(&view, std::slice::from_ref(&their_key)).unwrap_err(), expected);
    assert_eq!(view.try_resolve_value(&their_key).unwrap_err(), expected);
    let ValueKey::Derived { operation, .. } = &their_key else { unreachable!() };
    assert!(matches!(mine.operation_parts(operation), Err(GraphError::ForeignKey { .. })));
    assert!(mine.intern_key(&their_key).is_err());
    // The graph of the other interner is fine on its own.
    let (_, p) = compile_checked(&resolve(vec![their_graph]), &[their_key]);
    assert_eq!(p.eval(&mut (), &[&0.0]), vec![1.0]);
    assert_builder_untouched(b, 1, 0, x);
}

#[test]
fn mixed_interners_in_resolve_and_add_parent() {
    let (i1, i2) = (fresh(), fresh());
    let (g1, _) = unary(&i1, ScalarOp::Neg, 0);
    let (g2, _) = unary(&i2, ScalarOp::Neg, 0);
    let err = try_resolve(vec![g1.clone(), g2.clone()]).unwrap_err();
    assert_eq!(err, GraphError::MixedInterners { first: i1.id(), second: i2.id() });
    let msg = err.to_string();
    assert!(msg.contains(&format!("#{}", i1.id())) && msg.contains(&format!("#{}", i2.id())), "{msg}");
    let mut b = GraphBuilder::with_interner(i1.clone());
    let err = b.try_add_parent(g2).unwrap_err();
    assert_eq!(err, GraphError::MixedInterners { first: i1.id(), second: i2.id() });
    // The builder took no parent and still works.
    b.try_add_parent(g1.clone()).unwrap();
    let g = Arc::new(b.build());
    assert_eq!(g.parents().len(), 1);
    assert_eq!(try_resolve(vec![g]).unwrap().graphs().len(), 2);
}

#[test]
fn input_count_mismatch_at_eval() {
    let interner = fresh();
    let mut b = GraphBuilder::with_interner(interner);
    let x = b.add_input(ScalarKey::var(0));
    let y = b.add_input(ScalarKey::var(1));
    let z = b.add_operation(ScalarOp::Mul, vec![Local(x), Local(y)], Primary)[0];
    let g = Arc::new(b.build());
    let p = compile(&materialize_merge(&resolve(vec![g.clone()]), &[g.global_key(z)]));
    for given in [vec![], vec![&1.0], vec![&1.0, &2.0, &3.0]] {
        let err = p.try_eval(&mut (), &given).unwrap_err();
        assert_eq!(err, GraphError::InputCountMismatch { expected: 2, found: given.len() });
        assert!(err.to_string().contains(&format!("given {}", given.len())), "{err}");
    }
    assert_eq!(p.try_eval(&mut (), &[&2.0, &3.0]).unwrap(), vec![6.0]);
}

#[test]
fn unbound_input_by_key() {
    let interner = fresh();
    let mut b = GraphBuilder::with_interner(interner);
    let x = b.add_input(ScalarKey::var(0));
    let t = b.add_input(ScalarKey::var(0).tangent(3));
    let z = b.add_operation(ScalarOp::Add, vec![Local(x), Local(t)], Primary)[0];
    let g = Arc::new(b.build());
    let p = compile(&materialize_merge(&resolve(vec![g.clone()]), &[g.global_key(z)]));
    let one = 1.0;
    let only_var = |k: &ScalarKey| matches!(k, ScalarKey::Var(_)).then_some(&one);
    let err = p.try_eval_by_key(&mut (), only_var).unwrap_err();
    assert_eq!(err, GraphError::UnboundInput { key: "d3(x0)".into() });
    assert!(err.to_string().contains("d3(x0)"), "{err}");
    assert_eq!(p.bind_inputs(only_var).unwrap_err(), err);
    assert_eq!(p.try_eval_by_key(&mut (), |_| Some(&one)).unwrap(), vec![2.0]);
}

/// An operation that declares two outputs (or one) and produces another number.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Liar {
    /// Declares 2 outputs, produces 1.
    TooFew,
    /// Declares 1 output, produces 3.
    TooMany,
    /// Honest: declares 1, produces 1.
    Honest,
}

impl GraphOperation for Liar {
    type Operand = f64;
    type Context = ();
    type InputKey = u32;
    fn input_count(&self) -> usize {
        1
    }
    fn output_count(&self) -> usize {
        match self {
            Liar::TooFew => 2,
            Liar::TooMany | Liar::Honest => 1,
        }
    }
    fn fmt_label(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "liar_{self:?}")
    }
}

impl EvaluableGraphOperation for Liar {
    fn eval_into(&self, _: &mut (), inputs: &[&f64], out: &mut Outputs<'_, f64>) {
        let n = match self {
            Liar::TooFew | Liar::Honest => 1,
            Liar::TooMany => 3,
        };
        out.extend(std::iter::repeat_n(*inputs[0], n));
    }
}

#[test]
fn operation_returning_wrong_output_count() {
    let interner = KeyInterner::<Liar>::new();
    for (op, expected, found) in [(Liar::TooFew, 2, 1), (Liar::TooMany, 1, 3)] {
        let mut b = GraphBuilder::with_interner(interner.clone());
        let x = b.add_input(0);
        let h = b.add_operation(Liar::Honest, vec![ValueRef::Local(x)], Primary)[0];
        let y = b.add_operation(op.clone(), vec![ValueRef::Local(h)], Primary)[0];
        let g = Arc::new(b.build());
        let p = compile(&materialize_merge(&resolve(vec![g.clone()]), &[g.global_key(y)]));
        let err = p.try_eval(&mut (), &[&1.0]).unwrap_err();
        let label = format!("liar_{op:?}");
        assert_eq!(err, GraphError::OutputCountMismatch { operation: label.clone(), expected, found });
        assert!(err.to_string().contains(&format!("`{label}`")), "{err}");
    }
}

/// The id space running out (simulated with an interner value limit; the real limit is
/// 2^32 − 2 keys): building reports `IdSpaceExhausted`, graphs built before still work,
/// and the interner keeps serving the keys it has.
#[test]
fn id_space_exhaustion() {
    let interner = KeyInterner::<ScalarOp>::try_with_value_limit(4).unwrap();
    let mut b = GraphBuilder::with_interner(interner.clone());
    let x = b.add_input(ScalarKey::var(0));
    let y = b.add_input(ScalarKey::var(1));
    let p = b.add_operation(ScalarOp::Mul, vec![Local(x), Local(y)], Primary)[0];
    b.set_outputs(vec![p]);
    let g = Arc::new(b.build()); // three keys: x0, x1, mul
    let key = g.global_key(p);

    // A two-output operation needs two more keys: one too many.
    let mut b = GraphBuilder::with_interner(interner.clone());
    b.add_parent(g.clone());
    let s = b.add_operation(ScalarOp::SinCos, vec![External(key.clone())], Primary);
    b.set_outputs(s.to_vec());
    let err = b.try_build().unwrap_err();
    assert_eq!(err, GraphError::IdSpaceExhausted { space: "value key" });
    assert!(err.to_string().contains("value key id space is exhausted"), "{err}");

    // So does a new input key.
    let mut b = GraphBuilder::with_interner(interner.clone());
    b.add_input(ScalarKey::var(2));
    b.add_input(ScalarKey::var(3));
    assert_eq!(b.try_build().unwrap_err(), GraphError::IdSpaceExhausted { space: "value key" });

    // Nothing was lost: the first graph still compiles and evaluates, and rebuilding what
    // is already interned (no new keys) still works.
    let (_, program) = compile_checked(&resolve(vec![g.clone()]), &[key]);
    assert_eq!(eval_vars(&program, &[3.0, 4.0]), vec![12.0]);
    let mut b = GraphBuilder::with_interner(interner.clone());
    let x = b.add_input(ScalarKey::var(0));
    let y = b.add_input(ScalarKey::var(1));
    let q = b.add_operation(ScalarOp::Mul, vec![Local(x), Local(y)], Primary)[0];
    let again = b.build();
    assert_eq!(again.global_key(q), g.global_key(p));
    assert!(interner.value_count() <= 4);
}

/// A sum of any number of operands.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Sum(usize);

impl GraphOperation for Sum {
    type Operand = f64;
    type Context = ();
    type InputKey = u32;
    fn input_count(&self) -> usize {
        self.0
    }
    fn output_count(&self) -> usize {
        1
    }
}

/// An instruction records its operand count in 16 bits: an operation with more operands
/// is an error of `try_compile`, not a wrapped count (which the verifier would report as
/// an internal error) or a panic.
#[test]
fn too_many_operands_for_one_instruction() {
    let mut b = GraphBuilder::<Sum>::new();
    let x = b.add_input(0);
    let wide = u16::MAX as usize + 1;
    let y = b.add_operation(Sum(wide), vec![ValueRef::Local(x); wide], Primary)[0];
    let ok = b.add_operation(Sum(u16::MAX as usize), vec![ValueRef::Local(x); u16::MAX as usize], Primary)[0];
    let g = Arc::new(b.build());
    let m = materialize_merge(&resolve(vec![g.clone()]), &[g.global_key(y)]);
    let err = computegraph::try_compile(&m).unwrap_err();
    assert_eq!(err, GraphError::IdSpaceExhausted { space: "operands of one instruction (at most 65535)" });
    // 65535 operands still compile.
    let m = materialize_merge(&resolve(vec![g.clone()]), &[g.global_key(ok)]);
    assert_eq!(computegraph::try_compile(&m).unwrap().instruction_count(), 1);
}
