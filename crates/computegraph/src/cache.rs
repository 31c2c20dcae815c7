//! The compilation cache (`docs/SPEC.md` §2.6): compiled programs keyed by graph structure.
//!
//! Default key: [`StructuralKey`], the interned ids of the requested outputs. Because
//! keys are structural and hash-consed, equal output ids mean the same graph, so a hit
//! skips materialize and compile entirely: the lookup costs interning the output keys.
//!
//! Normalization hook: keys that differ only in identity tokens (fresh input keys, AD
//! pass ids) are different structural keys. A downstream crate that wants those to hit
//! maps its graph to its own key type `K` (for example with
//! [`MaterializedGraph::canonical_form`], which replaces input keys by their positions)
//! and calls [`CompileCache::get_or_insert_with`].
//!
//! Storage: entries live in a `slotmap::SlotMap`, because they are evicted (least
//! recently used beyond the capacity) and a [`ProgramHandle`] held by a user must be
//! detected as stale afterwards rather than alias a newer entry. The cache is internally
//! locked, so one cache can be shared by threads; compilation runs outside the lock.

use std::hash::Hash;
use std::sync::{Arc, Mutex};

use rustc_hash::FxHashMap;
use slotmap::{SlotMap, new_key_type};

use crate::compile::try_compile;
use crate::compiled::CompiledProgram;
use crate::error::GraphResult;
use crate::id::KeyId;
use crate::key::ValueKey;
use crate::materialize::{MaterializedGraph, try_materialize_merge};
use crate::operation::GraphOperation;
use crate::resolve::ResolvedView;

new_key_type! {
    /// A handle to a cached program; stale once the entry is evicted.
    pub struct ProgramHandle;
}

/// The default cache key: interner id and the interned ids of the outputs.
///
/// Equal structure gives equal keys, so rebuilding a graph finds its program again.
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{resolve, GraphBuilder, KeyInterner, OperationRole::Primary, StructuralKey, ValueRef::Local};
/// use scalar::{ScalarKey, ScalarOp};
///
/// let interner = KeyInterner::new();
/// let key_of = |op: ScalarOp| {
///     let mut b = GraphBuilder::<ScalarOp>::with_interner(interner.clone());
///     let x = b.add_input(ScalarKey::var(0));
///     let y = b.add_operation(op, vec![Local(x)], Primary)[0];
///     let g = Arc::new(b.build());
///     StructuralKey::new(&resolve(vec![g.clone()]), &[g.global_key(y)]).unwrap()
/// };
/// assert_eq!(key_of(ScalarOp::Sin), key_of(ScalarOp::Sin));
/// assert_ne!(key_of(ScalarOp::Sin), key_of(ScalarOp::Cos));
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StructuralKey {
    interner: u32,
    outputs: Box<[KeyId]>,
}

impl StructuralKey {
    /// The structural key of `outputs` in `view`'s interner.
    pub fn new<Op: GraphOperation>(view: &ResolvedView<Op>, outputs: &[ValueKey<Op>]) -> GraphResult<Self> {
        let interner = view.interner();
        let outputs = outputs.iter().map(|k| interner.intern_key(k)).collect::<GraphResult<_>>()?;
        Ok(StructuralKey { interner: interner.id(), outputs })
    }
}

struct Entry<Op: GraphOperation, K> {
    key: K,
    program: Arc<CompiledProgram<Op>>,
    last_used: u64,
}

struct Inner<Op: GraphOperation, K> {
    entries: SlotMap<ProgramHandle, Entry<Op, K>>,
    index: FxHashMap<K, ProgramHandle>,
    clock: u64,
    hits: u64,
    misses: u64,
}

/// Cache statistics, from [`CompileCache::stats`].
///
/// ```
/// use computegraph::{CacheStats, CompileCache};
/// use scalar::ScalarOp;
///
/// let cache = CompileCache::<ScalarOp>::new(4);
/// assert_eq!(cache.stats(), CacheStats { hits: 0, misses: 0, entries: 0 });
/// ```
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Lookups that found a program.
    pub hits: u64,
    /// Lookups that compiled one.
    pub misses: u64,
    /// Programs held now.
    pub entries: usize,
}

/// A bounded, thread-safe cache of compiled programs.
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{resolve, CompileCache, GraphBuilder, ValueRef::Local, OperationRole::Primary};
/// use scalar::{ScalarOp, ScalarKey};
///
/// let cache = CompileCache::<ScalarOp>::new(16);
/// for _ in 0..3 {
///     // Rebuilding the same structure gives the same keys, so only the first compiles.
///     let mut b = GraphBuilder::<ScalarOp>::new();
///     let x = b.add_input(ScalarKey::var(0));
///     let y = b.add_operation(ScalarOp::Sin, vec![Local(x)], Primary)[0];
///     let g = Arc::new(b.build());
///     let program = cache.get_or_compile(&resolve(vec![g.clone()]), &[g.global_key(y)]).unwrap();
///     assert_eq!(program.eval(&mut (), &[&0.0]), vec![0.0]);
/// }
/// assert_eq!((cache.stats().hits, cache.stats().misses), (2, 1));
/// ```
pub struct CompileCache<Op: GraphOperation, K = StructuralKey> {
    capacity: usize,
    inner: Mutex<Inner<Op, K>>,
}

