//! Level-parallel evaluation: equal to sequential evaluation (bitwise, NaN-tolerant) on
//! random specs with 1-, 2- and 3-thread pools and the global one; order-recording
//! hashing operations (a shared clock in the context) of mixed cost, so that levels run
//! both in place and in parallel chunks, that catch a read of an unwritten or reused slot,
//! an operation run before its operands' producers finished, and an operation run twice
//! or never; the heavy-operation path (two expensive operations in a level of two fork,
//! cheap levels run in place); evaluation by dependency (`dataflow.rs`) for programs of
//! costly operations, on the same random graphs and checks; a panic in a chunk reaching the caller; the level count
//! against longest paths computed on the materialized graph, and the schedule verifier.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, OnceLock};

use computegraph::{
    CompiledProgram, DATAFLOW_MIN_MEAN_COST, EvalState, EvaluableGraphOperation, GraphBuilder, GraphOperation,
    KeyInterner, MaterializedGraph, OperationRole::Primary, Outputs, PAR_LEVEL_MIN_COST, ValueId, ValueRef::Local,
    compile, materialize_merge, resolve,
};
use proptest::prelude::*;
use rayon::{ThreadPool, ThreadPoolBuilder};
use scalar::workloads::{self, Operands};
use scalar::{ScalarKey, ScalarOp};

use crate::support::{assert_same, compile_checked, eval_vars, fresh, inputs_strategy, same_size_pair, spec_strategy};

/// Pools of one, two and three threads, built once for the binary.
fn pools() -> &'static [ThreadPool; 3] {
    static POOLS: OnceLock<[ThreadPool; 3]> = OnceLock::new();
    POOLS.get_or_init(|| [1, 2, 3].map(|n| ThreadPoolBuilder::new().num_threads(n).build().unwrap()))
}

/// Longest path (in operations) from the inputs to each operation, computed on the
/// materialized graph's operand lists, and its maximum: what `level_count` must be.
fn longest_path<Op: GraphOperation>(m: &MaterializedGraph<Op>) -> usize {
    let mut depth: std::collections::HashMap<ValueId, usize> = m.inputs().iter().map(|&v| (v, 0)).collect();
    let mut max = 0;
    for op in m.operations() {
        let d = 1 + op.inputs().iter().map(|v| depth[v]).max().unwrap_or(0);
        max = max.max(d);
        for v in op.outputs() {
            depth.insert(v, d);
        }
    }
    max
}

/// Runs `program` sequentially and in parallel (both pools and the global one, fresh and
/// reused states) and asserts every result equals the sequential one.
fn assert_parallel_matches(program: &CompiledProgram<ScalarOp>, inputs: &[f64]) {
    let refs = program
        .bind_inputs(|k| match k {
            ScalarKey::Var(i) => inputs.get(*i as usize),
            ScalarKey::Tangent(_) => None,
        })
        .unwrap();
    let expected = eval_vars(program, inputs);
    let mut state = EvalState::new();
    for pool in pools().iter().map(Some).chain([None]) {
        assert_same(&program.try_eval_parallel(pool, &mut (), &refs).unwrap(), &expected);
        for _ in 0..2 {
            assert_same(&program.eval_parallel_with(pool, &mut state, &mut (), &refs).unwrap(), &expected);
        }
    }
}

