//! `cgx dot`: Graphviz DOT of any pipeline stage of a built-in example or an einsum
//! instance file.

use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, ValueEnum};
use computegraph::{Graph, KeyInterner, ValueKey, try_compile, try_materialize_merge, try_resolve};
use einsum::{Dtype, Instance, PathChoice, TensorKey};
use scalar::{ScalarKey, ScalarOp};
use tidu::{Primitive, try_linear_transpose, try_linearize};
use workloads::{Shape, Workload};

use crate::cli::{CliError, CliResult};
use crate::dag::parse_count;

/// A pipeline stage.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Stage {
    /// The graph as built (one fragment).
    Primal,
    /// After resolve + materialize_merge: reachable, deduplicated, one topological order.
    Materialized,
    /// The compiled SSA slot program.
    Program,
    /// The JVP graph of the outputs with respect to every input.
    Linear,
    /// The VJP graph (the transposed linear graph).
    Transposed,
}

/// A built-in example.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Example {
    /// f(x) = (x + x)·x, the worked example of `docs/SPEC.md` §4.4.
    Worked,
    /// A random DAG (window shape, 30% repeats) of `--nodes` operations.
    Dag,
}

/// Options of `cgx dot`.
#[derive(Args, Debug, Clone)]
pub struct DotArgs {
    /// Which stage to draw.
    #[arg(value_enum)]
    pub stage: Stage,
    /// Which example.
    #[arg(long, value_enum, default_value_t = Example::Worked)]
    pub example: Example,
    /// Operations of the `dag` example (keep it small: DOT is for reading).
    #[arg(long, default_value = "20", value_parser = parse_count)]
    pub nodes: usize,
    /// Draw an einsum instance file (the Einsum Benchmark's JSON) instead of an example,
    /// contracted along its `opt_flops` path (greedy if it has none).
    #[arg(long, conflicts_with = "example")]
    pub instance: Option<PathBuf>,
    /// Write to this file instead of standard output.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

/// An example's graph, its outputs and the inputs to differentiate against.
type Parts = (Arc<Graph<ScalarOp>>, Vec<ValueKey<ScalarOp>>, Vec<ScalarKey>);

/// The example's parts.
fn example(args: &DotArgs) -> CliResult<Parts> {
    Ok(match args.example {
        Example::Worked => {
            let (f, y) = crate::demo::worked_example();
            (f, vec![y], vec![ScalarKey::var(0)])
        }
        Example::Dag => {
            let w = Workload::new(Shape::Window, args.nodes);
            let built = w.spec.build_single(&KeyInterner::new())?;
            let graph = built.graphs.last().cloned().ok_or_else(|| CliError("the example has no graph".into()))?;
            (graph, built.outputs, (0..w.spec.inputs).map(ScalarKey::var).collect())
        }
    })
}

/// The DOT text of `stage` for a graph, its outputs and the inputs to differentiate
/// against, over any primitive set.
fn stage_dot<Op: Primitive>(
    stage: Stage,
    graph: &Arc<Graph<Op>>,
    outputs: &[ValueKey<Op>],
    wrt: &[Op::InputKey],
) -> CliResult<String> {
    let view = try_resolve(vec![graph.clone()])?;
    Ok(match stage {
        Stage::Primal => graph.to_dot(),
        Stage::Materialized => try_materialize_merge(&view, outputs)?.to_dot(),
        Stage::Program => try_compile(&try_materialize_merge(&view, outputs)?)?.to_dot(),
        Stage::Linear => try_linearize(&view, outputs, wrt)?.graph().to_dot(),
        Stage::Transposed => try_linear_transpose(&try_linearize(&view, outputs, wrt)?)?.graph().to_dot(),
    })
}

/// The DOT text of the requested stage.
pub fn render(args: &DotArgs) -> CliResult<String> {
    if let Some(file) = &args.instance {
        let inst = Instance::from_file(file)?;
        let path = inst.opt_flops.clone().map_or(PathChoice::Greedy, PathChoice::Explicit);
        let wrt: Vec<TensorKey> = (0..inst.shapes.len() as u32).map(TensorKey::var).collect();
        // The instance's dtype decides the element type (complex graphs conjugate in their
        // transposes).
        return match inst.dtype {
            Dtype::Float64 => {
                let e = inst.einsum::<f64>(path)?;
                stage_dot(args.stage, e.graph(), std::slice::from_ref(e.output_key()), &wrt)
            }
            Dtype::Complex128 => {
                let e = inst.einsum::<einsum::c64>(path)?;
                stage_dot(args.stage, e.graph(), std::slice::from_ref(e.output_key()), &wrt)
            }
        };
    }
    let (graph, outputs, wrt) = example(args)?;
    stage_dot(args.stage, &graph, &outputs, &wrt)
}

/// `cgx dot`.
pub fn run(args: &DotArgs) -> CliResult {
    let dot = render(args)?;
    match &args.output {
        Some(path) => std::fs::write(path, dot).map_err(|e| CliError(format!("cannot write {}: {e}", path.display()))),
        None => {
            print!("{dot}");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stage_of_every_example_renders() {
        for example in [Example::Worked, Example::Dag] {
            for stage in [Stage::Primal, Stage::Materialized, Stage::Program, Stage::Linear, Stage::Transposed] {
                let args = DotArgs { stage, example, nodes: 12, instance: None, output: None };
                let dot = render(&args).unwrap();
                assert!(dot.starts_with("digraph") && dot.trim_end().ends_with('}'), "{stage:?}: {dot}");
            }
        }
    }

    #[test]
    fn every_stage_of_an_instance_renders() {
        let file =
            concat!(env!("CARGO_MANIFEST_DIR"), "/../einsum/tests/data/str_matrix_chain_multiplication_100.json");
        for stage in [Stage::Primal, Stage::Materialized, Stage::Program, Stage::Linear, Stage::Transposed] {
            let args = DotArgs { stage, example: Example::Worked, nodes: 1, instance: Some(file.into()), output: None };
            let dot = render(&args).unwrap();
            assert!(dot.starts_with("digraph") && dot.matches("->").count() >= 99, "{stage:?}");
        }
        let bad = DotArgs {
            instance: Some("/nonexistent.json".into()),
            ..DotArgs { stage: Stage::Primal, example: Example::Worked, nodes: 1, instance: None, output: None }
        };
        assert!(render(&bad).is_err());
    }

    #[test]
    fn an_unwritable_output_is_an_error() {
        let args = DotArgs {
            stage: Stage::Primal,
            example: Example::Worked,
            nodes: 1,
            instance: None,
            output: Some(PathBuf::from("/nonexistent-dir/x.dot")),
        };
        let e = run(&args).unwrap_err();
        assert!(e.0.starts_with("cannot write /nonexistent-dir/x.dot"), "{}", e.0);
    }
}
