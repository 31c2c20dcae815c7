//! The reference set of `scalar.rs` with its eager frontend, for the doc examples of
//! `tidu::eager`. They declare this file as their `scalar` module on a hidden line
//! (`#[path = "../../doc/scalar_eager.rs"] mod scalar;` from `src/eager/`), so they read
//! like programs using the `scalar` crate, without a dev-dependency on it.
//!
//! [`eager`] is `scalar::eager`'s own tape and executor: `eager/tape.rs` is the one
//! source of `Tape`, `Var` and `ScalarExecutor`, which the `scalar` crate declares too.

#[path = "scalar.rs"]
mod set;

pub use set::{ScalarKey, ScalarOp};

/// The eager frontend and executor of `scalar::eager` (without its spec-driven extras).
pub mod eager {
    #[path = "tape.rs"]
    mod tape;

    pub use tape::{Gradients, ScalarExecutor, Tape, Var};
}
