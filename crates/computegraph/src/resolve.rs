//! `resolve`: a logical view over fragments, their parents and what a user's resolver
//! supplies.
//!
//! Input: root graphs, all on one interner, and for [`try_resolve_with`] a user's
//! [`Resolver`]. Output: a [`ResolvedView`] listing the roots and, after them, every graph
//! reachable through `parents` (each once, in breadth-first order). Nothing is copied; the
//! view holds `Arc`s.
//!
//! [`try_resolve_with`] then closes the view under the resolver with a worklist over its
//! graphs (no recursion): for each graph in turn, every `External` operand with a derived
//! key that no graph of the view defines yet is asked of the resolver, once per key; the
//! graph that answers joins the view with its own parents, and is scanned in its turn. A
//! key the resolver does not know stays undefined, exactly as in [`try_resolve`]:
//! `materialize_merge` reports it if an output reaches it. The resolver is asked only
//! while the view is built; `materialize_merge` and the transforms read the view's graphs
//! as they would any other view.
//!
//! Lookup rule (`docs/SPEC.md` §2.2): a local operand follows its local producer; an external
//! key is looked up in the view's graphs in order, the first definition wins. Input keys
//! need no definition: they are leaves.
//!
//! Output invariants: every graph of the view is on the roots' interner (else
//! [`GraphError::MixedInterners`], or [`GraphError::BadResolution`] for a graph the
//! resolver handed over); a graph the resolver handed over defines the key it was asked.
//!
//! Complexity, with `G` graphs in the view, `V` their values and `E` their external
//! operands: `resolve` is `O(G)`. A lookup probes the graphs one by one while there are at
//! most eight (each graph builds its key index on first use), and otherwise reads one
//! key-to-graph index of the whole view, built on first use in `O(V)`. `resolve_with` is
//! `O(G)` plus one lookup per external operand (`E`) and one resolver call per distinct
//! undefined key (and `O(V)` for the index once the view has more than eight graphs), so
//! a chain of fragments that only the resolver can reach costs time linear in its length.

use std::sync::{Arc, OnceLock};

use rustc_hash::FxHashSet;

use crate::error::{GraphError, GraphResult};
use crate::graph::{Graph, LocalDef, LocalOperationId, LocalValueId};
use crate::id::KeyId;
use crate::key::{KeyInterner, ValueKey};
use crate::keymap::KeyMap;
use crate::operation::GraphOperation;

/// Up to this many graphs, a lookup probes each graph's own index; beyond it, the view
/// indexes every key once (one probe per graph would make a long chain quadratic).
const SCAN_GRAPHS: usize = 8;

/// A logical view over graphs: the roots (each once) and their transitive parents, and
/// with [`resolve_with`] the graphs a user's [`Resolver`] supplied.
///
/// Building it copies nothing: it lists the graphs once each (roots first), so that
/// [`Self::resolve_value`] and `materialize_merge` can find any key's definition.
///
/// The specification's view (`docs/SPEC.md` §2.1) holds `roots` and a
/// `resolver: Arc<dyn Resolver>` that traversals ask as they go. This one asks a user's
/// [`Resolver`] once, in [`resolve_with`], and keeps the graphs it answered with in its
/// list, so `materialize_merge` and the transforms read graph columns only and make no call
/// through the trait per value.
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{resolve, GraphBuilder, OperationRole::Primary, ValueRef::{External, Local}};
/// use scalar::{ScalarKey, ScalarOp};
///
/// let mut a = GraphBuilder::<ScalarOp>::new();
/// let x = a.add_input(ScalarKey::var(0));
/// let s = a.add_operation(ScalarOp::Sin, vec![Local(x)], Primary)[0];
/// let first = Arc::new(a.build());
///
/// // A second fragment refers to the first one's value by key and names it as a parent.
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// b.add_parent(first.clone());
/// let y = b.add_operation(ScalarOp::Neg, vec![External(first.global_key(s))], Primary)[0];
/// let second = Arc::new(b.build());
///
/// let view = resolve(vec![second.clone()]);
/// assert_eq!(view.roots().len(), 1);
/// assert_eq!(view.graphs().len(), 2); // the parent is found through the root
/// assert!(view.resolve_value(&first.global_key(s)).is_some());
/// assert!(view.resolve_value(&second.global_key(y)).is_some());
/// ```
pub struct ResolvedView<Op: GraphOperation> {
    graphs: Vec<Arc<Graph<Op>>>,
    roots: usize,
    interner: Arc<KeyInterner<Op>>,
    /// Key id → index of the first graph that defines it; built on the first lookup in a
    /// view of more than [`SCAN_GRAPHS`] graphs (or by `resolve_with` while it gathers).
    index: OnceLock<KeyMap<u32>>,
}

