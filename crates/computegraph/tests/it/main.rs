//! Integration tests of `computegraph` with the reference set: one test binary, one module
//! per concern. They use `scalar` (its operations, `GraphSpec` and its reference
//! evaluator, the workloads), a crate above the engine, through a dev-dependency: Cargo
//! builds it against the engine's library, which is what this binary links too (ADR 0012,
//! "Tests beside their crates").
//!
//! - `pipeline`: build → resolve → materialize → compile → eval against the scalar
//!   reference (`GraphSpec::eval_reference`), CSE exactness, verifiers, edge cases;
//! - `interner`: the key interner against a `HashMap` model;
//! - `errors`: every user-reachable `GraphError`, one test per variant and site;
//! - `deep`: a 10^6-deep chain through every phase on a 256 KiB stack;
//! - `threads`: one interner and one compile cache shared by many threads;
//! - `dump`: text dumps written by hand, DOT output parsed;
//! - `cache`: hits, misses, LRU eviction, stale handles, canonical-form keys;
//! - `reclaim`: interner entries no live graph holds are reclaimed, live ones kept;
//! - `resolver`: user resolvers through `resolve_with`: a fragment store, a 10^4-long
//!   chain reachable only through it, undefined keys and bad answers;
//! - `drops`: operand values in the slots dropped exactly once, on success, error and panic;
//! - `stop`: the interner's table growth and rebuild stop on the stop flag, leaving it whole.
//!
//! Expected values always come from an independent reference (the spec evaluator, a
//! model, or hand derivation from the documented semantics), never from running the
//! code under test.

// The engine's library has documented `unsafe` blocks; its tests have none (the workspace's
// `forbid`, which this crate does not take as a whole).
#![forbid(unsafe_code)]

mod cache;
mod deep;
mod drops;
mod dump;
mod errors;
mod interner;
mod parallel;
mod pipeline;
mod reclaim;
mod resolver;
mod stop;
mod support;
mod threads;
