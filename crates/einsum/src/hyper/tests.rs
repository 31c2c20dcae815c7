//! The hyper-optimizer's properties on random networks: valid paths whose reported cost is
//! the reference count, reconfiguration that never makes a tree worse, reproducible seeded
//! searches, never worse than greedy, budgets kept and stop tests obeyed.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::*;
use crate::path::FollowedPath;
use crate::rng::Rng;
use crate::search::path_cost;

/// A random network: `n` operands, each edge of a random graph of degree about `degree` a
/// label of size 2 to 4, a few hyperedges (labels on three operands), some dangling
/// labels and some output labels.
fn network(n: usize, degree: usize, seed: u64) -> (Vec<Vec<u32>>, Vec<u32>, Vec<usize>) {
    let mut rng = Rng::new(seed);
    let mut inputs = vec![Vec::new(); n];
    let mut sizes = Vec::new();
    let mut label = |ops: &[usize], inputs: &mut Vec<Vec<u32>>, rng: &mut Rng| {
        let c = sizes.len() as u32;
        sizes.push(2 + rng.below(3));
        ops.iter().for_each(|&o| inputs[o].push(c));
        c
    };
    for v in 0..n {
        for _ in 0..degree.div_ceil(2) {
            let w = rng.below(n);
            if w != v {
                label(&[v, w], &mut inputs, &mut rng);
            }
        }
        if v + 1 < n && rng.below(4) == 0 {
            label(&[v, v + 1], &mut inputs, &mut rng);
        }
    }
    for _ in 0..n / 8 {
        let ops = [rng.below(n), rng.below(n), rng.below(n)];
        label(&ops, &mut inputs, &mut rng);
    }
    let mut output = Vec::new();
    for _ in 0..rng.below(3) {
        let o = rng.below(n);
        output.push(label(&[o], &mut inputs, &mut rng));
    }
    (inputs, output, sizes)
}

/// The tree cost of a path: `path_cost` less the final reordering or reduction.
fn reference_cost(inputs: &[Vec<u32>], output: &[u32], sizes: &[usize], path: &ContractionPath) -> f64 {
    let total = path_cost(inputs, output, sizes, path).unwrap();
    let followed = FollowedPath::new(inputs, output, path).unwrap();
    let last =
        followed.final_reduction().map_or(0.0, |(_, loops)| loops.iter().map(|&c| sizes[c as usize] as f64).product());
    total - last
}

