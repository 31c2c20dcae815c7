//! Derivatives of contraction networks (`docs/SPEC.md` §7): gradients against exact
//! one-operand differences (a network is linear in each operand) through the dot-product
//! identity, JVPs against VJPs, Hessian-vector products against central differences of the
//! gradient and for symmetry, and tidu's whole-graph checker; real and complex. On random
//! networks and paths: value and gradients of one run against exact differences of the
//! plain reference, and the reverse pass's multiply-adds (two transposes per step for every
//! operand, one per step on the way to a single operand).

use einsum::{ContractionPath, Einsum, Elem, PathChoice, Tensor, TensorKey, c64, reference_einsum};
use proptest::prelude::*;
use tidu::testing::{Checker, GraphCase, Tolerance};

use crate::network::tensor;

const NETWORKS: &[(&str, &[&[usize]])] = &[
    ("ab,bc,cd->ad", &[&[2, 3], &[3, 4], &[4, 2]]),
    ("ab,bc,ca->", &[&[2, 3], &[3, 2], &[2, 2]]),
    ("abc,cd,db->a", &[&[2, 3, 2], &[2, 3], &[3, 3]]),
    ("ab,bc,cd,da->", &[&[2, 3], &[3, 2], &[2, 3], &[3, 2]]),
    ("ii,ij,jk->k", &[&[3, 3], &[3, 2], &[2, 2]]),
    // Labels held by one operand alone, summed out of it first (`b`, `e`, `f`; all four).
    ("abc,cd,ef->ad", &[&[2, 3, 2], &[2, 3], &[2, 3]]),
    ("ij,kl->", &[&[3, 2], &[2, 3]]),
];

fn setup<T: Elem>(expr: &str, shapes: &[&[usize]]) -> (Einsum<T>, Vec<Tensor<T>>) {
    let shapes: Vec<Vec<usize>> = shapes.iter().map(|s| s.to_vec()).collect();
    let e = Einsum::<T>::new(expr, &shapes, PathChoice::Greedy).unwrap();
    let ops = shapes.iter().enumerate().map(|(i, s)| tensor(s.clone(), 10 + i as u64)).collect();
    (e, ops)
}

fn close(a: f64, b: f64, scale: f64, what: &str) {
    assert!((a - b).abs() <= 1e-12 * (1.0 + scale), "{what}: {a:e} vs {b:e}");
}

fn refs<T: Elem>(v: &[Tensor<T>]) -> Vec<&Tensor<T>> {
    v.iter().collect()
}

fn add<T: Elem>(a: &Tensor<T>, b: &Tensor<T>, h: f64) -> Tensor<T> {
    let h = T::from_f64(h);
    a.zip_with(b, |x, y| x + h * y).unwrap()
}

/// ⟨c, f(x + tᵢ eᵢ) - f(x)⟩ = ⟨∇ᵢ, tᵢ⟩ exactly (f is linear in each operand), for every
/// operand, with the gradient with respect to all operands and to each one alone.
fn gradients_by_exact_differences<T: Elem>() {
    for &(expr, shapes) in NETWORKS {
        let (e, x) = setup::<T>(expr, shapes);
        let n = x.len();
        let f0 = e.eval(&refs(&x)).unwrap();
        let c = tensor::<T>(f0.shape().to_vec(), 99);
        let all: Vec<usize> = (0..n).collect();
        let g = e.gradient(&all).unwrap().eval(&refs(&x), &c).unwrap();
        for i in 0..n {
            let t = tensor::<T>(x[i].shape().to_vec(), 50 + i as u64);
            let mut xp = x.clone();
            xp[i] = add(&x[i], &t, 1.0);
            let df = add(&e.eval(&refs(&xp)).unwrap(), &f0, -1.0);
            let lhs = c.inner(&df).unwrap();
            let rhs = g[i].inner(&t).unwrap();
            close(lhs, rhs, c.norm() * df.norm() + g[i].norm() * t.norm(), &format!("{expr} operand {i}"));
            // Gradient with respect to this operand alone: the same tensor.
            let gi = e.gradient(&[i]).unwrap().eval(&refs(&x), &c).unwrap();
            assert!(gi[0].max_abs_diff(&g[i]).unwrap() <= 1e-13 * (1.0 + g[i].max_abs()), "{expr} {i}");
        }
    }
}

#[test]
fn gradients_real() {
    gradients_by_exact_differences::<f64>();
}

