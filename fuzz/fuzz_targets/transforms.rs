//! linearize agrees with central finite differences, linear_transpose satisfies the
//! dot-product identity ⟨c, J t⟩ = ⟨Jᵀ c, t⟩, and the four second-order nestings
//! (forward over forward, forward over reverse, reverse over forward, reverse over
//! reverse) agree on c·uᵀ·H·t, on graphs decoded from the input.
#![no_main]

use std::collections::HashMap;

use computegraph::{KeyInterner, resolve};
use libfuzzer_sys::fuzz_target;
use scalar::{ScalarKey, ScalarOp};
use scalar::spec::GraphSpec;
use tidu::{DerivativeProgram, LinearizedGraph, linear_transpose, linearize};

fuzz_target!(|data: &[u8]| {
    let mut spec = GraphSpec::from_bytes(data);
    spec.outputs.truncate(1);
    if spec.ops.len() > 40 {
        return; // keep values tame: long products and exponentials overflow
    }
    let x: Vec<f64> = (0..spec.inputs).map(|i| 0.4 + 0.3 * i as f64).collect();
    let t: Vec<f64> = (0..spec.inputs).map(|i| if i % 2 == 0 { 1.0 } else { -0.5 }).collect();
    // Finite differences are only meaningful where every intermediate value is tame
    // (exp of exp, say, makes the curvature astronomically large).
    let mut all = spec.clone();
    all.outputs = (0..spec.value_count() as u32).collect();
    if !all.eval_reference(&x).iter().all(|v| v.is_finite() && v.abs() < 20.0) {
        return;
    }
    let built = spec.build(&KeyInterner::new(), 1).expect("valid specs build");
    let wrt: Vec<ScalarKey> = (0..spec.inputs).map(ScalarKey::var).collect();
    let lin = linearize(&resolve(built.graphs.clone()), &built.outputs, &wrt);
    let mut values: HashMap<ScalarKey, f64> = wrt.iter().cloned().zip(x.iter().copied()).collect();
    for ((k, _), tv) in lin.tangent_inputs().iter().zip(&t) {
        values.insert(k.clone(), *tv);
    }
    let jt = DerivativeProgram::new(&lin).unwrap().eval(&mut (), |k| values.get(k)).unwrap()[0].unwrap_or(0.0);

    // Central difference along t.
    let h = 1e-6;
    let shifted = |s: f64| -> f64 {
        let xs: Vec<f64> = x.iter().zip(&t).map(|(a, b)| a + s * b).collect();
        spec.eval_reference(&xs)[0]
    };
    let fd = (shifted(h) - shifted(-h)) / (2.0 * h);
    // A finite difference is only a reference where the function is smooth at the scale
    // of the step: a huge slope (2^23·(x - 1) feeding exp, say) or two step sizes that
    // disagree mean the difference quotient, not the JVP, is off.
    let fd2 = (shifted(2.0 * h) - shifted(-2.0 * h)) / (4.0 * h);
    let curvature = (shifted(h) + shifted(-h) - 2.0 * shifted(0.0)).abs() / (h * h);
    // Perturbations must stay small in every intermediate value: chains that double a
    // cancelled difference (2^k·(x - 1)) amplify the step, and the rounding of x ± h, beyond
    // anything a difference quotient can resolve.
    let amplified = {
        let xs: Vec<f64> = x.iter().zip(&t).map(|(a, b)| a + 2.0 * h * b).collect();
        let (at, near) = (all.eval_reference(&x), all.eval_reference(&xs));
        at.iter().zip(&near).any(|(a, b)| (a - b).abs() > 1e-5 * (1.0 + a.abs()))
    };
    let smooth = !amplified
        && jt.abs() < 1e4
        && curvature < 1e3
        && (fd - fd2).abs() <= 1e-4 * (1.0 + fd.abs());
    if smooth && fd.is_finite() && jt.is_finite() {
        assert!((fd - jt).abs() <= 1e-4 + 1e-3 * fd.abs().max(jt.abs()), "JVP {jt} vs finite difference {fd}");
    }

    // Dot-product identity with c = 0.75.
    let tr = linear_transpose(&lin);
    if let Some((seed, _)) = tr.tangent_inputs().first() {
        values.insert(seed.clone(), 0.75);
        let ct = DerivativeProgram::new(&tr).unwrap().eval(&mut (), |k| values.get(k)).unwrap();
        let lhs = 0.75 * jt;
        let rhs: f64 = ct.iter().zip(&t).map(|(c, tv)| c.unwrap_or(0.0) * tv).sum();
        assert!((lhs - rhs).abs() <= 1e-9 * (1.0 + lhs.abs()), "⟨c, Jt⟩ = {lhs} but ⟨Jᵀc, t⟩ = {rhs}");
        if smooth {
            second_order(&lin, &tr, &wrt, &t, values);
        }
    }
});

