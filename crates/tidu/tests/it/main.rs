//! Integration tests of `tidu` over the scalar reference set.

mod support;
mod worked_example;
