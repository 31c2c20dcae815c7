//! [`Recorder`], the tape nodes it makes, and what goes in and out of a recording
//! ([`EagerInput`], [`EagerOutput`], the [`KeySource`] of canonical keys).
//!
//! Invariants: a node's inputs were recorded before it (their `seq` is smaller), every
//! trace reachable from a node comes from the same recorder (checked at record time), and
//! a node's `retained` values are values of its graph. Nodes are dropped iteratively.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use computegraph::{Graph, GraphOperation, LocalValueId, ValueKey, ValueRef};
use rustc_hash::FxHashSet;

use super::EagerError;
use super::rules::RuleCache;
use crate::error::{ADRuleError, ADRuleResult};
use crate::primitive::Primitive;

/// Hands out fresh input keys for the recorder's internal (canonical) graphs.
///
/// Keys must not collide with each other; the recorder asks for a new one only when it
/// records a graph with more inputs than any before, so a source hands out as many keys as
/// the widest recorded graph has inputs. Any `FnMut() -> Op::InputKey` is a key source.
///
/// ```
/// use scalar::{ScalarKey, ScalarOp};
/// use tidu::eager::Recorder;
///
/// // Keys from a range the frontend never uses for its own variables.
/// let mut next = u32::MAX / 2;
/// let recorder = Recorder::<ScalarOp>::new(move || {
///     next += 1;
///     ScalarKey::var(next)
/// });
/// assert_eq!(recorder.stats().canonical_keys, 0); // drawn only when a graph is recorded
/// ```
pub trait KeySource<Op: GraphOperation> {
    /// A key never handed out before.
    fn fresh_input_key(&mut self) -> Op::InputKey;
}

impl<Op: GraphOperation, F: FnMut() -> Op::InputKey> KeySource<Op> for F {
    fn fresh_input_key(&mut self) -> Op::InputKey {
        self()
    }
}

/// An input of a recorded invocation.
pub struct EagerInput<Op: Primitive> {
    /// The user-visible key of the value, under which its cotangent accumulates. Keys must
    /// be unique per value; `ValueKey::Input` of a frontend counter is the cheap choice (it
    /// is never interned).
    pub key: ValueKey<Op>,
    /// The node that produced the value, or `None` for a leaf.
    pub trace: Option<Trace<Op>>,
    /// Whether cotangents flow to (and through) this value.
    pub requires_grad: bool,
    /// The concrete primal value, kept for the backward pass.
    pub data: Arc<Op::Operand>,
}

impl<Op: Primitive> Clone for EagerInput<Op> {
    fn clone(&self) -> Self {
        EagerInput {
            key: self.key.clone(),
            trace: self.trace.clone(),
            requires_grad: self.requires_grad,
            data: Arc::clone(&self.data),
        }
    }
}

impl<Op: Primitive> fmt::Debug for EagerInput<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EagerInput")
            .field("key", &self.key)
            .field("trace", &self.trace)
            .field("requires_grad", &self.requires_grad)
            .finish_non_exhaustive()
    }
}

impl<Op: Primitive> EagerInput<Op> {
    /// A leaf: a value no recorded invocation produced.
    pub fn leaf(key: ValueKey<Op>, data: Arc<Op::Operand>, requires_grad: bool) -> Self {
        EagerInput { key, trace: None, requires_grad, data }
    }
}

/// An output of a recorded invocation, as [`Recorder::record_graph`] returns it.
pub struct EagerOutput<Op: Primitive> {
    /// The user-visible key given to this output.
    pub key: ValueKey<Op>,
    /// The node that produced it (`None` when no input required a gradient).
    pub trace: Option<Trace<Op>>,
    /// Whether any input of the invocation requires a gradient.
    pub requires_grad: bool,
    /// The output's position among the recorded graph's outputs.
    pub output_slot: usize,
}

impl<Op: Primitive> EagerOutput<Op> {
    /// This output as the input of a later invocation, with its concrete value.
    pub fn input(&self, data: Arc<Op::Operand>) -> EagerInput<Op> {
        EagerInput { key: self.key.clone(), trace: self.trace.clone(), requires_grad: self.requires_grad, data }
    }
}

