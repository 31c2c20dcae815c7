//! `cgx dot`: Graphviz DOT of any pipeline stage of a built-in example.

use std::path::PathBuf;
use std::sync::Arc;

use benches::{Shape, Workload};
use clap::{Args, ValueEnum};
use computegraph::{Graph, KeyInterner, ValueKey, compile, materialize_merge, resolve};
use scalar::{ScalarKey, ScalarOp};
use tidu::{linear_transpose, linearize};

use crate::dag::parse_count;
use crate::{CliError, CliResult};

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
    /// f(x) = (x + x)·x, seed 000's worked example.
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

/// The DOT text of the requested stage.
pub fn render(args: &DotArgs) -> CliResult<String> {
    let (graph, outputs, wrt) = example(args)?;
    let view = resolve(vec![graph.clone()]);
    Ok(match args.stage {
        Stage::Primal => graph.to_dot(),
        Stage::Materialized => materialize_merge(&view, &outputs).to_dot(),
        Stage::Program => compile(&materialize_merge(&view, &outputs)).to_dot(),
        Stage::Linear => linearize(&view, &outputs, &wrt).graph().to_dot(),
        Stage::Transposed => linear_transpose(&linearize(&view, &outputs, &wrt)).graph().to_dot(),
    })
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
                let args = DotArgs { stage, example, nodes: 12, output: None };
                let dot = render(&args).unwrap();
                assert!(dot.starts_with("digraph") && dot.trim_end().ends_with('}'), "{stage:?}: {dot}");
            }
        }
    }

    #[test]
    fn an_unwritable_output_is_an_error() {
        let args = DotArgs {
            stage: Stage::Primal,
            example: Example::Worked,
            nodes: 1,
            output: Some(PathBuf::from("/nonexistent-dir/x.dot")),
        };
        let e = run(&args).unwrap_err();
        assert!(e.0.starts_with("cannot write /nonexistent-dir/x.dot"), "{}", e.0);
    }
}
