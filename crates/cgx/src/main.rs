//! `cgx`: the command line of computegraph + tidu.
//!
//! - `cgx demo` (the default): the worked example (`docs/SPEC.md` §4.4) end to end
//!   (graphs as text and Graphviz DOT, derivatives of first and second order, four ways)
//!   and a 10^6-node DAG through the pipeline, sequentially and in parallel.
//! - `cgx bench dag`: the large-DAG benchmark, with a summary table or `--json`;
//!   `--partitions P` cuts the counter-based DAG into node blocks, each prepared and
//!   evaluated alone, timed per partition and checked against the whole graph.
//! - `cgx bench mps`: µs per contraction step of an MPS inner product (einsum,
//!   `docs/SPEC.md` §8.2), beside its kernels alone, with a table or `--json`.
//! - `cgx einsum`: a tensor-network contraction (instance file or expression), with flops,
//!   GFLOP/s and optionally its gradient and Hessian-vector products; `--strip-exponent`
//!   adds the scaled contraction (mantissa and exponent, `scaled_cmd.rs`).
//! - `cgx dot`: DOT export of a pipeline stage of a built-in example.
//! - `cgx completions SHELL`: shell completions.
//!
//! User mistakes are reported as one line on stderr with exit code 2 (usage) or 1 (the run
//! failed); never a backtrace.

#![forbid(unsafe_code)]

mod checkpoint_cmd;
mod cli;
mod dag;
mod dag_parts;
mod demo;
mod dot;
mod einsum_cmd;
mod hvp_run;
mod mps;
mod npy;
mod scaled_cmd;
mod table;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use cli::CliError;

/// The computegraph + tidu command line.
#[derive(Parser, Debug)]
#[command(name = "cgx", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Walk through the worked example f(x) = (x + x)·x and run a large DAG (the default).
    Demo(demo::DemoArgs),
    /// Benchmarks from the command line.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Contract a tensor network: an instance file or an expression, optionally with its gradient.
    Einsum(Box<einsum_cmd::EinsumArgs>),
    /// Write a pipeline stage of a built-in example as Graphviz DOT.
    Dot(dot::DotArgs),
    /// Print shell completions for `cgx`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

#[derive(Subcommand, Debug)]
enum BenchCommand {
    /// Build, resolve, materialize, compile and evaluate a large scalar DAG, per phase.
    Dag(dag::DagArgs),
    /// Time an MPS inner product per contraction step (einsum), beside its kernels alone.
    Mps(mps::MpsArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        None => demo::run(&demo::DemoArgs::default()),
        Some(Command::Demo(args)) => demo::run(&args),
        Some(Command::Bench(BenchCommand::Dag(args))) => dag::run(&args),
        Some(Command::Bench(BenchCommand::Mps(args))) => mps::run(&args),
        Some(Command::Einsum(args)) => einsum_cmd::run(&args),
        Some(Command::Dot(args)) => dot::run(&args),
        Some(Command::Completions { shell }) => {
            clap_complete::generate(shell, &mut Cli::command(), "cgx", &mut std::io::stdout());
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(CliError(message)) => {
            eprintln!("cgx: error: {message}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn bad_arguments_are_usage_errors() {
        let e = Cli::try_parse_from(["cgx", "bench", "dag", "--nodes", "many"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
        let e = Cli::try_parse_from(["cgx", "bench", "dag", "--shape", "star"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::InvalidValue);
        assert!(Cli::try_parse_from(["cgx", "bench", "dag", "--shape", "chain", "--nodes", "1_000"]).is_ok());
        assert!(Cli::try_parse_from(["cgx", "bench", "dag", "--partitions", "4"]).is_ok());
        let e = Cli::try_parse_from(["cgx", "bench", "dag", "--partitions", "0"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
        let e = Cli::try_parse_from(["cgx", "bench", "mps", "--sites", "1"]).unwrap_err();
        assert_eq!(e.kind(), clap::error::ErrorKind::ValueValidation);
        assert!(Cli::try_parse_from(["cgx", "bench", "mps", "--sites", "1000", "--chi", "8", "--json"]).is_ok());
    }
}
