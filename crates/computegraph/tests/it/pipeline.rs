//! The whole pipeline against the scalar reference, CSE exactness, verifiers, and the
//! edge cases of outputs (one output of a multi-output op, inputs as outputs, repeated
//! outputs, zero-input constants).

use std::sync::Arc;

use computegraph::{
    CompiledProgram, EvalState, Graph, GraphBuilder, GraphOperation, MaterializedGraph, MaterializedValueDef,
    OperationId, OperationRole::Primary, Outputs, ValueDef, ValueKey, ValueRef::Local, compile, materialize_merge,
    resolve, try_compile, try_materialize_fragment,
};
use proptest::prelude::*;
use scalar::spec::GraphSpec;
use scalar::workloads::{self, Operands};
use scalar::{ScalarKey, ScalarOp};

use crate::support::{
    assert_same, compile_checked, eval_vars, fresh, inputs_strategy, reachable_counts, same_size_pair, same_value,
    spec_strategy,
};

proptest! {
    #![proptest_config(crate::support::proptest_config())]

    /// Property 1 and 10: for 1-4 fragments, resolving over all fragments or only the
    /// last (through parents), every phase verifies and evaluation equals the reference.
    #[test]
    fn compiled_eval_matches_reference(spec in spec_strategy(), inputs in inputs_strategy()) {
        let inputs = &inputs[..spec.inputs as usize];
        let expected = spec.eval_reference(inputs);
        let interner = fresh();
        let single = spec.build_single(&interner).unwrap();
        single.graphs[0].verify().unwrap();
        for fragments in 1..=4 {
            let built = spec.build(&interner, fragments).unwrap();
            // Structural identity does not depend on how the spec was cut into fragments.
            prop_assert_eq!(&built.outputs, &single.outputs, "fragments = {}", fragments);
            for g in &built.graphs {
                g.verify().unwrap();
            }
            let last = Arc::clone(built.graphs.last().unwrap());
            for view in [resolve(built.graphs.clone()), resolve(vec![last])] {
                prop_assert_eq!(view.graphs().len(), built.graphs.len());
                // Every derived output resolves to an operation whose key it is.
                for key in &built.outputs {
                    match (key, view.resolve_value(key)) {
                        (ValueKey::Input(k), Some(ValueDef::Input(found))) => prop_assert_eq!(k, &found),
                        (ValueKey::Derived { operation, output_slot }, Some(ValueDef::Operation { graph, operation: op, output_slot: slot })) => {
                            prop_assert_eq!(graph.operation(op).key(), *operation);
                            prop_assert_eq!(slot, *output_slot);
                        }
                        (k, d) => prop_assert!(false, "{:?} resolved to {:?}", k, d),
                    }
                }
                let (m, program) = compile_checked(&view, &built.outputs);
                for k in m.input_keys() {
                    prop_assert!(matches!(k, ScalarKey::Var(i) if *i < spec.inputs), "{:?}", k);
                }
                assert_same(&eval_vars(&program, inputs), &expected);
                // A reused evaluation state gives the same answer, twice.
                let refs = program.bind_inputs(|k| match k {
                    ScalarKey::Var(i) => inputs.get(*i as usize),
                    ScalarKey::Tangent(_) => None,
                }).unwrap();
                let mut state = EvalState::new();
                for _ in 0..2 {
                    assert_same(&program.eval_with(&mut state, &mut (), &refs).unwrap(), &expected);
                }
            }
        }
    }

    /// Property 2: materialize merges exactly the structurally equal operations: its
    /// operation count is the number of nodes of `spec.dedup()` reachable from the outputs.
    #[test]
    fn materialize_dedups_exactly_structural_duplicates(spec in spec_strategy(), fragments in 1usize..=4) {
        use computegraph::GraphOperation;
        let deduped = spec.dedup();
        let (nodes, inputs) = reachable_counts(&deduped);
        let interner = fresh();
        let built = spec.build(&interner, fragments).unwrap();
        let m = materialize_merge(&resolve(built.graphs.clone()), &built.outputs);
        prop_assert_eq!(m.operation_count(), nodes);
        prop_assert_eq!(m.inputs().len(), inputs);
        let values = inputs + m.operations().map(|o| o.operation().output_count()).sum::<usize>();
        prop_assert_eq!(m.value_count(), values);
        // No two materialized operations share a key (verify checks values; check ops too).
        let mut keys: Vec<_> = m.operations().map(|o| o.key().id()).collect();
        keys.sort();
        keys.dedup();
        prop_assert_eq!(keys.len(), nodes);
    }

    /// Fragment materialization: the last of 1-4 fragments materialized alone reads what
    /// earlier fragments define as external values (its own operations only, each key
    /// once), and evaluating it with those bound to the values the whole view computes for
    /// them gives the whole view's outputs.
    #[test]
    fn a_fragment_alone_reads_other_fragments_by_key(
        spec in spec_strategy(),
        inputs in inputs_strategy(),
        fragments in 1usize..=4,
    ) {
        let inputs = &inputs[..spec.inputs as usize];
        let interner = fresh();
        let built = spec.build(&interner, fragments).unwrap();
        let last = Arc::clone(built.graphs.last().unwrap());
        // Outputs the last fragment does not define are external values at once.
        let m = try_materialize_fragment(&last, &built.outputs).unwrap();
        m.verify().unwrap();
        check_value_defs(&m);
        prop_assert_eq!(m.output_keys(), built.outputs.clone());
        prop_assert!(m.operation_count() <= last.operation_count());
        let own: std::collections::HashSet<_> =
            (0..last.value_count()).map(|v| last.key_id(computegraph::LocalValueId::new(v))).collect();
        for op in m.operations() {
            for v in op.outputs() {
                prop_assert!(own.contains(&m.key_id(v)), "{:?} is not defined in the fragment", v);
            }
        }
        for (&v, k) in m.externals().iter().zip(m.external_keys()) {
            prop_assert!(!k.is_input());
            prop_assert!(!own.contains(&m.key_id(v)), "external value {:?} is defined in the fragment", k);
        }
        // The external values, from the whole view.
        let view = resolve(built.graphs.clone());
        let (_, whole) = compile_checked(&view, m.external_keys());
        let external_values = eval_vars(&whole, inputs);
        let program = try_compile(&m).unwrap();
        program.verify_against(&m).unwrap();
        prop_assert_eq!(program.external_keys(), m.external_keys());
        let bound = program
            .bind_inputs_and_externals(
                |k| match k {
                    ScalarKey::Var(i) => inputs.get(*i as usize),
                    ScalarKey::Tangent(_) => None,
                },
                |k| m.external_keys().iter().position(|l| l == k).map(|i| &external_values[i]),
            )
            .unwrap();
        let (_, reference) = compile_checked(&view, &built.outputs);
        let expected = eval_vars(&reference, inputs);
        assert_same(&program.eval(&mut (), &bound), &expected);
        // The parallel evaluator binds external values the same way.
        program.verify_parallel_against(&m).unwrap();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        assert_same(&program.try_eval_parallel(Some(&pool), &mut (), &bound).unwrap(), &expected);
        // Binding by input key alone names the first external value.
        if let Some(first) = m.external_keys().first() {
            let err = program.bind_inputs(|_| Some(&0.0)).unwrap_err().to_string();
            prop_assert!(err.contains(&format!("{first:?}")), "{}", err);
        }
    }

    /// `Graph::distinct_keys` holds exactly when no two local values share a key, whether
    /// keys increase with local ids or not: before the spec, a graph on the same interner
    /// adds the spec's nodes that read inputs only, in reverse order, so that the spec's
    /// graphs meet those keys out of order.
    #[test]
    fn distinct_keys_holds_exactly_when_no_key_repeats(spec in spec_strategy(), fragments in 1usize..=4) {
        let interner = fresh();
        let first = leaves_in_reverse(&spec).build(&interner, 1).unwrap();
        let built = spec.build(&interner, fragments).unwrap();
        for g in first.graphs.iter().chain(&built.graphs) {
            let mut keys: Vec<_> = (0..g.value_count()).map(|v| g.key_id(computegraph::LocalValueId::new(v))).collect();
            let in_order = keys.windows(2).all(|w| w[0] < w[1]);
            keys.sort();
            keys.dedup();
            let distinct = keys.len() == g.value_count();
            prop_assert_eq!(g.distinct_keys().is_some(), distinct, "keys in local order: {}", in_order);
        }
    }

    /// A view of one fragment materializes by a shorter path (emit in local order, no
    /// key-indexed table of definitions): it must give what the general path gives, which
    /// a view of the same fragment and an empty graph takes. With `leaves_first`, a graph
    /// interned before defines some of the fragment's keys in reverse order, so the
    /// fragment meets its keys out of order and the short path falls back.
    #[test]
    fn one_fragment_materializes_as_the_general_path_does(spec in spec_strategy(), leaves_first in any::<bool>()) {
        let interner = fresh();
        let _first = leaves_first.then(|| leaves_in_reverse(&spec).build(&interner, 1).unwrap());
        let built = spec.build_single(&interner).unwrap();
        let (alone, general) = alone_and_general(&built);
        alone.verify().unwrap();
        prop_assert_eq!(alone.to_dot(), general.to_dot());
        prop_assert_eq!(value_keys(&alone), value_keys(&general));
        prop_assert_eq!(alone.output_keys(), general.output_keys());
        prop_assert_eq!(compile(&alone).to_dot(), compile(&general).to_dot());
    }

    /// The materialized key columns are runs of consecutive keys until a key breaks them
    /// (`materialize/keys.rs`): on random fragments, with operations shared with a graph
    /// interned before (`shared`: none, the spec's leaves in reverse order, or the whole
    /// spec, so that every key is an earlier graph's) and partial views (a subset of the
    /// outputs, which prunes keys), every value's key and its operation's key read as the
    /// fragment's own columns give them (vectors: the reference), in increasing key order,
    /// and the graph is the general path's.
    #[test]
    fn key_runs_read_as_the_general_path_does(
        spec in spec_strategy(),
        shared in 0usize..3,
        keep in proptest::collection::vec(any::<bool>(), 6),
    ) {
        let interner = fresh();
        let _first = match shared {
            1 => Some(leaves_in_reverse(&spec).build(&interner, 1).unwrap()),
            2 => Some(spec.build_single(&interner).unwrap()),
            _ => None,
        };
        let mut built = spec.build_single(&interner).unwrap();
        let kept: Vec<_> = built.outputs.iter().zip(keep.iter().cycle()).filter(|(_, k)| **k).map(|(o, _)| o.clone()).collect();
        built.outputs = kept;
        let (alone, general) = alone_and_general(&built);
        alone.verify().unwrap();
        let g = &built.graphs[0];
        let fragment: std::collections::HashMap<_, _> = (0..g.value_count())
            .map(computegraph::LocalValueId::new)
            .map(|v| (g.key_id(v), g.global_key(v)))
            .collect();
        for v in (0..alone.value_count()).map(computegraph::ValueId::new) {
            prop_assert_eq!(Some(&alone.value_key(v)), fragment.get(&alone.key_id(v)), "{:?}", v);
        }
        prop_assert!(value_keys(&alone).windows(2).all(|w| w[0] < w[1]));
        prop_assert_eq!(value_keys(&alone), value_keys(&general));
        let op_keys = |m: &MaterializedGraph<ScalarOp>| m.operations().map(|o| o.key()).collect::<Vec<_>>();
        prop_assert_eq!(op_keys(&alone), op_keys(&general));
        prop_assert_eq!(alone.output_keys(), general.output_keys());
        prop_assert_eq!(alone.to_dot(), general.to_dot());
        prop_assert_eq!(compile(&alone).to_dot(), compile(&general).to_dot());
    }
}

