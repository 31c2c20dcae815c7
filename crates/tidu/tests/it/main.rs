//! Integration tests of `tidu` with the reference set: one test binary, one module per
//! concern. They use `scalar` (its operations and their rules, the complex set,
//! `GraphSpec`, the eager frontend), a crate above tidu, through a dev-dependency: Cargo
//! builds it against tidu's library, which is what this binary links too (ADR 0012,
//! "Tests beside their crates").
//!
//! - `worked_example`: f(x) = (x+x)·x of `docs/SPEC.md` §4.4;
//! - `pipelines`: JVP, VJP, FoF, HVP, RoR end to end, against closed forms;
//! - `transforms`: repeated outputs, duplicated operations, symbolic zeros, pruning, CSE
//!   across levels, linearity and rule errors;
//! - `checker`: `tidu::testing::check_rules` on every rule, and on wrong rules it must catch;
//! - `properties`: random graphs through `tidu::testing::check_graph`;
//! - `complex`: the complex set under the adjoint convention;
//! - `resolver`: the transforms over a user's fragment store;
//! - `standalone`: linear maps compiled on their own, primal values bound by key;
//! - `deep`: a long chain on a 256 KiB stack (`TIDU_DEEP_CHAIN` sets its depth);
//! - `eager`: `tidu::eager` through `scalar::eager::Tape`, against graph mode;
//! - `stop`: the transforms end on a raised stop flag (Ctrl-C);

mod checker;
mod complex;
mod deep;
mod eager;
mod pipelines;
mod properties;
mod resolver;
mod standalone;
mod stop;
mod support;
mod transforms;
mod worked_example;
