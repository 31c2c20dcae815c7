//! Tests of the builder: interning with the keys hashed ahead, operations read from the
//! store, concurrent builders, id spaces that run out, roles and operand packing.

use super::*;
use crate::graph::LocalDef;

/// `Neg`: one output; `SinCos`: two.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
enum ScalarOp {
    Neg,
    SinCos,
}

impl GraphOperation for ScalarOp {
    type Operand = f64;
    type Context = ();
    type InputKey = u32;
    fn input_count(&self) -> usize {
        1
    }
    fn output_count(&self) -> usize {
        match self {
            ScalarOp::Neg => 1,
            ScalarOp::SinCos => 2,
        }
    }
}

/// Any number of operands and outputs (`tag` tells operations of one shape apart).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Shape {
    inputs: u8,
    outputs: u8,
    tag: u8,
}

impl GraphOperation for Shape {
    type Operand = ();
    type Context = ();
    type InputKey = u32;
    fn input_count(&self) -> usize {
        self.inputs as usize
    }
    fn output_count(&self) -> usize {
        self.outputs as usize
    }
}

/// Every operation is interned with the keys of its own operands, whatever the hashing
/// ahead predicted: operands among the last few values (predicted keys), repeated
/// operations and inputs (which make predictions wrong), zero to two outputs, more
/// operands than an `Ahead` entry keeps, and a flush midway.
#[test]
fn operations_are_interned_with_their_operands_keys() {
    let interner = KeyInterner::<Shape>::new();
    let mut b = GraphBuilder::with_interner(Arc::clone(&interner));
    let mut values = vec![b.add_input(0)];
    let mut x = 0x9E37_79B9_7F4A_7C15_u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut added: Vec<(Shape, Vec<ValueRef<Shape>>)> = Vec::new();
    // Past `STORE_OPS_MIN` operations, so that batches are interned as they are added.
    for step in 0..3 * STORE_OPS_MIN {
        let r = next();
        if r % 13 == 0 {
            values.push(b.add_input((r >> 8) as u32 % 50));
            continue;
        }
        if step == 1500 || step == 5000 {
            b.global_key(values[values.len() - 1]);
        }
        let (op, operands) = if r % 5 == 0 && !added.is_empty() {
            added[added.len() - 1 - (r >> 8) as usize % added.len().min(20)].clone()
        } else {
            let op = Shape { inputs: 1 + (r >> 4) as u8 % 6, outputs: (r >> 12) as u8 % 3, tag: (r >> 16) as u8 % 2 };
            let operands = (0..op.inputs)
                .map(|_| {
                    let back = 1 + next() as usize % if r % 3 == 0 { values.len() } else { values.len().min(6) };
                    ValueRef::Local(values[values.len() - back])
                })
                .collect();
            (op, operands)
        };
        values.extend(b.add_operation(op.clone(), operands.clone(), OperationRole::Primary));
        added.push((op, operands));
    }
    let g = b.build();
    for op in g.operations() {
        let (operation, inputs, _) = interner.operation_parts(&op.key()).unwrap();
        assert_eq!(&operation, op.operation());
        let expected: Vec<_> = op.local_inputs().map(|v| g.global_key(v.unwrap())).collect();
        assert_eq!(inputs, expected, "{:?}", op.id());
        for (slot, v) in op.outputs().enumerate() {
            assert_eq!(g.global_key(v), ValueKey::Derived { operation: op.key(), output_slot: slot as u8 });
        }
    }
}