/// Emit in local order renumbers a fragment three ways (`materialize/local.rs`): keys as
/// ids, keys' ranks once a key is pruned, and a key-indexed map once keys come out of
/// order (an input interned after operations). Each gives the general path's graph.
#[test]
fn every_renumbering_materializes_as_the_general_path_does() {
    for (pruned, late_input) in [(false, false), (true, false), (false, true), (true, true)] {
        let interner = fresh();
        let mut b = GraphBuilder::<ScalarOp>::with_interner(Arc::clone(&interner));
        let x = b.add_input(ScalarKey::var(0));
        let mut v = x;
        let mut outputs = Vec::new();
        for i in 0..6000 {
            let op = if i % 3 == 0 { ScalarOp::Sin } else { ScalarOp::Neg };
            v = b.add_operation(op, vec![Local(v)], Primary)[0];
            if pruned && i % 1000 == 500 {
                // Nobody reads this one: its key is skipped.
                b.add_operation(ScalarOp::Cos, vec![Local(v)], Primary);
            }
            if late_input && i == 3000 {
                let y = b.add_input(ScalarKey::var(1));
                v = b.add_operation(ScalarOp::Add, vec![Local(v), Local(y)], Primary)[0];
            }
        }
        outputs.push(v);
        b.set_outputs(outputs);
        let g = Arc::new(b.build());
        let built = scalar::spec::BuiltSpec { graphs: vec![Arc::clone(&g)], outputs: vec![g.global_key(v)] };
        let (alone, general) = alone_and_general(&built);
        alone.verify().unwrap();
        assert_eq!(alone.to_dot(), general.to_dot(), "pruned {pruned}, late input {late_input}");
        assert_eq!(value_keys(&alone), value_keys(&general));
        let vars = [0.3, 0.7];
        assert_eq!(
            compile(&alone).eval(&mut (), &vars[..alone.inputs().len()].iter().collect::<Vec<_>>()),
            compile(&general).eval(&mut (), &vars[..general.inputs().len()].iter().collect::<Vec<_>>())
        );
    }
}

