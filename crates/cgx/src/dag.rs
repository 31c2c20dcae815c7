//! `cgx bench dag`: one large scalar DAG through every phase, timed.

use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use computegraph::{CompiledProgram, EvalState, KeyInterner, compile, materialize_merge, resolve};
use einsum::{MemoryLimit, format_bytes};
use indicatif::{ProgressBar, ProgressStyle};
use scalar::ScalarOp;
use workloads::{Shape, Workload, memory_status, same_values};

use crate::cli::{CliError, CliResult};
use crate::table::{Table, json_number, json_string};

/// The DAG shapes of `docs/SPEC.md` §8.1.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum ShapeArg {
    /// Random DAG, operands from the 1024 most recent values, 30% repeats.
    Window,
    /// Random DAG, operands uniformly from all earlier values, 30% repeats.
    Uniform,
    /// A chain: depth = size.
    Chain,
    /// Layers 100 deep (10^5 wide at 10^7 nodes).
    LayeredWide,
    /// Layers 1000 wide.
    LayeredDeep,
}

impl ShapeArg {
    pub(crate) fn shape(self) -> Shape {
        match self {
            ShapeArg::Window => Shape::Window,
            ShapeArg::Uniform => Shape::Uniform,
            ShapeArg::Chain => Shape::Chain,
            ShapeArg::LayeredWide => Shape::LayeredWide,
            ShapeArg::LayeredDeep => Shape::LayeredDeep,
        }
    }
}

/// Options of `cgx bench dag`.
#[derive(Args, Debug, Clone)]
pub struct DagArgs {
    /// The DAG's shape.
    #[arg(long, value_enum, default_value_t = ShapeArg::Window)]
    pub shape: ShapeArg,
    /// Number of operations (`1000000`, `1_000_000` and `1e6` all work).
    #[arg(long, default_value = "1000000", value_parser = parse_count)]
    pub nodes: usize,
    /// Threads of the parallel evaluation (default: every core).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The memory budget of the run (`2GiB`, `500MB`, bytes, or `none`), checked against an
    /// estimate of [`BYTES_PER_NODE`] per operation before anything is generated. Default:
    /// half the physical memory (or of `ulimit -v`), at most 8 GiB.
    #[arg(long, value_parser = |s: &str| s.parse::<MemoryLimit>().map_err(|e| e.to_string()))]
    pub memory_limit: Option<MemoryLimit>,
    /// Cut the counter-based DAG of the shape into this many node blocks (level bands for
    /// layered shapes), prepare and evaluate each alone, time each, and check the result
    /// against the same DAG run whole.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub partitions: Option<u32>,
}

pub use workloads::parse_count;

/// The estimated peak bytes per operation of a run: the spec, the graph, the materialized
/// graph, the program, the slots and the reference evaluation together. Measured peaks are
/// 170 to 200 bytes per node at 10^7 (`docs/PERFORMANCE.md`); the estimate rounds up.
pub const BYTES_PER_NODE: u64 = 256;

/// A graph holds at most 2^31 local values (`computegraph`'s packed operands).
const MAX_NODES: usize = 1 << 31;

/// Checks a run of `nodes` operations against the graph's size limit and `limit`, before
/// anything is allocated.
pub fn check_size(nodes: usize, limit: MemoryLimit) -> CliResult {
    let bytes = (nodes as u64).checked_mul(BYTES_PER_NODE);
    if !limit.allows(bytes) {
        return Err(CliError(format!(
            "memory limit exceeded: a DAG of {nodes} operations needs about {} ({BYTES_PER_NODE} bytes per operation), over the limit of {limit} (see --memory-limit)",
            format_bytes(bytes)
        )));
    }
    if nodes >= MAX_NODES {
        return Err(CliError(format!(
            "a DAG of {nodes} operations does not fit one graph (at most 2^31 = {MAX_NODES} values)"
        )));
    }
    Ok(())
}

/// One timed phase.
pub struct Phase {
    /// Its name.
    pub name: String,
    /// Wall time.
    pub time: Duration,
}

/// What a run measured.
pub struct DagReport {
    /// The shape's name.
    pub shape: &'static str,
    /// Operations in the spec.
    pub nodes: usize,
    /// Threads of the parallel evaluation.
    pub threads: usize,
    /// The phases, in order.
    pub phases: Vec<Phase>,
    /// Operations left after CSE.
    pub operations: usize,
    /// Slots of the compiled program.
    pub slots: usize,
    /// Whether both evaluations equal the reference evaluator bitwise.
    pub matches_reference: bool,
    /// Peak resident memory of the process, if the OS reports it.
    pub peak_rss_bytes: Option<u64>,
}