proptest! {
    #![proptest_config(crate::support::proptest_config())]

    /// Parallel evaluation equals sequential evaluation on random scalar specs, the
    /// schedule verifies, and its level count is the longest path of the graph.
    #[test]
    fn parallel_eval_matches_sequential(spec in spec_strategy(), inputs in inputs_strategy(), fragments in 1usize..=3) {
        let inputs = &inputs[..spec.inputs as usize];
        let built = spec.build(&fresh(), fragments).unwrap();
        let (m, program) = compile_checked(&resolve(built.graphs.clone()), &built.outputs);
        program.verify_parallel_against(&m).unwrap();
        prop_assert_eq!(program.level_count(), longest_path(&m));
        assert_parallel_matches(&program, inputs);
    }

    /// Order-recording hashing operations of mixed cost (zero, cheap, enough to make
    /// a level of two fork, or enough for evaluation by dependency): every evaluation, sequential or on any pool, returns the
    /// reference values, runs each instruction exactly once, and starts each operation
    /// after the operations producing its operands finished. A read of a slot not yet
    /// written panics; a read of a reused slot, or operands in the wrong order, changes
    /// the hash. Equal operations (two tags) run through one representative each in
    /// parallel chunks.
    #[test]
    fn mix_graphs_match_reference(spec in mix_spec_strategy()) {
        let (m, program, expected) = spec.compile();
        program.verify_parallel_against(&m).unwrap();
        prop_assert_eq!(program.level_count(), longest_path(&m));
        let inputs: Vec<Stamped> = (0..spec.inputs).map(|i| Stamped { value: input_value(i), done: 0 }).collect();
        let refs: Vec<&Stamped> = program.input_keys().iter().map(|&k| &inputs[k as usize]).collect();
        let runs = [None].into_iter().chain(pools().iter().map(|p| Some(Some(p)))).chain([Some(None)]);
        for pool in runs {
            let clock = Arc::new(Clock::default());
            let mut ctx = Arc::clone(&clock);
            let got = match pool {
                None => program.eval(&mut ctx, &refs),
                Some(pool) => program.eval_parallel(pool, &mut ctx, &refs),
            };
            let values: Vec<u64> = got.iter().map(|x| x.value).collect();
            prop_assert_eq!(&values, &expected, "pool {:?}", pool.map(|p| p.map(ThreadPool::current_num_threads)));
            prop_assert_eq!(clock.violations.load(SeqCst), 0, "an operation started before its operands were done");
            // Two ticks per evaluated instruction: each ran exactly once.
            prop_assert_eq!(clock.now.load(SeqCst), 2 * program.instruction_count() as u64);
        }
    }

    /// The same graphs with every operation costly: always evaluated by dependency, with
    /// the same checks (values, each instruction once, operands finished before a start).
    #[test]
    fn costly_mix_graphs_run_by_dependency(spec in mix_spec_strategy()) {
        let mut spec = spec;
        for node in &mut spec.nodes {
            node.2 = MixCost::Dataflow;
        }
        let (_, program, expected) = spec.compile();
        prop_assert!(program.instruction_count() == 0 || program.parallel_by_dependency());
        let inputs: Vec<Stamped> = (0..spec.inputs).map(|i| Stamped { value: input_value(i), done: 0 }).collect();
        let refs: Vec<&Stamped> = program.input_keys().iter().map(|&k| &inputs[k as usize]).collect();
        for pool in pools().iter().map(Some).chain([None]) {
            let clock = Arc::new(Clock::default());
            let mut ctx = Arc::clone(&clock);
            let values: Vec<u64> = program.eval_parallel(pool, &mut ctx, &refs).iter().map(|x| x.value).collect();
            prop_assert_eq!(&values, &expected);
            prop_assert_eq!(clock.violations.load(SeqCst), 0, "an operation started before its operands were done");
            prop_assert_eq!(clock.now.load(SeqCst), 2 * program.instruction_count() as u64);
        }
    }
}

/// Cheap scalar programs never run by dependency, however wide.
#[test]
fn cheap_programs_run_by_levels() {
    let (_, program, _) =
        MixSpec { inputs: 2, nodes: vec![(2, 1, MixCost::Fork, [0, 1, 0]); 40], outputs: vec![3, 7] }.compile();
    assert!(!program.parallel_by_dependency());
}

/// Two expensive operations in a level of two fork even though the level is narrow; the
/// cheap level of two after them and the single operation after that run in place on the
/// calling thread, with the caller's context (chunks get clones, whose records are
/// dropped). Checked through what the caller's context recorded, not through timing.
#[test]
fn heavy_operations_fork_in_a_narrow_level() {
    let heavy = PAR_LEVEL_MIN_COST / 2 + 1;
    let mut b = GraphBuilder::with_interner(KeyInterner::new());
    let x = b.add_input(0u32);
    let a = b.add_operation(Rec { tag: 0, arity: 1, cost: heavy }, vec![Local(x)], Primary)[0];
    let c = b.add_operation(Rec { tag: 1, arity: 1, cost: 1 }, vec![Local(a)], Primary)[0];
    let bb = b.add_operation(Rec { tag: 2, arity: 1, cost: heavy }, vec![Local(x)], Primary)[0];
    let d = b.add_operation(Rec { tag: 3, arity: 1, cost: 1 }, vec![Local(bb)], Primary)[0];
    let e = b.add_operation(Rec { tag: 4, arity: 2, cost: heavy }, vec![Local(c), Local(d)], Primary)[0];
    let g = Arc::new(b.build());
    let m = materialize_merge(&resolve(vec![g.clone()]), &[g.global_key(e)]);
    let program = compile(&m);
    program.verify_parallel_against(&m).unwrap();
    assert_eq!(program.level_count(), 3);
    let expected = {
        let (a, b) = (Rec::apply(0, &[3]), Rec::apply(2, &[3]));
        vec![Rec::apply(4, &[Rec::apply(1, &[a]), Rec::apply(3, &[b])])]
    };
    let mut seen = Vec::new();
    assert_eq!(program.eval(&mut seen, &[&3]), expected);
    assert_eq!(seen, [0, 1, 2, 3, 4], "sequential: program order, all on the caller's context");
    seen.clear();
    assert_eq!(program.eval_parallel(Some(&pools()[0]), &mut seen, &[&3]), expected);
    assert_eq!(seen, [0, 1, 2, 3, 4], "one thread: the sequential evaluator");
    for pool in &pools()[1..] {
        seen.clear();
        assert_eq!(program.eval_parallel(Some(pool), &mut seen, &[&3]), expected);
        assert_eq!(seen, [1, 3, 4], "level 1 forked; levels 2 and 3 ran in place, level by level");
    }
}

