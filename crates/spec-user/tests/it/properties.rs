//! Random DAGs of the set: compiled evaluation against the plain interpreter, JVPs against
//! central finite differences, and transposes by the dot-product identity
//! (`docs/SPEC.md` §7.1 and §7.2).

use std::collections::HashMap;

use computegraph::{GraphBuilder, GraphOperation};
use proptest::prelude::*;
use spec_user::{Dag, Key, Op};
use tidu::{linear_transpose, linearize};

use crate::{eval_keys, eval_linear, input_key};

const OPS: [Op; 7] = [Op::Add, Op::Mul, Op::Neg, Op::Exp, Op::Sin, Op::Cos, Op::SinCos];

/// A DAG of 1 to 4 inputs and 1 to 40 nodes, operands drawn among the last 8 values, with
/// the last value and up to two others as outputs, and input values in [-1, 1].
fn dag() -> impl Strategy<Value = (Dag, Vec<f64>)> {
    (1u32..=4, prop::collection::vec((0..OPS.len(), 0u32..8, 0u32..8), 1..40), 0u32..1000, 0u32..1000).prop_flat_map(
        |(inputs, nodes, o1, o2)| {
            let mut dag = Dag { inputs, ..Default::default() };
            let mut n = inputs;
            for (op, a, b) in nodes {
                let op = OPS[op];
                dag.nodes.push((op, [n - 1 - a % n, n - 1 - b % n]));
                n += op.output_count() as u32;
            }
            dag.outputs = vec![n - 1, o1 % n, o2 % n];
            dag.outputs.dedup();
            (Just(dag), prop::collection::vec(-1.0f64..1.0, inputs as usize))
        },
    )
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_dags_match_the_interpreter_finite_differences_and_their_transposes(
        (dag, xs) in dag(),
        t in prop::collection::vec(-1.0f64..1.0, 4),
        c in prop::collection::vec(-1.0f64..1.0, 3),
    ) {
        let reference = dag.eval_reference(&xs);
        prop_assume!(reference.iter().all(|v| v.is_finite() && v.abs() < 1e6));
        let (g, outputs) = dag.build(GraphBuilder::new());
        let keys: Vec<Key> = (0..dag.inputs).map(Key::User).collect();
        let mut values: HashMap<Key, f64> = keys.iter().cloned().zip(xs.iter().copied()).collect();

        // Evaluation: the same arithmetic in the same order, so exactly the reference.
        prop_assert_eq!(eval_keys(vec![g.clone()], &outputs, &values), reference.clone());

        // JVP along t against a central difference.
        let t = &t[..xs.len()];
        let lin = linearize(&computegraph::resolve(vec![g.clone()]), &outputs, &keys);
        for (i, &ti) in t.iter().enumerate() {
            values.insert(input_key(&lin, i), ti);
        }
        let jt: Vec<f64> = eval_linear(&lin, &values).into_iter().map(|v| v.unwrap_or(0.0)).collect();
        // A point where an intermediate's derivative overflows (exp of exp of exp...) is a
        // singularity for floating point: inf · 0 makes the JVP NaN. Such cases are skipped.
        prop_assume!(jt.iter().all(|v| v.is_finite()));
        // Central differences with steps h and 2h; where they disagree, or one is not
        // finite (an intermediate overflows within h of the point, as exp of exp of exp
        // can while the output stays finite), the function is too curved at this point for
        // either to judge the JVP, and the output is skipped (`docs/SPEC.md` §7.1: inputs
        // away from singularities).
        let central = |h: f64| -> Vec<f64> {
            let at = |s: f64| -> Vec<f64> {
                let x: Vec<f64> = xs.iter().zip(t).map(|(x, t)| x + s * h * t).collect();
                dag.eval_reference(&x)
            };
            at(1.0).iter().zip(at(-1.0)).map(|(p, m)| (p - m) / (2.0 * h)).collect()
        };
        let (fd, fd2) = (central(1e-6), central(2e-6));
        for ((&fd, fd2), j) in fd.iter().zip(&fd2).zip(&jt) {
            if !fd.is_finite() || !fd2.is_finite() || (fd - fd2).abs() > 1e-6 * (1.0 + fd.abs()) {
                continue;
            }
            prop_assert!((fd - j).abs() <= 1e-5 + 1e-3 * fd.abs(), "JVP {} vs finite difference {}", j, fd);
        }

        // Transpose: <c, J t> = <Jᵀ c, t>, checked where the transpose's values are finite
        // too (as the JVP's are, above).
        let tr = linear_transpose(&lin);
        let seeded: Vec<f64> = lin.tangent_outputs().iter().zip(&c).filter(|(o, _)| o.is_some()).map(|(_, &c)| c).collect();
        for (i, &ci) in seeded.iter().enumerate() {
            values.insert(input_key(&tr, i), ci);
        }
        let jtc: Vec<f64> = eval_linear(&tr, &values).into_iter().map(|v| v.unwrap_or(0.0)).collect();
        prop_assume!(jtc.iter().all(|v| v.is_finite()));
        let lhs = dot(&c[..jt.len()], &jt);
        let rhs = dot(&jtc, t);
        prop_assert!((lhs - rhs).abs() <= 1e-10 * (1.0 + lhs.abs()), "<c, Jt> = {} but <Jᵀc, t> = {}", lhs, rhs);
    }
}
