//! Integration tests of `computegraph` with the reference set: one test binary, one module
//! per concern. They live here rather than in `computegraph`, because they use this crate
//! (its operations, `GraphSpec` and its reference evaluator, the workloads), which depends
//! on the engine: the engine has no dev-dependency on a crate above it.
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
//! - `drops`: operand values in the slots dropped exactly once, on success, error and panic.
//!
//! Expected values always come from an independent reference (the spec evaluator, a
//! model, or hand derivation from the documented semantics), never from running the
//! code under test.

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
mod support;
mod threads;
