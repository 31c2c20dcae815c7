//! `cgx demo`: the worked example (`docs/SPEC.md` §4.4) end to end, a tensor network with its
//! gradient, then a large DAG.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use clap::Args;
use computegraph::{Graph, GraphBuilder, KeyInterner, OperationRole, ValueKey, ValueRef, resolve};
use scalar::{ScalarKey, ScalarOp};
use tidu::{DerivativeProgram, LinearizedGraph, linear_transpose, linearize};

use crate::cli::{CliError, CliResult};
use crate::dag::{self, ShapeArg, parse_count};
use crate::table::Table;

/// Options of `cgx demo`.
#[derive(Args, Debug, Clone)]
pub struct DemoArgs {
    /// Operations of the large DAG at the end.
    #[arg(long, default_value = "1000000", value_parser = parse_count)]
    pub nodes: usize,
    /// Threads of its parallel evaluation (default: every core).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
    /// Directory for the DOT (and, with Graphviz installed, SVG) files.
    #[arg(long, default_value = "target/cgx")]
    pub out: PathBuf,
}

impl Default for DemoArgs {
    fn default() -> Self {
        DemoArgs { nodes: 1_000_000, threads: None, out: crate::cli::default_out_dir() }
    }
}

/// `f(x) = (x + x)·x` (`docs/SPEC.md` §4.4) on a fresh interner: the graph and its output key.
pub fn worked_example() -> (Arc<Graph<ScalarOp>>, ValueKey<ScalarOp>) {
    let mut b = GraphBuilder::with_interner(KeyInterner::new());
    let x = b.add_input(ScalarKey::var(0));
    let s = b.add_operation(ScalarOp::Add, vec![ValueRef::Local(x), ValueRef::Local(x)], OperationRole::Primary)[0];
    let y = b.add_operation(ScalarOp::Mul, vec![ValueRef::Local(s), ValueRef::Local(x)], OperationRole::Primary)[0];
    b.set_outputs(vec![y]);
    let f = Arc::new(b.build());
    let key = f.global_key(y);
    (f, key)
}

/// One derivative of the worked example, computed one way.
pub struct Derivative {
    /// How (`JVP`, `FoR`...).
    pub method: &'static str,
    /// What it computes.
    pub what: &'static str,
    /// The value the pipeline computed.
    pub value: f64,
    /// The closed form.
    pub expected: f64,
}

/// Evaluates a derivative graph whose inputs are `x` and seeds/tangents set to one.
fn eval_at(lin: &LinearizedGraph<ScalarOp>, x: f64) -> CliResult<f64> {
    let program = DerivativeProgram::new(lin)?;
    let values: HashMap<ScalarKey, f64> = program
        .program()
        .input_keys()
        .iter()
        .map(|k| (k.clone(), if *k == ScalarKey::var(0) { x } else { 1.0 }))
        .collect();
    let out = program.eval(&mut (), |k| values.get(k))?;
    Ok(out.first().copied().flatten().unwrap_or(0.0))
}

/// First and second derivatives of the worked example at `x`, every way tidu composes.
pub fn derivatives(x: f64) -> CliResult<Vec<Derivative>> {
    let (f, y) = worked_example();
    let wrt = [ScalarKey::var(0)];
    let lin = linearize(&resolve(vec![f.clone()]), &[y], &wrt);
    let tr = linear_transpose(&lin);
    let out = |l: &LinearizedGraph<ScalarOp>| -> CliResult<ValueKey<ScalarOp>> {
        l.tangent_output_keys()[0].clone().ok_or_else(|| CliError("a derivative is a symbolic zero".into()))
    };
    let fof = linearize(&resolve(vec![lin.graph().clone()]), &[out(&lin)?], &wrt);
    let for_ = linearize(&resolve(vec![tr.graph().clone()]), &[out(&tr)?], &wrt);
    let rof = linear_transpose(&fof);
    let ror = linear_transpose(&for_);
    let d = |method, what, lin: &LinearizedGraph<ScalarOp>, expected| -> CliResult<Derivative> {
        Ok(Derivative { method, what, value: eval_at(lin, x)?, expected })
    };
    Ok(vec![
        d("JVP", "f'(x), forward", &lin, 4.0 * x)?,
        d("VJP", "f'(x), reverse", &tr, 4.0 * x)?,
        d("FoF", "f''(x), forward over forward", &fof, 4.0)?,
        d("FoR", "f''(x), forward over reverse (HVP)", &for_, 4.0)?,
        d("RoF", "f''(x), reverse over forward", &rof, 4.0)?,
        d("RoR", "f''(x), reverse over reverse", &ror, 4.0)?,
    ])
}