/// The nodes of `spec` that read inputs only, in reverse order, as a spec of their own.
fn leaves_in_reverse(spec: &GraphSpec) -> GraphSpec {
    use computegraph::GraphOperation;
    let mut leaves = GraphSpec { inputs: spec.inputs, ..Default::default() };
    let mut at = 0;
    let mut reads_inputs = Vec::new();
    for op in &spec.ops {
        let args = &spec.args[at..at + op.input_count()];
        at += args.len();
        if args.iter().all(|&a| a < spec.inputs) {
            reads_inputs.push((*op, args));
        }
    }
    for (op, args) in reads_inputs.into_iter().rev() {
        leaves.push(op, args);
    }
    leaves
}

/// The one fragment of `built` materialized alone (the short path) and beside an empty
/// graph (the general path).
fn alone_and_general(
    built: &scalar::spec::BuiltSpec,
) -> (computegraph::MaterializedGraph<ScalarOp>, computegraph::MaterializedGraph<ScalarOp>) {
    let g = Arc::clone(&built.graphs[0]);
    let empty = Arc::new(GraphBuilder::<ScalarOp>::with_interner(Arc::clone(g.interner())).build());
    let alone = materialize_merge(&resolve(vec![Arc::clone(&g)]), &built.outputs);
    let general = materialize_merge(&resolve(vec![g, empty]), &built.outputs);
    (alone, general)
}

/// The key of every value of `m`, in value order.
fn value_keys(m: &computegraph::MaterializedGraph<ScalarOp>) -> Vec<computegraph::KeyId> {
    (0..m.value_count()).map(|v| m.key_id(computegraph::ValueId::new(v))).collect()
}

/// The short path at the size where a materialized graph reads its operations from the
/// store (4096 operations and more), on a window DAG with repeated operations.
#[test]
fn a_large_fragment_materializes_as_the_general_path_does() {
    let spec = workloads::random_dag(20_000, Operands::Window(1024), 0.3, 1);
    let built = spec.build_single(&fresh()).unwrap();
    let (alone, general) = alone_and_general(&built);
    assert!(alone.operation_count() > 4096, "{}", alone.operation_count());
    alone.verify().unwrap();
    assert_eq!(alone.to_dot(), general.to_dot());
    assert_eq!(value_keys(&alone), value_keys(&general));
    assert_eq!(compile(&alone).to_dot(), compile(&general).to_dot());
}

/// Property 10 on the benchmark shapes (larger than the proptest specs).
#[test]
fn verifiers_pass_on_workload_shapes() {
    let specs: Vec<GraphSpec> = vec![
        workloads::random_dag(3000, Operands::Window(16), 0.2, 1),
        workloads::random_dag(3000, Operands::Uniform, 0.3, 2),
        workloads::layered(32, 40, 3),
        workloads::chain(2000, 4),
    ];
    for (n, spec) in specs.iter().enumerate() {
        let inputs = workloads::inputs_for(spec, n as u64);
        let expected = spec.eval_reference(&inputs);
        let interner = fresh();
        for fragments in [1, 3] {
            let built = spec.build(&interner, fragments).unwrap();
            for g in &built.graphs {
                g.verify().unwrap();
            }
            let (m, program) = compile_checked(&resolve(built.graphs.clone()), &built.outputs);
            assert_eq!(m.operation_count(), reachable_counts(&spec.dedup()).0, "spec {n}");
            assert_same(&eval_vars(&program, &inputs), &expected);
        }
    }
}

/// A graph large enough, with operands drawn from all of it, that build, materialize and
/// compile prefetch operand entries (most operands lie more than 2^16 values before their reader,
/// `prefetch.rs`): the prefetching paths give the same graph, program and values, in one
/// fragment and in several.
#[test]
fn far_operands_compile_and_evaluate_correctly() {
    let spec = workloads::random_dag(600_000, Operands::Uniform, 0.3, 9);
    let inputs = workloads::inputs_for(&spec, 3);
    let expected = spec.eval_reference(&inputs);
    let interner = fresh();
    for fragments in [1, 4] {
        let built = spec.build(&interner, fragments).unwrap();
        let (m, program) = compile_checked(&resolve(built.graphs.clone()), &built.outputs);
        assert_eq!(m.operation_count(), reachable_counts(&spec.dedup()).0);
        assert_same(&eval_vars(&program, &inputs), &expected);
    }
}

