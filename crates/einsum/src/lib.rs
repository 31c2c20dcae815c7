//! Dense tensor contractions (einsum) on `computegraph`, differentiable with `tidu`,
//! built the way an outside user builds on them.
//!
//! - [`Tensor`]: a dense row-major tensor of `f64` or [`c64`] ([`Elem`]), data shared
//!   behind an `Arc`.
//! - [`TensorOp`]: the primitive set, closed under tidu's transforms: binary contractions
//!   ([`ContractSpec`]: products, batched and outer products, traces), one-operand
//!   einsums ([`UnarySpec`]: permute, sum over axes, broadcast, diagonals), add,
//!   neg, conj, scale. JVP and transpose rules: the transpose of a contraction is a
//!   contraction; complex transposes are adjoints for `⟨a, b⟩ = Re(conj(a)·b)`, the
//!   convention of `scalar::complex`.
//! - Kernels (`kernel.rs`): a direct strided loop for small or unusual contractions, and
//!   faer GEMM over strided matrix views (split over a rayon pool's threads when large and run
//!   inside one, see [`Einsum::eval_parallel`]), with copies only where the layout
//!   needs them.
//! - [`Einsum`]: an expression ([`Subscripts`], any Unicode labels, numpy's ellipses and
//!   size-1 broadcasting) with operand shapes and a path ([`ContractionPath`], opt_einsum's
//!   format with steps of any length, or a [`PathChoice`]: greedy, or a [`search`]), built
//!   into a graph, compiled once (resolve → materialize_merge → compile) and evaluated any
//!   number of times; [`EinsumCache`] shares compiled programs. [`Einsum::gradient`] and
//!   [`Einsum::hvp`] compile derivative programs (linearize + linear_transpose).
//! - [`Plan`]: what [`Einsum`] and [`SlicedEinsum`] build from, made once per expression
//!   (or numbered network): the resolved network, labels held by one operand alone summed
//!   first, the path (given, or any [`search`] finder; [`PathChoice`]'s `FromStr` reads
//!   their names), its followed steps, the sliced labels and the memory budget; a slice's
//!   plan drops labels ([`Plan::slice`]); it serializes.
//! - [`SlicedEinsum`]: a contraction sliced to fit a memory target ([`Slicing`]: greedy,
//!   in the manner of cotengra's slice finder, or cotengra's `sliced_inds`) and evaluated
//!   slice by slice, any range of slices on its own, with gradients and Hessian-vector
//!   products ([`SlicedHvp`]) summed over slices.
//! - [`Instance`]: the Einsum Benchmark's JSON instances, with seeded operands, and the
//!   ones bundled in the crate's sources ([`BUNDLED_DIR`]).
//! - [`ScaledTensor`]: a contraction's result as a mantissa and a binary exponent
//!   ([`Einsum::eval_scaled`], [`Einsum::value_and_grad_scaled`], and the same on
//!   [`SlicedEinsum`]), for results and intermediates beyond `f64`'s range (cotengra's
//!   `strip_exponent`).
//! - [`CheckpointedGradient`]: the gradient under a memory target
//!   ([`Einsum::gradient_within`]): forward intermediates kept for the reverse pass while
//!   they fit, recomputed otherwise.
//! - [`reference_einsum`]: the plain nested-loop reference the tests compare against.
//! - [`with_stop`]: a flag that another thread raises to end a running evaluation
//!   ([`EinsumError::Interrupted`]); how Ctrl-C ends a contraction in Python.
//!
//! User input (expressions, shapes, paths, JSON, operands) is rejected with an
//! [`EinsumError`] that says what is wrong; it never panics. Sizes too: every tensor a
//! contraction holds is checked against a [`MemoryLimit`] (by default half the machine, at most 8 GiB, see
//! [`EinsumOptions`]) before anything is allocated, so a mistyped dimension is an
//! [`EinsumError::Memory`] naming the tensor and its bytes, not an aborted process.
//!
//! ```
//! use einsum::{Einsum, PathChoice, Tensor};
//!
//! // A matrix chain with a scalar result: f(A, B, C) = Σ A_ij B_jk C_ki.
//! let shapes = vec![vec![2, 3], vec![3, 4], vec![4, 2]];
//! let e = Einsum::<f64>::new("ij,jk,ki->", &shapes, PathChoice::Greedy).unwrap();
//! let t = |s: &[usize], x: f64| Tensor::from_fn(s.to_vec(), |i| x + i[0] as f64).unwrap();
//! let (a, b, c) = (t(&[2, 3], 1.0), t(&[3, 4], 0.5), t(&[4, 2], -1.0));
//! let f = e.eval(&[&a, &b, &c]).unwrap();
//! assert_eq!(f.shape(), &[] as &[usize]);
//!
//! // Its gradient with respect to B: ∂f/∂B_jk = Σ_i A_ij C_ki, seeded with 1.
//! let g = e.gradient(&[1]).unwrap();
//! let db = &g.eval(&[&a, &b, &c], &Tensor::scalar(1.0)).unwrap()[0];
//! let want = einsum::reference_einsum("ij,ki->jk", &[&a, &c]).unwrap();
//! assert!(db.max_abs_diff(&want).unwrap() < 1e-12);
//! ```
//!
//! The primitives are ordinary `computegraph` operations, so graphs can also be built by
//! hand and differentiated with `tidu` directly:
//!
//! ```
//! use std::sync::Arc;
//! use computegraph::{resolve, GraphBuilder, OperationRole::Primary, ValueRef::Local};
//! use einsum::{ContractSpec, c64, Tensor, TensorKey, TensorOp};
//! use tidu::{grad, DerivativeProgram};
//!
//! // f(x) = Σ_i x_i·x_i (no conjugate: holomorphic), df/dx = 2x, and tidu's VJP gives
//! // conj(2x)·seed.
//! let dot = TensorOp::<c64>::contract(ContractSpec::new(&[0], &[0], &[], &[2]).unwrap());
//! let mut b = GraphBuilder::new();
//! let x = b.add_input(TensorKey::var(0));
//! let y = b.add_operation(dot, vec![Local(x), Local(x)], Primary)[0];
//! let f = Arc::new(b.build());
//! let g = grad(&resolve(vec![f.clone()]), &f.global_key(y), &[TensorKey::var(0)]).unwrap();
//! let program = DerivativeProgram::new(&g).unwrap();
//! let xv = Tensor::new(vec![2], vec![c64::new(1.0, 2.0), c64::new(0.0, -1.0)]).unwrap();
//! let one = Tensor::scalar(c64::new(1.0, 0.0));
//! let seed = g.tangent_inputs()[0].0.clone();
//! let out = program.eval(&mut (), |k| Some(if *k == seed { &one } else { &xv })).unwrap();
//! assert_eq!(out[0].as_ref().unwrap().data(), &[c64::new(2.0, -4.0), c64::new(0.0, 2.0)]);
//! ```
//!
//! See `docs/ARCHITECTURE.md` (section *einsum*) for the design and its invariants.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod ad;
mod balance;
mod buffer;
mod checkpoint;
mod closed_sum;
mod cost;
pub mod draw;
mod elem;
mod elementwise;
mod error;
mod fuse;
mod gemm_loop;
pub mod generate;
mod greedy;
mod hadamard;
mod hadamard3;
pub mod hyper;
mod instance;
mod kernel;
#[cfg(test)]
mod kernel_choices;
mod lanes;
mod layout;
mod memory;
mod merge;
mod network;
mod op;
mod pair;
mod path;
pub mod path_cache;
mod permute;
mod plan;
mod product;
mod product_tiles;
mod ranged;
mod reassoc;
mod reduce;
mod reference;
mod rewrite;
mod rng;
mod scaled;
mod scan;
pub mod search;
mod slice;
mod sliced;
mod sliced_hvp;
mod small_gemm;
mod stop;
mod subscripts;
mod sum_seed;
mod tensor;
mod thin_gemm;
mod threads;
#[cfg(test)]
mod threads_tests;

