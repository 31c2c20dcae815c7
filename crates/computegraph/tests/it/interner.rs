//! The key interner against a `HashMap` model (property 3), plus the role-identity rule.

use std::collections::HashMap;

use computegraph::{GraphOperation, KeyId, OperationKey, OperationRole, ValueKey};
use proptest::prelude::*;
use scalar::{ScalarKey, ScalarOp};

use crate::support::fresh;

#[derive(Clone, Debug)]
enum Cmd {
    Input(u32),
    Operation { kind: u8, args: [u32; 2], role: u8 },
}

fn cmd() -> impl Strategy<Value = Cmd> {
    prop_oneof![
        1 => (0u32..3).prop_map(Cmd::Input),
        3 => (0u8..8, any::<[u32; 2]>(), 0u8..3).prop_map(|(kind, args, role)| Cmd::Operation { kind, args, role }),
    ]
}

fn op_of(kind: u8) -> ScalarOp {
    // Only two constants, so constants collide often.
    [
        ScalarOp::Add,
        ScalarOp::Mul,
        ScalarOp::Neg,
        ScalarOp::Exp,
        ScalarOp::SinCos,
        ScalarOp::Cos,
        ScalarOp::constant(1.0),
        ScalarOp::constant(-0.0),
    ][kind as usize]
}

/// Primary, all-active linear, or linear with the first input fixed.
fn role_of(choice: u8, inputs: usize) -> OperationRole {
    match choice {
        0 => OperationRole::Primary,
        1 => OperationRole::all_active(inputs),
        _ => OperationRole::Linearized { active_mask: (0..inputs).map(|i| i > 0).collect() },
    }
}

/// What a value is, in model terms: values are named by their model index.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum ModelKey {
    Input(u32),
    Output { op: ScalarOp, args: Vec<usize>, role: OperationRole, slot: u8 },
}

proptest! {
    #![proptest_config(crate::support::proptest_config())]

    /// Same structure ⇒ same key; different structure (operation, operands, role, slot or
    /// input name) ⇒ different key; `operation_parts` and `value_key` round-trip; key-id
    /// order is topological; the interner holds exactly the distinct structures.
    #[test]
    fn interner_matches_hashmap_model(cmds in prop::collection::vec(cmd(), 1..80)) {
        let interner = fresh();
        let mut model: HashMap<ModelKey, usize> = HashMap::new();
        let mut real: Vec<KeyId> = Vec::new(); // model index → interned id
        let mut back: HashMap<KeyId, usize> = HashMap::new(); // interned id → model index
        let mut op_model: HashMap<(ScalarOp, Vec<usize>, OperationRole), OperationKey<ScalarOp>> = HashMap::new();
        // Checks one (model key, interned id) observation against the model.
        let mut observe = |mk: ModelKey, id: KeyId, real: &mut Vec<KeyId>| -> Result<(), TestCaseError> {
            match model.get(&mk) {
                Some(&m) => prop_assert_eq!(real[m], id, "same structure, different key: {:?}", mk),
                None => {
                    prop_assert!(!back.contains_key(&id), "{:?} got the key of {:?}", mk, back.get(&id));
                    model.insert(mk, real.len());
                    back.insert(id, real.len());
                    real.push(id);
                }
            }
            Ok(())
        };
        for c in &cmds {
            match *c {
                Cmd::Input(i) => {
                    let id = interner.intern_input(ScalarKey::var(i));
                    prop_assert_eq!(interner.value_key(id), ValueKey::Input(ScalarKey::var(i)));
                    prop_assert_eq!(interner.intern_key(&ValueKey::Input(ScalarKey::var(i))).unwrap(), id);
                    observe(ModelKey::Input(i), id, &mut real)?;
                }
                Cmd::Operation { kind, args, role } => {
                    let op = op_of(kind);
                    let n = op.input_count();
                    if n > 0 && real.is_empty() {
                        continue;
                    }
                    let margs: Vec<usize> = args[..n].iter().map(|&a| a as usize % real.len()).collect();
                    let rargs: Vec<KeyId> = margs.iter().map(|&m| real[m]).collect();
                    let role = role_of(role, n);
                    let key = interner.intern_operation(&op, &rargs, &role).unwrap();
                    // operation_parts round-trips to what was interned.
                    let (pop, pinputs, prole) = interner.operation_parts(&key).unwrap();
                    prop_assert_eq!(pop, op);
                    let expected_inputs: Vec<ValueKey<ScalarOp>> = rargs.iter().map(|&k| interner.value_key(k)).collect();
                    prop_assert_eq!(pinputs, expected_inputs);
                    prop_assert_eq!(&prole, &role);
                    prop_assert_eq!(key.output_count(), op.output_count());
                    prop_assert_eq!(key.output_key_id(op.output_count() as u8), None);
                    // Operation keys themselves: equal iff the structure is equal.
                    let skey = (op, margs.clone(), role.clone());
                    match op_model.get(&skey) {
                        Some(k) => prop_assert_eq!(*k, key),
                        None => {
                            prop_assert!(op_model.values().all(|k| *k != key), "distinct structure, equal key");
                            op_model.insert(skey, key);
                        }
                    }
                    for slot in 0..op.output_count() as u8 {
                        let id = key.output_key_id(slot).unwrap();
                        // Key-id order is a topological order.
                        prop_assert!(rargs.iter().all(|&a| a < id), "{:?} is not after its operands {:?}", id, rargs);
                        prop_assert_eq!(interner.value_key(id), ValueKey::Derived { operation: key, output_slot: slot });
                        prop_assert_eq!(interner.intern_key(&interner.value_key(id)).unwrap(), id);
                        let mk = ModelKey::Output { op, args: margs.clone(), role: role.clone(), slot };
                        observe(mk, id, &mut real)?;
                    }
                }
            }
        }
        // Nothing was interned twice, nothing extra.
        prop_assert_eq!(interner.value_count(), real.len());
        prop_assert_eq!(interner.operation_count(), op_model.len());
    }
}

