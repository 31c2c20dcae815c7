//! Plans re-associated for two threads (`Plan::balanced_for`): the same contraction as
//! the reference to rounding, at most 1/32 more multiply-adds, no intermediate larger
//! than the original's largest, on random networks with random paths and on chains
//! contracted one operand at a time (the shape it is for); uniform chains always balance.

use einsum::{ContractionPath, Einsum, MemoryLimit, PathChoice, Plan, Tensor, reference_einsum};
use proptest::prelude::*;

use crate::network::{assert_close, network, tensor};

/// The largest intermediate of a plan's path (elements).
fn largest(p: &Plan) -> f64 {
    let f = p.followed();
    let sizes = &p.network().sizes;
    f.steps().iter().map(|s| f.labels(s.result).iter().map(|&c| sizes[c as usize] as f64).product()).fold(0.0, f64::max)
}

/// Checks `p.balanced_for(threads)` when there is one, against the original plan's
/// evaluation and, when `reference`, against the reference; says whether there was one.
fn check_balanced(expr: &str, shapes: &[Vec<usize>], path: Vec<[usize; 2]>, threads: usize, reference: bool) -> bool {
    let p = Plan::new(expr, shapes, PathChoice::Explicit(ContractionPath::new(path)), MemoryLimit::default()).unwrap();
    assert!(p.balanced_for(1).is_none(), "{expr}: one thread keeps the path");
    let Some(b) = p.balanced_for(threads) else { return false };
    assert!(
        b.multiply_adds() <= p.multiply_adds() * (1.0 + 1.0 / 32.0),
        "{expr}: {} > {}",
        b.multiply_adds(),
        p.multiply_adds()
    );
    assert!(largest(&b) <= largest(&p), "{expr}: an intermediate of {} > {}", largest(&b), largest(&p));
    let ops: Vec<Tensor<f64>> = shapes.iter().enumerate().map(|(i, s)| tensor(s.clone(), i as u64)).collect();
    let refs: Vec<&Tensor<f64>> = ops.iter().collect();
    let got = Einsum::<f64>::from_plan(b).unwrap().eval(&refs).unwrap();
    assert_close(&got, &Einsum::<f64>::from_plan(p).unwrap().eval(&refs).unwrap(), expr);
    if reference {
        assert_close(&got, &reference_einsum(expr, &refs).unwrap(), expr);
    }
    true
}

/// A chain of `n` operands `x_i p_i x_(i+1)` (bond sizes `bonds`, a physical label `p_i`
/// of size `phys[i]` kept in the output when `open`), and a path that starts at operand
/// `start` and grows the running result by a neighbour at either end (`left[s]`), as an
/// MPS contraction or a matrix chain's left-to-right order does.
fn chain(
    bonds: &[usize],
    phys: &[usize],
    open: bool,
    start: usize,
    left: &[bool],
) -> (String, Vec<Vec<usize>>, Vec<[usize; 2]>) {
    let n = bonds.len() - 1;
    let letter = |i: usize| char::from_u32(0xC0 + i as u32).unwrap();
    let (mut ins, mut shapes, mut out) = (Vec::new(), Vec::new(), String::new());
    for i in 0..n {
        let (a, p, b) = (letter(2 * i), letter(2 * i + 1), letter(2 * i + 2));
        if phys[i] > 1 {
            ins.push(format!("{a}{p}{b}"));
            shapes.push(vec![bonds[i], phys[i], bonds[i + 1]]);
            if open {
                out.push(p);
            }
        } else {
            ins.push(format!("{a}{b}"));
            shapes.push(vec![bonds[i], bonds[i + 1]]);
        }
    }
    let expr = format!("{}->{out}", ins.join(","));
    // The live list as operand runs: the running result (last, once made) covers lo..hi.
    let start = start % n;
    let mut live: Vec<usize> = (0..n).collect();
    let (mut lo, mut hi) = (start, start + 1);
    let mut path = Vec::new();
    let mut acc = start; // position of the running result while it is an input
    let mut made = false;
    for &l in left.iter().take(n - 1) {
        let take_left = (l && lo > 0) || hi == n;
        let other = if take_left { lo - 1 } else { hi };
        let i = if made { live.len() - 1 } else { acc };
        let j = live.iter().position(|&x| x == other).unwrap();
        path.push([i, j]);
        live.remove(i.max(j));
        live.remove(i.min(j));
        live.push(usize::MAX);
        made = true;
        if take_left {
            lo -= 1
        } else {
            hi += 1
        }
        acc = live.len() - 1;
    }
    (expr, shapes, path)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn balanced_random_networks_match_reference((expr, shapes, path) in network(), threads in 2usize..=4) {
        check_balanced(&expr, &shapes, path, threads, true);
    }

    #[test]
    fn balanced_chains_match_reference(
        bonds in proptest::collection::vec(1usize..=2, 6..=11),
        phys in proptest::collection::vec(1usize..=2, 10),
        open in proptest::bool::ANY,
        start in 0usize..10,
        left in proptest::collection::vec(proptest::bool::ANY, 10),
    ) {
        // Small enough for the reference's loop over every label assignment.
        let (expr, shapes, path) = chain(&bonds, &phys, open, start, &left);
        check_balanced(&expr, &shapes, path, 2, true);
    }
}

#[test]
fn uniform_chains_contracted_left_to_right_balance() {
    for n in [8, 12, 25] {
        let bonds = vec![6; n + 1];
        for (phys, open) in [(1, false), (2, false), (2, n <= 12)] {
            let (expr, shapes, path) = chain(&bonds, &vec![phys; n], open, 0, &[false; 24]);
            let balanced = check_balanced(&expr, &shapes, path, 2, false);
            assert!(balanced, "{n} operands, physical {phys}, open {open}");
        }
    }
}

/// A chain of matrices contracted left to right: `size`-square, `n` of them.
fn matrix_chain(n: usize, size: usize) -> Plan {
    let letters: Vec<char> = ('a'..='z').collect();
    let inputs: Vec<String> = (0..n).map(|i| format!("{}{}", letters[i], letters[i + 1])).collect();
    let expr = format!("{}->{}{}", inputs.join(","), letters[0], letters[n]);
    let mut steps = vec![[0, 1]];
    steps.extend((2..n).rev().map(|live| [live - 1, 0]));
    let path = PathChoice::Explicit(ContractionPath::new(steps));
    Plan::new(&expr, &vec![vec![size, size]; n], path, MemoryLimit::default()).unwrap()
}

#[test]
fn chains_of_steps_that_split_keep_their_path() {
    // Each step of 128³ multiply-adds splits over the threads by itself: re-associating
    // the chain would gain nothing and change its order of sums.
    assert!(matrix_chain(8, 128).balanced_for(2).is_none());
    // The same chain of 8 × 8 matrices (steps too small to split) does balance.
    let small = matrix_chain(8, 8);
    let b = small.balanced_for(2).expect("a chain of small steps balances");
    assert_ne!(b.path(), small.path());
}