impl<Op: GraphOperation, K: Clone + Hash + Eq> CompileCache<Op, K> {
    /// A cache holding at most `capacity` programs (at least one).
    pub fn new(capacity: usize) -> Self {
        CompileCache {
            capacity: capacity.max(1),
            inner: Mutex::new(Inner {
                entries: SlotMap::with_key(),
                index: FxHashMap::default(),
                clock: 0,
                hits: 0,
                misses: 0,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<Op, K>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The program cached under `key`, compiling it with `make` on a miss.
    /// `make` runs outside the lock; if two threads miss at once, the first insert wins.
    pub fn get_or_insert_with<F>(&self, key: K, make: F) -> GraphResult<(ProgramHandle, Arc<CompiledProgram<Op>>)>
    where
        F: FnOnce() -> GraphResult<CompiledProgram<Op>>,
    {
        {
            let mut inner = self.lock();
            inner.clock += 1;
            let now = inner.clock;
            if let Some(&h) = inner.index.get(&key) {
                inner.hits += 1;
                let e = &mut inner.entries[h];
                e.last_used = now;
                return Ok((h, Arc::clone(&e.program)));
            }
        }
        let program = Arc::new(make()?);
        let mut inner = self.lock();
        inner.misses += 1;
        if let Some(&h) = inner.index.get(&key) {
            return Ok((h, Arc::clone(&inner.entries[h].program)));
        }
        while inner.entries.len() >= self.capacity {
            let oldest = inner.entries.iter().min_by_key(|(_, e)| e.last_used).map(|(h, _)| h).expect("non-empty");
            let e = inner.entries.remove(oldest).expect("present");
            inner.index.remove(&e.key);
        }
        let now = inner.clock;
        let h = inner.entries.insert(Entry { key: key.clone(), program: Arc::clone(&program), last_used: now });
        inner.index.insert(key, h);
        Ok((h, program))
    }

    /// The program behind a handle, or `None` once it has been evicted.
    pub fn get(&self, handle: ProgramHandle) -> Option<Arc<CompiledProgram<Op>>> {
        self.lock().entries.get(handle).map(|e| Arc::clone(&e.program))
    }

    /// Hit, miss and size counters.
    pub fn stats(&self) -> CacheStats {
        let inner = self.lock();
        CacheStats { hits: inner.hits, misses: inner.misses, entries: inner.entries.len() }
    }

    /// Drops every entry (handles become stale).
    pub fn clear(&self) {
        let mut inner = self.lock();
        inner.entries.clear();
        inner.index.clear();
    }
}

impl<Op: GraphOperation> CompileCache<Op, StructuralKey> {
    /// The compiled program for `outputs` in `view`: cached by structural key, otherwise
    /// materialized, compiled and inserted.
    pub fn get_or_compile(
        &self,
        view: &ResolvedView<Op>,
        outputs: &[ValueKey<Op>],
    ) -> GraphResult<Arc<CompiledProgram<Op>>> {
        let key = StructuralKey::new(view, outputs)?;
        self.get_or_insert_with(key, || try_compile(&try_materialize_merge(view, outputs)?)).map(|(_, p)| p)
    }
}

/// A canonical, key-free encoding of a materialized graph: operations, roles and operand
/// positions, with input keys (and the keys of external values, see
/// [`try_materialize_fragment`](crate::try_materialize_fragment)) replaced by their
/// positions. Two graphs that differ only in their input keys (or in fresh identity tokens
/// inside them) have equal canonical forms; a program shared through it binds inputs and
/// external values by position, so the first graph's keys name them.
///
/// It is the hook for downstream key normalization: a cache keyed by it
/// (`CompileCache<Op, CanonicalForm<Op>>` with [`CompileCache::get_or_insert_with`]) shares
/// one program between graphs that differ only in which inputs they read.
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{materialize_merge, resolve, GraphBuilder, OperationRole::Primary, ValueRef::Local};
/// use scalar::{ScalarKey, ScalarOp};
///
/// let form_of = |input: u32| {
///     let mut b = GraphBuilder::<ScalarOp>::new();
///     let x = b.add_input(ScalarKey::var(input));
///     let y = b.add_operation(ScalarOp::Exp, vec![Local(x)], Primary)[0];
///     let g = Arc::new(b.build());
///     materialize_merge(&resolve(vec![g.clone()]), &[g.global_key(y)]).canonical_form()
/// };
/// assert_eq!(form_of(3), form_of(7)); // exp of an input, whichever input it is
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CanonicalForm<Op> {
    ops: Vec<Op>,
    roles: Vec<crate::OperationRole>,
    op_role: Vec<u32>,
    operands: Vec<u32>,
    outputs: Vec<u32>,
    input_count: u32,
    external_count: u32,
}

impl<Op: GraphOperation> MaterializedGraph<Op> {
    /// The [`CanonicalForm`] of this graph, for cache keys that ignore input identity.
    pub fn canonical_form(&self) -> CanonicalForm<Op> {
        CanonicalForm {
            ops: self.operations().map(|o| o.operation().clone()).collect(),
            roles: self.roles.clone(),
            op_role: self.op_key.ids().map(|o| self.role_id(o)).collect(),
            operands: self.op_inputs.items().iter().map(|v| v.index() as u32).collect(),
            outputs: self.outputs.iter().map(|v| v.index() as u32).collect(),
            input_count: self.inputs.len() as u32,
            external_count: self.externals.len() as u32,
        }
    }
}