/// A large materialized graph reads its operations from the interner's store and owns
/// what it reads: once every fragment is dropped and the interner has reclaimed their
/// chunks, it still verifies, compiles and evaluates as the reference does, keeping no
/// copy of its operations beyond the chunk that was open.
#[test]
fn a_large_materialized_graph_outlives_its_fragments() {
    let spec = workloads::random_dag(150_000, Operands::Window(1024), 0.3, 11);
    let inputs = workloads::inputs_for(&spec, 3);
    let expected = spec.eval_reference(&inputs);
    let interner = fresh();
    let built = spec.build_single(&interner).unwrap();
    let flat = materialize_merge(&resolve(built.graphs.clone()), &built.outputs);
    let live = interner.live_operation_count();
    drop(built);
    assert!(interner.live_operation_count() < live / 2, "the fragments' chunks were reclaimed");
    let own = flat.column_bytes().into_iter().find(|c| c.0 == "ops").unwrap().1;
    let n_ops = flat.operation_count();
    assert!(own <= std::mem::size_of::<ScalarOp>() * 1024 + 8 * (n_ops / 1024 + 2), "ops: {own} bytes for {n_ops}");
    flat.verify().unwrap();
    assert_same(&eval_vars(&compile(&flat), &inputs), &expected);
}

/// Operands of 128 bytes, drawn from the whole of a 200k-operation graph: the slot file
/// is large enough and the operands far enough that sequential evaluation prefetches
/// operand slots ahead; the values are still those of a direct evaluation.
#[test]
fn far_operands_in_a_large_slot_file_evaluate_correctly() {
    #[derive(Clone, Debug, Hash, PartialEq, Eq)]
    struct Blend(u32);
    type Block = [u64; 16];
    fn blend(tag: u32, a: &Block, b: &Block) -> Block {
        std::array::from_fn(|k| {
            (a[k] ^ b[(k + tag as usize) % 16].rotate_left(k as u32)).wrapping_mul(0x9E37_79B9_7F4A_7C15)
        })
    }
    impl computegraph::GraphOperation for Blend {
        type Operand = Block;
        type Context = ();
        type InputKey = u32;
        fn input_count(&self) -> usize {
            2
        }
        fn output_count(&self) -> usize {
            1
        }
    }
    impl computegraph::EvaluableGraphOperation for Blend {
        fn eval_into(&self, _: &mut (), inputs: &[&Block], out: &mut Outputs<'_, Block>) {
            out.push(blend(self.0, inputs[0], inputs[1]));
        }
    }

    const INPUTS: usize = 4;
    let mut b = GraphBuilder::<Blend>::with_interner(computegraph::KeyInterner::new());
    let inputs: Vec<Block> = (0..INPUTS as u64).map(|i| std::array::from_fn(|k| i * 31 + k as u64)).collect();
    let mut expected: Vec<Block> = inputs.clone();
    for i in 0..INPUTS {
        b.add_input(i as u32);
    }
    // Every value nobody reads is an output, so that the whole graph is reachable.
    let mut read = vec![false; INPUTS];
    let mut rng = workloads::Rng::new(11);
    let mut pick = |n: usize| rng.below(n as u64) as usize;
    for i in 0..200_000 {
        let n = expected.len();
        let (x, y, tag) = (pick(n), pick(n), (i % 5) as u32);
        read[x] = true;
        read[y] = true;
        read.push(false);
        let v = b.add_operation_from(Blend(tag), &[Local(lv(x)), Local(lv(y))], &Primary).start;
        assert_eq!(v, n);
        expected.push(blend(tag, &expected[x], &expected[y]));
    }
    let outputs: Vec<usize> = (0..expected.len()).filter(|&v| !read[v]).collect();
    b.set_outputs(outputs.iter().map(|&v| lv(v)).collect());
    let g = Arc::new(b.build());
    let keys: Vec<_> = outputs.iter().map(|&v| g.global_key(lv(v))).collect();
    let program = compile(&materialize_merge(&resolve(vec![g]), &keys));
    assert!(program.prefetches_operand_slots(), "{} slots", program.slot_count());
    let refs: Vec<&Block> = inputs.iter().collect();
    let got = program.eval(&mut (), &refs);
    assert_eq!(got, outputs.iter().map(|&v| expected[v]).collect::<Vec<_>>());
}

fn lv(v: usize) -> computegraph::LocalValueId {
    computegraph::LocalValueId::new(v)
}

/// Compile groups independent operations of one variant (`dispatch.rs`): on a random
/// DAG of mixed operations, consecutive instructions change variant far less often than
/// consecutive materialized operations, and the chain (no independent operations) keeps
/// its order.
#[test]
fn compile_groups_operations_by_variant() {
    let switches = |ops: &mut dyn Iterator<Item = ScalarOp>| {
        let ops: Vec<_> = ops.map(|op| std::mem::discriminant(&op)).collect();
        ops.windows(2).filter(|w| w[0] != w[1]).count()
    };
    let spec = workloads::random_dag(20_000, Operands::Window(1024), 0.3, 5);
    let built = spec.build_single(&fresh()).unwrap();
    let (m, program) = compile_checked(&resolve(built.graphs.clone()), &built.outputs);
    assert!(!program.prefetches_operand_slots(), "a slot file of a few KiB is not prefetched");
    let before = switches(&mut m.operations().map(|o| *o.operation()));
    let after =
        switches(&mut (0..program.instruction_count()).map(|i| *m.operation(program.source_operation(i)).operation()));
    assert!(after * 4 < before, "variant switches: {before} in materialized order, {after} compiled");

    let chain = workloads::chain(3000, 6);
    let built = chain.build_single(&fresh()).unwrap();
    let (m, program) = compile_checked(&resolve(built.graphs.clone()), &built.outputs);
    assert!((0..m.operation_count()).all(|i| program.source_operation(i).index() == i));
}

