//! Tests of the interner: keys map back to their definitions, the store's exact operand
//! lists, reclamation outside the lock, and a released table rebuilt on the next interning.

use super::*;

/// `Outputs(n)`: one input, `n` outputs (zero included).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Outputs(u8);

impl GraphOperation for Outputs {
    type Operand = ();
    type Context = ();
    type InputKey = u32;
    fn input_count(&self) -> usize {
        1
    }
    fn output_count(&self) -> usize {
        self.0 as usize
    }
}

/// Keys are found by binary search over inputs and first outputs: check every key
/// of a mix of inputs and operations with 0 to 3 outputs, zero-output runs included.
#[test]
fn every_key_maps_back_to_its_definition() {
    let interner = KeyInterner::<Outputs>::new();
    let mut expected = Vec::new();
    let x = interner.intern_input(0);
    expected.push(ValueKey::Input(0));
    let mut last = x;
    for (i, n) in [0u8, 0, 2, 1, 0, 3, 0, 1, 0].into_iter().enumerate() {
        if i % 3 == 2 {
            let k = interner.intern_input(i as u32 + 1);
            assert_eq!(k.index(), expected.len());
            expected.push(ValueKey::Input(i as u32 + 1));
        }
        let key = interner.intern_operation(&Outputs(n), &[last], &OperationRole::Primary).unwrap();
        for slot in 0..n {
            let k = key.output_key_id(slot).unwrap();
            assert_eq!(k.index(), expected.len());
            expected.push(ValueKey::Derived { operation: key, output_slot: slot });
            last = k;
        }
    }
    assert_eq!(interner.value_count(), expected.len());
    for (i, key) in expected.iter().enumerate() {
        assert_eq!(&interner.value_key(KeyId::new(i)), key, "k{i}");
        assert!(!interner.describe(KeyId::new(i)).contains("unknown"));
    }
    assert!(interner.describe(KeyId::new(expected.len())).contains("unknown"));
}

/// The store keeps one operand key per operand: a chunk's operand pool is sized by
/// the batch's operands per operation (here one), not two per operation, and trimmed
/// when the chunk is full; operations read back with their operands.
#[test]
fn the_store_holds_exactly_the_operands() {
    let interner = KeyInterner::<Outputs>::new();
    let mut b = crate::GraphBuilder::with_interner(Arc::clone(&interner));
    let mut last = b.add_input(0);
    let n = 3 * CHUNK + 100;
    for _ in 0..n {
        last = crate::LocalValueId::new(
            b.add_operation_from(Outputs(1), &[crate::ValueRef::Local(last)], &OperationRole::Primary).start,
        );
    }
    b.set_outputs(vec![last]);
    let g = b.build();
    let bytes = interner.column_bytes();
    let operand_bytes = bytes.iter().find(|(name, _)| *name == "op inputs (operand keys)").unwrap().1;
    // Exact for the three full chunks; the open one has a sixteenth of slack.
    assert!(operand_bytes <= 4 * n + 4 * (CHUNK / 16 + 1), "{operand_bytes} bytes for {n} operands");
    assert!(operand_bytes >= 4 * n);
    for op in g.operations() {
        let (_, inputs, _) = interner.operation_parts(&op.key()).unwrap();
        let expected: Vec<_> = op.local_inputs().map(|v| g.global_key(v.unwrap())).collect();
        assert_eq!(inputs, expected);
    }
}

/// An input key that notes, when dropped, whether its interner's lock was held.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct WatchedKey(u32);

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Watched;

impl GraphOperation for Watched {
    type Operand = ();
    type Context = ();
    type InputKey = WatchedKey;
    fn input_count(&self) -> usize {
        1
    }
    fn output_count(&self) -> usize {
        1
    }
}

static WATCHED: OnceLock<Arc<KeyInterner<Watched>>> = OnceLock::new();
static DROPS: AtomicU32 = AtomicU32::new(0);
static DROPS_UNDER_LOCK: AtomicU32 = AtomicU32::new(0);

