#!/usr/bin/env python3
"""The contractions of issue 37, item 3, which sums first make short: ``ij,kl->`` at
n = 300 and three disconnected operands of 20 labels of size 2 reduced to one label of the
first, timed (the first call, planning and compiling included, then the median, minimum and
maximum of 7 calls, in seconds); and ``a,bcd,efg->``'s path and flops with ``dp`` beside
opt_einsum's ``dp``, along the path each runs.

    pip install ./python opt_einsum
    python3 python/bench/sums_first.py
"""

import statistics, time
import numpy as np
import cgx
import opt_einsum as oe

def timed(f, runs=7):
    first = time.perf_counter(); f(); first = time.perf_counter() - first
    ts = []
    for _ in range(runs):
        t = time.perf_counter(); f(); ts.append(time.perf_counter() - t)
    return first, statistics.median(ts), min(ts), max(ts)

rng = np.random.default_rng(0)
a, b = rng.standard_normal((300, 300)), rng.standard_normal((300, 300))
print("ij,kl-> n=300 cgx first/median/min/max s:", timed(lambda: cgx.contract("ij,kl->", a, b)))
print("ij,kl-> n=300 numpy (optimize=False) median s:", timed(lambda: np.einsum("ij,kl->", a, b), runs=1))
labs = [cgx.get_symbol(k) for k in range(60)]
eq = "".join(labs[:20]) + "," + "".join(labs[20:40]) + "," + "".join(labs[40:60]) + "->" + labs[0]
ops = [rng.standard_normal((2,) * 20) for _ in range(3)]
print("labs[:20],labs[20:40],labs[40:60]->labs[0] cgx first/median/min/max s:", timed(lambda: cgx.contract(eq, *ops)))
for sizes in [(2,) * 7, (3, 2, 5, 4, 2, 3, 7)]:
    shapes = [sizes[:1], sizes[1:4], sizes[4:]]
    ours = cgx.contract_path("a,bcd,efg->", *shapes, shapes=True, optimize="dp")
    theirs = oe.contract_path("a,bcd,efg->", *shapes, shapes=True, optimize="dp")
    print("a,bcd,efg-> sizes", sizes, "cgx dp:", ours[1].path, ours[1].opt_cost, max(ours[1].scale_list), " opt_einsum dp:", theirs[0], theirs[1].opt_cost, max(theirs[1].scale_list))