/// `verify_against` can fail: a program checked against a different graph of the same
/// size (the operands of the second operation swapped) is rejected.
#[test]
fn verify_against_rejects_another_graph() {
    let (a, b) = same_size_pair();
    assert_eq!((a.operation_count(), a.value_count()), (b.operation_count(), b.value_count()));
    let pa = compile(&a);
    assert!(pa.verify_against(&a).is_ok());
    match pa.verify_against(&b) {
        Err(computegraph::GraphError::Invalid { phase, .. }) => assert_eq!(phase, "compiled program"),
        other => panic!("expected Invalid, got {other:?}"),
    }
}

/// Only one output of a two-output operation is requested: the operation is kept, the
/// other output is dead, and the value is right.
#[test]
fn one_output_of_sincos() {
    let interner = fresh();
    let mut b = GraphBuilder::with_interner(interner);
    let x = b.add_input(ScalarKey::var(0));
    let sc = b.add_operation(ScalarOp::SinCos, vec![Local(x)], Primary);
    assert_eq!(sc.len(), 2);
    b.set_outputs(vec![sc[1]]);
    let g = Arc::new(b.build());
    let cos = g.global_key(sc[1]);
    let sin = g.global_key(sc[0]);
    assert_ne!(cos, sin);
    match (&sin, &cos) {
        (ValueKey::Derived { operation: a, output_slot: 0 }, ValueKey::Derived { operation: b, output_slot: 1 }) => {
            assert_eq!(a, b)
        }
        other => panic!("sincos outputs should be slots 0 and 1 of one operation: {other:?}"),
    }
    let view = resolve(vec![g.clone()]);
    let x0 = 0.7f64;
    let (m, p) = compile_checked(&view, std::slice::from_ref(&cos));
    assert_eq!(m.operation_count(), 1);
    assert_eq!(m.value_count(), 3);
    assert_same(&p.eval(&mut (), &[&x0]), &[x0.cos()]);
    // Both, in reverse order, and the cosine twice.
    let (_, p) = compile_checked(&view, &[cos.clone(), sin.clone(), cos.clone()]);
    assert_same(&p.eval(&mut (), &[&x0]), &[x0.cos(), x0.sin(), x0.cos()]);
}

/// Graph outputs that are inputs directly: no instruction, inputs passed through, in
/// the requested order, repeated as requested.
#[test]
fn inputs_as_outputs() {
    let interner = fresh();
    let mut b = GraphBuilder::with_interner(interner);
    let x = b.add_input(ScalarKey::var(0));
    let y = b.add_input(ScalarKey::var(1));
    b.set_outputs(vec![y, x, y]);
    let g = Arc::new(b.build());
    let keys: Vec<_> = g.outputs().iter().map(|&v| g.global_key(v)).collect();
    assert_eq!(keys[0], ValueKey::Input(ScalarKey::var(1)));
    let (m, p) = compile_checked(&resolve(vec![g.clone()]), &keys);
    assert_eq!(m.operation_count(), 0);
    assert_eq!(p.instruction_count(), 0);
    assert_eq!(m.input_keys(), &[ScalarKey::var(0), ScalarKey::var(1)], "inputs in key-interning order");
    assert_same(&eval_vars(&p, &[2.0, -3.0]), &[-3.0, 2.0, -3.0]);
    // Mixed: an input, a derived value reading it, the input again.
    let mut b = GraphBuilder::with_interner(g.interner().clone());
    let x = b.add_input(ScalarKey::var(0));
    let n = b.add_operation(ScalarOp::Neg, vec![Local(x)], Primary)[0];
    let g = Arc::new(b.build());
    let keys = [g.global_key(x), g.global_key(n), g.global_key(x)];
    let (_, p) = compile_checked(&resolve(vec![g]), &keys);
    assert_same(&eval_vars(&p, &[5.0]), &[5.0, -5.0, 5.0]);
}

/// The same derived output requested twice (and three times, interleaved).
#[test]
fn same_output_requested_twice() {
    let interner = fresh();
    let mut b = GraphBuilder::with_interner(interner);
    let x = b.add_input(ScalarKey::var(0));
    let e = b.add_operation(ScalarOp::Exp, vec![Local(x)], Primary)[0];
    let s = b.add_operation(ScalarOp::Mul, vec![Local(e), Local(x)], Primary)[0];
    let g = Arc::new(b.build());
    let (ke, ks) = (g.global_key(e), g.global_key(s));
    let (m, p) = compile_checked(&resolve(vec![g]), &[ks.clone(), ke.clone(), ks.clone(), ke.clone(), ks]);
    assert_eq!(m.operation_count(), 2);
    assert_eq!(m.outputs()[0], m.outputs()[2]);
    let x0 = 0.3f64;
    let (ev, sv) = (x0.exp(), x0.exp() * x0);
    let expected = [sv, ev, sv, ev, sv];
    // Evaluate twice: outputs are moved out only at their last mention.
    for _ in 0..2 {
        assert_same(&p.eval(&mut (), &[&x0]), &expected);
    }
}

/// Zero-input constants: a program with no inputs; equal constants merge; `0.0` and
/// `-0.0` (and NaN) are distinct constants by bits.
#[test]
fn zero_input_constants() {
    let interner = fresh();
    let mut b = GraphBuilder::with_interner(interner);
    let c1 = b.add_operation(ScalarOp::constant(1.5), vec![], Primary)[0];
    let c2 = b.add_operation(ScalarOp::constant(1.5), vec![], Primary)[0];
    let z = b.add_operation(ScalarOp::constant(0.0), vec![], Primary)[0];
    let nz = b.add_operation(ScalarOp::constant(-0.0), vec![], Primary)[0];
    let nan = b.add_operation(ScalarOp::constant(f64::NAN), vec![], Primary)[0];
    let sum = b.add_operation(ScalarOp::Add, vec![Local(c1), Local(c2)], Primary)[0];
    let g = Arc::new(b.build());
    assert_eq!(g.global_key(c1), g.global_key(c2));
    assert_ne!(g.global_key(z), g.global_key(nz));
    let keys: Vec<_> = [sum, z, nz, c2, nan].iter().map(|&v| g.global_key(v)).collect();
    let (m, p) = compile_checked(&resolve(vec![g]), &keys);
    assert_eq!(m.operation_count(), 5, "const 1.5 merged: const 1.5, add, 0, -0, NaN");
    assert!(m.inputs().is_empty());
    assert!(p.input_keys().is_empty());
    let out = p.eval(&mut (), &[]);
    assert_same(&out, &[3.0, 0.0, -0.0, 1.5, f64::NAN]);
    assert!(same_value(out[2], -0.0) && !same_value(out[2], 0.0));
}

