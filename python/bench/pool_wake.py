"""The pool's entry and wake-up cost through Python: `ij,jk->ik` of n × n matrices through
`cgx.contract_expression`, on one thread and two (`threads=`), calls back to back or each after a
2 ms pause (the pool's workers asleep, as between `peers.py`'s interleaved calls). Prints the
median of 50 calls (after 10 warm-up calls) per cell, in ms.

usage: PYTHONPATH=<folder> chrt -f 50 python3 python/bench/pool_wake.py"""
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
    res = {}
    for gap in (0.0, 0.002):
        for t in (1, 2):
            xs = []
            for _ in range(60):
                if gap:
                    time.sleep(gap)
                s = time.perf_counter()
                expr(a, b, threads=t)
                xs.append((time.perf_counter() - s) * 1e3)
            res[(gap, t)] = statistics.median(xs[10:])
    print(f"n={n}: back to back 1t {res[(0.0, 1)]:.3f} 2t {res[(0.0, 2)]:.3f} | "
          f"2 ms pauses 1t {res[(0.002, 1)]:.3f} 2t {res[(0.002, 2)]:.3f} ms")
