//! The bundled benchmark instances (`einsum::BUNDLED_DIR`): all load, build with each path
//! and the greedy finder; the one-step instances (two operands) are evaluated against the
//! reference; the others are evaluated with every dimension capped at 2 (same structure)
//! and the three paths must agree.
//! Full-size runs: `cargo run --release -p einsum --example instances`.

use einsum::{Instance, PathChoice, Tensor, c64, reference_einsum};

use crate::network::assert_close;

/// The bundled instances (`einsum::BUNDLED_DIR`), loaded; each is named as its file.
fn bundled() -> Vec<Instance> {
    let names = Instance::bundled_names().unwrap_or_else(|e| panic!("{e}"));
    assert!(names.len() >= 6, "{names:?}");
    let load = |n: &String| {
        let inst = Instance::bundled(n).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(&inst.name, n);
        inst
    };
    names.iter().map(load).collect()
}

#[test]
fn all_instances_load_and_build_with_every_path() {
    for inst in bundled() {
        let name = inst.name.as_str();
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
    let one_step: Vec<Instance> = bundled().into_iter().filter(|i| i.shapes.len() == 2).collect();
    assert!(one_step.len() >= 2);
    for inst in one_step {
        let name = inst.name.as_str();
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
    for mut inst in bundled() {
        let name = inst.name.clone();
        let name = &name;
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