impl<Op: Primitive> Clone for EagerOutput<Op> {
    fn clone(&self) -> Self {
        EagerOutput {
            key: self.key.clone(),
            trace: self.trace.clone(),
            requires_grad: self.requires_grad,
            output_slot: self.output_slot,
        }
    }
}

impl<Op: Primitive> fmt::Debug for EagerOutput<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EagerOutput")
            .field("key", &self.key)
            .field("trace", &self.trace)
            .field("requires_grad", &self.requires_grad)
            .field("output_slot", &self.output_slot)
            .finish()
    }
}

/// What a recorder shares with its nodes (and so with `try_backward`).
pub(crate) struct Shared<Op: Primitive> {
    pub(crate) rules: Mutex<RuleCache<Op>>,
    /// Key `i` names input `i` of every canonical graph.
    pub(crate) canonical_keys: RwLock<Vec<Op::InputKey>>,
    pub(crate) live_nodes: AtomicUsize,
}

/// One recorded invocation.
pub(crate) struct Node<Op: Primitive> {
    pub(crate) shared: Arc<Shared<Op>>,
    /// Recording order: a node's inputs have smaller numbers.
    pub(crate) seq: u64,
    pub(crate) graph: Arc<Graph<Op>>,
    pub(crate) inputs: Box<[EagerInput<Op>]>,
    /// User-visible key of each output of `graph`.
    pub(crate) outputs: Box<[ValueKey<Op>]>,
    /// Retained primal values, by local value of `graph`.
    pub(crate) retained: Retained<Op>,
}

/// Retained primal values of a node, by local value of its graph.
pub(crate) type Retained<Op> = Box<[(LocalValueId, Arc<<Op as computegraph::GraphOperation>::Operand>)]>;

impl<Op: Primitive> Drop for Node<Op> {
    /// Iterative: a node that owns the last reference to an input's node takes that
    /// node's inputs onto an explicit stack before it is freed, so a long chain does not
    /// recurse.
    fn drop(&mut self) {
        self.shared.live_nodes.fetch_sub(1, Ordering::Relaxed);
        let mut stack: Vec<Arc<Node<Op>>> = take_traces(&mut self.inputs).collect();
        while let Some(node) = stack.pop() {
            if let Some(mut node) = Arc::into_inner(node) {
                stack.extend(take_traces(&mut node.inputs));
                // `node` drops here with no traces left, so its own drop does not recurse.
            }
        }
    }
}

fn take_traces<Op: Primitive>(inputs: &mut [EagerInput<Op>]) -> impl Iterator<Item = Arc<Node<Op>>> + '_ {
    inputs.iter_mut().filter_map(|i| i.trace.take()).map(|t| t.0)
}

/// A handle to the tape node that produced a value. Cloning is cheap (a reference count);
/// the node lives while any value produced by it, or by a later node that depends on it,
/// holds its trace.
///
/// ```
/// use scalar::{eager::Tape, ScalarOp};
///
/// let mut tape = Tape::new();
/// let x = tape.leaf(2.0, true).unwrap();
/// assert!(x.trace.is_none()); // a leaf has no producer
/// let y = tape.apply(ScalarOp::Exp, &[&x]).unwrap().remove(0);
/// let z = tape.apply(ScalarOp::Neg, &[&y]).unwrap().remove(0);
/// assert_eq!(tape.recorder().stats().live_nodes, 2);
/// drop(y); // z's node still holds y's
/// assert_eq!(tape.recorder().stats().live_nodes, 2);
/// drop(z);
/// assert_eq!(tape.recorder().stats().live_nodes, 0);
/// ```
pub struct Trace<Op: Primitive>(pub(crate) Arc<Node<Op>>);

impl<Op: Primitive> Trace<Op> {
    /// The node's number in its recorder: recording order.
    pub fn id(&self) -> u64 {
        self.0.seq
    }
    /// The user-visible keys of the node's outputs.
    pub fn output_keys(&self) -> &[ValueKey<Op>] {
        &self.0.outputs
    }
}

impl<Op: Primitive> Clone for Trace<Op> {
    fn clone(&self) -> Self {
        Trace(Arc::clone(&self.0))
    }
}

