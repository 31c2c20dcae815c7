//! Where an evaluation reads the stop flag, and how often. The flag is
//! [`computegraph::stop`]'s, installed by [`with_stop`] (re-exported at the crate's root):
//! one flag per thread serves the engine's passes and the contractions alike, and a pool's
//! thread with none of its own reads those of the evaluations running in pools
//! ([`shared_with_pool`], around `Einsum::eval_parallel`'s steps and split GEMMs), so a
//! parallel evaluation stops at the next check of any of its threads.
//!
//! Where the flag is read: before each operation of a compiled program (an operation that
//! starts after the flag is up produces a placeholder of its output's shape and does no
//! work), between the GEMMs of a loop of GEMMs and between the blocks of one large GEMM
//! (each of about [`GEMM_BLOCK_MACS`] multiply-adds and [`COPY_CHECK_ELEMENTS`] elements
//! written at most, but never fewer rows or columns than `small_gemm`'s width for the
//! second bound, nor less than one), every [`DIRECT_STOP_CHECK`] multiply-adds of the direct and lanes loops, every
//! [`COPY_CHECK_ELEMENTS`] elements of a permutation copy or an element-wise product (a
//! kernel that stops leaves the rest of its output as it was), between slices of a sliced
//! contraction and every [`COPY_CHECK_ELEMENTS`] elements of its accumulators' zeroing,
//! and once a program has run (where the placeholders' result is turned into the error).
//! The longest stretch without a read is about [`GEMM_BLOCK_MACS`] multiply-adds of GEMM.
//!
//! Invariant: a stopped evaluation never returns `Ok` (its result could hold placeholders);
//! without an installed flag, or with the flag down, nothing changes.
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::AtomicBool;
//! use einsum::{Einsum, EinsumError, PathChoice, Tensor};
//!
//! let e = Einsum::<f64>::new("ij,jk->ik", &[vec![2, 3], vec![3, 4]], PathChoice::Greedy).unwrap();
//! let (a, b) = (Tensor::ones(vec![2, 3]).unwrap(), Tensor::ones(vec![3, 4]).unwrap());
//! let flag = Arc::new(AtomicBool::new(false));
//! assert!(einsum::with_stop(flag.clone(), || e.eval(&[&a, &b])).is_ok());
//! flag.store(true, std::sync::atomic::Ordering::Relaxed);
//! let stopped = einsum::with_stop(flag, || e.eval(&[&a, &b]));
//! assert_eq!(stopped.unwrap_err(), EinsumError::Interrupted);
//! ```

pub use computegraph::stop::with_stop;
pub(crate) use computegraph::stop::{requested, shared_with_pool};

use crate::error::{EinsumError, EinsumResult};

/// The multiply-adds of one GEMM block between two reads of the flag: a GEMM with more
/// is run in blocks of about this much work (of `b`'s columns for a row-major output, of
/// `a`'s rows otherwise, so that the operand faer packs whole is the one cut: `kernel.rs`,
/// `gemm_loop`). Each block still reads the other operand whole, so blocks are large: at
/// 2^28 a 3000³ product ran in 29-row blocks, and noticeably slower. At 2^29, a block is
/// a fifth of a second at 3·10^9 multiply-adds per second (one core of a loaded machine),
/// which keeps Ctrl-C's answer well under a second (`docs/PERFORMANCE.md`, issue 39).
pub(crate) const GEMM_BLOCK_MACS: usize = 1 << 29;

/// Multiply-adds of the direct loop and of the lanes loop between two reads of the flag:
/// a few milliseconds of work, so that the read costs nothing measurable.
pub(crate) const DIRECT_STOP_CHECK: usize = 1 << 22;

/// The elements a permutation copy or an element-wise product writes between two reads of
/// the flag: 32 MiB of `f64`, a few milliseconds of memory traffic, against a read that
/// costs nanoseconds.
pub(crate) const COPY_CHECK_ELEMENTS: usize = 1 << 22;

/// [`EinsumError::Interrupted`] if this thread's installed flag (or, on a pool's thread,
/// a shared one) is up.
pub(crate) fn check() -> EinsumResult<()> {
    if requested() { Err(EinsumError::Interrupted) } else { Ok(()) }
}