/// An empty output list gives an empty program that still evaluates.
#[test]
fn no_outputs() {
    let interner = fresh();
    let mut b = GraphBuilder::with_interner(interner);
    let x = b.add_input(ScalarKey::var(0));
    b.add_operation(ScalarOp::Neg, vec![Local(x)], Primary);
    let g = Arc::new(b.build());
    let (m, p) = compile_checked(&resolve(vec![g]), &[]);
    assert_eq!((m.operation_count(), m.value_count()), (0, 0));
    assert_eq!(p.eval(&mut (), &[]), Vec::<f64>::new());
}

/// `column_bytes` of every phase's structure names each column once, sums to its
/// `heap_bytes`, and gives each large column between its length and twice its length
/// times its entry size (lengths counted from the spec and the phases' own counts).
#[test]
fn column_bytes_cover_every_large_column_once() {
    let spec = workloads::random_dag(20_000, Operands::Window(1024), 0.3, 7);
    let (values, operations, operands) = (spec.value_count(), spec.ops.len(), spec.args.len());
    let interner = fresh();
    let built = spec.build_single(&interner).unwrap();
    let graph = &built.graphs[0];
    let flat = materialize_merge(&resolve(built.graphs.clone()), &built.outputs);
    check_value_defs(&flat);
    let program = compile(&flat);
    let distinct = interner.live_operation_count();
    let op = std::mem::size_of::<ScalarOp>();
    let check = |what: &str, columns: Vec<(&'static str, usize)>, total: usize, expected: &[(&str, usize)]| {
        let mut names: Vec<&str> = columns.iter().map(|c| c.0).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), columns.len(), "{what}: a column named twice");
        assert_eq!(columns.iter().map(|c| c.1).sum::<usize>(), total, "{what}: heap_bytes is not the sum");
        for &(name, len) in expected {
            let bytes = columns.iter().find(|c| c.0 == name).unwrap_or_else(|| panic!("{what}: no {name}")).1;
            assert!((len..=2 * len).contains(&bytes), "{what}: {name} holds {bytes} bytes for {len}");
        }
    };
    check(
        "fragment",
        graph.column_bytes(),
        graph.heap_bytes(),
        &[
            ("value_op", 4 * values),
            ("value_key", 4 * values),
            ("op_key", 4 * operations),
            ("op_role", 0),
            ("op_inputs (starts)", 4 * operations),
            ("op_inputs (operands)", 4 * operands),
            ("op_first_output", 4 * operations),
        ],
    );
    // A graph this large reads its operations from the interner's store (ADR 0017): its
    // own `ops` are the copy of the chunk still open at build and the list of shared chunks.
    let own = graph.column_bytes().into_iter().find(|c| c.0 == "ops").unwrap().1;
    assert!(
        own <= op * 1024 + 8 * (operations / 1024 + 2),
        "fragment: ops holds {own} bytes for {operations} operations"
    );
    check(
        "interner",
        interner.column_bytes(),
        interner.heap_bytes(),
        &[
            ("ops", op * distinct),
            ("op inputs (starts)", 4 * distinct),
            ("op first_output", 4 * distinct),
            ("op_table", 8 * distinct * 4 / 3),
        ],
    );
    let (m_values, m_ops) = (flat.value_count(), flat.operation_count());
    // A fragment built alone, inputs first, nothing pruned: its values' keys and its
    // operations' keys are consecutive, so the two key columns are runs and hold no
    // bytes (`materialize/keys.rs`).
    check(
        "materialized",
        flat.column_bytes(),
        flat.heap_bytes(),
        &[
            ("value_key", 0),
            ("op_key", 0),
            ("op_role", 0), // every operation is `Primary`
            ("op_first_output", 4 * m_ops),
        ],
    );
    // So does a materialized graph this large (ADR 0017, step 4).
    let own = flat.column_bytes().into_iter().find(|c| c.0 == "ops").unwrap().1;
    assert!(own <= op * 1024 + 8 * (m_ops / 1024 + 2), "materialized: ops holds {own} bytes for {m_ops} operations");
    // The value columns are sized to the values, not doubled when two-output operations
    // (`sincos`) pass a capacity counted in operations.
    assert!(m_values > m_ops + spec.inputs as usize, "the workload has two-output operations");
    let bytes = flat.column_bytes().into_iter().find(|c| c.0 == "value_op").unwrap().1;
    assert!(bytes <= 4 * m_values * 9 / 8, "value_op: {bytes} bytes for {m_values} values");
    let slots: usize = flat.operations().map(|o| o.inputs().len() + o.outputs().len()).sum();
    check("program", program.column_bytes(), program.heap_bytes(), &[("instrs", 8 * m_ops), ("args", 4 * slots)]);
    // Fewer distinct operations than generated: the interner holds the deduplicated set.
    assert!(distinct < operations && m_ops <= distinct, "{distinct} of {operations}, {m_ops} materialized");
}

