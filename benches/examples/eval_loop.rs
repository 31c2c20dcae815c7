//! Evaluates issue 18's add/mul/neg window DAG (10^6 nodes by default) with the
//! spec-user set and the project's scalar set, many times, for profilers: callgrind's
//! instruction and branch-miss counts do not depend on the machine's load.
//!
//! `cargo run --release -p benches --example eval_loop -- [nodes] [rounds] [spec_user|ours|boxed]`

use std::hint::black_box;

use benches::{BoxedProgram, INPUT_SEED, SPEC_SEED, baseline_spec, bind_inputs, build, materialize, spec_user};
use computegraph::{EvalState, compile};
use scalar::workloads::{self, Operands};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: usize = args.get(1).map_or(1_000_000, |s| s.parse().expect("nodes"));
    let rounds: usize = args.get(2).map_or(20, |s| s.parse().expect("rounds"));
    let who = args.get(3).map_or("spec_user", |s| s.as_str());
    let spec = workloads::random_dag_of(n, Operands::Window(1024), 0.3, SPEC_SEED, workloads::pick_arithmetic);
    let inputs = workloads::inputs_for(&spec, INPUT_SEED);
    let mut times = Vec::with_capacity(rounds);
    let mut sum = 0.0;
    let mut timed = |f: &mut dyn FnMut() -> f64| {
        let t = std::time::Instant::now();
        sum += f();
        times.push(t.elapsed().as_secs_f64() * 1e3);
    };
    match who {
        "spec_user" => {
            let p = spec_user::program(&spec_user::to_dag(&spec));
            let bound = spec_user::bind_inputs(&p, &inputs);
            let mut state = EvalState::new();
            for _ in 0..rounds {
                timed(&mut || p.eval_with(&mut state, &mut (), black_box(&bound)).expect("evaluates")[0]);
            }
        }
        "ours" => {
            let p = compile(&materialize(&build(&spec)));
            let bound = bind_inputs(&p, &inputs);
            let mut state = EvalState::new();
            for _ in 0..rounds {
                timed(&mut || p.eval_with(&mut state, &mut (), black_box(&bound)).expect("evaluates")[0]);
            }
        }
        _ => {
            let p = BoxedProgram::new(&baseline_spec(&spec));
            let mut values = Vec::new();
            for _ in 0..rounds {
                timed(&mut || p.eval(&mut values, black_box(&inputs))[0]);
            }
        }
    }
    times.sort_by(f64::total_cmp);
    let (min, median) = (times.first().copied().unwrap_or(0.0), times.get(times.len() / 2).copied().unwrap_or(0.0));
    println!("{who}: {rounds} rounds, min {min:.3} ms, median {median:.3} ms (checksum {sum})");
}
