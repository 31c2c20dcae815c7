//! Path search on networks of 10^4 tensors (issue 37, item 5): greedy, the hyper-optimizer
//! and `auto` return valid paths, and the searches with a time budget keep it. Timing
//! bounds are the budget plus a generous margin (a debug build on a loaded two-core
//! machine); the figures are in `docs/PERFORMANCE.md` (`--example scale`).

use std::time::{Duration, Instant};

use einsum::hyper::{HyperOptions, hyper_path};
use einsum::search::{AUTO_MAX_TIME, auto, find_path, path_cost};
use einsum::{ContractionPath, PathChoice};

/// What a search may take past its budget here: one greedy tree of 10^4 tensors, its
/// path and its cost in a debug build, with other builds running.
const MARGIN: Duration = Duration::from_secs(20);

/// A `side × side` lattice, one label of size 2 per edge, scalar output.
fn lattice(side: usize) -> (Vec<Vec<u32>>, Vec<usize>) {
    let net = einsum::generate::lattice(&[side, side], 2..=2, 0).expect("a valid lattice");
    (net.inputs, net.sizes)
}

/// A random graph of degree 3 on `n` vertices (a random perfect matching of three stubs
/// per vertex, loops and repeated edges kept: they are labels like any other), one label of
/// size 2 per edge.
fn random_cubic(n: usize, seed: u64) -> (Vec<Vec<u32>>, Vec<usize>) {
    let mut state = seed;
    let mut next = |bound: usize| {
        state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((state >> 33) as usize) % bound
    };
    let mut stubs: Vec<usize> = (0..n).flat_map(|v| [v, v, v]).collect();
    for i in (1..stubs.len()).rev() {
        stubs.swap(i, next(i + 1));
    }
    let mut inputs = vec![Vec::new(); n];
    for (c, pair) in stubs.chunks(2).enumerate() {
        inputs[pair[0]].push(c as u32);
        inputs[pair[1]].push(c as u32);
    }
    (inputs, vec![2; stubs.len() / 2])
}

#[test]
fn greedy_plans_ten_thousand_tensors() {
    for (inputs, sizes) in [lattice(100), random_cubic(10_000, 1)] {
        let path = find_path(PathChoice::Greedy, &inputs, &[], &sizes).unwrap();
        assert!(path.validate(inputs.len()).is_ok());
        assert!(path_cost(&inputs, &[], &sizes, &path).unwrap() > 0.0);
    }
}

#[test]
fn the_hyper_optimizer_keeps_its_budget_on_ten_thousand_tensors() {
    let (inputs, sizes) = lattice(100);
    for budget in [Duration::from_millis(200), Duration::from_secs(1)] {
        let opts = HyperOptions { max_time: Some(budget), ..HyperOptions::default() };
        let start = Instant::now();
        let found = hyper_path(&inputs, &[], &sizes, &opts).unwrap();
        let took = start.elapsed();
        assert!(took < budget + MARGIN, "{took:?} for a budget of {budget:?}");
        assert!(found.report.trials >= 1);
        assert!(found.path.validate(inputs.len()).is_ok());
        // The same count, summed over 10^4 steps in another order: equal to rounding.
        let counted = path_cost(&inputs, &[], &sizes, &found.path).unwrap();
        assert!(
            (found.report.cost.multiply_adds - counted).abs() <= 1e-9 * counted,
            "{:?} against {counted}",
            found.report
        );
        // Never worse than the first trial, the plain greedy tree, nor far from the greedy
        // finder's path (the two greedy finders break ties differently).
        let greedy = ContractionPath::greedy(&inputs, &[], |c| sizes[c as usize]);
        assert!(found.report.cost.multiply_adds <= 4.0 * path_cost(&inputs, &[], &sizes, &greedy).unwrap());
    }
}

#[test]
fn auto_is_bounded_on_ten_thousand_tensors() {
    let (inputs, sizes) = random_cubic(10_000, 2);
    let start = Instant::now();
    let path = auto(&inputs, &[], &sizes);
    let took = start.elapsed();
    assert!(took < AUTO_MAX_TIME + MARGIN, "{took:?}");
    assert!(path.validate(inputs.len()).is_ok());
}
