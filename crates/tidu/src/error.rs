//! The AD error type.

use std::fmt;

use computegraph::GraphError;

/// Which rule of a primitive.
///
/// ```
/// assert_eq!(tidu::RuleKind::Jvp.to_string(), "JVP");
/// assert_eq!(tidu::RuleKind::Transpose.to_string(), "transpose");
/// ```
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum RuleKind {
    /// The JVP (linearization) rule.
    Jvp,
    /// The transpose rule.
    Transpose,
}

impl fmt::Display for RuleKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RuleKind::Jvp => "JVP",
            RuleKind::Transpose => "transpose",
        })
    }
}

/// Errors of the AD transforms and rules.
///
/// ```
/// use tidu::{ADRuleError, RuleKind};
///
/// // What a primitive returns from `try_jvp_rule` when it has no such rule.
/// let e = ADRuleError::missing(&"argmax", RuleKind::Jvp, "piecewise constant");
/// assert_eq!(e.to_string(), "operation `\"argmax\"` has no JVP rule: piecewise constant");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ADRuleError {
    /// The primitive has no such rule (or not for this role).
    MissingRule {
        /// The operation, as text.
        operation: String,
        /// Which rule.
        rule: RuleKind,
        /// Why, when the primitive says.
        reason: String,
    },
    /// A rule broke the contract: wrong number of results, a value that is not its own...
    RuleContract {
        /// The operation, as text.
        operation: String,
        /// Which rule.
        rule: RuleKind,
        /// What is wrong.
        message: String,
    },
    /// A linear graph is not linear: a primal-role operation, an active operand that does
    /// not depend on the tangents, or a fixed operand that does.
    NonLinear {
        /// The operation, as text.
        operation: String,
        /// What is wrong.
        message: String,
    },
    /// A graph-engine error (an unresolved key, an invalid emitted operation...).
    Graph(GraphError),
    /// Misuse of the eager tape, or an executor's failure ([`crate::eager`]).
    Eager(EagerError),
}

impl ADRuleError {
    /// A missing-rule error for `operation`.
    pub fn missing(operation: &impl fmt::Debug, rule: RuleKind, reason: impl Into<String>) -> Self {
        ADRuleError::MissingRule { operation: format!("{operation:?}"), rule, reason: reason.into() }
    }
}

impl fmt::Display for ADRuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ADRuleError::MissingRule { operation, rule, reason } => {
                write!(f, "operation `{operation}` has no {rule} rule")?;
                if !reason.is_empty() {
                    write!(f, ": {reason}")?;
                }
                Ok(())
            }
            ADRuleError::RuleContract { operation, rule, message } => {
                write!(f, "the {rule} rule of `{operation}` broke the contract: {message}")
            }
            ADRuleError::NonLinear { operation, message } => {
                write!(f, "operation `{operation}` in a linear graph is not linear: {message}")
            }
            ADRuleError::Graph(e) => write!(f, "{e}"),
            ADRuleError::Eager(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ADRuleError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ADRuleError::Graph(e) => Some(e),
            ADRuleError::Eager(e) => Some(e),
            _ => None,
        }
    }
}

impl From<GraphError> for ADRuleError {
    fn from(e: GraphError) -> Self {
        ADRuleError::Graph(e)
    }
}

/// `Result` with [`ADRuleError`].
///
/// ```
/// use std::sync::Arc;
/// use computegraph::{resolve, GraphBuilder, OperationRole::Primary, ValueRef::Local};
/// use scalar::{ScalarKey, ScalarOp};
/// use tidu::{try_linear_transpose, try_linearize, ADRuleResult, LinearizedGraph};
///
/// fn gradient_graph(f: &Arc<computegraph::Graph<ScalarOp>>, y: computegraph::LocalValueId) -> ADRuleResult<LinearizedGraph<ScalarOp>> {
///     try_linear_transpose(&try_linearize(&resolve(vec![f.clone()]), &[f.global_key(y)], &[ScalarKey::var(0)])?)
/// }
/// let mut b = GraphBuilder::<ScalarOp>::new();
/// let x = b.add_input(ScalarKey::var(0));
/// let y = b.add_operation(ScalarOp::Sin, vec![Local(x)], Primary)[0];
/// assert_eq!(gradient_graph(&Arc::new(b.build()), y).unwrap().tangent_outputs().len(), 1);
/// ```
pub type ADRuleResult<T> = Result<T, ADRuleError>;

