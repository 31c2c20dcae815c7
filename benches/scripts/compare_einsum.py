#!/usr/bin/env python3
"""numpy + opt_einsum against `cgx`, same networks, same paths, one thread.

Section C (docs/SPEC.md §8.3): runs each Einsum Benchmark instance (the JSON format of
crates/einsum/tests/data/) with opt_einsum.contract along the instance's own `opt_flops`
path (or `opt_size`), on numpy with every BLAS pinned to one thread, and with
`cgx einsum FILE --json` (one thread, same path), and prints both columns side by side.
Timing is the same for both: one warm-up run, then the best of five.

Section B (docs/SPEC.md §8.2): the MPS inner product <psi|psi> of `benches::einsum::mps` (n sites, physical
dimension 2, bond dimension chi, the zipper path), built here the same way (operand
order, shapes, path), in microseconds per contraction step: opt_einsum.contract called
on the operands (what a user writes; it parses the expression and path on every call),
a precompiled opt_einsum.contract_expression, and `cgx bench mps --json` (our
evaluation, our kernels alone, and the difference: the engine's overhead per step).
numpy: one warm-up, then the best of five calls; ours: the best of five rounds of about
200 000 steps each. The two sides alternate per network.

    pip install numpy opt_einsum
    cargo build --release -p cgx
    python3 benches/scripts/compare_einsum.py [--section B|C|both] [--path opt_flops|opt_size] [FILE.json ...]

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
# The bundled instances are the JSON files of this directory (einsum::BUNDLED_DIR).
DATA = ROOT / "crates" / "einsum" / "tests" / "data"


def bundled():
    """The bundled instances' files, sorted by name (as einsum::Instance::bundled_names)."""
    return sorted(DATA.glob("*.json"))



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


def mps(sites, chi):
    """The MPS inner product of `benches::einsum::mps`: (expression, operands, path)."""
    sym = opt_einsum.get_symbol
    phys = lambda i: sym(2 * sites + 2 + i)  # noqa: E731
    terms, ops = [], []
    for i in range(sites):
        for offset in (0, sites + 1):
            term, shape = "", []
            if i > 0:
                term += sym(offset + i)
                shape.append(chi)
            term += phys(i)
            shape.append(2)
            if i + 1 < sites:
                term += sym(offset + i + 1)
                shape.append(chi)
            # c * (1 + 0.01 * sum of the multi-index), c as in Rust (the result stays near 1).
            mean = sum((d - 1) / 2 for d in shape)
            c = 1.0 / ((1.0 + 0.01 * mean) * np.sqrt(np.prod(shape)))
            ops.append(c * (1.0 + 0.01 * sum(np.indices(shape))))
            terms.append(term)
    path = [(0, 1)] + [(0, 2 * sites - 2 - k) for k in range(2 * (sites - 1))]
    return ",".join(terms) + "->", ops, path


def section_b(args):
    print(f"\nSection B: MPS inner product, zipper path, µs per contraction step (numpy {np.__version__}, "
          f"opt_einsum {opt_einsum.__version__}, one thread)")
    print(f"{'sites':>5} {'chi':>3} {'steps':>5} {'oe.contract':>11} {'oe precompiled':>14} {'ours':>7} "
          f"{'our kernels':>11} {'overhead':>8} {'contract/ours':>13} {'precompiled/ours':>16}")
    for sites in (100, 1000):
        for chi in (1, 2, 4, 8):
            expr, ops, path = mps(sites, chi)
            steps = len(path)
            value = float(opt_einsum.contract(expr, *ops, optimize=path))
            contract = best_of_five(lambda: opt_einsum.contract(expr, *ops, optimize=path)) * 1e3 / steps
            compiled = opt_einsum.contract_expression(expr, *[o.shape for o in ops], optimize=path)
            precompiled = best_of_five(lambda: compiled(*ops)) * 1e3 / steps
            out = subprocess.run([args.cgx, "bench", "mps", "--sites", str(sites), "--chi", str(chi), "--json"],
                                 capture_output=True, text=True, check=True)
            r = json.loads(out.stdout)
            assert r["steps"] == steps, (r["steps"], steps)
            # The same network on both sides: the same value, to rounding.
            assert abs(r["value"] - value) <= 1e-9 * abs(value), (r["value"], value)
            ours = r["per_step_us"]
            print(f"{sites:>5} {chi:>3} {steps:>5} {contract:>11.2f} {precompiled:>14.2f} {ours:>7.3f} "
                  f"{r['kernel_per_step_us']:>11.3f} {r['overhead_per_step_us']:>8.3f} {contract / ours:>12.1f}x "
                  f"{precompiled / ours:>15.1f}x")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--section", choices=["B", "C", "both"], default="both")
    ap.add_argument("--path", choices=["opt_flops", "opt_size"], default="opt_flops")
    ap.add_argument("--cgx", default=str(ROOT / "target" / "release" / "cgx"))
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    files = args.files or [str(f) for f in bundled()]
    if not pathlib.Path(args.cgx).exists():
        sys.exit(f"{args.cgx} not found: run `cargo build --release -p cgx` first")
    if args.section in ("C", "both"):
        section_c(args, files)
    if args.section in ("B", "both"):
        section_b(args)


def section_c(args, files):
    print(f"Section C: numpy {np.__version__}, opt_einsum {opt_einsum.__version__}, one thread, path {args.path}")
    print(f"{'instance':<38} {'steps':>5} {'numpy+oe ms':>12} {'cgx ms':>10} {'ratio':>7}")
    rng = np.random.default_rng(42)
    for f in files:
        inst = json.loads(pathlib.Path(f).read_text())
        expr, shapes = inst["format_string"], [tuple(s) for s in inst["shapes"]]
        path = [tuple(step) for step in inst["paths"][args.path]["path"]]
        ops = operands(expr, shapes, rng)
        theirs = best_of_five(lambda: opt_einsum.contract(expr, *ops, optimize=path))
        flag = "opt-flops" if args.path == "opt_flops" else "opt-size"
        # `--repeat 5`: a warm-up, then the best of five, as `best_of_five` does for opt_einsum.
        cmd = [args.cgx, "einsum", f, "--path", flag, "--repeat", "5", "--json"]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        ours = json.loads(out.stdout)["eval_ms"]
        name = inst.get("name") or pathlib.Path(f).stem
        print(f"{name:<38} {len(path):>5} {theirs:>12.3f} {ours:>10.3f} {theirs / ours:>6.2f}x")


if __name__ == "__main__":
    main()