/// A built graph of at least `STORE_OPS_MIN` operations keeps no copy of them: it reads
/// them from the store (full chunks shared, the open one copied), and each reads back
/// as it was added: repeats, operations another graph interned first, zero to two
/// outputs, and after that other graph is dropped. A smaller graph keeps its own.
#[test]
fn large_graphs_read_their_operations_from_the_store() {
    let interner = KeyInterner::<Shape>::new();
    let mut x = 0x2545_F491_4F6C_DD1D_u64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    // Operations as (shape, operands as indices into the values so far).
    let mut script: Vec<(Shape, Vec<usize>)> = Vec::new();
    let mut values = 1;
    for _ in 0..3 * crate::chunk::CHUNK + 40 {
        let r = next();
        let op = Shape { inputs: 1 + (r >> 4) as u8 % 3, outputs: (r >> 8) as u8 % 3, tag: (r >> 12) as u8 };
        let operands = (0..op.inputs).map(|_| values - 1 - next() as usize % values.min(5)).collect();
        values += op.output_count();
        script.push((op, operands));
    }
    let run = |script: &[(Shape, Vec<usize>)]| {
        let mut b = GraphBuilder::with_interner(Arc::clone(&interner));
        b.add_input(7);
        for (op, operands) in script {
            let operands: Vec<_> = operands.iter().map(|&v| ValueRef::Local(LocalValueId::new(v))).collect();
            b.add_operation(op.clone(), operands, OperationRole::Primary);
        }
        b.build()
    };
    let small = run(&script);
    assert!(small.store_ops.is_none() && small.operation_count() == script.len());
    // The large graph repeats the small one's operations, then adds its own and repeats
    // some of those.
    for _ in 0..3 * crate::chunk::CHUNK {
        let r = next() as usize;
        let (op, operands) = if r % 4 == 0 {
            script[script.len() - 1 - r % 50].clone()
        } else {
            let op = Shape { inputs: 1 + (r >> 4) as u8 % 3, outputs: 1, tag: (r >> 12) as u8 };
            let operands = (0..op.inputs).map(|_| values - 1 - next() as usize % values.min(9)).collect();
            (op, operands)
        };
        values += op.output_count();
        script.push((op, operands));
    }
    let large = run(&script);
    assert!(large.operation_count() >= crate::graph::STORE_OPS_MIN);
    assert!(large.store_ops.is_some() && large.own_ops.is_empty());
    let ops_bytes = large.column_bytes().iter().find(|(name, _)| *name == "ops").unwrap().1;
    assert!(ops_bytes < large.operation_count() * std::mem::size_of::<Shape>() / 2, "{ops_bytes}");
    let check = |g: &Graph<Shape>| {
        g.verify().unwrap();
        assert_eq!(g.operation_count(), script.len());
        for (op, (expected, operands)) in g.operations().zip(&script) {
            assert_eq!(op.operation(), expected);
            let locals: Vec<_> = op.local_inputs().map(|v| v.unwrap().index()).collect();
            assert_eq!(&locals, operands);
            assert_eq!(interner.operation_parts(&op.key()).unwrap().0, *expected);
        }
    };
    check(&large);
    drop(small);
    check(&large);
}

/// Past [`STORE_OPS_MIN`] operations the builder interns each batch as it fills and
/// keeps no more than one batch of operations, and two builders on one interner,
/// appending in turn (so their batches interleave in the store), give equal
/// operations equal keys.
#[test]
fn builders_intern_as_they_append() {
    let interner = KeyInterner::<Shape>::new();
    let mut builders: Vec<_> = (0..2).map(|_| GraphBuilder::with_interner(Arc::clone(&interner))).collect();
    for b in &mut builders {
        b.add_input(0);
    }
    let n = 2 * STORE_OPS_MIN + 100;
    for i in 0..n {
        // Each graph's own operations (`tag` tells them apart) and shared ones.
        for (t, b) in builders.iter_mut().enumerate() {
            let tag = if i % 3 == 0 { 9 } else { t as u8 };
            let operand = ValueRef::Local(LocalValueId::new(i / 2));
            b.add_operation(Shape { inputs: 1, outputs: 1, tag }, vec![operand], OperationRole::Primary);
            assert!(b.graph.own_ops.len() < STORE_OPS_MIN);
        }
    }
    assert!(interner.operation_count() >= STORE_OPS_MIN, "{}", interner.operation_count());
    let graphs: Vec<_> = builders.into_iter().map(GraphBuilder::build).collect();
    for g in &graphs {
        g.verify().unwrap();
        assert_eq!(g.operation_count(), n);
        assert!(g.store_ops.is_some() && g.own_ops.is_empty());
    }
    // Whether value `v` is the same structure in both graphs (the input is).
    let mut same = vec![true];
    for i in 0..n {
        let op = LocalOperationId::new(i);
        let ops: Vec<_> = graphs.iter().map(|g| g.operation(op).operation().tag).collect();
        assert_eq!(ops, if i % 3 == 0 { [9, 9] } else { [0, 1] });
        // Equal operations of equal operands: equal keys, whichever builder came first.
        same.push(i % 3 == 0 && same[i / 2]);
        assert_eq!(graphs[0].op_key[op] == graphs[1].op_key[op], same[i + 1], "{op:?}");
    }
}