fn trials(k: u32, seed: u64) -> HyperOptions {
    HyperOptions { max_time: None, max_trials: Some(k), seed, ..HyperOptions::default() }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    #[test]
    fn paths_are_valid_and_their_cost_is_the_reference_count(n in 13usize..60, degree in 2usize..5, seed in 0u64..1000) {
        let (inputs, output, sizes) = network(n, degree, seed);
        let found = hyper_path(&inputs, &output, &sizes, &trials(6, seed)).unwrap();
        prop_assert!(found.path.validate(n).is_ok());
        prop_assert!(found.path.is_pairwise());
        let reference = reference_cost(&inputs, &output, &sizes, &found.path);
        prop_assert!((found.report.cost.multiply_adds - reference).abs() <= 1e-9 * reference, "{} vs {reference}", found.report.cost.multiply_adds);
        // Never worse than the plain greedy driver (trial 0).
        let greedy = plain_greedy_cost(&Net::new(&inputs, &output, &sizes));
        prop_assert!(found.report.cost.multiply_adds <= greedy.multiply_adds);
    }

    #[test]
    fn reconfiguration_never_makes_a_tree_worse(n in 4usize..40, seed in 0u64..1000, k in 3usize..10, objective in 0usize..4) {
        let (inputs, output, sizes) = network(n, 3, seed);
        let net = Net::new(&inputs, &output, &sizes);
        // A random tree: random pairs of live nodes.
        let mut rng = Rng::new(seed ^ 1);
        let mut live: Vec<u32> = (0..n as u32).collect();
        let mut merges = Vec::new();
        for m in 0..n - 1 {
            let a = live.swap_remove(rng.below(live.len()));
            let b = live.swap_remove(rng.below(live.len()));
            merges.push([a, b]);
            live.push((n + m) as u32);
        }
        let mut tree = Tree::from_ssa(n, &merges);
        let objective = [Objective::Flops, Objective::Size, Objective::Write, Objective::Combo { factor: 64.0 }][objective];
        let before = tree.cost(&net);
        reconfigure(&net, &mut tree, k, objective, 3 * net.n(), &|| false);
        let after = tree.cost(&net);
        prop_assert!(objective.score(&after) <= objective.score(&before) * (1.0 + 1e-12), "{after:?} vs {before:?}");
        // Still a full tree over every input: a valid path with the reported cost.
        let path = tree.to_path();
        prop_assert!(path.validate(n).is_ok());
        let reference = reference_cost(&inputs, &output, &sizes, &path);
        prop_assert!((after.multiply_adds - reference).abs() <= 1e-9 * reference);
    }

    #[test]
    fn annealing_gives_full_trees_and_cold_annealing_never_loses_to_its_start(n in 4usize..40, degree in 2usize..5, seed in 0u64..1000, hot in 0.01f64..1.0) {
        let (inputs, output, sizes) = network(n, degree, seed);
        let net = Net::new(&inputs, &output, &sizes);
        let greedy_params = GreedyParams { alpha: 1.0, temperature: 0.3 };
        let start = {
            let items = (0..n).map(|i| net.leaf_legs(i)).collect();
            Tree::from_ssa(n, &greedy(&net, items, greedy_params, &mut Rng::new(seed))).cost(&net)
        };
        for (beta_start, beta_end) in [(hot, 20.0), (f64::INFINITY, f64::INFINITY)] {
            let params = anneal::AnnealParams { beta_start, beta_end, sweeps: 30, greedy: greedy_params };
            // The same stream as `start`'s greedy, so the walk starts from that tree.
            let tree = anneal_tree(&net, params, Objective::Flops, &mut Rng::new(seed), None);
            let path = tree.to_path();
            prop_assert!(path.validate(n).is_ok());
            let cost = tree.cost(&net);
            let reference = reference_cost(&inputs, &output, &sizes, &path);
            prop_assert!((cost.multiply_adds - reference).abs() <= 1e-9 * reference);
            if beta_start.is_infinite() {
                // Only moves that lower the two steps' sum are taken: the total only falls.
                prop_assert!(cost.multiply_adds <= start.multiply_adds * (1.0 + 1e-12), "{cost:?} vs {start:?}");
            }
        }
    }
}

#[test]
fn a_seeded_search_is_reproducible_and_seeds_differ() {
    let (inputs, output, sizes) = network(120, 3, 5);
    let a = hyper_path(&inputs, &output, &sizes, &trials(24, 11)).unwrap();
    let b = hyper_path(&inputs, &output, &sizes, &trials(24, 11)).unwrap();
    assert_eq!(a.path, b.path);
    assert_eq!(a.report.cost, b.report.cost);
    // Run in a one-thread pool: the same result (batches are suggested before they run).
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    let c = pool.install(|| hyper_path(&inputs, &output, &sizes, &trials(24, 11))).unwrap();
    assert_eq!(a.path, c.path);
}

#[test]
fn small_networks_are_solved_exactly() {
    let inputs = vec![vec![0, 1], vec![1, 2], vec![2, 3]];
    let sizes = [2, 30, 40, 2];
    let found = hyper_path(&inputs, &[0, 3], &sizes, &HyperOptions::default()).unwrap();
    assert_eq!((found.report.method, found.report.trials), ("optimal", 0));
    assert_eq!(found.report.cost.multiply_adds, 2520.0);
}

#[test]
fn the_time_budget_and_the_stop_test_end_the_search() {
    let (inputs, output, sizes) = network(300, 3, 9);
    let budget = Duration::from_millis(300);
    let opts = HyperOptions { max_time: Some(budget), ..HyperOptions::default() };
    let t = Instant::now();
    let found = hyper_path(&inputs, &output, &sizes, &opts).unwrap();
    // Generous slack: a debug build's trial on 300 operands, on a loaded machine.
    assert!(t.elapsed() < budget + Duration::from_secs(10), "{:?}", t.elapsed());
    assert!(found.report.trials >= 1 && !found.report.interrupted);
    // A stop test that says stop at its first question: one batch, the best of it.
    let asked = std::cell::Cell::new(0);
    let stop = || {
        asked.set(asked.get() + 1);
        true
    };
    let mut batches = 0;
    let found = hyper_path_until(&inputs, &output, &sizes, &trials(1000, 0), &stop, &mut |_| batches += 1).unwrap();
    assert!(found.report.interrupted);
    assert_eq!((asked.get(), batches), (1, 1));
    assert!(found.path.validate(300).is_ok());
}