/// c·uᵀ·H·t four ways, for the first linearization `lin` (tangent `t`) and its transpose
/// `tr` (seed c = 0.75), both bound in `values`.
fn second_order(
    lin: &LinearizedGraph<ScalarOp>,
    tr: &LinearizedGraph<ScalarOp>,
    wrt: &[ScalarKey],
    t: &[f64],
    mut values: HashMap<ScalarKey, f64>,
) {
    let Some(dy) = lin.tangent_output_keys()[0].clone() else { return };
    let u: Vec<f64> = (0..wrt.len()).map(|i| if i % 3 == 0 { -0.25 } else { 0.5 }).collect();
    let c = 0.75;
    let run = |g: &LinearizedGraph<ScalarOp>, values: &HashMap<ScalarKey, f64>| -> Vec<Option<f64>> {
        DerivativeProgram::new(g).unwrap().eval(&mut (), |k| values.get(k)).unwrap()
    };
    let bind = |g: &LinearizedGraph<ScalarOp>, values: &mut HashMap<ScalarKey, f64>, v: &[f64]| {
        for ((k, _), x) in g.tangent_inputs().iter().zip(v) {
            values.insert(k.clone(), *x);
        }
    };
    let dot = |a: &[Option<f64>], b: &[f64]| -> f64 { a.iter().zip(b).map(|(x, y)| x.unwrap_or(0.0) * y).sum() };

    // Forward over forward: the tangent, along u, of tᵀ∇f.
    let ff = linearize(&resolve(vec![lin.graph().clone()]), &[dy], wrt);
    bind(&ff, &mut values, &u);
    let fof = c * run(&ff, &values)[0].unwrap_or(0.0);
    // Reverse over forward: the transpose of u ↦ uᵀHt, seeded with c.
    let rf = linear_transpose(&ff);
    bind(&rf, &mut values, &[c]);
    let rof = if rf.tangent_inputs().is_empty() { 0.0 } else { dot(&run(&rf, &values), &u) };
    // Forward over reverse: the tangent, along u, of c·∇f (the HVP).
    let grad_of: Vec<usize> = (0..wrt.len()).filter(|&i| tr.tangent_output_keys()[i].is_some()).collect();
    let grad: Vec<_> = grad_of.iter().map(|&i| tr.tangent_output_keys()[i].clone().unwrap()).collect();
    let fr = linearize(&resolve(vec![tr.graph().clone()]), &grad, wrt);
    bind(&fr, &mut values, &u);
    let hu = run(&fr, &values);
    let t_of_grad: Vec<f64> = grad_of.iter().map(|&i| t[i]).collect();
    let f_or = dot(&hu, &t_of_grad);
    // Reverse over reverse: the transpose of u ↦ c·H·u, seeded with t (one seed per
    // non-zero output of the HVP map, in order).
    let rr = linear_transpose(&fr);
    let seeds: Vec<f64> = (0..grad.len()).filter(|&k| fr.tangent_output_keys()[k].is_some()).map(|k| t_of_grad[k]).collect();
    bind(&rr, &mut values, &seeds);
    let ror = if rr.tangent_inputs().is_empty() { 0.0 } else { dot(&run(&rr, &values), &u) };

    let scale = 1.0 + fof.abs().max(rof.abs()).max(f_or.abs()).max(ror.abs());
    for (name, v) in [("reverse over forward", rof), ("forward over reverse", f_or), ("reverse over reverse", ror)] {
        assert!((v - fof).abs() <= 1e-8 * scale, "forward over forward gives {fof}, {name} {v}");
    }
}
