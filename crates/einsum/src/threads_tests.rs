//! Tests of `threads.rs` on whole programs: two threads against one, bit for bit (or to
//! rounding where a kernel splits a sum), forward and value with gradients, and the pool's
//! choice on the bundled instances. A unit-test module beside `threads.rs`, because they
//! bypass the choice through the crate's own `eval_in_pool` (and reading `Einsum` from
//! `threads.rs` would make the two files point at each other).

use crate::Elem;
use crate::threads::PoolUse;
use crate::{Einsum, Instance, PathChoice, Tensor, c64};

fn operands<T: Elem>(shapes: &[Vec<usize>], seed: u64) -> Vec<Tensor<T>> {
    let mut x = seed as f64;
    let mut next = move || {
        x += 1.0;
        T::from_parts((x * 0.731).sin(), (x * 0.377).cos())
    };
    shapes.iter().map(|s| Tensor::from_fn(s.clone(), |_| next()).unwrap()).collect()
}

/// `e` on one thread and in a pool of two, forward and value with gradients (with the
/// choice of `threads.rs` bypassed, so that the pool is used): bit for bit, or the
/// gradients to rounding unless `fixed_order`.
fn check_pool_matches_one_thread<T: Elem>(e: &Einsum<T>, shapes: &[Vec<usize>], fixed_order: bool, what: &str) {
    let ops = operands::<T>(shapes, 3);
    let refs: Vec<&Tensor<T>> = ops.iter().collect();
    let threads = 2;
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    let one = e.eval(&refs).unwrap();
    assert_eq!(e.eval_in_pool(Some(&pool), &refs).unwrap(), one, "{what}, {threads} threads");
    assert_eq!(e.eval_parallel(Some(&pool), &refs).unwrap(), one, "{what}, {threads} threads");
    let all: Vec<usize> = (0..shapes.len()).collect();
    let g = e.gradient(&all).unwrap();
    let c = operands::<T>(&[one.shape().to_vec()], 5).pop().unwrap();
    let (v1, g1) = g.eval_with_value(&refs, &c).unwrap();
    let (v2, g2) = g.eval_with_value_in_pool(Some(&pool), &refs, &c).unwrap();
    assert_eq!(v1, one, "{what}");
    assert_eq!(v2, v1, "{what}, value, {threads} threads");
    for (x, y) in g2.iter().zip(&g1) {
        let err = x.max_abs_diff(y).unwrap();
        let bound = if fixed_order { 0.0 } else { 1e-13 * (1.0 + y.max_abs()) * shapes.len() as f64 };
        assert!(err <= bound, "{what}, gradients, {threads} threads: {err:e} off");
    }
    // Called inside the pool (as Python and `cgx` call it), plain `eval` and the
    // gradient's evaluations run on its threads, with the same results.
    assert_eq!(pool.install(|| e.eval(&refs)).unwrap(), one, "{what}, eval inside the pool");
    let (v3, g3) = pool.install(|| g.eval_with_value(&refs, &c)).unwrap();
    let g4 = pool.install(|| g.eval(&refs, &c)).unwrap();
    // `eval` runs the program without the fused pairs (`pair.rs`), whose small gradients
    // sum in another order: compared with itself on one thread.
    let g0 = g.eval(&refs, &c).unwrap();
    assert_eq!(v3, v1, "{what}, value inside the pool");
    for (x, y) in g3.iter().chain(&g4).zip(g1.iter().chain(&g0)) {
        let err = x.max_abs_diff(y).unwrap();
        let bound = if fixed_order { 0.0 } else { 1e-13 * (1.0 + y.max_abs()) * shapes.len() as f64 };
        assert!(err <= bound, "{what}, gradients inside the pool: {err:e} off");
    }
    if fixed_order {
        assert_eq!(g.eval_with_value_parallel(Some(&pool), &refs, &c).unwrap().1, g1, "{what}");
    }
}

/// A sliced contraction and its value with gradients inside a pool of two threads (each
/// slice's program on the pool's threads) against the same outside any pool: bit for bit.
#[test]
fn sliced_evaluations_inside_a_pool_equal_one_thread() {
    use crate::{EinsumOptions, SlicedEinsum, Slicing};
    // Each slice's GEMMs (160³ multiply-adds) split over the pool.
    let shapes = vec![vec![2, 160, 160], vec![160, 160], vec![160, 160]];
    let s = SlicedEinsum::<f64>::new(
        "xab,bc,cd->ad",
        &shapes,
        PathChoice::Greedy,
        &EinsumOptions::default(),
        &Slicing::Labels(vec!['x']),
    )
    .unwrap();
    assert!(s.plan().n_slices() > 1);
    let ops = operands::<f64>(&shapes, 7);
    let refs: Vec<&Tensor<f64>> = ops.iter().collect();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    let one = s.eval(&refs).unwrap();
    assert_eq!(pool.install(|| s.eval(&refs)).unwrap(), one);
    let g = s.gradient(&[0, 1, 2]).unwrap();
    let c = operands::<f64>(&[one.shape().to_vec()], 5).pop().unwrap();
    let n = s.plan().n_slices();
    let (v1, g1) = g.eval_slices_with_value(&refs, &c, 0..n).unwrap();
    let (v2, g2) = pool.install(|| g.eval_slices_with_value(&refs, &c, 0..n)).unwrap();
    assert_eq!(v2, v1);
    assert_eq!(g2, g1);
}

