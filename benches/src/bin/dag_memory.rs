//! Memory as a figure of the design: the bytes per node of every column the pipeline holds
//! from build to the first evaluation, and the peak, for every DAG shape.
//!
//! ```text
//! cargo run --release -p benches --bin dag_memory -- [--shape S] [--nodes 1e6,1e7] [--release]
//! ```
//!
//! Without `--shape` every shape runs, one after the other in this process. A counting
//! global allocator gives the figures: it counts the bytes allocated and not yet freed, and
//! their peak, so they are exact and do not depend on what earlier runs left mapped (the
//! process's `VmHWM` is printed too, once, for the whole run). For each run:
//! - the generated workload (the spec and its input values) is counted alone, before the
//!   pipeline starts, and kept out of the pipeline's figures;
//! - the pipeline's peak is the most bytes live beyond the workload from the build to the
//!   end of the first sequential evaluation, with every phase's result kept alive as
//!   `cgx bench dag` keeps them (the interner, the fragment, the materialized graph, the
//!   program and the evaluation's slots), plus what each phase allocates while it runs;
//! - with `--release`, the pipeline is the one-shot caller's: the interner's operation table
//!   is released once the build is done (`KeyInterner::release_table`), and the fragment and the resolved
//!   view are dropped once materialize has made its graph, before compile (which needs
//!   only the materialized graph; the operations it reads stay alive, shared with the
//!   interner's chunks by `Arc`), so the interner reclaims what only the fragment pinned;
//! - each structure's columns are read with `column_bytes()` (allocated capacity) right
//!   after the phase that makes it;
//! - the reference evaluator runs last, counted alone (its peak beyond what was live
//!   before it), and its results must equal the evaluation's bitwise.
//!
//! All figures are bytes per generated node (before CSE), as elsewhere in
//! `docs/PERFORMANCE.md`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};

use benches::{Shape, Workload, bind_inputs, memory_status, same_values};
use computegraph::{EvalState, KeyInterner, compile, materialize_merge, resolve};

/// The system allocator, counting the bytes live and their peak.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
static PEAK: AtomicIsize = AtomicIsize::new(0);

fn note(delta: isize) {
    let live = LIVE.fetch_add(delta, Relaxed) + delta;
    if delta > 0 {
        PEAK.fetch_max(live, Relaxed);
    }
}

// SAFETY: every call is forwarded to the system allocator unchanged; the counters are
// atomics that never allocate. (A counting allocator has no safe form: the crate denies
// unsafe code and this impl alone allows it.)
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as isize);
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as isize);
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(-(layout.size() as isize));
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size as isize - layout.size() as isize);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Bytes live now.
fn live() -> isize {
    LIVE.load(Relaxed)
}

/// Starts a new peak at what is live now.
fn reset_peak() {
    PEAK.store(live(), Relaxed);
}

fn peak() -> isize {
    PEAK.load(Relaxed)
}

fn usage(msg: &str) -> ! {
    eprintln!("error: {msg}");
    eprintln!(
        "usage: dag_memory [--shape window|uniform|chain|layered|layered_deep] [--nodes N[,N...]] [--release]\n\
         N accepts `_` separators and `1e7`; the default is every shape at 1e6 and 1e7."
    );
    std::process::exit(2)
}

struct Args {
    shapes: Vec<Shape>,
    sizes: Vec<usize>,
    /// Drop the fragment and the view after materialize (the one-shot pipeline).
    release: bool,
}

fn parse_args() -> Args {
    let mut shapes = vec![Shape::Window, Shape::Uniform, Shape::Chain, Shape::LayeredWide, Shape::LayeredDeep];
    let mut sizes = vec![1_000_000, 10_000_000];
    let mut release = false;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().unwrap_or_else(|| usage(&format!("{name} needs a value")));
        match a.as_str() {
            "--shape" => {
                let v = value("--shape");
                shapes = vec![Shape::parse(&v).unwrap_or_else(|| usage(&format!("unknown shape `{v}`")))];
            }
            "--nodes" => {
                let v = value("--nodes");
                sizes = v.split(',').map(|c| benches::parse_count(c).unwrap_or_else(|e| usage(&e))).collect();
            }
            "--release" => release = true,
            "-h" | "--help" => usage("help requested"),
            other => usage(&format!("unknown argument `{other}`")),
        }
    }
    Args { shapes, sizes, release }
}

/// What one run measured, in bytes (columns by structure, then named).
struct Run {
    nodes: usize,
    workload: isize,
    /// `(structure, column, bytes)`.
    columns: Vec<(&'static str, &'static str, usize)>,
    /// Peak beyond the workload during each phase: build, resolve + materialize, compile, eval.
    phase_peaks: [isize; 4],
    pipeline_peak: isize,
    /// Live beyond the workload after the first evaluation.
    kept: isize,
    reference_peak: isize,
    matches_reference: bool,
    /// Time taken to drop the fragment and the view (`--release` only), in seconds.
    release_time: Option<f64>,
}

