//! What the per-step examples (`fwd_steps`, `grad_steps`) share: their arguments, the
//! contraction steps of an instance's forward program, seeded operands, and a median time.

use std::time::Instant;

use computegraph::{materialize_merge, resolve};
use einsum::{ContractSpec, Einsum, Instance, PathChoice, Tensor, TensorOp};

/// Removes `--NAME VALUE` from `args` and returns the value, if present.
pub fn take_option(args: &mut Vec<String>, name: &str) -> Option<String> {
    let p = args.iter().position(|a| a == name)?;
    let value = args.get(p + 1).cloned().unwrap_or_else(|| panic!("{name} takes a value"));
    args.drain(p..p + 2);
    Some(value)
}

/// `--reps N` from `args` (removed), or `default`.
pub fn take_reps(args: &mut Vec<String>, default: usize) -> usize {
    take_option(args, "--reps").map_or(default, |r| r.parse().unwrap_or_else(|_| panic!("--reps takes a number")))
}

/// The instance in `file`, its expression along its `opt_flops` path (greedy without one),
/// and the contraction steps of the compiled forward program, in program order.
pub fn forward_steps(file: &str) -> (Instance, Einsum<f64>, Vec<ContractSpec>) {
    let inst = Instance::from_file(file).unwrap_or_else(|e| panic!("{e}"));
    let choice = inst.opt_flops.clone().map_or(PathChoice::Greedy, PathChoice::Explicit);
    let e = inst.einsum::<f64>(choice).unwrap_or_else(|e| panic!("{e}"));
    let m = materialize_merge(&resolve(vec![e.graph().clone()]), std::slice::from_ref(e.output_key()));
    let specs = m
        .operations()
        .filter_map(|op| match op.operation() {
            TensorOp::Contract(s) => Some((**s).clone()),
            _ => None,
        })
        .collect();
    (inst, e, specs)
}

/// The median of `reps` runs of `f`, in milliseconds.
pub fn median_ms(reps: usize, mut f: impl FnMut() -> Tensor<f64>) -> f64 {
    let mut v: Vec<f64> = (0..reps)
        .map(|_| {
            let t = Instant::now();
            drop(f());
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// A smooth seeded operand of `shape` (`sin(0.37·k)` for its `k`-th element, from 1).
pub fn seeded(shape: Vec<usize>) -> Tensor<f64> {
    let mut x = 0.0f64;
    Tensor::from_fn(shape, |_| {
        x += 1.0;
        (x * 0.37).sin()
    })
    .expect("a shape of the instance")
}
