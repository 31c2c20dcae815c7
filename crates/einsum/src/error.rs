//! [`EinsumError`]: every way user input can be rejected, as a value with a message.

use std::fmt;

use computegraph::GraphError;
use tidu::ADRuleError;

/// Why an expression, a shape, a path, an instance or an evaluation was rejected.
///
/// ```
/// use einsum::{ContractionPath, Einsum, EinsumError, PathChoice};
///
/// let shapes = [vec![2, 3], vec![3, 4]];
/// let bad_shape = Einsum::<f64>::new("ij,jk->ik", &[vec![2, 3], vec![5, 4]], PathChoice::Greedy);
/// assert!(matches!(bad_shape, Err(EinsumError::Shape(_))));
/// let bad_path = PathChoice::Explicit(ContractionPath::new(vec![[0, 2]]));
/// assert!(matches!(Einsum::<f64>::new("ij,jk->ik", &shapes, bad_path), Err(EinsumError::Path { .. })));
/// assert!(matches!(Einsum::<f64>::new("ij,jk->i?", &shapes, PathChoice::Greedy), Err(EinsumError::Parse { .. }) | Err(EinsumError::Shape(_))));
/// ```
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum EinsumError {
    /// The subscripts do not parse.
    Parse {
        /// The expression.
        expression: String,
        /// Character offset of the problem.
        position: usize,
        /// What is wrong.
        message: String,
    },
    /// Shapes, operand counts or data lengths do not agree with the subscripts.
    Shape(String),
    /// A contraction path is invalid (out of range, reuses a consumed operand, incomplete).
    Path {
        /// The 0-based step, if the problem is at one step.
        step: Option<usize>,
        /// What is wrong.
        message: String,
    },
    /// A benchmark instance (JSON) is malformed.
    Instance(String),
    /// A tensor of the contraction (an operand, an intermediate, the output), or the
    /// tensors alive together at one step, would exceed the memory limit
    /// ([`crate::MemoryLimit`]). Raised before anything is allocated.
    Memory {
        /// Which tensor or step: `operand 1 (shape [..])`, `step 3 of the path …`.
        what: String,
        /// The bytes it needs; `None`: more than 2^64.
        bytes: Option<u64>,
        /// The limit in bytes; `None`: there was no limit in the way, the allocator
        /// refused the memory.
        limit: Option<u64>,
    },
    /// Slicing was asked for something the network does not have: an unknown or repeated
    /// sliced label, a slice range past the slice count ([`crate::SlicedEinsum`]).
    Slice(String),
    /// The graph engine rejected a graph or an evaluation.
    Graph(GraphError),
    /// An automatic-differentiation transform failed.
    Ad(ADRuleError),
    /// A path search's settings are invalid (an unknown objective, a label without a
    /// size given to [`crate::hyper::hyper_path`]).
    Search(String),
    /// A path search was ended by its caller's `stop` test
    /// ([`crate::search::find_path_until`]), or an evaluation by its thread's stop flag
    /// ([`crate::with_stop`]).
    Interrupted,
}

impl fmt::Display for EinsumError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EinsumError::Parse { expression, position, message } => {
                write!(f, "bad einsum subscripts `{expression}` at character {position}: {message}")
            }
            EinsumError::Shape(m) => write!(f, "shape error: {m}"),
            EinsumError::Path { step: Some(s), message } => {
                write!(f, "invalid contraction path at step {s}: {message}")
            }
            EinsumError::Path { step: None, message } => write!(f, "invalid contraction path: {message}"),
            EinsumError::Instance(m) => write!(f, "malformed instance: {m}"),
            EinsumError::Search(m) => write!(f, "path search: {m}"),
            EinsumError::Memory { what, bytes, limit: Some(limit) } => write!(
                f,
                "memory limit exceeded: {what} needs {}, over the limit of {}",
                crate::memory::format_bytes(*bytes),
                crate::memory::format_bytes(Some(*limit))
            ),
            EinsumError::Memory { what, bytes, limit: None } => {
                write!(
                    f,
                    "out of memory: {what} needs {}, which the allocator refused",
                    crate::memory::format_bytes(*bytes)
                )
            }
            EinsumError::Slice(m) => write!(f, "slicing error: {m}"),
            EinsumError::Graph(e) => write!(f, "graph error: {e}"),
            EinsumError::Ad(e) => write!(f, "differentiation error: {e}"),
            EinsumError::Interrupted => write!(f, "interrupted by the caller's stop test"),
        }
    }
}

impl std::error::Error for EinsumError {}

impl From<GraphError> for EinsumError {
    fn from(e: GraphError) -> Self {
        EinsumError::Graph(e)
    }
}

impl From<ADRuleError> for EinsumError {
    fn from(e: ADRuleError) -> Self {
        EinsumError::Ad(e)
    }
}

/// `Result` with [`EinsumError`].
///
/// ```
/// use einsum::{reference_einsum, EinsumResult, Tensor};
///
/// fn trace(m: &Tensor<f64>) -> EinsumResult<f64> {
///     Ok(reference_einsum("ii->", &[m])?.get(&[]).unwrap_or(0.0))
/// }
/// assert_eq!(trace(&Tensor::new(vec![2, 2], vec![1.0, 9.0, 9.0, 2.0]).unwrap()).unwrap(), 3.0);
/// assert!(trace(&Tensor::new(vec![2, 3], vec![0.0; 6]).unwrap()).is_err());
/// ```
pub type EinsumResult<T> = Result<T, EinsumError>;
