//! `cgx einsum`: contract a tensor network (an instance file of the Einsum Benchmark, or an
//! expression) on the user's data or on seeded random operands, write the result and its
//! gradients, and time it.
//!
//! - Operands: `.npy` files (one per operand, in order) or one `.npz` (`arr_0`, `arr_1`, …
//!   or the archive's order; see [`crate::npy`]); without files, seeded random data of the
//!   instance's shapes or of `--shapes`.
//! - dtype: `float64` runs as `f64`, `complex128` as `c64` (an instance's `"dtype"`, or the
//!   files': one complex operand makes the run complex, real operands are widened as
//!   numpy's `einsum` does). Any other dtype is an error naming it and the file.
//! - Memory: the memory limit ([`default_memory_limit`] or `--memory-limit`) is checked on
//!   file headers before their data is read and by [`SlicedEinsum::new`] (which builds
//!   through [`einsum::Einsum::with_options`]) on every tensor of the path before anything
//!   is evaluated.
//! - Slicing: when the tensors of the run (with `--grad`, of its reverse pass; with
//!   `--hvp`, of its Hessian-vector product) exceed the memory limit, the network is sliced ([`SlicedEinsum`], the greedy slice finder) and
//!   contracted slice by slice, or on the labels `--sliced-inds` names; the report gives
//!   the sliced labels, the slice count and the overhead (flops of all slices over the
//!   unsliced flops). Slices run one after another, on one thread.
//! - `--checkpoint` (with `--grad`): the reverse pass fits the memory limit by recomputing
//!   forward intermediates instead of slicing ([`crate::checkpoint_cmd`]); the forward pass
//!   is sliced for nothing, and one that does not fit unsliced is an error.
//! - `--hvp`: Hessian-vector products with respect to every operand, summed over the
//!   slices when sliced, along `--directions` or seeded ones, checked by an exact
//!   difference of gradients ([`crate::hvp_run`]).
//! - Timing: one evaluation by default; `--repeat N` (N > 1) runs a warm-up and reports
//!   the best of N, with a progress bar on a terminal.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Instant;

use clap::Args;
use einsum::hyper::Objective;
use einsum::{
    ContractionPath, Dtype, EinsumOptions, Instance, MemoryLimit, PathChoice, SlicedEinsum, Slicing, Subscripts,
    Tensor, c64,
};
use indicatif::{ProgressBar, ProgressStyle};

use crate::cli::{CliError, CliResult};
use crate::npy::{self, ArrayInfo, NpyElem};
use crate::table::{Table, json_number, json_string};

/// Which pairwise path to contract along.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PathArg {
    /// The instance's `paths.opt_flops.path`.
    OptFlops,
    /// The instance's `paths.opt_size.path`.
    OptSize,
    /// The built-in greedy path finder.
    Greedy,
    /// A search: `optimal`, `dp`, `random-greedy` or `auto` (see `einsum::search`).
    Search(PathChoice),
    /// An explicit path in opt_einsum's format.
    Explicit(ContractionPath),
}

/// Parses `--path`: `opt-flops`, `opt-size` (an instance's stored paths), or what
/// [`PathChoice`]'s `FromStr` takes (the einsum crate's one parser of path names: `greedy`,
/// `optimal`, `dp`, `random-greedy`, `auto` and their aliases, or an explicit opt_einsum
/// path written as a list of steps, `[(0,1),(0,1)]`, `[[0,1,2],[0,1]]` or `[(1,),(0,1)]`).
pub fn parse_path(s: &str) -> Result<PathArg, String> {
    match s.trim() {
        "opt-flops" | "opt_flops" => Ok(PathArg::OptFlops),
        "opt-size" | "opt_size" => Ok(PathArg::OptSize),
        t => match t.parse::<PathChoice>() {
            Ok(PathChoice::Greedy) => Ok(PathArg::Greedy),
            Ok(PathChoice::Explicit(p)) => Ok(PathArg::Explicit(p)),
            Ok(choice) => Ok(PathArg::Search(choice)),
            Err(e) => Err(format!("{e} (or opt-flops, opt-size for an instance's stored paths)")),
        },
    }
}

/// opt_einsum's printed form of a path: `[(0, 1), (0, 1)]` (`(0,)` for a one-operand step).
pub fn format_path(p: &ContractionPath) -> String {
    p.to_string()
}

/// The labels of `--sliced-inds`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlicedInds(pub Vec<char>);

/// Parses `--sliced-inds`: labels separated by commas (`a,b`), each one character.
pub fn parse_sliced_inds(s: &str) -> Result<SlicedInds, String> {
    s.split(',')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| {
            let mut c = l.chars();
            match (c.next(), c.next()) {
                (Some(x), None) => Ok(x),
                _ => Err(format!(
                    "`{l}` is not a label: --sliced-inds takes one-character labels separated by commas, like a,b"
                )),
            }
        })
        .collect::<Result<Vec<char>, String>>()
        .map(SlicedInds)
}

/// Parses `--memory-limit` (see [`MemoryLimit`]'s `FromStr`).
fn parse_memory_limit(s: &str) -> Result<MemoryLimit, String> {
    s.parse::<MemoryLimit>().map_err(|e| e.to_string())
}

/// The default memory limit of the command line: the library's one policy
/// ([`MemoryLimit::default`]: half of the physical memory or of `ulimit -v`, at most 8 GiB).
pub fn default_memory_limit() -> MemoryLimit {
    MemoryLimit::default()
}

