//! Operand ownership in the evaluators: every operand value the slots take is dropped
//! exactly once, whether a run completes, fails or panics, sequentially or in parallel
//! (by levels or by dependency),
//! whether the state is cleared, reused by the next run (whose reset drops what the last
//! one left) or dropped.
//!
//! The operand counts its live instances (construction and `clone` add one, `drop` takes
//! one away), so a leaked slot value shows as a count above the values the test holds and
//! a double drop as a count below it (or a negative one).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering::SeqCst};

use computegraph::{
    CompiledProgram, EvalState, EvaluableGraphOperation, GraphBuilder, GraphOperation, KeyInterner,
    OperationRole::Primary, Outputs, PAR_LEVEL_MIN_COST, ValueRef::Local, compile, materialize_merge, resolve,
};
use proptest::prelude::*;

/// A value that counts its live instances in `live`.
#[derive(Debug)]
struct Counted {
    value: u64,
    live: Arc<AtomicIsize>,
}

impl Counted {
    fn new(value: u64, live: &Arc<AtomicIsize>) -> Self {
        live.fetch_add(1, SeqCst);
        Counted { value, live: live.clone() }
    }
}

impl Clone for Counted {
    fn clone(&self) -> Self {
        Counted::new(self.value, &self.live)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.live.fetch_sub(1, SeqCst);
    }
}

/// What an operation does wrong, if anything.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum Fault {
    None,
    /// Returns one output too many (an error, after the output values were made).
    ExtraOutput,
    /// Panics.
    Panic,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Tally {
    tag: u32,
    arity: u8,
    outs: u8,
    cost: u64,
    fault: Fault,
}

fn mix(tag: u32, k: u8, inputs: &[u64]) -> u64 {
    inputs
        .iter()
        .fold(u64::from(tag) << 8 | u64::from(k), |h, &x| (h ^ x).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29))
}

impl GraphOperation for Tally {
    type Operand = Counted;
    type Context = ();
    type InputKey = u32;
    fn input_count(&self) -> usize {
        self.arity as usize
    }
    fn output_count(&self) -> usize {
        self.outs as usize
    }
    fn cost_hint(&self) -> u64 {
        self.cost
    }
}

impl EvaluableGraphOperation for Tally {
    fn eval_into(&self, _: &mut (), inputs: &[&Counted], out: &mut Outputs<'_, Counted>) {
        let live = &inputs.first().expect("every Tally has an operand").live;
        let values: Vec<u64> = inputs.iter().map(|x| x.value).collect();
        out.extend((0..self.outs).map(|k| Counted::new(mix(self.tag, k, &values), live)));
        match self.fault {
            Fault::None => {}
            Fault::ExtraOutput => out.push(Counted::new(0, live)),
            Fault::Panic => panic!("Tally {} panics on purpose", self.tag),
        }
    }
}

/// A random graph: per node its arity (1 to 3), output count (1 or 2), whether it is
/// heavy, and operand seeds; operands come from the ten most recent values.
#[derive(Clone, Debug)]
struct Spec {
    inputs: u32,
    nodes: Vec<(u8, u8, bool, [u32; 3])>,
    outputs: Vec<u32>,
}

fn spec_strategy() -> impl Strategy<Value = Spec> {
    let node = (1u8..=3, 1u8..=2, any::<bool>(), any::<[u32; 3]>());
    (1u32..=4, prop::collection::vec(node, 1..=60), prop::collection::vec(any::<u32>(), 1..=5))
        .prop_map(|(inputs, nodes, outputs)| Spec { inputs, nodes, outputs })
}

