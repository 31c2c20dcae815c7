"""A square matrix product through cgx and numpy, in one process: `cgx.contract`, a
precompiled `contract_expression`, numpy's `a @ b`, and three `ndarray.copy()` of the
operand size (what a copy in per operand and a copy out would cost). Best of 50 runs at
256, of 10 at 1024, after a warm-up, in ms.

    python python/bench/matmul.py [LABEL]
    OPENBLAS_NUM_THREADS=1 python python/bench/matmul.py [LABEL]   # numpy on one thread
"""

import os
import sys
import time

import numpy as np

import cgx


def best(f, k):
    f()
    ts = []
    for _ in range(k):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return min(ts) * 1e3


def main():
    tag = sys.argv[1] if len(sys.argv) > 1 else "cgx"
    rng = np.random.default_rng(0)
    threads = os.environ.get("OPENBLAS_NUM_THREADS", "all")
    for n in (256, 1024):
        a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
        expr = cgx.contract_expression("ij,jk->ik", (n, n), (n, n))
        k = 50 if n == 256 else 10
        print(
            f"{tag:>7} n={n:5d} numpy threads={threads}: "
            f"cgx.contract {best(lambda: cgx.contract('ij,jk->ik', a, b), k):8.3f} ms  "
            f"expr {best(lambda: expr(a, b), k):8.3f}  "
            f"numpy a@b {best(lambda: a @ b, k):8.3f}  "
            f"3 copies {best(lambda: (a.copy(), b.copy(), a.copy()), k):7.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
