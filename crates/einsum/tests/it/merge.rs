//! Runs of small element-wise factors multiplied together first (`Plan::with_factors_merged`,
//! which `Einsum` applies): on random graphical-model-like networks (a carrier tensor that
//! absorbs `3 × 3` and `3`-element factors one at a time, then meets a tensor of all its
//! labels), the merged plan has no more multiply-adds than the original, and the value
//! and every gradient equal the reference's (exact differences, `gradients.rs`), real and
//! complex.

use einsum::{ContractionPath, MemoryLimit, PathChoice, Plan, c64};
use proptest::prelude::*;

use crate::gradients::value_and_gradients_on;

/// The expression, shapes and absorbing path of a carrier of `n` labels of size 3, the
/// factors `factors` (one or two of its labels each), and a last tensor of all its labels
/// in reverse order; the output keeps the carrier's first label when `open`.
fn carrier_network(n: usize, factors: &[Vec<usize>], open: bool) -> (String, Vec<Vec<usize>>, Vec<[usize; 2]>) {
    let letter = |i: usize| char::from(b'a' + i as u8);
    let carrier: String = (0..n).map(letter).collect();
    let mut terms = vec![carrier.clone()];
    terms.extend(factors.iter().map(|f| f.iter().map(|&i| letter(i)).collect::<String>()));
    terms.push(carrier.chars().rev().collect());
    let out = if open { "a" } else { "" };
    let shapes: Vec<Vec<usize>> = terms.iter().map(|t| vec![3; t.len()]).collect();
    // The carrier absorbs each factor in turn; its result goes to the end of the list.
    let mut path = vec![[0, 1]];
    let mut live = terms.len() - 1;
    for _ in 1..factors.len() {
        path.push([0, live - 1]);
        live -= 1;
    }
    path.push([0, 1]);
    (format!("{}->{out}", terms.join(",")), shapes, path)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn merged_runs_equal_the_reference(
        n in 7usize..=8,
        factors in proptest::collection::vec(proptest::collection::vec(0usize..8, 1..=2), 2..=5),
        open in any::<bool>(),
        complex in any::<bool>(),
    ) {
        let factors: Vec<Vec<usize>> = factors
            .into_iter()
            .map(|f| {
                let mut f: Vec<usize> = f.into_iter().map(|i| i % n).collect();
                f.dedup();
                f
            })
            .collect();
        let (expr, shapes, path) = carrier_network(n, &factors, open);
        let choice = PathChoice::Explicit(ContractionPath::new(path));
        let p = Plan::new(&expr, &shapes, choice.clone(), MemoryLimit::default()).unwrap();
        if let Some(m) = p.with_factors_merged() {
            prop_assert!(m.multiply_adds() <= p.multiply_adds(), "{}: {} > {}", expr, m.multiply_adds(), p.multiply_adds());
            prop_assert!(m.steps().len() == p.steps().len());
        }
        if complex {
            value_and_gradients_on::<c64>(&expr, &shapes, choice);
        } else {
            value_and_gradients_on::<f64>(&expr, &shapes, choice);
        }
    }
}

/// Factors that share labels merge: `ab, bc, ac` on a carrier of `3^8` become one product
/// of `3^3` entries (two steps among the factors, one over the carrier).
#[test]
fn factors_sharing_labels_merge() {
    let (expr, shapes, path) = carrier_network(8, &[vec![0, 1], vec![1, 2], vec![0, 2]], false);
    let p =
        Plan::new(&expr, &shapes, PathChoice::Explicit(ContractionPath::new(path)), MemoryLimit::default()).unwrap();
    let m = p.with_factors_merged().expect("a run of three factors");
    let f = m.followed();
    let widest: Vec<usize> =
        f.steps().iter().map(|s| s.operands.iter().map(|&o| f.labels(o).len()).max().unwrap()).collect();
    assert_eq!(widest, vec![2, 3, 8, 8]);
    value_and_gradients_on::<f64>(&expr, &shapes, PathChoice::Explicit(m.path().clone()));
}

/// A scalar factor (no labels) in a run, and a run on a carrier with a label of size 0:
/// the review's edge cases. Both plans merge or not as they may; the value and every
/// gradient equal the reference's, and a size-0 carrier gives zeros without an error.
#[test]
fn scalar_factors_and_empty_labels() {
    let shapes = vec![vec![3; 8], vec![], vec![3, 3], vec![3; 8]];
    let path = PathChoice::Explicit(ContractionPath::new(vec![[0, 1], [0, 2], [0, 1]]));
    let p = Plan::new("abcdefgh,,ab,hgfedcba->", &shapes, path.clone(), MemoryLimit::default()).unwrap();
    assert!(p.with_factors_merged().is_some(), "the scalar and `ab` are one run");
    value_and_gradients_on::<f64>("abcdefgh,,ab,hgfedcba->", &shapes, path.clone());

    let mut empty = shapes.clone();
    empty[0][0] = 0;
    empty[2][0] = 0;
    empty[3][7] = 0;
    let e = einsum::Einsum::<f64>::new("abcdefgh,,ab,hgfedcba->a", &empty, path).unwrap();
    let x: Vec<einsum::Tensor<f64>> =
        empty.iter().map(|s| einsum::Tensor::from_fn(s.clone(), |i| 1.0 + i.len() as f64).unwrap()).collect();
    let r = e.eval(&x.iter().collect::<Vec<_>>()).unwrap();
    assert_eq!(r.shape(), &[0]);
    let g = e.gradient(&[0, 1, 2, 3]).unwrap();
    let (_, grads) = g.eval_with_value(&x.iter().collect::<Vec<_>>(), &einsum::Tensor::ones(vec![0]).unwrap()).unwrap();
    for (gi, s) in grads.iter().zip(&empty) {
        assert_eq!(gi.shape(), &s[..]);
        assert!(gi.data().iter().all(|&v| v == 0.0));
    }
}
