//! The AD error type.

use std::fmt;

use computegraph::GraphError;

use crate::eager::EagerError;

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
