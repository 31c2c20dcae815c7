//! Tests: the kernels against the plain reference on random specs in the general form
//! (repeated labels, output diagonals, broadcasts, sums), every kernel forced, real and
//! complex. A unit-test module, because the kernels and their forced choices are the
//! crate's own (the public surface is `TensorOp`, `ContractSpec` and `UnarySpec`).

use proptest::prelude::*;

use crate::kernel::{ContractSpec, KernelChoice, UnarySpec, contract_using, unary};
use crate::{Elem, Tensor, c64, reference_labels};

fn tensor<T: Elem>(shape: Vec<usize>, seed: u64) -> Tensor<T> {
    let mut x = seed as f64;
    Tensor::from_fn(shape, |_| {
        x += 1.0;
        T::from_parts((x * 0.731).sin(), (x * 0.377).cos())
    })
    .unwrap()
}

fn shape(labels: &[u32], sizes: &[usize]) -> Vec<usize> {
    labels.iter().map(|&c| sizes[c as usize]).collect()
}

fn close<T: Elem>(got: &Tensor<T>, want: &Tensor<T>) -> Result<(), String> {
    match got.max_abs_diff(want) {
        Some(e) if e <= 1e-12 * (1.0 + want.max_abs()) * (1 + want.len()) as f64 => Ok(()),
        e => Err(format!("got {got:?}, want {want:?}, max diff {e:?}")),
    }
}

fn labels(n: usize) -> impl Strategy<Value = Vec<u32>> {
    proptest::collection::vec(0u32..5, 0..=n)
}

fn check_contract<T: Elem>(a: &[u32], b: &[u32], out: &[u32], sizes: &[usize]) -> Result<(), TestCaseError> {
    check_contract_conj::<T>(a, b, out, sizes, [false; 2])
}

