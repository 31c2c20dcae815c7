//! Where the specification-form build of the spec-user set spends its time, phase by
//! phase, at 10^6 nodes of the window DAG (best of 7 rounds, ns per node):
//! `cargo run --release -p benches --example build_split [nodes] [rounds] [only]` (10^6
//! and 7 by default; fewer for callgrind, whose instruction counts do not depend on the
//! load; `only`, one of the names below, runs that phase alone, for `perf stat`).
//!
//! - `hashcons`: the hashbrown + Fx hash-consing baseline of `benches/pipeline.rs`;
//! - `append`: `add_operation` with a `Vec` of operands per node (the docs' form before
//!   `add_operation` took arrays), its outputs extending the caller's `Vec` of values, without interning;
//! - `append_borrowed`: the same through `add_operation_from` (borrowed operands, a range
//!   of outputs: no allocation per node);
//! - `intern`: `build()` after `append`, which interns every pending operation;
//! - `whole`: `append` and `intern` together (`benches::spec_user::build` passes arrays
//!   instead);
//! - `whole_borrowed`: `append_borrowed` and `intern` together.

use std::sync::Arc;
use std::time::Instant;

use ::spec_user::{Dag, Key, Op};
use benches::{Shape, Workload, hashcons, spec_user};
use computegraph::{GraphBuilder, GraphOperation, KeyInterner, LocalValueId, OperationRole, ValueRef};

/// Appends `dag` to a fresh builder, the specification's way or the borrowed way.
fn append(dag: &Dag, borrowed: bool) -> GraphBuilder<Op> {
    let mut b = GraphBuilder::<Op>::with_interner(KeyInterner::new());
    let mut values: Vec<LocalValueId> = Vec::with_capacity(dag.value_count());
    for i in 0..dag.inputs {
        values.push(b.add_input(Key::User(i)));
    }
    for &(op, [a, c]) in &dag.nodes {
        let operands = [ValueRef::Local(values[a as usize]), ValueRef::Local(values[c as usize])];
        let operands = &operands[..op.input_count()];
        if borrowed {
            let outputs = b.add_operation_from(op, operands, &OperationRole::Primary);
            values.extend(outputs.map(LocalValueId::new));
        } else {
            // A `Vec` per node on purpose: the cost of an allocated operand list (the
            // form the docs showed before `add_operation` took arrays).
            #[allow(clippy::unnecessary_to_owned)]
            values.extend(b.add_operation(op, operands.to_vec(), OperationRole::Primary));
        }
    }
    b
}

fn main() {
    let arg = |i: usize, default: usize| std::env::args().nth(i).map_or(default, |s| s.parse().expect("a count"));
    let (n, rounds) = (arg(1, 1_000_000), arg(2, 7));
    const NAMES: [&str; 6] = ["hashcons", "append", "intern", "append_borrowed", "whole", "whole_borrowed"];
    let only = std::env::args().nth(3);
    if let Some(name) = &only {
        assert!(NAMES.contains(&name.as_str()), "`only` is one of {NAMES:?}");
    }
    let run = |slot: usize| only.as_deref().is_none_or(|name| name == NAMES[slot] || (slot == 1 && name == "intern"));
    let w = Workload::new(Shape::Window, n);
    let dag = spec_user::to_dag(&w.spec);
    let mut best = [f64::MAX; 6];
    let mut time = |slot: usize, f: &mut dyn FnMut()| {
        let t = Instant::now();
        f();
        best[slot] = best[slot].min(t.elapsed().as_secs_f64());
    };
    for _ in 0..rounds {
        let mut kept = Vec::new();
        if run(0) {
            time(0, &mut || drop(std::hint::black_box(hashcons(&w.spec))));
        }
        if run(1) {
            let mut builder = None;
            time(1, &mut || builder = Some(append(&dag, false)));
            time(2, &mut || kept.push(builder.take().expect("appended").build()));
        }
        if run(3) {
            time(3, &mut || drop(std::hint::black_box(append(&dag, true))));
        }
        if run(4) {
            time(4, &mut || kept.push(Arc::into_inner(spec_user::build(&dag).0).expect("one holder")));
        }
        if run(5) {
            time(5, &mut || kept.push(append(&dag, true).build()));
        }
        drop(kept);
    }
    let ns = |s: f64| s * 1e9 / n as f64;
    let line: Vec<String> =
        NAMES.iter().zip(best).filter(|&(_, b)| b < f64::MAX).map(|(name, b)| format!("{name} {:.1}", ns(b))).collect();
    println!("ns/node: {}", line.join("  "));
}