#[test]
fn gradients_complex() {
    gradients_by_exact_differences::<c64>();
}

/// H_c v against the five-point central difference of the gradient along v (exact for
/// polynomials of degree up to four, so for networks of up to five operands, whose
/// gradients are multilinear in the other operands), and ⟨w, H v⟩ = ⟨v, H w⟩.
fn hvps<T: Elem>() {
    for &(expr, shapes) in NETWORKS {
        let (e, x) = setup::<T>(expr, shapes);
        let n = x.len();
        let all: Vec<usize> = (0..n).collect();
        let c = tensor::<T>(e.output_shape().to_vec(), 98);
        let grad = e.gradient(&all).unwrap();
        let hvp = e.hvp(&all).unwrap();
        let v: Vec<Tensor<T>> = x.iter().enumerate().map(|(i, t)| tensor(t.shape().to_vec(), 70 + i as u64)).collect();
        let w: Vec<Tensor<T>> = x.iter().enumerate().map(|(i, t)| tensor(t.shape().to_vec(), 80 + i as u64)).collect();
        let hv = hvp.eval(&refs(&x), &c, &refs(&v)).unwrap();
        let hw = hvp.eval(&refs(&x), &c, &refs(&w)).unwrap();
        let h = 0.1;
        let g_at = |s: f64| -> Vec<Tensor<T>> {
            let xs: Vec<Tensor<T>> = x.iter().zip(&v).map(|(a, b)| add(a, b, s * h)).collect();
            grad.eval(&refs(&xs), &c).unwrap()
        };
        let (g2, g1, gm1, gm2) = (g_at(2.0), g_at(1.0), g_at(-1.0), g_at(-2.0));
        for i in 0..n {
            // (-g(2h) + 8 g(h) - 8 g(-h) + g(-2h)) / 12h
            let num = add(&add(&add(&g1[i], &gm1[i], -1.0), &g2[i], -0.125), &gm2[i], 0.125);
            let fd = num.map(|&z| z * T::from_f64(8.0 / (12.0 * h)));
            let err = fd.max_abs_diff(&hv[i]).unwrap();
            assert!(err <= 1e-11 * (1.0 + fd.max_abs()), "{expr}: HVP component {i} differs from FD by {err:e}");
        }
        let (a, b): (f64, f64) = (0..n)
            .map(|i| (w[i].inner(&hv[i]).unwrap(), v[i].inner(&hw[i]).unwrap()))
            .fold((0.0, 0.0), |(s, t), (p, q)| (s + p, t + q));
        close(a, b, a.abs() + b.abs(), &format!("{expr}: HVP symmetry"));
    }
}

#[test]
fn hvps_real() {
    hvps::<f64>();
}

#[test]
fn hvps_complex() {
    hvps::<c64>();
}

/// tidu's whole-graph checker: JVP against finite differences, transposes by the
/// dot-product identity, all four second-order nestings, HVP symmetry.
#[test]
fn whole_graph_checks() {
    fn run<T: Elem>() {
        for &(expr, shapes) in &NETWORKS[..3] {
            let (e, x) = setup::<T>(expr, shapes);
            let inputs = x.into_iter().enumerate().map(|(i, t)| (TensorKey::var(i as u32), t)).collect();
            let case = GraphCase::new(expr, vec![e.graph().clone()], vec![e.output_key().clone()], inputs);
            Checker::new(Tolerance::F64).check_graph(&mut (), &case).unwrap_or_else(|f| panic!("{f}"));
        }
    }
    run::<f64>();
    run::<c64>();
}

#[test]
fn derivative_errors_are_values() {
    let (e, x) = setup::<f64>("ab,bc->ac", &[&[2, 3], &[3, 4]]);
    assert!(e.gradient(&[2]).err().unwrap().to_string().contains("there are 2"));
    assert!(e.gradient(&[0, 0]).err().unwrap().to_string().contains("listed twice"));
    let g = e.gradient(&[1]).unwrap();
    let bad = Tensor::<f64>::zeros(vec![2, 3]).unwrap();
    assert!(g.eval(&refs(&x), &bad).unwrap_err().to_string().contains("cotangent 0 of `ab,bc->ac` has shape [2, 3]"));
    assert!(g.eval(&refs(&x[..1]), &bad).is_err());
    let h = e.hvp(&[0]).unwrap();
    let c = Tensor::<f64>::zeros(vec![2, 4]).unwrap();
    assert!(h.eval(&refs(&x), &c, &[]).unwrap_err().to_string().contains("direction"));
}

