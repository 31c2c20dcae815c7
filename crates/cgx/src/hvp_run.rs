//! `cgx einsum --hvp`: Hessian-vector products of a contraction, sliced or not, with
//! respect to every operand ([`einsum::SlicedHvp`]: the slices' products summed), with an
//! exact-difference check.
//!
//! - Directions: one array per operand from `--directions` (an `.npz`, or `.npy` files,
//!   as the operands are given; headers checked against the memory limit before their
//!   data is read), or seeded random numbers in `[-1, 1)`.
//! - The check: the network is linear in each operand, so moving operand `j` alone by
//!   `v_j` moves every other operand's gradient by exactly the HVP along `v_j` (and its
//!   own not at all). With `j` the middle operand, `v_j = x_j / 2` and `i` the next one,
//!   the HVP with respect to `i` and `j` (direction zero for `i`) is compared with the
//!   difference of `i`'s gradients at the two points (relative to the larger of the two),
//!   so the check holds to rounding on any network. It runs one more HVP and two
//!   gradients, with respect to those operands only, after the products are written and
//!   dropped: it holds a few tensors of those two operands' shapes beside what the HVP
//!   held.
//!
//! Nothing here knows of the command line's arguments: [`crate::einsum_cmd`] reads them
//! and calls [`run`].

use std::path::{Path, PathBuf};
use std::time::Instant;

use einsum::{MemoryLimit, SlicedEinsum, Tensor};

use crate::cli::{CliError, CliResult};
use crate::npy::{self, NpyElem};

/// What an HVP run gives.
pub struct HvpOutcome {
    /// Rows of (phase, milliseconds).
    pub phases: Vec<(String, f64)>,
    /// The exact-difference check (relative error), when there is an operand.
    pub check: Option<f64>,
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// The directions: from `files` (one array per operand, of its shape), or seeded.
fn directions<T: NpyElem>(
    files: &[PathBuf],
    operands: &[Tensor<T>],
    limit: MemoryLimit,
    seed: u64,
) -> CliResult<Vec<Tensor<T>>> {
    if files.is_empty() {
        let mut rng = scalar::workloads::Rng::new(seed);
        let mut next = move || T::from_f64(2.0 * rng.unit() - 1.0);
        return operands.iter().map(|o| Ok(Tensor::from_fn(o.shape().to_vec(), |_| next())?)).collect();
    }
    let infos = npy::read_infos(files, limit)?;
    if infos.len() != operands.len() {
        return Err(CliError(format!(
            "--directions gives {} arrays but the network has {} operands (one direction per operand)",
            infos.len(),
            operands.len()
        )));
    }
    for (i, (info, o)) in infos.iter().zip(operands).enumerate() {
        if info.shape != o.shape() {
            return Err(CliError(format!(
                "{}: direction {i} has shape {:?} but operand {i} has shape {:?}",
                info.source,
                info.shape,
                o.shape()
            )));
        }
    }
    npy::read_arrays(&infos)?
        .into_iter()
        .zip(&infos)
        .map(|(t, info)| {
            T::from_any(t).ok_or_else(|| CliError(format!("{}: complex128 data where float64 is needed", info.source)))
        })
        .collect()
}

/// Where the directions come from and where the products go.
pub struct HvpFiles<'a> {
    /// One array per operand (none: seeded directions).
    pub directions: &'a [PathBuf],
    /// The `.npz` to write the products to.
    pub out: Option<&'a Path>,
}

/// The products of `e` at `operands` for the cotangent `seed` along the directions of
/// `files` (or seeded by `seed_directions`), calling `progress(k)` after each slice,
/// written to `files.out`; then the check of the module docs.
pub fn run<T: NpyElem>(
    e: &SlicedEinsum<T>,
    operands: &[Tensor<T>],
    seed: &Tensor<T>,
    files: &HvpFiles<'_>,
    limit: MemoryLimit,
    seed_directions: u64,
    progress: impl FnMut(u64),
) -> CliResult<HvpOutcome> {
    let mut phases = Vec::new();
    let refs: Vec<&Tensor<T>> = operands.iter().collect();
    let all: Vec<usize> = (0..refs.len()).collect();
    let t = Instant::now();
    let v = directions(files.directions, operands, limit, seed_directions)?;
    let what = if files.directions.is_empty() { "random directions" } else { "read directions" };
    phases.push((what.to_string(), ms(t)));
    let t = Instant::now();
    let h = e.hvp(&all)?;
    phases.push(("hvp build + compile".to_string(), ms(t)));
    let t = Instant::now();
    let vrefs: Vec<&Tensor<T>> = v.iter().collect();
    let products = h.eval_with_progress(&refs, seed, &vrefs, progress)?;
    phases.push(("hvp eval (all operands)".to_string(), ms(t)));
    drop((v, h));
    if let Some(out) = files.out {
        npy::write_npz(out, &products)?;
    }
    drop(products);
    if refs.is_empty() {
        return Ok(HvpOutcome { phases, check: None });
    }
    let t = Instant::now();
    let j = refs.len() / 2;
    let i = (j + 1) % refs.len();
    let half = T::from_f64(0.5);
    let moved_by = operands[j].map(|&x| half * x);
    // With respect to `i` and `j` (once when they are one operand), direction zero for `i`.
    let (wrt, h_i) = if i == j {
        let h = e.hvp(&[j])?.eval(&refs, seed, &[&moved_by])?;
        (vec![j], h)
    } else {
        let zero = Tensor::zeros(operands[i].shape().to_vec())?;
        (vec![i], e.hvp(&[i, j])?.eval(&refs, seed, &[&zero, &moved_by])?)
    };
    let g = e.gradient(&wrt)?;
    let before = g.eval(&refs, seed)?.remove(0);
    let moved = operands[j].zip_with(&moved_by, |a, b| a + b)?;
    let mut shifted = refs.clone();
    shifted[j] = &moved;
    let diff = g.eval(&shifted, seed)?.remove(0).zip_with(&before, |x, y| x - y)?;
    let err = diff.max_abs_diff(&h_i[0]).unwrap_or(f64::NAN);
    let scale = diff.max_abs().max(h_i[0].max_abs()).max(f64::MIN_POSITIVE);
    phases.push(("hvp check".to_string(), ms(t)));
    Ok(HvpOutcome { phases, check: Some(err / scale) })
}
