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
//! tape's forward), `backward ITERS` (`eager/backward`: a recorded forward, then the
//! backward pass), `linearize N ITERS` (`ad/linearize`, setup included) and `transpose N
//! ITERS` (`ad/linear_transpose`, setup included: a fresh workload and its linearization
//! every iteration, as the bench's setup gives it).

use std::hint::black_box;

use benches::einsum::{gradient, instance, mps};
use computegraph::EvalState;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `backward` takes no WHAT.
    let args: Vec<String> = match args.get(1).map(String::as_str) {
        Some("backward") => [&args[..2], &["-".to_string()], &args[2..]].concat(),
        _ => args,
    };
    let [_, mode, what, iters] = &args[..] else {
        eprintln!("usage: bench_body steps|forward|gradient|eager|backward|linearize|transpose WHAT ITERS");
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
        "backward" => {
            let spec = benches::eager::ten_ops();
            let mut tape = scalar::eager::Tape::new();
            let mut exec = scalar::eager::ScalarExecutor::new();
            for _ in 0..iters {
                let (_leaves, y) = benches::eager::forward(&mut tape, &spec, true);
                black_box(benches::eager::backward(&y, &mut exec));
            }
        }
        "transpose" => {
            let n: usize = what.parse().expect("N");
            for _ in 0..iters {
                let w = benches::ad::AdWorkload::new(n);
                let lin = w.linearize();
                let t = tidu::linear_transpose(&lin);
                black_box((w, lin, t));
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
