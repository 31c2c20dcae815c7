//! `materialize_merge`: flatten the reachable part of a view into one graph.
//!
//! Input: a [`ResolvedView`] and output keys. Output: a [`MaterializedGraph`] holding
//! exactly the definitions reachable from the outputs, each structural key once (CSE),
//! in one topological order, with its inputs listed by key.
//!
//! Invariants of the output (checked by [`MaterializedGraph::verify`]):
//! - operation `i`'s inputs are values created before its outputs (id order is topological);
//! - no two values share a [`KeyId`] (deduplicated by structural key);
//! - `inputs()` lists every input value once, in first-use order, and `input_keys()` is
//!   parallel to it.
//!
//! Algorithm: iterative depth-first post-order from the outputs (no recursion, so any
//! depth works on any stack). Operands that are local to a fragment are looked up in a
//! dense per-fragment array; deduplication by key uses a dense array over the interner's
//! key space when the view is a large part of it, and a hash map otherwise.
//! Complexity: `O(reachable values + operands)`.

use std::fmt;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::error::{GraphError, GraphResult};
use crate::graph::{Graph, InputRef, LocalDef, LocalOperationId, LocalValueId};
use crate::id::{IdVec, ListPool};
use crate::key::{KeyId, KeyInterner, OperationKey, OperationKeyId, ValueKey};
use crate::operation::{GraphOperation, Label, OperationRole};
use crate::resolve::ResolvedView;

crate::define_id!(
    /// A value of a [`MaterializedGraph`].
    pub struct ValueId = "v"
);
crate::define_id!(
    /// An operation of a [`MaterializedGraph`].
    pub struct OperationId = "op"
);

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum MatDef {
    Input(u32),
    Output(OperationId, u8),
}

/// A flat, deduplicated, topologically ordered graph: the input of [`compile`](crate::compile).
pub struct MaterializedGraph<Op: GraphOperation> {
    pub(crate) interner: Arc<KeyInterner<Op>>,
    pub(crate) value_key: IdVec<ValueId, KeyId>,
    pub(crate) value_def: IdVec<ValueId, MatDef>,
    pub(crate) ops: IdVec<OperationId, Op>,
    pub(crate) op_key: IdVec<OperationId, OperationKeyId>,
    pub(crate) op_inputs: ListPool<ValueId>,
    pub(crate) op_role: IdVec<OperationId, u32>,
    pub(crate) roles: Vec<OperationRole>,
    pub(crate) op_first_output: IdVec<OperationId, ValueId>,
    pub(crate) inputs: Vec<ValueId>,
    pub(crate) input_keys: Vec<Op::InputKey>,
    pub(crate) outputs: Vec<ValueId>,
}

/// How a value of a [`MaterializedGraph`] is defined.
#[derive(Debug, PartialEq, Eq)]
pub enum MaterializedValueDef<'a, Op: GraphOperation> {
    /// A graph input.
    Input(&'a Op::InputKey),
    /// Output `output_slot` of an operation.
    Output {
        /// The producing operation.
        operation: OperationId,
        /// Which of its outputs.
        output_slot: u8,
    },
}

/// One operation of a [`MaterializedGraph`].
pub struct MaterializedOperation<'a, Op: GraphOperation> {
    graph: &'a MaterializedGraph<Op>,
    id: OperationId,
}

impl<'a, Op: GraphOperation> MaterializedOperation<'a, Op> {
    /// The operation's id.
    pub fn id(&self) -> OperationId {
        self.id
    }
    /// The operation.
    pub fn operation(&self) -> &'a Op {
        &self.graph.ops[self.id]
    }
    /// Its operands.
    pub fn inputs(&self) -> &'a [ValueId] {
        self.graph.op_inputs.get(self.id.index())
    }
    /// Its outputs (consecutive ids).
    pub fn outputs(&self) -> impl ExactSizeIterator<Item = ValueId> + use<'a, Op> {
        self.graph.op_outputs(self.id)
    }
    /// Its role.
    pub fn role(&self) -> &'a OperationRole {
        &self.graph.roles[self.graph.op_role[self.id] as usize]
    }
    /// Its interned key.
    pub fn key(&self) -> OperationKey<Op> {
        self.graph.operation_key(self.id)
    }
}

