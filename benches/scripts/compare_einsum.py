#!/usr/bin/env python3
"""numpy + opt_einsum against `cgx einsum`, same instances, same paths, one thread.

Runs each Einsum Benchmark instance (the JSON format of ../shared/data/einsum/) with
opt_einsum.contract along the instance's own `opt_flops` path (or `opt_size`), on
numpy with every BLAS pinned to one thread, and with `cgx einsum FILE --json` (one
thread, same path), and prints both columns side by side. Timing is the same for both:
one warm-up run, then the best of five.

    pip install numpy opt_einsum
    cargo build --release -p cgx
    python3 benches/scripts/compare_einsum.py [--path opt_flops|opt_size] [FILE.json ...]

Operands: seeded, scaled so the result stays of order one (as `einsum::Instance` does),
though the two sides do not draw the same numbers: this compares time, not values.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

# One thread everywhere, set before numpy loads its BLAS.
for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS", "VECLIB_MAXIMUM_THREADS"):
    os.environ[var] = "1"

import numpy as np  # noqa: E402
import opt_einsum  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
DEFAULT = [
    "bin_matmul_256",
    "bin_batched_matmul_b32_m64_n64_k64",
    "str_matrix_chain_multiplication_100",
    "str_mps_varying_inner_product_200",
    "lm_batch_likelihood_brackets_4_4d",
    "str_nw_mera_open_26",
]


def operands(expr, shapes, rng):
    """Random operands, each entry scaled by prod over its summed labels of size^(-1/k)."""
    inputs, _, output = expr.partition("->")
    terms = inputs.split(",")
    holders = {}
    for term in terms:
        for label in set(term):
            holders[label] = holders.get(label, 0) + 1
    ops = []
    for term, shape in zip(terms, shapes):
        size = dict(zip(term, shape))
        scale = 1.0
        for label in set(term):
            if label not in output:
                scale *= size[label] ** (-1.0 / holders[label])
        ops.append((0.5 + rng.random(shape)) * scale)
    return ops


def best_of_five(f):
    f()  # warm-up
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--path", choices=["opt_flops", "opt_size"], default="opt_flops")
    ap.add_argument("--cgx", default=str(ROOT / "target" / "release" / "cgx"))
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    files = args.files or [str(ROOT / "crates" / "einsum" / "tests" / "data" / f"{n}.json") for n in DEFAULT]
    if not pathlib.Path(args.cgx).exists():
        sys.exit(f"{args.cgx} not found: run `cargo build --release -p cgx` first")
    print(f"numpy {np.__version__}, opt_einsum {opt_einsum.__version__}, one thread, path {args.path}")
    print(f"{'instance':<38} {'steps':>5} {'numpy+oe ms':>12} {'cgx ms':>10} {'ratio':>7}")
    rng = np.random.default_rng(42)
    for f in files:
        inst = json.loads(pathlib.Path(f).read_text())
        expr, shapes = inst["format_string"], [tuple(s) for s in inst["shapes"]]
        path = [tuple(step) for step in inst["paths"][args.path]["path"]]
        ops = operands(expr, shapes, rng)
        theirs = best_of_five(lambda: opt_einsum.contract(expr, *ops, optimize=path))
        flag = "opt-flops" if args.path == "opt_flops" else "opt-size"
        out = subprocess.run([args.cgx, "einsum", f, "--path", flag, "--json"], capture_output=True, text=True, check=True)
        ours = json.loads(out.stdout)["eval_ms"]
        name = inst.get("name") or pathlib.Path(f).stem
        print(f"{name:<38} {len(path):>5} {theirs:>12.3f} {ours:>10.3f} {theirs / ours:>6.2f}x")


if __name__ == "__main__":
    main()
