//! Integration tests of `tidu` over the scalar reference set.

mod support;
mod transforms;
mod worked_example;
