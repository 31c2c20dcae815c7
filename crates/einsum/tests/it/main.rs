//! Integration tests of the `einsum` crate (one binary, one module per area).

mod kernel;
mod rules;
