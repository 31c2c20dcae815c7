//! `resolve`: a logical view over fragments and their parents.
//!
//! Input: root graphs, all on one interner. Output: a [`ResolvedView`] listing the roots
//! and, after them, every graph reachable through `parents` (each once, in breadth-first
//! order). Nothing is copied; the view holds `Arc`s.
//!
//! Lookup rule (seed 004 §VI): a local operand follows its local producer; an external
//! key is looked up in the view's graphs in order, the first definition wins. Input keys
//! need no definition: they are leaves. Complexity: `resolve` is `O(graphs)`; a lookup is
//! `O(graphs)` hash probes (each graph builds its key index on first lookup).

use std::sync::Arc;

use rustc_hash::FxHashSet;

use crate::error::{GraphError, GraphResult};
use crate::graph::{Graph, LocalDef, LocalOperationId, LocalValueId};
use crate::key::{KeyId, KeyInterner, ValueKey};
use crate::operation::GraphOperation;

/// A logical view over graphs: the roots and their transitive parents.
///
/// Building it copies nothing: it lists the graphs once each (roots first), so that
/// [`Self::resolve_value`] and `materialize_merge` can find any key's definition.
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
}

/// Where a value is defined, as found by [`ResolvedView::resolve_value`].
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
    let interner = match roots.first() {
        Some(g) => Arc::clone(&g.interner),
        None => KeyInterner::global(),
    };
    let n_roots = roots.len();
    let mut seen: FxHashSet<*const Graph<Op>> = FxHashSet::default();
    let mut graphs: Vec<Arc<Graph<Op>>> = Vec::with_capacity(roots.len());
    for g in roots {
        if seen.insert(Arc::as_ptr(&g)) {
            graphs.push(g);
        }
    }
    // Breadth-first over parents; `graphs` doubles as the queue.
    let mut next = 0;
    while next < graphs.len() {
        let g = Arc::clone(&graphs[next]);
        next += 1;
        if g.interner.id() != interner.id() {
            return Err(GraphError::MixedInterners { first: interner.id(), second: g.interner.id() });
        }
        for p in &g.parents {
            if seen.insert(Arc::as_ptr(p)) {
                graphs.push(Arc::clone(p));
            }
        }
    }
    Ok(ResolvedView { graphs, roots: n_roots, interner })
}

impl<Op: GraphOperation> ResolvedView<Op> {
    /// Every graph of the view: roots first, then parents breadth-first.
    pub fn graphs(&self) -> &[Arc<Graph<Op>>] {
        &self.graphs
    }

    /// The root graphs.
    pub fn roots(&self) -> &[Arc<Graph<Op>>] {
        &self.graphs[..self.roots.min(self.graphs.len())]
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
                let graph = &self.graphs[g];
                match graph.local_def(v) {
                    LocalDef::Output(operation, output_slot) => {
                        Ok(ValueDef::Operation { graph, operation, output_slot })
                    }
                    LocalDef::Input(i) => Ok(ValueDef::Input(graph.input_keys[i as usize].clone())),
                }
            }
        }
    }

    /// The graph index and local value that define `key`, first graph first.
    pub(crate) fn locate(&self, key: KeyId) -> Option<(usize, LocalValueId)> {
        self.graphs.iter().enumerate().find_map(|(i, g)| g.find_key(key).map(|v| (i, v)))
    }

    pub(crate) fn unresolved(&self, key: KeyId) -> GraphError {
        GraphError::UnresolvedKey { key: self.interner.describe(key) }
    }
}

impl<Op: GraphOperation> Clone for ResolvedView<Op> {
    fn clone(&self) -> Self {
        ResolvedView { graphs: self.graphs.clone(), roots: self.roots, interner: Arc::clone(&self.interner) }
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
