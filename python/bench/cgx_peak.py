"""Peak resident memory of cgx alone on an instance, called as `peers.py` calls it: a
`contract_expression` along the instance's `opt_flops` path, then forward and `value_and_grad`
(cotangent of ones) three times, on THREADS threads (`cgx.set_num_threads`). Prints `VmHWM`
(peak) and `VmRSS` after each round.

usage: PYTHONPATH=<folder> python3 python/bench/cgx_peak.py THREADS FILE.json"""
import json
import sys
import time

import numpy as np

import cgx


def memory():
    with open("/proc/self/status") as f:
        return "  ".join(line.strip() for line in f if line.startswith(("VmHWM", "VmRSS")))


threads, path_file = int(sys.argv[1]), sys.argv[2]
print(cgx.__file__, file=sys.stderr)
with open(path_file) as f:
    inst = json.load(f)
eq, shapes = inst["format_string"], inst["shapes"]
path = [tuple(p) for p in inst["paths"]["opt_flops"]["path"]]
ops = [np.random.default_rng(0).random(s) for s in shapes]
print("start", memory())
cgx.set_num_threads(threads)
expr = cgx.contract_expression(eq, *shapes, optimize=path)
seed = np.ones(expr(*ops).shape)
for _ in range(3):
    t = time.perf_counter()
    out = expr(*ops)
    fwd = (time.perf_counter() - t) * 1e3
    t = time.perf_counter()
    value, grads = expr.value_and_grad(*ops, cotangent=seed)
    vg = (time.perf_counter() - t) * 1e3
    print(f"forward {fwd:.0f} ms, value+gradient {vg:.0f} ms;", memory())
    del out, value, grads
