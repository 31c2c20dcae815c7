//! One-shot measurement of the whole pipeline on one workload, with the baselines in the
//! same run and the process's peak memory: how the 10^7-node figures are taken.
//!
//! ```text
//! cargo run --release -p benches --bin pipeline_report -- --shape window --nodes 10000000 [--runs R]
//! ```
//!
//! Shapes: `window`, `uniform`, `chain`, `layered` (= `layered_wide`), `layered_deep`.
//! Each phase is timed with `Instant`; with several runs (default: 7 up to 10^5 nodes,
//! 3 up to 10^6, else 1) the median is printed. Peak memory is `VmHWM` from
//! `/proc/self/status`, read right after the first pipeline run (before any baseline runs),
//! and reset after generating the spec when the kernel allows it (`/proc/self/clear_refs`).

#![forbid(unsafe_code)]

use std::time::Instant;

use benches::{BoxedProgram, FlatProgram, Shape, Workload, bind_inputs, hashcons, memory_status, prune, same_values};
use computegraph::{EvalState, compile, materialize_merge, resolve};

struct Args {
    shape: Shape,
    nodes: usize,
    runs: Option<usize>,
}

fn usage(msg: &str) -> ! {
    eprintln!("error: {msg}");
    eprintln!(
        "usage: pipeline_report --shape window|uniform|chain|layered|layered_deep --nodes N [--runs R]\n\
         N accepts `_` separators and `1e7`."
    );
    std::process::exit(2)
}

fn parse_args() -> Args {
    let mut shape = Shape::Window;
    let mut nodes = 1_000_000;
    let mut runs = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().unwrap_or_else(|| usage(&format!("{name} needs a value")));
        match a.as_str() {
            "--shape" => {
                let v = value("--shape");
                shape = Shape::parse(&v).unwrap_or_else(|| usage(&format!("unknown shape `{v}`")));
            }
            "--nodes" => {
                let v = value("--nodes");
                nodes = benches::parse_count(&v).unwrap_or_else(|e| usage(&e));
            }
            "--runs" => {
                let v = value("--runs");
                runs = Some(benches::parse_count(&v).unwrap_or_else(|e| usage(&e)));
            }
            "-h" | "--help" => usage("help requested"),
            other => usage(&format!("unknown argument `{other}`")),
        }
    }
    Args { shape, nodes, runs }
}

/// Median of the recorded times, in seconds.
fn median(xs: &mut [f64]) -> f64 {
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n % 2 == 1 { xs[n / 2] } else { (xs[n / 2 - 1] + xs[n / 2]) / 2.0 }
}

fn time<T>(f: impl FnOnce() -> T) -> (T, f64) {
    let t = Instant::now();
    let r = f();
    (r, t.elapsed().as_secs_f64())
}

#[derive(Default)]
struct Phases {
    build: Vec<f64>,
    resolve: Vec<f64>,
    materialize: Vec<f64>,
    compile: Vec<f64>,
    eval_cold: Vec<f64>,
    eval_warm: Vec<f64>,
}

#[derive(Default)]
struct Heap {
    interner: usize,
    graph: usize,
    materialized: usize,
    program: usize,
    eval_slots: usize,
}

fn reset_peak() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

