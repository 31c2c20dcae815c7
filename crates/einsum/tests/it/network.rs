//! Contraction graphs against the plain reference: fixed expressions (traces, Unicode
//! labels, single operands, outer and batched products), random networks with greedy and
//! random explicit paths, the caches, and errors.

use einsum::{
    ContractionPath, Einsum, EinsumCache, EinsumError, EinsumOptions, Elem, MemoryLimit, PathChoice, Tensor, c64,
    reference_einsum,
};
use proptest::prelude::*;

pub fn tensor<T: Elem>(shape: Vec<usize>, seed: u64) -> Tensor<T> {
    let mut x = seed as f64 * 7.0;
    Tensor::from_fn(shape, |_| {
        x += 1.0;
        T::from_parts((x * 0.731).sin(), (x * 0.377).cos())
    })
    .unwrap()
}

pub fn assert_close<T: Elem>(got: &Tensor<T>, want: &Tensor<T>, what: &str) {
    let err =
        got.max_abs_diff(want).unwrap_or_else(|| panic!("{what}: shapes {:?} vs {:?}", got.shape(), want.shape()));
    assert!(err <= 1e-10 * (1.0 + want.max_abs()), "{what}: max diff {err:e}\n got {got:?}\nwant {want:?}");
}

fn check<T: Elem>(expr: &str, shapes: &[Vec<usize>], path: PathChoice) {
    let ops: Vec<Tensor<T>> = shapes.iter().enumerate().map(|(i, s)| tensor(s.clone(), i as u64)).collect();
    let refs: Vec<&Tensor<T>> = ops.iter().collect();
    let e = Einsum::<T>::new(expr, shapes, path).unwrap_or_else(|e| panic!("{expr}: {e}"));
    let got = e.eval(&refs).unwrap();
    assert_close(&got, &reference_einsum(expr, &refs).unwrap(), expr);
}

#[test]
fn fixed_expressions_match_reference() {
    let cases: &[(&str, &[&[usize]])] = &[
        ("ab,bc->ac", &[&[2, 3], &[3, 4]]),
        ("ab,bc->ca", &[&[2, 3], &[3, 4]]),
        ("bij,bjk->bik", &[&[3, 2, 4], &[3, 4, 2]]),
        ("ii->", &[&[3, 3]]),
        ("ii->i", &[&[3, 3]]),
        ("ii,ij->j", &[&[3, 3], &[3, 2]]),
        ("ab->ba", &[&[2, 3]]),
        ("ab->ab", &[&[2, 3]]),
        ("abc->", &[&[2, 3, 4]]),
        ("a,b->ab", &[&[2], &[3]]),
        ("a,b,c", &[&[2], &[3], &[2]]),
        ("ab,ab->ab", &[&[2, 3], &[2, 3]]),
        ("abc,cd,da->b", &[&[2, 3, 4], &[4, 5], &[5, 2]]),
        ("ÁÂ,ÂÃ,Ãé->Áé", &[&[2, 3], &[3, 4], &[4, 2]]),
        (",ab->ba", &[&[], &[2, 3]]),
        ("ab,cd->", &[&[2, 3], &[3, 2]]),
        ("ab,bc,cd,de,ea->", &[&[2, 3], &[3, 4], &[4, 2], &[2, 3], &[3, 2]]),
    ];
    for &(expr, shapes) in cases {
        let shapes: Vec<Vec<usize>> = shapes.iter().map(|s| s.to_vec()).collect();
        check::<f64>(expr, &shapes, PathChoice::Greedy);
        check::<c64>(expr, &shapes, PathChoice::Greedy);
        // The path that contracts the last two operands first (reversed order).
        let n = shapes.len();
        let steps: Vec<[usize; 2]> = (0..n.saturating_sub(1)).map(|s| [n - 2 - s, n - 1 - s]).collect();
        check::<c64>(expr, &shapes, PathChoice::Explicit(ContractionPath::new(steps)));
    }
}

#[test]
fn gemm_sized_steps_match_reference() {
    let shapes = vec![vec![20, 24], vec![24, 3, 18], vec![18, 20]];
    check::<f64>("ab,bcd,de->ace", &shapes, PathChoice::Greedy);
    check::<c64>("ab,bcd,de->eca", &shapes, PathChoice::Explicit(ContractionPath::new(vec![[1, 2], [0, 1]])));
}