/// The same graph with cheap operations does not fork at all: with any pool it is the
/// sequential evaluator.
#[test]
fn cheap_narrow_levels_do_not_fork() {
    let mut b = GraphBuilder::with_interner(KeyInterner::new());
    let x = b.add_input(0u32);
    let outs: Vec<_> =
        (0..4).map(|tag| b.add_operation(Rec { tag, arity: 1, cost: 1 }, vec![Local(x)], Primary)[0]).collect();
    let g = Arc::new(b.build());
    let keys: Vec<_> = outs.iter().map(|&v| g.global_key(v)).collect();
    let program = compile(&materialize_merge(&resolve(vec![g]), &keys));
    for pool in pools() {
        let mut seen = Vec::new();
        let got = program.eval_parallel(Some(pool), &mut seen, &[&5]);
        assert_eq!(got, (0..4).map(|t| Rec::apply(t, &[5])).collect::<Vec<_>>());
        assert_eq!(seen, [0, 1, 2, 3]);
    }
}

/// A level wide enough to split (10^4 instructions) runs on the pool only when its
/// instructions cost enough to gain from it: of cost 1 it runs sequentially on any pool,
/// since the traffic between the cores costs more than the work the threads share (two
/// threads were slower than one on `layered_wide`, `docs/PERFORMANCE.md`); of cost 16 it
/// forks. Checked through what the caller's context recorded (chunks record into
/// clones, which are dropped), not through timing.
#[test]
fn wide_levels_fork_only_when_they_gain() {
    // Tags from 1000, past `Rec::PANIC`.
    let tags = 1000..11_000u32;
    for (cost, forks) in [(1, false), (16, true)] {
        let mut b = GraphBuilder::with_interner(KeyInterner::new());
        let x = b.add_input(0u32);
        let outs: Vec<_> =
            tags.clone().map(|tag| b.add_operation(Rec { tag, arity: 1, cost }, vec![Local(x)], Primary)[0]).collect();
        let g = Arc::new(b.build());
        let keys: Vec<_> = outs.iter().map(|&v| g.global_key(v)).collect();
        let program = compile(&materialize_merge(&resolve(vec![g]), &keys));
        assert!(!program.parallel_by_dependency());
        let expected: Vec<u64> = tags.clone().map(|t| Rec::apply(t, &[7])).collect();
        let all: Vec<u32> = tags.clone().collect();
        for pool in &pools()[1..] {
            let mut seen = Vec::new();
            assert_eq!(program.eval_parallel(Some(pool), &mut seen, &[&7]), expected);
            seen.sort_unstable();
            if forks {
                assert!(seen.len() < all.len(), "cost {cost}: the level forked, its chunks recorded into clones");
            } else {
                assert_eq!(seen, all, "cost {cost}: the sequential evaluator, on the caller's context");
            }
        }
    }
}

