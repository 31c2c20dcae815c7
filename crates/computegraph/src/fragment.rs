//! `try_materialize_fragment`: materialize one graph alone, without its parents.
//!
//! Input: a built [`Graph`] and output keys. Output: the [`MaterializedGraph`] that
//! `materialize.rs`'s pass gives over a view of that graph alone: the definitions reachable
//! from the outputs, each key once, in key order, inputs first; a derived key the graph
//! reads from another graph (or an output key it does not define) is an *external value*,
//! emitted after the inputs in key order. The output invariants are `materialize.rs`'s
//! (checked by [`MaterializedGraph::verify`] in debug builds).
//!
//! Two paths give that graph:
//! - *local order*, when the graph's inputs are its first values, its keys strictly
//!   increase with its local ids (a graph built in one go on fresh keys, as `linearize`
//!   builds a linear graph), the keys it reads from outside span a range at most a few
//!   times their number, and it defines none of them. Then no two values share a key
//!   (nothing to deduplicate) and local order is key order. One reverse sweep over a flag
//!   per local value marks what the outputs reach, and the keys read from outside in a
//!   table over their range, whose scan lists them once each, in key order. The reached
//!   operations are runs between unreached ones; each run's columns are copied as blocks,
//!   its operands renumbered through a column from local value to new value. Complexity:
//!   `O(values + operands + the outside keys' range)`, no hashing;
//! - otherwise the general pass (`materialize.rs`).
//!
//! Both give the same graph, column for column: a property test below checks the
//! local-order path against the general one wherever it applies.

use std::sync::Arc;

use crate::error::{GraphError, GraphResult};
use crate::graph::{Graph, InputRef, PackedInputRef};
use crate::id::{IdVec, KeyId, ListPool};
use crate::key::ValueKey;
use crate::materialize::{MatDef, MaterializedGraph, OperationId, Undefined, ValueId, materialize};
use crate::operation::{GraphOperation, OperationRole};
use crate::resolve::ResolvedView;