/// A source of definitions: where a value with a given key is defined (`docs/SPEC.md` §2.1).
///
/// [`ResolvedView`] is one. Users write others (a fragment store, a cache, a lazy loader)
/// and hand them to [`resolve_with`], which asks them for the external keys that the
/// roots and their parents do not define; the graphs they answer with join the view, so
/// [`materialize_merge`](crate::materialize_merge) and the transforms run over them
/// unchanged. An answer borrows from the resolver: a resolver keeps the graphs it hands
/// out (a lazy loader keeps what it loaded), and [`ValueDef::local`] builds the answer
/// from a graph and a local value.
///
/// A store of fragments, none of them linked as a parent:
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::Arc;
/// use computegraph::{
///     compile, materialize_merge, resolve, resolve_with, try_materialize_merge, Graph, GraphBuilder,
///     LocalValueId, OperationRole::Primary, Resolver, ValueDef, ValueKey, ValueRef::{External, Local},
/// };
/// use scalar::{ScalarKey, ScalarOp};
///
/// /// Fragments, by the keys of their declared outputs.
/// #[derive(Default)]
/// struct Store(HashMap<ValueKey<ScalarOp>, (Arc<Graph<ScalarOp>>, LocalValueId)>);
///
/// impl Store {
///     fn insert(&mut self, graph: Arc<Graph<ScalarOp>>) {
///         for &v in graph.outputs() {
///             self.0.insert(graph.global_key(v), (graph.clone(), v));
///         }
///     }
/// }
///
/// impl Resolver<ScalarOp> for Store {
///     fn resolve_value(&self, key: &ValueKey<ScalarOp>) -> Option<ValueDef<'_, ScalarOp>> {
///         let (graph, value) = self.0.get(key)?;
///         ValueDef::local(graph, *value)
///     }
/// }
///
/// // sin(x), kept in the store only.
/// let mut a = GraphBuilder::<ScalarOp>::new();
/// let x = a.add_input(ScalarKey::var(0));
/// let s = a.add_operation(ScalarOp::Sin, vec![Local(x)], Primary)[0];
/// a.set_outputs(vec![s]);
/// let sin = Arc::new(a.build());
/// let sin_x = sin.global_key(s);
/// let mut store = Store::default();
/// store.insert(sin);
///
/// // -sin(x) refers to the stored value by key and names no parent.
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let y = b.add_operation(ScalarOp::Neg, vec![External(sin_x.clone())], Primary)[0];
/// let root = Arc::new(b.build());
/// let y = root.global_key(y);
///
/// // The roots alone do not define sin(x); with the store they do.
/// assert!(try_materialize_merge(&resolve(vec![root.clone()]), &[y.clone()]).is_err());
/// let view = resolve_with(vec![root], &store);
/// assert_eq!(view.graphs().len(), 2); // the root, then the stored fragment
/// assert!(matches!(view.resolve_value(&sin_x), Some(ValueDef::Operation { .. })));
///
/// let program = compile(&materialize_merge(&view, &[y]));
/// assert_eq!(program.eval(&mut (), &[&0.5]), vec![-(0.5f64).sin()]);
/// ```
pub trait Resolver<Op: GraphOperation> {
    /// Where `key` is defined, or `None` if this resolver does not know it. For an
    /// input key the answer is [`ValueDef::Input`] (or `None`); for a derived key it is
    /// an operation of a graph on the same interner as the key.
    fn resolve_value(&self, key: &ValueKey<Op>) -> Option<ValueDef<'_, Op>>;
}