/// Options of `cgx einsum`.
#[derive(Args, Debug, Clone)]
#[command(after_help = "Without --cotangent, --grad seeds the reverse pass with a cotangent of ones: the gradients \
are those of sum(output) (for complex data, the adjoint for Re(conj(a)·b), PyTorch's convention).\n\n\
Examples:\n  cgx einsum 'ij,jk->ik' a.npy b.npy -o c.npy\n  cgx einsum 'ij,jk->ik' ab.npz --grad --grad-out grads.npz\n  \
cgx einsum instance.json --repeat 5 --threads 2 --show-path")]
pub struct EinsumArgs {
    /// An instance file (`*.json`, the Einsum Benchmark's format) or an expression such as
    /// `"ab,bc->ac"` (give --shapes, or operand files).
    pub input: String,
    /// Operand data: one `.npy` file per operand, in order, or one `.npz` holding them all
    /// (`arr_0`, `arr_1`, … as numpy's savez names them, or the archive's order). float64 and
    /// complex128 only. Without files, operands are seeded random numbers.
    pub operands: Vec<PathBuf>,
    /// Operand shapes of an expression with random operands: `2x3,3x4` (a scalar operand is `_`).
    #[arg(long)]
    pub shapes: Option<String>,
    /// The path: `opt-flops`, `opt-size` (an instance's stored paths), `greedy`, a search
    /// (`optimal`, `dp`, `random-greedy`, `auto`, `hyper`: the hyper-optimizer, see
    /// --max-time), or an explicit opt_einsum path as a list of
    /// steps of positions, `[(0,1),(0,1)]`, `[(0,1,2)]` (instances default to opt-flops,
    /// expressions to greedy). Past one thread without `--grad`, a chain-like path (given
    /// or found) may be contracted from both ends: the same multiply-adds within 1/32.
    #[arg(long, value_parser = parse_path)]
    pub path: Option<PathArg>,
    /// With `--path hyper`: the search's time budget in seconds (default 1).
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub max_time: Option<f64>,
    /// With `--path hyper`: the most trials (default: as many as fit in --max-time).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub max_trials: Option<u32>,
    /// With `--path hyper`: keep the path found in this directory, keyed by the network's
    /// structure (its equation and sizes, labels renamed canonically) and the objective;
    /// a later run on the same network takes it from there and searches nothing.
    #[arg(long, value_name = "DIR")]
    pub path_cache: Option<PathBuf>,
    /// With `--path hyper`: what to minimize: `flops`, `size` (the largest intermediate),
    /// `write` (elements written), or `combo-F` (flops + F × written).
    #[arg(long, value_name = "OBJECTIVE", value_parser = parse_objective)]
    pub minimize: Option<Objective>,
    /// Draw the contraction tree to this SVG file: each step sized by its multiply-adds and
    /// colored by the size of its result, sliced labels dashed.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Print the path in opt_einsum's format (it is always in the --json output).
    #[arg(long)]
    pub show_path: bool,
    /// Write the result to this `.npy` file.
    #[arg(short = 'o', long = "output", value_name = "FILE.npy")]
    pub output: Option<PathBuf>,
    /// Also build and run the gradient with respect to every operand, seeded with --cotangent
    /// or, without it, with ones (the gradient of sum(output)).
    #[arg(long)]
    pub grad: bool,
    /// Write the gradients (one per operand, `arr_0`, `arr_1`, …) to this `.npz` file.
    #[arg(long, value_name = "FILE.npz", requires = "grad")]
    pub grad_out: Option<PathBuf>,
    /// With --grad: keep the reverse pass within --memory-limit by recomputing forward
    /// intermediates (checkpointing) instead of slicing; the forward pass must fit unsliced.
    #[arg(long, requires = "grad", conflicts_with_all = ["sliced_inds", "strip_exponent", "hvp"])]
    pub checkpoint: bool,
    /// The cotangent seeding the reverse pass (an `.npy` of the output's shape); default: ones,
    /// the gradient of sum(output). For --grad and --hvp.
    #[arg(long, value_name = "FILE.npy")]
    pub cotangent: Option<PathBuf>,
    /// Also build and run the Hessian-vector product of ⟨cotangent, output⟩ with respect to
    /// every operand (forward over reverse; summed over the slices when sliced, and sliced
    /// for it when the memory limit needs it), checked by an exact difference of gradients.
    #[arg(long)]
    pub hvp: bool,
    /// The directions of --hvp: one array per operand, of its shape (an `.npz`, or `.npy`
    /// files given as the value of this option once each); default: seeded random numbers.
    #[arg(long, value_name = "FILE", requires = "hvp")]
    pub directions: Vec<PathBuf>,
    /// Write the Hessian-vector products (one per operand, `arr_0`, `arr_1`, …) to this `.npz` file.
    #[arg(long, value_name = "FILE.npz", requires = "hvp")]
    pub hvp_out: Option<PathBuf>,
    /// Evaluations: 1 runs once; N > 1 runs a warm-up, then N timed runs, and reports the best.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    /// The budget for the tensors of the run (operands, intermediates, output, gradients):
    /// `2GiB`, `500MB`, a plain number of bytes, or `none`. Default: half the physical
    /// memory (or of `ulimit -v`), at most 8 GiB.
    /// A network over the limit is sliced to fit (see --sliced-inds).
    #[arg(long, value_parser = parse_memory_limit)]
    pub memory_limit: Option<MemoryLimit>,
    /// Slice on these labels (cotengra's `sliced_inds`), `a,b`, instead of the ones the
    /// greedy slice finder picks when the memory limit needs it.
    #[arg(long, value_name = "LABELS", value_parser = parse_sliced_inds)]
    pub sliced_inds: Option<SlicedInds>,
    /// Threads for the evaluations, forward and --grad (1: sequential): independent steps
    /// at once and large kernels split, where the estimated cost says the threads pay.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: u16,
    /// Seed of the random operands.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also run the scaled contraction (cotengra's `strip_exponent`): intermediates carry
    /// a power of two beside them, and the result is reported as a mantissa and a base-10
    /// exponent, finite where the plain one overflows. `-o` then writes the mantissa;
    /// with `--grad` the gradients are scaled too (`--grad-out`: their mantissas, then one
    /// array of their exponents). Without it, a plain result that left the range (from
    /// finite operands) makes the scaled run happen anyway (`-o` keeps the plain result).
    #[arg(long)]
    pub strip_exponent: bool,
}

/// Parses a positive, finite number of seconds.
pub fn parse_seconds(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>().ok().filter(|&t| einsum::hyper::budget(t).is_ok()) {
        Some(t) => Ok(t),
        None => Err(format!("`{s}` is not a positive number of seconds")),
    }
}

/// Parses a search objective (`einsum::hyper::Objective`'s names).
pub fn parse_objective(s: &str) -> Result<Objective, String> {
    s.trim().parse::<Objective>().map_err(|e| e.to_string())
}

/// Runs the hyper-optimizer when `path` asks for it, with the command line's budget and
/// objective, on `--threads` threads, showing its progress on stderr (when stderr is a
/// terminal and not `--json`) and its report after; returns the path it found as an
/// explicit one. Any other choice passes through, and the budget options without
/// `--path hyper` are an error rather than silently ignored.
fn hyper_search(args: &EinsumArgs, expression: &str, shapes: &[Vec<usize>], path: PathChoice) -> CliResult<PathChoice> {
    let PathChoice::Hyper(mut opts) = path else {
        if args.max_time.is_some() || args.max_trials.is_some() || args.minimize.is_some() || args.path_cache.is_some()
        {
            return Err(CliError("--max-time, --max-trials, --minimize and --path-cache are for --path hyper".into()));
        }
        return Ok(path);
    };
    let seconds = args.max_time.map(std::time::Duration::from_secs_f64);
    if args.max_trials.is_some() {
        // A trial budget alone is not cut short by the default time budget.
        (opts.max_trials, opts.max_time) = (args.max_trials, seconds);
    } else if seconds.is_some() {
        opts.max_time = seconds;
    }
    opts.minimize = args.minimize.unwrap_or(opts.minimize);
    let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
    let net = Subscripts::parse(expression)?.resolve(&refs)?.squeeze_broadcast(&refs);
    let cache = match &args.path_cache {
        Some(dir) => {
            let cache = einsum::path_cache::PathCache::new(dir)?;
            let key = einsum::path_cache::PathCache::key(&net.inputs, &net.output, &net.sizes, &opts.cache_tag());
            if let Some(hit) = cache.get(&key) {
                if !args.json {
                    eprintln!("hyper: the path from {} (no search)", dir.display());
                }
                return Ok(PathChoice::Explicit(hit.path));
            }
            Some((cache, key))
        }
        None => None,
    };
    let spinner = if args.json || !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::new_spinner();
        if let Ok(style) = ProgressStyle::with_template("{spinner} hyper: {msg}") {
            bar.set_style(style);
        }
        bar
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads as usize)
        .build()
        .map_err(|e| CliError(format!("cannot start {} threads: {e}", args.threads)))?;
    let interrupted = interrupt_searches();
    let stop = || interrupted.load(Ordering::Relaxed) == SEARCH_INTERRUPTED;
    interrupted.store(SEARCHING, Ordering::Relaxed);
    let found = pool.install(|| {
        einsum::hyper::hyper_path_until(&net.inputs, &net.output, &net.sizes, &opts, &stop, &mut |p| {
            spinner.set_message(format!(
                "{} trials, {:.1} s, best 10^{:.2} multiply-adds",
                p.trials,
                p.seconds,
                p.best.multiply_adds.log10()
            ));
            spinner.tick();
        })
    });
    // Back to ending the process on Ctrl-C, whether the search succeeded or not.
    interrupted.store(RUNNING, Ordering::Relaxed);
    let found = found?;
    spinner.finish_and_clear();
    if !args.json {
        let r = &found.report;
        if r.interrupted {
            eprintln!("hyper: interrupted (Ctrl-C): going on with the best path found so far");
        }
        eprintln!(
            "hyper: {} trials in {:.2} s, best 10^{:.2} multiply-adds, largest intermediate {:.3e} elements ({})",
            r.trials,
            r.seconds,
            r.cost.multiply_adds.log10(),
            r.cost.largest_intermediate,
            r.method
        );
    }
    // A search cut short is not kept: a later run would take it and search nothing.
    if let Some((cache, key)) = cache.filter(|_| !found.report.interrupted) {
        let entry =
            einsum::path_cache::CachedPath { path: found.path.clone(), sliced: key.canonical(&found.report.sliced) };
        cache.put(&key, &entry)?;
    }
    Ok(PathChoice::Explicit(found.path))
}

