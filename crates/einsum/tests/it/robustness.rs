//! User input never panics: arbitrary expressions, shapes, paths and JSON give a value or an
//! error.

use einsum::{ContractionPath, Einsum, Instance, PathChoice, Tensor, c64};
use proptest::prelude::*;

/// Half noise with random shapes, half well-formed expressions with shapes that fit
/// unless `perturb` changes one dimension.
fn case() -> impl Strategy<Value = (String, Vec<Vec<usize>>)> {
    let noise = (
        proptest::collection::vec(
            prop::sample::select(vec!['a', 'b', 'c', 'é', ',', ',', '-', '>', '.', ' ', '1']),
            0..14,
        ),
        proptest::collection::vec(proptest::collection::vec(0usize..3, 0..3), 1..4),
    )
        .prop_map(|(v, shapes)| (v.into_iter().collect::<String>(), shapes));
    let label = prop::sample::select(vec![0usize, 1, 2, 3]);
    let formed = (
        proptest::collection::vec(proptest::collection::vec(label.clone(), 0..4), 1..5),
        proptest::collection::vec(label, 0..3),
        proptest::bool::ANY,
        proptest::collection::vec(0usize..4, 4),
        proptest::option::of((0usize..5, 0usize..4, 0usize..4)),
    )
        .prop_map(|(ins, out, explicit, sizes, perturb)| {
            let names = ['a', 'b', 'c', 'é'];
            let text: Vec<String> = ins.iter().map(|l| l.iter().map(|&c| names[c]).collect()).collect();
            let out: String = out.iter().map(|&c| names[c]).collect();
            let expr = if explicit { format!("{}->{out}", text.join(",")) } else { text.join(",") };
            let mut shapes: Vec<Vec<usize>> = ins.iter().map(|l| l.iter().map(|&c| sizes[c]).collect()).collect();
            if let Some((i, j, d)) = perturb {
                let n = shapes.len();
                if let Some(x) = shapes[i % n].get_mut(j) {
                    *x = d;
                }
            }
            (expr, shapes)
        });
    prop_oneof![noise, formed]
}

fn json_like() -> impl Strategy<Value = String> {
    let chars = vec!['{', '}', '[', ']', '"', ':', ',', '0', '1', '-', 'a', 'b', ' ', 'n'];
    proptest::collection::vec(prop::sample::select(chars), 0..80).prop_map(|v| v.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn arbitrary_expressions_shapes_and_paths(
        (expr, shapes) in case(),
        steps in proptest::collection::vec((0usize..5, 0usize..5), 0..4),
        greedy in proptest::bool::ANY,
    ) {
        let path = if greedy {
            PathChoice::Greedy
        } else {
            PathChoice::Explicit(ContractionPath::new(steps.into_iter().map(|(i, j)| [i, j]).collect()))
        };
        if let Ok(e) = Einsum::<c64>::new(&expr, &shapes, path) {
            let ops: Vec<Tensor<c64>> = shapes.iter().map(|s| Tensor::zeros(s.clone()).unwrap()).collect();
            let refs: Vec<&Tensor<c64>> = ops.iter().collect();
            prop_assert!(e.eval(&refs).is_ok());
            prop_assert!(e.eval(&refs[..refs.len().saturating_sub(1)]).is_err() || refs.is_empty());
            let all: Vec<usize> = (0..shapes.len()).collect();
            if let Ok(g) = e.gradient(&all) {
                let c = Tensor::zeros(e.output_shape().to_vec()).unwrap();
                prop_assert!(g.eval(&refs, &c).is_ok());
            }
        }
    }

    #[test]
    fn arbitrary_json(text in json_like()) {
        let _ = Instance::from_json(&text);
    }

    #[test]
    fn mutated_instances(cut in 0usize..400, byte in 0u8..128) {
        let good = r#"{"name": "t", "format_string": "ab,bc,cd->ad", "shapes": [[2, 3], [3, 4], [4, 2]],
            "num_tensors": 3, "paths": {"opt_flops": {"path": [[0, 1], [0, 1]]},
            "opt_size": {"path": [[1, 2], [0, 1]]}}}"#;
        let mut bytes = good.as_bytes().to_vec();
        let at = cut % bytes.len();
        bytes[at] = byte;
        if let Ok(text) = String::from_utf8(bytes) {
            if let Ok(inst) = Instance::from_json(&text) {
                for p in [inst.opt_flops.clone(), inst.opt_size.clone()].into_iter().flatten() {
                    let e = inst.einsum::<f64>(PathChoice::Explicit(p));
                    if let Ok(e) = e {
                        let ops = inst.random_operands::<f64>(1).unwrap();
                        let refs: Vec<&Tensor<f64>> = ops.iter().collect();
                        prop_assert!(e.eval(&refs).is_ok());
                    }
                }
            }
        }
    }
}