impl<Op: Primitive> fmt::Debug for Trace<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Trace#{}", self.0.seq)
    }
}

/// Counters of a recorder ([`Recorder::stats`]).
///
/// ```
/// use scalar::{eager::{ScalarExecutor, Tape}, ScalarOp};
///
/// let mut tape = Tape::new();
/// let mut exec = ScalarExecutor::new();
/// for step in 0..3 {
///     let x = tape.leaf(0.5 + step as f64, true).unwrap();
///     let s = tape.apply(ScalarOp::Sin, &[&x]).unwrap().remove(0);
///     let y = tape.apply(ScalarOp::Mul, &[&s, &x]).unwrap().remove(0);
///     tape.backward(&y, 1.0, &mut exec).unwrap();
/// }
/// let stats = tape.recorder().stats();
/// assert_eq!(stats.live_nodes, 0); // the values of each step are gone, and so is their tape
/// assert_eq!((stats.rule_misses, stats.rule_hits), (2, 4)); // one rule per operation kind
/// ```
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct RecorderStats {
    /// Tape nodes alive (held by the frontend's values).
    pub live_nodes: usize,
    /// Backward rules (transposed graphs) in the cache.
    pub cached_rules: usize,
    /// Backward steps that found their rule in the cache.
    pub rule_hits: u64,
    /// Backward steps that built it.
    pub rule_misses: u64,
    /// Canonical input keys drawn from the key source.
    pub canonical_keys: usize,
}

/// Records eager invocations as tape nodes (`docs/SPEC.md` §6.1).
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::Arc;
/// use computegraph::{GraphBuilder, OperationRole::Primary, ValueKey, ValueRef::Local};
/// use scalar::{eager::ScalarExecutor, ScalarKey, ScalarOp};
/// use tidu::eager::{try_backward, EagerInput, Recorder};
///
/// // A one-operation graph for `mul`, built once and reused by every invocation.
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let (a, c) = (b.add_input(ScalarKey::var(0)), b.add_input(ScalarKey::var(1)));
/// let p = b.add_operation(ScalarOp::Mul, vec![Local(a), Local(c)], Primary)[0];
/// b.set_outputs(vec![p]);
/// let mul = Arc::new(b.build());
///
/// let mut next = 1u32 << 31;
/// let mut recorder = Recorder::new(move || { next += 1; ScalarKey::var(next) });
/// let x = EagerInput::leaf(ValueKey::Input(ScalarKey::var(10)), Arc::new(3.0), true);
/// let y = EagerInput::leaf(ValueKey::Input(ScalarKey::var(11)), Arc::new(4.0), false);
/// let key = ValueKey::Input(ScalarKey::var(12));
/// let out = recorder.record_graph(&mul, vec![x.clone(), y], vec![key.clone()], HashMap::new()).unwrap();
///
/// let grads = try_backward(&key, out[0].trace.as_ref(), Arc::new(1.0), &mut ScalarExecutor::new(), &mut ())
///     .unwrap();
/// assert_eq!(*grads[&x.key], 4.0); // d(x·y)/dx = y; y does not require a gradient
/// assert_eq!(grads.len(), 1);
/// ```
pub struct Recorder<Op: Primitive> {
    shared: Arc<Shared<Op>>,
    source: Box<dyn KeySource<Op> + Send>,
    /// How many canonical keys `shared` holds (only this recorder adds them).
    canonical_len: usize,
    next_seq: u64,
}

/// Default number of backward rules a recorder caches.
pub const DEFAULT_RULE_CAPACITY: usize = 4096;

impl<Op: Primitive> Recorder<Op> {
    /// A recorder drawing its internal keys from `source`, caching up to
    /// [`DEFAULT_RULE_CAPACITY`] backward rules.
    pub fn new(source: impl KeySource<Op> + Send + 'static) -> Self {
        Self::with_rule_capacity(source, DEFAULT_RULE_CAPACITY)
    }

    /// A recorder caching up to `capacity` backward rules (least recently used evicted
    /// first; at least one).
    pub fn with_rule_capacity(source: impl KeySource<Op> + Send + 'static, capacity: usize) -> Self {
        Recorder {
            shared: Arc::new(Shared {
                rules: Mutex::new(RuleCache::new(capacity)),
                canonical_keys: RwLock::new(Vec::new()),
                live_nodes: AtomicUsize::new(0),
            }),
            source: Box::new(source),
            canonical_len: 0,
            next_seq: 0,
        }
    }