/// A random network: `n` operands over `labels` labels, each operand 0..=3 labels.
pub fn network() -> impl Strategy<Value = (String, Vec<Vec<usize>>, Vec<[usize; 2]>)> {
    (2usize..=5, 2u32..=6)
        .prop_flat_map(|(n, nl)| {
            (
                proptest::collection::vec(proptest::collection::vec(0..nl, 0..=3), n),
                proptest::collection::vec(proptest::bool::ANY, nl as usize),
                proptest::collection::vec(1usize..=3, nl as usize),
                proptest::collection::vec((0usize..100, 0usize..100), n - 1),
            )
        })
        .prop_map(|(ops, keep, sizes, raw_path)| {
            let letter = |c: u32| char::from_u32('a' as u32 + c).unwrap();
            let present: Vec<u32> = {
                let mut p: Vec<u32> = ops.iter().flatten().copied().collect();
                p.sort_unstable();
                p.dedup();
                p
            };
            let out: String = present.iter().filter(|&&c| keep[c as usize]).map(|&c| letter(c)).collect();
            let ins: Vec<String> = ops.iter().map(|l| l.iter().map(|&c| letter(c)).collect()).collect();
            let expr = format!("{}->{out}", ins.join(","));
            let shapes = ops.iter().map(|l| l.iter().map(|&c| sizes[c as usize]).collect()).collect();
            // Map raw pairs onto valid positions of the shrinking list.
            let mut live = ops.len();
            let path = raw_path
                .into_iter()
                .map(|(i, j)| {
                    let i = i % live;
                    let j = (i + 1 + j % (live - 1)) % live;
                    live -= 1;
                    [i, j]
                })
                .collect();
            (expr, shapes, path)
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_networks_match_reference((expr, shapes, path) in network()) {
        check::<f64>(&expr, &shapes, PathChoice::Greedy);
        check::<c64>(&expr, &shapes, PathChoice::Explicit(ContractionPath::new(path)));
    }
}

#[test]
fn cache_reuses_compiled_expressions() {
    let cache = EinsumCache::<f64>::new(8);
    let shapes = vec![vec![2, 3], vec![3, 4], vec![4, 5]];
    let a = cache.get("ab,bc,cd->ad", &shapes, PathChoice::Greedy).unwrap();
    let b = cache.get("ab,bc,cd->ad", &shapes, PathChoice::Greedy).unwrap();
    assert!(std::sync::Arc::ptr_eq(&a, &b));
    // Other letters, same structure: a new expression, the same program.
    let c = cache.get("xy,yz,zw->xw", &shapes, PathChoice::Greedy).unwrap();
    assert!(std::sync::Arc::ptr_eq(a.program(), c.program()));
    let stats = cache.program_stats();
    assert_eq!((stats.hits, stats.misses), (1, 1));
    assert!(cache.get("ab,bc,cd->ad", &[vec![2, 3]], PathChoice::Greedy).is_err());
    // Bounded: the oldest expressions go first.
    let small = EinsumCache::<f64>::new(2);
    for n in 2..6 {
        small.get("ab,bc->ac", &[vec![n, 3], vec![3, 4]], PathChoice::Greedy).unwrap();
    }
    assert_eq!(small.len(), 2);
}

#[test]
fn user_errors_are_values() {
    let shapes = vec![vec![2, 3], vec![3, 4]];
    let e = Einsum::<f64>::new("ab,bc->ac", &shapes, PathChoice::Greedy).unwrap();
    let (a, b) = (tensor::<f64>(vec![2, 3], 0), tensor::<f64>(vec![3, 4], 1));
    let msg = |r: Result<Tensor<f64>, EinsumError>| r.unwrap_err().to_string();
    assert!(msg(e.eval(&[&a])).contains("takes 2 operands but 1 were given"));
    assert!(msg(e.eval(&[&b, &a])).contains("operand 0 of `ab,bc->ac` has shape [3, 4]"));
    let build = |x: &str, s: &[Vec<usize>], p| Einsum::<f64>::new(x, s, p).err().unwrap().to_string();
    assert!(build("ab,bc->ad", &shapes, PathChoice::Greedy).contains("`d` appears in no operand"));
    assert!(build("ab,bc->ac", &[vec![2, 3], vec![4, 4]], PathChoice::Greedy).contains("label `b`"));
    let path = |s: Vec<[usize; 2]>| PathChoice::Explicit(ContractionPath::new(s));
    assert!(build("ab,bc->ac", &shapes, path(vec![[0, 1], [0, 1]])).contains("step 1"));
    assert!(build("ab,bc->ac", &shapes, path(vec![])).contains("uncontracted"));
    assert!(build("ab,bc->ac", &[], PathChoice::Greedy).contains("2 operands but 0 shapes"));
}

#[test]
fn parallel_evaluation_matches_sequential() {
    // Two independent 48³ products, then their product: the first level is split.
    let shapes = vec![vec![48, 48]; 4];
    let path = PathChoice::Explicit(ContractionPath::new(vec![[0, 1], [0, 1], [0, 1]]));
    let e = Einsum::<f64>::new("ab,bc,cd,de->ae", &shapes, path).unwrap();
    let ops: Vec<Tensor<f64>> = (0..4).map(|i| tensor(vec![48, 48], i)).collect();
    let refs: Vec<&Tensor<f64>> = ops.iter().collect();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    let par = e.eval_parallel(Some(&pool), &refs).unwrap();
    assert_close(&par, &e.eval(&refs).unwrap(), "parallel");
    assert!(e.eval_parallel(Some(&pool), &refs[..3]).is_err());
}

/// The message of a memory error, after checking the variant.
fn memory_error<T: Elem>(r: Result<Einsum<T>, EinsumError>) -> String {
    match r {
        Err(e @ EinsumError::Memory { .. }) => e.to_string(),
        Err(e) => panic!("not a memory error: {e}"),
        Ok(_) => panic!("accepted"),
    }
}

#[test]
fn sizes_beyond_the_memory_limit_are_errors_naming_the_tensor_and_the_bytes() {
    let g = PathChoice::Greedy;
    // The cases of issue 19: a dimension of 2^40, a 2^20 × 2^20 operand, a 2^40-element result.
    let e = memory_error(Einsum::<f64>::new("i->", &[vec![1 << 40]], g.clone()));
    assert_eq!(e, "memory limit exceeded: operand 0 of shape [1099511627776] needs 8 TiB, over the limit of 8 GiB");
    let e = memory_error(Einsum::<f64>::new("ij->", &[vec![1 << 20, 1 << 20]], g.clone()));
    assert!(e.contains("operand 0 of shape [1048576, 1048576] needs 8 TiB"), "{e}");
    let e = memory_error(Einsum::<c64>::new("i,j->ij", &[vec![1 << 20], vec![1 << 20]], g.clone()));
    assert!(e.contains("the output of step 0 of the path") && e.contains("needs 16 TiB"), "{e}");
    let e = memory_error(Einsum::<f64>::new("ij->", &[vec![1 << 40, 1 << 40]], g.clone()));
    assert!(e.contains("needs more than 2^64 bytes"), "{e}");

    // A smaller limit: an intermediate (the outer product of operands 0 and 2, 2 KiB).
    let shapes = [vec![4, 4], vec![4, 4], vec![4, 4]];
    let outer = PathChoice::Explicit(ContractionPath::new(vec![[0, 2], [0, 1]]));
    let small = |bytes| EinsumOptions::default().memory_limit(MemoryLimit::Bytes(bytes));
    let e = memory_error(Einsum::<f64>::with_options("ij,jk,kl->il", &shapes, outer.clone(), &small(1024)));
    assert!(e.contains("the intermediate of step 0 of the path (operands 0 and 2 of 3) of shape [4, 4, 4, 4]"), "{e}");
    assert!(e.contains("needs 2 KiB, over the limit of 1 KiB"), "{e}");
    // Each tensor fits, all of them alive together do not: three 128-byte operands and the
    // 2 KiB intermediate.
    let e = memory_error(Einsum::<f64>::with_options("ij,jk,kl->il", &shapes, outer.clone(), &small(2048)));
    assert!(e.contains("with the tensors alive beside it") && e.contains("2.4 KiB (2432 bytes)"), "{e}");
    let ok = Einsum::<f64>::with_options("ij,jk,kl->il", &shapes, outer, &small(4096)).unwrap();
    assert_eq!(ok.peak_bytes(), 3 * 128 + 2048 + 128);
    // The better path needs far less.
    let chain = Einsum::<f64>::with_options("ij,jk,kl->il", &shapes, g.clone(), &small(1024)).unwrap();
    let ops: Vec<Tensor<f64>> = (0..3).map(|i| tensor(vec![4, 4], i)).collect();
    let r = chain.eval(&[&ops[0], &ops[1], &ops[2]]).unwrap();
    assert_close(&r, &reference_einsum("ij,jk,kl->il", &[&ops[0], &ops[1], &ops[2]]).unwrap(), "under the limit");

    // The gradient keeps the forward intermediates and their cotangents: it can exceed a
    // limit the forward pass fits.
    let mm =
        Einsum::<f64>::with_options("ij,jk->ik", &[vec![64, 64], vec![64, 64]], g.clone(), &small(128 << 10)).unwrap();
    let e = mm.gradient(&[0, 1]).err().expect("over the limit");
    assert!(matches!(e, EinsumError::Memory { .. }) && e.to_string().contains("the gradient"), "{e}");
    assert!(mm.gradient(&[0]).is_err() && mm.hvp(&[0]).is_err());

    // No limit: the check is what rejected the networks above (building allocates no tensor).
    let unlimited = EinsumOptions::default().memory_limit(MemoryLimit::Unlimited);
    assert!(Einsum::<f64>::with_options("i,j->ij", &[vec![1 << 20], vec![1 << 20]], g, &unlimited).is_ok());
}

#[test]
fn constructors_refuse_what_the_allocator_cannot_give() {
    // 2^50 elements: 8 PiB, more than any address space; an error, not an abort.
    let e = Tensor::<f64>::zeros(vec![1 << 40, 1 << 10]).unwrap_err();
    assert!(matches!(e, EinsumError::Memory { limit: None, .. }), "{e}");
    assert!(e.to_string().contains("which the allocator refused"), "{e}");
    assert!(Tensor::<c64>::ones(vec![1 << 40, 1 << 10]).is_err());
    assert!(Tensor::<f64>::from_fn(vec![1 << 40, 1 << 10], |_| 0.0).is_err());
    assert!(Tensor::<f64>::zeros(vec![usize::MAX, 2]).is_err());
    assert_eq!(Tensor::<f64>::ones(vec![2, 2]).unwrap().data(), &[1.0; 4]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// A product of matrices of 32 to 56 on a random pairwise path (two neighbours in the
    /// chain at each step), evaluated on two and three threads: steps this large make the
    /// engine evaluate by dependency (a step starts when its operands are ready), and the
    /// result equals one thread's to rounding, complex ones too.
    #[test]
    fn dataflow_evaluation_matches_one_thread(
        dims in proptest::collection::vec(32usize..=56, 4..=8),
        picks in proptest::collection::vec(0usize..100, 7),
        transpose_last in proptest::bool::ANY,
    ) {
        let n = dims.len() - 1;
        let labels: Vec<char> = ('a'..='z').take(dims.len()).collect();
        let inputs: Vec<String> = (0..n).map(|i| format!("{}{}", labels[i], labels[i + 1])).collect();
        let out = if transpose_last { format!("{}{}", labels[n], labels[0]) } else { format!("{}{}", labels[0], labels[n]) };
        let expr = format!("{}->{out}", inputs.join(","));
        let shapes: Vec<Vec<usize>> = (0..n).map(|i| vec![dims[i], dims[i + 1]]).collect();
        // opt_einsum's format: the two operands leave the list, their product goes last.
        // Each operand covers a run of the chain; only neighbouring runs are multiplied.
        let mut runs: Vec<(usize, usize)> = (0..n).map(|i| (i, i + 1)).collect();
        let mut steps = Vec::new();
        for &pick in &picks[..n - 1] {
            let pairs: Vec<[usize; 2]> = (0..runs.len())
                .flat_map(|i| (0..runs.len()).map(move |j| [i, j]))
                .filter(|&[i, j]| runs[i].1 == runs[j].0)
                .collect();
            let [i, j] = pairs[pick % pairs.len()];
            let merged = (runs[i].0, runs[j].1);
            let (ri, rj) = (runs[i], runs[j]);
            runs.retain(|r| *r != ri && *r != rj);
            runs.push(merged);
            steps.push([i, j]);
        }
        let path = PathChoice::Explicit(ContractionPath::new(steps));
        let pools = [2, 3].map(|t| rayon::ThreadPoolBuilder::new().num_threads(t).build().unwrap());
        let e = Einsum::<f64>::new(&expr, &shapes, path.clone()).unwrap();
        let ops: Vec<Tensor<f64>> = shapes.iter().enumerate().map(|(i, s)| tensor(s.clone(), i as u64)).collect();
        let refs: Vec<&Tensor<f64>> = ops.iter().collect();
        let want = e.eval(&refs).unwrap();
        let ez = Einsum::<c64>::new(&expr, &shapes, path).unwrap();
        let opz: Vec<Tensor<c64>> = shapes.iter().enumerate().map(|(i, s)| tensor(s.clone(), i as u64)).collect();
        let refz: Vec<&Tensor<c64>> = opz.iter().collect();
        let wantz = ez.eval(&refz).unwrap();
        for pool in &pools {
            assert_close(&e.eval_parallel(Some(pool), &refs).unwrap(), &want, &expr);
            assert_close(&ez.eval_parallel(Some(pool), &refz).unwrap(), &wantz, &expr);
        }
    }
}
