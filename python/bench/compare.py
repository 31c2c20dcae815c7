#!/usr/bin/env python3
"""cgx.contract beside opt_einsum.contract in one process: same instances, same path, one thread.

For each Einsum Benchmark instance in crates/einsum/tests/data/ (or the files given), both
contract the same operands along the instance's own path (``opt_flops`` by default) with
numpy's BLAS pinned to one thread; each column is the best of five calls after a warm-up,
in milliseconds, and the results are compared (the script fails above a relative
difference of 1e-8). Then the per-call overhead on a 2x2 matrix product, in microseconds
(timeit, best of five).

    pip install ./python opt_einsum
    python3 python/bench/compare.py [--path opt_flops|opt_size] [FILE.json ...]
"""

import argparse
import importlib.util
import json
import os
import pathlib
import sys
import timeit

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ[var] = "1"

import numpy as np  # noqa: E402
import opt_einsum  # noqa: E402

import cgx  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]

# The operands and the timing are those of the command-line comparison, so both scripts
# measure the same thing.
_spec = importlib.util.spec_from_file_location("compare_einsum", ROOT / "benches" / "scripts" / "compare_einsum.py")
compare_einsum = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare_einsum)
operands, best_ms = compare_einsum.operands, compare_einsum.best_of_five


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", default="opt_flops", choices=["opt_flops", "opt_size"])
    parser.add_argument("files", nargs="*", type=pathlib.Path)
    args = parser.parse_args()
    files = args.files or compare_einsum.bundled()
    print(f"numpy {np.__version__}, opt_einsum {opt_einsum.__version__}, cgx {cgx.__version__}; one thread, ms, best of 5")
    print(f"{'instance':<45}{'opt_einsum':>12}{'cgx':>10}{'ratio':>8}  max |diff| / max |x|")
    rng = np.random.default_rng(0)
    for f in files:
        inst = json.loads(f.read_text())
        eq, shapes = inst["format_string"], [tuple(s) for s in inst["shapes"]]
        path = [tuple(p) for p in inst["paths"][args.path]["path"]]
        ops = operands(eq, shapes, rng)
        want = opt_einsum.contract(eq, *ops, optimize=path)
        got = cgx.contract(eq, *ops, optimize=path)
        err = float(np.max(np.abs(got - want), initial=0.0) / max(np.max(np.abs(want), initial=0.0), 1e-300))
        if err > 1e-8:
            sys.exit(f"{f.name}: cgx and opt_einsum disagree (max relative difference {err:.1e})")
        theirs = best_ms(lambda: opt_einsum.contract(eq, *ops, optimize=path))
        ours = best_ms(lambda: cgx.contract(eq, *ops, optimize=path))
        print(f"{inst.get('name', f.stem):<45}{theirs:>12.3f}{ours:>10.3f}{theirs / ours:>8.2f}  {err:.1e}")
    a, b = np.random.default_rng(1).random((2, 2)), np.random.default_rng(2).random((2, 2))
    for name, call in [
        ("cgx.contract", lambda: cgx.contract("ij,jk->ik", a, b)),
        ("opt_einsum.contract", lambda: opt_einsum.contract("ij,jk->ik", a, b)),
        ("numpy.einsum", lambda: np.einsum("ij,jk->ik", a, b)),
    ]:
        n = 20000
        per = min(timeit.repeat(call, number=n, repeat=5)) / n * 1e6
        print(f"2x2 @ 2x2, {name:<20} {per:8.2f} µs per call")


if __name__ == "__main__":
    main()
