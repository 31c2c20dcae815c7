//! Hessian-vector products of sliced contractions: random networks sliced on random
//! labels against the unsliced HVP and against an exact difference of the gradient (the
//! network is linear in each operand, so moving operand `j` alone by `v_j` moves every
//! other operand's gradient by exactly the HVP along `v_j`, and the HVP is linear in the
//! directions); any split of the slice range adds up to the whole; bad arguments and a
//! memory limit too small are error values.

use einsum::{
    ContractionPath, Einsum, EinsumError, EinsumOptions, Elem, MemoryLimit, PathChoice, SlicedEinsum, Slicing, Tensor,
    c64,
};
use proptest::prelude::*;

use crate::network::{assert_close, network, tensor};

fn refs<T: Elem>(t: &[Tensor<T>]) -> Vec<&Tensor<T>> {
    t.iter().collect()
}

/// `Σ_j (∇(x with x_j + v_j) − ∇(x))`: the HVP along `v`, exactly up to rounding.
fn exact_difference<T: Elem>(e: &Einsum<T>, x: &[Tensor<T>], c: &Tensor<T>, v: &[Tensor<T>]) -> Vec<Tensor<T>> {
    let all: Vec<usize> = (0..x.len()).collect();
    let g = e.gradient(&all).unwrap();
    let at_x = g.eval(&refs(x), c).unwrap();
    let mut sum: Vec<Tensor<T>> = x.iter().map(|t| Tensor::zeros(t.shape().to_vec()).unwrap()).collect();
    for j in 0..x.len() {
        let moved = x[j].zip_with(&v[j], |a, b| a + b).unwrap();
        let mut xs = refs(x);
        xs[j] = &moved;
        let g_j = g.eval(&xs, c).unwrap();
        for i in 0..x.len() {
            let d = g_j[i].zip_with(&at_x[i], |a, b| a - b).unwrap();
            sum[i] = sum[i].zip_with(&d, |a, b| a + b).unwrap();
        }
    }
    sum
}