/// Value and gradients from one run ([`einsum::EinsumGradient::eval_with_value`]) on a
/// random network and path: the value equals the forward run, each gradient satisfies
/// `⟨c, f(x + t eᵢ) - f(x)⟩ = ⟨∇ᵢ, t⟩` with `f` the plain reference (exact: `f` is linear
/// in each operand), and the run's multiply-adds are those of the forward pass plus, per
/// step, one transpose for each operand that needs a cotangent: at most three times the
/// forward pass for every operand, at most twice for one (no cotangent of a branch that
/// leads to no `wrt` operand).
pub fn value_and_gradients_on<T: Elem>(expr: &str, shapes: &[Vec<usize>], path: PathChoice) {
    let e = Einsum::<T>::new(expr, shapes, path).unwrap_or_else(|e| panic!("{expr}: {e}"));
    let x: Vec<Tensor<T>> = shapes.iter().enumerate().map(|(i, s)| tensor(s.clone(), 30 + i as u64)).collect();
    let n = x.len();
    let f0 = reference_einsum(expr, &refs(&x)).unwrap();
    let c = tensor::<T>(f0.shape().to_vec(), 97);
    let all: Vec<usize> = (0..n).collect();
    let g = e.gradient(&all).unwrap();
    let (value, grads) = g.eval_with_value(&refs(&x), &c).unwrap();
    crate::network::assert_close(&value, &f0, &format!("{expr}: value"));
    let forward = e.multiply_adds();
    // At most: equal transposes of equal operands are one operation after merging.
    assert!(g.multiply_adds() <= 3.0 * forward, "{expr}: value and all gradients: {} > 3·{forward}", g.multiply_adds());
    for i in 0..n {
        let t = tensor::<T>(x[i].shape().to_vec(), 60 + i as u64);
        let mut xp = x.clone();
        xp[i] = add(&x[i], &t, 1.0);
        let df = add(&reference_einsum(expr, &refs(&xp)).unwrap(), &f0, -1.0);
        let (lhs, rhs) = (c.inner(&df).unwrap(), grads[i].inner(&t).unwrap());
        let scale = c.norm() * df.norm() + grads[i].norm() * t.norm();
        assert!((lhs - rhs).abs() <= 1e-10 * (1.0 + scale), "{expr}: gradient {i}: {lhs:e} vs {rhs:e}");
        let one = e.gradient(&[i]).unwrap();
        assert!(
            one.multiply_adds() <= 2.0 * forward,
            "{expr}: operand {i} alone: {} > 2·{forward}",
            one.multiply_adds()
        );
        let (_, gi) = one.eval_with_value(&refs(&x), &c).unwrap();
        crate::network::assert_close(&gi[0], &grads[i], &format!("{expr}: gradient {i} alone"));
    }
    // tidu's VJP of the same graph, the reverse pass the crate used before its own.
    let view = computegraph::resolve(vec![e.graph().clone()]);
    let keys: Vec<TensorKey> = (0..n as u32).map(TensorKey::var).collect();
    let vjp = tidu::vjp(&view, std::slice::from_ref(e.output_key()), &keys).unwrap();
    let seed = vjp.tangent_inputs()[0].0.clone();
    let program = tidu::DerivativeProgram::new(&vjp).unwrap();
    let want = program
        .eval(&mut (), |k| match k {
            TensorKey::Var(i) => Some(&x[*i as usize]),
            k if *k == seed => Some(&c),
            _ => None,
        })
        .unwrap();
    for (i, w) in want.iter().enumerate() {
        let w = w.clone().unwrap_or_else(|| Tensor::zeros(x[i].shape().to_vec()).unwrap());
        crate::network::assert_close(&grads[i], &w, &format!("{expr}: gradient {i} against tidu's"));
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn value_and_gradients_of_random_networks((expr, shapes, path) in crate::network::network()) {
        value_and_gradients_on::<f64>(&expr, &shapes, PathChoice::Explicit(ContractionPath::new(path)));
        value_and_gradients_on::<c64>(&expr, &shapes, PathChoice::Greedy);
    }
}

/// The largest modulus of the finite entries of `t`, and whether an entry is not finite:
/// the simple reference for [`einsum::RangeScan`].
fn reference_range<T: Elem>(t: &Tensor<T>) -> (f64, bool) {
    t.data().iter().fold((0.0f64, false), |(largest, bad), v| {
        let m = v.modulus();
        if m.is_finite() { (largest.max(m), bad) } else { (largest, true) }
    })
}

/// [`einsum::EinsumGradient::eval_with_value_and_range`] on `wrt` (operand 0's entries
/// scaled by `scale`, which may overflow): the value and gradients bit for bit those of
/// `eval_with_value` on the calling thread, and one range per result equal to
/// [`reference_range`] of that result, there and in a pool of two.
fn ranges_on<T: Elem>(expr: &str, shapes: &[Vec<usize>], wrt: &[usize], scale: f64) {
    let e = Einsum::<T>::new(expr, shapes, PathChoice::Greedy).unwrap_or_else(|e| panic!("{expr}: {e}"));
    let mut x: Vec<Tensor<T>> = shapes.iter().enumerate().map(|(i, s)| tensor(s.clone(), 30 + i as u64)).collect();
    x[0] = x[0].map(|&v| v * T::from_f64(scale));
    let c = tensor::<T>(e.output_shape().to_vec(), 97);
    let g = e.gradient(wrt).unwrap();
    let (value, grads) = g.eval_with_value(&refs(&x), &c).unwrap();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    for (threads, (v, gs, ranges)) in [
        (1, g.eval_with_value_and_range(&refs(&x), &c).unwrap()),
        (2, pool.install(|| g.eval_with_value_and_range(&refs(&x), &c)).unwrap()),
    ] {
        let bits = |t: &Tensor<T>| t.data().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert_eq!(gs.len(), grads.len());
        assert_eq!(ranges.len(), 1 + grads.len(), "{expr} {wrt:?}: one range per result");
        // Two threads may round differently where a kernel splits its sums.
        if threads == 1 {
            assert_eq!(bits(&v), bits(&value), "{expr} {wrt:?}: value");
            for (i, (a, b)) in gs.iter().zip(&grads).enumerate() {
                assert_eq!(bits(a), bits(b), "{expr} {wrt:?}: gradient {i}");
            }
        }
        for (i, (t, r)) in std::iter::once(&v).chain(&gs).zip(&ranges).enumerate() {
            let (largest, bad) = reference_range(t);
            assert_eq!(r.not_finite(), bad, "{expr} {wrt:?} on {threads}: result {i}");
            let verdict = bad || (largest > 0.0 && largest < f64::MIN_POSITIVE);
            assert_eq!(r.left_range(), verdict, "{expr} {wrt:?} on {threads}: result {i}");
            // Complex scans keep the largest part's modulus away from the ends of the range
            // (`RangeScan::of_complex`): within a factor √2 of the largest modulus.
            if !bad && !T::IS_COMPLEX {
                assert_eq!(r.largest(), largest, "{expr} {wrt:?} on {threads}: result {i}");
            } else if !bad {
                let within =
                    r.largest() <= largest && r.largest() * std::f64::consts::SQRT_2 >= largest * (1.0 - 1e-15);
                assert!(within, "{expr} {wrt:?} on {threads}: result {i}: {} for {largest}", r.largest());
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn each_results_range_is_its_arrays(
        (expr, shapes, _) in crate::network::network(),
        mask in 1u32..256,
        scale in prop::sample::select(vec![1.0, 1e-200, 1e300, f64::INFINITY]),
    ) {
        let wrt: Vec<usize> = (0..shapes.len()).filter(|i| mask & (1 << (i % 8)) != 0).collect();
        prop_assume!(!wrt.is_empty());
        ranges_on::<f64>(&expr, &shapes, &wrt, scale);
        ranges_on::<c64>(&expr, &shapes, &wrt, scale);
    }
}

/// A chain of products large enough for the pool's threads (`threads.rs`): the ranges on a
/// pool of two are those of the results it wrote, in range and overflowing.
#[test]
fn a_costly_chains_ranges_on_two_threads() {
    let shapes = vec![vec![256, 256]; 3];
    for scale in [1.0, 1e300] {
        ranges_on::<f64>("ab,bc,cd->ad", &shapes, &[0, 1, 2], scale);
        ranges_on::<f64>("ab,bc,cd->ad", &shapes, &[1], scale);
    }
}
