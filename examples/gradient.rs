//! Builds a large random scalar DAG and times the AD pipeline: linearize, linear_transpose,
//! then the gradient program's materialize, compile and eval.
//!
//! ```text
//! cargo run --release -p examples --example gradient -- [NODES]
//! ```

use std::time::Instant;

use computegraph::{EvalState, KeyInterner, compile, materialize_merge, resolve};
use scalar::ScalarKey;
use scalar::workloads::{self, Operands};

fn main() {
    let nodes: usize =
        std::env::args().nth(1).map(|s| s.replace('_', "").parse().expect("NODES is a number")).unwrap_or(1_000_000);
    let mut spec = workloads::random_dag(nodes, Operands::Window(1024), 0.3, 3);
    // One scalar output: the last sink.
    spec.outputs.truncate(1);
    let inputs = workloads::inputs_for(&spec, 5);
    let interner = KeyInterner::new();
    let built = spec.build_single(&interner).expect("valid spec");
    let wrt: Vec<ScalarKey> = (0..spec.inputs).map(ScalarKey::var).collect();
    let view = resolve(built.graphs.clone());
    let per = |t: Instant| t.elapsed().as_secs_f64() * 1e9 / nodes as f64;
    let total = Instant::now();

    let t = Instant::now();
    let lin = tidu::linearize(&view, &built.outputs, &wrt);
    let t_lin = per(t);
    let t = Instant::now();
    let tr = tidu::linear_transpose(&lin);
    let t_tr = per(t);
    let keys: Vec<_> = tr.tangent_output_keys().into_iter().flatten().collect();
    let t = Instant::now();
    let flat = materialize_merge(&resolve(vec![tr.graph().clone()]), &keys);
    let t_mat = per(t);
    let t = Instant::now();
    let program = compile(&flat);
    let t_comp = per(t);
    let seed = tr.tangent_inputs()[0].0.clone();
    let refs = program
        .bind_inputs(|k| match k {
            ScalarKey::Var(i) => inputs.get(*i as usize),
            _ if *k == seed => Some(&1.0),
            _ => None,
        })
        .expect("bound");
    let t = Instant::now();
    let grad = program.eval_with(&mut EvalState::new(), &mut (), &refs).expect("evaluates");
    let t_eval = per(t);
    let secs = total.elapsed().as_secs_f64();

    // Hessian-vector products: build and compile once, then evaluate per direction.
    let t = Instant::now();
    let h = tidu::hvp(&view, &built.outputs[0], &wrt).expect("hvp");
    let hkeys: Vec<_> = h.tangent_output_keys().into_iter().flatten().collect();
    let hprog = compile(&materialize_merge(&resolve(vec![h.graph().clone()]), &hkeys));
    let t_hvp_build = t.elapsed().as_secs_f64();
    let hvals: Vec<f64> = hprog
        .input_keys()
        .iter()
        .map(|k| match k {
            ScalarKey::Var(i) => inputs[*i as usize],
            _ => 1.0, // the direction and the gradient's seed
        })
        .collect();
    let hrefs: Vec<&f64> = hvals.iter().collect();
    let mut st = EvalState::new();
    let reps = 5;
    let t = Instant::now();
    for _ in 0..reps {
        std::hint::black_box(hprog.eval_with(&mut st, &mut (), &hrefs).expect("evaluates"));
    }
    let t_hvp_eval = t.elapsed().as_secs_f64() / reps as f64;
    println!(
        "random DAG, {nodes} primal nodes ({} after CSE)",
        materialize_merge(&view, &built.outputs).operation_count()
    );
    println!("  linearize        {t_lin:8.1} ns/node  ({} linear ops)", lin.graph().operation_count());
    println!("  linear_transpose {t_tr:8.1} ns/node  ({} transposed ops)", tr.graph().operation_count());
    println!("  materialize      {t_mat:8.1} ns/node  ({} ops in the gradient program)", flat.operation_count());
    println!("  compile          {t_comp:8.1} ns/node");
    println!("  eval             {t_eval:8.1} ns/node");
    println!("  gradient of {} inputs in {secs:.2} s total", grad.len());
    let primal_ops = materialize_merge(&view, &built.outputs).operation_count() as f64;
    println!(
        "  sizes per primal operation (after CSE): JVP {:.2}, VJP {:.2}, gradient program {:.2}, HVP program {:.2}",
        lin.graph().operation_count() as f64 / primal_ops,
        tr.graph().operation_count() as f64 / primal_ops,
        flat.operation_count() as f64 / primal_ops,
        hprog.instruction_count() as f64 / primal_ops,
    );
    println!(
        "  HVP: built and compiled in {:.2} s; one product evaluates in {:.1} ms ({:.1} ns per primal node, {:.0} products/s)",
        t_hvp_build,
        t_hvp_eval * 1e3,
        t_hvp_eval * 1e9 / nodes as f64,
        1.0 / t_hvp_eval
    );
}