/// What Ctrl-C does now: end the process (as without a handler), or end the running
/// path search, which then returns its best path.
const RUNNING: u8 = 0;
const SEARCHING: u8 = 1;
const SEARCH_INTERRUPTED: u8 = 2;

/// The process's Ctrl-C state, its handler installed on first use: during a search Ctrl-C
/// ends the search; at any other time (or pressed twice) it ends the process with the
/// shell's code for SIGINT, 130.
fn interrupt_searches() -> &'static AtomicU8 {
    static STATE: AtomicU8 = AtomicU8::new(RUNNING);
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let installed = ctrlc::set_handler(|| {
            if STATE.compare_exchange(SEARCHING, SEARCH_INTERRUPTED, Ordering::Relaxed, Ordering::Relaxed).is_err() {
                std::process::exit(130);
            }
        });
        if let Err(e) = installed {
            eprintln!("cgx: Ctrl-C will not end the path search early ({e})");
        }
    });
    &STATE
}

/// Draws the plan's contraction tree (`einsum::draw::tree_svg`) to `file`, from the plan's
/// own network (the expression is parsed once, by the plan).
fn plot_tree(file: &Path, plan: &einsum::Plan, path: &ContractionPath, sliced: &[u32]) -> CliResult {
    let svg = einsum::draw::tree_svg(plan.network(), path, sliced)?;
    std::fs::write(file, svg).map_err(|e| CliError(format!("{}: {e}", file.display())))
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

/// Where the operands come from.
enum Operands {
    /// Seeded random numbers, scaled as [`Instance::random_operands`] for an instance.
    Seeded { instance: Option<Box<Instance>>, seed: u64 },
    /// The user's files, headers read and checked.
    Files(Vec<ArrayInfo>),
}

/// The network to run, checked as far as it can be before anything large is allocated.
struct Job {
    name: String,
    expression: String,
    shapes: Vec<Vec<usize>>,
    path: PathChoice,
    dtype: Dtype,
    operands: Operands,
    cotangent: Option<ArrayInfo>,
}

/// What to do with the network.
struct Settings {
    /// No progress bar (`--json`).
    quiet: bool,
    grad: bool,
    /// Checkpoint the gradient instead of slicing it (`--checkpoint`).
    checkpoint: bool,
    threads: u16,
    repeat: u32,
    limit: MemoryLimit,
    output: Option<PathBuf>,
    grad_out: Option<PathBuf>,
    /// Explicit sliced labels, or `None` to slice only as the memory limit needs.
    sliced_inds: Option<Vec<char>>,
    /// Where to draw the contraction tree.
    plot: Option<PathBuf>,
    /// Run the Hessian-vector product (`--hvp`), along these directions (seeded if none).
    hvp: bool,
    directions: Vec<PathBuf>,
    hvp_out: Option<PathBuf>,
    /// The seed of random operands (the directions' is the next).
    seed: u64,
    /// Run the scaled contraction (and gradients) as well.
    strip_exponent: bool,
}

fn plan(args: &EinsumArgs, limit: MemoryLimit) -> CliResult<Job> {
    let files = if args.operands.is_empty() { None } else { Some(npy::read_infos(&args.operands, limit)?) };
    if files.is_some() && args.shapes.is_some() {
        return Err(CliError("--shapes is for random operands; operand files carry their own shapes".into()));
    }
    let is_file = args.input.ends_with(".json") || Path::new(&args.input).is_file();
    let (name, expression, shapes, path, mut dtype, instance) = if is_file {
        if args.shapes.is_some() {
            return Err(CliError("--shapes is for expressions; an instance file has its own shapes".into()));
        }
        let inst = Instance::from_file(&args.input)?;
        let path = match args.path.clone().unwrap_or(PathArg::OptFlops) {
            PathArg::Greedy => PathChoice::Greedy,
            PathArg::Search(choice) => choice,
            PathArg::Explicit(p) => PathChoice::Explicit(p),
            PathArg::OptFlops => PathChoice::Explicit(
                inst.opt_flops.clone().ok_or_else(|| CliError(format!("{} has no opt_flops path", inst.name)))?,
            ),
            PathArg::OptSize => PathChoice::Explicit(
                inst.opt_size.clone().ok_or_else(|| CliError(format!("{} has no opt_size path", inst.name)))?,
            ),
        };
        let path = hyper_search(args, &inst.format_string, &inst.shapes, path)?;
        (inst.name.clone(), inst.format_string.clone(), inst.shapes.clone(), path, inst.dtype, Some(Box::new(inst)))
    } else {
        let shapes = match (&files, &args.shapes) {
            (Some(f), _) => f.iter().map(|i| i.shape.clone()).collect(),
            (None, Some(s)) => parse_shapes(s)?,
            (None, None) => {
                return Err(CliError(format!(
                    "`{}` is not a file; for an expression give operand files or their shapes with --shapes",
                    args.input
                )));
            }
        };
        let path = match args.path.clone().unwrap_or(PathArg::Greedy) {
            PathArg::Greedy => PathChoice::Greedy,
            PathArg::Search(choice) => choice,
            PathArg::Explicit(p) => PathChoice::Explicit(p),
            other => {
                return Err(CliError(format!(
                    "an expression has no stored {other:?} path; use --path greedy, optimal, dp, random-greedy, auto \
                     or an explicit one like [(0,1)]"
                )));
            }
        };
        let path = hyper_search(args, &args.input, &shapes, path)?;
        (String::from("expression"), args.input.clone(), shapes, path, Dtype::Float64, None)
    };
    let operands = match files {
        None => Operands::Seeded { instance, seed: args.seed },
        Some(files) => {
            if let Some(inst) = &instance {
                let got: Vec<Vec<usize>> = files.iter().map(|f| f.shape.clone()).collect();
                if got != inst.shapes {
                    return Err(CliError(format!(
                        "the operand files have shapes {got:?} but {} takes {:?}",
                        inst.name, inst.shapes
                    )));
                }
                if inst.dtype == Dtype::Float64 && files.iter().any(|f| f.dtype == Dtype::Complex128) {
                    dtype = Dtype::Complex128;
                }
            } else if files.iter().any(|f| f.dtype == Dtype::Complex128) {
                dtype = Dtype::Complex128;
            }
            Operands::Files(files)
        }
    };
    let cotangent = match &args.cotangent {
        None => None,
        Some(p) => {
            let mut infos = npy::read_infos(std::slice::from_ref(p), limit)?;
            if infos.len() != 1 {
                return Err(CliError(format!("{}: the cotangent must be one .npy array", p.display())));
            }
            let info = infos.remove(0);
            if info.dtype == Dtype::Complex128 && dtype == Dtype::Float64 {
                return Err(CliError(format!("{}: a complex128 cotangent for a float64 contraction", info.source)));
            }
            Some(info)
        }
    };
    Ok(Job { name, expression, shapes, path, dtype, operands, cotangent })
}

/// The instance bundled for the demo: a 100-matrix chain (Einsum Benchmark).
pub const BUNDLED: &str = include_str!("../../einsum/tests/data/str_matrix_chain_multiplication_100.json");

/// `f` inside `pool`, or on the calling thread without one.
fn on<R: Send>(pool: Option<&rayon::ThreadPool>, f: impl FnOnce() -> R + Send) -> R {
    match pool {
        Some(p) => p.install(f),
        None => f(),
    }
}

/// Runs the bundled instance on its `opt_flops` path, with its gradient (best of 5 runs).
pub fn measure_bundled(threads: u16) -> CliResult<(String, EinsumReport)> {
    let inst = Instance::from_json(BUNDLED)?;
    let path = PathChoice::Explicit(inst.opt_flops.clone().ok_or_else(|| CliError("no opt_flops path".into()))?);
    let plan = Job {
        name: inst.name.clone(),
        expression: inst.format_string.clone(),
        shapes: inst.shapes.clone(),
        path,
        dtype: Dtype::Float64,
        operands: Operands::Seeded { instance: Some(Box::new(inst)), seed: 42 },
        cotangent: None,
    };
    let settings = Settings {
        quiet: true,
        grad: true,
        threads,
        repeat: 5,
        limit: default_memory_limit(),
        output: None,
        grad_out: None,
        sliced_inds: None,
        plot: None,
        hvp: false,
        directions: Vec::new(),
        hvp_out: None,
        seed: 42,
        strip_exponent: false,
        checkpoint: false,
    };
    measure_plan::<f64>(plan, &settings)
}

/// What a run measured.
pub struct EinsumReport {
    /// Rows of (phase, milliseconds).
    pub phases: Vec<(String, f64)>,
    /// Floating-point operations of the path (2 per multiply-add).
    pub flops: f64,
    /// The evaluation time, ms: of the one run, or the best of `repeat` after a warm-up.
    pub eval_ms: f64,
    /// With `--grad` and `--repeat` over 1: milliseconds of value and gradients of every
    /// operand in one pass, best of the runs, on the same threads.
    pub grad_ms: Option<f64>,
    /// Evaluations timed.
    pub repeat: u32,
    /// Sum of the result's entries: real and imaginary parts.
    pub checksum: [f64; 2],
    /// The result's shape.
    pub shape: Vec<usize>,
    /// The element type run.
    pub dtype: Dtype,
    /// The path contracted along.
    pub path: ContractionPath,
    /// Estimated peak bytes of the forward tensors (operands included).
    pub peak_bytes: u64,
    /// With `--grad`: estimated peak bytes of the reverse pass (forward intermediates,
    /// cotangents, the gradients and their accumulators).
    pub gradient_peak_bytes: Option<u64>,
    /// With `--checkpoint`: the forward intermediates kept for the reverse pass, and how
    /// many it reads (the others are recomputed); `gradient_peak_bytes` is then the
    /// checkpointed plan's simulated peak.
    pub checkpoint_kept: Option<[usize; 2]>,
    /// The sliced labels (empty: not sliced).
    pub sliced: Vec<char>,
    /// The number of slices.
    pub n_slices: u64,
    /// Flops of all slices over the unsliced flops.
    pub slicing_overhead: f64,
    /// The memory limit checked.
    pub memory_limit: MemoryLimit,
    /// The exact-difference check of the gradient (relative error), if run.
    pub gradient_check: Option<f64>,
    /// With `--hvp`: estimated peak bytes of the Hessian-vector product.
    pub hvp_peak_bytes: Option<u64>,
    /// The exact-difference check of the Hessian-vector product (relative error), if run.
    pub hvp_check: Option<f64>,
    /// Files written.
    pub written: Vec<PathBuf>,
    /// Whether to print the path in text output.
    pub show_path: bool,
    /// With `--strip-exponent`: the scaled result (and gradients).
    pub scaled: Option<crate::scaled_cmd::ScaledReport>,
}

/// Runs `args`' network.
pub fn measure(args: &EinsumArgs) -> CliResult<(String, EinsumReport)> {
    let limit = args.memory_limit.unwrap_or_else(default_memory_limit);
    if args.cotangent.is_some() && !args.grad && !args.hvp {
        return Err(CliError("--cotangent seeds --grad or --hvp; give one of them".into()));
    }
    let plan = plan(args, limit)?;
    let settings = Settings {
        quiet: args.json,
        grad: args.grad,
        checkpoint: args.checkpoint,
        threads: args.threads,
        repeat: args.repeat,
        limit,
        output: args.output.clone(),
        grad_out: args.grad_out.clone(),
        sliced_inds: args.sliced_inds.clone().map(|s| s.0),
        plot: args.plot.clone(),
        hvp: args.hvp,
        directions: args.directions.clone(),
        hvp_out: args.hvp_out.clone(),
        seed: args.seed,
        strip_exponent: args.strip_exponent,
    };
    let (title, mut report) = match plan.dtype {
        Dtype::Float64 => measure_plan::<f64>(plan, &settings)?,
        Dtype::Complex128 => measure_plan::<c64>(plan, &settings)?,
    };
    report.show_path = args.show_path;
    Ok((title, report))
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Reads checked files as `T`.
fn read_as<T: NpyElem>(infos: &[ArrayInfo]) -> CliResult<Vec<Tensor<T>>> {
    npy::read_arrays(infos)?
        .into_iter()
        .zip(infos)
        .map(|(t, info)| {
            T::from_any(t).ok_or_else(|| CliError(format!("{}: complex128 data where float64 is needed", info.source)))
        })
        .collect()
}

/// A bar on stderr over `n` units of `what` (evaluations, slices); hidden with `--json`
/// and for fewer than two units (indicatif draws nothing when stderr is not a terminal).
fn progress_bar(s: &Settings, n: u64, what: &str) -> ProgressBar {
    if s.quiet || n < 2 {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(n);
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{{bar:24.cyan/blue}} {{pos}}/{{len}} {what} ({{elapsed}}, {{eta}} left)"
        ))
        .expect("a valid template")
        .progress_chars("=> "),
    );
    bar
}