impl DagReport {
    /// The report as a table.
    pub fn table(&self) -> String {
        let mut t = Table::new(&["phase", "ms", "ns/node"]);
        for p in &self.phases {
            let s = p.time.as_secs_f64();
            t.row(vec![p.name.clone(), format!("{:.1}", s * 1e3), format!("{:.1}", s * 1e9 / self.nodes as f64)]);
        }
        t.render()
    }

    /// The report as one JSON object.
    pub fn json(&self) -> String {
        let phases: Vec<String> = self
            .phases
            .iter()
            .map(|p| {
                let s = p.time.as_secs_f64();
                format!(
                    "{{\"name\":{},\"ms\":{},\"ns_per_node\":{}}}",
                    json_string(&p.name),
                    json_number(s * 1e3),
                    json_number(s * 1e9 / self.nodes as f64)
                )
            })
            .collect();
        format!(
            "{{\"shape\":{},\"nodes\":{},\"threads\":{},\"phases\":[{}],\"operations_after_cse\":{},\"slots\":{},\"matches_reference\":{},\"peak_rss_bytes\":{}}}",
            json_string(self.shape),
            self.nodes,
            self.threads,
            phases.join(","),
            self.operations,
            self.slots,
            self.matches_reference,
            self.peak_rss_bytes.map_or("null".into(), |b| b.to_string()),
        )
    }
}

/// The run's progress: one bar over every step of [`measure`] (its length is
/// [`STEPS`]), naming the step under way and its elapsed time; hidden when the output is
/// JSON or stderr is not a terminal.
struct Progress(ProgressBar);

/// Steps of a run: generate, build, resolve, materialize, release the fragment, compile, a
/// warm-up and three timed runs of each evaluator, and the reference evaluation.
const STEPS: u64 = 15;

impl Progress {
    fn new(quiet: bool) -> Self {
        let bar = if quiet { ProgressBar::hidden() } else { ProgressBar::new(STEPS) };
        bar.set_style(
            ProgressStyle::with_template("{bar:24.cyan/blue} {pos:>2}/{len} {msg} ({elapsed})")
                .expect("a valid template")
                .progress_chars("=> "),
        );
        bar.enable_steady_tick(Duration::from_millis(100));
        Progress(bar)
    }

    /// Runs step `name`, records its time in `phases`, and advances the bar.
    fn timed<T>(&self, name: &str, phases: &mut Vec<Phase>, f: impl FnOnce() -> T) -> T {
        self.0.set_message(name.to_string());
        let t = Instant::now();
        let out = f();
        phases.push(Phase { name: name.to_string(), time: t.elapsed() });
        self.0.inc(1);
        out
    }

    /// Runs step `name` once untimed (a warm-up: first-touch page faults, the parallel
    /// schedule), then three times, and records the fastest.
    fn best_of_3<T, E>(
        &self,
        name: &str,
        phases: &mut Vec<Phase>,
        mut f: impl FnMut() -> Result<T, E>,
    ) -> Result<T, E> {
        let first = self.timed(&format!("{name}, warm-up"), &mut Vec::new(), &mut f)?;
        let mut runs = Vec::with_capacity(3);
        for k in 1..=3 {
            self.timed(&format!("{name}, run {k} of 3"), &mut runs, &mut f)?;
        }
        let mut best = runs.into_iter().min_by_key(|p| p.time).expect("three runs");
        best.name = name.to_string();
        phases.push(best);
        Ok(first)
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

/// Runs the benchmark and returns its report.
pub fn measure(shape: ShapeArg, nodes: usize, threads: usize, quiet: bool) -> CliResult<DagReport> {
    let shape = shape.shape();
    let progress = Progress::new(quiet);
    let mut phases = Vec::new();
    let workload = progress.timed("generate (not engine time)", &mut phases, || Workload::new(shape, nodes));
    phases.clear(); // generation is the workload's, not the engine's
    let spec = &workload.spec;
    let nodes = workload.nodes();

    let interner = KeyInterner::new();
    let built = progress.timed("build (with interning)", &mut phases, || spec.build_single(&interner))?;
    // Nothing is interned after the build: the hash-consing table is not needed by
    // materialize and compile (10.7 bytes/node less at their peak).
    interner.release_table();
    let view = progress.timed("resolve", &mut phases, || resolve(built.graphs.clone()));
    let flat = progress.timed("materialize_merge", &mut phases, || materialize_merge(&view, &built.outputs));
    // Compile needs only the materialized graph (its operations are shared with the
    // interner's chunks): dropping the fragment lets the interner reclaim what only it
    // pinned before compile allocates, so the one-shot peak is not the sum of every phase.
    // The release is part of a one-shot run's time, so it is a phase of its own.
    progress.timed("release the fragment", &mut phases, || {
        drop(view);
        drop(built);
    });
    let program = progress.timed("compile", &mut phases, || compile(&flat));
    let inputs = bind(&program, &workload.inputs)?;

    // Evaluation is what runs many times per compile: the best of three after a warm-up.
    let mut state = EvalState::new();
    let seq =
        progress.best_of_3("eval (sequential)", &mut phases, || program.eval_with(&mut state, &mut (), &inputs))?;
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build()?;
    let par = progress.best_of_3(&format!("eval (parallel, {threads} threads)"), &mut phases, || {
        program.eval_parallel_with(Some(&pool), &mut state, &mut (), &inputs)
    })?;

    let reference = progress
        .timed("reference evaluator (for the check)", &mut Vec::new(), || spec.eval_reference(&workload.inputs));
    drop(progress);
    Ok(DagReport {
        shape: shape.name(),
        nodes,
        threads,
        phases,
        operations: flat.operation_count(),
        slots: program.slot_count(),
        matches_reference: same_values(&seq, &reference) && same_values(&par, &reference),
        peak_rss_bytes: memory_status().map(|(peak, _)| peak),
    })
}

fn bind<'a>(program: &CompiledProgram<ScalarOp>, values: &'a [f64]) -> CliResult<Vec<&'a f64>> {
    Ok(program.bind_inputs(|k| match k {
        scalar::ScalarKey::Var(i) => values.get(*i as usize),
        _ => None,
    })?)
}