impl Spec {
    /// Compiles the graph with node `faulty` (if any) given `fault`, and returns the
    /// program with the expected output values. `by_dependency` makes the parallel
    /// evaluator run it by dependency (`dataflow.rs`); otherwise by levels.
    fn compile(&self, faulty: Option<(usize, Fault)>, by_dependency: bool) -> (CompiledProgram<Tally>, Vec<u64>) {
        const WINDOW: u32 = 10;
        let mut b = GraphBuilder::with_interner(KeyInterner::new());
        let mut ids: Vec<_> = (0..self.inputs).map(|i| b.add_input(i)).collect();
        let mut values: Vec<u64> = (0..self.inputs).map(u64::from).collect();
        // A first level of four operations heavy enough that the parallel evaluator always
        // splits it and takes its parallel path (not the sequential fallback), kept
        // reachable by being outputs. By levels, 64 cheap outputs more keep the mean cost
        // per instruction under `DATAFLOW_MIN_MEAN_COST`; by dependency, the heavy four
        // keep it over.
        let mut heavy_outputs = Vec::new();
        let heavy = if by_dependency { 1000 * PAR_LEVEL_MIN_COST } else { 16 * PAR_LEVEL_MIN_COST };
        for k in 0..4u32 {
            let op = Tally { tag: 1000 + k, arity: 1, outs: 1, cost: heavy, fault: Fault::None };
            values.push(mix(1000 + k, 0, &[0]));
            heavy_outputs.push(ids.len());
            ids.extend(b.add_operation(op, vec![Local(ids[0])], Primary));
        }
        for k in 0..if by_dependency { 0 } else { 64u32 } {
            let op = Tally { tag: 2000 + k, arity: 1, outs: 1, cost: 1, fault: Fault::None };
            values.push(mix(2000 + k, 0, &[0]));
            heavy_outputs.push(ids.len());
            ids.extend(b.add_operation(op, vec![Local(ids[0])], Primary));
        }
        let mut faulty_value = None;
        for (tag, &(arity, outs, heavy, seeds)) in self.nodes.iter().enumerate() {
            let n = ids.len() as u32;
            let window = n.min(WINDOW);
            let picks: Vec<usize> =
                seeds[..arity as usize].iter().map(|s| (n - window + s % window) as usize).collect();
            let fault = match faulty {
                Some((i, f)) if i == tag => {
                    faulty_value = Some(ids.len());
                    f
                }
                _ => Fault::None,
            };
            let cost = if heavy { PAR_LEVEL_MIN_COST } else { 1 };
            let op = Tally { tag: tag as u32, arity, outs, cost, fault };
            let operands: Vec<u64> = picks.iter().map(|&p| values[p]).collect();
            values.extend((0..outs).map(|k| mix(tag as u32, k, &operands)));
            ids.extend(b.add_operation(op, picks.iter().map(|&p| Local(ids[p])).collect::<Vec<_>>(), Primary));
        }
        // Outputs among the operation results, and the faulty node's first output, so that
        // it is reached.
        let first = self.inputs as usize;
        let n = ids.len() - first;
        let mut outputs: Vec<usize> = self.outputs.iter().map(|o| first + *o as usize % n).collect();
        outputs.extend(faulty_value);
        outputs.extend(heavy_outputs);
        let expected = outputs.iter().map(|&o| values[o]).collect();
        let g = Arc::new(b.build());
        let keys: Vec<_> = outputs.iter().map(|&o| g.global_key(ids[o])).collect();
        let program = compile(&materialize_merge(&resolve(vec![g]), &keys));
        assert_eq!(program.parallel_by_dependency(), by_dependency);
        (program, expected)
    }

    fn inputs(&self, live: &Arc<AtomicIsize>) -> Vec<Counted> {
        (0..self.inputs).map(|i| Counted::new(u64::from(i), live)).collect()
    }
}

fn pool() -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new().num_threads(2).build().expect("a pool of two threads")
}

/// Runs `program` on fresh inputs, sequentially (`pool` `None`) or on `pool`, with
/// `state` (not cleared after), and returns the result with the run's live counter, once
/// the run's inputs and results are dropped: what it still counts is held by `state`.
fn run(
    program: &CompiledProgram<Tally>,
    spec: &Spec,
    pool: Option<&rayon::ThreadPool>,
    state: &mut EvalState<Counted>,
) -> (std::thread::Result<Result<Vec<u64>, computegraph::GraphError>>, Arc<AtomicIsize>) {
    let live = Arc::new(AtomicIsize::new(0));
    let inputs = spec.inputs(&live);
    let refs: Vec<&Counted> = program.input_keys().iter().map(|&k| &inputs[k as usize]).collect();
    let result = catch_unwind(AssertUnwindSafe(|| match pool {
        None => program.eval_with(state, &mut (), &refs),
        Some(pool) => program.eval_parallel_with(Some(pool), state, &mut (), &refs),
    }));
    let held = inputs.len() as isize + result.as_ref().map_or(0, |r| r.as_ref().map_or(0, |v| v.len() as isize));
    assert!(live.load(SeqCst) >= held, "a value the test holds was dropped");
    (result.map(|r| r.map(|v| v.iter().map(|c| c.value).collect())), live)
}

