//! `cgx einsum`: run a contraction instance (the Einsum Benchmark's JSON) or a quick
//! expression, with timings, flops and optionally the gradient.

use std::path::Path;
use std::time::Instant;

use clap::{Args, ValueEnum};
use einsum::{Einsum, Instance, PathChoice, Tensor};

use crate::table::{Table, json_number, json_string};
use crate::{CliError, CliResult};

/// Which pairwise path to contract along.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum PathArg {
    /// The instance's `paths.opt_flops.path`.
    OptFlops,
    /// The instance's `paths.opt_size.path`.
    OptSize,
    /// The built-in greedy path finder.
    Greedy,
}

/// Options of `cgx einsum`.
#[derive(Args, Debug, Clone)]
pub struct EinsumArgs {
    /// An instance file (`*.json`, the Einsum Benchmark's format) or an expression such as
    /// `"ab,bc->ac"` (then give `--shapes`).
    pub input: String,
    /// Operand shapes of an expression: `2x3,3x4` (a scalar operand is `_`).
    #[arg(long)]
    pub shapes: Option<String>,
    /// The path (instances default to `opt-flops`, expressions to `greedy`).
    #[arg(long, value_enum)]
    pub path: Option<PathArg>,
    /// Also build and run the gradient with respect to every operand.
    #[arg(long)]
    pub grad: bool,
    /// Threads for the graph-level parallel evaluation (1: sequential).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: u16,
    /// Seed of the random operands.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Parses `2x3,3x4` (`_` is a scalar).
pub fn parse_shapes(s: &str) -> CliResult<Vec<Vec<usize>>> {
    s.split(',')
        .map(|shape| {
            let shape = shape.trim();
            if shape == "_" {
                return Ok(Vec::new());
            }
            shape
                .split(['x', 'X', '×'])
                .map(|d| d.trim().parse::<usize>().map_err(|_| CliError(format!("`{shape}` is not a shape like 2x3"))))
                .collect()
        })
        .collect()
}

/// The network to run: an instance's, or an expression's with seeded operands.
struct Job {
    name: String,
    expression: String,
    shapes: Vec<Vec<usize>>,
    path: PathChoice,
    operands: Vec<Tensor<f64>>,
}

fn job(args: &EinsumArgs) -> CliResult<Job> {
    let is_file = args.input.ends_with(".json") || Path::new(&args.input).is_file();
    if is_file {
        if args.shapes.is_some() {
            return Err(CliError("--shapes is for expressions; an instance file has its own shapes".into()));
        }
        let inst = Instance::from_file(&args.input)?;
        return instance_job(inst, args.path.unwrap_or(PathArg::OptFlops), args.seed);
    }
    let shapes = parse_shapes(args.shapes.as_deref().ok_or_else(|| {
        CliError(format!("`{}` is not a file; for an expression give its operand shapes with --shapes", args.input))
    })?)?;
    let path = match args.path.unwrap_or(PathArg::Greedy) {
        PathArg::Greedy => PathChoice::Greedy,
        other => return Err(CliError(format!("an expression has no {other:?} path; use --path greedy"))),
    };
    let mut rng = scalar::workloads::Rng::new(args.seed);
    let mut next = move || 0.5 + rng.unit();
    let operands = shapes.iter().map(|s| Tensor::from_fn(s.clone(), |_| next())).collect::<Result<_, _>>()?;
    Ok(Job { name: "expression".into(), expression: args.input.clone(), shapes, path, operands })
}

/// The job of an instance: its network on `path`, seeded operands.
fn instance_job(inst: Instance, path: PathArg, seed: u64) -> CliResult<Job> {
    let path = match path {
        PathArg::Greedy => PathChoice::Greedy,
        PathArg::OptFlops => PathChoice::Explicit(
            inst.opt_flops.clone().ok_or_else(|| CliError(format!("{} has no opt_flops path", inst.name)))?,
        ),
        PathArg::OptSize => PathChoice::Explicit(
            inst.opt_size.clone().ok_or_else(|| CliError(format!("{} has no opt_size path", inst.name)))?,
        ),
    };
    let operands = inst.random_operands::<f64>(seed)?;
    Ok(Job { name: inst.name.clone(), expression: inst.format_string.clone(), shapes: inst.shapes, path, operands })
}

/// The instance bundled for the demo: a 100-matrix chain (Einsum Benchmark).
pub const BUNDLED: &str = include_str!("../../einsum/tests/data/str_matrix_chain_multiplication_100.json");

/// Runs the bundled instance on its `opt_flops` path, with its gradient.
pub fn measure_bundled(threads: u16) -> CliResult<(String, EinsumReport)> {
    let job = instance_job(Instance::from_json(BUNDLED)?, PathArg::OptFlops, 42)?;
    measure_job(job, true, threads)
}

/// What a run measured.
pub struct EinsumReport {
    /// Rows of (phase, milliseconds).
    pub phases: Vec<(String, f64)>,
    /// Floating-point operations of the path (2 per multiply-add).
    pub flops: f64,
    /// Best of five evaluation times (after a warm-up run), ms.
    pub eval_ms: f64,
    /// Sum of the result's entries, and its shape.
    pub checksum: f64,
    /// The result's shape.
    pub shape: Vec<usize>,
    /// Steps of the path.
    pub steps: usize,
    /// The exact-difference check of the gradient (relative error), if run.
    pub gradient_check: Option<f64>,
}

/// Runs `args`' network.
pub fn measure(args: &EinsumArgs) -> CliResult<(String, EinsumReport)> {
    measure_job(job(args)?, args.grad, args.threads)
}

fn measure_job(job: Job, grad: bool, threads: u16) -> CliResult<(String, EinsumReport)> {
    let mut phases = Vec::new();
    let t = Instant::now();
    let e = Einsum::<f64>::new(&job.expression, &job.shapes, job.path.clone())?;
    phases.push(("build + compile".to_string(), t.elapsed().as_secs_f64() * 1e3));
    let refs: Vec<&Tensor<f64>> = job.operands.iter().collect();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads.into()).build()?;
    let run = || if threads > 1 { e.eval_parallel(Some(&pool), &refs) } else { e.eval(&refs) };
    let mut result = run()?; // warm-up: first-touch of the buffers
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        result = run()?;
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
    }
    phases.push((format!("eval (best of 5, {} thread{})", threads, if threads > 1 { "s" } else { "" }), best));

    let mut gradient_check = None;
    if grad {
        let all: Vec<usize> = (0..refs.len()).collect();
        let t = Instant::now();
        let g = e.gradient(&all)?;
        phases.push(("gradient build + compile".to_string(), t.elapsed().as_secs_f64() * 1e3));
        let ones = result.map(|_| 1.0);
        let t = Instant::now();
        let grads = g.eval(&refs, &ones)?;
        phases.push(("gradient eval (all operands)".to_string(), t.elapsed().as_secs_f64() * 1e3));
        // The network is linear in each operand: ⟨1, f(x + t e_i) − f(x)⟩ = ⟨∇_i, t⟩ exactly.
        let i = refs.len() / 2;
        let dir = job.operands[i].map(|&x| 0.5 * x);
        let moved = job.operands[i].zip_with(&dir, |a, b| a + b)?;
        let mut shifted = refs.clone();
        shifted[i] = &moved;
        let df = e.eval(&shifted)?.zip_with(&result, |a, b| a - b)?;
        let (lhs, rhs) = (ones.inner(&df).unwrap_or(f64::NAN), grads[i].inner(&dir).unwrap_or(f64::NAN));
        gradient_check = Some((lhs - rhs).abs() / lhs.abs().max(rhs.abs()).max(f64::MIN_POSITIVE));
    }
    let report = EinsumReport {
        phases,
        flops: 2.0 * e.multiply_adds(),
        eval_ms: best,
        checksum: result.data().iter().sum(),
        shape: result.shape().to_vec(),
        steps: e.path().steps().len(),
        gradient_check,
    };
    Ok((format!("{}: {}", job.name, shorten(&job.expression)), report))
}