/// Default thread count: every core.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// `cgx bench dag`.
pub fn run(args: &DagArgs) -> CliResult {
    let threads = args.threads.map_or_else(default_threads, usize::from);
    check_size(args.nodes, args.memory_limit.unwrap_or_else(crate::einsum_cmd::default_memory_limit))?;
    if let Some(parts) = args.partitions {
        return crate::dag_parts::run(args.shape.shape(), args.nodes, parts as usize, args.json);
    }
    let report = measure(args.shape, args.nodes, threads, args.json)?;
    if args.json {
        println!("{}", report.json());
    } else {
        println!(
            "{} DAG, {} operations, {} after CSE, {} slots",
            report.shape, report.nodes, report.operations, report.slots
        );
        print!("{}", report.table());
        if let Some(b) = report.peak_rss_bytes {
            println!(
                "peak memory: {:.1} MiB ({:.0} bytes/node)",
                b as f64 / (1 << 20) as f64,
                b as f64 / report.nodes as f64
            );
        }
        println!("results equal the reference evaluator (sequential and parallel): {}", report.matches_reference);
    }
    if report.matches_reference {
        Ok(())
    } else {
        Err(CliError("the results differ from the reference evaluator".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_parse_in_every_spelling() {
        assert_eq!(parse_count("1000000"), Ok(1_000_000));
        assert_eq!(parse_count("1_000_000"), Ok(1_000_000));
        assert_eq!(parse_count("1e6"), Ok(1_000_000));
        assert_eq!(parse_count("25E3"), Ok(25_000));
        assert!(parse_count("0").is_err());
        assert!(parse_count("many").unwrap_err().contains("not a count"));
        assert!(parse_count("1e40").is_err());
    }

    #[test]
    fn sizes_beyond_the_graph_or_the_memory_limit_are_errors() {
        let e = check_size(10_000_000_000, MemoryLimit::Unlimited).unwrap_err().0;
        assert!(e.contains("does not fit one graph"), "{e}");
        let e = check_size(10_000_000_000, MemoryLimit::Bytes(8 << 30)).unwrap_err().0;
        assert!(e.starts_with("memory limit exceeded: a DAG of 10000000000 operations needs about 2.3 TiB"), "{e}");
        let e = check_size(100_000_000, MemoryLimit::Bytes(1 << 30)).unwrap_err().0;
        assert!(e.contains("needs about 23.8 GiB (25600000000 bytes)") && e.contains("limit of 1 GiB"), "{e}");
        assert!(check_size(1_000_000, MemoryLimit::Bytes(1 << 30)).is_ok());
        assert!(check_size(100_000_000, MemoryLimit::Unlimited).is_ok());
    }

    #[test]
    fn a_small_run_matches_the_reference_and_reports_every_phase() {
        for shape in [ShapeArg::Window, ShapeArg::Chain, ShapeArg::LayeredWide] {
            let r = measure(shape, 2000, 2, true).unwrap();
            assert!(r.matches_reference);
            let names: Vec<&str> = r.phases.iter().map(|p| p.name.as_str()).collect();
            assert_eq!(
                names[..6],
                [
                    "build (with interning)",
                    "resolve",
                    "materialize_merge",
                    "release the fragment",
                    "compile",
                    "eval (sequential)"
                ]
            );
            assert_eq!(names.len(), 7);
            let json = r.json();
            assert!(json.starts_with(&format!("{{\"shape\":\"{}\"", r.shape)) && json.ends_with('}'), "{json}");
        }
    }
}