/// A materialized graph keeps no role column while its operations are `Primary`, and
/// starts one at the first that is not: every operation reports the role it was added
/// with, whichever operation comes first, and the graph verifies.
#[test]
fn materialized_roles_survive_the_column_starting_late() {
    use computegraph::OperationRole::Linearized;
    let linear = |mask: &[bool]| Linearized { active_mask: mask.to_vec() };
    for first_linear in 0..4 {
        let mut b = GraphBuilder::<ScalarOp>::with_interner(fresh());
        let x = b.add_input(ScalarKey::var(0));
        let y = b.add_input(ScalarKey::var(1));
        let mut last = x;
        let mut expected = Vec::new();
        for i in 0..4 {
            let role = if i < first_linear { Primary } else { linear(&[i % 2 == 0, true]) };
            last = b.add_operation(ScalarOp::Mul, vec![Local(last), Local(y)], role.clone())[0];
            expected.push(role);
        }
        b.set_outputs(vec![last]);
        let g = Arc::new(b.build());
        let m = materialize_merge(&resolve(vec![g.clone()]), &[g.global_key(last)]);
        m.verify().unwrap();
        let roles: Vec<_> = m.operations().map(|o| o.role().clone()).collect();
        assert_eq!(roles, expected, "first linear operation: {first_linear}");
        let bytes = m.column_bytes().into_iter().find(|c| c.0 == "op_role").unwrap().1;
        assert_eq!(bytes == 0, first_linear == 4, "first linear operation: {first_linear}");
    }
}

/// Every value's `value_def` agrees with the graph's own lists: an input is at its place in
/// `inputs` with its key, an external value at its place in `externals` with its key, and
/// an output is the given output of the given operation; past the last value there is none.
fn check_value_defs(m: &computegraph::MaterializedGraph<ScalarOp>) {
    use computegraph::{MaterializedValueDef, ValueId};
    for v in (0..m.value_count()).map(ValueId::new) {
        match m.value_def(v).unwrap() {
            MaterializedValueDef::Input(k) => {
                let i = m.inputs().iter().position(|&w| w == v).expect("an input value is listed");
                assert_eq!(&m.input_keys()[i], k, "{v:?}");
            }
            MaterializedValueDef::External(k) => {
                let i = m.externals().iter().position(|&w| w == v).expect("an external value is listed");
                assert_eq!(&m.external_keys()[i], k, "{v:?}");
            }
            MaterializedValueDef::Output { operation, output_slot } => {
                assert_eq!(m.operation(operation).outputs().nth(output_slot as usize), Some(v));
            }
            _ => unreachable!("no other definitions"),
        }
    }
    assert!(m.value_def(ValueId::new(m.value_count())).is_none());
}

/// A DAG of `n` operations from `op` (given the operation's index and the random
/// stream), operands drawn from the last 40 values (so that windows hold dependent
/// operations); of the values nobody reads, those `output` keeps are the outputs. Returns
/// the graph and its outputs' keys.
fn recent_operands_dag(
    n: usize,
    seed: u64,
    mut op: impl FnMut(usize, &mut workloads::Rng) -> ScalarOp,
    mut output: impl FnMut(&mut workloads::Rng) -> bool,
) -> (Arc<Graph<ScalarOp>>, Vec<ValueKey<ScalarOp>>) {
    const INPUTS: usize = 4;
    let mut b = GraphBuilder::with_interner(fresh());
    for i in 0..INPUTS {
        b.add_input(ScalarKey::var(i as u32));
    }
    let mut rng = workloads::Rng::new(seed);
    let mut read = vec![false; INPUTS];
    for i in 0..n {
        let values = read.len();
        let mut pick = || values - 1 - rng.below(values.min(40) as u64) as usize;
        let (x, y) = (pick(), pick());
        let op = op(i, &mut rng);
        let ins = &[x, y][..op.input_count()];
        for &v in ins {
            read[v] = true;
        }
        let operands: Vec<_> = ins.iter().map(|&v| Local(lv(v))).collect();
        let out = b.add_operation_from(op, &operands, &Primary);
        // A repeated operation is the value it repeats (hash-consing): only new values
        // are appended.
        if out.start == read.len() {
            read.extend(out.map(|_| false));
        }
    }
    let outputs: Vec<_> = (0..read.len()).filter(|&v| !read[v] && output(&mut rng)).map(lv).collect();
    b.set_outputs(outputs.clone());
    let g = Arc::new(b.build());
    let keys: Vec<_> = outputs.iter().map(|&v| g.global_key(v)).collect();
    (g, keys)
}

/// A DAG whose first `prefix` operations are all `Add` and the rest a mix of four
/// variants (`recent_operands_dag`); every value nobody reads is an output, so the whole
/// graph is reachable.
fn prefix_mixed_dag(n: usize, prefix: usize, seed: u64) -> (MaterializedGraph<ScalarOp>, CompiledProgram<ScalarOp>) {
    let mixed = [ScalarOp::Add, ScalarOp::Mul, ScalarOp::Neg, ScalarOp::Sin];
    let op = |i: usize, rng: &mut workloads::Rng| if i < prefix { ScalarOp::Add } else { mixed[rng.below(4) as usize] };
    let (g, keys) = recent_operands_dag(n, seed, op, |_| true);
    compile_checked(&resolve(vec![g]), &keys)
}

/// The evaluation order `dispatch.rs` documents, computed directly: the materialized
/// order when the graph has one variant, else each window of 256 operations sorted by
/// (depth inside the window, variant in order of first appearance, position).
fn documented_dispatch_order(m: &MaterializedGraph<ScalarOp>) -> Vec<usize> {
    let mut seen = Vec::new();
    let variant: Vec<usize> = m
        .operations()
        .map(|o| {
            let d = std::mem::discriminant(o.operation());
            seen.iter().position(|&s| s == d).unwrap_or_else(|| {
                seen.push(d);
                seen.len() - 1
            })
        })
        .collect();
    let n = m.operation_count();
    if seen.len() < 2 {
        return (0..n).collect();
    }
    let mut order = Vec::with_capacity(n);
    for start in (0..n).step_by(256) {
        let end = (start + 256).min(n);
        let mut depth = vec![0usize; end - start];
        for i in start..end {
            for &v in m.operation(OperationId::new(i)).inputs() {
                if let Some(MaterializedValueDef::Output { operation, .. }) = m.value_def(v)
                    && operation.index() >= start
                {
                    depth[i - start] = depth[i - start].max(depth[operation.index() - start] + 1);
                }
            }
        }
        let mut window: Vec<usize> = (start..end).collect();
        window.sort_by_key(|&i| (depth[i - start], variant[i], i));
        order.extend(window);
    }
    order
}

