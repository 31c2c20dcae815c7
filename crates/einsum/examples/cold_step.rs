//! One contraction step of an instance, hot and cold: the step's operands cycled over 64
//! seeded copies (so each call finds its operands out of the cache, as a program's inputs
//! are), beside the same call on one copy, a read of the larger operand alone, and that
//! read followed by the call. Shows how much of a GEMM step's time is its cold operand
//! and whether the read-ahead before it (`gemm_loop.rs`, `warm_parts`) recovers it.
//!
//! `cargo run --release -p einsum --example cold_step -- file.json TEXT` (the first step
//! of the forward program whose spec contains TEXT, e.g. `"[396, 465, 21]"`).

// Shared with the other per-step examples; this one uses part of it.
#[allow(dead_code)]
mod steps;

use std::time::Instant;

use einsum::{Tensor, TensorOp};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [file, only] = [&args[0], &args[1]];
    let (_, _, specs) = steps::forward_steps(file);
    let s = specs.into_iter().find(|s| format!("{s:?}").contains(only.as_str())).expect("a step matching TEXT");
    println!("{s:?}: a {:?}, b {:?}", s.a_shape(), s.b_shape());
    let copies = 64;
    let a: Vec<Tensor<f64>> = (0..copies).map(|_| steps::seeded(s.a_shape())).collect();
    let b: Vec<Tensor<f64>> = (0..copies).map(|_| steps::seeded(s.b_shape())).collect();
    let larger = if s.a_shape().iter().product::<usize>() >= s.b_shape().iter().product::<usize>() { &a } else { &b };
    let op = TensorOp::contract(s.clone());
    let us = |t: Instant| t.elapsed().as_secs_f64() * 1e6;
    // One element per cache line, summed so that the reads are not optimized away.
    let read = |x: &Tensor<f64>| std::hint::black_box(x.data().iter().step_by(8).sum::<f64>());
    for round in 0..3 {
        let mut rows: [Vec<f64>; 4] = Default::default();
        for i in 0..copies {
            let t = Instant::now();
            drop(op.apply(&[&a[0], &b[0]]));
            rows[0].push(us(t));
            let t = Instant::now();
            drop(op.apply(&[&a[i], &b[i]]));
            rows[1].push(us(t));
            let j = (i + copies / 2) % copies;
            let t = Instant::now();
            read(&larger[j]);
            rows[2].push(us(t));
            let j = (i + 7) % copies;
            let t = Instant::now();
            read(&larger[j]);
            drop(op.apply(&[&a[j], &b[j]]));
            rows[3].push(us(t));
        }
        let [hot, cold, alone, then] = rows.map(|mut v| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        });
        println!(
            "round {round}: hot {hot:.1} µs, cold {cold:.1}, cold read of the larger operand {alone:.1}, that read then the call {then:.1}"
        );
    }
}
