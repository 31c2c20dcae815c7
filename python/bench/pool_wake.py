"""The pool's entry and wake-up cost through Python: `ij,jk->ik` of n × n matrices through
`cgx.contract_expression`, on one thread and two (`threads=`), calls back to back, each after
a 2 ms pause (the pool's workers asleep, as between `peers.py`'s interleaved calls), or each
after numpy's own product of the same matrices (`a @ b`, numpy's BLAS on its threads, as
`peers.py` interleaves the libraries). Prints the median of 50 calls (after 10 warm-up calls)
per cell, in ms.

Numpy's OpenBLAS threads busy-wait after a call for 2^28 cycles unless
`OPENBLAS_THREAD_TIMEOUT` says less (as `peers.py` sets it: 4); under `chrt -f 50` every thread
of the process has the same real-time priority, so a spinning BLAS thread keeps its core from
cgx's second thread. Run it both ways to see what that costs.

usage: [OPENBLAS_THREAD_TIMEOUT=4] PYTHONPATH=<folder> chrt -f 50 python3 python/bench/pool_wake.py"""
import statistics
import sys
import time

import numpy as np

import cgx

print(cgx.__file__, file=sys.stderr)
rng = np.random.default_rng(0)
for n in (128, 192, 256, 384):
    a, b = rng.random((n, n)), rng.random((n, n))
    expr = cgx.contract_expression("ij,jk->ik", (n, n), (n, n))
    before = {"back to back": lambda: None, "2 ms pauses": lambda: time.sleep(0.002), "after numpy": lambda: a @ b}
    cells = []
    for what, first in before.items():
        for t in (1, 2):
            xs = []
            for _ in range(60):
                first()
                s = time.perf_counter()
                expr(a, b, threads=t)
                xs.append((time.perf_counter() - s) * 1e3)
            cells.append(f"{what} {t}t {statistics.median(xs[10:]):.3f}")
    print(f"n={n}: " + " | ".join(cells) + " ms")