/// An id space that runs out while a batch is interned during `add_operation` fails
/// nothing there: the operations stay pending and `build` reports the error.
#[test]
fn an_exhausted_id_space_while_appending_is_reported_by_build() {
    let limit = STORE_OPS_MIN + 10;
    let interner = KeyInterner::<Shape>::try_with_value_limit(limit).unwrap();
    let mut b = GraphBuilder::with_interner(interner);
    let mut v = b.add_input(0);
    for i in 0..2 * STORE_OPS_MIN {
        let op = Shape { inputs: 1, outputs: 1, tag: (i % 200) as u8 };
        v = LocalValueId::new(
            b.try_add_operation_from(op, &[ValueRef::Local(v)], &OperationRole::Primary).unwrap().start,
        );
    }
    assert_eq!(b.value_count(), 2 * STORE_OPS_MIN + 1);
    assert_eq!(b.try_build().unwrap_err(), GraphError::IdSpaceExhausted { space: "value key" });
}

/// A batch is interned without per-operation id checks only when every pending value
/// fits as fresh ([`InternerState::batch_fits`]). At the bound exactly, the batch
/// builds; a batch over the bound whose repeats leave it within the interner's limit
/// builds too (checked per operation), with repeats keyed alike; one over the limit
/// fails.
#[test]
fn batches_at_the_id_bound_build_or_fail_as_their_keys_need() {
    let neg = |tag: u8| Shape { inputs: 1, outputs: 1, tag };
    // `n` operations in a chain (`chain`) or all of the input (a repeat each after the
    // first), on an interner of at most `limit` keys.
    let build = |limit: usize, n: usize, chain: bool, outputs: u8| {
        let interner = KeyInterner::<Shape>::try_with_value_limit(limit).unwrap();
        let mut b = GraphBuilder::with_interner(interner);
        let x = b.add_input(0);
        let mut v = x;
        let mut last = x;
        for _ in 0..n {
            let op = Shape { outputs, ..neg(1) };
            let r = b.try_add_operation_from(op, &[ValueRef::Local(v)], &OperationRole::Primary).unwrap();
            if chain && outputs > 0 {
                v = LocalValueId::new(r.start);
            }
            if outputs > 0 {
                last = LocalValueId::new(r.start);
            }
        }
        b.try_build().map(|g| (g.global_key(x), g.global_key(last), g.value_count()))
    };
    for n in [10, STORE_OPS_MIN + 10] {
        // A chain: n + 1 fresh keys, and the bound wants one more.
        assert!(build(n + 2, n, true, 1).is_ok(), "{n}");
        assert_eq!(build(n, n, true, 1).unwrap_err(), GraphError::IdSpaceExhausted { space: "value key" });
        // Repeats: two keys, whatever `n`.
        let (x, last, values) = build(3, n, false, 1).unwrap();
        assert_eq!(values, n + 1);
        assert_ne!(x, last);
        assert_eq!(build(1, n, false, 1).unwrap_err(), GraphError::IdSpaceExhausted { space: "value key" });
        // Zero outputs: a batch that adds no value fits an interner with one key to spare.
        assert!(build(2, n, false, 0).is_ok(), "{n}");
    }
}

#[test]
fn packed_operands_round_trip() {
    for i in [0, 1, 12345, MAX_LOCAL_VALUES - 1] {
        assert_eq!(PackedInputRef::local(LocalValueId::new(i)).get(), InputRef::Local(LocalValueId::new(i)));
        assert_eq!(PackedInputRef::external(i).get(), InputRef::External(i as u32));
    }
    assert_eq!(std::mem::size_of::<PackedInputRef>(), 4);
    assert_eq!(std::mem::size_of::<Option<LocalOperationId>>(), 4);
}

