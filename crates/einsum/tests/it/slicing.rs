//! Sliced contractions against unsliced ones: random networks sliced on random labels
//! (values, any split of the slice range, by sum and by output blocks, gradients against
//! the unsliced gradient and by the dot-product identity, value and gradients in one pass
//! against the separate calls, a scalar cotangent by blocks against the filled one), the greedy finder's plans against the memory limit and the
//! plain contraction's estimate, and every bad input as an error value.

use einsum::{
    ContractionPath, Einsum, EinsumError, EinsumOptions, Elem, MemoryLimit, OutputBlocks, PathChoice, SlicedEinsum,
    Slicing, Tensor, c64,
};
use proptest::prelude::*;

use crate::network::{assert_close, network, tensor};

fn labels_of(expr: &str) -> Vec<char> {
    let mut l: Vec<char> = expr.split("->").next().unwrap().chars().filter(|c| c.is_alphabetic()).collect();
    l.sort_unstable();
    l.dedup();
    l
}

fn operands<T: Elem>(shapes: &[Vec<usize>], seed: u64) -> Vec<Tensor<T>> {
    shapes.iter().enumerate().map(|(i, s)| tensor(s.clone(), seed + i as u64)).collect()
}

/// Every block of the cotangent `c` of an output `output` sliced (among `labels`) on its
/// own labels, stacked as `SlicedEinsum::eval_blocks` stacks the value.
fn cotangent_blocks<T: Elem>(c: &Tensor<T>, output: &str, labels: &[char]) -> OutputBlocks<T> {
    let in_output: Vec<char> = labels.iter().copied().filter(|l| output.contains(*l)).collect();
    if in_output.is_empty() {
        let mut shape = vec![1];
        shape.extend(c.shape());
        return OutputBlocks::new(0, Tensor::new(shape, c.data().to_vec()).unwrap());
    }
    let id = SlicedEinsum::<T>::new(
        &format!("{output}->{output}"),
        &[c.shape().to_vec()],
        PathChoice::Greedy,
        &EinsumOptions::default(),
        &Slicing::Labels(in_output),
    )
    .unwrap();
    id.eval_blocks(&[c], 0..id.plan().n_slices()).unwrap()
}

