//! Dense tensor contractions on `computegraph`, differentiable with `tidu`.

#![deny(missing_docs)]

mod ad;
mod elem;
mod error;
mod instance;
pub mod kernel;
mod network;
mod op;
mod path;
mod reference;
mod subscripts;
mod tensor;

pub use elem::{Elem, Strided, StridedMut, c64};
pub use error::{EinsumError, EinsumResult};
pub use instance::Instance;
pub use network::{Einsum, EinsumCache, EinsumGradient, EinsumHvp, PathChoice};
pub use op::{TensorKey, TensorOp};
pub use path::ContractionPath;
pub use reference::{REFERENCE_MAX_ITERATIONS, reference_einsum, reference_labels};
pub use subscripts::Subscripts;
pub use tensor::Tensor;
