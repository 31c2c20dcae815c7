//! Scaled contractions (`eval_scaled`, `value_and_grad_scaled`): equal to the reference and
//! to the plain contraction where both are finite (random networks, real and complex,
//! sliced and not), unchanged but for the exponent when operands are scaled by powers of
//! two far beyond `f64`'s range, and on the 200-site MPS inner product with entries in
//! `[0.5, 1)`, where the plain result is infinite, equal to the plain contraction of the
//! operands scaled down (a power of two per operand, exact) and scaled back in the exponent.

use einsum::{
    ContractionPath, Einsum, EinsumOptions, Elem, Instance, PathChoice, ScaledTensor, SlicedEinsum, Slicing, Tensor,
    c64, reference_einsum,
};
use proptest::prelude::*;

use crate::network::{assert_close, network, tensor};

fn operands<T: Elem>(shapes: &[Vec<usize>], seed: u64) -> Vec<Tensor<T>> {
    shapes.iter().enumerate().map(|(i, s)| tensor(s.clone(), seed + i as u64)).collect()
}

/// `t · 2^k`.
fn times_pow2<T: Elem>(t: &Tensor<T>, k: i32) -> Tensor<T> {
    let f = T::from_f64(2f64.powi(k / 2)) * T::from_f64(2f64.powi(k - k / 2));
    t.map(|x| *x * f)
}

/// The scaled tensor's value, which must fit.
fn value<T: Elem>(s: &ScaledTensor<T>, what: &str) -> Tensor<T> {
    s.to_tensor().unwrap_or_else(|| panic!("{what}: {s:?} does not fit"))
}

/// Scaled equals plain (and the reference) where both are finite; with operands scaled by
/// `2^k[i]`, the mantissa is the same and the exponent moves by `Σ k`.
fn check<T: Elem>(expr: &str, shapes: &[Vec<usize>], path: PathChoice, ks: &[i32]) {
    let ks = &ks[..shapes.len()];
    let ops = operands::<T>(shapes, 3);
    let refs: Vec<&Tensor<T>> = ops.iter().collect();
    let e = Einsum::<T>::new(expr, shapes, path).unwrap();
    let plain = e.eval(&refs).unwrap();
    let s = e.eval_scaled(&refs).unwrap();
    assert_close(&value(&s, expr), &plain, expr);
    assert_close(&value(&s, expr), &reference_einsum(expr, &refs).unwrap(), expr);
    // The largest magnitude: |x|, or the larger of |re| and |im|.
    let parts =
        s.mantissa().data().iter().map(|&x| x.inner(T::one()).abs().max(x.inner(T::from_parts(0.0, 1.0)).abs()));
    let m = parts.fold(0.0, f64::max);
    assert!(m == 0.0 || (0.5..1.0).contains(&m), "{expr}: mantissa of largest magnitude {m}");

    let far: Vec<Tensor<T>> = ops.iter().zip(ks).map(|(t, &k)| times_pow2(t, k)).collect();
    let far_refs: Vec<&Tensor<T>> = far.iter().collect();
    let f = e.eval_scaled(&far_refs).unwrap();
    assert_close(f.mantissa(), s.mantissa(), expr);
    if m != 0.0 {
        let shift: i32 = ks.iter().sum();
        assert_eq!(f.exponent(), s.exponent() + shift as f64, "{expr}: exponents with operands scaled by {ks:?}");
    }

    // Gradients: the plain VJP where it fits; for the far operands, the same mantissas with
    // the exponent moved by the other operands' powers.
    let wrt: Vec<usize> = (0..shapes.len()).collect();
    let c = tensor::<T>(e.output_shape().to_vec(), 11);
    let (v, g) = e.value_and_grad_scaled(&refs, &wrt, &c).unwrap();
    assert_close(&value(&v, expr), &plain, expr);
    let want = e.gradient(&wrt).unwrap().eval(&refs, &c).unwrap();
    for (i, (g, w)) in g.iter().zip(&want).enumerate() {
        assert_close(&value(g, expr), w, &format!("{expr}: gradient {i}"));
    }
    let (_, gf) = e.value_and_grad_scaled(&far_refs, &wrt, &c).unwrap();
    for (i, (gf, g0)) in gf.iter().zip(&g).enumerate() {
        assert_close(gf.mantissa(), g0.mantissa(), &format!("{expr}: far gradient {i}"));
        if g0.mantissa().max_abs() != 0.0 {
            let shift: i32 = ks.iter().enumerate().filter(|&(j, _)| j != i).map(|(_, k)| k).sum();
            assert_eq!(gf.exponent(), g0.exponent() + shift as f64, "{expr}: gradient {i} exponent");
        }
    }
}