    /// Records one invocation of `graph` and returns one [`EagerOutput`] per graph output.
    ///
    /// - `graph` is self-contained (no parents, no external operands); its `i`-th input is
    ///   fed by `inputs[i]` and its `j`-th output gets the user-visible key `outputs[j]`.
    ///   Build it once per structure and reuse it: its input keys do not matter (the
    ///   recorder works on a canonical copy), and a reused graph costs no interning. A
    ///   fresh graph per invocation works too: the interner reclaims its keys once no
    ///   live graph holds them (computegraph's ADR 0010).
    /// - `retained_values` are primal values to keep for the backward pass, keyed by an
    ///   output key from `outputs` or by the global key of a value of `graph`; typically the
    ///   invocation's outputs. Values the backward pass needs and that are not kept are
    ///   recomputed by the executor's `execute_forward`.
    ///
    /// An invocation none of whose inputs requires a gradient records nothing: its outputs
    /// have no trace and `requires_grad == false`.
    ///
    /// # Errors
    /// [`EagerError`] (as [`ADRuleError::Eager`]) for a trace from another recorder or one
    /// that did not produce its input's key, counts that do not match the graph, an output
    /// key given twice or equal to an input's key, a graph that is not self-contained, a
    /// retained key that names nothing in the graph, or a key source that repeats itself.
    /// Nothing is recorded then.
    pub fn record_graph(
        &mut self,
        graph: &Arc<Graph<Op>>,
        inputs: Vec<EagerInput<Op>>,
        outputs: Vec<ValueKey<Op>>,
        retained_values: HashMap<ValueKey<Op>, Arc<Op::Operand>>,
    ) -> ADRuleResult<Vec<EagerOutput<Op>>> {
        let eager = |e: EagerError| Err(ADRuleError::Eager(e));
        if inputs.len() != graph.inputs().len() {
            return eager(EagerError::Arity { what: "inputs", expected: graph.inputs().len(), got: inputs.len() });
        }
        if outputs.len() != graph.outputs().len() {
            return eager(EagerError::Arity { what: "outputs", expected: graph.outputs().len(), got: outputs.len() });
        }
        for (input, i) in inputs.iter().enumerate() {
            if let Some(t) = &i.trace {
                if !self.owns(t) {
                    return eager(EagerError::ForeignTrace { input });
                }
                if !t.0.outputs.contains(&i.key) {
                    return eager(EagerError::TraceMismatch { input });
                }
            }
        }
        check_unique_keys(&inputs, &outputs)?;
        check_self_contained(graph)?;
        let retained = retained_locals(graph, &outputs, retained_values)?;
        if !inputs.iter().any(|i| i.requires_grad) {
            return Ok(untraced(outputs));
        }
        self.reserve_canonical_keys(graph.inputs().len())?;

        self.shared.live_nodes.fetch_add(1, Ordering::Relaxed);
        let node = Arc::new(Node {
            shared: Arc::clone(&self.shared),
            seq: self.next_seq,
            graph: Arc::clone(graph),
            inputs: inputs.into_boxed_slice(),
            outputs: outputs.into_boxed_slice(),
            retained,
        });
        self.next_seq += 1;
        Ok(node
            .outputs
            .iter()
            .enumerate()
            .map(|(output_slot, key)| EagerOutput {
                key: key.clone(),
                trace: Some(Trace(Arc::clone(&node))),
                requires_grad: true,
                output_slot,
            })
            .collect())
    }

    /// Whether `trace` was made by this recorder.
    pub fn owns(&self, trace: &Trace<Op>) -> bool {
        Arc::ptr_eq(&trace.0.shared, &self.shared)
    }

    /// The recorder's counters.
    pub fn stats(&self) -> RecorderStats {
        let rules = self.shared.rules.lock().unwrap_or_else(|e| e.into_inner());
        RecorderStats {
            live_nodes: self.shared.live_nodes.load(Ordering::Relaxed),
            cached_rules: rules.len(),
            rule_hits: rules.hits,
            rule_misses: rules.misses,
            canonical_keys: self.canonical_len,
        }
    }

