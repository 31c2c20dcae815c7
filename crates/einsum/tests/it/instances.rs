//! The benchmark instances: all six load, build with each path and the greedy finder; the
//! two one-step instances are evaluated against the reference; the others are evaluated
//! with every dimension capped at 2 (same structure) and the three paths must agree.
//! Full-size runs: `cargo run --release -p einsum --example instances`.

use einsum::{Instance, PathChoice, Tensor, c64, reference_einsum};

use crate::network::assert_close;

fn load(name: &str) -> Instance {
    let path = format!("{}/tests/data/{name}.json", env!("CARGO_MANIFEST_DIR"));
    Instance::from_file(&path).unwrap_or_else(|e| panic!("{e}"))
}

const ALL: [&str; 6] = [
    "bin_matmul_256",
    "bin_batched_matmul_b32_m64_n64_k64",
    "str_matrix_chain_multiplication_100",
    "str_mps_varying_inner_product_200",
    "lm_batch_likelihood_brackets_4_4d",
    "str_nw_mera_open_26",
];

#[test]
fn all_instances_load_and_build_with_every_path() {
    for name in ALL {
        let inst = load(name);
        assert_eq!(inst.name, name);
        for path in [
            PathChoice::Explicit(inst.opt_flops.clone().unwrap()),
            PathChoice::Explicit(inst.opt_size.clone().unwrap()),
            PathChoice::Greedy,
        ] {
            let e = inst.einsum::<f64>(path).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(e.path().steps().len(), inst.shapes.len() - 1, "{name}");
        }
    }
}

#[test]
fn one_step_instances_match_reference() {
    for name in ["bin_matmul_256", "bin_batched_matmul_b32_m64_n64_k64"] {
        let inst = load(name);
        let ops = inst.random_operands::<f64>(7).unwrap();
        let refs: Vec<&Tensor<f64>> = ops.iter().collect();
        let e = inst.einsum::<f64>(PathChoice::Explicit(inst.opt_flops.clone().unwrap())).unwrap();
        let got = e.eval(&refs).unwrap();
        assert_close(&got, &reference_einsum(&inst.format_string, &refs).unwrap(), name);
    }
}

#[test]
fn shrunk_instances_agree_across_paths() {
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    for name in ALL {
        let mut inst = load(name);
        for s in &mut inst.shapes {
            for d in s.iter_mut() {
                *d = (*d).min(2);
            }
        }
        let ops = inst.random_operands::<c64>(3).unwrap();
        let refs: Vec<&Tensor<c64>> = ops.iter().collect();
        let eval = |p: PathChoice| inst.einsum::<c64>(p).unwrap().eval(&refs).unwrap();
        let flops = eval(PathChoice::Explicit(inst.opt_flops.clone().unwrap()));
        assert!(flops.data().iter().all(|x| x.re.is_finite() && x.im.is_finite()), "{name}");
        assert!(flops.max_abs() > 1e-200, "{name}: the result underflowed");
        assert_close(&eval(PathChoice::Explicit(inst.opt_size.clone().unwrap())), &flops, name);
        assert_close(&eval(PathChoice::Greedy), &flops, name);
        // The level-parallel evaluator gives the same result.
        let e = inst.einsum::<c64>(PathChoice::Explicit(inst.opt_flops.clone().unwrap())).unwrap();
        assert_close(&e.eval_parallel(Some(&pool), &refs).unwrap(), &flops, name);
    }
}
