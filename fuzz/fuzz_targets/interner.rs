//! The shared key interner against a `HashMap` model, with concurrent builders: graphs
//! decoded from the input are built on several threads at once (each twice, so identical
//! operations race), in one to three fragments each, against one interner. Then every value
//! of every graph must have the key its structure dictates: structurally equal values (same
//! operation, same operand structures, same output slot; or the same input key) have equal
//! interned ids, different ones have different ids.
#![no_main]

use std::collections::HashMap;
use std::sync::Arc;

use computegraph::{GraphOperation, KeyId, KeyInterner, ValueKey};
use libfuzzer_sys::fuzz_target;
use scalar::ScalarOp;
use scalar::spec::GraphSpec;

/// A value's structure, with operands as model ids.
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
enum Model {
    Input(u32),
    Output { op: ScalarOp, args: Vec<u32>, slot: usize },
}

/// Model ids of every value of `spec`, interning structures into `model`.
fn model_ids(spec: &GraphSpec, model: &mut HashMap<Model, u32>) -> Vec<u32> {
    let mut ids = Vec::with_capacity(spec.value_count());
    let mut intern = |m: Model, ids: &mut Vec<u32>| {
        let n = model.len() as u32;
        ids.push(*model.entry(m).or_insert(n));
    };
    for i in 0..spec.inputs {
        intern(Model::Input(i), &mut ids);
    }
    let mut at = 0;
    for &op in &spec.ops {
        let args: Vec<u32> = spec.args[at..at + op.input_count()].iter().map(|&a| ids[a as usize]).collect();
        at += op.input_count();
        for slot in 0..op.output_count() {
            intern(Model::Output { op, args: args.clone(), slot }, &mut ids);
        }
    }
    ids
}

fuzz_target!(|data: &[u8]| {
    // Up to three specs, separated by 0xFF bytes; every value is an output.
    let specs: Vec<(GraphSpec, usize)> = data
        .split(|&b| b == 0xFF)
        .take(3)
        .map(|chunk| {
            let mut spec = GraphSpec::from_bytes(chunk);
            spec.outputs = (0..spec.value_count() as u32).collect();
            let fragments = 1 + chunk.len() % 3;
            (spec, fragments)
        })
        .filter(|(s, _)| s.ops.len() <= 64)
        .collect();
    let interner = KeyInterner::new();
    // Each spec built twice, all builds at once.
    let keys: Vec<Vec<ValueKey<ScalarOp>>> = std::thread::scope(|scope| {
        let handles: Vec<_> = specs
            .iter()
            .flat_map(|s| [s, s])
            .map(|(spec, fragments)| {
                let interner = Arc::clone(&interner);
                scope.spawn(move || spec.build(&interner, *fragments).expect("valid specs build").outputs)
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("no builder panics")).collect()
    });

    let mut model = HashMap::new();
    let mut to_key: HashMap<u32, KeyId> = HashMap::new();
    let mut to_model: HashMap<KeyId, u32> = HashMap::new();
    for ((spec, _), built) in specs.iter().flat_map(|s| [s, s]).zip(&keys) {
        let ids = model_ids(spec, &mut model);
        assert_eq!(ids.len(), built.len());
        for (&m, key) in ids.iter().zip(built) {
            let id = interner.intern_key(key).expect("keys of this interner resolve");
            assert_eq!(*to_key.entry(m).or_insert(id), id, "one structure, two interned ids");
            assert_eq!(*to_model.entry(id).or_insert(m), m, "two structures, one interned id");
        }
    }
    // Nothing was interned twice: the interner holds exactly the distinct values seen.
    assert_eq!(interner.value_count(), model.len(), "the interner holds duplicates or strays");
});
