//! Path searches on small random networks: the exact search equals a brute-force
//! enumeration of every pairwise path and is never worse than greedy or the connected-subset
//! search; random-greedy is never worse than greedy; every search's path contracts to the
//! reference's values.

use einsum::search::{DP_MAX_PAIRS, dp, find_path_until, optimal, path_cost, random_greedy};
use einsum::{ContractionPath, Einsum, EinsumError, MemoryLimit, PathChoice, Plan};
use proptest::prelude::*;

/// A random network: `n` operands over up to 6 labels of sizes 1..=5, some kept in the
/// output.
fn network() -> impl Strategy<Value = (Vec<Vec<u32>>, Vec<u32>, Vec<usize>)> {
    (2usize..=6, 2u32..=6)
        .prop_flat_map(|(n, nl)| {
            (
                proptest::collection::vec(proptest::collection::vec(0..nl, 1..=3), n),
                proptest::collection::vec(1usize..=5, nl as usize),
                proptest::collection::vec(any::<bool>(), nl as usize),
            )
        })
        .prop_map(|(mut inputs, sizes, keep)| {
            for l in &mut inputs {
                l.sort_unstable();
                l.dedup();
            }
            let mut present: Vec<u32> = inputs.iter().flatten().copied().collect();
            present.sort_unstable();
            present.dedup();
            let output = present.into_iter().filter(|&c| keep[c as usize]).collect();
            (inputs, output, sizes)
        })
}

/// The cheapest cost over every pairwise path, by enumerating them all.
fn brute_force(inputs: &[Vec<u32>], output: &[u32], sizes: &[usize]) -> f64 {
    // Enumerate paths as sequences of pairs over a shrinking list, iteratively.
    let n = inputs.len();
    let mut best = f64::INFINITY;
    let mut stack: Vec<Vec<[usize; 2]>> = vec![Vec::new()];
    while let Some(prefix) = stack.pop() {
        let live = n - prefix.len();
        if live == 1 {
            best = best.min(path_cost(inputs, output, sizes, &ContractionPath::new(prefix)).unwrap());
            continue;
        }
        for i in 0..live {
            for j in i + 1..live {
                let mut p = prefix.clone();
                p.push([i, j]);
                stack.push(p);
            }
        }
    }
    best
}

fn expression(inputs: &[Vec<u32>], output: &[u32]) -> String {
    let letter = |c: &u32| char::from_u32('a' as u32 + c).unwrap();
    let ins: Vec<String> = inputs.iter().map(|l| l.iter().map(letter).collect()).collect();
    format!("{}->{}", ins.join(","), output.iter().map(letter).collect::<String>())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn searches_against_brute_force_and_greedy((inputs, output, sizes) in network()) {
        // Through a plan, as every caller searches: labels held by one operand alone are
        // summed first and the finders see what is left; the cost counts those sums.
        let plan = |choice: PathChoice| {
            Plan::from_network(inputs.clone(), output.clone(), sizes.clone(), choice, MemoryLimit::Unlimited).unwrap()
        };
        let cost = |p: &ContractionPath| path_cost(&inputs, &output, &sizes, p).unwrap();
        let reduced = plan(PathChoice::Greedy).reduced_inputs().to_vec();
        let greedy = cost(&ContractionPath::greedy(&reduced, &output, |c| sizes[c as usize]));
        prop_assert_eq!(greedy, plan(PathChoice::Greedy).multiply_adds());
        let exact = optimal(&reduced, &output, &sizes).unwrap();
        prop_assert!(exact.validate(inputs.len()).is_ok());
        let exact = cost(&exact);
        prop_assert_eq!(exact, plan(PathChoice::Optimal).multiply_adds());
        prop_assert_eq!(exact, brute_force(&inputs, &output, &sizes));
        prop_assert!(exact <= greedy);
        let connected = dp(&reduced, &output, &sizes, DP_MAX_PAIRS).unwrap();
        prop_assert!(connected.validate(inputs.len()).is_ok());
        prop_assert!(exact <= cost(&connected));
        for seed in 0..3 {
            let r = random_greedy(&reduced, &output, &sizes, 8, seed);
            prop_assert!(r.validate(inputs.len()).is_ok());
            prop_assert!(cost(&r) <= greedy);
        }
    }

    #[test]
    fn searched_paths_contract_to_the_reference((inputs, output, sizes) in network()) {
        let expr = expression(&inputs, &output);
        let shapes: Vec<Vec<usize>> = inputs.iter().map(|l| l.iter().map(|&c| sizes[c as usize]).collect()).collect();
        let ops: Vec<einsum::Tensor<f64>> =
            shapes.iter().enumerate().map(|(i, s)| crate::network::tensor(s.clone(), i as u64)).collect();
        let refs: Vec<&einsum::Tensor<f64>> = ops.iter().collect();
        let want = einsum::reference_einsum(&expr, &refs).unwrap();
        let choices = [PathChoice::Optimal, PathChoice::Dp, PathChoice::Auto, PathChoice::RandomGreedy { trials: 4, seed: 1 }];
        for choice in choices {
            let e = Einsum::<f64>::new(&expr, &shapes, choice.clone()).unwrap();
            crate::network::assert_close(&e.eval(&refs).unwrap(), &want, &format!("{expr} {choice:?}"));
            // The network's own count agrees with the search's cost model.
            prop_assert_eq!(e.multiply_adds(), path_cost(&inputs, &output, &sizes, e.path()).unwrap());
        }
    }
}

