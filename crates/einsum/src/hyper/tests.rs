//! The hyper-optimizer's properties on random networks: valid paths whose reported cost is
//! the reference count, reconfiguration that never makes a tree worse, reproducible seeded
//! searches, never worse than greedy, budgets kept and stop tests obeyed.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::rng::Rng;
use super::*;
use crate::path::FollowedPath;
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
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

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
        reconfigure(&net, &mut tree, k, objective, 3, None);
        let after = tree.cost(&net);
        prop_assert!(objective.score(&after) <= objective.score(&before) * (1.0 + 1e-12), "{after:?} vs {before:?}");
        // Still a full tree over every input: a valid path with the reported cost.
        let path = tree.to_path();
        prop_assert!(path.validate(n).is_ok());
        let reference = reference_cost(&inputs, &output, &sizes, &path);
        prop_assert!((after.multiply_adds - reference).abs() <= 1e-9 * reference);
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
