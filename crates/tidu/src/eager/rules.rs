//! Backward rules: the transposed linear map of a recorded graph, built once per structure.
//!
//! Key: the graph's structure (input positions, operations, roles, operand positions,
//! outputs; not its keys and not its interner) and two masks (which outputs have a
//! cotangent, which inputs require a gradient). A hash of the key picks a bucket; a
//! candidate matches when its masks are equal and its source graph has the same structure
//! (pointer equality first: frontends reuse one graph per structure).
//!
//! On a miss the graph is rebuilt with the recorder's canonical input keys (the *canonical
//! graph*), then linearized for the seeded outputs with respect to the inputs that require
//! a gradient, and transposed. The rule lists the primal values its transposed graph reads
//! and, for each, where backward finds it: an input, a value of the recorded graph, or
//! neither (a value the linearization computes from primal data).
//!
//! The cache is bounded (least recently used rule evicted first). Evicting a rule drops
//! its graphs, whose keys the interner reclaims in time unless live graphs hold them
//! (`docs/adr/0010-interner-reclamation.md`). A rule rebuilt after an eviction reuses the
//! pass ids it was first built in (kept per key hash), so while its keys are not reclaimed
//! its graphs get the same keys and the interner does not grow with rebuilds.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use computegraph::{Graph, GraphBuilder, LocalValueId, ResolvedView, ValueKey, ValueRef, try_resolve};
use rustc_hash::{FxHashMap, FxHashSet, FxHasher};
use smallvec::SmallVec;

use crate::error::ADRuleResult;
use crate::linearize::try_linearize_with;
use crate::linearized::LinearizedGraph;
use crate::primitive::DiffPassId;
use crate::primitive::Primitive;
use crate::primitive::{fresh_pass_id, fresh_pass_ids};
use crate::transpose::{seed_pass_count, transpose_in_passes};

/// Where backward finds a primal value the transposed graph reads.
#[derive(Copy, Clone, Debug)]
pub(crate) enum Source {
    /// The node's `i`-th input.
    Input(usize),
    /// A local value of the recorded graph (found if the frontend retained it).
    Value(LocalValueId),
    /// Computed by the linearization from primal values: only `execute_forward` has it.
    Derived,
}

/// The backward rule of one recorded structure and pair of masks.
pub(crate) struct Rule<Op: Primitive> {
    /// The first recorded graph of this structure (compared against later ones).
    source: Arc<Graph<Op>>,
    seeded: Box<[bool]>,
    wrt: Box<[bool]>,
    pub(crate) canonical: Arc<Graph<Op>>,
    /// Defines every required value: the linear graph and, as its parent, `canonical`.
    pub(crate) view: ResolvedView<Op>,
    pub(crate) transposed: LinearizedGraph<Op>,
    /// For each seed (input) of `transposed`, the recorded graph's output slot.
    pub(crate) seed_slots: Box<[usize]>,
    /// For each output of `transposed`, the recorded graph's input position.
    pub(crate) wrt_inputs: Box<[usize]>,
    /// The primal values `transposed` reads, and where each is found.
    pub(crate) required: Box<[ValueKey<Op>]>,
    pub(crate) required_source: Box<[Source]>,
    /// The canonical key of each local value of the recorded graph.
    pub(crate) keys: Box<[ValueKey<Op>]>,
}

impl<Op: Primitive> Rule<Op> {
    fn matches(&self, graph: &Arc<Graph<Op>>, seeded: &[bool], wrt: &[bool]) -> bool {
        *self.seeded == *seeded && *self.wrt == *wrt && same_structure(&self.source, graph)
    }

    fn heap_bytes(&self) -> usize {
        // The view holds the linear graph and the canonical graph; the transposed graph and
        // the source graph are held besides (counted once each, by address), and so is the
        // transposed graph's program once an executor compiled it (`eval_standalone`).
        let mut graphs: Vec<&Arc<Graph<Op>>> = self.view.graphs().iter().collect();
        graphs.extend([self.transposed.graph(), &self.canonical, &self.source]);
        graphs.sort_by_key(|g| Arc::as_ptr(g));
        graphs.dedup_by(|a, b| Arc::ptr_eq(a, b));
        let graphs: usize = graphs.iter().map(|g| g.heap_bytes()).sum();
        let key = std::mem::size_of::<ValueKey<Op>>();
        graphs
            + self.transposed.standalone_heap_bytes()
            + (self.required.len() + self.keys.len()) * key
            + self.required_source.len() * std::mem::size_of::<Source>()
            + (self.seed_slots.len() + self.wrt_inputs.len()) * std::mem::size_of::<usize>()
    }
}

struct Slot<Op: Primitive> {
    rule: Arc<Rule<Op>>,
    last_used: u64,
}

