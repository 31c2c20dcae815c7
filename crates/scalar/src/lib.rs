//! A scalar `f64` reference operation set for tests, benches and fuzzing.
//!
//! - [`ScalarOp`]: add, mul, neg, exp, sin, cos, a two-output `sincos`, and constants.
//! - [`ScalarKey`]: input keys (`Var(i)`, and tangent keys for AD passes).
//! - [`spec`]: a plain description of a scalar DAG with a trivially correct reference
//!   evaluator, and a builder that turns it into `computegraph` fragments.
//! - [`eager`]: the reference eager executor and a minimal eager frontend.
//! - [`workloads`]: the benchmark shapes of `docs/SPEC.md` §8.1 as specs.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod complex;
pub mod eager;
pub mod spec;
pub mod workloads;

// The set's engine-level half (`ops.rs`: the types, `GraphOperation`, evaluation) and its
// AD rules (`ad.rs`: `Primitive`, `ADKey`), each in its own file.
mod ad;
mod ops;

pub use ops::{ScalarKey, ScalarOp};

#[cfg(test)]
mod tests {
    use super::*;
    use computegraph::{EvaluableGraphOperation, GraphOperation};

    #[test]
    fn eval_into_matches_apply() {
        let x = 0.7;
        let y = -1.3;
        for op in ScalarOp::ALL {
            let args: Vec<f64> = [x, y][..op.input_count()].to_vec();
            let refs: Vec<&f64> = args.iter().collect();
            let got = op.eval(&mut (), &refs);
            assert_eq!(got.len(), op.output_count(), "{op:?}");
            assert_eq!(got, op.apply(&args), "{op:?}");
        }
    }
}