fn measure_plan<T: NpyElem>(plan: Job, s: &Settings) -> CliResult<(String, EinsumReport)> {
    let mut phases = Vec::new();
    let t = Instant::now();
    let options = EinsumOptions::default().memory_limit(s.limit);
    let slicing = match &s.sliced_inds {
        Some(labels) => Slicing::Labels(labels.clone()),
        None if s.hvp => Slicing::MemoryHvp,
        // The reverse pass recomputes to fit: slice for the forward pass only.
        None => Slicing::Memory { gradient: s.grad && !s.checkpoint },
    };
    // The one parse of the expression: the einsum crate's plan, which the slicing and the
    // compiled programs take.
    let planned = einsum::Plan::new(&plan.expression, &plan.shapes, plan.path.clone(), options.limit())?;
    // A chain contracted from both ends where that pays, whatever the path's source, as the
    // Python extension does (not with --grad: 7% slower on MPS).
    let balance = s.threads > 1 && !s.grad;
    let planned = if balance { planned.balanced_for(s.threads.into()).unwrap_or(planned) } else { planned };
    let e = SlicedEinsum::<T>::from_plan(planned, &slicing)?;
    let sliced = e.plan().n_slices() > 1 || !e.plan().labels().is_empty();
    if s.checkpoint && sliced {
        return Err(CliError(format!(
            "--checkpoint: the forward pass of `{}` does not fit the memory limit of {} unsliced ({} slices); \
             drop --checkpoint to slice the gradient too",
            shorten(&plan.expression),
            s.limit,
            e.plan().n_slices()
        )));
    }
    phases.push(("build + compile".to_string(), ms(t)));
    if let Some(file) = &s.plot {
        plot_tree(file, e.contraction_plan(), e.path(), e.plan().label_ids())?;
    }
    let t = Instant::now();
    let operands: Vec<Tensor<T>> = match &plan.operands {
        Operands::Files(infos) => read_as(infos)?,
        Operands::Seeded { instance: Some(inst), seed } => inst.random_operands::<T>(*seed)?,
        Operands::Seeded { instance: None, seed } => {
            let mut rng = scalar::workloads::Rng::new(*seed);
            let mut next = move || T::from_f64(0.5 + rng.unit());
            plan.shapes.iter().map(|s| Tensor::from_fn(s.clone(), |_| next())).collect::<Result<_, _>>()?
        }
    };
    let what = if matches!(plan.operands, Operands::Files(_)) { "read operands" } else { "random operands" };
    phases.push((what.to_string(), ms(t)));
    let refs: Vec<&Tensor<T>> = operands.iter().collect();
    let built = rayon::ThreadPoolBuilder::new().num_threads(s.threads.into()).build()?;
    // One thread runs outside any pool; inside the pool, every evaluation (each slice's,
    // the gradient's) runs on its threads where the estimated cost says they pay.
    let pool = (s.threads > 1).then_some(&built);
    let run = || on(pool, || e.eval(&refs));
    let threads = format!("{} thread{}", s.threads, if s.threads > 1 { "s" } else { "" });
    let (result, eval_ms) = if s.repeat <= 1 {
        let t = Instant::now();
        let r = if sliced {
            // One run over many slices: a bar over the slices.
            let bar = progress_bar(s, e.plan().n_slices(), "slices");
            let r = on(pool, || e.eval_with_progress(&refs, |k| bar.set_position(k)))?;
            bar.finish_and_clear();
            r
        } else {
            run()?
        };
        let m = ms(t);
        phases.push((format!("eval ({threads})"), m));
        (r, m)
    } else {
        // A bar on stderr over the runs (indicatif draws nothing when stderr is not a terminal).
        let bar = progress_bar(s, u64::from(s.repeat) + 1, "evaluations");
        let mut result = run()?; // warm-up: first-touch of the buffers
        bar.inc(1);
        let mut best = f64::INFINITY;
        for _ in 0..s.repeat {
            let t = Instant::now();
            result = run()?;
            best = best.min(ms(t));
            bar.inc(1);
        }
        bar.finish_and_clear();
        phases.push((format!("eval (best of {}, {threads})", s.repeat), best));
        (result, best)
    };
    let mut written = Vec::new();
    if let Some(out) = s.output.as_ref().filter(|_| !s.strip_exponent) {
        npy::write_npy(out, &result)?;
        written.push(out.clone());
    }
    let sum = result.data().iter().fold(T::zero(), |acc, &x| acc + x);
    let shape = result.shape().to_vec();

    let mut gradient_check = None;
    let mut grad_ms = None;
    let mut checkpointed = None;
    let mut scaled = None;
    // The plain result left the range from finite operands (an intermediate overflowed or
    // underflowed): the scaled contraction runs too, as if asked for, but `-o` keeps the
    // plain result.
    let auto = !s.strip_exponent
        && !einsum::ScaledTensor::fits(&result)
        && operands.iter().all(|t| t.data().iter().all(|x| x.modulus().is_finite()));
    let seed = if s.grad || s.hvp { Some(cotangent_seed::<T>(&plan, &shape)?) } else { None };
    // ⟨c, f(x)⟩ for the gradient's check, taken now: the forward result is not held through
    // the reverse pass, whose memory estimate counts the operands and the cotangent.
    let at_x = seed.as_ref().map_or(f64::NAN, |c| c.inner(&result).unwrap_or(f64::NAN));
    drop(result);
    if s.strip_exponent || auto {
        let out = crate::scaled_cmd::Outputs {
            output: s.output.as_deref().filter(|_| s.strip_exponent),
            grad_out: s.grad_out.as_deref(),
            phases: &mut phases,
            written: &mut written,
        };
        let r = crate::scaled_cmd::run(&e, &refs, seed.as_ref().filter(|_| s.grad), out)?;
        gradient_check = r.gradient_check;
        scaled = Some(r);
    } else if let (true, Some(seed)) = (s.grad, &seed) {
        let all: Vec<usize> = (0..refs.len()).collect();
        let grads = if s.checkpoint {
            let c = crate::checkpoint_cmd::run(e.slice_einsum(), &refs, seed, s.limit, s.repeat, &mut phases)?;
            grad_ms = c.best_ms;
            checkpointed = Some((c.peak_bytes, c.kept));
            c.grads
        } else {
            let t = Instant::now();
            let g = e.gradient(&all)?;
            phases.push(("gradient build + compile".to_string(), ms(t)));
            if s.repeat <= 1 {
                let t = Instant::now();
                let bar = progress_bar(s, if sliced { e.plan().n_slices() } else { 0 }, "gradient slices");
                let grads = on(pool, || g.eval_with_progress(&refs, seed, |k| bar.set_position(k)))?;
                bar.finish_and_clear();
                phases.push((format!("gradient eval (all operands, {threads})"), ms(t)));
                grads
            } else {
                // Value and gradients in one pass, timed as the forward evaluation is: the
                // best of the runs after a warm-up.
                let all_slices = 0..e.plan().n_slices();
                let run = || on(pool, || g.eval_slices_with_value(&refs, seed, all_slices.clone()));
                let mut grads = run()?.1;
                let mut best = f64::INFINITY;
                for _ in 0..s.repeat {
                    let t = Instant::now();
                    grads = run()?.1;
                    best = best.min(ms(t));
                }
                phases.push((format!("value and gradient eval (all operands, best of {}, {threads})", s.repeat), best));
                grad_ms = Some(best);
                grads
            }
        };
        if !refs.is_empty() {
            // The network is linear in each operand, so ⟨c, f(x + t e_i)⟩ − ⟨c, f(x)⟩ =
            // ⟨∇_i, t⟩ exactly; with t = x_i / 2 the difference is half of ⟨c, f(x)⟩ (no
            // cancellation).
            let i = refs.len() / 2;
            let half = T::from_f64(0.5);
            let dir = operands[i].map(|&x| half * x);
            let moved = operands[i].zip_with(&dir, |a, b| a + b)?;
            let mut shifted = refs.clone();
            shifted[i] = &moved;
            let lhs = seed.inner(&e.eval(&shifted)?).unwrap_or(f64::NAN) - at_x;
            let rhs = grads[i].inner(&dir).unwrap_or(f64::NAN);
            gradient_check = Some((lhs - rhs).abs() / lhs.abs().max(rhs.abs()).max(f64::MIN_POSITIVE));
        }
        if let Some(out) = &s.grad_out {
            npy::write_npz(out, &grads)?;
            written.push(out.clone());
        }
    }
    let mut hvp_check = None;
    if let (true, Some(seed)) = (s.hvp, &seed) {
        let bar = progress_bar(s, if sliced { e.plan().n_slices() } else { 0 }, "hvp slices");
        let files = crate::hvp_run::HvpFiles { directions: &s.directions, out: s.hvp_out.as_deref() };
        let outcome =
            crate::hvp_run::run(&e, &operands, seed, &files, s.limit, s.seed.wrapping_add(1), |k| bar.set_position(k))?;
        bar.finish_and_clear();
        phases.extend(outcome.phases);
        hvp_check = outcome.check;
        written.extend(s.hvp_out.clone());
    }
    let report = EinsumReport {
        phases,
        flops: 2.0 * e.multiply_adds(),
        eval_ms,
        grad_ms,
        repeat: s.repeat,
        checksum: [sum.inner(T::one()), sum.inner(T::from_parts(0.0, 1.0))],
        shape,
        dtype: T::DTYPE,
        path: e.path().clone(),
        peak_bytes: e.plan().peak_bytes(),
        gradient_peak_bytes: s.grad.then(|| checkpointed.map_or_else(|| e.plan().gradient_peak_bytes(), |c| c.0)),
        checkpoint_kept: checkpointed.map(|c| c.1),
        sliced: e.plan().labels().to_vec(),
        n_slices: e.plan().n_slices(),
        slicing_overhead: e.plan().overhead(),
        memory_limit: s.limit,
        gradient_check,
        hvp_peak_bytes: s.hvp.then(|| e.plan().hvp_peak_bytes()),
        hvp_check,
        written,
        show_path: false,
        scaled,
    };
    Ok((format!("{}: {}", plan.name, shorten(&plan.expression)), report))
}

