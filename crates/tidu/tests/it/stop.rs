//! The transforms stop when the flag of `computegraph::stop::with_stop` is raised: each
//! returns `ADRuleError::Graph(GraphError::Interrupted)` on a chain long enough for its
//! pass to read the flag, and the same calls with the flag down give the derivative.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use computegraph::{GraphError, resolve, stop};
use scalar::{ScalarKey, ScalarOp};
use tidu::{ADRuleError, try_linear_transpose, try_linearize};

use crate::support::{builder, eval, op};

/// More operations than a pass handles between two reads of the flag.
const LINKS: usize = 3 * stop::POLL_EVERY as usize;

/// `run` with a stop flag installed, up or down.
fn with<R>(up: bool, run: impl FnOnce() -> R) -> R {
    stop::with_stop(Arc::new(AtomicBool::new(up)), run)
}

#[test]
fn linearize_and_transpose_stop_when_the_flag_is_up() {
    let mut b = builder();
    let x = b.add_input(ScalarKey::var(0));
    let mut y = x;
    for _ in 0..LINKS {
        y = op(&mut b, ScalarOp::Sin, &[y]);
    }
    b.set_outputs(vec![y]);
    let f = Arc::new(b.build());
    let view = resolve(vec![f.clone()]);
    let out = [f.global_key(y)];
    let wrt = [ScalarKey::var(0)];
    let interrupted = Err(ADRuleError::Graph(GraphError::Interrupted));

    assert_eq!(with(true, || try_linearize(&view, &out, &wrt).map(|_| ())), interrupted);
    let lin = with(false, || try_linearize(&view, &out, &wrt)).expect("the flag is down");
    assert_eq!(with(true, || try_linear_transpose(&lin).map(|_| ())), interrupted);
    let transposed = with(false, || try_linear_transpose(&lin)).expect("the flag is down");

    // The derivative of sin∘…∘sin at x0 is the product of cos over the chain's values.
    let x0 = 0.7;
    let (mut v, mut d) = (x0, 1.0);
    for _ in 0..LINKS {
        d *= f64::cos(v);
        v = v.sin();
    }
    let seed = |g: &tidu::LinearizedGraph<ScalarOp>| g.tangent_inputs()[0].0.clone();
    // The forward pass multiplies in the loop's order; the reverse pass in the other.
    for g in [&lin, &transposed] {
        let values = HashMap::from([(ScalarKey::var(0), x0), (seed(g), 1.0)]);
        let [Some(got)] = eval(g, &values)[..] else { panic!("one derivative expected") };
        assert!((got - d).abs() <= 1e-12 * d.abs(), "{got} against {d}");
    }
}
