//! `tidu`: automatic differentiation as graph-to-graph transforms.
//!
//! Over any operation set that implements [`Primitive`] (JVP and transpose rules, and an
//! `add()` for cotangent accumulation), tidu provides two transforms on
//! [`computegraph`] graphs:
//! - [`linearize`]: the JVP transform, like `jax.linearize`: a primal graph to a linear
//!   graph of tangents;
//! - [`linear_transpose`]: the reverse of a linear graph (VJP), accumulating fan-out by
//!   global key with `add()` operations.
//!
//! Both produce ordinary graphs of the same operation set, so they nest without special
//! cases: forward-over-forward, forward-over-reverse (Hessian-vector products),
//! reverse-over-reverse, to any order, with CSE across levels through structural keys.
//!
//! For eager frontends, [`eager`] records invocations on a tape and runs reverse mode
//! over it (`Recorder`, `try_backward`).
//!
//! ```text
//! JVP:  build → resolve → linearize → materialize_merge → compile → eval
//! VJP:  build → resolve → linearize → linear_transpose → materialize_merge → compile → eval
//! HVP:  build → resolve → linearize → linear_transpose → resolve → linearize → …
//! ```

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod api;
pub mod eager;
pub mod emit;
mod error;
mod linearize;
mod linearized;
mod primitive;
#[cfg(feature = "testing")]
pub mod testing;
mod transpose;

pub use api::{DerivativeProgram, grad, hvp, jvp, vjp};
pub use error::{ADRuleError, ADRuleResult, RuleKind};
pub use linearize::{linearize, linearize_with, try_linearize, try_linearize_with};
pub use linearized::LinearizedGraph;
pub use primitive::{ADKey, DiffPassId, Primitive, PrimitiveBuilder, PrimitiveValue, fresh_pass_id, unknown_operand};
pub use transpose::{linear_transpose, try_linear_transpose, try_linear_transpose_with};

/// Paths for [`rules_from_try_forms!`], so it expands in crates that name `computegraph`
/// differently or not at all.
#[doc(hidden)]
pub mod __private {
    pub use computegraph::{LocalValueId, OperationRole, ValueKey};
}

/// The guides' programs, run as doc tests so they stay true.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide-primitives.md")]
pub struct GuidePrimitives;

/// The eager guide's program, over the reference set (`scalar`, a dev-dependency).
#[cfg(doctest)]
#[doc = include_str!("../../../docs/guide-eager.md")]
pub struct GuideEager;

/// The reference set's graph-level types for unit tests (`linearized.rs`'s), declared
/// from their file in `scalar`: a unit test cannot use the `scalar` crate itself, which is
/// built against tidu's library, not this test build, so its types would implement another
/// tidu's traits (ADR 0012, *Tests beside their crates*).
#[cfg(test)]
#[path = "../../scalar/src/ops.rs"]
#[allow(dead_code)]
mod scalar_ops;