fn sliced_hvp_matches<T: Elem>(expr: &str, shapes: &[Vec<usize>], path: PathChoice, labels: Vec<char>, split: u64) {
    let what = format!("{expr} sliced on {labels:?}");
    let x: Vec<Tensor<T>> = shapes.iter().enumerate().map(|(i, s)| tensor(s.clone(), 1 + i as u64)).collect();
    let v: Vec<Tensor<T>> = shapes.iter().enumerate().map(|(i, s)| tensor(s.clone(), 40 + i as u64)).collect();
    let plain = Einsum::<T>::new(expr, shapes, path.clone()).unwrap();
    let c = tensor::<T>(plain.output_shape().to_vec(), 99);
    let all: Vec<usize> = (0..shapes.len()).collect();
    let want = plain.hvp(&all).unwrap().eval(&refs(&x), &c, &refs(&v)).unwrap();
    let exact = exact_difference(&plain, &x, &c, &v);
    let s = SlicedEinsum::<T>::new(expr, shapes, path, &EinsumOptions::default(), &Slicing::Labels(labels))
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let h = s.hvp(&all).unwrap();
    assert_eq!(h.wrt(), all.as_slice());
    let got = h.eval(&refs(&x), &c, &refs(&v)).unwrap();
    let n = s.plan().n_slices();
    let m = split % (n + 1);
    let a = h.eval_slices(&refs(&x), &c, &refs(&v), 0..m).unwrap();
    let b = h.eval_slices(&refs(&x), &c, &refs(&v), m..n).unwrap();
    let mut calls = 0;
    let with = h.eval_with_progress(&refs(&x), &c, &refs(&v), |k| calls = k).unwrap();
    assert_eq!(calls, n, "{what}: progress");
    for i in 0..shapes.len() {
        assert_close(&got[i], &want[i], &format!("{what}: HVP {i} against the unsliced one"));
        assert_close(&got[i], &exact[i], &format!("{what}: HVP {i} against the exact difference"));
        let sum = a[i].zip_with(&b[i], |p, q| p + q).unwrap();
        assert_close(&sum, &want[i], &format!("{what}: HVP {i} split at {m}"));
        assert_eq!(with[i], got[i], "{what}: with progress");
    }
    // A subset of the operands, in another order: the same components.
    let wrt: Vec<usize> = all.iter().rev().step_by(2).copied().collect();
    let dirs: Vec<&Tensor<T>> = wrt.iter().map(|&i| &v[i]).collect();
    let part = s.hvp(&wrt).unwrap().eval(&refs(&x), &c, &dirs).unwrap();
    let plain_part = plain.hvp(&wrt).unwrap().eval(&refs(&x), &c, &dirs).unwrap();
    for (p, q) in part.iter().zip(&plain_part) {
        assert_close(p, q, &format!("{what}: HVP with respect to {wrt:?}"));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn random_networks_sliced_on_random_labels_have_the_unsliced_hvp(
        (expr, shapes, path) in network(),
        pick in proptest::collection::vec(proptest::bool::ANY, 6),
        split in 0u64..1000,
    ) {
        let mut labels: Vec<char> = expr.split("->").next().unwrap().chars().filter(|c| c.is_alphabetic()).collect();
        labels.sort_unstable();
        labels.dedup();
        let labels: Vec<char> = labels.into_iter().zip(&pick).filter(|(_, p)| **p).map(|(c, _)| c).collect();
        sliced_hvp_matches::<f64>(&expr, &shapes, PathChoice::Greedy, labels.clone(), split);
        sliced_hvp_matches::<c64>(&expr, &shapes, PathChoice::Explicit(ContractionPath::new(path)), labels, split);
    }

    #[test]
    fn plans_for_the_hvp_fit_the_limit_or_say_why((expr, shapes, _) in network(), fraction in 0.0f64..1.5) {
        let unlimited = EinsumOptions::default().memory_limit(MemoryLimit::Unlimited);
        let whole = SlicedEinsum::<f64>::new(&expr, &shapes, PathChoice::Greedy, &unlimited, &Slicing::None).unwrap();
        let limit = (whole.plan().hvp_peak_bytes() as f64 * fraction) as u64;
        let options = EinsumOptions::default().memory_limit(MemoryLimit::Bytes(limit));
        match SlicedEinsum::<f64>::new(&expr, &shapes, PathChoice::Greedy, &options, &Slicing::MemoryHvp) {
            Ok(s) => {
                let p = s.plan();
                prop_assert!(p.hvp_peak_bytes() <= limit, "{:?} over {}", p, limit);
                prop_assert!(p.peak_bytes() <= p.hvp_peak_bytes() && p.gradient_peak_bytes() <= p.hvp_peak_bytes());
                let x: Vec<Tensor<f64>> = shapes.iter().enumerate().map(|(i, s)| tensor(s.clone(), 3 + i as u64)).collect();
                let all: Vec<usize> = (0..shapes.len()).collect();
                let c = tensor::<f64>(s.output_shape().to_vec(), 7);
                let got = s.hvp(&all).unwrap().eval(&refs(&x), &c, &refs(&x)).unwrap();
                let want = whole.hvp(&all).unwrap().eval(&refs(&x), &c, &refs(&x)).unwrap();
                for (g, w) in got.iter().zip(&want) {
                    assert_close(g, w, &expr);
                }
            }
            Err(EinsumError::Memory { .. }) => {}
            Err(e) => prop_assert!(false, "{}: {}", expr, e),
        }
    }
}

#[test]
fn bad_arguments_and_small_limits_are_errors() {
    let shapes = [vec![3, 4], vec![4, 5]];
    let s = SlicedEinsum::<f64>::new(
        "ij,jk->ik",
        &shapes,
        PathChoice::Greedy,
        &EinsumOptions::default(),
        &Slicing::Labels(vec!['j', 'i']),
    )
    .unwrap();
    let (a, b) = (tensor::<f64>(vec![3, 4], 1), tensor::<f64>(vec![4, 5], 2));
    let c = tensor::<f64>(vec![3, 5], 3);
    let h = s.hvp(&[0, 1]).unwrap();
    let msg = |r: Result<Vec<Tensor<f64>>, EinsumError>| match r {
        Err(e @ EinsumError::Shape(_)) | Err(e @ EinsumError::Slice(_)) => e.to_string(),
        other => panic!("{other:?}"),
    };
    assert!(msg(h.eval(&[&a, &b], &c, &[&a])).contains("1 tensors given, 2 expected"));
    assert!(msg(h.eval(&[&a, &b], &c, &[&b, &a])).contains("direction 0"));
    assert!(msg(h.eval(&[&a, &b], &a, &[&a, &b])).contains("cotangent"));
    assert!(msg(h.eval(&[&b, &a], &c, &[&a, &b])).contains("operand 0"));
    assert!(msg(h.eval_slices(&[&a, &b], &c, &[&a, &b], 0..13)).contains("not within 0..12"));
    assert!(matches!(s.hvp(&[2]), Err(EinsumError::Shape(_))));
    assert!(matches!(s.hvp(&[0, 0]), Err(EinsumError::Shape(_))));

    // A limit the gradient's slicing meets but the HVP's does not: the HVP is refused,
    // naming how to plan for it; planned for the HVP, it fits.
    let shapes = vec![vec![64, 4], vec![4, 64], vec![64, 4]];
    let path = PathChoice::Explicit(ContractionPath::new(vec![[0, 1], [0, 1]]));
    let unlimited = SlicedEinsum::<f64>::new(
        "ij,jk,kl->il",
        &shapes,
        path.clone(),
        &EinsumOptions::default().memory_limit(MemoryLimit::Unlimited),
        &Slicing::Labels(vec!['i']),
    )
    .unwrap();
    let p = unlimited.plan();
    assert!(p.hvp_peak_bytes() > p.gradient_peak_bytes(), "{p:?}");
    let limit = (p.gradient_peak_bytes() + p.hvp_peak_bytes()) / 2;
    let options = EinsumOptions::default().memory_limit(MemoryLimit::Bytes(limit));
    let grad_planned =
        SlicedEinsum::<f64>::new("ij,jk,kl->il", &shapes, path.clone(), &options, &Slicing::Labels(vec!['i'])).unwrap();
    assert!(grad_planned.gradient(&[0, 1, 2]).is_ok());
    match grad_planned.hvp(&[0, 1, 2]) {
        Err(EinsumError::Memory { what, .. }) => assert!(what.contains("Slicing::MemoryHvp"), "{what}"),
        other => panic!("{:?}", other.err()),
    }
    let hvp_planned = SlicedEinsum::<f64>::new("ij,jk,kl->il", &shapes, path, &options, &Slicing::MemoryHvp).unwrap();
    assert!(hvp_planned.plan().hvp_peak_bytes() <= limit, "{:?}", hvp_planned.plan());
    assert!(hvp_planned.hvp(&[0, 1, 2]).is_ok());
}