/// The cotangent seeding a reverse pass: the `--cotangent` file (of the output's shape), or
/// ones.
fn cotangent_seed<T: NpyElem>(plan: &Job, shape: &[usize]) -> CliResult<Tensor<T>> {
    Ok(match &plan.cotangent {
        Some(info) => {
            let c = read_as::<T>(std::slice::from_ref(info))?.remove(0);
            if c.shape() != shape {
                return Err(CliError(format!(
                    "{}: the cotangent has shape {:?} but the output has shape {shape:?}",
                    info.source,
                    c.shape(),
                )));
            }
            c
        }
        None => Tensor::ones(shape.to_vec())?,
    })
}

fn shorten(s: &str) -> String {
    if s.chars().count() <= 60 { s.to_string() } else { format!("{}…", s.chars().take(60).collect::<String>()) }
}

/// Prints a report.
pub fn print(title: &str, r: &EinsumReport) {
    println!("{title}");
    let checksum = if r.dtype == Dtype::Complex128 {
        format!("{:.12e}{:+.12e}i", r.checksum[0], r.checksum[1])
    } else {
        format!("{:.12e}", r.checksum[0])
    };
    println!(
        "{} contraction steps, {:.3e} flops, {} result shape {:?}, checksum {checksum}",
        r.path.steps().len(),
        r.flops,
        r.dtype,
        r.shape
    );
    if r.show_path {
        println!("path: {}", format_path(&r.path));
    }
    let mut gradient = match (r.gradient_peak_bytes, r.checkpoint_kept) {
        (Some(b), Some([k, n])) => format!(
            ", {} with the gradient (checkpointed: {k} of {n} intermediates kept, the others recomputed)",
            einsum::format_bytes(Some(b))
        ),
        (Some(b), None) => format!(", {} with the gradient", einsum::format_bytes(Some(b))),
        (None, _) => String::new(),
    };
    if let Some(b) = r.hvp_peak_bytes {
        gradient += &format!(", {} with the Hessian-vector product", einsum::format_bytes(Some(b)));
    }
    println!(
        "memory: estimated peak {} of tensors{gradient}, limit {}",
        einsum::format_bytes(Some(r.peak_bytes)),
        r.memory_limit
    );
    if !r.sliced.is_empty() {
        let labels: Vec<String> = r.sliced.iter().map(char::to_string).collect();
        println!(
            "sliced on {} ({} slices), overhead {:.3} (flops of all slices / unsliced flops)",
            labels.join(","),
            r.n_slices,
            r.slicing_overhead
        );
    } else if r.show_path {
        println!("sliced on nothing (1 slice)");
    }
    let mut t = Table::new(&["phase", "ms"]);
    for (name, ms) in &r.phases {
        t.row(vec![name.clone(), format!("{ms:.3}")]);
    }
    print!("{}", t.render());
    println!("achieved {:.2} GFLOP/s", r.flops / (r.eval_ms * 1e6));
    if let Some(sc) = &r.scaled {
        let mantissa = if r.dtype == Dtype::Complex128 {
            format!("{:.12e}{:+.12e}i", sc.mantissa_checksum[0], sc.mantissa_checksum[1])
        } else {
            format!("{:.12e}", sc.mantissa_checksum[0])
        };
        println!(
            "scaled: mantissa checksum {mantissa}, exponent {:.9} (the value is mantissa · 10^exponent)",
            sc.exponent
        );
        if let Some(first) = sc.gradient_exponents.first() {
            let (lo, hi) = sc.gradient_exponents.iter().fold((*first, *first), |(l, h), &x| (l.min(x), h.max(x)));
            println!("scaled gradients: {} exponents from {lo:.3} to {hi:.3}", sc.gradient_exponents.len());
        }
    }
    if let Some(c) = r.gradient_check {
        let how = if r.scaled.is_some() { "Euler's identity (scaled)" } else { "exact-difference check" };
        println!("gradient: {how} on the middle operand, relative error {c:.1e}");
    }
    if let Some(c) = r.hvp_check {
        println!("hvp: exact-difference check along the middle operand, relative error {c:.1e}");
    }
    for w in &r.written {
        println!("wrote {}", w.display());
    }
}

