//! `computegraph`: a generic, data-oriented computation-graph engine.
//!
//! Graphs are built in fragments ([`Graph`], via [`GraphBuilder`]) whose values have a
//! structural global identity ([`ValueKey`]), hash-consed by a [`KeyInterner`] to dense
//! `u32` ids. The pipeline is one type per phase:
//!
//! ```text
//! GraphBuilder ──build──▶ Graph ──resolve──▶ ResolvedView ──materialize_merge──▶
//!     MaterializedGraph ──compile──▶ CompiledProgram ──eval──▶ outputs
//! ```
//!
//! The engine is generic over [`GraphOperation`] and knows nothing of automatic
//! differentiation or of any concrete operation; evaluation is opt-in through
//! [`EvaluableGraphOperation`].
//!
//! ```
//! use std::sync::Arc;
//! use computegraph::{compile, materialize_merge, resolve, GraphBuilder, OperationRole::Primary, ValueRef::Local};
//! use scalar::{ScalarOp, ScalarKey};
//!
//! // f(x) = (x + x) * x
//! let mut b = GraphBuilder::<ScalarOp>::new();
//! let x = b.add_input(ScalarKey::var(0));
//! let s = b.add_operation(ScalarOp::Add, vec![Local(x), Local(x)], Primary)[0];
//! let y = b.add_operation(ScalarOp::Mul, vec![Local(s), Local(x)], Primary)[0];
//! b.set_outputs(vec![y]);
//! let f = Arc::new(b.build());
//!
//! let view = resolve(vec![f.clone()]);
//! let flat = materialize_merge(&view, &[f.global_key(y)]);
//! let program = compile(&flat);
//! assert_eq!(program.eval(&mut (), &[&3.0]), vec![18.0]);
//! ```
//!
//! Fragments that no graph names as a parent can come from a user's [`Resolver`] (a
//! fragment store, a cache, a lazy loader) through [`resolve_with`]; the view it builds
//! is an ordinary [`ResolvedView`].
//!
//! Every operation that can fail on user input has a `try_` twin returning
//! [`GraphError`]. See `docs/ARCHITECTURE.md` for the pipeline, code map and invariants.

#![deny(missing_docs)]
#![warn(rust_2018_idioms)]
// Every `unsafe` block says why it is sound (`// SAFETY:`); CI's `-D warnings` denies it.
#![warn(clippy::undocumented_unsafe_blocks)]

mod added;
mod builder;
mod cache;
mod chunk;
mod compile;
mod compiled;
mod dataflow;
mod dispatch;
mod dump;
mod error;
mod eval;
mod graph;
mod hugepages;
mod id;
mod key;
mod keymap;
mod materialize;
mod operation;
mod optable;
mod prefault;
mod prefetch;
mod probe;
mod program;
mod resolve;
mod schedule;
mod slots;
pub mod stop;
mod team;
mod verify;

pub use added::{AddedValues, AddedValuesIter};
pub use builder::GraphBuilder;
pub use cache::{CacheStats, CanonicalForm, CompileCache, ProgramHandle, StructuralKey};
pub use compile::{compile, try_compile};
pub use compiled::CompiledProgram;
pub use dataflow::DATAFLOW_MIN_MEAN_COST;
pub use error::{GraphError, GraphResult};
pub use eval::EvalState;
pub use graph::{DistinctKeys, Graph, LocalOperationId, LocalValueDef, LocalValueId, OperationView, ValueRef};
pub use id::{Id, IdVec, KeyId, OperationKeyId};
pub use key::{KeyInterner, OperationKey, ValueKey};
pub use materialize::{
    MaterializedGraph, MaterializedOperation, MaterializedValueDef, OperationId, ValueId, materialize_merge,
    try_materialize_fragment, try_materialize_merge,
};
pub use operation::{EvaluableGraphOperation, GraphOperation, OperationRole, Outputs};
pub use resolve::{ResolvedView, Resolver, ValueDef, resolve, resolve_with, try_resolve, try_resolve_with};
pub use schedule::PAR_LEVEL_MIN_COST;
