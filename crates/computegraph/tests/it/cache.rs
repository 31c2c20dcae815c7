//! The compilation cache: hits on rebuilt structure, misses on other structure, LRU
//! eviction with stale handles, and canonical-form keys that ignore input identity.

use std::sync::Arc;

use computegraph::{
    CanonicalForm, CompileCache, GraphBuilder, GraphError, KeyInterner, MaterializedGraph, OperationRole::Primary,
    ValueRef::Local, materialize_merge, resolve, try_compile,
};
use scalar::{ScalarKey, ScalarOp};

use crate::support::{assert_same, compile_checked, eval_vars, fresh};

/// `f(a, b) = sin(a) * b + a` over inputs `a`, `b` (or `a + b` with `op = Add` swapped in).
fn build(
    interner: &Arc<KeyInterner<ScalarOp>>,
    keys: [ScalarKey; 2],
    op: ScalarOp,
) -> (Arc<computegraph::Graph<ScalarOp>>, Vec<computegraph::ValueKey<ScalarOp>>) {
    let mut b = GraphBuilder::with_interner(interner.clone());
    let [ka, kb] = keys;
    let a = b.add_input(ka);
    let bb = b.add_input(kb);
    let s = b.add_operation(ScalarOp::Sin, vec![Local(a)], Primary)[0];
    let m = b.add_operation(op, vec![Local(s), Local(bb)], Primary)[0];
    let y = b.add_operation(ScalarOp::Add, vec![Local(m), Local(a)], Primary)[0];
    b.set_outputs(vec![y]);
    let g = Arc::new(b.build());
    let out = vec![g.global_key(y)];
    (g, out)
}

fn vars() -> [ScalarKey; 2] {
    [ScalarKey::var(0), ScalarKey::var(1)]
}

#[test]
fn hits_on_rebuilt_structure_misses_on_other() {
    let interner = fresh();
    let cache = CompileCache::<ScalarOp>::new(8);
    let (g1, o1) = build(&interner, vars(), ScalarOp::Mul);
    let p1 = cache.get_or_compile(&resolve(vec![g1]), &o1).unwrap();
    // A separately built graph of the same structure: a hit, the same program.
    let (g2, o2) = build(&interner, vars(), ScalarOp::Mul);
    let p2 = cache.get_or_compile(&resolve(vec![g2]), &o2).unwrap();
    assert!(Arc::ptr_eq(&p1, &p2));
    assert_eq!((cache.stats().hits, cache.stats().misses, cache.stats().entries), (1, 1, 1));
    // Another structure (add instead of mul): a miss, another program.
    let (g3, o3) = build(&interner, vars(), ScalarOp::Add);
    let p3 = cache.get_or_compile(&resolve(vec![g3]), &o3).unwrap();
    assert!(!Arc::ptr_eq(&p1, &p3));
    assert_eq!((cache.stats().hits, cache.stats().misses, cache.stats().entries), (1, 2, 2));
    let (a, b) = (0.5f64, 2.0f64);
    assert_same(&eval_vars(&p1, &[a, b]), &[a.sin() * b + a]);
    assert_same(&eval_vars(&p3, &[a, b]), &[(a.sin() + b) + a]);
    // Same structure on another interner: not the same structural key.
    let other = fresh();
    let (g4, o4) = build(&other, vars(), ScalarOp::Mul);
    let p4 = cache.get_or_compile(&resolve(vec![g4]), &o4).unwrap();
    assert!(!Arc::ptr_eq(&p1, &p4));
    assert_eq!(cache.stats().misses, 3);
}

