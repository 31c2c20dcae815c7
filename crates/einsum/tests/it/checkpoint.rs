//! The gradient under a memory target (`Einsum::gradient_within`): on random networks
//! (real and complex, random `wrt`) and random limits between nothing and the plan that
//! keeps everything, either the target is refused as a memory error or the plan's
//! simulated peak is within it, and its value and gradients equal `Einsum::gradient`'s;
//! tighter targets keep fewer intermediates and recompute more.

use einsum::{ContractionPath, Einsum, EinsumError, Elem, MemoryLimit, PathChoice, Tensor, c64};
use proptest::prelude::*;

use crate::network::{assert_close, network, tensor};

fn check<T: Elem>(expr: &str, shapes: &[Vec<usize>], path: Vec<[usize; 2]>, pick: &[bool], fraction: f64) {
    let e = Einsum::<T>::new(expr, shapes, PathChoice::Explicit(ContractionPath::new(path))).unwrap();
    let wrt: Vec<usize> = (0..shapes.len()).filter(|&i| pick[i]).collect();
    let ops: Vec<Tensor<T>> = shapes.iter().enumerate().map(|(i, s)| tensor(s.clone(), 3 + i as u64)).collect();
    let refs: Vec<&Tensor<T>> = ops.iter().collect();
    let c = tensor::<T>(e.output_shape().to_vec(), 17);
    let (want_v, want) = e.gradient(&wrt).unwrap().eval_with_value(&refs, &c).unwrap();
    let all = e.gradient_within(&wrt, MemoryLimit::Unlimited).unwrap();
    let limit = (all.peak_bytes() as f64 * fraction) as u64;
    match e.gradient_within(&wrt, MemoryLimit::Bytes(limit)) {
        Ok(g) => {
            assert!(g.peak_bytes() <= limit, "{expr}: simulated {} over {limit}", g.peak_bytes());
            assert!(g.kept() <= all.kept() && g.multiply_adds() >= all.multiply_adds());
            let (v, got) = g.eval_with_value(&refs, &c).unwrap();
            assert_close(&v, &want_v, expr);
            assert_eq!(got.len(), wrt.len());
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_close(g, w, &format!("{expr}: gradient {i} within {limit} bytes"));
            }
        }
        Err(EinsumError::Memory { bytes: Some(b), limit: Some(l), .. }) => assert!(b > l && l == limit),
        Err(other) => panic!("{expr}: {other}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn checkpointed_gradients_equal_the_plain_ones_within_their_target(
        (expr, shapes, path) in network(),
        pick in proptest::collection::vec(proptest::bool::ANY, 5),
        fraction in 0.0f64..1.2,
    ) {
        check::<f64>(&expr, &shapes, path.clone(), &pick, fraction);
        check::<c64>(&expr, &shapes, path, &pick, fraction);
    }
}

#[test]
fn bad_wrt_and_operands_are_errors() {
    let e = Einsum::<f64>::new("ij,jk->", &[vec![2, 3], vec![3, 2]], PathChoice::Greedy).unwrap();
    assert!(e.gradient_within(&[2], MemoryLimit::Unlimited).unwrap_err().to_string().contains("operand 2"));
    assert!(e.gradient_within(&[0, 0], MemoryLimit::Unlimited).unwrap_err().to_string().contains("twice"));
    assert!(matches!(e.gradient_within(&[0], MemoryLimit::Bytes(8)), Err(EinsumError::Memory { .. })));
    let g = e.gradient_within(&[0, 1], MemoryLimit::Unlimited).unwrap();
    let (a, b) = (Tensor::ones(vec![2, 3]).unwrap(), Tensor::ones(vec![3, 2]).unwrap());
    assert!(g.eval_with_value(&[&a], &Tensor::scalar(1.0)).is_err());
    assert!(
        g.eval_with_value(&[&a, &b], &Tensor::ones(vec![2]).unwrap()).unwrap_err().to_string().contains("cotangent")
    );
    let (v, grads) = g.eval_with_value(&[&a, &b], &Tensor::scalar(1.0)).unwrap();
    assert_eq!((v.data(), grads[0].data()), (&[12.0][..], &[2.0; 6][..]));
}