proptest! {
    #![proptest_config(crate::support::proptest_config())]

    /// Dispatch sorts windows only once a second variant is met, then from the first
    /// window on: the order is the documented one whether that variant comes first, late
    /// (after several windows of `Add`) or never.
    #[test]
    fn dispatch_order_is_the_documented_one(n in 1usize..1500, prefix_frac in 0.0f64..1.2, seed in 0u64..1000) {
        let prefix = (n as f64 * prefix_frac) as usize;
        let (m, program) = prefix_mixed_dag(n, prefix, seed);
        let got: Vec<usize> = (0..program.instruction_count()).map(|i| program.source_operation(i).index()).collect();
        prop_assert_eq!(got, documented_dispatch_order(&m));
    }
}

/// A DAG of `Add`, `Mul`, `Neg` and `SinCos` (`recent_operands_dag`) whose outputs are
/// about half of the values nobody reads: the rest are pruned, except the unread outputs of
/// a `SinCos` whose other output is read, which stay as values nobody reads (their slot is
/// freed at once, and a stale liveness entry would keep it).
fn half_outputs_dag(n: usize, seed: u64) -> MaterializedGraph<ScalarOp> {
    let ops = [ScalarOp::Add, ScalarOp::Mul, ScalarOp::Neg, ScalarOp::SinCos];
    let (g, keys) = recent_operands_dag(n, seed, |_, rng| ops[rng.below(4) as usize], |rng| rng.below(2) == 0);
    computegraph::try_materialize_merge(&resolve(vec![g]), &keys).unwrap()
}

proptest! {
    #![proptest_config(crate::support::proptest_config())]

    /// Compile reuses its thread's liveness column from one call to the next
    /// (`compile.rs`, `take_live`): graphs of any sizes compiled one after the other on
    /// one thread give the programs a fresh thread gives (a stale entry would free or keep
    /// a slot wrongly and change the program, or fail its verification).
    #[test]
    fn programs_compiled_in_sequence_equal_fresh_ones(graphs in proptest::collection::vec((1usize..600, 0u64..1000), 1..5)) {
        for (n, seed) in graphs {
            let m = half_outputs_dag(n, seed);
            let here = try_compile(&m).unwrap().to_string();
            let alone = std::thread::scope(|s| s.spawn(|| try_compile(&m).map(|p| p.to_string())).join().unwrap()).unwrap();
            prop_assert_eq!(here, alone, "n = {}, seed = {}", n, seed);
        }
    }
}

proptest! {
    // Few cases: each builds, materializes and compiles graphs of thousands of nodes
    // twice, above the size a thread keeps columns of.
    #![proptest_config(ProptestConfig { cases: 16, ..crate::support::proptest_config() })]

    /// A reserved build adopts the columns its thread kept from the last fragment it
    /// dropped, an unreserved one grows into them after its first batch, and a fresh
    /// interner takes the last table's slots (`graph.rs`, `optable.rs`): specs of any
    /// sizes built and dropped one after the other on one thread, either way, give the
    /// programs a fresh thread gives (a stale entry in a kept column or slot would change
    /// an operation's operands or interning).
    #[test]
    fn graphs_built_in_sequence_equal_fresh_ones(specs in proptest::collection::vec((3_000usize..10_000, 0u64..1000, any::<bool>()), 1..4)) {
        let program = |spec: &GraphSpec, reserved: bool| {
            let built = if reserved { spec.build_single(&fresh()) } else { spec.build(&fresh(), 1) }.unwrap();
            built.graphs[0].verify().unwrap();
            let m = computegraph::try_materialize_merge(&resolve(built.graphs.clone()), &built.outputs).unwrap();
            try_compile(&m).unwrap().to_string()
        };
        for (n, seed, reserved) in specs {
            let spec = workloads::random_dag(n, Operands::Window(64), 0.3, seed);
            let here = program(&spec, reserved);
            let alone = std::thread::scope(|s| s.spawn(|| program(&spec, reserved)).join().unwrap());
            prop_assert_eq!(here, alone, "n = {}, seed = {}, reserved = {}", n, seed, reserved);
        }
    }
}

/// Two operation variants of a chosen cost (`dispatch.rs`'s `KEEP_ORDER_MIN_MEAN_COST`).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum Weighed {
    /// Its cost, and a tag that keeps the steps structurally distinct (no CSE).
    Left(u64, u32),
    Right(u64, u32),
}

impl GraphOperation for Weighed {
    type Operand = f64;
    type Context = ();
    type InputKey = u32;
    fn input_count(&self) -> usize {
        1
    }
    fn output_count(&self) -> usize {
        1
    }
    fn cost_hint(&self) -> u64 {
        match self {
            Weighed::Left(c, _) | Weighed::Right(c, _) => *c,
        }
    }
}

/// Two chains built one after the other, `Left` then `Right`: sorted by (depth,
/// variant), the window alternates between them. Operations of cost 1 are sorted so;
/// operations of cost 256 and more (a tensor contraction's scale) keep the materialized
/// order, each step right after its operand's producer.
#[test]
fn costly_operations_keep_the_materialized_order() {
    for (cost, kept) in [(1u64, false), (255, false), (256, true), (1 << 20, true)] {
        let mut b = GraphBuilder::<Weighed>::with_interner(computegraph::KeyInterner::new());
        let (mut l, mut r) = (b.add_input(0), b.add_input(1));
        for i in 0..100 {
            l = b.add_operation(Weighed::Left(cost, i), vec![Local(l)], Primary)[0];
        }
        for i in 0..100 {
            r = b.add_operation(Weighed::Right(cost, i), vec![Local(r)], Primary)[0];
        }
        let g = Arc::new(b.build());
        let m = materialize_merge(&resolve(vec![g.clone()]), &[g.global_key(l), g.global_key(r)]);
        let p = compile(&m);
        let identity = (0..p.instruction_count()).all(|i| p.source_operation(i).index() == i);
        assert_eq!(identity, kept, "cost {cost}");
    }
}