fn main() {
    let args = parse_args();
    let runs = args.runs.unwrap_or(match args.nodes {
        0..=100_000 => 7,
        100_001..=1_000_000 => 3,
        _ => 1,
    });

    let (w, t_gen) = time(|| Workload::new(args.shape, args.nodes));
    let n = w.nodes();
    let per = |s: f64| s * 1e9 / n as f64;
    let peak_reset = reset_peak();
    let rss_before = memory_status().map(|(_, rss)| rss);
    println!(
        "shape {}, {} nodes, {} inputs, {} outputs; spec generated in {:.0} ms (not counted); {} run(s), medians",
        args.shape.name(),
        n,
        w.spec.inputs,
        w.spec.outputs.len(),
        t_gen * 1e3,
        runs
    );

    // ---- Ours: the whole pipeline, `runs` times; memory read after the first run.
    let mut ph = Phases::default();
    let mut heap = Heap::default();
    let mut peak = None;
    let mut stats = (0, 0, 0);
    let mut ours_out = Vec::new();
    for run in 0..runs {
        let (built, t) = time(|| benches::build(&w.spec));
        ph.build.push(t);
        let (view, t) = time(|| resolve(built.graphs.clone()));
        ph.resolve.push(t);
        let (flat, t) = time(|| materialize_merge(&view, &built.outputs));
        ph.materialize.push(t);
        let (program, t) = time(|| compile(&flat));
        ph.compile.push(t);
        let inputs = bind_inputs(&program, &w.inputs);
        let mut state = EvalState::new();
        let (out, t) = time(|| program.eval_with(&mut state, &mut (), &inputs).expect("evaluates"));
        ph.eval_cold.push(t);
        if run == 0 {
            peak = memory_status().map(|(hwm, _)| hwm);
            heap = Heap {
                interner: view.interner().heap_bytes(),
                graph: built.graphs.iter().map(|g| g.heap_bytes()).sum(),
                materialized: flat.heap_bytes(),
                program: program.heap_bytes(),
                eval_slots: program.slot_count() * std::mem::size_of::<Option<f64>>(),
            };
            stats = (flat.operation_count(), program.slot_count(), program.instruction_count());
        }
        let (out2, t) = time(|| program.eval_with(&mut state, &mut (), &inputs).expect("evaluates"));
        ph.eval_warm.push(t);
        assert!(same_values(&out, &out2), "repeated evaluation differs");
        if run == 0 {
            ours_out = out;
        }
    }

    // ---- Baselines, same run.
    let mut b_hashcons = Vec::new();
    let mut b_dedup = Vec::new();
    let mut b_prune = Vec::new();
    let mut b_lower = Vec::new();
    let mut b_box_new = Vec::new();
    let mut b_flat_cold = Vec::new();
    let mut b_flat = Vec::new();
    let mut b_boxed = Vec::new();
    let mut distinct = 0;
    let mut flat_out = Vec::new();
    let mut boxed_out = Vec::new();
    for _ in 0..runs {
        let (hc, t) = time(|| hashcons(&w.spec));
        b_hashcons.push(t);
        distinct = hc.distinct;
        drop(hc);
        let (deduped, t) = time(|| w.spec.dedup());
        b_dedup.push(t);
        let (base, t) = time(|| prune(&deduped));
        b_prune.push(t);
        drop(deduped);
        let (fp, t) = time(|| FlatProgram::new(&base));
        b_lower.push(t);
        let (bp, t) = time(|| BoxedProgram::new(&base));
        b_box_new.push(t);
        let mut values = Vec::new();
        let (o, t) = time(|| fp.eval(&mut values, &w.inputs));
        b_flat_cold.push(t);
        let (o2, t) = time(|| fp.eval(&mut values, &w.inputs));
        b_flat.push(t);
        assert!(same_values(&o, &o2));
        flat_out = o;
        let mut values = Vec::new();
        let _ = bp.eval(&mut values, &w.inputs);
        let (o, t) = time(|| bp.eval(&mut values, &w.inputs));
        b_boxed.push(t);
        boxed_out = o;
    }

    let reference = w.spec.eval_reference(&w.inputs);
    let ok_ours = same_values(&ours_out, &reference);
    let ok_flat = same_values(&flat_out, &reference);
    let ok_boxed = same_values(&boxed_out, &reference);

    // ---- Report.
    let m = |xs: &mut Vec<f64>| median(xs);
    let (build, resolve_t, mat, comp, ev_cold, ev_warm) = (
        m(&mut ph.build),
        m(&mut ph.resolve),
        m(&mut ph.materialize),
        m(&mut ph.compile),
        m(&mut ph.eval_cold),
        m(&mut ph.eval_warm),
    );
    let total = build + resolve_t + mat + comp + ev_cold;
    let row = |name: &str, s: f64, base: Option<(&str, f64)>| match base {
        Some((bn, b)) => println!(
            "{name:<26} {:>10.2} {:>9.1}   {bn:<22} {:>10.2} {:>9.1} {:>8.2}x",
            s * 1e3,
            per(s),
            b * 1e3,
            per(b),
            s / b
        ),
        None => println!("{name:<26} {:>10.2} {:>9.1}", s * 1e3, per(s)),
    };
    println!();
    println!(
        "{:<26} {:>10} {:>9}   {:<22} {:>10} {:>9} {:>9}",
        "phase (ours)", "ms", "ns/node", "baseline", "ms", "ns/node", "ours/base"
    );
    row("build (incl. interning)", build, Some(("fx_hashcons", m(&mut b_hashcons))));
    row("resolve", resolve_t, None);
    row("materialize_merge", mat, Some(("prune (deduped spec)", m(&mut b_prune))));
    row("compile", comp, Some(("flat_lower", m(&mut b_lower))));
    row("eval, first (new state)", ev_cold, Some(("flat_soa, first", m(&mut b_flat_cold))));
    let flat_warm = m(&mut b_flat);
    row("eval, reused state", ev_warm, Some(("flat_soa", flat_warm)));
    row("", ev_warm, Some(("boxed_dyn_fn", m(&mut b_boxed))));
    row("total (build..first eval)", total, None);
    let extra = |name: &str, s: f64| println!("{:<48} {name:<22} {:>10.2} {:>9.1}", "", s * 1e3, per(s));
    extra("dedup (to a new spec)", m(&mut b_dedup));
    extra("boxed: make closures", m(&mut b_box_new));

    let (ops, slots, instrs) = stats;
    println!();
    println!(
        "{ops} operations after CSE and pruning ({:.1}% of the spec; hash-consing finds {} distinct values), \
         {instrs} instructions, {slots} slots",
        100.0 * ops as f64 / n as f64,
        distinct
    );
    println!(
        "results equal the reference (bitwise, NaN-tolerant): ours {ok_ours}, flat_soa {ok_flat}, boxed_dyn_fn {ok_boxed}"
    );

    println!();
    let mb = |b: u64| b as f64 / (1 << 20) as f64;
    let bpn = |b: u64| b as f64 / n as f64;
    match (rss_before, peak) {
        (Some(before), Some(peak)) => {
            println!(
                "peak memory (VmHWM after the first pipeline run{}): {:.1} MiB = {:.1} bytes/node",
                if peak_reset { ", reset after generating the spec" } else { "; could not reset, includes generation" },
                mb(peak),
                bpn(peak)
            );
            println!(
                "  of which the spec and inputs (VmRSS before the pipeline): {:.1} MiB = {:.1} bytes/node; \
                 pipeline above that: {:.1} MiB = {:.1} bytes/node",
                mb(before),
                bpn(before),
                mb(peak.saturating_sub(before)),
                bpn(peak.saturating_sub(before))
            );
        }
        _ => println!("peak memory: /proc/self/status unavailable"),
    }
    let parts: [(&str, usize); 5] = [
        ("KeyInterner", heap.interner),
        ("Graph (built)", heap.graph),
        ("MaterializedGraph", heap.materialized),
        ("CompiledProgram", heap.program),
        ("EvalState slots (est.)", heap.eval_slots),
    ];
    println!("heap after the first run, by phase (heap_bytes()):");
    let mut sum = 0;
    for (name, b) in parts {
        sum += b;
        println!("  {name:<24} {:>10.1} MiB {:>8.1} bytes/node", mb(b as u64), bpn(b as u64));
    }
    println!("  {:<24} {:>10.1} MiB {:>8.1} bytes/node", "sum", mb(sum as u64), bpn(sum as u64));
    if let (Some(before), Some(peak)) = (rss_before, peak) {
        let rest = peak.saturating_sub(before) as i64 - sum as i64;
        println!(
            "  {:<24} {:>10.1} MiB {:>8.1} bytes/node  (lazy Graph key index, pass scratch, allocator slack; negative = reserved but untouched capacity)",
            "not in heap_bytes()",
            rest as f64 / (1 << 20) as f64,
            rest as f64 / n as f64
        );
    }
    println!();
    println!("total pipeline time {:.3} s", total);
    if !(ok_ours && ok_flat && ok_boxed) {
        std::process::exit(1);
    }
}
