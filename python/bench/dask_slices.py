#!/usr/bin/env python3
"""cgx.distributed on a LocalCluster: 1 against 2 worker processes, task lengths, Dask's
per-task overhead, and peak memory per worker against the target.

For an Einsum Benchmark instance (``lm_batch_likelihood_brackets_4_4d`` by default), plans
the contraction sliced to a memory limit of the largest intermediate over ``--shrink``,
times it in this process (``expr(*arrays)``, one thread) and with
``cgx.distributed.contract`` on a LocalCluster of 1 and of 2 worker processes (one thread
each, 127.0.0.1), best of ``--repeat`` after a warm-up, in seconds, and checks the results
agree (the instance's sliced label is its output's: ranges return and stack output
blocks). For each cluster it reports:

- the slice-range tasks of the timed runs (Dask's task stream): how many per run and
  their compute time (least, median), which should be at least 50 ms each;
- per worker, the resident memory before the timed runs and its peak during them (Linux:
  ``VmHWM`` after resetting it through ``/proc/self/clear_refs``; elsewhere ``ru_maxrss``,
  the peak since the worker started), beside the target: the limit's intermediates
  (``8 · limit`` bytes) plus the operands and the output, which a worker holds whole.

Then the per-task overhead: the wall time of 2000 no-op tasks (``client.map`` +
``gather``) over their count, in milliseconds. It runs in under three minutes (142 s on
the 2-core development machine at a load average of 13).

    pip install ./python dask distributed
    python3 python/bench/dask_slices.py [--shrink 16] [--repeat 3] [FILE.json]
"""

import argparse
import json
import os
import pathlib
import resource
import statistics
import time

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"

import numpy as np  # noqa: E402
from distributed import Client, LocalCluster, get_task_stream  # noqa: E402

import cgx  # noqa: E402
import cgx.distributed  # noqa: E402

DATA = pathlib.Path(__file__).resolve().parents[2] / "crates" / "einsum" / "tests" / "data"


def best_of(n, call, warm_up=True):
    if warm_up:
        call()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        out = call()
        times.append(time.perf_counter() - t)
    return min(times), out


def noop(x):
    return x


def reset_peak():
    """Resets this process's peak resident memory (Linux); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def memory():
    """``(resident, peak)`` bytes of this process."""
    try:
        fields = {}
        with open("/proc/self/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    fields[key] = int(value.split()[0]) * 1024
        return fields["VmRSS"], fields["VmHWM"]
    except (OSError, KeyError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return peak, peak


def mb(x):
    return f"{x / 1e6:.1f} MB" if abs(x) < 1e7 else f"{x / 1e6:.0f} MB"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shrink", type=float, default=16.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("file", nargs="?", type=pathlib.Path, default=DATA / "lm_batch_likelihood_brackets_4_4d.json")
    args = parser.parse_args()
    started = time.perf_counter()
    inst = json.loads(args.file.read_text())
    eq, shapes = inst["format_string"], [tuple(s) for s in inst["shapes"]]
    path = [tuple(p) for p in inst["paths"]["opt_flops"]["path"]]
    steps = cgx.contract_expression(eq, *shapes, optimize=path)._plan()[3]
    largest, flops = max(float(s[2]) for s in steps), 2.0 * sum(float(s[3]) for s in steps)
    limit = max(largest / args.shrink, 1.0)
    expr = cgx.contract_expression(eq, *shapes, optimize=path, memory_limit=limit)
    rng = np.random.default_rng(0)
    arrays = [rng.random(s) for s in shapes]
    held = sum(a.nbytes for a in arrays) + 8 * int(np.prod(expr.output_shape))
    target = 8 * limit + held
    print(
        f"{args.file.stem}: {expr.n_slices} slices on {expr.sliced_inds}, overhead {expr.slicing_overhead:.3f}, "
        f"{flops:.3e} flops unsliced, limit {limit:.0f} elements; target per worker {mb(target)} "
        f"(intermediates {mb(8 * limit)}, operands and output {mb(held)})"
    )
    local, want = best_of(args.repeat, lambda: expr(*arrays))
    print(f"one process, no Dask: {local:.3f} s")
    scale = max(float(np.max(np.abs(want))), 1e-300)
    for workers in (1, 2):
        with LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
        ) as cluster, Client(cluster) as client:

            def run():
                return cgx.distributed.contract(eq, *arrays, optimize=path, memory_limit=limit, client=client)

            run()  # warm-up: each worker compiles the expression once
            exact = all(client.run(reset_peak).values())
            before = client.run(memory)
            with get_task_stream(client) as stream:
                took, got = best_of(args.repeat, run, warm_up=False)
            after = client.run(memory)
            err = float(np.max(np.abs(got - want))) / scale
            tasks = [
                sum(s["stop"] - s["start"] for s in t["startstops"] if s["action"] == "compute")
                for t in stream.data
                if "_eval_range" in str(t["key"])
            ]
            runs = args.repeat
            print(f"{workers} worker(s): {took:.3f} s, max |diff| / max |x| {err:.1e}")
            if tasks:
                print(
                    f"  {len(tasks) // runs} slice-range tasks per run, compute time least "
                    f"{min(tasks) * 1e3:.0f} ms, median {statistics.median(tasks) * 1e3:.0f} ms"
                )
            for address in sorted(before):
                rss, _ = before[address]
                _, peak = after[address]
                kind = "peak during the runs" if exact else "peak since start (ru_maxrss)"
                print(
                    f"  worker {address}: resident {mb(rss)} before, {kind} {mb(peak)}, "
                    f"{mb(peak - rss)} above it, target {mb(target)}"
                )
            if workers == 2:
                n = 2000
                client.gather(client.map(noop, range(100), pure=False))
                t = time.perf_counter()
                client.gather(client.map(noop, range(n), pure=False))
                print(f"per-task overhead: {(time.perf_counter() - t) / n * 1e3:.3f} ms ({n} no-op tasks, 2 workers)")
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
