//! Level-parallel evaluation: equal to sequential evaluation (bitwise, NaN-tolerant) on
//! random specs with 1- and 2-thread pools, order-sensitive hashing operations that make
//! every level with two or more instructions run in parallel chunks, the level count
//! against longest paths computed on the materialized graph, and the schedule verifier.

use std::sync::{Arc, OnceLock};

use computegraph::{
    CompiledProgram, EvalState, EvaluableGraphOperation, GraphBuilder, GraphOperation, KeyInterner, MaterializedGraph,
    OperationRole::Primary, ValueId, ValueRef::Local, compile, materialize_merge, resolve,
};
use proptest::prelude::*;
use rayon::{ThreadPool, ThreadPoolBuilder};
use scalar::workloads::{self, Operands};
use scalar::{ScalarKey, ScalarOp};

use crate::support::{assert_same, compile_checked, eval_vars, fresh, inputs_strategy, spec_strategy};

/// Pools of one and two threads, built once for the binary.
fn pools() -> &'static [ThreadPool; 2] {
    static POOLS: OnceLock<[ThreadPool; 2]> = OnceLock::new();
    POOLS.get_or_init(|| [1, 2].map(|n| ThreadPoolBuilder::new().num_threads(n).build().unwrap()))
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

    /// Order-sensitive hashing operations, each reporting a cost large enough that every
    /// level of two or more instructions is cut into chunks on the pool: an operand read
    /// from a slot that is not yet written panics, and one read from a reused slot, or in
    /// the wrong order, changes the hash.
    #[test]
    fn mix_graphs_match_reference(spec in mix_spec_strategy()) {
        let (m, program, expected) = spec.compile();
        program.verify_parallel_against(&m).unwrap();
        prop_assert_eq!(program.level_count(), longest_path(&m));
        let inputs: Vec<u64> = (0..spec.inputs).map(input_value).collect();
        let refs: Vec<&u64> = program.input_keys().iter().map(|&k| &inputs[k as usize]).collect();
        prop_assert_eq!(&program.eval(&mut (), &refs), &expected);
        for pool in pools().iter().map(Some).chain([None]) {
            prop_assert_eq!(&program.eval_parallel(pool, &mut (), &refs), &expected);
        }
    }
}

/// Benchmark shapes large enough that cheap scalar levels go parallel (layered 10^4
/// wide), plus a windowed random DAG and a chain.
#[test]
fn parallel_eval_on_workload_shapes() {
    let specs = [
        workloads::layered(10_000, 3, 1),
        workloads::random_dag(20_000, Operands::Window(4096), 0.1, 2),
        workloads::chain(3000, 3),
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
    let interner = fresh();
    let shape = |swap: bool| {
        let mut b = GraphBuilder::with_interner(interner.clone());
        let x = b.add_input(ScalarKey::var(0));
        let y = b.add_input(ScalarKey::var(1));
        let s = b.add_operation(ScalarOp::Add, vec![Local(x), Local(y)], Primary)[0];
        let operands = if swap { vec![Local(x), Local(s)] } else { vec![Local(s), Local(x)] };
        let t = b.add_operation(ScalarOp::Mul, operands, Primary)[0];
        let g = Arc::new(b.build());
        materialize_merge(&resolve(vec![g.clone()]), &[g.global_key(t)])
    };
    let (a, b) = (shape(false), shape(true));
    let pa = compile(&a);
    assert!(pa.verify_parallel_against(&a).is_ok());
    match pa.verify_parallel_against(&b) {
        Err(computegraph::GraphError::Invalid { phase, .. }) => assert_eq!(phase, "parallel schedule"),
        other => panic!("expected Invalid, got {other:?}"),
    }
}

/// A misbehaving operation in a parallel chunk is reported, not a panic.
#[test]
fn output_count_mismatch_in_a_parallel_level() {
    let mut b = GraphBuilder::with_interner(KeyInterner::new());
    let x = b.add_input(0u32);
    let outs: Vec<_> = (0..4)
        .map(|tag| b.add_operation(Mix { tag, arity: 1, outs: 1, lie: tag == 2 }, vec![Local(x)], Primary)[0])
        .collect();
    let g = Arc::new(b.build());
    let keys: Vec<_> = outs.iter().map(|&v| g.global_key(v)).collect();
    let program = compile(&materialize_merge(&resolve(vec![g]), &keys));
    assert_eq!(program.level_count(), 1);
    match program.try_eval_parallel(Some(&pools()[1]), &mut (), &[&1]) {
        Err(computegraph::GraphError::OutputCountMismatch { expected: 1, found: 2, .. }) => {}
        other => panic!("expected OutputCountMismatch, got {other:?}"),
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

fn input_value(i: u32) -> u64 {
    splitmix(1000 + u64::from(i))
}

/// A test operation: output `k` is an order-sensitive hash of its tag, `k` and its
/// operands. Its cost hint forces parallel chunks; `lie` makes it return one extra output.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct Mix {
    tag: u32,
    arity: u8,
    outs: u8,
    lie: bool,
}

impl Mix {
    fn apply(&self, inputs: &[&u64]) -> Vec<u64> {
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
    type Operand = u64;
    type Context = ();
    type InputKey = u32;
    fn input_count(&self) -> usize {
        self.arity as usize
    }
    fn output_count(&self) -> usize {
        self.outs as usize
    }
    fn cost_hint(&self) -> u64 {
        computegraph::PAR_LEVEL_MIN_COST
    }
}

impl EvaluableGraphOperation for Mix {
    fn eval_into(&self, _: &mut (), inputs: &[&u64], out: &mut Vec<u64>) {
        assert_eq!(inputs.len(), self.arity as usize);
        out.extend(self.apply(inputs));
        if self.lie {
            out.push(0);
        }
    }
}

/// A random graph of [`Mix`] operations whose operands come from the few most recent
/// values (so levels are wide and slots are reused).
#[derive(Clone, Debug)]
struct MixSpec {
    inputs: u32,
    /// Per node: arity, output count, operand seeds.
    nodes: Vec<(u8, u8, [u32; 3])>,
    outputs: Vec<u32>,
}

fn mix_spec_strategy() -> impl Strategy<Value = MixSpec> {
    let node = (0u8..=3, 1u8..=2, any::<[u32; 3]>());
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
        for (tag, &(arity, outs, seeds)) in self.nodes.iter().enumerate() {
            let n = ids.len() as u32;
            let window = n.min(WINDOW);
            let picks: Vec<usize> =
                seeds[..arity as usize].iter().map(|s| (n - window + s % window) as usize).collect();
            let op = Mix { tag: tag as u32, arity, outs, lie: false };
            let refs: Vec<&u64> = picks.iter().map(|&p| &values[p]).collect();
            let results = op.apply(&refs);
            let out_ids = b.add_operation(op, picks.iter().map(|&p| Local(ids[p])).collect(), Primary);
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
