//! Planning time of the greedy finder and of `auto` on networks that used to be slow:
//! 1000 operands sharing one output label (`a,a,...->a`), a 400-operand star
//! (`za,zb,...->`) and, for `auto`, a 300-operand matrix chain. Prints seconds and the
//! path's multiply-adds.
//!
//! `cargo run --release -p einsum --example plan_scaling`

use std::time::Instant;

use einsum::ContractionPath;
use einsum::search::{auto, path_cost};

/// (name, inputs, output, sizes, whether `auto` rather than greedy).
type Case<'a> = (&'a str, &'a [Vec<u32>], Vec<u32>, Vec<usize>, bool);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let shared: Vec<Vec<u32>> = vec![vec![0]; 1000];
    let star: Vec<Vec<u32>> = (1..=400).map(|i| vec![0, i]).collect();
    let chain: Vec<Vec<u32>> = (0..300).map(|i| vec![i, i + 1]).collect();
    let chain_sizes: Vec<usize> = (0..301).map(|i| 2 + (i * 7) % 5).collect();
    let cases: [Case; 3] = [
        ("greedy, 1000 x `a` -> a", &shared, vec![0], vec![3], false),
        ("greedy, 400-operand star -> ()", &star, vec![], vec![3; 401], false),
        ("auto, 300-operand chain", &chain, vec![0, 300], chain_sizes, true),
    ];
    for (name, inputs, output, sizes, use_auto) in cases {
        let t = Instant::now();
        let p = if use_auto {
            auto(inputs, &output, &sizes)
        } else {
            ContractionPath::greedy(inputs, &output, |c| sizes[c as usize])
        };
        let secs = t.elapsed().as_secs_f64();
        let cost = path_cost(inputs, &output, &sizes, &p)?;
        println!("{name}: {secs:.4} s, {cost:.4e} multiply-adds");
    }
    Ok(())
}