/// Sliced on `labels`, the scaled value and gradients equal the unsliced plain ones, and
/// with far operands the unsliced scaled ones.
fn check_sliced<T: Elem>(expr: &str, shapes: &[Vec<usize>], labels: Vec<char>, ks: &[i32]) {
    let ops = operands::<T>(shapes, 5);
    let refs: Vec<&Tensor<T>> = ops.iter().collect();
    let e = Einsum::<T>::new(expr, shapes, PathChoice::Greedy).unwrap();
    let s =
        SlicedEinsum::<T>::new(expr, shapes, PathChoice::Greedy, &EinsumOptions::default(), &Slicing::Labels(labels))
            .unwrap();
    assert_close(&value(&s.eval_scaled(&refs).unwrap(), expr), &e.eval(&refs).unwrap(), expr);
    let wrt: Vec<usize> = (0..shapes.len()).collect();
    let c = tensor::<T>(e.output_shape().to_vec(), 2);
    let (v, g) = s.value_and_grad_scaled(&refs, &wrt, &c).unwrap();
    assert_close(&value(&v, expr), &e.eval(&refs).unwrap(), expr);
    let want = e.gradient(&wrt).unwrap().eval(&refs, &c).unwrap();
    for (i, (g, w)) in g.iter().zip(&want).enumerate() {
        assert_close(&value(g, expr), w, &format!("{expr}: sliced gradient {i}"));
    }
    // Two ranges, each scaled, add up to the whole (the distributed executors' sum).
    let n = s.plan().n_slices();
    let cut = n / 2;
    let (v0, g0) = s.value_and_grad_slices_scaled(&refs, &wrt, &c, 0..cut).unwrap();
    let (v1, g1) = s.value_and_grad_slices_scaled(&refs, &wrt, &c, cut..n).unwrap();
    let sum = |a: &ScaledTensor<T>, b: &ScaledTensor<T>| {
        let (a, b) = (value(a, expr), value(b, expr));
        Tensor::new(a.shape().to_vec(), a.data().iter().zip(b.data()).map(|(x, y)| *x + *y).collect()).unwrap()
    };
    assert_close(&sum(&v0, &v1), &e.eval(&refs).unwrap(), expr);
    assert_close(
        &sum(&s.eval_slices_scaled(&refs, 0..cut).unwrap(), &s.eval_slices_scaled(&refs, cut..n).unwrap()),
        &e.eval(&refs).unwrap(),
        expr,
    );
    for (i, ((a, b), w)) in g0.iter().zip(&g1).zip(&want).enumerate() {
        assert_close(&sum(a, b), w, &format!("{expr}: ranges' gradient {i}"));
    }
    assert!(s.eval_slices_scaled(&refs, 0..n + 1).is_err());
    let far: Vec<Tensor<T>> = ops.iter().zip(ks).map(|(t, &k)| times_pow2(t, k)).collect();
    let far_refs: Vec<&Tensor<T>> = far.iter().collect();
    let (sv, _) = s.value_and_grad_scaled(&far_refs, &wrt, &c).unwrap();
    let ev = e.eval_scaled(&far_refs).unwrap();
    assert_close(sv.mantissa(), ev.mantissa(), expr);
    if ev.mantissa().max_abs() != 0.0 {
        assert_eq!(sv.exponent(), ev.exponent(), "{expr}: sliced exponent");
    }
}

fn labels_of(expr: &str) -> Vec<char> {
    let mut l: Vec<char> = expr.split("->").next().unwrap().chars().filter(|c| c.is_alphabetic()).collect();
    l.sort_unstable();
    l.dedup();
    l
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn scaled_equals_plain_and_reference_and_moves_only_the_exponent(
        (expr, shapes, path) in network(),
        ks in proptest::collection::vec(-900i32..900, 5),
        pick in proptest::collection::vec(proptest::bool::ANY, 6),
    ) {
        check::<f64>(&expr, &shapes, PathChoice::Greedy, &ks);
        check::<c64>(&expr, &shapes, PathChoice::Explicit(ContractionPath::new(path)), &ks);
        let labels: Vec<char> = labels_of(&expr).into_iter().zip(&pick).filter(|(_, p)| **p).map(|(c, _)| c).collect();
        check_sliced::<f64>(&expr, &shapes, labels.clone(), &ks);
        check_sliced::<c64>(&expr, &shapes, labels, &ks);
    }
}

