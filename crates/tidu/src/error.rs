//! The AD error type.

use std::fmt;

use computegraph::GraphError;

use crate::eager::EagerError;

/// Which rule of a primitive.
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
pub type ADRuleResult<T> = Result<T, ADRuleError>;