/// Queens' factors multiplied together first (`merge.rs`): `ab, bc, ac, de` on a `3^11`
/// carrier become one product of `3^5` entries, whose step and fused transposes (`pair.rs`,
/// a factor of 243 entries) run on both threads with the one-thread result bit for bit.
/// (The value+gradient program's value equals the forward's to rounding here.)
#[test]
fn merged_factors_on_a_pool_equal_one_thread_bit_for_bit() {
    let expr = "abcdefghijk,ab,bc,ac,de,kjihgfedcba->";
    let mut shapes = vec![vec![3; 11]];
    shapes.extend(vec![vec![3, 3]; 4]);
    shapes.push(vec![3; 11]);
    let path = crate::ContractionPath::new(vec![[0, 1], [0, 4], [0, 3], [0, 2], [0, 1]]);
    let plan = crate::Plan::new(expr, &shapes, PathChoice::Explicit(path), crate::MemoryLimit::default()).unwrap();
    assert!(plan.with_factors_merged().is_some());
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    let e = Einsum::<f64>::from_plan(plan).unwrap();
    let ops = operands::<f64>(&shapes, 3);
    let refs: Vec<&Tensor<f64>> = ops.iter().collect();
    let one = e.eval(&refs).unwrap();
    assert_eq!(e.eval_in_pool(Some(&pool), &refs).unwrap(), one);
    let g = e.gradient(&(0..shapes.len()).collect::<Vec<_>>()).unwrap();
    let c = operands::<f64>(&[vec![]], 5).pop().unwrap();
    let (v1, g1) = g.eval_with_value(&refs, &c).unwrap();
    let (v2, g2) = g.eval_with_value_in_pool(Some(&pool), &refs, &c).unwrap();
    assert_eq!((v2, g2), (v1.clone(), g1));
    // The value+gradient program lays its last dot product out for the reverse pass too,
    // so its value sums in another order than the forward program's.
    assert!(v1.max_abs_diff(&one).unwrap() <= 1e-12 * (1.0 + one.max_abs()));
}

/// Programs whose kernels split in a pool (large GEMMs cut into blocks, a loop of small ones cut by
/// its batch label, an element-wise product and a permuted broadcast of `2^20`
/// elements, a queens step of `3^11`, thin products whose chunks of `k` are formed on both threads) and programs of independent steps: the kernels keep their order of sums
/// whatever the threads (a GEMM is cut only where every block keeps the whole's kernel,
/// `gemm_loop::split_cut`: the gradient of the outer product of two matrix products,
/// below, had differed by rounding), so two threads equal one bit for bit, real and
/// complex.
#[test]
fn a_pool_equals_one_thread_bit_for_bit() {
    let chain = vec![vec![96, 80], vec![80, 96], vec![96, 80], vec![80, 96], vec![96, 80]];
    let cases: [(&str, Vec<Vec<usize>>, bool); 11] = [
        ("ij,jk->ik", vec![vec![160, 96], vec![96, 128]], true),
        // GEMMs cut into one block per thread across rows (`m > n`) and across columns,
        // with sides that are no multiple of the blocks' alignment.
        ("ij,jk->ik", vec![vec![301, 97], vec![97, 45]], true),
        ("ij,jk->ki", vec![vec![45, 83], vec![83, 299]], true),
        ("bij,bjk->bik", vec![vec![64, 32, 24], vec![64, 24, 32]], true),
        ("ij,ij->ij", vec![vec![1024, 1024], vec![1024, 1024]], true),
        ("abc,c->cba", vec![vec![128, 128, 64], vec![64]], true),
        ("ab,bc,cd,de,ef->af", chain, true),
        ("ab,bc,de,ef->acdf", vec![vec![40, 50], vec![50, 60], vec![30, 70], vec![70, 20]], true),
        // A small factor's gradient from two large tensors (`thin_gemm.rs`: 3 × 3 summed over
        // 2688 terms, in chunks formed on both threads), and a scalar output whose last
        // step is one long dot product, as in the queens network.
        ("ab,acde->bcde", vec![vec![3, 3], vec![3, 12, 14, 16]], true),
        ("ab,acd,bcd->", vec![vec![3, 3], vec![3, 40, 50], vec![3, 40, 50]], true),
        // A queens step over the element-wise kernel's threshold (`3^11` elements): rows of
        // 3 written in panels, in chunks on both threads, and its transposes.
        ("ab,acdefghijbk->abcdefghijk", vec![vec![3, 3], vec![3; 11]], true),
    ];
    for (expr, shapes, fixed_order) in cases {
        let e = Einsum::<f64>::new(expr, &shapes, PathChoice::Greedy).unwrap();
        check_pool_matches_one_thread(&e, &shapes, fixed_order, expr);
        let e = Einsum::<c64>::new(expr, &shapes, PathChoice::Greedy).unwrap();
        check_pool_matches_one_thread(&e, &shapes, fixed_order, expr);
    }
    // The bundled instances' structure, every dimension capped at 3.
    for name in Instance::bundled_names().unwrap() {
        let mut inst = Instance::bundled(&name).unwrap();
        for s in &mut inst.shapes {
            for d in s.iter_mut() {
                *d = (*d).min(3);
            }
        }
        let e = inst.einsum::<f64>(PathChoice::Explicit(inst.opt_flops.clone().unwrap())).unwrap();
        check_pool_matches_one_thread(&e, &inst.shapes, true, &name);
    }
}