impl<Op: GraphOperation> MaterializedGraph<Op> {
    /// The interner of the keys.
    pub fn interner(&self) -> &Arc<KeyInterner<Op>> {
        &self.interner
    }
    /// Number of values.
    pub fn value_count(&self) -> usize {
        self.value_def.len()
    }
    /// Number of operations.
    pub fn operation_count(&self) -> usize {
        self.ops.len()
    }
    /// Input values, in the order `eval` expects them.
    pub fn inputs(&self) -> &[ValueId] {
        &self.inputs
    }
    /// Input keys, in the order `eval` expects them (parallel to [`Self::inputs`]).
    pub fn input_keys(&self) -> &[Op::InputKey] {
        &self.input_keys
    }
    /// Output values, in the order they were requested.
    pub fn outputs(&self) -> &[ValueId] {
        &self.outputs
    }
    /// Output keys, in the order they were requested.
    pub fn output_keys(&self) -> Vec<ValueKey<Op>> {
        self.outputs.iter().map(|&v| self.value_key(v)).collect()
    }
    /// The operations in topological order.
    pub fn operations(&self) -> impl DoubleEndedIterator<Item = MaterializedOperation<'_, Op>> + ExactSizeIterator {
        self.ops.ids().map(move |id| MaterializedOperation { graph: self, id })
    }
    /// One operation.
    ///
    /// # Panics
    /// If `id` is out of range.
    pub fn operation(&self, id: OperationId) -> MaterializedOperation<'_, Op> {
        assert!(id.index() < self.ops.len(), "{id:?} is not an operation of this graph");
        MaterializedOperation { graph: self, id }
    }
    /// How a value is defined, or `None` if it is out of range.
    pub fn value_def(&self, v: ValueId) -> Option<MaterializedValueDef<'_, Op>> {
        Some(match *self.value_def.get(v)? {
            MatDef::Input(i) => MaterializedValueDef::Input(&self.input_keys[i as usize]),
            MatDef::Output(operation, output_slot) => MaterializedValueDef::Output { operation, output_slot },
        })
    }
    /// The global key of a value.
    ///
    /// # Panics
    /// If `v` is out of range.
    pub fn value_key(&self, v: ValueId) -> ValueKey<Op> {
        match self.value_def[v] {
            MatDef::Input(i) => ValueKey::Input(self.input_keys[i as usize].clone()),
            MatDef::Output(op, slot) => ValueKey::Derived { operation: self.operation_key(op), output_slot: slot },
        }
    }
    /// The interned id of a value's key.
    ///
    /// # Panics
    /// If `v` is out of range.
    pub fn key_id(&self, v: ValueId) -> KeyId {
        self.value_key[v]
    }

    pub(crate) fn op_outputs(&self, op: OperationId) -> impl ExactSizeIterator<Item = ValueId> + use<Op> {
        let first = self.op_first_output[op].index();
        (first..first + self.ops[op].output_count()).map(ValueId::new)
    }

    pub(crate) fn operation_key(&self, op: OperationId) -> OperationKey<Op> {
        let n = self.ops[op].output_count();
        let first = if n > 0 { self.value_key[self.op_first_output[op]] } else { KeyId::new(0) };
        OperationKey::from_parts(self.interner.id(), self.op_key[op], first, n)
    }

    /// Bytes held by the columns.
    pub fn heap_bytes(&self) -> usize {
        self.value_key.heap_bytes()
            + self.value_def.heap_bytes()
            + self.ops.heap_bytes()
            + self.op_key.heap_bytes()
            + self.op_inputs.heap_bytes()
            + self.op_role.heap_bytes()
            + self.op_first_output.heap_bytes()
            + self.inputs.capacity() * 4
            + self.input_keys.capacity() * std::mem::size_of::<Op::InputKey>()
            + self.outputs.capacity() * 4
    }
}