/// The bounded rule cache of one recorder.
pub(crate) struct RuleCache<Op: Primitive> {
    buckets: FxHashMap<u64, SmallVec<[Slot<Op>; 1]>>,
    /// The passes of every rule key ever built, by hash; not evicted (24 bytes per key).
    passes: FxHashMap<u64, Passes>,
    len: usize,
    capacity: usize,
    clock: u64,
    pub(crate) hits: u64,
    pub(crate) misses: u64,
}

impl<Op: Primitive> RuleCache<Op> {
    pub(crate) fn new(capacity: usize) -> Self {
        RuleCache {
            buckets: FxHashMap::default(),
            passes: FxHashMap::default(),
            len: 0,
            capacity: capacity.max(1),
            clock: 0,
            hits: 0,
            misses: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.buckets.values().flatten().map(|s| s.rule.heap_bytes()).sum::<usize>()
            + self.buckets.capacity() * (8 + std::mem::size_of::<SmallVec<[Slot<Op>; 1]>>())
            + self.passes.capacity() * (8 + std::mem::size_of::<Passes>())
    }

    pub(crate) fn get(
        &mut self,
        hash: u64,
        graph: &Arc<Graph<Op>>,
        seeded: &[bool],
        wrt: &[bool],
    ) -> Option<Arc<Rule<Op>>> {
        self.clock += 1;
        let slot = self.buckets.get_mut(&hash)?.iter_mut().find(|s| s.rule.matches(graph, seeded, wrt))?;
        slot.last_used = self.clock;
        self.hits += 1;
        Some(Arc::clone(&slot.rule))
    }

    /// The passes a rule with this hash was built in before, if any.
    pub(crate) fn passes(&self, hash: u64) -> Option<Passes> {
        self.passes.get(&hash).copied()
    }

    pub(crate) fn insert(&mut self, hash: u64, rule: Arc<Rule<Op>>, passes: Passes) {
        self.misses += 1;
        self.passes.insert(hash, passes);
        if self.len >= self.capacity {
            self.evict_least_recent();
        }
        self.clock += 1;
        self.buckets.entry(hash).or_default().push(Slot { rule, last_used: self.clock });
        self.len += 1;
    }

    /// Linear in the cache size; runs only on a miss at capacity.
    fn evict_least_recent(&mut self) {
        let oldest = self
            .buckets
            .iter()
            .flat_map(|(&h, slots)| slots.iter().enumerate().map(move |(i, s)| (s.last_used, h, i)))
            .min_by_key(|&(used, _, _)| used);
        if let Some((_, h, i)) = oldest {
            let slots = self.buckets.get_mut(&h).expect("the bucket was just found");
            slots.swap_remove(i);
            if slots.is_empty() {
                self.buckets.remove(&h);
            }
            self.len -= 1;
        }
    }
}

/// The hash of a rule key.
pub(crate) fn structure_hash<Op: Primitive>(graph: &Graph<Op>, seeded: &[bool], wrt: &[bool]) -> u64 {
    let mut h = FxHasher::default();
    graph.value_count().hash(&mut h);
    for v in graph.inputs().iter().chain(graph.outputs()) {
        v.index().hash(&mut h);
    }
    for op in graph.operations() {
        op.operation().hash(&mut h);
        op.role().hash(&mut h);
        for v in op.local_inputs() {
            v.map(LocalValueId::index).hash(&mut h);
        }
    }
    seeded.hash(&mut h);
    wrt.hash(&mut h);
    h.finish()
}

/// Equal structure: same input positions, outputs, operations, roles and operands.
fn same_structure<Op: Primitive>(a: &Arc<Graph<Op>>, b: &Arc<Graph<Op>>) -> bool {
    if Arc::ptr_eq(a, b) {
        return true;
    }
    a.value_count() == b.value_count()
        && a.inputs() == b.inputs()
        && a.outputs() == b.outputs()
        && a.operation_count() == b.operation_count()
        && a.operations().zip(b.operations()).all(|(x, y)| {
            x.operation() == y.operation() && x.role() == y.role() && x.local_inputs().eq(y.local_inputs())
        })
}

/// The pass ids a rule was built in: reused when it is rebuilt after an eviction, so the
/// rebuilt graphs have the same keys and the interner does not grow.
#[derive(Copy, Clone, Debug)]
pub(crate) struct Passes {
    linearize: DiffPassId,
    transpose: DiffPassId,
    transpose_count: u64,
}

/// Builds the rule for a recorded graph (a cache miss), in `passes` if the same key was
/// built before. Returns the rule and the passes it used.
pub(crate) fn build_rule<Op: Primitive>(
    graph: &Arc<Graph<Op>>,
    seeded: &[bool],
    wrt: &[bool],
    canonical_keys: &[Op::InputKey],
    ctx: &mut Op::ADContext,
    passes: Option<Passes>,
) -> ADRuleResult<(Rule<Op>, Passes)> {
    let (canonical, remap) = canonicalize(graph, canonical_keys)?;
    let keys: Box<[ValueKey<Op>]> = remap.iter().map(|&v| canonical.global_key(v)).collect();

    let seeded_slots: Vec<usize> = (0..seeded.len()).filter(|&s| seeded[s]).collect();
    let wrt_inputs: Box<[usize]> = (0..wrt.len()).filter(|&i| wrt[i]).collect();
    let outputs: Vec<ValueKey<Op>> = seeded_slots.iter().map(|&s| keys[graph.outputs()[s].index()].clone()).collect();
    let wrt_keys: Vec<Op::InputKey> = wrt_inputs.iter().map(|&i| canonical_keys[i].clone()).collect();

    let primal = try_resolve(vec![Arc::clone(&canonical)])?;
    let linearize_pass = passes.map_or_else(fresh_pass_id, |p| p.linearize);
    let linear = try_linearize_with(&primal, &outputs, &wrt_keys, ctx, linearize_pass)?;
    // The transposed map has one seed per seeded output that depends on the inputs.
    let seed_slots: Box<[usize]> =
        seeded_slots.iter().zip(linear.tangent_outputs()).filter(|(_, t)| t.is_some()).map(|(&s, _)| s).collect();
    // A hash collision could pair this key with another's passes: take fresh ones if
    // those are too few.
    let count = seed_pass_count(&linear);
    let passes = match passes {
        Some(p) if p.linearize == linearize_pass && p.transpose_count >= count => p,
        _ => Passes { linearize: linearize_pass, transpose: fresh_pass_ids(count), transpose_count: count },
    };
    let transposed = transpose_in_passes(&linear, ctx, passes.transpose)?;
    let view = try_resolve(vec![Arc::clone(linear.graph())])?;

    // Primal values the transposed graph reads, in first-use order.
    let mut seen = FxHashSet::default();
    let mut required = Vec::new();
    for op in transposed.graph().operations() {
        for r in op.inputs() {
            if let ValueRef::External(key) = r
                && seen.insert(key.clone())
            {
                required.push(key);
            }
        }
    }
    let local_of: FxHashMap<&ValueKey<Op>, usize> = keys.iter().enumerate().map(|(v, k)| (k, v)).collect();
    let input_position: FxHashMap<usize, usize> =
        graph.inputs().iter().enumerate().map(|(i, v)| (v.index(), i)).collect();
    let required_source = required
        .iter()
        .map(|k| match local_of.get(k) {
            Some(&v) => input_position.get(&v).map_or(Source::Value(LocalValueId::new(v)), |&i| Source::Input(i)),
            None => Source::Derived,
        })
        .collect();

    let rule = Rule {
        source: Arc::clone(graph),
        seeded: seeded.into(),
        wrt: wrt.into(),
        canonical,
        view,
        transposed,
        seed_slots,
        wrt_inputs,
        required: required.into_boxed_slice(),
        required_source,
        keys,
    };
    Ok((rule, passes))
}

/// Rebuilds `graph` with input `i` keyed by `keys[i]`, in the same interner: the inputs
/// first, then every operation in order (operations without outputs included). Returns the
/// canonical graph and, for each local value of `graph`, its canonical local value.
fn canonicalize<Op: Primitive>(
    graph: &Graph<Op>,
    keys: &[Op::InputKey],
) -> ADRuleResult<(Arc<Graph<Op>>, Vec<LocalValueId>)> {
    let n = graph.value_count();
    let mut b = GraphBuilder::with_interner(Arc::clone(graph.interner()));
    b.reserve(n, graph.operation_count(), 2 * graph.operation_count());
    let mut remap: Vec<Option<LocalValueId>> = vec![None; n];
    for (v, key) in graph.inputs().iter().zip(keys) {
        remap[v.index()] = Some(b.try_add_input(key.clone())?);
    }
    let mut args = Vec::new();
    for op in graph.operations() {
        args.clear();
        // Operands are local (checked at record time) and defined earlier.
        for l in op.local_inputs() {
            let v = l.and_then(|l| remap[l.index()]).expect("a recorded graph's operands are earlier local values");
            args.push(ValueRef::Local(v));
        }
        let outs = b.try_add_operation_from(op.operation().clone(), &args, op.role())?;
        for (old, new) in op.outputs().zip(outs) {
            remap[old.index()] = Some(LocalValueId::new(new));
        }
    }
    let remap: Vec<LocalValueId> =
        remap.into_iter().map(|v| v.expect("every value is an input or an output")).collect();
    b.try_set_outputs(graph.outputs().iter().map(|v| remap[v.index()]).collect())?;
    Ok((Arc::new(b.try_build()?), remap))
}
