//! `cgx einsum --strip-exponent`: the scaled contraction (the einsum crate's
//! `eval_scaled` and `value_and_grad_scaled`), whose intermediates carry a power of two
//! beside them, so a result past `f64`'s range is reported as a mantissa and a base-10
//! exponent (cotengra's form: the value is `mantissa · 10^exponent`) instead of `inf`.
//!
//! With `-o` the mantissa is written; with `--grad`, the gradients' mantissas go to
//! `--grad-out` (`arr_0`, `arr_1`, …) followed by one more array holding their base-10
//! exponents, and the gradient is checked by Euler's identity for multilinear maps (the
//! network is linear in each operand, so `⟨∇_i f, x_i⟩ = ⟨c, f(x)⟩`), compared in scaled
//! form so that it holds where the values do not fit.

use std::path::Path;
use std::time::Instant;

use einsum::{ScaledTensor, SlicedEinsum, Tensor};

use crate::cli::{CliError, CliResult};
use crate::npy::{self, NpyElem};

/// What the scaled run gives the report.
pub struct ScaledReport {
    /// The sum of the mantissa's entries: real and imaginary parts.
    pub mantissa_checksum: [f64; 2],
    /// The base-10 exponent of the result.
    pub exponent: f64,
    /// The base-10 exponent of each gradient (with `--grad`).
    pub gradient_exponents: Vec<f64>,
    /// Euler's identity on the middle operand (relative error), with `--grad`.
    pub gradient_check: Option<f64>,
}

/// Where the scaled run writes, and the phases it adds.
pub struct Outputs<'a> {
    pub output: Option<&'a Path>,
    pub grad_out: Option<&'a Path>,
    pub phases: &'a mut Vec<(String, f64)>,
    pub written: &'a mut Vec<std::path::PathBuf>,
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// `Σ a·b` of two scaled tensors' mantissas and the sum of their exponents: `⟨a, b⟩` as
/// `(mantissa, binary exponent)` (real part, the inner product's convention).
fn inner<T: NpyElem>(a: &Tensor<T>, ea: f64, b: &Tensor<T>, eb: f64) -> (f64, f64) {
    (a.inner(b).unwrap_or(f64::NAN), ea + eb)
}

/// The scaled contraction of `refs`, and with `cotangent` its scaled gradients.
pub fn run<T: NpyElem>(
    e: &SlicedEinsum<T>,
    refs: &[&Tensor<T>],
    cotangent: Option<&Tensor<T>>,
    out: Outputs<'_>,
) -> CliResult<ScaledReport> {
    let t = Instant::now();
    let (value, grads) = match cotangent {
        Some(c) => {
            let all: Vec<usize> = (0..refs.len()).collect();
            e.value_and_grad_scaled(refs, &all, c)?
        }
        None => (e.eval_scaled(refs)?, Vec::new()),
    };
    let what = if cotangent.is_some() { "scaled value + gradient" } else { "scaled eval" };
    out.phases.push((what.to_string(), ms(t)));
    let sum = value.mantissa().data().iter().fold(T::zero(), |acc, &x| acc + x);
    let mut report = ScaledReport {
        mantissa_checksum: [sum.inner(T::one()), sum.inner(T::from_parts(0.0, 1.0))],
        exponent: value.exponent10(),
        gradient_exponents: grads.iter().map(ScaledTensor::exponent10).collect(),
        gradient_check: None,
    };
    if let (Some(c), false) = (cotangent, refs.is_empty()) {
        let i = refs.len() / 2;
        let (lm, le) = inner(c, 0.0, value.mantissa(), value.exponent());
        let (rm, re) = inner(grads[i].mantissa(), grads[i].exponent(), refs[i], 0.0);
        // rhs / lhs in scaled form: finite whatever the exponents.
        let ratio = rm / lm * 2f64.powf(re - le);
        report.gradient_check = Some((ratio - 1.0).abs());
    }
    if let Some(path) = out.output {
        npy::write_npy(path, value.mantissa())?;
        out.written.push(path.to_path_buf());
    }
    if let Some(path) = out.grad_out {
        let mut tensors: Vec<Tensor<T>> = grads.iter().map(|g| g.mantissa().clone()).collect();
        let exponents = report.gradient_exponents.iter().map(|&x| T::from_f64(x)).collect();
        tensors.push(Tensor::new(vec![grads.len()], exponents).map_err(|e| CliError(e.to_string()))?);
        npy::write_npz(path, &tensors)?;
        out.written.push(path.to_path_buf());
    }
    Ok(report)
}