/// The role column is kept only once an operation is not `Primary`; roles before and
/// after that point read back right, and inputs and outputs decode from `value_op`.
#[test]
fn roles_and_definitions_read_back() {
    let linear = OperationRole::all_active(1);
    let mut b = GraphBuilder::<ScalarOp>::with_interner(KeyInterner::new());
    let x = b.add_input(0);
    let s = b.add_operation_from(ScalarOp::SinCos, &[ValueRef::Local(x)], &OperationRole::Primary);
    assert!(b.graph.op_role.is_empty());
    let y = b.add_input(1);
    let n = b.add_operation_from(ScalarOp::Neg, &[ValueRef::Local(y)], &linear).start;
    let m = b.add_operation_from(ScalarOp::Neg, &[ValueRef::Local(LocalValueId::new(n))], &OperationRole::Primary);
    let g = b.build();
    g.verify().unwrap();
    let roles: Vec<_> = g.operations().map(|op| op.role().clone()).collect();
    assert_eq!(roles, [OperationRole::Primary, linear, OperationRole::Primary]);
    let defs: Vec<_> = (0..g.value_count()).map(|v| g.local_def(LocalValueId::new(v))).collect();
    let op = LocalOperationId::new;
    assert_eq!(
        defs,
        [
            LocalDef::Input(0),
            LocalDef::Output(op(0), 0),
            LocalDef::Output(op(0), 1),
            LocalDef::Input(1),
            LocalDef::Output(op(1), 0),
            LocalDef::Output(op(2), 0),
        ]
    );
    assert_eq!((s, y.index(), m), (1..3, 3, 5..6));
    assert_eq!(g.inputs(), [x, y]);
}

/// Local values are numbered densely in the order they are added, inputs and outputs
/// alike, and a failed call takes no id (the numbering `GraphBuilder` documents).
#[test]
fn local_values_are_numbered_densely_and_failures_take_no_id() {
    // A key of another interner: using it is an error after the operand is checked.
    let foreign = {
        let mut other = GraphBuilder::<ScalarOp>::with_interner(KeyInterner::new());
        let x = other.add_input(0);
        let y = other.add_operation_from(ScalarOp::Neg, &[ValueRef::Local(x)], &OperationRole::Primary).start;
        other.build().global_key(LocalValueId::new(y))
    };
    let mut b = GraphBuilder::<ScalarOp>::with_interner(KeyInterner::new());
    let mut expected = 0;
    for step in 0..40_usize {
        let before = b.value_count();
        assert_eq!(before, expected);
        if step == 21 {
            // Interning what is pending (a flush) between adds changes nothing.
            b.global_key(LocalValueId::new(expected - 1));
        }
        match step % 4 {
            0 => assert_eq!(b.add_input(step as u32).index(), expected),
            1 | 2 => {
                let op = if step % 4 == 1 { ScalarOp::SinCos } else { ScalarOp::Neg };
                let width = op.output_count();
                let operand = ValueRef::Local(LocalValueId::new(step * 7919 % expected));
                assert_eq!(b.add_operation_from(op, &[operand], &OperationRole::Primary), expected..expected + width);
                expected += width;
                continue;
            }
            _ => {
                // A wrong arity, an operand that does not exist yet, a foreign key: all fail.
                let x = ValueRef::Local(LocalValueId::new(0));
                assert!(b.try_add_operation_from(ScalarOp::Neg, &[x.clone(), x], &OperationRole::Primary).is_err());
                let ahead = ValueRef::Local(LocalValueId::new(expected));
                assert!(b.try_add_operation_from(ScalarOp::Neg, &[ahead], &OperationRole::Primary).is_err());
                let foreign = ValueRef::External(foreign.clone());
                assert!(b.try_add_operation_from(ScalarOp::Neg, &[foreign], &OperationRole::Primary).is_err());
                assert_eq!(b.value_count(), before);
                continue;
            }
        }
        expected += 1;
    }
    let g = b.build();
    g.verify().unwrap();
    assert_eq!(g.value_count(), expected);
}
