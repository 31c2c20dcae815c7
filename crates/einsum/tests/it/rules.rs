//! `tidu::testing::check_rules` for every primitive, real and complex: JVPs against finite
//! differences, transposes by the dot-product identity, second order in all four nestings,
//! symbolic zeros and linearity.

use einsum::{ContractSpec, Elem, Tensor, TensorKey, TensorOp, UnarySpec, c64};
use tidu::testing::{RuleCase, Tolerance, check_rules};

fn tensor<T: Elem>(shape: Vec<usize>, seed: u64) -> Tensor<T> {
    let mut x = seed as f64 * 10.0;
    Tensor::from_fn(shape, |_| {
        x += 1.0;
        T::from_parts((x * 0.731).sin(), (x * 0.377).cos())
    })
    .unwrap()
}

/// Contractions in the general form: matmul, batch, trace, outer, full, Hadamard, a label
/// summed in one operand, an output diagonal, a broadcast, a scalar operand.
const CONTRACTIONS: &[(&[u32], &[u32], &[u32])] = &[
    (&[0, 1], &[1, 2], &[0, 2]),
    (&[0, 1, 2], &[0, 2, 3], &[0, 1, 3]),
    (&[0, 0], &[0, 1], &[1]),
    (&[0], &[1], &[0, 1]),
    (&[0, 1], &[0, 1], &[]),
    (&[0, 1], &[0, 1], &[0, 1]),
    (&[0, 1, 2], &[2], &[0]),
    (&[0], &[0], &[0, 0]),
    (&[0], &[1], &[0, 1, 2]),
    (&[], &[0, 1], &[1, 0]),
];
const SIZES: &[usize] = &[2, 3, 2, 3];

fn contraction_cases<T: Elem>() -> Vec<RuleCase<TensorOp<T>>> {
    let mut cases = Vec::new();
    // Every contraction plain, and a few with conjugated operands (what complex
    // transposes emit).
    let conj = [[true, false], [false, true], [true, true]];
    let flagged = CONTRACTIONS[..3].iter().zip(conj).map(|(&(a, b, o), c)| (a, b, o, c));
    let all = CONTRACTIONS.iter().map(|&(a, b, o)| (a, b, o, [false; 2])).chain(flagged);
    for (i, (a, b, out, conj)) in all.enumerate() {
        let spec = ContractSpec::new(a, b, out, SIZES).unwrap().with_conj(conj);
        let ta = tensor::<T>(spec.a_shape(), 2 * i as u64);
        let tb = tensor::<T>(spec.b_shape(), 2 * i as u64 + 1);
        let inputs = vec![(TensorKey::var(0), ta), (TensorKey::var(1), tb)];
        let case = RuleCase::new(TensorOp::contract(spec), inputs).multilinear();
        cases.push(case.clone());
        cases.push(case.clone().active(&[true, false]));
        cases.push(case.active(&[false, true]));
    }
    cases
}

fn other_cases<T: Elem>() -> Vec<RuleCase<TensorOp<T>>> {
    let unary = [
        UnarySpec::permute(&[2, 3, 4], &[2, 0, 1]).unwrap(),
        UnarySpec::sum_axes(&[2, 3, 4], &[0, 2]).unwrap(),
        UnarySpec::broadcast(&[3], &[2, 3, 2], &[1]).unwrap(),
        UnarySpec::new(&[0, 0, 1], &[1, 0], &[3, 2]).unwrap(),
        UnarySpec::new(&[0], &[0, 0], &[3]).unwrap(),
    ];
    let x = |s: Vec<usize>, seed| vec![(TensorKey::var(0), tensor::<T>(s, seed))];
    let mut cases: Vec<RuleCase<TensorOp<T>>> =
        unary.into_iter().map(|s| RuleCase::new(TensorOp::unary(s.clone()), x(s.a_shape(), 7)).multilinear()).collect();
    let two = vec![(TensorKey::var(0), tensor::<T>(vec![2, 3], 8)), (TensorKey::var(1), tensor::<T>(vec![2, 3], 9))];
    cases.push(RuleCase::new(TensorOp::Add, two.clone()).multilinear());
    cases.push(RuleCase::new(TensorOp::Add, two).multilinear().active(&[false, true]));
    for op in [TensorOp::Neg, TensorOp::Conj, TensorOp::Scale(T::from_parts(0.5, -1.5))] {
        cases.push(RuleCase::new(op, x(vec![3, 2], 10)).multilinear());
    }
    cases
}

#[test]
fn contraction_rules_real() {
    let r = check_rules(&contraction_cases::<f64>(), Tolerance::F64).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.cases, 3 * (CONTRACTIONS.len() + 3));
}

#[test]
fn contraction_rules_complex() {
    let r = check_rules(&contraction_cases::<c64>(), Tolerance::F64).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.cases, 3 * (CONTRACTIONS.len() + 3));
}

#[test]
fn unary_and_elementwise_rules() {
    let r = check_rules(&other_cases::<f64>(), Tolerance::F64).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.cases, 10);
    let r = check_rules(&other_cases::<c64>(), Tolerance::F64).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.cases, 10);
}
