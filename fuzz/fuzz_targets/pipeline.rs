//! build → resolve → materialize_merge → compile → eval equals the plain reference
//! evaluator, for specs split into one to four fragments, sequentially and through the
//! level-parallel evaluator on two threads (whose schedule is verified first); and the
//! last fragment materialized alone, its external values bound to what the whole program
//! computes for them, gives the same outputs.
#![no_main]

use std::sync::OnceLock;

use computegraph::{KeyInterner, compile, materialize_merge, resolve, try_materialize_fragment};
use libfuzzer_sys::fuzz_target;
use scalar::ScalarKey;
use scalar::spec::GraphSpec;

fuzz_target!(|data: &[u8]| {
    let spec = GraphSpec::from_bytes(data);
    let fragments = 1 + data.first().map_or(0, |b| (b >> 2) as usize % 4);
    let inputs: Vec<f64> = (0..spec.inputs).map(|i| 0.5 + 0.25 * i as f64).collect();
    let want = spec.eval_reference(&inputs);
    let built = spec.build(&KeyInterner::new(), fragments).expect("valid specs build");
    let flat = materialize_merge(&resolve(built.graphs.clone()), &built.outputs);
    flat.verify().expect("materialized graph verifies");
    let program = compile(&flat);
    program.verify_against(&flat).expect("program verifies");
    program.verify_parallel_against(&flat).expect("parallel schedule verifies");
    let refs = program
        .bind_inputs(|k| match k {
            ScalarKey::Var(i) => inputs.get(*i as usize),
            _ => None,
        })
        .expect("inputs bind");
    static POOL: OnceLock<rayon::ThreadPool> = OnceLock::new();
    let pool = POOL.get_or_init(|| rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a pool"));
    // The last fragment alone: its external values are what the earlier fragments define.
    let last = built.graphs.last().expect("at least one fragment");
    let alone = try_materialize_fragment(last, &built.outputs).expect("a fragment materializes alone");
    alone.verify().expect("the fragment alone verifies");
    let var = |k: &ScalarKey| match k {
        ScalarKey::Var(i) => inputs.get(*i as usize),
        _ => None,
    };
    let externals = compile(&materialize_merge(&resolve(built.graphs.clone()), alone.external_keys()))
        .try_eval_by_key(&mut (), var)
        .expect("the external values evaluate");
    let alone_program = compile(&alone);
    alone_program.verify_against(&alone).expect("the fragment's program verifies");
    let alone_refs = alone_program
        .bind_inputs_and_externals(var, |k| alone.external_keys().iter().position(|l| l == k).map(|i| &externals[i]))
        .expect("inputs and external values bind");
    let from_alone = alone_program.eval(&mut (), &alone_refs);
    for got in [program.eval(&mut (), &refs), program.eval_parallel(Some(pool), &mut (), &refs), from_alone] {
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert!(g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()), "{g} != {w}");
        }
    }
});
