//! [`Einsum::gradient_of_sum`]: the gradient of `c·Σ f` with a scalar cotangent `c`,
//! against the full gradient with a cotangent of the output's shape filled with `c` (random
//! networks with open outputs, every `wrt` subset, real and complex, one thread and a pool
//! of two), its value against `reference_einsum`, exact differences (a network is linear
//! in each operand, so a step of 1 is exact: `docs/SPEC.md` §7), and its errors. Every
//! way of [`SumGradient`] is checked alike: over the open tree, along the closed network's
//! own path, and the cheaper of the two.

use einsum::{
    ContractionPath, Einsum, EinsumError, EinsumOptions, Elem, MemoryLimit, PathChoice, SlicedEinsum, Slicing,
    SumGradient, Tensor, c64, reference_einsum,
};
use proptest::prelude::*;

use crate::network::{assert_close, network, tensor};

fn refs<T: Elem>(v: &[Tensor<T>]) -> Vec<&Tensor<T>> {
    v.iter().collect()
}

fn filled<T: Elem>(shape: &[usize], c: T) -> Tensor<T> {
    Tensor::from_fn(shape.to_vec(), |_| c).unwrap()
}

/// The `wrt` lists of `n` operands named by the bits of `mask` (every subset as `mask`
/// runs over `0..2^n`).
fn subset(n: usize, mask: usize) -> Vec<usize> {
    (0..n).filter(|i| mask >> i & 1 == 1).collect()
}

const WAYS: [SumGradient; 3] = [SumGradient::Cheaper, SumGradient::OpenTree, SumGradient::ClosedNetwork];

/// [`check_by`] for every way.
fn check<T: Elem>(e: &Einsum<T>, x: &[Tensor<T>], wrt: &[usize], c: T, expr: &str) {
    for way in WAYS {
        check_by(e, x, wrt, c, &format!("{expr} ({way:?})"), way);
    }
}