fn check_contract_conj<T: Elem>(
    a: &[u32],
    b: &[u32],
    out: &[u32],
    sizes: &[usize],
    conj: [bool; 2],
) -> Result<(), TestCaseError> {
    let spec = ContractSpec::new(a, b, out, sizes).unwrap().with_conj(conj);
    let ta = tensor::<T>(shape(a, sizes), 1);
    let tb = tensor::<T>(shape(b, sizes), 2);
    // The reference sees the conjugated values.
    let op = |t: &Tensor<T>, c: bool| if c { t.map(|x| x.conj()) } else { t.clone() };
    let want = reference_labels(&[(&op(&ta, conj[0]), a), (&op(&tb, conj[1]), b)], out, sizes).unwrap();
    for choice in [KernelChoice::Direct, KernelChoice::Gemm, KernelChoice::GemmBatchLoop, KernelChoice::Auto] {
        let got = contract_using(&spec, &ta, &tb, choice);
        close(&got, &want).map_err(|e| TestCaseError::fail(format!("{spec:?} {choice:?}: {e}")))?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn contraction_matches_reference(
        a in labels(4), b in labels(4), out in labels(3),
        sizes in proptest::collection::vec(0usize..4, 5),
    ) {
        check_contract::<f64>(&a, &b, &out, &sizes)?;
        check_contract::<c64>(&a, &b, &out, &sizes)?;
    }

    /// Labels of up to 11: the direct loop's innermost passes on both sides of its short
    /// form (passes of up to 8 index, longer ones run on strided iterators).
    #[test]
    fn contractions_with_long_passes_match_reference(
        a in labels(3), b in labels(3), out in labels(2),
        sizes in proptest::collection::vec(1usize..12, 5),
    ) {
        check_contract::<f64>(&a, &b, &out, &sizes)?;
        check_contract::<c64>(&a, &b, &out, &sizes)?;
    }

    #[test]
    fn conjugated_contractions_match_reference(
        a in labels(4), b in labels(4), out in labels(3),
        sizes in proptest::collection::vec(1usize..4, 5),
        ca in proptest::bool::ANY, cb in proptest::bool::ANY,
    ) {
        check_contract_conj::<c64>(&a, &b, &out, &sizes, [ca, cb])?;
        check_contract_conj::<f64>(&a, &b, &out, &sizes, [ca, cb])?;
    }

    #[test]
    fn unary_matches_reference(a in labels(4), out in labels(4), sizes in proptest::collection::vec(1usize..4, 5)) {
        let spec = UnarySpec::new(&a, &out, &sizes).unwrap();
        let t = tensor::<c64>(shape(&a, &sizes), 3);
        let want = reference_labels(&[(&t, &a)], &out, &sizes).unwrap();
        close(&unary(&spec, &t), &want).map_err(TestCaseError::fail)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    /// The direct loop's strided innermost passes (`direct_run`), each form of it: label 0
    /// is long (16 to 40), so it is moved inside and read at strides beside short labels;
    /// sums kept in a register (`ab,ab->b`, `b,ab->b`), an output written at a stride from
    /// both operands, one or none (`ab,cdba->acd` with `b` summed around it, `b,ab->ab`,
    /// `ab,b->ab`, `b,b->ab`).
    #[test]
    fn direct_loops_with_a_long_label_match_reference(
        long in 16usize..40, short in proptest::collection::vec(1usize..5, 3),
    ) {
        let sizes: Vec<usize> = std::iter::once(long).chain(short).collect();
        let forms: [(&[u32], &[u32], &[u32]); 6] = [
            (&[0, 1], &[2, 3, 1, 0], &[0, 2, 3]),
            (&[0, 1], &[0, 1], &[1]),
            (&[1], &[0, 1], &[1]),
            (&[1], &[0, 1], &[0, 1]),
            (&[0, 1], &[1], &[0, 1]),
            (&[1], &[1], &[0, 1]),
        ];
        for (a, b, out) in forms {
            let spec = ContractSpec::new(a, b, out, &sizes).unwrap();
            let (ta, tb) = (tensor::<f64>(shape(a, &sizes), 1), tensor::<f64>(shape(b, &sizes), 2));
            let want = reference_labels(&[(&ta, a), (&tb, b)], out, &sizes).unwrap();
            close(&contract_using(&spec, &ta, &tb, KernelChoice::Direct), &want)
                .map_err(|e| TestCaseError::fail(format!("{spec:?}: {e}")))?;
        }
    }
}

#[test]
fn gemm_sizes_match_reference() {
    // Large enough for the automatic choice to take the GEMM path, with batch, permuted
    // operands, a label summed in one operand and a permuted output.
    let sizes = [17, 16, 18, 3, 2];
    check_contract::<f64>(&[3, 1, 0], &[3, 2, 1], &[3, 0, 2], &sizes).unwrap();
    check_contract::<c64>(&[1, 0, 4], &[2, 1], &[2, 0], &sizes).unwrap();
    // An output whose left and right labels interleave: one is looped around the GEMMs.
    check_contract::<f64>(&[0, 3, 1, 4], &[1, 2, 4], &[3, 2, 0], &[17, 16, 18, 3, 2]).unwrap();
    check_contract_conj::<c64>(&[3, 1, 0], &[3, 2, 1], &[3, 0, 2], &sizes, [true, false]).unwrap();
    check_contract_conj::<c64>(&[1, 0], &[2, 1], &[2, 0], &sizes, [false, true]).unwrap();
}

/// Distinct labels: the first `n` of a shuffle of `0..6` given by sort keys.
fn distinct(keys: &[u32], n: usize) -> Vec<u32> {
    let mut l: Vec<u32> = (0..keys.len() as u32).collect();
    l.sort_by_key(|&c| keys[c as usize]);
    l.truncate(n);
    l
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Contractions that sum nothing (products, broadcasts, outer products, permuted
    /// outputs) take the element-wise kernel, and equal the reference, conjugated or not;
    /// outputs of a million elements or more split over a pool's threads the same way.
    #[test]
    fn elementwise_contractions_match_reference(
        out_keys in proptest::collection::vec(0u32..1000, 6),
        a_keys in proptest::collection::vec(0u32..1000, 6),
        b_keys in proptest::collection::vec(0u32..1000, 6),
        n_out in 0usize..=6, n_a in 0usize..=6, n_b in 0usize..=6,
        sizes in proptest::collection::vec(0usize..5, 6),
        ca in proptest::bool::ANY, cb in proptest::bool::ANY,
    ) {
        let out = distinct(&out_keys, n_out);
        // `a` and `b`: distinct labels of the output, each in an order of its own.
        let pick = |keys: &[u32], n: usize| -> Vec<u32> {
            distinct(keys, 6).into_iter().filter(|c| out.contains(c)).take(n).collect()
        };
        let (a, b) = (pick(&a_keys, n_a), pick(&b_keys, n_b));
        let spec = ContractSpec::new(&a, &b, &out, &sizes).unwrap();
        prop_assert!(crate::elementwise::ElementwisePlan::new(spec.a_labels(), spec.b_labels(), spec.out_labels(), spec.sizes()).is_some());
        check_contract_conj::<c64>(&a, &b, &out, &sizes, [ca, cb])?;
        check_contract_conj::<f64>(&a, &b, &out, &sizes, [ca, cb])?;
    }
}

/// A large element-wise product (over [`crate::elementwise::PAR_ELEMENTWISE_MIN_ELEMENTS`])
/// in a pool of three threads, cut into chunks, equals the one-thread result bit for bit.
#[test]
fn large_elementwise_products_in_chunks_match_one_thread() {
    // `ijk,kj->ikj`: `b` broadcast along `i` and permuted.
    let sizes = [130, 91, 97];
    let spec = ContractSpec::new(&[0, 1, 2], &[2, 1], &[0, 2, 1], &sizes).unwrap();
    let (a, b) = (tensor::<f64>(spec.a_shape(), 1), tensor::<f64>(spec.b_shape(), 2));
    let one = contract_using(&spec, &a, &b, KernelChoice::Auto);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
    let many = pool.install(|| contract_using(&spec, &a, &b, KernelChoice::Auto));
    assert_eq!(one, many);
    let want = reference_labels(&[(&a, &[0, 1, 2]), (&b, &[2, 1])], &[0, 2, 1], &sizes).unwrap();
    close(&one, &want).unwrap();
}

/// Loops of GEMMs too small to split each (`bij,bjk->bik` of 64 products of 32³, and the
/// same with the batch label inside the output or two batch labels) spread their leading
/// label over a pool's threads where it leads the output; every GEMM still runs whole on
/// one thread, so the result equals the one-thread one bit for bit.
#[test]
fn batches_of_gemms_in_a_pool_match_one_thread() {
    let sizes = [64, 32, 32, 32, 3];
    let cases: [(&[u32], &[u32], &[u32]); 4] = [
        (&[0, 1, 2], &[0, 2, 3], &[0, 1, 3]),
        (&[0, 1, 2], &[0, 2, 3], &[1, 0, 3]),
        (&[4, 0, 1, 2], &[4, 0, 2, 3], &[4, 0, 1, 3]),
        (&[0, 4, 1, 2], &[0, 2, 3], &[0, 1, 3]),
    ];
    let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
    for (la, lb, lo) in cases {
        let spec = ContractSpec::new(la, lb, lo, &sizes).unwrap();
        let (a, b) = (tensor::<f64>(spec.a_shape(), 1), tensor::<f64>(spec.b_shape(), 2));
        let one = contract_using(&spec, &a, &b, KernelChoice::Auto);
        let many = pool.install(|| contract_using(&spec, &a, &b, KernelChoice::Auto));
        assert_eq!(one, many, "{spec:?}");
        let want = reference_labels(&[(&a, la), (&b, lb)], lo, &sizes).unwrap();
        close(&one, &want).unwrap();
    }
}