impl Drop for WatchedKey {
    fn drop(&mut self) {
        if let Some(interner) = WATCHED.get() {
            DROPS.fetch_add(1, Ordering::Relaxed);
            if interner.state.try_write().is_err() {
                DROPS_UNDER_LOCK.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// Reclaimed operations and keys are dropped after the interner's lock is released:
/// their `Drop` is user code, which may use the interner.
#[test]
fn reclaimed_entries_are_dropped_outside_the_lock() {
    let interner = WATCHED.get_or_init(KeyInterner::new);
    for k in 0..3 * CHUNK as u32 {
        let mut b = crate::GraphBuilder::with_interner(Arc::clone(interner));
        let x = b.add_input(WatchedKey(k));
        let y = b.add_operation(Watched, vec![crate::ValueRef::Local(x)], OperationRole::Primary);
        b.set_outputs(y.to_vec());
        drop(b.build());
    }
    let before = DROPS.load(Ordering::Relaxed);
    assert!(interner.reclaim_unused() >= 2 * CHUNK);
    assert!(DROPS.load(Ordering::Relaxed) - before >= 2 * CHUNK as u32, "the interner's keys were dropped");
    assert_eq!(DROPS_UNDER_LOCK.load(Ordering::Relaxed), 0);
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

    /// Hash-consing survives [`KeyInterner::release_table`]: operations interned one at a
    /// time (by `intern_operation`) and by builders of more than `STORE_OPS_MIN`
    /// operations (by batch), with the table released at random points, get the key a
    /// plain map from structure to key gives: an operation seen before gets its first key,
    /// a new one the next id. The released table is empty until an interning rebuilds it.
    #[test]
    fn a_released_table_interns_as_a_plain_map(
        steps in proptest::collection::vec((0u8..4, 0usize..64, 0u8..3), 1..40),
        releases in proptest::collection::vec(proptest::bool::ANY, 40),
    ) {
        let interner = KeyInterner::<Outputs>::new();
        let x = interner.intern_input(0);
        // The reference: structure → operation key id, and every value key so far.
        let mut seen: std::collections::HashMap<(u8, KeyId), OperationKeyId> = Default::default();
        let mut values = vec![x];
        let mut expect = |n: u8, operand: KeyId, got: OperationKey<Outputs>, values: &mut Vec<KeyId>| {
            let fresh = seen.len();
            let id = *seen.entry((n, operand)).or_insert(OperationKeyId::new(fresh));
            proptest::prop_assert_eq!(got.id(), id);
            if id.index() == fresh {
                values.extend(got.output_key_ids());
            }
            Ok(())
        };
        for (i, &(n, pick, mode)) in steps.iter().enumerate() {
            if releases[i] {
                interner.release_table();
                proptest::prop_assert_eq!(interner.read().op_table.heap_bytes(), 0);
            }
            let operand = values[values.len() - 1 - pick % values.len()];
            if mode < 2 {
                let got = interner.intern_operation(&Outputs(n + 1), &[operand], &OperationRole::Primary).unwrap();
                expect(n + 1, operand, got, &mut values)?;
            } else {
                // A builder past `STORE_OPS_MIN`: a chain over `operand` (repeated by
                // later steps with the same operand), interned batch by batch.
                let mut b = crate::GraphBuilder::with_interner(Arc::clone(&interner));
                let mut last = crate::ValueRef::External(interner.value_key(operand));
                let len = crate::graph::STORE_OPS_MIN + 8;
                let mut chain = Vec::with_capacity(len);
                for _ in 0..len {
                    let out = b.add_operation(Outputs(1), [last], OperationRole::Primary)[0];
                    chain.push(out);
                    last = crate::ValueRef::Local(out);
                }
                let g = b.build();
                let mut prev = operand;
                for v in chain {
                    let crate::ValueKey::Derived { operation, .. } = g.global_key(v) else {
                        panic!("an operation's output has a derived key")
                    };
                    expect(1, prev, operation, &mut values)?;
                    prev = operation.output_key_id(0).unwrap();
                }
            }
        }
    }

    /// Builders that reserve nothing grow the table batch by batch (fourfold while it is
    /// small, `optable.rs`): graphs of up to three batches, with repeated operations, built
    /// one after another on one interner with the table released at random between them,
    /// give each operation the key a plain map from structure to key gives.
    #[test]
    fn unreserved_builders_intern_as_a_plain_map(
        graphs in proptest::collection::vec(
            (1usize..3 * crate::graph::STORE_OPS_MIN, proptest::num::u64::ANY, proptest::bool::ANY),
            1..4,
        ),
    ) {
        use crate::{GraphBuilder, LocalValueId, ValueRef::Local};
        let interner = KeyInterner::<Outputs>::new();
        // The reference: (outputs, operand's key) → operation key id, numbered as found.
        let mut seen: std::collections::HashMap<(u8, ValueKey<Outputs>), OperationKeyId> = Default::default();
        for (len, seed, release) in graphs {
            if release {
                interner.release_table();
            }
            let mut b = GraphBuilder::with_interner(Arc::clone(&interner));
            let mut locals = vec![b.add_input(0)];
            let mut added = Vec::with_capacity(len);
            let mut x = seed | 1;
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // One or two outputs; operands among the last few values, so that
                // operations repeat (within a graph and across graphs).
                let n = 1 + (x % 2) as u8;
                let operand = locals[locals.len() - 1 - (x >> 8) as usize % locals.len().min(6)];
                let outputs = b.add_operation_from(Outputs(n), &[Local(operand)], &OperationRole::Primary);
                added.push((n, operand, LocalValueId::new(outputs.start)));
                locals.extend(outputs.map(LocalValueId::new));
            }
            let g = b.build();
            for (n, operand, first) in added {
                let crate::ValueKey::Derived { operation, .. } = g.global_key(first) else {
                    panic!("an operation's output has a derived key")
                };
                let fresh = OperationKeyId::new(seen.len());
                let id = *seen.entry((n, g.global_key(operand))).or_insert(fresh);
                proptest::prop_assert_eq!(operation.id(), id);
            }
        }
    }
}

proptest::proptest! {
    /// `merge_sorted` (the pin list's insertion) against a plain sort of both lists, with
    /// tags drawn as the builder makes them: operation chunks, and input chunks (their
    /// high bit set) that sort after them.
    #[test]
    fn merging_pins_matches_sorting_them(
        tags in proptest::collection::btree_set((0u32..64, proptest::bool::ANY), 0..48),
        split in proptest::collection::vec(proptest::bool::ANY, 48),
    ) {
        let tags: Vec<u32> = tags.into_iter().map(|(c, input)| if input { INPUT_CHUNK | c } else { c }).collect();
        let (mut old, mut new): (Vec<u32>, Vec<u32>) = (Vec::new(), Vec::new());
        for (i, &t) in tags.iter().enumerate() {
            if split[i] { old.push(t) } else { new.push(t) }
        }
        old.sort_unstable();
        new.sort_unstable();
        let mut list: SmallVec<[u32; 2]> = old.iter().copied().collect();
        merge_sorted(&mut list, &new);
        let mut expected = tags.clone();
        expected.sort_unstable();
        proptest::prop_assert_eq!(list.to_vec(), expected);
    }
}
