//! The main job: build a large random DAG, run it through the whole pipeline and print
//! per-phase timings.
//!
//! ```text
//! cargo run --release -p examples --example pipeline -- [NODES] [window|uniform|chain]
//! ```

use std::sync::Arc;
use std::time::Instant;

use computegraph::{EvalState, KeyInterner, compile, materialize_merge, resolve};
use scalar::workloads::{self, Operands};

fn main() {
    let mut args = std::env::args().skip(1);
    let nodes: usize =
        args.next().map(|s| s.replace('_', "").parse().expect("NODES must be a number")).unwrap_or(1_000_000);
    let shape = args.next().unwrap_or_else(|| "window".into());
    let spec = match shape.as_str() {
        "window" => workloads::random_dag(nodes, Operands::Window(1024), 0.3, 1),
        "uniform" => workloads::random_dag(nodes, Operands::Uniform, 0.3, 1),
        "chain" => workloads::chain(nodes, 1),
        other => {
            eprintln!("unknown shape `{other}` (expected window, uniform or chain)");
            std::process::exit(2);
        }
    };
    let inputs = workloads::inputs_for(&spec, 7);
    println!("{shape} DAG, {nodes} nodes, {} outputs", spec.outputs.len());
    println!("{:<22} {:>10} {:>10}", "phase", "ms", "ns/node");
    let row = |name: &str, t: Instant| {
        let s = t.elapsed().as_secs_f64();
        println!("{name:<22} {:>10.1} {:>10.1}", s * 1e3, s * 1e9 / nodes as f64);
    };

    let interner = KeyInterner::new();
    let t = Instant::now();
    let built = spec.build_single(&interner).expect("the generated spec is valid");
    row("build (with interning)", t);

    let t = Instant::now();
    let view = resolve(built.graphs.clone());
    row("resolve", t);

    let t = Instant::now();
    let flat = materialize_merge(&view, &built.outputs);
    row("materialize_merge", t);

    let t = Instant::now();
    let program = compile(&flat);
    row("compile", t);

    let input_refs = program
        .bind_inputs(|k| match k {
            scalar::ScalarKey::Var(i) => inputs.get(*i as usize),
            _ => None,
        })
        .expect("every input is bound");
    let mut state = EvalState::new();
    let _ = program.eval_with(&mut state, &mut (), &input_refs).expect("evaluates");
    let t = Instant::now();
    let out = program.eval_with(&mut state, &mut (), &input_refs).expect("evaluates");
    row("eval (sequential)", t);

    let reference = spec.eval_reference(&inputs);
    let same = out.iter().zip(&reference).all(|(a, b)| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()));
    println!(
        "\n{} operations after CSE ({:.0}% merged), {} slots, results match the reference: {same}",
        flat.operation_count(),
        100.0 * (1.0 - flat.operation_count() as f64 / nodes as f64),
        program.slot_count()
    );
    drop(Arc::clone(&built.graphs[0]));
    if !same {
        std::process::exit(1);
    }
}
