//! Criterion benches of eager mode (issue 4): a ten-operation scalar function
//! (`benches::eager::ten_ops`) run on a `scalar::eager::Tape`, per recorded operation.
//!
//! - `forward_untracked`: the frontend alone (no input requires a gradient, nothing
//!   recorded): the baseline that isolates recording.
//! - `forward_recorded`: the same with `x` and `w` requiring gradients (ten records).
//! - `backward`: `try_backward` over the ten recorded nodes (tape built in setup).
//! - `graph_gradient_eval`: the same gradient compiled once in graph mode, evaluated.
//!
//! Throughput is ten elements per iteration, so criterion's per-element time is per
//! recorded operation. In test mode (`-- --test`) each runs once.

use std::hint::black_box;
use std::time::Duration;

use benches::eager::{GraphGradient, backward, forward, ten_ops};
use criterion::{BatchSize, Criterion, Throughput};
use scalar::eager::{ScalarExecutor, Tape};

fn eager(c: &mut Criterion) {
    let spec = ten_ops();
    let mut g = c.benchmark_group("eager");
    g.sample_size(30).measurement_time(Duration::from_secs(3));
    g.throughput(Throughput::Elements(spec.ops.len() as u64));

    let mut tape = Tape::new();
    g.bench_function("forward_untracked", |b| b.iter(|| black_box(forward(&mut tape, &spec, false))));
    g.bench_function("forward_recorded", |b| b.iter(|| black_box(forward(&mut tape, &spec, true))));
    let mut exec = ScalarExecutor::new();
    g.bench_function("backward", |b| {
        b.iter_batched(
            || forward(&mut tape, &spec, true),
            |(_leaves, y)| black_box(backward(&y, &mut exec)),
            BatchSize::SmallInput,
        )
    });
    let graph = GraphGradient::new(&spec);
    g.bench_function("graph_gradient_eval", |b| b.iter(|| black_box(graph.eval())));
    g.finish();
}

criterion::criterion_group!(benches, eager);
criterion::criterion_main!(benches);