#[test]
fn an_mps_of_200_sites_with_entries_in_half_to_one_is_finite_scaled() {
    let inst = Instance::bundled("str_mps_varying_inner_product_200").unwrap();
    let e = inst.einsum::<f64>(PathChoice::Greedy).unwrap();
    let mut x = 0x9e37_79b9_u64;
    let ops: Vec<Tensor<f64>> = inst
        .shapes
        .iter()
        .map(|s| {
            Tensor::from_fn(s.clone(), |_| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                0.5 + 0.5 * (x >> 11) as f64 / (1u64 << 53) as f64
            })
            .unwrap()
        })
        .collect();
    let refs: Vec<&Tensor<f64>> = ops.iter().collect();
    let plain = e.eval(&refs).unwrap().data()[0];
    assert!(!plain.is_finite(), "the plain inner product overflows: {plain}");
    let s = e.eval_scaled(&refs).unwrap();
    // The plain contraction of the operands each divided by 2^k (exact), in range.
    let k = 7;
    let small: Vec<Tensor<f64>> = ops.iter().map(|t| times_pow2(t, -k)).collect();
    let small_refs: Vec<&Tensor<f64>> = small.iter().collect();
    let p = e.eval(&small_refs).unwrap().data()[0];
    assert!(p.is_finite() && p > 0.0, "{p}");
    let want = p.log2() + (k * 200) as f64;
    let got = s.mantissa().data()[0].log2() + s.exponent();
    assert!((got - want).abs() < 1e-12 * want, "log2: {got} vs {want}");
    assert!(s.exponent10() > 308.0, "{}", s.exponent10());
    // Value and gradient of the product in one pass: the value as above, and the gradient
    // of a factor that holds one site, times that site, summed, is the value (the product
    // is linear in each operand).
    let (v, g) = e.value_and_grad_scaled(&refs, &[0], &Tensor::scalar(1.0)).unwrap();
    assert_eq!(v, s);
    let dot: f64 = g[0].mantissa().data().iter().zip(ops[0].data()).map(|(a, b)| a * b).sum();
    let lhs = dot.log2() + g[0].exponent();
    assert!((lhs - got).abs() < 1e-12 * got, "Euler: {lhs} vs {got}");
}

#[test]
fn an_intermediate_past_the_range_gives_a_result_that_fits() {
    // (A·B)·C with the product A·B about 10^400 and C about 10^-300.
    let shapes = [vec![2, 2], vec![2, 2], vec![2, 2]];
    let path = PathChoice::Explicit(ContractionPath::new(vec![[0, 1], [0, 1]]));
    let e = Einsum::<f64>::new("ab,bc,cd->ad", &shapes, path).unwrap();
    let a = Tensor::from_fn(vec![2, 2], |i| (1 + i[0] + i[1]) as f64 * 1e200).unwrap();
    let c = Tensor::from_fn(vec![2, 2], |i| (1 + 2 * i[0] + i[1]) as f64 * 1e-300).unwrap();
    let plain = e.eval(&[&a, &a, &c]).unwrap();
    assert!(plain.data().iter().all(|x| x.is_infinite()));
    let got = e.eval_scaled(&[&a, &a, &c]).unwrap().to_tensor().unwrap();
    // The same product with the scales moved out by hand: 10^400·10^-300 = 10^100.
    let unit = |t: &Tensor<f64>, s: f64| t.map(|x| x / s);
    let want = reference_einsum("ab,bc,cd->ad", &[&unit(&a, 1e200), &unit(&a, 1e200), &unit(&c, 1e-300)])
        .unwrap()
        .map(|x| x * 1e100);
    assert!(got.max_abs_diff(&want).unwrap() < 1e-13 * want.max_abs(), "{got:?} vs {want:?}");
}

#[test]
fn scaled_errors_are_values() {
    let e = Einsum::<f64>::new("ij,jk->ik", &[vec![2, 3], vec![3, 2]], PathChoice::Greedy).unwrap();
    let (a, b) = (Tensor::ones(vec![2, 3]).unwrap(), Tensor::ones(vec![3, 2]).unwrap());
    assert!(e.eval_scaled(&[&a]).unwrap_err().to_string().contains("takes 2 operands"));
    assert!(e.eval_scaled(&[&b, &a]).is_err());
    let c = Tensor::ones(vec![2, 2]).unwrap();
    assert!(e.value_and_grad_scaled(&[&a, &b], &[2], &c).unwrap_err().to_string().contains("operand 2"));
    assert!(e.value_and_grad_scaled(&[&a, &b], &[0, 0], &c).unwrap_err().to_string().contains("twice"));
    assert!(
        e.value_and_grad_scaled(&[&a, &b], &[0], &Tensor::scalar(1.0)).unwrap_err().to_string().contains("cotangent")
    );
    // A non-finite operand gives a non-finite mantissa, not a panic, and does not fit.
    let nan = Tensor::new(vec![2, 3], vec![f64::NAN; 6]).unwrap();
    let s = e.eval_scaled(&[&nan, &b]).unwrap();
    assert!(s.mantissa().data().iter().all(|x| x.is_nan()) && s.to_tensor().is_none());
}
