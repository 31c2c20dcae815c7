//! `cgx einsum --grad --checkpoint`: the gradient within the memory limit by recomputing
//! forward intermediates instead of slicing (the einsum crate's
//! `Einsum::gradient_within`).
//!
//! Without `--checkpoint`, a reverse pass over the limit slices the network, forward pass
//! included. With it, the forward pass must fit unsliced (the caller builds the network
//! sliced only for the forward pass and refuses a sliced one); the reverse pass keeps the
//! forward intermediates that fit and recomputes the others from their subtrees. Value
//! and gradients run in one pass, on the calling thread (the plan's recomputations are
//! sequential). The report gives the plan's simulated peak (the reverse pass's estimate)
//! and how many intermediates it keeps.

use std::time::Instant;

use einsum::{Einsum, MemoryLimit, Tensor};

use crate::cli::CliResult;
use crate::npy::NpyElem;

/// What a checkpointed run gives the report.
pub struct Checkpointed<T: NpyElem> {
    /// One gradient per operand.
    pub grads: Vec<Tensor<T>>,
    /// The plan's simulated peak bytes (operands, cotangent and results included).
    pub peak_bytes: u64,
    /// Forward intermediates kept for the reverse pass, and how many it reads.
    pub kept: [usize; 2],
    /// With `repeat` over 1: the best time of value and gradients, ms.
    pub best_ms: Option<f64>,
}

/// Plans the gradient of every operand of `e` within `limit` and runs it (once, or a
/// warm-up and `repeat` timed runs), adding its phases to `phases`.
pub fn run<T: NpyElem>(
    e: &Einsum<T>,
    operands: &[&Tensor<T>],
    cotangent: &Tensor<T>,
    limit: MemoryLimit,
    repeat: u32,
    phases: &mut Vec<(String, f64)>,
) -> CliResult<Checkpointed<T>> {
    let all: Vec<usize> = (0..operands.len()).collect();
    let t = Instant::now();
    let g = e.gradient_within(&all, limit)?;
    // Every intermediate the reverse pass reads is kept without a limit.
    let readable = e.gradient_within(&all, MemoryLimit::Unlimited)?.kept();
    phases.push(("checkpointed gradient plan".to_string(), ms(t)));
    let kept = format!("kept {} of {readable} intermediates", g.kept());
    let t = Instant::now();
    let mut grads = g.eval_with_value(operands, cotangent)?.1;
    let first = ms(t);
    let mut best_ms = None;
    if repeat <= 1 {
        phases.push((format!("value and gradient eval (all operands, checkpointed, {kept}, 1 thread)"), first));
    } else {
        let mut best = f64::INFINITY;
        for _ in 0..repeat {
            let t = Instant::now();
            grads = g.eval_with_value(operands, cotangent)?.1;
            best = best.min(ms(t));
        }
        phases.push((
            format!("value and gradient eval (all operands, checkpointed, {kept}, best of {repeat}, 1 thread)"),
            best,
        ));
        best_ms = Some(best);
    }
    Ok(Checkpointed { grads, peak_bytes: g.peak_bytes(), kept: [g.kept(), readable], best_ms })
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}
