//! [`SumGradient::Cheaper`] against the two ways it chooses between (the same program as
//! one of them, bit for bit, on random networks), and the stop flag during the closed
//! network's path search (`closed_sum.rs`, `stop.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use einsum::{
    Einsum, EinsumError, EinsumGradient, MemoryLimit, PathChoice, Plan, SumGradient, Tensor, c64, generate, with_stop,
};
use proptest::prelude::*;

use crate::network::{assert_close, network, tensor};

/// The value, the gradients and the multiply-adds of `g` with the scalar cotangent `c`.
fn outcome<T: einsum::Elem>(g: &EinsumGradient<T>, x: &[Tensor<T>], c: T) -> (Tensor<T>, Vec<Tensor<T>>, f64) {
    let x: Vec<&Tensor<T>> = x.iter().collect();
    let (v, grads) = g.eval_with_value(&x, &Tensor::scalar(c)).unwrap();
    (v, grads, g.multiply_adds())
}

/// `Cheaper`'s program is one of the two ways': the open tree's, bit for bit (value,
/// gradients and multiply-adds), or else the closed network's, whose value is the open
/// forward pass's bit for bit and whose gradients are the open tree's to rounding. The
/// closed way is not compared with a second call of its own: its path comes from
/// [`PathChoice::Auto`], whose search is bounded in time, so two calls on a loaded
/// machine may find different paths.
fn cheaper_is_one_way<T: einsum::Elem>(e: &Einsum<T>, wrt: &[usize], c: T, what: &str) -> Result<(), TestCaseError> {
    let x: Vec<Tensor<T>> = e.shapes().iter().enumerate().map(|(i, s)| tensor(s.clone(), i as u64)).collect();
    let by = |way| outcome(&e.gradient_of_sum_by(wrt, way).unwrap(), &x, c);
    let (cheaper, open) = (by(SumGradient::Cheaper), by(SumGradient::OpenTree));
    if cheaper == open {
        return Ok(());
    }
    prop_assert_eq!(&cheaper.0, &open.0, "{}: the value is the open forward pass's", what);
    for (k, (got, want)) in cheaper.1.iter().zip(&open.1).enumerate() {
        assert_close(got, want, &format!("{what}: gradient {k} by the closed network"));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn cheaper_gives_the_gradient_of_the_way_it_takes(
        (expr, shapes, path) in network(),
        mask in 0usize..32,
        (re, im) in (-2.0f64..2.0, -2.0f64..2.0),
    ) {
        let n = shapes.len();
        let wrt: Vec<usize> = (0..n).filter(|i| (mask % (1 << n)) >> i & 1 == 1).collect();
        let e = Einsum::<f64>::new(&expr, &shapes, PathChoice::Greedy).unwrap();
        if !e.output_shape().is_empty() {
            cheaper_is_one_way(&e, &wrt, re, &expr)?;
            let explicit = PathChoice::Explicit(einsum::ContractionPath::new(path));
            let e = Einsum::<c64>::new(&expr, &shapes, explicit).unwrap();
            cheaper_is_one_way(&e, &wrt, c64::new(re, im), &expr)?;
        }
    }
}

/// A 6×6 lattice of bonds 32 with one open label of size 2 on its first tensor, along the
/// greedy path, without a memory limit: its closed network's path costs far more than
/// [`einsum::search::AUTO_RATE`] times [`einsum::search::AUTO_MAX_TIME`], so the automatic
/// search takes its longest allowance unless stopped.
fn long_search() -> Einsum<f64> {
    let net = generate::lattice(&[6, 6], 32..=32, 1).unwrap();
    let (mut inputs, mut sizes) = (net.inputs, net.sizes);
    let open = sizes.len() as u32;
    sizes.push(2);
    inputs[0].push(open);
    let plan = Plan::from_network(inputs, vec![open], sizes, PathChoice::Greedy, MemoryLimit::Unlimited).unwrap();
    Einsum::from_plan(plan).unwrap()
}

/// Ctrl-C during the closed network's path search: the flag raised while the call runs
/// makes `gradient_of_sum` (the cheaper way) and the closed way return
/// [`EinsumError::Interrupted`] (had the flag not been read, the search would have ended by
/// itself and the call returned `Ok`). The time from the flag to the return is bounded
/// generously here (a debug build on a loaded two-core machine); its figure is in
/// `docs/PERFORMANCE.md`.
#[test]
fn a_stop_during_the_closed_search_interrupts_the_gradient_of_the_sum() {
    let e = long_search();
    let wrt: Vec<usize> = (0..e.shapes().len()).collect();
    for way in [SumGradient::Cheaper, SumGradient::ClosedNetwork] {
        let flag = Arc::new(AtomicBool::new(false));
        let raised = std::thread::scope(|s| {
            let raise = s.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                flag.store(true, Ordering::Relaxed);
                Instant::now()
            });
            let got = with_stop(flag.clone(), || e.gradient_of_sum_by(&wrt, way));
            let returned = Instant::now();
            let raised = raise.join().unwrap();
            assert_eq!(got.err(), Some(EinsumError::Interrupted), "{way:?}");
            returned.saturating_duration_since(raised)
        });
        assert!(raised < Duration::from_secs(10), "{way:?}: returned {raised:?} after the flag");
    }
}
