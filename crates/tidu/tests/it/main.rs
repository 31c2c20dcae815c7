//! Integration tests of `tidu` over the scalar reference set.

mod pipelines;
mod support;
mod transforms;
mod worked_example;