impl<Op: GraphOperation> fmt::Debug for MaterializedGraph<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaterializedGraph")
            .field("values", &self.value_def.len())
            .field("operations", &self.ops.len())
            .field("inputs", &self.inputs.len())
            .field("outputs", &self.outputs)
            .finish()
    }
}

/// Flattens the part of `view` reachable from `outputs` into one deduplicated graph.
///
/// # Panics
/// On an unresolved or foreign key; see [`try_materialize_merge`].
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{materialize_merge, resolve, GraphBuilder, ValueRef::Local, OperationRole::Primary};
/// use scalar::{ScalarOp, ScalarKey};
///
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// let a = b.add_operation(ScalarOp::Exp, vec![Local(x)], Primary)[0];
/// let a2 = b.add_operation(ScalarOp::Exp, vec![Local(x)], Primary)[0]; // same structure
/// let y = b.add_operation(ScalarOp::Mul, vec![Local(a), Local(a2)], Primary)[0];
/// let g = Arc::new(b.build());
/// let m = materialize_merge(&resolve(vec![g.clone()]), &[g.global_key(y)]);
/// assert_eq!(m.operation_count(), 2); // exp deduplicated
/// assert_eq!(m.input_keys(), &[ScalarKey::var(0)]);
/// ```
pub fn materialize_merge<Op: GraphOperation>(
    view: &ResolvedView<Op>,
    outputs: &[ValueKey<Op>],
) -> MaterializedGraph<Op> {
    try_materialize_merge(view, outputs).unwrap_or_else(|e| panic!("{e}"))
}

/// Flattens the part of `view` reachable from `outputs`, or reports the first key that
/// no graph defines (or that belongs to another interner).
pub fn try_materialize_merge<Op: GraphOperation>(
    view: &ResolvedView<Op>,
    outputs: &[ValueKey<Op>],
) -> GraphResult<MaterializedGraph<Op>> {
    let interner = view.interner();
    let out_ids: Vec<KeyId> = outputs.iter().map(|k| interner.intern_key(k)).collect::<GraphResult<_>>()?;
    let key_space = interner.value_count();
    let local_values: usize = view.graphs().iter().map(|g| g.value_count()).sum();
    let mut m = Materializer::new(view, key_space, local_values);
    let mut result = Vec::with_capacity(outputs.len());
    for (key, &id) in outputs.iter().zip(&out_ids) {
        let v = match key {
            ValueKey::Input(k) => m.input_value(id, k),
            ValueKey::Derived { .. } => m.ensure_key(id)?,
        };
        result.push(v);
    }
    let mut graph = m.out;
    graph.outputs = result;
    #[cfg(debug_assertions)]
    graph.verify().unwrap_or_else(|e| panic!("internal error: materialized graph fails verification: {e}"));
    Ok(graph)
}

/// Key id → materialized value: dense over the key space, or hashed.
enum KeyMap {
    Dense(Vec<Option<ValueId>>),
    Sparse(FxHashMap<KeyId, ValueId>),
}

impl KeyMap {
    #[inline]
    fn get(&self, k: KeyId) -> Option<ValueId> {
        match self {
            KeyMap::Dense(v) => v[k.index()],
            KeyMap::Sparse(m) => m.get(&k).copied(),
        }
    }
    #[inline]
    fn insert(&mut self, k: KeyId, v: ValueId) {
        match self {
            KeyMap::Dense(d) => d[k.index()] = Some(v),
            KeyMap::Sparse(m) => {
                m.insert(k, v);
            }
        }
    }
}

struct Frame {
    graph: u32,
    op: LocalOperationId,
    next: u32,
}

struct Materializer<'v, Op: GraphOperation> {
    graphs: &'v [Arc<Graph<Op>>],
    view: &'v ResolvedView<Op>,
    key_map: KeyMap,
    /// Per graph: local value → materialized value (allocated on first use).
    local_map: Vec<Vec<Option<ValueId>>>,
    /// Per graph: local role index → materialized role index.
    role_map: Vec<Vec<Option<u32>>>,
    role_index: FxHashMap<OperationRole, u32>,
    stack: Vec<Frame>,
    out: MaterializedGraph<Op>,
}