#[test]
fn searches_beat_greedy_on_a_matrix_chain() {
    // Greedy picks by memory removed; on this chain it is far from the best order.
    let dims = [10usize, 100, 5, 80, 3, 60, 2, 90, 4];
    let inputs: Vec<Vec<u32>> = (0..8).map(|i| vec![i, i + 1]).collect();
    let output = [0, 8];
    let cost = |p: &ContractionPath| path_cost(&inputs, &output, &dims, p).unwrap();
    let greedy = cost(&ContractionPath::greedy(&inputs, &output, |c| dims[c as usize]));
    let exact = cost(&optimal(&inputs, &output, &dims).unwrap());
    let connected = cost(&dp(&inputs, &output, &dims, DP_MAX_PAIRS).unwrap());
    assert_eq!(exact, connected, "a chain's best path has no outer product");
    assert!(exact <= greedy);
    // Too many operands for the exact search; a tiny work bound stops dp.
    let many: Vec<Vec<u32>> = (0..20).map(|i| vec![i, i + 1]).collect();
    assert!(optimal(&many, &[], &[2; 21]).is_none());
    assert!(dp(&many, &[], &[2; 21], 10).is_none());
    let p = einsum::search::find_path(PathChoice::Optimal, &many, &[], &[2; 21]).unwrap();
    assert!(p.validate(20).is_ok());
}

/// A `k`×`k` grid of operands, one label per edge (labels `0..k^4`, sizes 2): a network on
/// which `dp` examines far more than one check interval of pairs.
fn grid(k: u32) -> (Vec<Vec<u32>>, Vec<usize>) {
    let n = k * k;
    let edge = |a: u32, b: u32| a.min(b) * n + a.max(b);
    let ops = (0..n)
        .map(|v| {
            [v.wrapping_sub(k), v + k, v.wrapping_sub(1), v + 1]
                .into_iter()
                .filter(|&w| w < n && (w / k == v / k || w % k == v % k))
                .map(|w| edge(v, w))
                .collect()
        })
        .collect();
    (ops, vec![2; (n * n) as usize])
}

#[test]
fn every_search_stops_when_told() {
    // The exact search on 16 operands in a ring, with a dangling label each (3^16 / 2
    // splits); dp and auto on an 8x8 grid; random-greedy between its trials.
    let ring: Vec<Vec<u32>> = (0..16).map(|i| vec![i, (i + 1) % 16, 16 + i]).collect();
    let ring_sizes = vec![3; 32];
    let (grid, grid_sizes) = grid(8);
    let searches = [
        (PathChoice::Optimal, &ring, &ring_sizes),
        (PathChoice::Dp, &grid, &grid_sizes),
        (PathChoice::Auto, &grid, &grid_sizes),
        (PathChoice::RandomGreedy { trials: 8, seed: 3 }, &ring, &ring_sizes),
    ];
    for (choice, inputs, sizes) in searches {
        let asked = std::cell::Cell::new(0);
        let stop = || {
            asked.set(asked.get() + 1);
            true
        };
        let got = find_path_until(choice.clone(), inputs, &[], sizes, &stop);
        assert_eq!(got, Err(EinsumError::Interrupted), "{choice:?}");
        assert_eq!(asked.get(), 1, "{choice:?}: asked again after being told to stop");
    }
    // Never stopped: the path `find_path` gives, having asked.
    for (choice, inputs, sizes) in [
        (PathChoice::Optimal, &ring, &ring_sizes),
        (PathChoice::RandomGreedy { trials: 8, seed: 3 }, &ring, &ring_sizes),
    ] {
        let asked = std::cell::Cell::new(0);
        let never = || {
            asked.set(asked.get() + 1);
            false
        };
        let full = find_path_until(choice.clone(), inputs, &[], sizes, &never).unwrap();
        assert!(asked.get() >= 1, "{choice:?} never asked");
        assert_eq!(full, einsum::search::find_path(choice.clone(), inputs, &[], sizes).unwrap(), "{choice:?}");
    }
    // The greedy finder and explicit paths do not search, so they never ask.
    for choice in [PathChoice::Greedy, PathChoice::Explicit(ContractionPath::new(vec![[0, 1]; 63]))] {
        assert!(find_path_until(choice, &grid, &[], &grid_sizes, &|| panic!("asked")).is_ok());
    }
}