/// The report as one JSON object.
pub fn json(title: &str, r: &EinsumReport) -> String {
    let phases: Vec<String> =
        r.phases.iter().map(|(n, ms)| format!("{{\"name\":{},\"ms\":{}}}", json_string(n), json_number(*ms))).collect();
    let path: Vec<String> = r
        .path
        .steps()
        .iter()
        .map(|s| format!("[{}]", s.iter().map(usize::to_string).collect::<Vec<_>>().join(",")))
        .collect();
    let written: Vec<String> = r.written.iter().map(|w| json_string(&w.display().to_string())).collect();
    let sliced: Vec<String> = r.sliced.iter().map(|c| json_string(&c.to_string())).collect();
    format!(
        "{{\"title\":{},\"dtype\":\"{}\",\"steps\":{},\"path\":[{}],\"flops\":{},\"eval_ms\":{},\"grad_ms\":{},\"repeat\":{},\"gflops\":{},\"checksum\":{},\"checksum_imag\":{},\"shape\":{:?},\"peak_bytes\":{},\"gradient_peak_bytes\":{},\"checkpoint_kept\":{},\"sliced_inds\":[{}],\"n_slices\":{},\"slicing_overhead\":{},\"memory_limit\":{},\"phases\":[{}],\"gradient_check\":{},\"hvp_peak_bytes\":{},\"hvp_check\":{},\"written\":[{}],\"scaled\":{}}}",
        json_string(title),
        r.dtype,
        r.path.steps().len(),
        path.join(","),
        json_number(r.flops),
        json_number(r.eval_ms),
        r.grad_ms.map_or("null".into(), json_number),
        r.repeat,
        json_number(r.flops / (r.eval_ms * 1e6)),
        json_number(r.checksum[0]),
        json_number(r.checksum[1]),
        r.shape,
        r.peak_bytes,
        r.gradient_peak_bytes.map_or("null".into(), |b| b.to_string()),
        r.checkpoint_kept.map_or("null".into(), |[k, n]| format!("[{k},{n}]")),
        sliced.join(","),
        r.n_slices,
        json_number(r.slicing_overhead),
        match r.memory_limit {
            MemoryLimit::Bytes(b) => b.to_string(),
            MemoryLimit::Unlimited => "null".into(),
        },
        phases.join(","),
        r.gradient_check.map_or("null".into(), json_number),
        r.hvp_peak_bytes.map_or("null".into(), |b| b.to_string()),
        r.hvp_check.map_or("null".into(), json_number),
        written.join(","),
        r.scaled.as_ref().map_or("null".into(), |sc| format!(
            "{{\"mantissa_checksum\":{},\"mantissa_checksum_imag\":{},\"exponent\":{},\"gradient_exponents\":[{}]}}",
            json_number(sc.mantissa_checksum[0]),
            json_number(sc.mantissa_checksum[1]),
            json_number(sc.exponent),
            sc.gradient_exponents.iter().map(|&x| json_number(x)).collect::<Vec<_>>().join(",")
        )),
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
    match (report.gradient_check, report.hvp_check) {
        (Some(c), _) if c.is_nan() || c > 1e-8 => {
            Err(CliError(format!("the gradient check failed (relative error {c:.1e})")))
        }
        (_, Some(c)) if c.is_nan() || c > 1e-8 => {
            Err(CliError(format!("the Hessian-vector product check failed (relative error {c:.1e})")))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(input: &str) -> EinsumArgs {
        EinsumArgs {
            input: input.into(),
            operands: Vec::new(),
            shapes: None,
            path: None,
            max_time: None,
            max_trials: None,
            minimize: None,
            path_cache: None,
            plot: None,
            show_path: false,
            output: None,
            grad: false,
            grad_out: None,
            checkpoint: false,
            cotangent: None,
            hvp: false,
            directions: Vec::new(),
            hvp_out: None,
            repeat: 1,
            memory_limit: None,
            sliced_inds: None,
            threads: 1,
            seed: 42,
            json: false,
            strip_exponent: false,
        }
    }

    #[test]
    fn paths_parse_in_opt_einsum_form() {
        let explicit = |steps: Vec<[usize; 2]>| Ok(PathArg::Explicit(ContractionPath::new(steps)));
        assert_eq!(parse_path("[(0, 1), (0, 1)]"), explicit(vec![[0, 1], [0, 1]]));
        assert_eq!(parse_path(" [[1,2],[0,1],] "), explicit(vec![[1, 2], [0, 1]]));
        assert_eq!(parse_path("[]"), explicit(vec![]));
        assert_eq!(parse_path("opt_flops"), Ok(PathArg::OptFlops));
        assert_eq!(parse_path("greedy"), Ok(PathArg::Greedy));
        let steps = |s: Vec<Vec<usize>>| Ok(PathArg::Explicit(ContractionPath::from_steps(s)));
        assert_eq!(parse_path("[(0, 1, 2), (1,), (0,1)]"), steps(vec![vec![0, 1, 2], vec![1], vec![0, 1]]));
        assert_eq!(parse_path("optimal"), Ok(PathArg::Search(PathChoice::Optimal)));
        assert_eq!(parse_path("dp"), Ok(PathArg::Search(PathChoice::Dp)));
        assert_eq!(parse_path("auto"), Ok(PathArg::Search(PathChoice::Auto)));
        assert_eq!(parse_path("hyper"), Ok(PathArg::Search(PathChoice::Hyper(einsum::hyper::HyperOptions::default()))));
        assert!(parse_seconds("0.5").is_ok() && parse_seconds("-1").is_err() && parse_seconds("inf").is_err());
        assert_eq!(parse_objective("combo-8"), Ok(Objective::Combo { factor: 8.0 }));
        assert!(parse_objective("speed").unwrap_err().contains("speed"));
        assert!(matches!(parse_path("random-greedy"), Ok(PathArg::Search(PathChoice::RandomGreedy { .. }))));
        for (bad, want) in [
            ("[(0,1)", "no enclosing"),
            ("[(0,1)(0,1)]", "separated by commas"),
            ("[(0,1),(0,x)]", "`x` is not an operand position"),
            ("[(0,-1)]", "`-1` is not an operand position"),
            ("[(0,1),()]", "step 1 names no operand"),
            ("[(0,1]", "not closed"),
            ("[0,1]", "does not start with ( or ["),
            ("fastest", "not a path"),
        ] {
            let e = parse_path(bad).unwrap_err();
            assert!(e.contains(want), "{bad}: {e}");
        }
        assert_eq!(format_path(&ContractionPath::new(vec![[1, 2], [0, 1]])), "[(1, 2), (0, 1)]");
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
        assert_eq!(r.path.steps(), &[[0, 1]]);
        assert_eq!(r.flops, 2.0 * 2.0 * 3.0 * 4.0);
        assert!(r.gradient_check.unwrap() < 1e-12);
    }

    #[test]
    fn hessian_vector_products_run_sliced_and_unsliced_with_the_same_products() {
        let dir = std::env::temp_dir().join(format!("cgx-hvp-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut products = Vec::new();
        for (name, sliced) in [("plain", None), ("sliced", Some(vec!['b', 'a']))] {
            let out = dir.join(format!("{name}.npz"));
            let a = EinsumArgs {
                shapes: Some("2x3,3x4,4x2".into()),
                hvp: true,
                hvp_out: Some(out.clone()),
                sliced_inds: sliced.map(SlicedInds),
                ..args("ab,bc,ca->")
            };
            let (_, r) = measure(&a).unwrap();
            assert!(r.hvp_check.unwrap() < 1e-12, "{name}: {:?}", r.hvp_check);
            assert!(r.hvp_peak_bytes.is_some() && r.gradient_check.is_none());
            let infos = npy::read_infos(&[out], MemoryLimit::Unlimited).unwrap();
            products.push(read_as::<f64>(&infos).unwrap());
        }
        assert_eq!(products[1].len(), 3);
        for (s, p) in products[1].iter().zip(&products[0]) {
            assert!(s.max_abs_diff(p).unwrap() <= 1e-12 * (1.0 + p.max_abs()));
        }
        // A memory limit the unsliced product exceeds slices it.
        let big = EinsumArgs {
            shapes: Some("256x2,2x256,256x2,2x256".into()),
            path: Some(PathArg::Explicit(ContractionPath::new(vec![[0, 1], [0, 1], [0, 1]]))),
            hvp: true,
            memory_limit: Some(MemoryLimit::Bytes(400 << 10)),
            ..args("ai,ib,bj,ja->")
        };
        let (_, r) = measure(&big).unwrap();
        assert!(r.n_slices > 1 && r.hvp_peak_bytes.unwrap() <= 400 << 10, "{:?}", (r.n_slices, r.hvp_peak_bytes));
        assert!(r.hvp_check.unwrap() < 1e-10);
        let e = measure(&EinsumArgs { cotangent: Some(dir.join("c.npy")), ..args("ab,bc->ac") }).err().unwrap();
        assert!(e.0.contains("--grad or --hvp"), "{}", e.0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn an_instance_runs_on_every_path() {
        let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../einsum/tests/data/bin_matmul_256.json");
        let mut sums = Vec::new();
        for path in [PathArg::OptFlops, PathArg::OptSize, PathArg::Greedy] {
            let (_, r) = measure(&EinsumArgs { path: Some(path), ..args(file) }).unwrap();
            sums.push(r.checksum[0]);
        }
        assert!(sums.iter().all(|s| (s - sums[0]).abs() <= 1e-9 * sums[0].abs()), "{sums:?}");
    }

    #[test]
    fn bad_input_is_an_error_line() {
        for (a, want) in [
            (args("ab,bc->ac"), "their shapes with --shapes"),
            (EinsumArgs { shapes: Some("2x3,4x4".into()), ..args("ab,bc->ac") }, "label"),
            (EinsumArgs { shapes: Some("2x3".into()), ..args("ab,bc->ac") }, ""),
            (args("/nonexistent/instance.json"), ""),
            (
                EinsumArgs { shapes: Some("2x3,3x4".into()), path: Some(PathArg::OptFlops), ..args("ab,bc->ac") },
                "no stored OptFlops path",
            ),
        ] {
            let e = measure(&a).err().unwrap_or_else(|| panic!("{a:?} was accepted"));
            assert!(e.0.contains(want), "{}", e.0);
            assert!(!e.0.contains('\n'), "{}", e.0);
        }
    }
}