impl<'v, Op: GraphOperation> Materializer<'v, Op> {
    fn new(view: &'v ResolvedView<Op>, key_space: usize, local_values: usize) -> Self {
        // Dense dedup when the view covers a good part of the key space.
        let key_map = if key_space <= local_values.saturating_mul(4).saturating_add(4096) {
            KeyMap::Dense(vec![None; key_space])
        } else {
            KeyMap::Sparse(FxHashMap::default())
        };
        let graphs = view.graphs();
        let mut role_index = FxHashMap::default();
        role_index.insert(OperationRole::Primary, 0);
        Materializer {
            graphs,
            view,
            key_map,
            local_map: vec![Vec::new(); graphs.len()],
            role_map: vec![Vec::new(); graphs.len()],
            role_index,
            stack: Vec::new(),
            out: MaterializedGraph {
                interner: Arc::clone(view.interner()),
                value_key: IdVec::new(),
                value_def: IdVec::new(),
                ops: IdVec::new(),
                op_key: IdVec::new(),
                op_inputs: ListPool::default(),
                op_role: IdVec::new(),
                roles: vec![OperationRole::Primary],
                op_first_output: IdVec::new(),
                inputs: Vec::new(),
                input_keys: Vec::new(),
                outputs: Vec::new(),
            },
        }
    }

    fn local_slot(&mut self, g: usize, v: LocalValueId) -> &mut Option<ValueId> {
        let map = &mut self.local_map[g];
        if map.is_empty() {
            map.resize(self.graphs[g].value_count(), None);
        }
        &mut map[v.index()]
    }

    fn input_value(&mut self, key: KeyId, input: &Op::InputKey) -> ValueId {
        if let Some(v) = self.key_map.get(key) {
            return v;
        }
        let index = self.out.inputs.len() as u32;
        let v = self.out.value_def.push(MatDef::Input(index));
        self.out.value_key.push(key);
        self.out.inputs.push(v);
        self.out.input_keys.push(input.clone());
        self.key_map.insert(key, v);
        v
    }

    /// Materializes the value with key `key` (a derived key) and everything it needs.
    fn ensure_key(&mut self, key: KeyId) -> GraphResult<ValueId> {
        if let Some(v) = self.key_map.get(key) {
            return Ok(v);
        }
        let (g, v) = self.view.locate(key).ok_or_else(|| self.view.unresolved(key))?;
        self.ensure_local(g, v)
    }

    fn ensure_local(&mut self, g: usize, v: LocalValueId) -> GraphResult<ValueId> {
        if let Some(m) = self.ready_local(g, v)? {
            return Ok(m);
        }
        self.run()?;
        Ok(self.local_slot(g, v).expect("the value was materialized"))
    }

    /// If `(g, v)` is materialized (or an input, emitted now), its value; otherwise
    /// pushes a frame for its producer and returns `None`.
    fn ready_local(&mut self, g: usize, v: LocalValueId) -> GraphResult<Option<ValueId>> {
        if let Some(m) = *self.local_slot(g, v) {
            return Ok(Some(m));
        }
        let graph = &self.graphs[g];
        let key = graph.value_key[v];
        if let Some(m) = self.key_map.get(key) {
            *self.local_slot(g, v) = Some(m);
            return Ok(Some(m));
        }
        match graph.value_def[v] {
            LocalDef::Input(i) => {
                let m = self.input_value(key, &graph.input_keys[i as usize]);
                *self.local_slot(g, v) = Some(m);
                Ok(Some(m))
            }
            LocalDef::Output(op, _) => {
                self.stack.push(Frame { graph: g as u32, op, next: 0 });
                Ok(None)
            }
        }
    }