/// Runs `program` once per entry of `pools`, reusing one state: each run's reset must drop
/// what the run before left in the slots, and `clear` what the last one left. Returns the
/// results.
fn runs(
    program: &CompiledProgram<Tally>,
    spec: &Spec,
    pools: &[Option<&rayon::ThreadPool>],
    state: &mut EvalState<Counted>,
) -> Vec<std::thread::Result<Result<Vec<u64>, computegraph::GraphError>>> {
    let mut results = Vec::new();
    let mut before: Option<Arc<AtomicIsize>> = None;
    for &pool in pools {
        let (result, live) = run(program, spec, pool, state);
        if let Some(before) = before.replace(live) {
            assert_eq!(before.load(SeqCst), 0, "the next run's reset dropped the last run's values");
        }
        results.push(result);
    }
    state.clear();
    if let Some(last) = before {
        assert_eq!(last.load(SeqCst), 0, "clear dropped the last run's values");
    }
    results
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn completed_runs_drop_every_slot_value_once(spec in spec_strategy(), by_dependency in any::<bool>()) {
        let (program, expected) = spec.compile(None, by_dependency);
        let pool = pool();
        let mut state = EvalState::new();
        for got in runs(&program, &spec, &[None, Some(&pool), Some(&pool), None, None], &mut state) {
            prop_assert_eq!(&got.expect("no panic").expect("no error"), &expected);
        }
    }

    #[test]
    fn failed_and_panicking_runs_drop_every_slot_value_once(
        spec in spec_strategy(),
        at in any::<prop::sample::Index>(),
        panic in any::<bool>(),
        by_dependency in any::<bool>(),
    ) {
        let fault = if panic { Fault::Panic } else { Fault::ExtraOutput };
        let (program, _) = spec.compile(Some((at.index(spec.nodes.len()), fault)), by_dependency);
        let pool = pool();
        let mut state = EvalState::new();
        for result in runs(&program, &spec, &[None, Some(&pool), Some(&pool), None], &mut state) {
            match result {
                Ok(Ok(_)) => prop_assert!(false, "a faulty operation was evaluated without error"),
                Ok(Err(e)) => prop_assert!(!panic, "error {e} from a panicking operation"),
                Err(_) => prop_assert!(panic, "panic from an operation that only errs"),
            }
        }
        // The state is still usable afterwards.
        let (clean, expected) = spec.compile(None, by_dependency);
        let got = runs(&clean, &spec, &[None, Some(&pool)], &mut state);
        for got in got {
            prop_assert_eq!(&got.expect("no panic").expect("no error"), &expected);
        }
    }
}

#[test]
fn dropping_a_state_mid_use_drops_its_values() {
    let spec = Spec { inputs: 2, nodes: vec![(2, 1, false, [0, 1, 0]), (1, 2, false, [2, 0, 0])], outputs: vec![0, 1] };
    let (program, _) = spec.compile(Some((1, Fault::ExtraOutput)), false);
    let live = Arc::new(AtomicIsize::new(0));
    let inputs = spec.inputs(&live);
    let refs: Vec<&Counted> = program.input_keys().iter().map(|&k| &inputs[k as usize]).collect();
    let mut state = EvalState::new();
    assert!(program.eval_with(&mut state, &mut (), &refs).is_err());
    // The failed run left values in the state's slots (the inputs' copies at least).
    assert!(live.load(SeqCst) > 2, "the state holds values of the failed run");
    drop(state);
    assert_eq!(live.load(SeqCst), 2, "only the test's inputs are alive");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// `eval_with_each`'s closure panicking after `k` outputs (some taken out of their
    /// slots, some only cloned when an output is listed twice): every value is dropped
    /// exactly once, whether the state is then reused, cleared or dropped.
    #[test]
    fn a_panicking_output_closure_drops_every_value_once(
        mut spec in spec_strategy(),
        k in 0usize..8,
        then in 0u8..3,
    ) {
        // One output listed twice, so that a slot is cloned before it is moved.
        spec.outputs.push(spec.outputs[0]);
        let (program, expected) = spec.compile(None, false);
        let live = Arc::new(AtomicIsize::new(0));
        let inputs = spec.inputs(&live);
        let refs: Vec<&Counted> = program.input_keys().iter().map(|&k| &inputs[k as usize]).collect();
        let mut state = EvalState::new();
        let mut got = Vec::new();
        let result = catch_unwind(AssertUnwindSafe(|| {
            program.eval_with_each(&mut state, &mut (), &refs, |x| {
                if got.len() == k {
                    panic!("the output closure panics on purpose");
                }
                got.push(x);
            })
        }));
        prop_assert_eq!(result.is_err(), k < expected.len());
        let values: Vec<u64> = got.iter().map(|c| c.value).collect();
        prop_assert_eq!(&values[..], &expected[..k.min(expected.len())]);
        drop(got);
        match then {
            0 => {
                // Reused: the next run's reset drops what the panicked one left.
                let out = program.eval_with(&mut state, &mut (), &refs).unwrap();
                prop_assert_eq!(out.iter().map(|c| c.value).collect::<Vec<_>>(), expected);
                drop(out);
                state.clear();
            }
            1 => state.clear(),
            _ => drop(state),
        }
        prop_assert_eq!(live.load(SeqCst), inputs.len() as isize, "only the test's inputs are alive");
    }
}