fn shorten(s: &str) -> String {
    if s.chars().count() <= 60 { s.to_string() } else { format!("{}…", s.chars().take(60).collect::<String>()) }
}

/// Prints a report.
pub fn print(title: &str, r: &EinsumReport) {
    println!("{title}");
    println!(
        "{} contraction steps, {:.3e} flops, result shape {:?}, checksum {:.12e}",
        r.steps, r.flops, r.shape, r.checksum
    );
    let mut t = Table::new(&["phase", "ms"]);
    for (name, ms) in &r.phases {
        t.row(vec![name.clone(), format!("{ms:.3}")]);
    }
    print!("{}", t.render());
    println!("achieved {:.2} GFLOP/s", r.flops / (r.eval_ms * 1e6));
    if let Some(c) = r.gradient_check {
        println!("gradient: exact-difference check on the middle operand, relative error {c:.1e}");
    }
}

/// The report as one JSON object.
pub fn json(title: &str, r: &EinsumReport) -> String {
    let phases: Vec<String> =
        r.phases.iter().map(|(n, ms)| format!("{{\"name\":{},\"ms\":{}}}", json_string(n), json_number(*ms))).collect();
    format!(
        "{{\"title\":{},\"steps\":{},\"flops\":{},\"eval_ms\":{},\"gflops\":{},\"checksum\":{},\"shape\":{:?},\"phases\":[{}],\"gradient_check\":{}}}",
        json_string(title),
        r.steps,
        json_number(r.flops),
        json_number(r.eval_ms),
        json_number(r.flops / (r.eval_ms * 1e6)),
        json_number(r.checksum),
        r.shape,
        phases.join(","),
        r.gradient_check.map_or("null".into(), json_number),
    )
}