/// A level of cheap instructions heavy enough to time (cost past the probe's minimum,
/// 2^18) is where the estimate cannot tell: a kept [`EvalState`] runs the first call
/// sequentially, then the level evaluator and the sequential one in turn, and from then
/// on whichever was faster, every result equal to the sequential one. A fresh state (as
/// `eval_parallel` makes) always runs sequentially. Checked through what the caller's
/// context recorded, not through timing.
#[test]
fn levels_the_estimate_cannot_tell_are_timed() {
    let tags = 1000..301_000u32;
    let mut b = GraphBuilder::with_interner(KeyInterner::new());
    let x = b.add_input(0u32);
    let outs: Vec<_> =
        tags.clone().map(|tag| b.add_operation(Rec { tag, arity: 1, cost: 1 }, [Local(x)], Primary)[0]).collect();
    let g = Arc::new(b.build());
    let keys: Vec<_> = outs.iter().map(|&v| g.global_key(v)).collect();
    let program = compile(&materialize_merge(&resolve(vec![g]), &keys));
    let expected: Vec<u64> = tags.clone().map(|t| Rec::apply(t, &[7])).collect();
    let pool = &pools()[1];
    let mut seen = Vec::new();
    assert_eq!(program.eval_parallel(Some(pool), &mut seen, &[&7]), expected);
    assert_eq!(seen.len(), tags.len(), "a fresh state: the sequential evaluator");
    let mut state = EvalState::new();
    let mut forked = Vec::new();
    for _ in 0..8 {
        seen.clear();
        assert_eq!(program.eval_parallel_with(Some(pool), &mut state, &mut seen, &[&7]).unwrap(), expected);
        forked.push(seen.len() < tags.len());
    }
    assert_eq!(&forked[..4], &[false, true, false, true], "warm-up, then parallel and sequential in turn");
}

/// Benchmark shapes large enough that their levels split (layered 10^4 wide; of cheap
/// scalar operations, so they run sequentially on every pool), plus a windowed random DAG
/// and a chain.
#[test]
fn parallel_eval_on_workload_shapes() {
    // Under Miri (`just miri`), the smallest sizes that still split a level.
    let scale = if cfg!(miri) { 10 } else { 1 };
    let specs = [
        workloads::layered(if cfg!(miri) { 4200 } else { 10_000 }, if cfg!(miri) { 2 } else { 3 }, 1),
        workloads::random_dag(20_000 / scale, Operands::Window(4096), 0.1, 2),
        workloads::chain(3000 / scale, 3),
    ];
    for spec in &specs {
        let inputs = workloads::inputs_for(spec, 7);
        let built = spec.build(&fresh(), 1).unwrap();
        let (m, program) = compile_checked(&resolve(built.graphs.clone()), &built.outputs);
        program.verify_parallel_against(&m).unwrap();
        assert_same(&eval_vars(&program, &inputs), &spec.eval_reference(&inputs));
        assert_parallel_matches(&program, &inputs);
    }
}

/// The verifier checks the schedule against the graph it was compiled from: checked
/// against another graph of the same size, it is rejected.
#[test]
fn verify_parallel_against_rejects_another_graph() {
    let (a, b) = same_size_pair();
    let pa = compile(&a);
    assert!(pa.verify_parallel_against(&a).is_ok());
    match pa.verify_parallel_against(&b) {
        Err(computegraph::GraphError::Invalid { phase, .. }) => assert_eq!(phase, "parallel schedule"),
        other => panic!("expected Invalid, got {other:?}"),
    }
}

/// An operation that panics in a parallel chunk (on whichever thread) propagates the
/// panic out of `eval_parallel` instead of leaving the other threads waiting, and the
/// pool stays usable.
#[test]
fn panic_in_a_parallel_chunk_propagates() {
    let heavy = PAR_LEVEL_MIN_COST;
    let mut b = GraphBuilder::with_interner(KeyInterner::new());
    let x = b.add_input(0u32);
    let outs: Vec<_> =
        (0..6).map(|tag| b.add_operation(Rec { tag, arity: 1, cost: heavy }, vec![Local(x)], Primary)[0]).collect();
    let boom = b.add_operation(Rec { tag: Rec::PANIC, arity: 1, cost: heavy }, vec![Local(x)], Primary)[0];
    let g = Arc::new(b.build());
    let keys: Vec<_> = outs.iter().map(|&v| g.global_key(v)).collect();
    let good = compile(&materialize_merge(&resolve(vec![g.clone()]), &keys));
    let mut with_boom = keys.clone();
    with_boom.insert(3, g.global_key(boom));
    let bad = compile(&materialize_merge(&resolve(vec![g]), &with_boom));
    for pool in &pools()[1..] {
        let run = || bad.eval_parallel(Some(pool), &mut Vec::new(), &[&1]);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(run));
        assert!(caught.is_err(), "the panic reaches the caller");
        let got = good.eval_parallel(Some(pool), &mut Vec::new(), &[&1]);
        assert_eq!(got, (0..6).map(|t| Rec::apply(t, &[1])).collect::<Vec<_>>());
    }
}

