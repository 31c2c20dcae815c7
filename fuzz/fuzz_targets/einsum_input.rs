//! The einsum front door on arbitrary text: the instance loader (JSON) and the expression
//! parser with shapes and a path must return a value or an error, never panic, and a
//! network they accept must evaluate on operands of the accepted shapes.
#![no_main]

use einsum::{ContractionPath, Einsum, Instance, PathChoice, Subscripts, Tensor};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // 1. As an instance file.
    if let Ok(inst) = Instance::from_json(text) {
        let small = inst.shapes.iter().all(|s| s.iter().product::<usize>() <= 4096) && inst.shapes.len() <= 16;
        if small {
            for path in
                [inst.opt_flops.clone().map(PathChoice::Explicit), Some(PathChoice::Greedy)].into_iter().flatten()
            {
                if let Ok(e) = inst.einsum::<f64>(path)
                    && e.multiply_adds() <= 1e6
                    && let Ok(ops) = inst.random_operands::<f64>(1)
                {
                    let refs: Vec<&Tensor<f64>> = ops.iter().collect();
                    e.eval(&refs).expect("an accepted network evaluates on operands of its shapes");
                }
            }
        }
    }
    // 2. As `expression;shapes;path` (`ab,bc->ac;2x3,3x4;0-1`).
    let mut parts = text.splitn(3, ';');
    let (Some(expr), Some(shapes)) = (parts.next(), parts.next()) else { return };
    let _ = Subscripts::parse(expr);
    let shapes: Option<Vec<Vec<usize>>> = shapes
        .split(',')
        .map(|s| s.split('x').filter(|d| !d.is_empty()).map(|d| d.parse::<usize>().ok().filter(|&d| d <= 8)).collect())
        .collect();
    let Some(shapes) = shapes else { return };
    if shapes.len() > 8 || shapes.iter().any(|s| s.len() > 6) {
        return;
    }
    let path = match parts.next() {
        Some(p) => {
            let steps: Option<Vec<[usize; 2]>> = p
                .split(',')
                .map(|s| s.split_once('-').and_then(|(a, b)| Some([a.parse().ok()?, b.parse().ok()?])))
                .collect();
            match steps {
                Some(steps) => PathChoice::Explicit(ContractionPath::new(steps)),
                None => return,
            }
        }
        None => PathChoice::Greedy,
    };
    if let Ok(e) = Einsum::<f64>::new(expr, &shapes, path)
        && e.multiply_adds() <= 1e6
    {
        let ops: Vec<Tensor<f64>> = shapes
            .iter()
            .map(|s| Tensor::from_fn(s.clone(), |i| 1.0 + i.iter().sum::<usize>() as f64 * 0.1).unwrap())
            .collect();
        let refs: Vec<&Tensor<f64>> = ops.iter().collect();
        e.eval(&refs).expect("an accepted network evaluates on operands of its shapes");
    }
});