#[test]
fn lru_eviction_makes_handles_stale() {
    let interner = fresh();
    let cache = CompileCache::<ScalarOp, u32>::new(2);
    let program = |op: ScalarOp| {
        let interner = interner.clone();
        move || {
            let (g, o) = build(&interner, vars(), op);
            try_compile(&materialize_merge(&resolve(vec![g]), &o))
        }
    };
    let (ha, pa) = cache.get_or_insert_with(1, program(ScalarOp::Mul)).unwrap();
    let (hb, _) = cache.get_or_insert_with(2, program(ScalarOp::Add)).unwrap();
    assert!(cache.get(ha).is_some() && cache.get(hb).is_some());
    // Touch A: B becomes the least recently used and is the one evicted by C.
    let (ha2, pa2) = cache.get_or_insert_with(1, || panic!("must hit")).unwrap();
    assert_eq!(ha2, ha);
    assert!(Arc::ptr_eq(&pa, &pa2));
    let (hc, _) = cache.get_or_insert_with(3, program(ScalarOp::Mul)).unwrap();
    assert!(cache.get(hb).is_none(), "evicted entry's handle must be stale");
    assert!(cache.get(ha).is_some() && cache.get(hc).is_some());
    assert_eq!(cache.stats().entries, 2);
    // B again: recompiled, with a new handle; the old handle stays stale (no aliasing).
    let (hb2, _) = cache.get_or_insert_with(2, program(ScalarOp::Add)).unwrap();
    assert_ne!(hb2, hb);
    assert!(cache.get(hb).is_none());
    assert!(cache.get(ha).is_none(), "A was least recently used now");
    // clear() stales everything.
    cache.clear();
    assert!(cache.get(hc).is_none() && cache.get(hb2).is_none());
    assert_eq!(cache.stats().entries, 0);
}

#[test]
fn failed_compile_is_not_cached() {
    let cache = CompileCache::<ScalarOp, u32>::new(4);
    let err = GraphError::IdSpaceExhausted { space: "test" };
    assert_eq!(cache.get_or_insert_with(7, || Err(err.clone())).unwrap_err(), err);
    assert_eq!(cache.stats().entries, 0);
    let interner = fresh();
    let (g, o) = build(&interner, vars(), ScalarOp::Mul);
    let (h, _) = cache.get_or_insert_with(7, || try_compile(&materialize_merge(&resolve(vec![g]), &o))).unwrap();
    assert!(cache.get(h).is_some());
}

/// Two graphs that differ only in their input keys have equal canonical forms, so a
/// cache keyed by `canonical_form()` hits; the program works positionally for both.
#[test]
fn canonical_form_key_ignores_input_identity() {
    let interner = fresh();
    let cache = CompileCache::<ScalarOp, CanonicalForm<ScalarOp>>::new(8);
    let tangents = [ScalarKey::var(0).tangent(1), ScalarKey::var(1).tangent(1)];
    let flatten = |keys: [ScalarKey; 2], op: ScalarOp| -> MaterializedGraph<ScalarOp> {
        let (g, o) = build(&interner, keys, op);
        compile_checked(&resolve(vec![g.clone()]), &o).0
    };
    let m1 = flatten(vars(), ScalarOp::Mul);
    let m2 = flatten([ScalarKey::var(5), ScalarKey::var(9)], ScalarOp::Mul);
    let m3 = flatten(tangents, ScalarOp::Mul);
    let m4 = flatten(vars(), ScalarOp::Add);
    // The structural keys differ...
    assert_ne!(m1.output_keys(), m2.output_keys());
    // ...the canonical forms agree exactly when only the input keys differ.
    assert_eq!(m1.canonical_form(), m2.canonical_form());
    assert_eq!(m1.canonical_form(), m3.canonical_form());
    assert_ne!(m1.canonical_form(), m4.canonical_form());
    let (h1, p1) = cache.get_or_insert_with(m1.canonical_form(), || try_compile(&m1)).unwrap();
    let (h2, p2) = cache.get_or_insert_with(m2.canonical_form(), || try_compile(&m2)).unwrap();
    let (_, p3) = cache.get_or_insert_with(m3.canonical_form(), || try_compile(&m3)).unwrap();
    let (h4, _) = cache.get_or_insert_with(m4.canonical_form(), || try_compile(&m4)).unwrap();
    assert_eq!(h1, h2);
    assert_ne!(h1, h4);
    assert!(Arc::ptr_eq(&p1, &p2) && Arc::ptr_eq(&p1, &p3));
    assert_eq!((cache.stats().hits, cache.stats().misses), (2, 2));
    // The shared program evaluates m2's computation when given m2's inputs by position.
    let (a, b) = (1.25f64, -0.5f64);
    assert_same(&p1.eval(&mut (), &[&a, &b]), &[a.sin() * b + a]);
}