/// A misbehaving operation in a parallel chunk is reported, not a panic.
#[test]
fn output_count_mismatch_in_a_parallel_level() {
    let mut b = GraphBuilder::with_interner(KeyInterner::new());
    let x = b.add_input(0u32);
    let outs: Vec<_> = (0..4)
        .map(|tag| {
            let op = Mix { tag, arity: 1, outs: 1, cost: MixCost::Fork, lie: tag == 2 };
            b.add_operation(op, vec![Local(x)], Primary)[0]
        })
        .collect();
    let g = Arc::new(b.build());
    let keys: Vec<_> = outs.iter().map(|&v| g.global_key(v)).collect();
    let program = compile(&materialize_merge(&resolve(vec![g]), &keys));
    assert_eq!(program.level_count(), 1);
    for pool in &pools()[1..] {
        match program.try_eval_parallel(Some(pool), &mut Arc::default(), &[&Stamped { value: 1, done: 0 }]) {
            Err(computegraph::GraphError::OutputCountMismatch { expected: 1, found: 2, .. }) => {}
            other => panic!("expected OutputCountMismatch, got {other:?}"),
        }
    }
}

/// A 64-bit mix of `x`: the first draw of the workspace's generator seeded with it.
fn splitmix(x: u64) -> u64 {
    scalar::workloads::Rng::new(x).next_u64()
}

fn input_value(i: u32) -> u64 {
    splitmix(1000 + u64::from(i))
}

/// A logical clock shared by an evaluation and every context clone it makes.
#[derive(Debug, Default)]
struct Clock {
    /// Ticks taken so far; the first is 1, so that an input's `done` (0) precedes everything.
    now: AtomicU64,
    /// Operations that started before one of their operands was done.
    violations: AtomicU64,
}

impl Clock {
    fn tick(&self) -> u64 {
        1 + self.now.fetch_add(1, SeqCst)
    }
}

/// A [`Mix`] value with the tick at which its producer finished.
#[derive(Clone, Debug)]
struct Stamped {
    value: u64,
    done: u64,
}

/// The cost hint of a [`Mix`]: zero (ties in the cost prefix), cheap, enough for a
/// level of two to fork, or four times the mean from which a program runs by dependency
/// (so a graph with a quarter or more of those does; ready ones of them are spawned).
#[derive(Copy, Clone, Debug, Hash, PartialEq, Eq)]
enum MixCost {
    Zero,
    Cheap,
    Fork,
    Dataflow,
}

/// A test operation: output `k` is an order-sensitive hash of its tag, `k` and its
/// operands. It ticks the context's clock when it starts and when it finishes, and counts
/// a violation if an operand was finished after it started. `lie` makes it return one
/// extra output.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Mix {
    tag: u32,
    arity: u8,
    outs: u8,
    cost: MixCost,
    lie: bool,
}

impl Mix {
    fn apply(&self, inputs: &[u64]) -> Vec<u64> {
        (0..self.outs)
            .map(|k| {
                let mut h = splitmix(u64::from(self.tag) << 8 | u64::from(k));
                for (j, x) in inputs.iter().enumerate() {
                    h = splitmix(h ^ x.rotate_left(7 * j as u32 + 1));
                }
                h
            })
            .collect()
    }
}

impl GraphOperation for Mix {
    type Operand = Stamped;
    type Context = Arc<Clock>;
    type InputKey = u32;
    fn input_count(&self) -> usize {
        self.arity as usize
    }
    fn output_count(&self) -> usize {
        self.outs as usize
    }
    fn cost_hint(&self) -> u64 {
        match self.cost {
            MixCost::Zero => 0,
            MixCost::Cheap => 1,
            MixCost::Fork => PAR_LEVEL_MIN_COST / 2,
            MixCost::Dataflow => 4 * DATAFLOW_MIN_MEAN_COST,
        }
    }
}