#[test]
fn a_label_without_a_size_is_an_error() {
    let err = hyper_path(&[vec![0, 5]], &[], &[2], &HyperOptions::default()).unwrap_err();
    assert!(err.to_string().contains("label 5"), "{err}");
}

#[test]
fn objectives_parse_and_print_back() {
    for o in [Objective::Flops, Objective::Size, Objective::Write, Objective::Combo { factor: 8.5 }] {
        assert_eq!(o.to_string().parse::<Objective>().unwrap(), o);
    }
    assert!("combo-x".parse::<Objective>().is_err());
    assert!("combo--1".parse::<Objective>().is_err());
}

#[test]
fn a_sliced_plan_meets_its_target_and_its_value_and_gradients_equal_the_unsliced_ones() {
    use crate::{Einsum, EinsumOptions, PathChoice, SlicedEinsum, Slicing, Subscripts, Tensor};
    // A ring of 14 matrices with two chords, bonds 3: intermediates of up to 3^4 = 81
    // elements; one slice may hold at most 9.
    let n = 14u32;
    let mut edges: Vec<(u32, u32)> = (0..n).map(|i| (i, (i + 1) % n)).collect();
    edges.extend([(0, 7), (3, 10)]);
    let letters: Vec<char> = "abcdefghijklmnopqrstuvwxyz".chars().collect();
    let term = |v: u32| -> String {
        edges.iter().enumerate().filter(|(_, e)| e.0 == v || e.1 == v).map(|(k, _)| letters[k]).collect()
    };
    let expression = format!("{}->a", (0..n).map(term).collect::<Vec<_>>().join(","));
    let shapes: Vec<Vec<usize>> = (0..n).map(|v| vec![3; term(v).len()]).collect();
    let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let net = Subscripts::parse(&expression).unwrap().resolve(&refs).unwrap();
    let opts = HyperOptions { max_time: None, max_trials: Some(8), slice_target: Some(9), ..HyperOptions::default() };
    let found = hyper_path(&net.inputs, &net.output, &net.sizes, &opts).unwrap();
    assert!(!found.report.sliced.is_empty());
    assert!(found.report.cost.largest_intermediate <= 9.0);
    assert_eq!(found.report.slices, 3f64.powi(found.report.sliced.len() as i32));
    let names: Vec<char> = found.report.sliced.iter().map(|&c| net.names[c as usize].unwrap()).collect();

    let mut rng = Rng::new(3);
    let operands: Vec<Tensor<f64>> =
        shapes.iter().map(|s| Tensor::from_fn(s.clone(), |_| 0.5 + rng.unit()).unwrap()).collect();
    let ops: Vec<&Tensor<f64>> = operands.iter().collect();
    let path = PathChoice::Explicit(found.path.clone());
    let whole = Einsum::<f64>::new(&expression, &shapes, path.clone()).unwrap();
    let sliced =
        SlicedEinsum::<f64>::new(&expression, &shapes, path, &EinsumOptions::default(), &Slicing::Labels(names))
            .unwrap();
    assert_eq!(sliced.plan().n_slices() as f64, found.report.slices);
    let close = |a: &Tensor<f64>, b: &Tensor<f64>| {
        assert_eq!(a.shape(), b.shape());
        for (x, y) in a.data().iter().zip(b.data()) {
            assert!((x - y).abs() <= 1e-10 * x.abs().max(1.0), "{x} vs {y}");
        }
    };
    close(&sliced.eval(&ops).unwrap(), &whole.eval(&ops).unwrap());
    let wrt: Vec<usize> = (0..n as usize).collect();
    let cotangent = Tensor::from_fn(vec![3], |i| 1.0 + i[0] as f64).unwrap();
    let g_whole = whole.gradient(&wrt).unwrap().eval(&ops, &cotangent).unwrap();
    let g_sliced = sliced.gradient(&wrt).unwrap().eval(&ops, &cotangent).unwrap();
    for (a, b) in g_sliced.iter().zip(&g_whole) {
        close(a, b);
    }
}