/// The role is part of identity: Primary, all-active and partly-active linear versions
/// of one operation on the same operands are three keys; each is stable.
#[test]
fn role_is_part_of_identity() {
    let interner = fresh();
    let x = interner.intern_input(ScalarKey::var(0));
    let y = interner.intern_input(ScalarKey::var(1));
    let roles = [
        OperationRole::Primary,
        OperationRole::all_active(2),
        OperationRole::Linearized { active_mask: vec![false, true] },
        OperationRole::Linearized { active_mask: vec![true, false] },
    ];
    let keys: Vec<_> = roles.iter().map(|r| interner.intern_operation(&ScalarOp::Mul, &[x, y], r).unwrap()).collect();
    for i in 0..keys.len() {
        for j in 0..keys.len() {
            assert_eq!(keys[i] == keys[j], i == j, "roles {:?} and {:?}", roles[i], roles[j]);
        }
        assert_eq!(interner.intern_operation(&ScalarOp::Mul, &[x, y], &roles[i]).unwrap(), keys[i]);
        assert_eq!(interner.operation_parts(&keys[i]).unwrap().2, roles[i]);
    }
    // Operand order matters too.
    assert_ne!(interner.intern_operation(&ScalarOp::Mul, &[y, x], &roles[0]).unwrap(), keys[0]);
}

/// The same structure built through two builders on one interner gets the same keys;
/// on two interners the keys differ (they carry the interner).
#[test]
fn builders_share_keys_through_their_interner() {
    use computegraph::{GraphBuilder, OperationRole::Primary, ValueRef::Local};
    let build = |interner: &std::sync::Arc<computegraph::KeyInterner<ScalarOp>>| {
        let mut b = GraphBuilder::with_interner(interner.clone());
        let x = b.add_input(ScalarKey::var(0));
        let s = b.add_operation(ScalarOp::Sin, vec![Local(x)], Primary)[0];
        let y = b.add_operation(ScalarOp::Add, vec![Local(s), Local(x)], Primary)[0];
        let g = b.build();
        (g.global_key(y), g.key_id(y))
    };
    let (i1, i2) = (fresh(), fresh());
    assert_ne!(i1.id(), i2.id());
    let a = build(&i1);
    assert_eq!(build(&i1), a);
    let c = build(&i2);
    assert_ne!(c.0, a.0, "keys of different interners must differ");
}

proptest! {
    #![proptest_config(crate::support::proptest_config())]

    /// The builder's role cache (keyed by the role's address, confirmed by comparing the
    /// masks inline): one role variable rewritten in place between additions, so every
    /// addition passes the same address, and static-like roles passed from other
    /// addresses; every operation reads back the role it was added with.
    #[test]
    fn roles_passed_from_one_address_read_back(masks in prop::collection::vec((any::<bool>(), any::<bool>(), 0u8..3), 1..60)) {
        let mut b = computegraph::GraphBuilder::<ScalarOp>::with_interner(fresh());
        let x = computegraph::ValueRef::Local(b.add_input(ScalarKey::var(0)));
        let mut role = OperationRole::Primary;
        let mut expected = Vec::new();
        for &(p, q, kind) in &masks {
            // Rewritten in place: `Vec<bool>` keeps its buffer, the role its address.
            let (op, mask) = match kind {
                0 => (ScalarOp::Neg, vec![p]),
                1 => (ScalarOp::Mul, vec![p, q]),
                _ => (ScalarOp::Add, vec![]),
            };
            match (&mut role, mask.is_empty()) {
                (OperationRole::Linearized { active_mask }, false) => {
                    active_mask.clear();
                    active_mask.extend_from_slice(&mask);
                }
                (r, false) => *r = OperationRole::Linearized { active_mask: mask },
                (r, true) => *r = OperationRole::Primary,
            }
            let operands = if op == ScalarOp::Neg { vec![x.clone()] } else { vec![x.clone(), x.clone()] };
            b.add_operation_from(op, &operands, &role);
            expected.push(role.clone());
        }
        let g = b.build();
        let roles: Vec<OperationRole> = g.operations().map(|op| op.role().clone()).collect();
        prop_assert_eq!(roles, expected);
    }
}
