#!/usr/bin/env python3
"""cgx.distributed on a LocalCluster: 1 against 2 worker processes, and Dask's per-task overhead.

For an Einsum Benchmark instance (``lm_batch_likelihood_brackets_4_4d`` by default), plans
the contraction sliced to a memory limit of the largest intermediate over ``--shrink``,
times it in this process (``expr(*arrays)``, one thread) and with ``cgx.distributed.contract``
on a LocalCluster of 1 and of 2 worker processes (one thread each), best of three after a
warm-up, in seconds, and checks the results agree. Then the per-task overhead: the wall
time of 2000 no-op tasks (``client.map`` + ``gather``) over their count, in milliseconds,
and each worker's peak resident memory (``ru_maxrss``) beside the limit in bytes.

    pip install ./python dask distributed
    python3 python/bench/dask_slices.py [--shrink 16] [FILE.json]
"""

import argparse
import json
import os
import pathlib
import resource
import time

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"

import numpy as np  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402

import cgx  # noqa: E402
import cgx.distributed  # noqa: E402

DATA = pathlib.Path(__file__).resolve().parents[2] / "crates" / "einsum" / "tests" / "data"


def best_of_three(call):
    call()
    times = []
    for _ in range(3):
        t = time.perf_counter()
        out = call()
        times.append(time.perf_counter() - t)
    return min(times), out


def noop(x):
    return x


def peak_rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shrink", type=float, default=16.0)
    parser.add_argument("file", nargs="?", type=pathlib.Path, default=DATA / "lm_batch_likelihood_brackets_4_4d.json")
    args = parser.parse_args()
    inst = json.loads(args.file.read_text())
    eq, shapes = inst["format_string"], [tuple(s) for s in inst["shapes"]]
    path = [tuple(p) for p in inst["paths"]["opt_flops"]["path"]]
    steps = cgx.contract_expression(eq, *shapes, optimize=path)._plan()[3]
    largest, flops = max(float(s[2]) for s in steps), 2.0 * sum(float(s[3]) for s in steps)
    limit = max(largest / args.shrink, 1.0)
    expr = cgx.contract_expression(eq, *shapes, optimize=path, memory_limit=limit)
    rng = np.random.default_rng(0)
    arrays = [rng.random(s) for s in shapes]
    print(
        f"{args.file.stem}: {expr.n_slices} slices on {expr.sliced_inds}, overhead {expr.slicing_overhead:.3f}, "
        f"{flops:.3e} flops unsliced, limit {limit:.0f} elements ({8 * limit:.3e} bytes)"
    )
    local, want = best_of_three(lambda: expr(*arrays))
    print(f"one process, no Dask: {local:.3f} s")
    for workers in (1, 2):
        with LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
        ) as cluster, Client(cluster) as client:
            took, got = best_of_three(
                lambda: cgx.distributed.contract(eq, *arrays, optimize=path, memory_limit=limit, client=client)
            )
            scale = max(float(np.max(np.abs(want))), 1e-300)
            err = float(np.max(np.abs(got - want))) / scale
            rss = client.run(peak_rss)
            print(f"{workers} worker(s): {took:.3f} s, max |diff| / max |x| {err:.1e}, peak RSS per worker "
                  f"{', '.join(f'{v / 1e6:.0f} MB' for v in rss.values())}")
            if workers == 2:
                n = 2000
                client.gather(client.map(noop, range(100), pure=False))
                t = time.perf_counter()
                client.gather(client.map(noop, range(n), pure=False))
                print(f"per-task overhead: {(time.perf_counter() - t) / n * 1e3:.3f} ms ({n} no-op tasks, 2 workers)")


if __name__ == "__main__":
    main()