/// `cgx einsum`.
pub fn run(args: &EinsumArgs) -> CliResult {
    let (title, report) = measure(args)?;
    if args.json {
        println!("{}", json(&title, &report));
    } else {
        print(&title, &report);
    }
    match report.gradient_check {
        Some(c) if c.is_nan() || c > 1e-8 => {
            Err(CliError(format!("the gradient check failed (relative error {c:.1e})")))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(input: &str) -> EinsumArgs {
        EinsumArgs { input: input.into(), shapes: None, path: None, grad: false, threads: 1, seed: 42, json: false }
    }

    #[test]
    fn shapes_parse() {
        assert_eq!(parse_shapes("2x3, 3X4,_").unwrap(), vec![vec![2, 3], vec![3, 4], vec![]]);
        assert!(parse_shapes("2x").unwrap_err().0.contains("not a shape"));
    }

    #[test]
    fn an_expression_runs_with_its_gradient() {
        let a = EinsumArgs { shapes: Some("2x3,3x4".into()), grad: true, threads: 2, ..args("ab,bc->ac") };
        let (_, r) = measure(&a).unwrap();
        assert_eq!(r.shape, vec![2, 4]);
        assert_eq!(r.steps, 1);
        assert_eq!(r.flops, 2.0 * 2.0 * 3.0 * 4.0);
        assert!(r.gradient_check.unwrap() < 1e-12);
    }

    #[test]
    fn an_instance_runs_on_every_path() {
        let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../einsum/tests/data/bin_matmul_256.json");
        let mut sums = Vec::new();
        for path in [PathArg::OptFlops, PathArg::OptSize, PathArg::Greedy] {
            let (_, r) = measure(&EinsumArgs { path: Some(path), ..args(file) }).unwrap();
            sums.push(r.checksum);
        }
        assert!(sums.iter().all(|s| (s - sums[0]).abs() <= 1e-9 * sums[0].abs()), "{sums:?}");
    }

    #[test]
    fn bad_input_is_an_error_line() {
        for (a, want) in [
            (args("ab,bc->ac"), "give its operand shapes"),
            (EinsumArgs { shapes: Some("2x3,4x4".into()), ..args("ab,bc->ac") }, "label"),
            (EinsumArgs { shapes: Some("2x3".into()), ..args("ab,bc->ac") }, ""),
            (args("/nonexistent/instance.json"), ""),
            (
                EinsumArgs { shapes: Some("2x3,3x4".into()), path: Some(PathArg::OptFlops), ..args("ab,bc->ac") },
                "no OptFlops path",
            ),
        ] {
            let e = measure(&a).err().unwrap_or_else(|| panic!("{a:?} was accepted"));
            assert!(e.0.contains(want), "{}", e.0);
            assert!(!e.0.contains('\n'), "{}", e.0);
        }
    }
}