impl<Op: GraphOperation> Resolver<Op> for ResolvedView<Op> {
    fn resolve_value(&self, key: &ValueKey<Op>) -> Option<ValueDef<'_, Op>> {
        ResolvedView::resolve_value(self, key)
    }
}

impl<Op: GraphOperation, R: Resolver<Op> + ?Sized> Resolver<Op> for &R {
    fn resolve_value(&self, key: &ValueKey<Op>) -> Option<ValueDef<'_, Op>> {
        (**self).resolve_value(key)
    }
}

impl<Op: GraphOperation, R: Resolver<Op> + ?Sized> Resolver<Op> for Box<R> {
    fn resolve_value(&self, key: &ValueKey<Op>) -> Option<ValueDef<'_, Op>> {
        (**self).resolve_value(key)
    }
}

impl<Op: GraphOperation, R: Resolver<Op> + ?Sized> Resolver<Op> for Arc<R> {
    fn resolve_value(&self, key: &ValueKey<Op>) -> Option<ValueDef<'_, Op>> {
        (**self).resolve_value(key)
    }
}

/// Where a value is defined: the answer of [`ResolvedView::resolve_value`] and of any
/// [`Resolver`]. It borrows the graph from whoever answered.
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{resolve, GraphBuilder, OperationRole::Primary, ValueDef, ValueKey, ValueRef::Local};
/// use scalar::{ScalarKey, ScalarOp};
///
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// let c = b.add_operation(ScalarOp::SinCos, vec![Local(x)], Primary);
/// let g = Arc::new(b.build());
/// let view = resolve(vec![g.clone()]);
///
/// assert!(matches!(view.resolve_value(&ValueKey::Input(ScalarKey::var(0))), Some(ValueDef::Input(_))));
/// match view.resolve_value(&g.global_key(c[1])) {
///     Some(ValueDef::Operation { graph, operation, output_slot }) => {
///         assert!(Arc::ptr_eq(graph, &g));
///         assert_eq!(*graph.operation(operation).operation(), ScalarOp::SinCos);
///         assert_eq!(output_slot, 1); // the cosine
///     }
///     other => panic!("{other:?}"),
/// }
/// ```
pub enum ValueDef<'a, Op: GraphOperation> {
    /// A graph input (a leaf).
    Input(Op::InputKey),
    /// Output `output_slot` of an operation of one of the view's graphs.
    Operation {
        /// The graph that defines it.
        graph: &'a Arc<Graph<Op>>,
        /// The operation in that graph.
        operation: LocalOperationId,
        /// Which of its outputs.
        output_slot: u8,
    },
}

impl<'a, Op: GraphOperation> ValueDef<'a, Op> {
    /// How local value `value` of `graph` is defined: the answer of a [`Resolver`] that
    /// keeps a value as a graph and a local id. `None` if `graph` has no such value.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use computegraph::{GraphBuilder, LocalValueId, OperationRole::Primary, ValueDef, ValueRef::Local};
    /// use scalar::{ScalarKey, ScalarOp};
    ///
    /// let mut b = GraphBuilder::<ScalarOp>::new();
    /// let x = b.add_input(ScalarKey::var(0));
    /// let sc = b.add_operation(ScalarOp::SinCos, vec![Local(x)], Primary);
    /// let g = Arc::new(b.build());
    ///
    /// assert!(matches!(ValueDef::local(&g, x), Some(ValueDef::Input(k)) if k == ScalarKey::var(0)));
    /// assert!(matches!(ValueDef::local(&g, sc[1]), Some(ValueDef::Operation { output_slot: 1, .. })));
    /// assert!(ValueDef::local(&g, LocalValueId::new(3)).is_none());
    /// ```
    pub fn local(graph: &'a Arc<Graph<Op>>, value: LocalValueId) -> Option<Self> {
        graph.value_op.get(value)?;
        Some(match graph.local_def(value) {
            LocalDef::Output(operation, output_slot) => ValueDef::Operation { graph, operation, output_slot },
            LocalDef::Input(i) => ValueDef::Input(graph.input_keys[i as usize].clone()),
        })
    }
}