/// The choice on the bundled instances at full size: the lone GEMM and the batch of 32
/// small ones, calls of under a millisecond, run their split kernels in the pool (their
/// saving exceeds `WAKE_COST`, the hand-off's cost on the machine measured); the
/// MPS chain's small steps stay on one thread (each was slower on two threads); the
/// matrix chain, the language model and MERA run steps at once. Value with gradients: the
/// MPS's reverse pass has a leaf gradient beside each step of its cotangent chain, which
/// the pool runs at once. A pool of one thread is never entered.
#[test]
fn the_pool_is_entered_where_it_pays() {
    use PoolUse::{Kernels, OneThread, Pool};
    let expect = [
        ("bin_matmul_256", Kernels, Kernels),
        ("bin_batched_matmul_b32_m64_n64_k64", Kernels, Kernels),
        ("str_mps_varying_inner_product_200", OneThread, Pool),
        ("str_matrix_chain_multiplication_100", Pool, Pool),
        ("lm_batch_likelihood_brackets_4_4d", Pool, Pool),
        ("str_nw_mera_open_26", Pool, Pool),
    ];
    for (name, want, want_grad) in expect {
        let inst = Instance::bundled(name).unwrap();
        let e = inst.einsum::<f64>(PathChoice::Explicit(inst.opt_flops.clone().unwrap())).unwrap();
        assert_eq!(e.pool_use(2), want, "{name}");
        assert_eq!(e.pool_use(1), PoolUse::OneThread, "{name}");
        let all: Vec<usize> = (0..inst.shapes.len()).collect();
        assert_eq!(e.gradient(&all).unwrap().pool_use(2), want_grad, "{name}, value and gradient");
    }
}

/// Callers that share one pool: four OS threads each calling evaluations of a network
/// whose steps the choice runs at once in the pool (computegraph's parallel evaluators,
/// the level one or the dataflow one, with helpers that spin while they wait), in a pool
/// of two threads at once, and two evaluations joined inside the pool. Each returns the
/// one-thread result bit for bit, and none waits forever on another (the test would hang).
#[test]
fn evaluations_sharing_a_pool_at_once_end_and_equal_one_thread() {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    let single = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
    for name in ["str_matrix_chain_multiplication_100", "lm_batch_likelihood_brackets_4_4d"] {
        let inst = Instance::bundled(name).unwrap();
        let e = inst.einsum::<f64>(PathChoice::Explicit(inst.opt_flops.clone().unwrap())).unwrap();
        assert_eq!(e.pool_use(2), PoolUse::Pool, "{name}: the choice runs steps at once");
        let ops = operands::<f64>(&inst.shapes, 11);
        let refs: Vec<&Tensor<f64>> = ops.iter().collect();
        let one = e.eval_in_pool(Some(&single), &refs).unwrap();
        assert!(one.data().iter().all(|x| x.is_finite()), "{name}: a finite result to compare");
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..3 {
                        assert_eq!(e.eval_in_pool(Some(&pool), &refs).unwrap(), one, "{name}");
                    }
                });
            }
        });
        let nested = pool.install(|| {
            let (a, b) = rayon::join(|| e.eval_in_pool(None, &refs), || e.eval_in_pool(None, &refs));
            (a.unwrap(), b.unwrap())
        });
        assert_eq!(nested, (one.clone(), one), "{name}");
    }
}