pub use buffer::{POOL_MIN_BYTES, PooledVec, release_buffers};
pub use checkpoint::CheckpointedGradient;
pub use closed_sum::SumGradient;
pub use elem::{Elem, Strided, StridedMut, c64};
pub use error::{EinsumError, EinsumResult};
pub use hadamard::{Hadamard, HadamardOutputs};
pub use hadamard3::Hadamard3;
pub use instance::{BUNDLED_DIR, Dtype, Instance};
pub use kernel::{ContractSpec, UnarySpec};
pub use memory::{DEFAULT_MEMORY_LIMIT, MemoryLimit, ParseBytesError, format_bytes, tensor_bytes};
pub use network::{Einsum, EinsumCache, EinsumGradient, EinsumHvp, EinsumOptions};
pub use op::{TensorKey, TensorOp};
pub use pair::PairSpec;
pub use path::{ContractionPath, FollowedPath, PairStep, PathChoice, PathOperand};
pub use plan::Plan;
pub use product::{ElementwiseProduct, ProductOutputs};
pub use reference::{reference_einsum, reference_labels};
pub use scaled::ScaledTensor;
pub use scan::RangeScan;
pub use slice::{SlicePlan, Slicing};
pub use sliced::{OutputBlocks, SlicedEinsum, SlicedGradient};
pub use sliced_hvp::SlicedHvp;
pub use stop::with_stop;
pub use subscripts::{LabelledNetwork, Subscripts};
pub use tensor::Tensor;