impl<Op: GraphOperation> std::fmt::Debug for ValueDef<'_, Op> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ValueDef::Input(k) => write!(f, "Input({k:?})"),
            ValueDef::Operation { operation, output_slot, .. } => write!(f, "Operation({operation:?}.{output_slot})"),
        }
    }
}

/// Builds a view over `roots` and their parents.
///
/// # Panics
/// If the graphs use different interners; see [`try_resolve`].
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{resolve, GraphBuilder, ValueRef, OperationRole::Primary, ValueDef};
/// use scalar::{ScalarOp, ScalarKey};
///
/// let mut a = GraphBuilder::<ScalarOp>::new();
/// let x = a.add_input(ScalarKey::var(0));
/// let y = a.add_operation(ScalarOp::Exp, vec![ValueRef::Local(x)], Primary)[0];
/// let a = Arc::new(a.build());
/// let y_key = a.global_key(y);
///
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let z = b.add_operation(ScalarOp::Neg, vec![ValueRef::External(y_key.clone())], Primary)[0];
/// b.add_parent(a.clone());
/// let b = Arc::new(b.build());
///
/// let view = resolve(vec![b]);
/// assert_eq!(view.graphs().len(), 2);
/// assert!(matches!(view.resolve_value(&y_key), Some(ValueDef::Operation { .. })));
/// ```
pub fn resolve<Op: GraphOperation>(roots: Vec<Arc<Graph<Op>>>) -> ResolvedView<Op> {
    try_resolve(roots).unwrap_or_else(|e| panic!("{e}"))
}

/// Builds a view over `roots` and their parents, or reports graphs on different interners.
/// An empty root list gives an empty view on the global interner.
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{try_resolve, GraphBuilder, GraphError, KeyInterner};
/// use scalar::{ScalarKey, ScalarOp};
///
/// let graph_on = |interner| {
///     let mut b = GraphBuilder::<ScalarOp>::with_interner(interner);
///     b.add_input(ScalarKey::var(0));
///     Arc::new(b.build())
/// };
/// let (a, b) = (graph_on(KeyInterner::new()), graph_on(KeyInterner::new()));
/// assert!(try_resolve(vec![a.clone()]).is_ok());
/// // Keys of two interners cannot be compared, so one view cannot hold both.
/// assert!(matches!(try_resolve(vec![a, b]), Err(GraphError::MixedInterners { .. })));
/// ```
pub fn try_resolve<Op: GraphOperation>(roots: Vec<Arc<Graph<Op>>>) -> GraphResult<ResolvedView<Op>> {
    Ok(Gather::roots(roots)?.finish())
}

/// Builds a view over `roots`, their parents and whatever `resolver` supplies for the
/// external keys they leave undefined (see [`try_resolve_with`] and the example on
/// [`Resolver`]).
///
/// # Panics
/// If two graphs use different interners, or the resolver answers a key with a graph
/// that cannot define it; see [`try_resolve_with`].
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{resolve, resolve_with, GraphBuilder, OperationRole::Primary, ValueRef::{External, Local}};
/// use scalar::{ScalarKey, ScalarOp};
///
/// let mut a = GraphBuilder::<ScalarOp>::new();
/// let x = a.add_input(ScalarKey::var(0));
/// let c = a.add_operation(ScalarOp::Cos, vec![Local(x)], Primary)[0];
/// let cos = Arc::new(a.build());
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// b.add_operation(ScalarOp::Neg, vec![External(cos.global_key(c))], Primary);
/// let root = Arc::new(b.build());
///
/// // A view is a resolver; `root` names no parent, so only the resolver brings `cos`.
/// let view = resolve_with(vec![root], &resolve(vec![cos.clone()]));
/// assert!(Arc::ptr_eq(&view.graphs()[1], &cos));
/// ```
pub fn resolve_with<Op: GraphOperation, R: Resolver<Op> + ?Sized>(
    roots: Vec<Arc<Graph<Op>>>,
    resolver: &R,
) -> ResolvedView<Op> {
    try_resolve_with(roots, resolver).unwrap_or_else(|e| panic!("{e}"))
}