/// `e.gradient_of_sum_by(wrt, way)` with `c` against `e.gradient(wrt)` with `c`
/// everywhere, every evaluation form, on the calling thread and inside a pool of two.
fn check_by<T: Elem>(e: &Einsum<T>, x: &[Tensor<T>], wrt: &[usize], c: T, expr: &str, way: SumGradient) {
    let x = refs(x);
    let want_value = reference_einsum(expr.split(' ').next().unwrap(), &x).unwrap();
    let full = e.gradient(wrt).unwrap();
    let sum = e.gradient_of_sum_by(wrt, way).unwrap();
    assert_eq!(sum.cotangent_shape(), &[] as &[usize], "{expr}");
    let ct = filled(e.output_shape(), c);
    let cs = Tensor::scalar(c);
    let (v0, g0) = full.eval_with_value(&x, &ct).unwrap();
    let (v1, g1) = sum.eval_with_value(&x, &cs).unwrap();
    assert_close(&v1, &want_value, &format!("{expr}: value"));
    assert_eq!(v1, v0, "{expr}: the value is the forward graph's");
    let g2 = sum.eval(&x, &cs).unwrap();
    let (v3, g3, ranges) = sum.eval_with_value_and_range(&x, &cs).unwrap();
    assert_eq!(v3, v1, "{expr}");
    assert_eq!(ranges.len(), 1 + wrt.len(), "{expr}");
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    let (v4, g4) = pool.install(|| sum.eval_with_value(&x, &cs)).unwrap();
    let (v5, g5) = sum.eval_with_value_parallel(Some(&pool), &x, &cs).unwrap();
    assert_eq!((&v4, &v5), (&v1, &v1), "{expr}: two threads");
    for (k, &i) in wrt.iter().enumerate() {
        let what = format!("{expr}: gradient of operand {i} (wrt {wrt:?})");
        for g in [&g1, &g2, &g3, &g4, &g5] {
            assert_close(&g[k], &g0[k], &what);
        }
        // Complex: the largest part's modulus, within a factor √2 (`RangeScan::of_complex`).
        let (got, want) = (ranges[1 + k].largest(), g3[k].max_abs());
        assert!(got <= want && got * std::f64::consts::SQRT_2 >= want * (1.0 - 1e-15), "{what}: its range");
        if !T::IS_COMPLEX {
            assert_eq!(got, want, "{what}: its range");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn sum_gradients_equal_full_gradients_of_a_constant_cotangent(
        (expr, shapes, path) in network(),
        mask in 0usize..32,
        (re, im) in (-2.0f64..2.0, -2.0f64..2.0),
    ) {
        let n = shapes.len();
        let wrt = subset(n, mask % (1 << n));
        let e = Einsum::<f64>::new(&expr, &shapes, PathChoice::Greedy).unwrap();
        let x: Vec<Tensor<f64>> = shapes.iter().enumerate().map(|(i, s)| tensor(s.clone(), i as u64)).collect();
        check(&e, &x, &wrt, re, &expr);
        let e = Einsum::<c64>::new(&expr, &shapes, PathChoice::Explicit(ContractionPath::new(path))).unwrap();
        let x: Vec<Tensor<c64>> = shapes.iter().enumerate().map(|(i, s)| tensor(s.clone(), i as u64)).collect();
        check(&e, &x, &wrt, c64::new(re, im), &expr);
    }
}

/// `⟨c·1, f(x + tᵢ eᵢ) - f(x)⟩ = ⟨∇ᵢ, tᵢ⟩` exactly (`f` is linear in each operand), for
/// each operand, on open outputs whose last step sums labels of one operand alone, shares
/// batch labels, or is an outer product, and on one-operand networks.
fn exact_differences<T: Elem>(c: T) {
    let cases: &[(&str, &[&[usize]])] = &[
        ("abcd,dbe->cae", &[&[2, 3, 2, 4], &[4, 3, 2]]),
        ("ab,bc,cd->ad", &[&[2, 3], &[3, 4], &[4, 2]]),
        ("ab,cd->abcd", &[&[2, 3], &[2, 2]]),
        ("bij,bjk->bik", &[&[3, 2, 4], &[3, 4, 2]]),
        ("ii,ij,jk->k", &[&[3, 3], &[3, 2], &[2, 2]]),
        ("abc,cd,ef->ad", &[&[2, 3, 2], &[2, 3], &[2, 3]]),
        ("ab->ba", &[&[2, 3]]),
        ("ab->ab", &[&[2, 3]]),
        ("abc->b", &[&[2, 3, 4]]),
        ("ab,bc->", &[&[2, 3], &[3, 4]]),
        // A hyper label (`b` in three operands and the output) and a chain.
        ("ab,bc,bd,de->be", &[&[2, 3], &[3, 2], &[3, 4], &[4, 2]]),
        ("ab,bc,cd,de,ef->af", &[&[3, 4], &[4, 5], &[5, 4], &[4, 3], &[3, 5]]),
    ];
    for &(expr, shapes) in cases {
        let shapes: Vec<Vec<usize>> = shapes.iter().map(|s| s.to_vec()).collect();
        let e = Einsum::<T>::new(expr, &shapes, PathChoice::Greedy).unwrap();
        let x: Vec<Tensor<T>> = shapes.iter().enumerate().map(|(i, s)| tensor(s.clone(), 10 + i as u64)).collect();
        let all: Vec<usize> = (0..x.len()).collect();
        for way in WAYS {
            exact_difference_by(&e, &x, &all, c, &format!("{expr} ({way:?})"), way);
        }
    }
}

/// [`exact_differences`] of one network by one way.
fn exact_difference_by<T: Elem>(e: &Einsum<T>, x: &[Tensor<T>], all: &[usize], c: T, expr: &str, way: SumGradient) {
    let (f0, g) = e.gradient_of_sum_by(all, way).unwrap().eval_with_value(&refs(x), &Tensor::scalar(c)).unwrap();
    let ones = filled(f0.shape(), c);
    for i in 0..x.len() {
        let t = tensor::<T>(x[i].shape().to_vec(), 50 + i as u64);
        let mut xp = x.to_vec();
        xp[i] = x[i].zip_with(&t, |a, b| a + b).unwrap();
        let df = e.eval(&refs(&xp)).unwrap().zip_with(&f0, |a, b| a - b).unwrap();
        let (lhs, rhs) = (ones.inner(&df).unwrap(), g[i].inner(&t).unwrap());
        let scale = ones.norm() * df.norm() + g[i].norm() * t.norm();
        assert!((lhs - rhs).abs() <= 1e-12 * (1.0 + scale), "{expr} operand {i}: {lhs:e} vs {rhs:e}");
    }
}

#[test]
fn sum_gradients_by_exact_differences() {
    exact_differences::<f64>(1.5);
    exact_differences::<c64>(c64::new(0.5, -2.0));
}

#[test]
fn a_cotangent_of_the_wrong_shape_is_an_error() {
    let shapes = vec![vec![2, 3], vec![3, 4]];
    let e = Einsum::<f64>::new("ab,bc->ac", &shapes, PathChoice::Greedy).unwrap();
    let x = [tensor::<f64>(vec![2, 3], 0), tensor::<f64>(vec![3, 4], 1)];
    let g = e.gradient_of_sum(&[0, 1]).unwrap();
    let full = filled(&[2, 4], 1.0);
    let msg = g.eval_with_value(&refs(&x), &full).err().unwrap().to_string();
    assert!(msg.contains("cotangent 0 of `ab,bc->ac` has shape [2, 4], expected []"), "{msg}");
    assert!(g.eval(&refs(&x), &full).is_err());
    assert!(g.eval_with_value_and_range(&refs(&x), &full).is_err());
    // `wrt` is checked as the full gradient checks it.
    assert!(e.gradient_of_sum(&[2]).err().unwrap().to_string().contains("operand 2"));
    assert!(e.gradient_of_sum(&[0, 0]).err().unwrap().to_string().contains("listed twice"));
}

/// Sliced on an output label and on a summed one: every slice takes the scalar as it is,
/// and the sums over slices equal the full gradient of the constant cotangent.
#[test]
fn sliced_sum_gradients_equal_full_gradients() {
    let shapes = vec![vec![3, 4, 2], vec![4, 2, 5], vec![5, 3]];
    let expr = "ijk,jkl,lm->im";
    let x: Vec<Tensor<c64>> = shapes.iter().enumerate().map(|(i, s)| tensor(s.clone(), i as u64)).collect();
    let c = c64::new(0.75, 0.5);
    let plain = Einsum::<c64>::new(expr, &shapes, PathChoice::Greedy).unwrap();
    let (v0, g0) = plain.gradient(&[0, 1, 2]).unwrap().eval_with_value(&refs(&x), &filled(&[3, 3], c)).unwrap();
    for labels in [vec!['i'], vec!['j', 'm'], vec!['l']] {
        let s = SlicedEinsum::<c64>::new(
            expr,
            &shapes,
            PathChoice::Greedy,
            &EinsumOptions::default(),
            &Slicing::Labels(labels.clone()),
        )
        .unwrap();
        let g = s.gradient_of_sum(&[0, 1, 2]).unwrap();
        let (v, grads) = g.eval_slices_with_value(&refs(&x), &Tensor::scalar(c), 0..s.plan().n_slices()).unwrap();
        assert_close(&v, &v0, &format!("sliced on {labels:?}: value"));
        let sum_only = g.eval(&refs(&x), &Tensor::scalar(c)).unwrap();
        for k in 0..3 {
            assert_close(&grads[k], &g0[k], &format!("sliced on {labels:?}: gradient {k}"));
            assert_close(&sum_only[k], &g0[k], &format!("sliced on {labels:?}: gradient {k} alone"));
        }
        assert!(g.eval(&refs(&x), &filled(&[3, 3], c)).is_err(), "a full cotangent is the other gradient's");
    }
}

/// A last step whose left operand is summed in two stages (`abch->ah`, the innermost
/// labels past the stage span): against the full gradient, real and complex, one thread
/// and two.
#[test]
fn operands_summed_in_stages_give_the_full_gradient() {
    let (expr, shapes) = ("abch,hax->bcx", vec![vec![3, 20, 30, 8], vec![8, 3, 2]]);
    let e = Einsum::<f64>::new(expr, &shapes, PathChoice::Greedy).unwrap();
    let x: Vec<Tensor<f64>> = shapes.iter().enumerate().map(|(i, s)| tensor(s.clone(), i as u64)).collect();
    for wrt in [vec![0, 1], vec![0], vec![1]] {
        check(&e, &x, &wrt, 0.5, expr);
    }
    let e = Einsum::<c64>::new(expr, &shapes, PathChoice::Greedy).unwrap();
    let x: Vec<Tensor<c64>> = shapes.iter().enumerate().map(|(i, s)| tensor(s.clone(), i as u64)).collect();
    check(&e, &x, &[0, 1], c64::new(0.5, 1.5), expr);
}

/// The choice: a chain's closed network is matrix-vector products, so the cheaper way is
/// the closed one (its multiply-adds, not the open tree's); an element-wise product's
/// closed network saves nothing, so the cheaper way is the open tree's.
#[test]
fn the_cheaper_way_is_chosen() {
    let shapes = vec![vec![40, 40]; 4];
    let e = Einsum::<f64>::new("ab,bc,cd,de->ae", &shapes, PathChoice::Greedy).unwrap();
    let by = |way| e.gradient_of_sum_by(&[0, 1, 2, 3], way).unwrap().multiply_adds();
    let (cheaper, open, closed) = (by(SumGradient::Cheaper), by(SumGradient::OpenTree), by(SumGradient::ClosedNetwork));
    assert!(closed < 0.5 * open, "closed {closed:e}, open {open:e}");
    assert_eq!(cheaper, closed);
    assert!(cheaper < 1.2 * e.multiply_adds(), "value and gradients {cheaper:e}, forward {:e}", e.multiply_adds());
    let e = Einsum::<f64>::new("ab,ab->ab", &[vec![40, 40], vec![40, 40]], PathChoice::Greedy).unwrap();
    let by = |way| e.gradient_of_sum_by(&[0, 1], way).unwrap().multiply_adds();
    assert_eq!(by(SumGradient::Cheaper), by(SumGradient::OpenTree));
}

/// A memory limit that the open tree's reverse pass (the chain's matrix intermediates and
/// their cotangents) exceeds and the closed network's (vectors) does not: the cheaper way
/// is the one that fits, and forcing the open tree is the memory error.
#[test]
fn the_way_that_fits_the_memory_limit_is_taken() {
    let (expr, shapes) = ("ab,bc,cd->ad", vec![vec![30, 30]; 3]);
    let x: Vec<Tensor<f64>> = shapes.iter().enumerate().map(|(i, s)| tensor(s.clone(), i as u64)).collect();
    let unlimited = Einsum::<f64>::new(expr, &shapes, PathChoice::Greedy).unwrap();
    let (v0, g0) = unlimited.gradient(&[0, 1, 2]).unwrap().eval_with_value(&refs(&x), &filled(&[30, 30], 1.0)).unwrap();
    let options = EinsumOptions::default().memory_limit(MemoryLimit::Bytes(70_000));
    let e = Einsum::<f64>::with_options(expr, &shapes, PathChoice::Greedy, &options).unwrap();
    let open = e.gradient_of_sum_by(&[0, 1, 2], SumGradient::OpenTree);
    assert!(matches!(open, Err(EinsumError::Memory { .. })), "{:?}", open.err());
    let (v, g) = e.gradient_of_sum(&[0, 1, 2]).unwrap().eval_with_value(&refs(&x), &Tensor::scalar(1.0)).unwrap();
    assert_close(&v, &v0, "value");
    for k in 0..3 {
        assert_close(&g[k], &g0[k], &format!("gradient {k}"));
    }
    // Too little for either: the open tree's error.
    let options = EinsumOptions::default().memory_limit(MemoryLimit::Bytes(40_000));
    let e = Einsum::<f64>::with_options(expr, &shapes, PathChoice::Greedy, &options).unwrap();
    let msg = e.gradient_of_sum(&[0, 1, 2]).err().unwrap().to_string();
    assert!(msg.contains("the gradient of the sum"), "{msg}");
}

/// A sliced chain (on a label inside the chain and on an output label): each slice's
/// gradient of the sum, by each way (the open tree, the closed network, the cheaper),
/// summed over the slices, equals the full gradient of the constant cotangent.
#[test]
fn sliced_chains_sum_gradients_equal_full_gradients() {
    let shapes = vec![vec![6, 5], vec![5, 7], vec![7, 4], vec![4, 6]];
    let expr = "ab,bc,cd,de->ae";
    let x: Vec<Tensor<c64>> = shapes.iter().enumerate().map(|(i, s)| tensor(s.clone(), i as u64)).collect();
    let c = c64::new(-0.5, 1.25);
    let plain = Einsum::<c64>::new(expr, &shapes, PathChoice::Greedy).unwrap();
    let (v0, g0) = plain.gradient(&[0, 1, 2, 3]).unwrap().eval_with_value(&refs(&x), &filled(&[6, 6], c)).unwrap();
    for labels in [vec!['c'], vec!['a', 'd']] {
        let s = SlicedEinsum::<c64>::new(
            expr,
            &shapes,
            PathChoice::Greedy,
            &EinsumOptions::default(),
            &Slicing::Labels(labels.clone()),
        )
        .unwrap();
        for way in WAYS {
            let g = s.gradient_of_sum_by(&[0, 1, 2, 3], way).unwrap();
            let (v, grads) = g.eval_slices_with_value(&refs(&x), &Tensor::scalar(c), 0..s.plan().n_slices()).unwrap();
            assert_close(&v, &v0, &format!("sliced on {labels:?}, {way:?}: value"));
            for k in 0..4 {
                assert_close(&grads[k], &g0[k], &format!("sliced on {labels:?}, {way:?}: gradient {k}"));
            }
        }
    }
}
