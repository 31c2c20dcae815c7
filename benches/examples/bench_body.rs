//! One bench body run a fixed number of times, for instruction counts under callgrind,
//! which do not move with the machine's load as criterion's timings do (issue 38's
//! regression checks, `docs/PERFORMANCE.md`):
//!
//! ```text
//! valgrind --tool=callgrind target/release/examples/bench_body steps 100x1 200
//! ```
//!
//! Modes: `steps NxCHI ITERS` (`einsum_steps/mps_nN_chiCHI/ours`), `forward NAME ITERS` and
//! `gradient NAME ITERS` (`einsum_instances`), `eager untracked|recorded ITERS` (the eager
//! tape's forward), `linearize N ITERS` (`ad/linearize`, setup included).

use std::hint::black_box;

use benches::einsum::{gradient, instance, mps};
use computegraph::EvalState;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, mode, what, iters] = &args[..] else {
        eprintln!("usage: bench_body steps|forward|gradient|eager|linearize WHAT ITERS");
        std::process::exit(2);
    };
    let iters: usize = iters.parse().expect("ITERS: a count");
    match mode.as_str() {
        "steps" => {
            let (n, chi) = what.split_once('x').expect("NxCHI");
            let net = mps(n.parse().expect("N"), chi.parse().expect("CHI"));
            let (e, refs) = (net.einsum(), net.refs());
            let mut state = EvalState::new();
            for _ in 0..iters {
                black_box(e.eval_with(&mut state, black_box(&refs)).expect("evaluates"));
            }
        }
        "forward" => {
            let net = instance(what);
            let (e, refs) = (net.einsum(), net.refs());
            for _ in 0..iters {
                black_box(e.eval(black_box(&refs)).expect("evaluates"));
            }
        }
        "gradient" => {
            let net = instance(what);
            let (e, refs) = (net.einsum(), net.refs());
            let (grad, ones) = gradient(&e);
            for _ in 0..iters {
                black_box(grad.eval(black_box(&refs), &ones).expect("evaluates"));
            }
        }
        "eager" => {
            let spec = benches::eager::ten_ops();
            let mut tape = scalar::eager::Tape::new();
            for _ in 0..iters {
                black_box(benches::eager::forward(&mut tape, &spec, what == "recorded"));
            }
        }
        "linearize" => {
            let n: usize = what.parse().expect("N");
            for _ in 0..iters {
                let w = benches::ad::AdWorkload::new(n);
                let lin = w.linearize();
                black_box((w, lin));
            }
        }
        _ => {
            eprintln!("unknown mode {mode}");
            std::process::exit(2);
        }
    }
}