/// Misuse of the tape or a failure reported by the executor; carried by
/// [`ADRuleError::Eager`].
///
/// ```
/// use scalar::{eager::Tape, ScalarOp};
/// use tidu::{eager::EagerError, ADRuleError};
///
/// let (mut a, mut b) = (Tape::new(), Tape::new());
/// let x = a.leaf(1.0, true).unwrap();
/// let y = a.apply(ScalarOp::Sin, &[&x]).unwrap().remove(0);
/// // `y` was recorded by `a`'s recorder: `b` cannot record an operation on it.
/// let err = b.apply(ScalarOp::Cos, &[&y]).err().unwrap();
/// assert!(matches!(err, ADRuleError::Eager(EagerError::ForeignTrace { input: 0 })), "{err}");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EagerError {
    /// An input's trace was made by another recorder.
    ForeignTrace {
        /// Which input of the invocation.
        input: usize,
    },
    /// The numbers of inputs or outputs do not match the recorded graph's.
    Arity {
        /// `"inputs"` or `"outputs"`.
        what: &'static str,
        /// The graph's count.
        expected: usize,
        /// The count given.
        got: usize,
    },
    /// The recorded graph is not self-contained: it has parents or an operand from
    /// another graph, which the tape has no data for.
    NotSelfContained {
        /// What is wrong.
        message: String,
    },
    /// A retained value's key is neither an output key nor a value of the recorded graph.
    UnknownRetainedValue {
        /// The key, as text.
        key: String,
    },
    /// `try_backward`'s output key is not an output of the given trace.
    UnknownOutput {
        /// The key, as text.
        key: String,
    },
    /// A primal value the transposed graph reads was neither kept nor produced by
    /// `execute_forward`.
    MissingPrimal {
        /// The key, as text.
        key: String,
    },
    /// The executor returned the wrong number of cotangents.
    CotangentCount {
        /// How many the transposed graph has outputs.
        expected: usize,
        /// How many were returned.
        got: usize,
    },
    /// The key source handed out a key it had handed out before.
    KeySourceRepeated {
        /// The key, as text.
        key: String,
    },
    /// An output key is given twice, or is also the key of one of the invocation's inputs:
    /// cotangents accumulate by key, so keys must be unique per value.
    DuplicateKey {
        /// The key, as text.
        key: String,
    },
    /// An input's key is not an output key of the trace it claims was its producer.
    TraceMismatch {
        /// Which input of the invocation.
        input: usize,
    },
    /// The executor rejected something (a seed's shape, say).
    Executor {
        /// The executor's message.
        message: String,
    },
}

impl EagerError {
    /// An executor's error, as an [`ADRuleError`].
    pub fn executor(message: impl Into<String>) -> ADRuleError {
        ADRuleError::Eager(EagerError::Executor { message: message.into() })
    }
}

impl fmt::Display for EagerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EagerError::ForeignTrace { input } => {
                write!(f, "input {input} has a trace from another recorder")
            }
            EagerError::Arity { what, expected, got } => {
                write!(f, "the recorded graph has {expected} {what}, but the call gives {got}")
            }
            EagerError::KeySourceRepeated { key } => {
                write!(f, "the key source handed out {key} twice; its keys must be fresh")
            }
            EagerError::DuplicateKey { key } => write!(
                f,
                "key {key} names two values of one invocation (an output twice, or an output and an input); keys must be unique per value"
            ),
            EagerError::TraceMismatch { input } => {
                write!(f, "input {input}'s key is not an output of the trace given with it")
            }
            EagerError::NotSelfContained { message } => {
                write!(f, "a recorded graph must be self-contained: {message}")
            }
            EagerError::UnknownRetainedValue { key } => {
                write!(f, "retained value {key} is neither an output key nor a value of the recorded graph")
            }
            EagerError::UnknownOutput { key } => write!(f, "{key} is not an output of the given trace"),
            EagerError::MissingPrimal { key } => write!(
                f,
                "the backward pass needs primal value {key}, which was not retained and execute_forward did not produce"
            ),
            EagerError::CotangentCount { expected, got } => {
                write!(f, "run_transposed_linear returned {got} cotangents for {expected} outputs")
            }
            EagerError::Executor { message } => write!(f, "the executor failed: {message}"),
        }
    }
}

impl std::error::Error for EagerError {}