fn measure(shape: Shape, n: usize, release: bool) -> Run {
    let before = live();
    let w = Workload::new(shape, n);
    let nodes = w.nodes();
    let workload = live() - before;
    let base = live();
    reset_peak();
    let mut columns = Vec::new();
    let mut take = |structure: &'static str, cols: Vec<(&'static str, usize)>| {
        columns.extend(cols.into_iter().map(|(c, b)| (structure, c, b)));
    };

    let interner = KeyInterner::new();
    let built = w.spec.build_single(&interner).expect("generated specs are valid");
    let build_peak = peak() - base;
    for g in &built.graphs {
        take("fragment", g.column_bytes());
    }
    take("interner", interner.column_bytes());
    // The one-shot caller interns no operation after the build: the interner's table goes
    // before materialize (it would be rebuilt from the store by a later interning).
    if release {
        interner.release_table();
    }

    reset_peak();
    let view = resolve(built.graphs.clone());
    let flat = materialize_merge(&view, &built.outputs);
    let materialize_peak = peak() - base;
    take("materialized", flat.column_bytes());
    // The one-shot caller's pipeline: compile needs only the materialized graph.
    let (kept_phases, release_time) = if release {
        let t = std::time::Instant::now();
        drop(view);
        drop(built);
        (None, Some(t.elapsed().as_secs_f64()))
    } else {
        (Some((view, built)), None)
    };
    take("interner after materialize", if release { interner.column_bytes() } else { Vec::new() });

    reset_peak();
    let program = compile(&flat);
    let compile_peak = peak() - base;
    take("program", program.column_bytes());

    reset_peak();
    let inputs = bind_inputs(&program, &w.inputs);
    let before_eval = live();
    let mut state = EvalState::new();
    let out = program.eval_with(&mut state, &mut (), &inputs).expect("the inputs are bound");
    let eval_peak = peak() - base;
    take("evaluation", vec![("slots and outputs", (live() - before_eval).max(0) as usize)]);
    let kept = live() - base;
    drop(kept_phases);
    let pipeline_peak = build_peak.max(materialize_peak).max(compile_peak).max(eval_peak);

    let before_reference = live();
    reset_peak();
    let reference = w.spec.eval_reference(&w.inputs);
    let reference_peak = peak() - before_reference;
    let matches_reference = same_values(&out, &reference);
    Run {
        nodes,
        workload,
        columns,
        phase_peaks: [build_peak, materialize_peak, compile_peak, eval_peak],
        pipeline_peak,
        kept,
        reference_peak,
        matches_reference,
        release_time,
    }
}

fn per(bytes: impl Into<f64>, nodes: usize) -> String {
    format!("{:.1}", bytes.into() / nodes as f64)
}

/// A summary row's cell for one run.
type RowOf = fn(&Run) -> String;

fn report(size: usize, shapes: &[Shape], runs: &[Run], release: bool) {
    let nodes: Vec<usize> = runs.iter().map(|r| r.nodes).collect();
    let header: Vec<&str> = shapes.iter().map(|s| s.name()).collect();
    println!(
        "\n## {size} nodes: bytes per node (nodes: {nodes:?}){}\n",
        if release { ", the fragment and view dropped after materialize" } else { "" }
    );
    println!("| structure | column | {} |", header.join(" | "));
    println!("|---|---|{}", "---|".repeat(shapes.len()));
    // Every run lists the same columns in the same order.
    for (i, &(structure, column, _)) in runs[0].columns.iter().enumerate() {
        let cells: Vec<String> = runs.iter().map(|r| per(r.columns[i].2 as f64, r.nodes)).collect();
        println!("| {structure} | {column} | {} |", cells.join(" | "));
    }
    let mut totals: Vec<&str> = runs[0].columns.iter().map(|c| c.0).collect();
    totals.dedup();
    for structure in totals {
        let cells: Vec<String> = runs
            .iter()
            .map(|r| per(r.columns.iter().filter(|c| c.0 == structure).map(|c| c.2 as f64).sum::<f64>(), r.nodes))
            .collect();
        println!("| **{structure}** | all | {} |", cells.join(" | "));
    }
    let rows: [(&str, RowOf); 10] = [
        ("peak during build", |r| per(r.phase_peaks[0] as f64, r.nodes)),
        ("peak during resolve + materialize", |r| per(r.phase_peaks[1] as f64, r.nodes)),
        ("peak during compile", |r| per(r.phase_peaks[2] as f64, r.nodes)),
        ("peak during the first evaluation", |r| per(r.phase_peaks[3] as f64, r.nodes)),
        ("**pipeline peak** (build to first evaluation)", |r| per(r.pipeline_peak as f64, r.nodes)),
        ("live after the first evaluation", |r| per(r.kept as f64, r.nodes)),
        ("workload (spec and inputs; not in the peak)", |r| per(r.workload as f64, r.nodes)),
        ("reference evaluator (alone; not in the peak)", |r| per(r.reference_peak as f64, r.nodes)),
        ("results equal the reference", |r| r.matches_reference.to_string()),
        ("fragment and view dropped after materialize (`--release`), ms", |r| {
            r.release_time.map_or_else(|| "kept".to_string(), |t| format!("{:.1}", t * 1e3))
        }),
    ];
    for (name, f) in rows {
        let cells: Vec<String> = runs.iter().map(f).collect();
        println!("| {name} | | {} |", cells.join(" | "));
    }
}

fn main() {
    let args = parse_args();
    let mut all_match = true;
    for &size in &args.sizes {
        let runs: Vec<Run> = args.shapes.iter().map(|&s| measure(s, size, args.release)).collect();
        all_match &= runs.iter().all(|r| r.matches_reference);
        report(size, &args.shapes, &runs, args.release);
    }
    if let Some((hwm, _)) = memory_status() {
        println!(
            "\nprocess peak RSS (VmHWM, every run and workload together): {:.1} MiB",
            hwm as f64 / (1 << 20) as f64
        );
    }
    if !all_match {
        eprintln!("error: a result differs from the reference evaluator");
        std::process::exit(1);
    }
}