/// Materializes one graph on its own: the part of `graph` reachable from `outputs`,
/// deduplicated and ordered as [`try_materialize_merge`](crate::try_materialize_merge) does, without reading its
/// parents. A derived key the graph reads from another graph (or an output key it does not
/// define) becomes an *external value*: an input of the result named by its [`ValueKey`]
/// ([`MaterializedGraph::external_keys`]), which [`compile`](crate::compile) places after the
/// inputs and evaluation binds by key
/// ([`CompiledProgram::bind_inputs_and_externals`](crate::CompiledProgram::bind_inputs_and_externals)).
///
/// This is how a fragment that reads values computed elsewhere runs on its own, given
/// those values: a transposed linear map, say, whose primal values an eager runtime holds.
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{
///     compile, try_materialize_fragment, GraphBuilder, OperationRole::Primary,
///     ValueRef::{External, Local},
/// };
/// # #[path = "../doc/scalar.rs"] mod scalar;
/// use scalar::{ScalarKey, ScalarOp};
///
/// // `s = sin x` in one graph; `y = s · t` in another, which reads `s` by key.
/// let mut a = GraphBuilder::<ScalarOp>::new();
/// let x = a.add_input(ScalarKey::var(0));
/// let s = a.add_operation(ScalarOp::Sin, vec![Local(x)], Primary)[0];
/// let first = Arc::new(a.build());
/// let s_key = first.global_key(s);
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// b.add_parent(first.clone());
/// let t = b.add_input(ScalarKey::var(1));
/// let y = b.add_operation(ScalarOp::Mul, vec![External(s_key.clone()), Local(t)], Primary)[0];
/// let second = Arc::new(b.build());
///
/// // Alone, the second graph reads `s` from outside: no `sin`, no `x`.
/// let m = try_materialize_fragment(&second, &[second.global_key(y)]).unwrap();
/// assert_eq!((m.operation_count(), m.input_keys(), m.external_keys()), (1, &[ScalarKey::var(1)][..], &[s_key.clone()][..]));
/// let program = compile(&m);
/// let inputs = program.bind_inputs_and_externals(|_| Some(&2.0), |k| (*k == s_key).then_some(&0.5)).unwrap();
/// assert_eq!(program.eval(&mut (), &inputs), vec![1.0]);
/// ```
pub fn try_materialize_fragment<Op: GraphOperation>(
    graph: &Arc<Graph<Op>>,
    outputs: &[ValueKey<Op>],
) -> GraphResult<MaterializedGraph<Op>> {
    if let Some(m) = in_local_order(graph, outputs)? {
        #[cfg(debug_assertions)]
        m.verify().unwrap_or_else(|e| panic!("internal error: materialized fragment fails verification: {e}"));
        return Ok(m);
    }
    materialize(&ResolvedView::alone(Arc::clone(graph)), outputs, Undefined::External)
}

/// The local-order path: `None` when it does not apply (see the module doc), else the
/// graph the general pass would give.
fn in_local_order<Op: GraphOperation>(
    graph: &Graph<Op>,
    outputs: &[ValueKey<Op>],
) -> GraphResult<Option<MaterializedGraph<Op>>> {
    let keys = graph.value_key.raw();
    let (n_values, k, n_ops) = (keys.len(), graph.inputs.len(), graph.ops.len());
    // The inputs are values `0..k` (`inputs` is increasing), and keys increase.
    if n_values != graph.value_op.len() || graph.inputs.last().is_some_and(|v| v.index() + 1 != k) || !increasing(keys)
    {
        return Ok(None);
    }
    let interner = &graph.interner;
    let out_ids: Vec<KeyId> = outputs.iter().map(|key| interner.intern_key(key)).collect::<GraphResult<_>>()?;
    let defined = |id: KeyId| keys.binary_search(&id).ok();

    // Keys read from outside (external operands', outputs' not defined here) go in a table
    // over their range: 0 while unread, else their first reader plus one (an external
    // operand `i`, or `OUTPUT | j` for output `j`), then, once numbered, their new value.
    let (mut lo, mut hi) = (usize::MAX, 0);
    for id in graph.external_key.iter().chain(out_ids.iter().filter(|&&id| defined(id).is_none())) {
        (lo, hi) = (lo.min(id.index()), hi.max(id.index() + 1));
    }
    let span = hi.saturating_sub(lo);
    if span > 4 * (graph.externals.len() + out_ids.len()) + 4096 {
        return Ok(None); // sparse: the general pass's hashed tables
    }
    let mut outside: Vec<u32> = vec![0; span];
    let slot = |id: KeyId| id.index() - lo;

    // 1. Mark: the outputs, then one reverse sweep (operands come before their readers).
    let mut needed = vec![false; n_values];
    for (j, &id) in out_ids.iter().enumerate() {
        match defined(id) {
            Some(v) => needed[v] = true,
            None if outside[slot(id)] == 0 => outside[slot(id)] = (OUTPUT | j as u32) + 1,
            None => {}
        }
    }
    let dead = sweep(graph, &mut needed, &mut outside, lo);
    let first_output = graph.op_first_output.raw();
    let outside_key = |at: u32| -> &ValueKey<Op> {
        let at = at - 1;
        if at & OUTPUT == 0 { &graph.externals[at as usize] } else { &outputs[(at & !OUTPUT) as usize] }
    };
    // A key read from outside that the graph defines is that definition (the general
    // pass follows it): not this path's case. Input keys and derived keys, each in key order.
    let (mut outside_inputs, mut read) = (Vec::new(), Vec::with_capacity(graph.externals.len().min(span)));
    for (s, &at) in outside.iter().enumerate() {
        if at != 0 {
            let entry = (KeyId::new(lo + s), at);
            match outside_key(at) {
                ValueKey::Input(_) => outside_inputs.push(entry),
                ValueKey::Derived { .. } => read.push(entry),
            }
        }
    }
    let first_defined = keys.first().map_or(0, |k| k.index());
    let older = read.partition_point(|&(id, _)| id.index() < first_defined);
    if read[older..].iter().chain(&outside_inputs).any(|&(id, _)| id.index() >= first_defined && defined(id).is_some())
    {
        return Ok(None);
    }

    // 2. Emit: inputs in key order (the reached local inputs, whose keys increase with their
    // ids, merged with the input keys read from outside), external values in key order, then
    // the reached operations in local order, which is key order: runs of them between
    // unreached ones, each run's operations, values and operands contiguous, its columns
    // copied as a block with operands renumbered. `new_id` and `outside` give each local
    // value and each key read from outside its new value.
    let n_inputs = needed[..k].iter().filter(|&&n| n).count() + outside_inputs.len();
    let n_externals = read.len();
    // The new value of each local value.
    let mut new_id: Vec<ValueId> = vec![ValueId::new(0); n_values];
    let capacity = n_values + n_externals + outside_inputs.len();
    let mut value_key: IdVec<ValueId, KeyId> = IdVec::with_capacity(capacity);
    let mut value_def: IdVec<ValueId, MatDef> = IdVec::with_capacity(capacity);
    let (mut inputs, mut input_keys) = (Vec::with_capacity(n_inputs), Vec::with_capacity(n_inputs));
    let mut local_inputs = (0..k).filter(|&v| needed[v]).peekable();
    let mut outside_inputs = outside_inputs.iter().peekable();
    loop {
        let local_first = match (local_inputs.peek(), outside_inputs.peek()) {
            (Some(&v), Some(&&(id, _))) => keys[v] < id,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        let v = value_def.push(MatDef::Input(inputs.len() as u32));
        inputs.push(v);
        if local_first {
            let local = local_inputs.next().expect("peeked");
            value_key.push(keys[local]);
            input_keys.push(graph.input_keys[local].clone());
            new_id[local] = v;
        } else {
            let &(id, at) = outside_inputs.next().expect("peeked");
            let ValueKey::Input(key) = outside_key(at) else { unreachable!("filtered to inputs") };
            value_key.push(id);
            input_keys.push(key.clone());
            outside[slot(id)] = v.index() as u32;
        }
    }
    let (mut externals, mut external_keys) = (Vec::with_capacity(n_externals), Vec::with_capacity(n_externals));
    for &(id, at) in &read {
        let v = value_def.push(MatDef::External(externals.len() as u32));
        value_key.push(id);
        externals.push(v);
        external_keys.push(outside_key(at).clone());
        outside[slot(id)] = v.index() as u32;
    }
    let value_end = |op: usize| if op < n_ops { first_output[op].index() } else { n_values };
    let mut runs: Vec<(usize, usize)> = Vec::with_capacity(dead.len() + 1);
    let mut start = 0;
    for &d in dead.iter().rev().chain(std::iter::once(&n_ops)) {
        if start < d {
            runs.push((start, d));
        }
        start = d + 1;
    }
    let mut next = value_def.len();
    for &(a, b) in &runs {
        for id in &mut new_id[value_end(a)..value_end(b)] {
            *id = ValueId::new(next);
            next += 1;
        }
    }
    let n_live = n_ops - dead.len();
    let mut op_inputs = ListPool::with_capacity(n_live, graph.op_inputs.items().len());
    let operand = |r: &PackedInputRef| match r.get() {
        InputRef::Local(u) => new_id[u.index()],
        InputRef::External(i) => ValueId::new(outside[slot(graph.external_key[i as usize])] as usize),
    };
    // Roles renumbered in order of first use, as the general pass numbers them (the
    // builder numbers them so too, so this is usually the identity).
    let mut roles = vec![OperationRole::Primary];
    let mut role_map: Vec<u32> = vec![u32::MAX; graph.roles.len()];
    role_map[0] = 0;
    if !graph.op_role.is_empty() {
        'scan: for &(a, b) in &runs {
            for &r in &graph.op_role.raw()[a..b] {
                if role_map[r as usize] == u32::MAX {
                    role_map[r as usize] = roles.len() as u32;
                    roles.push(graph.roles[r as usize].clone());
                    if roles.len() == graph.roles.len() {
                        break 'scan;
                    }
                }
            }
        }
    }
    let same_roles = role_map.iter().enumerate().all(|(i, &r)| r as usize == i);
    let mut ops = IdVec::with_capacity(n_live);
    let mut op_key = IdVec::with_capacity(n_live);
    let mut op_role = IdVec::with_capacity(n_live);
    let mut op_first_output = IdVec::with_capacity(n_live);
    for &(a, b) in &runs {
        if !op_inputs.extend_mapped(&graph.op_inputs, a..b, operand) {
            return Err(GraphError::IdSpaceExhausted { space: "materialized operand pool" });
        }
        let removed = a - ops.len();
        let (first, end) = (value_end(a), value_end(b));
        if end - first == b - a {
            // One output each (the usual case): nothing to look up.
            let start = value_def.len();
            op_first_output.extend((a..b).map(|op| ValueId::new(start + (op - a))));
            value_def.extend((a..b).map(|op| MatDef::Output(OperationId::new(op - removed), 0)));
        } else {
            op_first_output.extend(first_output[a..b].iter().map(|v| new_id[v.index()]));
            let mut slot = 0u8;
            let mut prev = None;
            value_def.extend(graph.value_op.raw()[first..end].iter().map(|&op| {
                slot = if prev == op { slot + 1 } else { 0 };
                prev = op;
                let op = op.expect("the values after the inputs are outputs").index();
                MatDef::Output(OperationId::new(op - removed), slot)
            }));
        }
        value_key.extend_from_slice(&keys[first..end]);
        ops.extend_from_slice(&graph.ops.raw()[a..b]);
        op_key.extend_from_slice(&graph.op_key.raw()[a..b]);
        if graph.op_role.is_empty() {
            op_role.extend(std::iter::repeat_n(0, b - a));
        } else if same_roles {
            op_role.extend_from_slice(&graph.op_role.raw()[a..b]);
        } else {
            op_role.extend(graph.op_role.raw()[a..b].iter().map(|&r| role_map[r as usize]));
        }
    }
    let out_values = out_ids
        .iter()
        .map(|&id| match defined(id) {
            Some(local) => new_id[local],
            None => ValueId::new(outside[slot(id)] as usize),
        })
        .collect();
    Ok(Some(MaterializedGraph {
        interner: Arc::clone(interner),
        value_key,
        value_def,
        ops,
        op_key,
        op_inputs,
        op_role,
        roles,
        op_first_output,
        inputs,
        input_keys,
        externals,
        external_keys,
        outputs: out_values,
    }))
}

/// Whether `keys` strictly increase.
#[inline(never)]
fn increasing(keys: &[KeyId]) -> bool {
    // Branch-free, so that it vectorizes.
    keys.iter().zip(keys.iter().skip(1)).fold(true, |ok, (a, b)| ok & (a < b))
}

/// The reverse sweep of the local-order path: marks what the operations reached from
/// `needed` read, locally in `needed` and from outside in `outside` (see `in_local_order`);
/// returns the unreached operations, last first.
#[inline(never)]
fn sweep<Op: GraphOperation>(graph: &Graph<Op>, needed: &mut [bool], outside: &mut [u32], lo: usize) -> Vec<usize> {
    let slot = |id: KeyId| id.index() - lo;
    let n_values = needed.len();
    // Unreached operations, last first (the general pass leaves them out).
    let mut dead: Vec<usize> = Vec::new();
    let items = graph.op_inputs.items();
    let external_key = &graph.external_key[..];
    let mut end = n_values;
    let ops = graph.op_first_output.raw().iter().zip(graph.op_inputs.starts().windows(2)).enumerate();
    for (op, (first, bounds)) in ops.rev() {
        let first = first.index();
        let live = if first + 1 == end {
            needed[first]
        } else {
            let outs = &mut needed[first..end];
            let live = outs.contains(&true);
            outs.fill(live);
            live
        };
        end = first;
        if !live {
            dead.push(op);
            continue;
        }
        for r in &items[bounds[0] as usize..bounds[1] as usize] {
            match r.get() {
                InputRef::Local(u) => needed[u.index()] = true,
                InputRef::External(i) => {
                    let at = &mut outside[slot(external_key[i as usize])];
                    if *at == 0 {
                        *at = i + 1;
                    }
                }
            }
        }
    }
    dead
}

/// Tags an output's index in `outside` (external operand indices are below 2^31).
const OUTPUT: u32 = 1 << 31;

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::{GraphBuilder, KeyInterner, LocalValueId, ValueRef};

    /// A minimal operation set: one to three inputs, one or two outputs, or a constant.
    #[derive(Clone, Debug, Hash, PartialEq, Eq)]
    enum TestOp {
        Unary(u8),
        Add,
        Pair,
        Const(u8),
    }

    impl GraphOperation for TestOp {
        type Operand = f64;
        type Context = ();
        type InputKey = u32;
        fn input_count(&self) -> usize {
            match self {
                TestOp::Unary(_) | TestOp::Pair => 1,
                TestOp::Add => 2,
                TestOp::Const(_) => 0,
            }
        }
        fn output_count(&self) -> usize {
            if *self == TestOp::Pair { 2 } else { 1 }
        }
    }

    /// Builds a parent graph and a fragment over it from `steps`, each `(kind, a, b, role)`
    /// choosing an operation and its operands among the fragment's values so far, the
    /// parent's values and inputs (by key), and `outputs` picking keys among all of those.
    fn fragment(steps: &[(u8, u16, u16, u8)], outputs: &[u16]) -> (Arc<Graph<TestOp>>, Vec<ValueKey<TestOp>>) {
        let interner = KeyInterner::new();
        let mut p = GraphBuilder::with_interner(interner.clone());
        let x = p.add_input(0);
        let s = p.add_operation(TestOp::Unary(0), vec![ValueRef::Local(x)], OperationRole::Primary)[0];
        let pair = p.add_operation(TestOp::Pair, vec![ValueRef::Local(s)], OperationRole::Primary);
        let parent = Arc::new(p.build());
        let mut far: Vec<ValueKey<TestOp>> =
            vec![parent.global_key(s), parent.global_key(pair[0]), parent.global_key(pair[1]), ValueKey::Input(0)];
        let mut b = GraphBuilder::with_interner(interner);
        b.add_parent(Arc::clone(&parent));
        let mut local: Vec<LocalValueId> = (1..3).map(|i| b.add_input(i)).collect();
        for &(kind, a, c, how) in steps {
            let n = local.len() + far.len();
            let pick = |i: u16| {
                let i = i as usize % n;
                if i < local.len() {
                    ValueRef::Local(local[i])
                } else {
                    ValueRef::External(far[i - local.len()].clone())
                }
            };
            let (op, operands) = match kind % 5 {
                0 => (TestOp::Unary(kind / 5 % 2), vec![pick(a)]),
                1 | 2 => (TestOp::Add, vec![pick(a), pick(c)]),
                3 => (TestOp::Pair, vec![pick(a)]),
                _ => (TestOp::Const(kind / 5 % 2), vec![]),
            };
            let role = match how % 3 {
                0 => OperationRole::Primary,
                r => OperationRole::Linearized {
                    active_mask: (0..operands.len()).map(|i| (i + r as usize) % 2 == 0).collect(),
                },
            };
            let outs = b.add_operation(op, operands, role).to_vec();
            // A key read by key later: one defined here (the general pass follows it).
            if how % 7 == 6 {
                far.push(b.global_key(outs[0]));
            }
            local.extend(outs);
        }
        let g = Arc::new(b.build());
        let all: Vec<ValueKey<TestOp>> = local.iter().map(|&v| g.global_key(v)).chain(far).collect();
        let outputs = outputs.iter().map(|&i| all[i as usize % all.len()].clone()).collect();
        (g, outputs)
    }

    /// The two paths' graphs, column by column (`None` where the local-order path does not apply).
    fn both(
        g: &Arc<Graph<TestOp>>,
        outputs: &[ValueKey<TestOp>],
    ) -> Option<(MaterializedGraph<TestOp>, MaterializedGraph<TestOp>)> {
        let general = materialize(&ResolvedView::alone(Arc::clone(g)), outputs, Undefined::External).unwrap();
        let fast = in_local_order(g, outputs).unwrap()?;
        fast.verify().unwrap();
        Some((fast, general))
    }

    fn assert_same(a: &MaterializedGraph<TestOp>, b: &MaterializedGraph<TestOp>) {
        assert_eq!(a.value_key, b.value_key);
        assert_eq!(a.value_def.raw(), b.value_def.raw());
        assert_eq!(a.ops, b.ops);
        assert_eq!(a.op_key, b.op_key);
        assert_eq!(a.op_inputs, b.op_inputs);
        assert_eq!(a.op_role, b.op_role);
        assert_eq!(a.roles, b.roles);
        assert_eq!(a.op_first_output, b.op_first_output);
        assert_eq!((&a.inputs, &a.input_keys), (&b.inputs, &b.input_keys));
        assert_eq!((&a.externals, &a.external_keys), (&b.externals, &b.external_keys));
        assert_eq!(a.outputs, b.outputs);
    }

    /// A fragment built in one go on fresh keys takes the local-order path, unreached
    /// operations, keys read from outside and two-output operations included.
    #[test]
    fn a_fresh_fragment_takes_the_local_order_path() {
        let steps = [(1, 0, 2, 1), (3, 4, 0, 0), (0, 5, 0, 2), (1, 3, 6, 0), (0, 9, 0, 0), (4, 0, 0, 0)];
        let (g, _) = fragment(&steps, &[]);
        let outputs = vec![g.global_key(LocalValueId::new(6)), ValueKey::Input(0), ValueKey::Input(2)];
        let (fast, general) = both(&g, &outputs).expect("keys increase with local ids");
        assert_same(&fast, &general);
        assert!(fast.operation_count() < g.operation_count(), "some operations are unreached");
        assert!(!fast.externals().is_empty());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        /// Where the local-order path applies, it gives exactly the general pass's graph.
        #[test]
        fn the_local_order_path_gives_the_general_graph(
            steps in proptest::collection::vec((any::<u8>(), any::<u16>(), any::<u16>(), any::<u8>()), 0..24),
            outputs in proptest::collection::vec(any::<u16>(), 0..4),
        ) {
            let (g, outputs) = fragment(&steps, &outputs);
            if let Some((fast, general)) = both(&g, &outputs) {
                assert_same(&fast, &general);
            }
        }
    }
}