    fn ready_ref(&mut self, g: usize, r: InputRef) -> GraphResult<()> {
        match r {
            InputRef::Local(v) => {
                self.ready_local(g, v)?;
            }
            InputRef::External(i) => {
                let graph = &self.graphs[g];
                let key = graph.external_key[i as usize];
                if self.key_map.get(key).is_some() {
                    return Ok(());
                }
                match &graph.externals[i as usize] {
                    ValueKey::Input(k) => {
                        self.input_value(key, k);
                    }
                    ValueKey::Derived { .. } => {
                        let (g2, v2) = self.view.locate(key).ok_or_else(|| self.view.unresolved(key))?;
                        self.ready_local(g2, v2)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Drains the frame stack: each frame readies its operands one by one, then emits.
    fn run(&mut self) -> GraphResult<()> {
        let graphs = self.graphs;
        while let Some(frame) = self.stack.last_mut() {
            let g = frame.graph as usize;
            let refs = graphs[g].op_input_refs(frame.op);
            if (frame.next as usize) < refs.len() {
                let r = refs[frame.next as usize];
                frame.next += 1;
                self.ready_ref(g, r)?;
            } else {
                let op = frame.op;
                self.stack.pop();
                self.emit(g, op)?;
            }
        }
        Ok(())
    }

    fn emit(&mut self, g: usize, op: LocalOperationId) -> GraphResult<()> {
        let graph = &*self.graphs[g];
        let out = &mut self.out;
        let id = out.ops.next_id().ok_or(GraphError::IdSpaceExhausted { space: "materialized operation" })?;
        let n_out = graph.ops[op].output_count();
        if out.value_def.len() + n_out > <ValueId as crate::Id>::MAX_INDEX {
            return Err(GraphError::IdSpaceExhausted { space: "materialized value" });
        }
        for &r in graph.op_input_refs(op) {
            let m = match r {
                InputRef::Local(v) => self.local_map[g][v.index()],
                InputRef::External(i) => self.key_map.get(graph.external_key[i as usize]),
            };
            out.op_inputs.push_item(m.expect("operands are materialized before their user"));
        }
        if !out.op_inputs.finish_list() {
            out.op_inputs.abandon_list();
            return Err(GraphError::IdSpaceExhausted { space: "materialized operand pool" });
        }
        // Map the graph-local role to this graph's role table.
        let local_role = graph.op_role[op] as usize;
        let roles = &mut self.role_map[g];
        if roles.is_empty() {
            roles.resize(graph.roles.len(), None);
        }
        let role = match roles[local_role] {
            Some(r) => r,
            None => {
                let role = &graph.roles[local_role];
                let r = match self.role_index.get(role) {
                    Some(&r) => r,
                    None => {
                        let r = out.roles.len() as u32;
                        out.roles.push(role.clone());
                        self.role_index.insert(role.clone(), r);
                        r
                    }
                };
                roles[local_role] = Some(r);
                r
            }
        };
        out.ops.push(graph.ops[op].clone());
        out.op_key.push(graph.op_key[op]);
        out.op_role.push(role);
        let first = ValueId::new(out.value_def.len());
        out.op_first_output.push(first);
        let first_local = graph.op_first_output[op].index();
        for slot in 0..n_out {
            let v = out.value_def.push(MatDef::Output(id, slot as u8));
            let local = LocalValueId::new(first_local + slot);
            let key = graph.value_key[local];
            out.value_key.push(key);
            self.key_map.insert(key, v);
            let map = &mut self.local_map[g];
            if map.is_empty() {
                map.resize(graph.value_count(), None);
            }
            map[local.index()] = Some(v);
        }
        Ok(())
    }
}

impl<Op: GraphOperation> MaterializedGraph<Op> {
    pub(crate) fn fmt_operation(&self, f: &mut fmt::Formatter<'_>, op: OperationId) -> fmt::Result {
        let outs: Vec<String> = self.op_outputs(op).map(|v| format!("{v:?}")).collect();
        write!(f, "{} = {}", outs.join(", "), Label(&self.ops[op]))?;
        let role = &self.roles[self.op_role[op] as usize];
        if role.is_linearized() {
            write!(f, " [{role}]")?;
        }
        for (i, v) in self.op_inputs.get(op.index()).iter().enumerate() {
            write!(f, "{}{v:?}", if i == 0 { " " } else { ", " })?;
        }
        Ok(())
    }
}