impl EvaluableGraphOperation for Mix {
    fn eval_into(&self, clock: &mut Arc<Clock>, inputs: &[&Stamped], out: &mut Outputs<'_, Stamped>) {
        assert_eq!(inputs.len(), self.arity as usize);
        let start = clock.tick();
        if inputs.iter().any(|x| x.done >= start) {
            clock.violations.fetch_add(1, SeqCst);
        }
        let values = self.apply(&inputs.iter().map(|x| x.value).collect::<Vec<_>>());
        let done = clock.tick();
        out.extend(values.into_iter().map(|value| Stamped { value, done }));
        if self.lie {
            out.push(Stamped { value: 0, done });
        }
    }
}

/// A random graph of [`Mix`] operations whose operands come from the few most recent
/// values (so levels are wide and slots are reused).
#[derive(Clone, Debug)]
struct MixSpec {
    inputs: u32,
    /// Per node: arity, output count, cost, operand seeds.
    nodes: Vec<(u8, u8, MixCost, [u32; 3])>,
    outputs: Vec<u32>,
}

fn mix_spec_strategy() -> impl Strategy<Value = MixSpec> {
    let cost = prop_oneof![Just(MixCost::Zero), Just(MixCost::Cheap), Just(MixCost::Fork), Just(MixCost::Dataflow)];
    let node = (0u8..=3, 1u8..=2, cost, any::<[u32; 3]>());
    (1u32..=4, prop::collection::vec(node, 0..=80), prop::collection::vec(any::<u32>(), 1..=6))
        .prop_map(|(inputs, nodes, outputs)| MixSpec { inputs, nodes, outputs })
}

impl MixSpec {
    /// Builds, compiles and evaluates the reference (a plain loop over the nodes).
    fn compile(&self) -> (MaterializedGraph<Mix>, CompiledProgram<Mix>, Vec<u64>) {
        const WINDOW: u32 = 12;
        let mut b = GraphBuilder::with_interner(KeyInterner::new());
        let mut ids: Vec<_> = (0..self.inputs).map(|i| b.add_input(i)).collect();
        let mut values: Vec<u64> = (0..self.inputs).map(input_value).collect();
        for (tag, &(arity, outs, cost, seeds)) in self.nodes.iter().enumerate() {
            let n = ids.len() as u32;
            let window = n.min(WINDOW);
            let picks: Vec<usize> =
                seeds[..arity as usize].iter().map(|s| (n - window + s % window) as usize).collect();
            // Tags repeat, so that equal operations on different operands share one
            // representative in the parallel schedule's operation table.
            let op = Mix { tag: tag as u32 % 2, arity, outs, cost, lie: false };
            let results = op.apply(&picks.iter().map(|&p| values[p]).collect::<Vec<_>>());
            let out_ids = b.add_operation(op, picks.iter().map(|&p| Local(ids[p])).collect::<Vec<_>>(), Primary);
            ids.extend(out_ids);
            values.extend(results);
        }
        let n = ids.len() as u32;
        let outputs: Vec<usize> = self.outputs.iter().map(|o| (o % n) as usize).collect();
        let expected = outputs.iter().map(|&o| values[o]).collect();
        let g = Arc::new(b.build());
        let keys: Vec<_> = outputs.iter().map(|&o| g.global_key(ids[o])).collect();
        let m = materialize_merge(&resolve(vec![g]), &keys);
        let program = compile(&m);
        program.verify_against(&m).unwrap();
        (m, program, expected)
    }
}

/// A test operation that records its tag in the context (a `Vec`) when it runs; its value
/// is a hash of the tag and the operands.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Rec {
    tag: u32,
    arity: u8,
    cost: u64,
}

impl Rec {
    /// The tag of an operation that panics when evaluated.
    const PANIC: u32 = 999;

    fn apply(tag: u32, inputs: &[u64]) -> u64 {
        inputs.iter().fold(splitmix(u64::from(tag)), |h, &x| splitmix(h ^ x))
    }
}

impl GraphOperation for Rec {
    type Operand = u64;
    type Context = Vec<u32>;
    type InputKey = u32;
    fn input_count(&self) -> usize {
        self.arity as usize
    }
    fn output_count(&self) -> usize {
        1
    }
    fn cost_hint(&self) -> u64 {
        self.cost
    }
}

impl EvaluableGraphOperation for Rec {
    fn eval_into(&self, seen: &mut Vec<u32>, inputs: &[&u64], out: &mut Outputs<'_, u64>) {
        assert_ne!(self.tag, Rec::PANIC, "this operation panics");
        seen.push(self.tag);
        out.push(Rec::apply(self.tag, &inputs.iter().map(|&&x| x).collect::<Vec<_>>()));
    }
}
