//! Graph building against the `fx_hashcons` floor, interleaved, for a shared machine.
//!
//! ```text
//! cargo run --release -p benches --bin build_report -- [--shape S] [--nodes N] [--rounds R] [--only ours|fx|none] [--set scalar|spec_user|spec_user_reserved]
//! ```
//!
//! `--set spec_user` builds the same DAG in the `spec-user` operation set, written as the
//! docs' first example shows (`add_operation` with an array per node, no `reserve`; see
//! [`benches::spec_user`]), instead of the project's own `scalar` set through
//! `build_single`; the baseline is the same `fx_hashcons`. `--set spec_user_reserved` is
//! that loop on a builder whose room is reserved first ([`benches::spec_user::build_reserved`]),
//! to tell what growing costs the docs' form from what its loop costs.
//!
//! Each round builds the workload of shape `S` (default `window`) and `N` nodes (default
//! 10^6) once with [`benches::build`] (a fresh interner, as the criterion group `build`
//! does) and hash-conses it once with [`benches::hashcons`], one after the other, so load
//! from other processes falls on both alike; the report gives each one's median and
//! minimum over `R` rounds (default 15), in ns per node, and their ratios. Outputs are
//! dropped outside the timed region.
//!
//! `--only` runs `R` rounds of one side and prints nothing, for counting what the process
//! does with a tool: CPU time without the time the scheduler gave to other processes,
//! page faults (`none` only generates the workload, to subtract):
//!
//! ```text
//! perf stat -e task-clock,page-faults target/release/build_report --only ours --rounds 8
//! ```

#![forbid(unsafe_code)]

use std::time::Instant;

use benches::{Shape, Workload, build, hashcons, spec_user};

fn usage(msg: &str) -> ! {
    eprintln!(
        "error: {msg}\nusage: build_report [--shape S] [--nodes N] [--rounds R] [--only ours|fx|none] \
         [--set scalar|spec_user|spec_user_reserved] (N accepts `_` and `1e6`)"
    );
    std::process::exit(2)
}

fn parse_count(s: &str) -> usize {
    benches::parse_count(s).unwrap_or_else(|e| usage(&e))
}

fn main() {
    let (mut shape, mut nodes, mut rounds, mut only) = (Shape::Window, 1_000_000, 15, None);
    let (mut spec_user_set, mut reserved) = (false, false);
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let v = it.next().unwrap_or_else(|| usage(&format!("`{a}` needs a value")));
        match a.as_str() {
            "--shape" => shape = Shape::parse(&v).unwrap_or_else(|| usage(&format!("unknown shape `{v}`"))),
            "--nodes" => nodes = parse_count(&v),
            "--rounds" => rounds = parse_count(&v).max(1),
            "--only" if ["ours", "fx", "none"].contains(&v.as_str()) => only = Some(v),
            "--set" if ["scalar", "spec_user", "spec_user_reserved"].contains(&v.as_str()) => {
                spec_user_set = v != "scalar";
                reserved = v == "spec_user_reserved";
            }
            _ => usage(&format!("unexpected `{a} {v}`")),
        }
    }
    let w = Workload::new(shape, nodes);
    // The spec-user DAG is made outside the timed region (and by `--only none` too).
    let dag = spec_user_set.then(|| spec_user::to_dag(&w.spec));
    let ours = || -> Box<dyn std::any::Any> {
        match &dag {
            Some(dag) if reserved => Box::new(spec_user::build_reserved(dag)),
            Some(dag) => Box::new(spec_user::build(dag)),
            None => Box::new(build(&w.spec)),
        }
    };
    let per_node = |t: Instant| t.elapsed().as_secs_f64() * 1e9 / w.nodes() as f64;
    if let Some(only) = only {
        for _ in 0..rounds {
            match only.as_str() {
                "ours" => drop(std::hint::black_box(ours())),
                "fx" => drop(std::hint::black_box(hashcons(&w.spec))),
                _ => {}
            }
        }
        return;
    }
    let (mut ours_t, mut fx) = (Vec::with_capacity(rounds), Vec::with_capacity(rounds));
    for _ in 0..rounds {
        let t = Instant::now();
        let built = ours();
        ours_t.push(per_node(t));
        drop(built);
        let t = Instant::now();
        let consed = hashcons(&w.spec);
        fx.push(per_node(t));
        drop(std::hint::black_box(consed));
    }
    let stats = |t: &mut Vec<f64>| {
        t.sort_by(f64::total_cmp);
        (t[t.len() / 2], t[0])
    };
    let ((om, omin), (fm, fmin)) = (stats(&mut ours_t), stats(&mut fx));
    println!(
        "build {} {} nodes, {} set, {rounds} rounds, ns/node: ours median {om:.1} min {omin:.1}; fx_hashcons median {fm:.1} \
         min {fmin:.1}; ours ÷ fx_hashcons: median {:.2}, min {:.2}",
        shape.name(),
        w.nodes(),
        match (spec_user_set, reserved) {
            (false, _) => "scalar",
            (true, false) => "spec_user",
            (true, true) => "spec_user_reserved",
        },
        om / fm,
        omin / fmin
    );
}