/// Builds a view over `roots`, their parents and the graphs `resolver` supplies, or says
/// why it cannot.
///
/// Every graph of the view is scanned once, in view order (a worklist, no recursion):
/// each `External` operand whose derived key no graph of the view defines yet is asked of
/// the resolver, at most once per key; the graph it answers with joins the view after
/// the graphs already there, followed by its parents that are not. Keys the resolver does
/// not know stay undefined, and `materialize_merge` reports them as it does for
/// [`resolve`] if an output reaches them. The resolver is asked only here: it may answer
/// for keys that no output of a later `materialize_merge` reaches.
///
/// Errors: [`GraphError::MixedInterners`] if the roots or a parent are on another
/// interner than the first root (an empty root list gives an empty view on the global
/// interner); [`GraphError::BadResolution`] if the resolver answers a derived key with a
/// graph on another interner, with a graph that does not define it, or with an input.
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{
///     resolve, try_materialize_merge, try_resolve_with, GraphBuilder, GraphError, OperationRole::Primary,
///     ValueRef::{External, Local},
/// };
/// use scalar::{ScalarKey, ScalarOp};
///
/// let mut a = GraphBuilder::<ScalarOp>::new();
/// let x = a.add_input(ScalarKey::var(0));
/// let e = a.add_operation(ScalarOp::Exp, vec![Local(x)], Primary)[0];
/// let exp = Arc::new(a.build());
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let y = b.add_operation(ScalarOp::Neg, vec![External(exp.global_key(e))], Primary)[0];
/// let root = Arc::new(b.build());
/// let y = root.global_key(y);
///
/// // Any view is a resolver: here one over the fragment that defines exp(x).
/// let view = try_resolve_with(vec![root.clone()], &resolve(vec![exp])).unwrap();
/// assert_eq!(view.graphs().len(), 2);
/// assert!(try_materialize_merge(&view, &[y.clone()]).is_ok());
///
/// // A resolver that does not know the key leaves it undefined, as `resolve` would.
/// let alone = try_resolve_with(vec![root], &resolve(Vec::new())).unwrap();
/// assert_eq!(alone.graphs().len(), 1);
/// assert!(matches!(try_materialize_merge(&alone, &[y]), Err(GraphError::UnresolvedKey { .. })));
/// ```
pub fn try_resolve_with<Op: GraphOperation, R: Resolver<Op> + ?Sized>(
    roots: Vec<Arc<Graph<Op>>>,
    resolver: &R,
) -> GraphResult<ResolvedView<Op>> {
    let mut gather = Gather::roots(roots)?;
    let mut asked: FxHashSet<KeyId> = FxHashSet::default();
    // The view's graphs double as the worklist: `graphs[scan..]` are not scanned yet.
    let mut scan = 0;
    while scan < gather.graphs.len() {
        let graph = Arc::clone(&gather.graphs[scan]);
        scan += 1;
        for (key, &id) in graph.externals.iter().zip(&graph.external_key) {
            if matches!(key, ValueKey::Input(_)) || gather.defines(id) || !asked.insert(id) {
                continue;
            }
            match resolver.resolve_value(key) {
                None => {}
                Some(ValueDef::Operation { graph: supplied, .. }) => {
                    let bad = |reason: String| GraphError::BadResolution { key: gather.interner.describe(id), reason };
                    if supplied.interner.id() != gather.interner.id() {
                        return Err(bad(format!(
                            "it answered with a graph on interner #{}, but the view is on interner #{}",
                            supplied.interner.id(),
                            gather.interner.id()
                        )));
                    }
                    if supplied.find_key(id).is_none() {
                        return Err(bad("it answered with a graph that does not define this value".into()));
                    }
                    gather.add(std::iter::once(Arc::clone(supplied)))?;
                }
                Some(ValueDef::Input(input)) => {
                    return Err(GraphError::BadResolution {
                        key: gather.interner.describe(id),
                        reason: format!("it answered with the input {input:?}, but the value is an operation's output"),
                    });
                }
            }
        }
    }
    Ok(gather.finish())
}

/// A view being gathered: graphs in view order, each once, all on one interner, closed
/// under `parents` after every [`Gather::add`].
struct Gather<Op: GraphOperation> {
    interner: Arc<KeyInterner<Op>>,
    graphs: Vec<Arc<Graph<Op>>>,
    roots: usize,
    seen: FxHashSet<*const Graph<Op>>,
    /// Key id → first graph defining it, over `graphs[..indexed]`; made once the view
    /// has more than [`SCAN_GRAPHS`] graphs.
    index: Option<KeyMap<u32>>,
    indexed: usize,
}

impl<Op: GraphOperation> Gather<Op> {
    fn roots(roots: Vec<Arc<Graph<Op>>>) -> GraphResult<Self> {
        let interner = match roots.first() {
            Some(g) => Arc::clone(&g.interner),
            None => KeyInterner::global(),
        };
        let mut gather = Gather {
            interner,
            graphs: Vec::with_capacity(roots.len()),
            roots: 0,
            seen: FxHashSet::default(),
            index: None,
            indexed: 0,
        };
        gather.roots = gather.add(roots)?;
        Ok(gather)
    }

    /// Appends the graphs not in the view yet, then their transitive parents, breadth
    /// first, checking that each is on the view's interner. Returns how many of `graphs`
    /// were new.
    fn add(&mut self, graphs: impl IntoIterator<Item = Arc<Graph<Op>>>) -> GraphResult<usize> {
        let mut next = self.graphs.len();
        for g in graphs {
            if self.seen.insert(Arc::as_ptr(&g)) {
                self.graphs.push(g);
            }
        }
        let new = self.graphs.len() - next;
        while next < self.graphs.len() {
            let g = Arc::clone(&self.graphs[next]);
            next += 1;
            if g.interner.id() != self.interner.id() {
                return Err(GraphError::MixedInterners { first: self.interner.id(), second: g.interner.id() });
            }
            for p in &g.parents {
                if self.seen.insert(Arc::as_ptr(p)) {
                    self.graphs.push(Arc::clone(p));
                }
            }
        }
        Ok(new)
    }

    /// Whether some graph gathered so far defines `key`.
    fn defines(&mut self, key: KeyId) -> bool {
        if self.graphs.len() <= SCAN_GRAPHS {
            return self.graphs.iter().any(|g| g.find_key(key).is_some());
        }
        let index = self.index.get_or_insert_with(|| empty_index(&self.interner, &self.graphs));
        index_graphs(index, &self.graphs, self.indexed);
        self.indexed = self.graphs.len();
        index.contains(key)
    }

    fn finish(self) -> ResolvedView<Op> {
        let index = OnceLock::new();
        if let Some(mut built) = self.index {
            index_graphs(&mut built, &self.graphs, self.indexed);
            let _ = index.set(built);
        }
        ResolvedView { graphs: self.graphs, roots: self.roots, interner: self.interner, index }
    }
}

/// An empty key-to-graph index sized for `graphs`.
fn empty_index<Op: GraphOperation>(interner: &KeyInterner<Op>, graphs: &[Arc<Graph<Op>>]) -> KeyMap<u32> {
    let values = graphs.iter().map(|g| g.value_count()).sum();
    KeyMap::with_range(0..interner.value_count(), values)
}

/// Adds the keys of `graphs[from..]` to `index`, each key to the first graph defining it.
fn index_graphs<Op: GraphOperation>(index: &mut KeyMap<u32>, graphs: &[Arc<Graph<Op>>], from: usize) {
    for (i, g) in graphs.iter().enumerate().skip(from) {
        for &key in g.value_key.raw() {
            index.insert_if_absent(key, i as u32);
        }
    }
}

impl<Op: GraphOperation> ResolvedView<Op> {
    /// Every graph of the view: roots first, then parents breadth-first.
    pub fn graphs(&self) -> &[Arc<Graph<Op>>] {
        &self.graphs
    }

    /// The root graphs.
    pub fn roots(&self) -> &[Arc<Graph<Op>>] {
        &self.graphs[..self.roots]
    }

    /// The interner shared by the view's graphs.
    pub fn interner(&self) -> &Arc<KeyInterner<Op>> {
        &self.interner
    }

    /// Finds where `key` is defined; `None` if no graph of the view defines this derived
    /// key (or it belongs to another interner).
    pub fn resolve_value(&self, key: &ValueKey<Op>) -> Option<ValueDef<'_, Op>> {
        self.try_resolve_value(key).ok()
    }

    /// Finds where `key` is defined, or says why it cannot be.
    pub fn try_resolve_value(&self, key: &ValueKey<Op>) -> GraphResult<ValueDef<'_, Op>> {
        match key {
            ValueKey::Input(k) => Ok(ValueDef::Input(k.clone())),
            ValueKey::Derived { operation, output_slot } => {
                let id = self.interner.derived_key_id(operation, *output_slot, key)?;
                let (g, v) = self.locate(id).ok_or_else(|| self.unresolved(id))?;
                Ok(ValueDef::local(&self.graphs[g], v).expect("located values exist"))
            }
        }
    }

    /// The graph index and local value that define `key`, first graph first: probing
    /// each graph of a small view, reading the view's index (built on first use) otherwise.
    pub(crate) fn locate(&self, key: KeyId) -> Option<(usize, LocalValueId)> {
        if self.graphs.len() <= SCAN_GRAPHS {
            return self.graphs.iter().enumerate().find_map(|(i, g)| g.find_key(key).map(|v| (i, v)));
        }
        let index = self.index.get_or_init(|| {
            let mut index = empty_index(&self.interner, &self.graphs);
            index_graphs(&mut index, &self.graphs, 0);
            index
        });
        let g = index.get(key)? as usize;
        Some((g, self.graphs[g].find_key(key).expect("the index names a graph that defines the key")))
    }

    /// A view of `graph` alone, without its parents: what `try_materialize_fragment`
    /// reads, so that every derived key the graph reads from another graph stays
    /// undefined (a leaf).
    pub(crate) fn alone(graph: Arc<Graph<Op>>) -> Self {
        let interner = Arc::clone(&graph.interner);
        ResolvedView { graphs: vec![graph], roots: 1, interner, index: OnceLock::new() }
    }

    pub(crate) fn unresolved(&self, key: KeyId) -> GraphError {
        GraphError::UnresolvedKey { key: self.interner.describe(key) }
    }
}