/// Writes `dot` to `dir/name.dot`, and `name.svg` when Graphviz is installed. Returns the
/// files written.
pub fn write_dot(dir: &Path, name: &str, dot: &str) -> CliResult<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).map_err(|e| CliError(format!("cannot create {}: {e}", dir.display())))?;
    let path = dir.join(format!("{name}.dot"));
    std::fs::write(&path, dot).map_err(|e| CliError(format!("cannot write {}: {e}", path.display())))?;
    let mut written = vec![path.clone()];
    let svg = dir.join(format!("{name}.svg"));
    if let Ok(status) = Command::new("dot").arg("-Tsvg").arg(&path).arg("-o").arg(&svg).status()
        && status.success()
    {
        written.push(svg);
    }
    Ok(written)
}

/// `cgx demo`.
pub fn run(args: &DemoArgs) -> CliResult {
    println!("== 1. The worked example: f(x) = (x + x) * x ==\n");
    let (f, y) = worked_example();
    let lin = linearize(&resolve(vec![f.clone()]), std::slice::from_ref(&y), &[ScalarKey::var(0)]);
    let tr = linear_transpose(&lin);
    println!("primal graph:\n{f}");
    println!("linearized (JVP) graph: tangents flow forward; p-values are primal, by key\n{lin}");
    println!("transposed (VJP) graph: two `add`s accumulate the fan-out of x\n{tr}");
    let mut files = Vec::new();
    for (name, graph) in [("worked_primal", &f), ("worked_linear", lin.graph()), ("worked_transposed", tr.graph())] {
        files.extend(write_dot(&args.out, name, &graph.to_dot())?);
    }
    let names: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
    println!("wrote {}\n", names.join(", "));

    println!("== 2. Derivatives at x = 3, every way the transforms compose ==\n");
    let mut t = Table::new(&["method", "computes", "value", "closed form"]);
    let mut all_match = true;
    for d in derivatives(3.0)? {
        all_match &= (d.value - d.expected).abs() <= 1e-12;
        t.row(vec![d.method.into(), d.what.into(), format!("{}", d.value), format!("{}", d.expected)]);
    }
    println!("{}", t.render());
    if !all_match {
        return Err(CliError("a derivative differs from its closed form".into()));
    }

    println!("== 3. A tensor network and its gradient (einsum crate) ==\n");
    let (title, report) = crate::einsum_cmd::measure_bundled(1)?;
    crate::einsum_cmd::print(&title, &report);
    if !report.gradient_check.is_some_and(|c| c <= 1e-8) {
        return Err(CliError("the network's gradient fails its exact-difference check".into()));
    }
    println!();

    println!("== 4. A {}-operation random DAG through the pipeline ==\n", args.nodes);
    let threads = args.threads.map_or_else(dag::default_threads, usize::from);
    dag::check_size(args.nodes, crate::einsum_cmd::default_memory_limit())?;
    let report = dag::measure(ShapeArg::Window, args.nodes, threads, false)?;
    println!("{} operations, {} after CSE, {} slots", report.nodes, report.operations, report.slots);
    print!("{}", report.table());
    println!("results equal the reference evaluator (sequential and parallel): {}", report.matches_reference);
    if !report.matches_reference {
        return Err(CliError("the results differ from the reference evaluator".into()));
    }
    println!("\nMore: `cgx bench dag --help`, `cgx einsum --help`, `cgx dot --help`, docs/PERFORMANCE.md.");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_derivative_matches_its_closed_form() {
        for x in [-1.5, 0.0, 3.0] {
            let ds = derivatives(x).unwrap();
            assert_eq!(ds.len(), 6);
            for d in ds {
                assert!((d.value - d.expected).abs() <= 1e-12, "{}: {} vs {}", d.method, d.value, d.expected);
            }
        }
    }

    #[test]
    fn the_demo_runs_end_to_end() {
        let dir = std::env::temp_dir().join(format!("cgx-demo-test-{}", std::process::id()));
        let args = DemoArgs { nodes: 5000, threads: Some(2), out: dir.clone() };
        run(&args).unwrap();
        for name in ["worked_primal", "worked_linear", "worked_transposed"] {
            let dot = std::fs::read_to_string(dir.join(format!("{name}.dot"))).unwrap();
            assert!(dot.starts_with("digraph"), "{dot}");
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