/// Sliced on `labels`: the value, a split of the range, and the gradients equal the
/// unsliced ones; the gradients pass the dot-product identity.
fn sliced_matches_unsliced<T: Elem>(
    expr: &str,
    shapes: &[Vec<usize>],
    path: PathChoice,
    labels: Vec<char>,
    split: u64,
) {
    let ops = operands::<T>(shapes, 1);
    let refs: Vec<&Tensor<T>> = ops.iter().collect();
    let plain = Einsum::<T>::new(expr, shapes, path.clone()).unwrap();
    let want = plain.eval(&refs).unwrap();
    let s = SlicedEinsum::<T>::new(expr, shapes, path, &EinsumOptions::default(), &Slicing::Labels(labels.clone()))
        .unwrap_or_else(|e| panic!("{expr} sliced on {labels:?}: {e}"));
    let what = format!("{expr} sliced on {labels:?}");
    assert_eq!(s.plan().labels(), labels.as_slice());
    assert_close(&s.eval(&refs).unwrap(), &want, &what);
    let n = s.plan().n_slices();
    let m = split % (n + 1);
    let parts = s.eval_slices(&refs, 0..m).unwrap().zip_with(&s.eval_slices(&refs, m..n).unwrap(), |a, b| a + b);
    assert_close(&parts.unwrap(), &want, &format!("{what}, split at {m}"));

    // By output blocks: the parts placed give the value; with the output's sliced labels
    // first in the plan, a part holds at most one block more than its slices fill.
    let blocks = [s.eval_blocks(&refs, 0..m).unwrap(), s.eval_blocks(&refs, m..n).unwrap()];
    assert_close(&s.assemble(&blocks).unwrap(), &want, &format!("{what}, blocks split at {m}"));
    let output = expr.split("->").nth(1).unwrap_or("");
    let in_output = labels.iter().take_while(|c| output.contains(**c)).count();
    if labels[in_output..].iter().all(|c| !output.contains(*c)) {
        let per_block = n / s.n_blocks();
        for (b, len) in blocks.iter().zip([m, n - m]) {
            let rows = b.blocks().shape()[0] as u64;
            assert!(
                rows <= len.div_ceil(per_block) + 1,
                "{what}: {rows} blocks for {len} slices of {per_block} per block"
            );
            assert_eq!(&b.blocks().shape()[1..], s.block_shape());
        }
    }

    let wrt: Vec<usize> = (0..shapes.len()).collect();
    let c = tensor::<T>(want.shape().to_vec(), 99);
    let g_want = plain.gradient(&wrt).unwrap().eval(&refs, &c).unwrap();
    let sg = s.gradient(&wrt).unwrap();
    let g = sg.eval(&refs, &c).unwrap();
    let g_parts = sg.eval_slices(&refs, &c, 0..m).unwrap();
    let g_rest = sg.eval_slices(&refs, &c, m..n).unwrap();
    // The value and the gradients in one pass equal the two separate calls, by sum and by blocks.
    let (v_one, g_one) = sg.eval_slices_with_value(&refs, &c, 0..m).unwrap();
    assert_close(&v_one, &s.eval_slices(&refs, 0..m).unwrap(), &format!("{what}: one-pass value"));
    let (b_one, g_rest_one) = sg.eval_blocks_with_value(&refs, &c, m..n).unwrap();
    assert_eq!(b_one.first(), blocks[1].first());
    assert_close(b_one.blocks(), blocks[1].blocks(), &format!("{what}: one-pass blocks"));
    for i in 0..shapes.len() {
        assert_close(&g_one[i], &g_parts[i], &format!("{what}: one-pass gradient {i}"));
        assert_close(&g_rest_one[i], &g_rest[i], &format!("{what}: one-pass gradient {i} by blocks"));
    }
    // The cotangent by blocks (cut by the identity sliced on the output's sliced labels)
    // gives the same value and gradients; without the blocks a range reads, an error.
    let c_blocks = cotangent_blocks(&c, output, &labels);
    let (b_by, g_by) = sg.eval_blocks_with_value_by_blocks(&refs, &c_blocks, m..n).unwrap();
    assert_eq!(b_by.first(), blocks[1].first());
    assert_close(b_by.blocks(), blocks[1].blocks(), &format!("{what}: value, cotangent by blocks"));
    for i in 0..shapes.len() {
        assert_close(&g_by[i], &g_rest[i], &format!("{what}: gradient {i}, cotangent by blocks"));
    }
    // A scalar cotangent by blocks (a tensor of shape `[]`) is that value everywhere: the
    // gradient of the output's shape gives bit for bit what the filled cotangent gives (it
    // reads the same values in one block), the gradient of the sum the same to rounding;
    // blocks given to the gradient of the sum are an error value.
    let x = tensor::<T>(vec![], 77);
    let c_filled = Tensor::filled(want.shape().to_vec(), x.data()[0]).unwrap();
    let (b_fill, g_fill) = sg.eval_blocks_with_value(&refs, &c_filled, m..n).unwrap();
    let scalar = OutputBlocks::new(5, x);
    let (b_s, g_s) = sg.eval_blocks_with_value_by_blocks(&refs, &scalar, m..n).unwrap();
    assert_eq!((b_s.first(), b_s.blocks()), (b_fill.first(), b_fill.blocks()), "{what}: scalar blocks, value");
    assert_eq!(g_s, g_fill, "{what}: scalar blocks, gradients");
    let sum = s.gradient_of_sum(&wrt).unwrap();
    let (b_sum, g_sum) = sum.eval_blocks_with_value_by_blocks(&refs, &scalar, m..n).unwrap();
    assert_eq!(b_sum.first(), b_fill.first());
    assert_close(b_sum.blocks(), b_fill.blocks(), &format!("{what}: scalar blocks, value of the sum's gradient"));
    for i in 0..shapes.len() {
        assert_close(&g_sum[i], &g_fill[i], &format!("{what}: scalar blocks, gradient {i} of the sum"));
    }
    if !want.shape().is_empty() {
        assert!(matches!(sum.eval_blocks_with_value_by_blocks(&refs, &c_blocks, m..n), Err(EinsumError::Shape(_))));
    }
    if m < n {
        let mut empty = vec![0];
        empty.extend(s.block_shape());
        let none = OutputBlocks::new(0, Tensor::new(empty, vec![]).unwrap());
        assert!(matches!(sg.eval_blocks_with_value_by_blocks(&refs, &none, m..n), Err(EinsumError::Shape(_))));
    }
    for i in 0..shapes.len() {
        assert_close(&g[i], &g_want[i], &format!("{what}: gradient {i}"));
        let sum = g_parts[i].zip_with(&g_rest[i], |a, b| a + b).unwrap();
        assert_close(&sum, &g_want[i], &format!("{what}: gradient {i} split at {m}"));
        // f is linear in each operand: ⟨c, f(.., v, ..)⟩ = ⟨∇_i, v⟩ for any direction v.
        let v = tensor::<T>(shapes[i].clone(), 50 + i as u64);
        let mut moved = refs.clone();
        moved[i] = &v;
        let lhs = c.inner(&s.eval(&moved).unwrap()).unwrap();
        let rhs = g[i].inner(&v).unwrap();
        assert!((lhs - rhs).abs() <= 1e-9 * (1.0 + lhs.abs()), "{what}: dot-product identity {i}: {lhs} vs {rhs}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn random_networks_sliced_on_random_labels_match_unsliced(
        (expr, shapes, path) in network(),
        pick in proptest::collection::vec(proptest::bool::ANY, 6),
        split in 0u64..1000,
    ) {
        let labels: Vec<char> = labels_of(&expr).into_iter().zip(&pick).filter(|(_, p)| **p).map(|(c, _)| c).collect();
        sliced_matches_unsliced::<f64>(&expr, &shapes, PathChoice::Greedy, labels.clone(), split);
        // The output's labels first: the order in which ranges touch few output blocks.
        let output = expr.split("->").nth(1).unwrap_or("").to_string();
        let (mut first, rest): (Vec<char>, Vec<char>) = labels.into_iter().partition(|c| output.contains(*c));
        first.extend(rest);
        sliced_matches_unsliced::<c64>(&expr, &shapes, PathChoice::Explicit(ContractionPath::new(path)), first, split);
    }

    #[test]
    fn greedy_plans_fit_the_limit_or_say_why(
        (expr, shapes, _) in network(),
        fraction in 0.0f64..1.0,
        gradient in proptest::bool::ANY,
    ) {
        let plain = Einsum::<f64>::new(&expr, &shapes, PathChoice::Greedy).unwrap();
        let none = SlicedEinsum::<f64>::new(&expr, &shapes, PathChoice::Greedy, &EinsumOptions::default(), &Slicing::None).unwrap();
        // The plan's estimate of the unsliced run is the contraction's own.
        prop_assert_eq!(none.plan().peak_bytes(), plain.peak_bytes());
        let limit = (plain.peak_bytes() as f64 * fraction) as u64;
        let options = EinsumOptions::default().memory_limit(MemoryLimit::Bytes(limit));
        match SlicedEinsum::<f64>::new(&expr, &shapes, PathChoice::Greedy, &options, &Slicing::Memory { gradient }) {
            Ok(s) => {
                let p = s.plan();
                prop_assert!(p.peak_bytes() <= limit, "{:?} over {}", p, limit);
                if gradient {
                    prop_assert!(p.gradient_peak_bytes() <= limit, "{:?} over {}", p, limit);
                    prop_assert!(s.gradient(&[0]).is_ok());
                }
                prop_assert!(p.overhead() >= 1.0 - 1e-12);
                let ops = operands::<f64>(&shapes, 3);
                let refs: Vec<&Tensor<f64>> = ops.iter().collect();
                assert_close(&s.eval(&refs).unwrap(), &plain.eval(&refs).unwrap(), &expr);
            }
            Err(EinsumError::Memory { .. }) => {}
            Err(e) => prop_assert!(false, "{}: {}", expr, e),
        }
    }
}

#[test]
fn the_greedy_finder_slices_only_what_the_target_needs() {
    // "ai,bi,aj,bj->": the intermediate ab (64x64) dwarfs the operands (64x2 each).
    let shapes = vec![vec![64, 2]; 4];
    let path = PathChoice::Explicit(ContractionPath::new(vec![[0, 1], [0, 1], [0, 1]]));
    let plain = Einsum::<f64>::new("ai,bi,aj,bj->", &shapes, path.clone()).unwrap();
    let limit = plain.peak_bytes() / 4;
    let options = EinsumOptions::default().memory_limit(MemoryLimit::Bytes(limit));
    let s = SlicedEinsum::<f64>::new(
        "ai,bi,aj,bj->",
        &shapes,
        path.clone(),
        &options,
        &Slicing::Memory { gradient: false },
    )
    .unwrap();
    let p = s.plan();
    assert_eq!(p.labels().len(), 1, "{p:?}");
    assert!(matches!(p.labels()[0], 'a' | 'b'), "{p:?}");
    assert!(p.peak_bytes() <= limit && p.n_slices() == 64, "{p:?}");
    // Every step of this path holds `a` and `b`: slicing either repeats no work.
    assert!(p.overhead() < 1.1, "{p:?}");
    // cotengra's target_size: the largest intermediate in elements.
    let t = SlicedEinsum::<f64>::new(
        "ai,bi,aj,bj->",
        &shapes,
        path,
        &EinsumOptions::default(),
        &Slicing::LargestIntermediate(64),
    )
    .unwrap();
    assert!(t.plan().largest_intermediate() <= 64.0, "{:?}", t.plan());
}

#[test]
fn bad_slicing_input_is_an_error_value() {
    let shapes = [vec![4, 4], vec![4, 4]];
    let opts = EinsumOptions::default();
    let new = |s: Slicing, o: &EinsumOptions| SlicedEinsum::<f64>::new("ij,jk->ik", &shapes, PathChoice::Greedy, o, &s);
    let msg = |r: Result<SlicedEinsum<f64>, EinsumError>| r.err().expect("an error").to_string();
    let e = msg(new(Slicing::Labels(vec!['z']), &opts));
    assert!(e.contains("slicing error: cannot slice label `z`: `ij,jk->ik` has no such label"), "{e}");
    let e = msg(new(Slicing::Labels(vec!['j', 'j']), &opts));
    assert!(e.contains("label `j` is listed twice"), "{e}");
    // An outer product: its output (128 bytes) is held whole whatever is sliced.
    let e = SlicedEinsum::<f64>::new(
        "i,j->ij",
        &[vec![4], vec![4]],
        PathChoice::Greedy,
        &EinsumOptions::default().memory_limit(MemoryLimit::Bytes(100)),
        &Slicing::Memory { gradient: false },
    )
    .err()
    .unwrap();
    assert!(matches!(e, EinsumError::Memory { .. }), "{e}");
    let m = e.to_string();
    assert!(
        m.contains("the output of `i,j->ij` of shape [4, 4], held whole") && m.contains("whatever is sliced"),
        "{m}"
    );
    // Operands over the limit alone are named as the plain contraction names them.
    let e =
        msg(new(Slicing::Memory { gradient: false }, &EinsumOptions::default().memory_limit(MemoryLimit::Bytes(100))));
    assert!(e.contains("operand 0 of shape [4, 4] needs 128 bytes"), "{e}");
    // The operands and the output together (384 bytes).
    let e =
        msg(new(Slicing::Memory { gradient: false }, &EinsumOptions::default().memory_limit(MemoryLimit::Bytes(300))));
    assert!(e.contains("the operands and the output of `ij,jk->ik`, held whole"), "{e}");
    let e = msg(new(Slicing::LargestIntermediate(4), &opts));
    assert!(e.contains("has 16 elements, held whole: more than the target of 4 elements"), "{e}");
    // Operands that fit, gradients beside them that do not.
    let e =
        msg(new(Slicing::Memory { gradient: true }, &EinsumOptions::default().memory_limit(MemoryLimit::Bytes(400))));
    assert!(e.contains("the gradient of `ij,jk->ik`: the operands and their gradients, held whole"), "{e}");
    // What is held whole fits (operands and output: 49 elements, 392 bytes, of 400) but
    // not one slice beside it, even with every label sliced (its operand copies and
    // intermediates); unsliced, the intermediate `ab` does not fit either.
    let e = SlicedEinsum::<f64>::new(
        "ai,bi,ab->",
        &[vec![4, 4], vec![4, 4], vec![4, 4]],
        PathChoice::Greedy,
        &EinsumOptions::default().memory_limit(MemoryLimit::Bytes(400)),
        &Slicing::Memory { gradient: false },
    );
    let e = msg(e);
    assert!(e.contains("one slice of `ai,bi,ab->` even with every label sliced (64 slices)"), "{e}");
    // Explicit labels that leave a slice over the limit.
    let small = EinsumOptions::default().memory_limit(MemoryLimit::Bytes(300));
    let e = msg(new(Slicing::Labels(vec!['j']), &small));
    assert!(e.contains("one slice of `ij,jk->ik` sliced on `j`"), "{e}");
    // A range past the slice count, operands of the wrong shape, a wrong cotangent.
    let s = new(Slicing::Labels(vec!['i']), &opts).unwrap();
    let a = Tensor::<f64>::ones(vec![4, 4]).unwrap();
    let e = s.eval_slices(&[&a, &a], 2..5).err().unwrap();
    assert!(matches!(e, EinsumError::Slice(_)) && e.to_string().contains("2..5 is not within 0..4"), "{e}");
    #[allow(clippy::reversed_empty_ranges)]
    let backwards = 3..1;
    assert!(s.eval_slices(&[&a, &a], backwards).is_err());
    let b = Tensor::<f64>::ones(vec![4, 3]).unwrap();
    assert!(s.eval(&[&a, &b]).err().unwrap().to_string().contains("operand 1"));
    let g = s.gradient(&[0]).unwrap();
    assert!(g.eval(&[&a, &a], &b).err().unwrap().to_string().contains("cotangent"));
    // A gradient whose reverse pass does not fit the slices planned for the forward pass.
    let shapes = vec![vec![64, 2]; 4];
    let path = PathChoice::Explicit(ContractionPath::new(vec![[0, 1], [0, 1], [0, 1]]));
    let sliced = |o: &EinsumOptions| {
        SlicedEinsum::<f64>::new("ai,bi,aj,bj->", &shapes, path.clone(), o, &Slicing::Labels(vec!['a'])).unwrap()
    };
    let forward = sliced(&opts).plan().peak_bytes();
    let s = sliced(&EinsumOptions::default().memory_limit(MemoryLimit::Bytes(forward)));
    let e = s.gradient(&[0, 1, 2, 3]).err().unwrap().to_string();
    assert!(e.contains("the gradient of one slice") && e.contains("gradient: true"), "{e}");
}

/// An expression with an ellipsis runs unsliced when it fits, and asking to slice it is an
/// error that names the ellipsis (its axes are not in the slice finder's network).
#[test]
fn an_ellipsis_expression_runs_unsliced_or_refuses_slicing() {
    let shapes = vec![vec![2, 3, 4], vec![2, 4, 5]];
    let options = einsum::EinsumOptions::default();
    let e = einsum::SlicedEinsum::<f64>::new(
        "...ij,...jk->...ik",
        &shapes,
        einsum::PathChoice::Greedy,
        &options,
        &einsum::Slicing::None,
    )
    .expect("unsliced");
    assert_eq!(e.output_shape(), &[2, 3, 5]);
    // Unsliced, the one block is the whole output, and its value comes with the gradient.
    let ops = operands::<f64>(&shapes, 4);
    let refs: Vec<&Tensor<f64>> = ops.iter().collect();
    let want = e.eval(&refs).unwrap();
    let blocks = e.eval_blocks(&refs, 0..1).unwrap();
    assert_eq!((e.n_blocks(), blocks.first(), blocks.blocks().shape()), (1, 0, &[1, 2, 3, 5][..]));
    assert_close(&e.assemble(&[blocks]).unwrap(), &want, "ellipsis blocks");
    let c = tensor::<f64>(vec![2, 3, 5], 7);
    let g = e.gradient(&[0, 1]).unwrap();
    let (value, grads) = g.eval_slices_with_value(&refs, &c, 0..1).unwrap();
    assert_close(&value, &want, "ellipsis one-pass value");
    for (got, w) in grads.iter().zip(&g.eval(&refs, &c).unwrap()) {
        assert_close(got, w, "ellipsis one-pass gradient");
    }
    assert!(e.assemble(&[e.eval_blocks(&refs, 0..0).unwrap(), e.eval_blocks(&refs, 0..1).unwrap()]).is_ok());
    let wrong = einsum::SlicedEinsum::<f64>::new(
        "ij,jk->ik",
        &[vec![2, 2], vec![2, 2]],
        einsum::PathChoice::Greedy,
        &options,
        &einsum::Slicing::Labels(vec!['i']),
    )
    .unwrap();
    let err = wrong.assemble(&[e.eval_blocks(&refs, 0..1).unwrap()]).unwrap_err();
    assert!(err.to_string().contains("do not fit"), "{err}");
    let err = einsum::SlicedEinsum::<f64>::new(
        "...ij,...jk->...ik",
        &shapes,
        einsum::PathChoice::Greedy,
        &options,
        &einsum::Slicing::Labels(vec!['j']),
    )
    .err()
    .expect("slicing an ellipsis expression is refused");
    assert!(err.to_string().contains("ellipsis"), "{err}");
}
