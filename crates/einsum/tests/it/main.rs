//! Integration tests of the `einsum` crate (one binary, one module per area).

mod balance;
mod checkpoint;
mod closed_sum;
mod gradients;
mod instances;
mod merge;
mod network;
mod plan;
mod robustness;
mod rules;
mod scale;
mod scaled;
mod search;
mod semantics;
mod sliced_hvp;
mod slicing;
mod sum_seed;
