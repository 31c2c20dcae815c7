//! The crate's error type. Every failure reachable from user input is one of these
//! variants, and its message names the offending key, value or operation.

use std::fmt;

/// Errors of graph construction, resolution, compilation and evaluation.
///
/// Every fallible entry point has a `try_` form that returns it; its message names the
/// offending key or operation.
///
/// ```
/// use computegraph::{GraphBuilder, GraphError, OperationRole::Primary, ValueRef::Local};
/// use scalar::{ScalarKey, ScalarOp};
///
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// let err = b.try_add_operation(ScalarOp::Mul, vec![Local(x)], Primary).unwrap_err();
/// assert!(matches!(err, GraphError::ArityMismatch { expected: 2, found: 1, .. }));
/// assert_eq!(err.to_string(), "operation `mul` takes 2 input(s) but was given 1");
/// ```
///
/// Keys and operations are rendered to text when the error is made, so the error type
/// is not generic and is `Send + Sync + 'static`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum GraphError {
    /// An operation was given a number of inputs different from its `input_count`.
    ArityMismatch {
        /// The operation, as text.
        operation: String,
        /// `input_count()` of the operation.
        expected: usize,
        /// Number of inputs given.
        found: usize,
    },
    /// A `Linearized` role's mask length differs from the operation's input count.
    ActiveMaskMismatch {
        /// The operation, as text.
        operation: String,
        /// `input_count()` of the operation.
        expected: usize,
        /// Length of the mask given.
        found: usize,
    },
    /// An operation declares more outputs than an output slot (`u8`) can index.
    TooManyOutputs {
        /// The operation, as text.
        operation: String,
        /// `output_count()` of the operation.
        outputs: usize,
    },
    /// A local value id does not exist in the graph being built.
    UnknownLocalValue {
        /// The id, as text (`l12`).
        value: String,
        /// Number of values the graph has.
        len: usize,
    },
    /// No fragment of the view defines this derived key.
    UnresolvedKey {
        /// The key, as text.
        key: String,
    },
    /// A key made by one interner was used with another.
    ForeignKey {
        /// The key, as text.
        key: String,
        /// Id of the interner the key belongs to.
        key_interner: u32,
        /// Id of the interner it was used with.
        used_with: u32,
    },
    /// Graphs built on different interners were combined.
    MixedInterners {
        /// Id of the first interner.
        first: u32,
        /// Id of the other interner.
        second: u32,
    },
    /// A [`Resolver`](crate::Resolver) answered a derived key with a definition the view
    /// cannot use: a graph on another interner, a graph that does not define the key, or
    /// an input.
    BadResolution {
        /// The key asked, as text.
        key: String,
        /// What is wrong with the answer.
        reason: String,
    },
    /// A dense id space (`u32`) is exhausted.
    IdSpaceExhausted {
        /// Which id space.
        space: &'static str,
    },
    /// `eval` was given a different number of inputs than the program has.
    InputCountMismatch {
        /// Number of inputs the program expects.
        expected: usize,
        /// Number given.
        found: usize,
    },
    /// An input key the program needs was not bound.
    UnboundInput {
        /// The key, as text.
        key: String,
    },
    /// An operation produced a different number of outputs than it declares.
    OutputCountMismatch {
        /// The operation, as text.
        operation: String,
        /// `output_count()` of the operation.
        expected: usize,
        /// Number produced.
        found: usize,
    },
    /// A verifier found a broken invariant (a bug in the engine or in hand-made data).
    Invalid {
        /// Which phase was verified.
        phase: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A pass stopped because the flag installed by [`stop::with_stop`](crate::stop::with_stop)
    /// was raised (Ctrl-C, a deadline); what it had built is dropped.
    Interrupted,
}

impl fmt::Display for GraphError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GraphError::ArityMismatch { operation, expected, found } => {
                write!(f, "operation `{operation}` takes {expected} input(s) but was given {found}")
            }
            GraphError::ActiveMaskMismatch { operation, expected, found } => {
                write!(f, "operation `{operation}` has {expected} input(s) but its active mask has {found} entries")
            }
            GraphError::TooManyOutputs { operation, outputs } => write!(
                f,
                "operation `{operation}` declares {outputs} outputs; at most 256 are supported (output slots are u8)"
            ),
            GraphError::UnknownLocalValue { value, len } => {
                write!(f, "local value {value} does not exist (the graph has {len} values)")
            }
            GraphError::UnresolvedKey { key } => {
                write!(f, "no graph in the view defines the value {key}")
            }
            GraphError::ForeignKey { key, key_interner, used_with } => {
                write!(f, "the key {key} was made by interner #{key_interner} but used with interner #{used_with}")
            }
            GraphError::MixedInterners { first, second } => {
                write!(f, "graphs from different interners (#{first} and #{second}) cannot be combined")
            }
            GraphError::BadResolution { key, reason } => {
                write!(f, "the resolver's answer for the value {key} cannot be used: {reason}")
            }
            GraphError::IdSpaceExhausted { space } => {
                write!(f, "the {space} id space is exhausted (ids are u32; an interner may set a lower value limit)")
            }
            GraphError::InputCountMismatch { expected, found } => {
                write!(f, "the program takes {expected} input(s) but was given {found}")
            }
            GraphError::UnboundInput { key } => write!(f, "no value was bound to the input {key}"),
            GraphError::OutputCountMismatch { operation, expected, found } => {
                write!(f, "operation `{operation}` declares {expected} output(s) but produced {found}")
            }
            GraphError::Invalid { phase, message } => write!(f, "invalid {phase}: {message}"),
            GraphError::Interrupted => write!(f, "interrupted: the stop flag was raised before the pass was done"),
        }
    }
}

impl std::error::Error for GraphError {}

/// `Result` with [`GraphError`].
///
/// ```
/// use computegraph::{GraphBuilder, GraphResult, LocalValueId};
/// use scalar::{ScalarKey, ScalarOp};
///
/// fn inputs(b: &mut GraphBuilder<ScalarOp>, n: u32) -> GraphResult<Vec<LocalValueId>> {
///     (0..n).map(|i| b.try_add_input(ScalarKey::var(i))).collect()
/// }
/// assert_eq!(inputs(&mut GraphBuilder::new(), 3).unwrap().len(), 3);
/// ```
pub type GraphResult<T> = Result<T, GraphError>;