    /// Heap bytes the recorder holds itself: its rule cache (canonical, linear and
    /// transposed graphs) and its canonical keys. Tape nodes are owned by the frontend's
    /// values and not counted; the interner is the graphs' (see `KeyInterner::heap_bytes`).
    pub fn heap_bytes(&self) -> usize {
        let rules = self.shared.rules.lock().unwrap_or_else(|e| e.into_inner());
        rules.heap_bytes() + self.canonical_len * std::mem::size_of::<Op::InputKey>()
    }

    /// Draws canonical keys until there are `n`; a repeated key is an error (it would make
    /// two inputs of a canonical graph one value).
    fn reserve_canonical_keys(&mut self, n: usize) -> ADRuleResult<()> {
        if n > self.canonical_len {
            let mut keys = self.shared.canonical_keys.write().unwrap_or_else(|e| e.into_inner());
            while keys.len() < n {
                let key = self.source.fresh_input_key();
                if keys.contains(&key) {
                    return Err(ADRuleError::Eager(EagerError::KeySourceRepeated { key: format!("{key:?}") }));
                }
                keys.push(key);
            }
            self.canonical_len = keys.len();
        }
        Ok(())
    }
}

impl<Op: Primitive> fmt::Debug for Recorder<Op> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorder").field("stats", &self.stats()).finish_non_exhaustive()
    }
}

fn untraced<Op: Primitive>(outputs: Vec<ValueKey<Op>>) -> Vec<EagerOutput<Op>> {
    outputs
        .into_iter()
        .enumerate()
        .map(|(output_slot, key)| EagerOutput { key, trace: None, requires_grad: false, output_slot })
        .collect()
}

/// Output keys are distinct from each other and from the inputs' keys.
fn check_unique_keys<Op: Primitive>(inputs: &[EagerInput<Op>], outputs: &[ValueKey<Op>]) -> ADRuleResult<()> {
    let clash = |key: &ValueKey<Op>| Err(ADRuleError::Eager(EagerError::DuplicateKey { key: format!("{key:?}") }));
    if outputs.len() * (outputs.len() + inputs.len()) <= 256 {
        for (j, key) in outputs.iter().enumerate() {
            if outputs[..j].contains(key) || inputs.iter().any(|i| i.key == *key) {
                return clash(key);
            }
        }
    } else {
        let mut seen: FxHashSet<&ValueKey<Op>> = inputs.iter().map(|i| &i.key).collect();
        for key in outputs {
            if !seen.insert(key) {
                return clash(key);
            }
        }
    }
    Ok(())
}

fn check_self_contained<Op: Primitive>(graph: &Graph<Op>) -> ADRuleResult<()> {
    let fail = |message: String| Err(ADRuleError::Eager(EagerError::NotSelfContained { message }));
    if !graph.parents().is_empty() {
        return fail(format!("it has {} parent graphs", graph.parents().len()));
    }
    for op in graph.operations() {
        if let Some(i) = op.inputs().position(|r| matches!(r, ValueRef::External(_))) {
            return fail(format!("operand {i} of `{:?}` is an external value", op.operation()));
        }
    }
    Ok(())
}

/// Maps retained values to local values of `graph`: output keys first, then global keys.
fn retained_locals<Op: Primitive>(
    graph: &Graph<Op>,
    outputs: &[ValueKey<Op>],
    retained: HashMap<ValueKey<Op>, Arc<Op::Operand>>,
) -> ADRuleResult<Retained<Op>> {
    let mut locals = Vec::with_capacity(retained.len());
    for (key, data) in retained {
        let local = match outputs.iter().position(|k| *k == key) {
            Some(slot) => Some(graph.outputs()[slot]),
            None => (0..graph.value_count()).map(LocalValueId::new).find(|&v| graph.global_key(v) == key),
        };
        match local {
            Some(v) => locals.push((v, data)),
            None => {
                return Err(ADRuleError::Eager(EagerError::UnknownRetainedValue { key: format!("{key:?}") }));
            }
        }
    }
    Ok(locals.into_boxed_slice())
}
