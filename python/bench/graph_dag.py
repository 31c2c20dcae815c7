"""The scalar graph engine from Python on the large-DAG benchmark: build, compile, eval and
gradient of the DAG `cgx bench dag --shape SHAPE --nodes N` builds in Rust (the same
operations and operands, from the `workloads` crate), timed per phase in ns per node.

    python python/bench/graph_dag.py [--nodes 1000000] [--shape window] [--batch 0]

`--batch 0` adds every operation in one `Graph.add` call; `--batch K` in calls of K.
Compare with `cgx bench dag --shape window --nodes 1e6 --threads 1` (build, resolve,
materialize, compile, sequential eval) and `cargo run --release -p examples --example
gradient -- 1000000` (the gradient pipeline in Rust).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import cgx
from cgx.graph import Graph


def timed(f):
    t = time.perf_counter()
    out = f()
    return out, time.perf_counter() - t


def best_of(k, f):
    f()  # warm-up
    return min(timed(f)[1] for _ in range(k))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=float, default=1e6)
    ap.add_argument("--shape", default="window", choices=["window", "uniform"])
    ap.add_argument("--batch", type=int, default=0, help="operations per Graph.add call (0: all in one)")
    args = ap.parse_args()
    n = int(args.nodes)

    (inputs, ops, lhs, rhs, outputs, values), t_gen = timed(lambda: cgx._core.graph_workload(args.shape, n))

    def build():
        g = Graph()
        g.inputs(inputs)
        step = args.batch or n
        for lo in range(0, n, step):
            g.add(ops[lo : lo + step], lhs[lo : lo + step], rhs[lo : lo + step])
        return g

    g, t_build = timed(build)
    prog, t_compile = timed(lambda: g.compile(outputs))
    t_eval = best_of(3, lambda: prog.eval(values))
    out = outputs[0]
    grad, t_grad_compile = timed(lambda: g.gradient(out))
    t_grad = best_of(3, lambda: grad.eval(values))
    value, gradient = grad.eval(values)
    # The workload measures the engine, not numerics: its values overflow to inf and nan.
    assert np.array_equal([value], prog.eval(values)[:1], equal_nan=True), "the gradient program's value"
    assert gradient.shape == (inputs,)

    per = lambda t: t * 1e9 / n  # noqa: E731
    rows = [
        ("generate (Rust, not timed below)", t_gen),
        (f"build: Graph.inputs + Graph.add ({'one call' if not args.batch else f'batches of {args.batch}'})", t_build),
        ("compile (close fragment, resolve, materialize_merge, compile)", t_compile),
        ("eval (sequential, best of 3)", t_eval),
        ("gradient: build and compile (tidu::grad, value + gradient program)", t_grad_compile),
        ("gradient eval (value and gradient, best of 3)", t_grad),
    ]
    print(f"{args.shape} DAG, {n} operations, {len(outputs)} outputs, {prog.instruction_count} instructions after CSE")
    print(f"{'phase':<72} {'ms':>9} {'ns/node':>9}")
    for name, t in rows:
        print(f"{name:<72} {t * 1e3:>9.1f} {per(t):>9.1f}")


if __name__ == "__main__":
    main()
