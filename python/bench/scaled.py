"""The cost of the scaled contraction (``strip_exponent=True``) beside the plain one, on the
shared Einsum Benchmark instances: one Python process, one thread, the instance's
``opt_flops`` path, calls interleaved (plain, scaled, plain, scaled, ...) so that load
from other processes falls on both alike; medians of ``--repeat`` pairs with the spread
(min..max) of the ratio. Forward, and value + gradient of every operand.

Operands: uniform in [0.5, 1.5) times, per operand, the product over its summed labels of
size^(-1/holders), so the results stay near 1 and the plain contraction is finite (the
comparison is of time, on the same data).

    python python/bench/scaled.py [--repeat 7] [--max-log10-flops 9] [DIR]
"""

import argparse
import json
import pathlib
import statistics
import time

import numpy as np

import cgx


def operands(inst, rng):
    eq = inst["format_string"]
    lhs, out = eq.split("->")
    terms = lhs.split(",")
    holders = {}
    for t in terms:
        for c in set(t):
            holders[c] = holders.get(c, 0) + 1
    ops = []
    for t, shape in zip(terms, inst["shapes"]):
        # Each distinct summed label once.
        seen, scale = set(), 1.0
        for c, d in zip(t, shape):
            if c not in out and c not in seen:
                seen.add(c)
                scale *= max(d, 1) ** (-1.0 / holders[c])
        ops.append((0.5 + rng.random(shape)) * scale)
    return eq, ops


def timed(f):
    t = time.perf_counter()
    f()
    return (time.perf_counter() - t) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir", nargs="?", default=str(pathlib.Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "einsum"))
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--max-log10-flops", type=float, default=9.0, help="skip larger instances")
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print("| instance | plain forward ms | scaled forward ms | ratio (min..max) | plain value+grad ms | scaled value+grad ms | ratio (min..max) |")
    print("|---|---|---|---|---|---|---|")
    for f in sorted(pathlib.Path(args.dir).glob("*.json")):
        inst = json.loads(f.read_text())
        if inst["paths"]["opt_flops"]["log10_flops"] > args.max_log10_flops:
            continue
        eq, ops = operands(inst, rng)
        path = [tuple(p) for p in inst["paths"]["opt_flops"]["path"]]
        expr = cgx.contract_expression(eq, *[o.shape for o in ops], optimize=path)
        scalar = expr.output_shape == []
        cot = None if scalar else np.ones(expr.output_shape)
        rows = []
        for kind in ("forward", "grad"):
            if kind == "forward":
                plain = lambda: expr(*ops, strip_exponent=False)  # noqa: E731
                scaled = lambda: expr(*ops, strip_exponent=True)  # noqa: E731
            else:
                plain = lambda: expr.value_and_grad(*ops, cotangent=cot, strip_exponent=False)  # noqa: E731
                scaled = lambda: expr.value_and_grad(*ops, cotangent=cot, strip_exponent=True)  # noqa: E731
            plain(), scaled()  # warm-up: compile, first touch
            p, s = [], []
            for _ in range(args.repeat):
                p.append(timed(plain))
                s.append(timed(scaled))
            ratios = [b / a for a, b in zip(p, s)]
            rows.append(
                f"{statistics.median(p):.2f} | {statistics.median(s):.2f} | "
                f"{statistics.median(ratios):.2f} ({min(ratios):.2f}..{max(ratios):.2f})"
            )
        print(f"| `{inst['name']}` | {rows[0]} | {rows[1]} |")


if __name__ == "__main__":
    main()