impl<Op: GraphOperation> Clone for ResolvedView<Op> {
    fn clone(&self) -> Self {
        ResolvedView {
            graphs: self.graphs.clone(),
            roots: self.roots,
            interner: Arc::clone(&self.interner),
            index: self.index.clone(),
        }
    }
}

impl<Op: GraphOperation> std::fmt::Debug for ResolvedView<Op> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResolvedView")
            .field("graphs", &self.graphs.len())
            .field("roots", &self.roots)
            .field("interner", &self.interner.id())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GraphBuilder, OperationRole::Primary, ValueRef::Local};

    /// A minimal operation set (the `scalar` crate's types are another copy of this crate's).
    #[derive(Clone, Debug, Hash, PartialEq, Eq)]
    enum ScalarOp {
        Sin,
        Exp,
        Add,
    }

    impl GraphOperation for ScalarOp {
        type Operand = f64;
        type Context = ();
        type InputKey = u32;
        fn input_count(&self) -> usize {
            if *self == ScalarOp::Add { 2 } else { 1 }
        }
        fn output_count(&self) -> usize {
            1
        }
    }

    /// What `locate` must answer: the first graph that has the key, probing in order.
    fn probe(graphs: &[Arc<Graph<ScalarOp>>], key: KeyId) -> Option<(usize, LocalValueId)> {
        graphs.iter().enumerate().find_map(|(i, g)| g.find_key(key).map(|v| (i, v)))
    }

    /// Twenty graphs over one interner whose operations overlap (the same `sin`, `exp`
    /// and sums recur in several graphs, some as declared outputs, some not); each last
    /// output is the graph's own.
    fn overlapping(interner: &Arc<KeyInterner<ScalarOp>>) -> Vec<Arc<Graph<ScalarOp>>> {
        (0..20u32)
            .map(|i| {
                let mut b = GraphBuilder::with_interner(Arc::clone(interner));
                let x = b.add_input(i % 3);
                let s = b.add_operation(ScalarOp::Sin, vec![Local(x)], Primary)[0];
                let e = b.add_operation(ScalarOp::Exp, vec![Local(s)], Primary)[0];
                let mut y = e;
                for _ in 0..i % 4 {
                    y = b.add_operation(ScalarOp::Add, vec![Local(y), Local(x)], Primary)[0];
                }
                // One value of each graph is its own.
                let z = b.add_input(100 + i);
                y = b.add_operation(ScalarOp::Add, vec![Local(y), Local(z)], Primary)[0];
                b.set_outputs(if i % 2 == 0 { vec![y] } else { vec![s, y] });
                Arc::new(b.build())
            })
            .collect()
    }

    #[test]
    fn the_view_index_answers_as_probing_every_graph() {
        let interner = KeyInterner::new();
        let graphs = overlapping(&interner);
        let view = try_resolve(graphs.clone()).unwrap();
        assert!(view.graphs().len() > SCAN_GRAPHS);
        for k in 0..interner.value_count() + 2 {
            let key = KeyId::new(k);
            assert_eq!(view.locate(key), probe(&graphs, key), "key {k}");
        }
        assert!(view.index.get().is_some(), "a view of 20 graphs looks keys up in its index");
    }

    #[test]
    fn the_index_grown_while_resolving_answers_as_probing_every_graph() {
        /// Answers with whichever graph of a list defines the key; a view of them would,
        /// but this one never indexes.
        struct Probe(Vec<Arc<Graph<ScalarOp>>>);
        impl Resolver<ScalarOp> for Probe {
            fn resolve_value(&self, key: &ValueKey<ScalarOp>) -> Option<ValueDef<'_, ScalarOp>> {
                let ValueKey::Derived { operation, output_slot } = key else { return None };
                let id = operation.output_key_id(*output_slot)?;
                let (g, v) = probe(&self.0, id)?;
                ValueDef::local(&self.0[g], v)
            }
        }
        let interner = KeyInterner::new();
        let graphs = overlapping(&interner);
        // A root reading every graph's last output by key, so that each is asked for.
        let mut b = GraphBuilder::with_interner(Arc::clone(&interner));
        let mut acc = b.add_input(0);
        for g in &graphs {
            let key = g.global_key(*g.outputs().last().unwrap());
            acc = b.add_operation(ScalarOp::Add, vec![Local(acc), crate::ValueRef::External(key)], Primary)[0];
        }
        let root = Arc::new(b.build());
        let view = try_resolve_with(vec![Arc::clone(&root)], &Probe(graphs)).unwrap();
        assert!(view.graphs().len() > SCAN_GRAPHS, "{} graphs", view.graphs().len());
        assert!(view.index.get().is_some(), "resolve_with hands its index to the view");
        for k in 0..interner.value_count() + 2 {
            let key = KeyId::new(k);
            assert_eq!(view.locate(key), probe(view.graphs(), key), "key {k}");
        }
    }
}
