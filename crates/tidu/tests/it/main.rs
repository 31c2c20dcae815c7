//! Integration tests of `tidu` over the scalar reference set.

mod checker;
mod complex;
mod deep;
mod eager;
mod pipelines;
mod properties;
mod resolver;
mod support;
mod transforms;
mod worked_example;
