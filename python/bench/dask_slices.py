#!/usr/bin/env python3
"""cgx.distributed on a LocalCluster: 1 against 2 worker processes, value and gradient, task
lengths, Dask's per-task overhead, and peak memory per worker against the target.

For an Einsum Benchmark instance (``lm_batch_likelihood_brackets_4_4d`` by default), plans
the contraction sliced to a memory limit of the largest intermediate over ``--shrink``
(or on the labels of ``--sliced``), times it in this process (``expr(*arrays)`` and
``expr.value_and_grad(*arrays, cotangent=...)``, one thread) and with
``cgx.distributed.contract`` and ``cgx.distributed.value_and_grad`` on a LocalCluster of 1
and of 2 worker processes (one thread each, 127.0.0.1), best of ``--repeat`` (after a
warm-up when ``--repeat`` is over 1), in seconds, and checks that the results agree with
the single-process ones. For each cluster it reports:

- Dask's per-task overhead: the wall time of ``--noop`` no-op tasks (``client.map`` +
  ``gather``) over their count, in milliseconds;
- for value and gradient, the slice-range tasks of the timed runs (Dask's task stream):
  how many per run, their compute time (least, median), and the overhead over the median
  task, which should stay under 5%;
- for this process (the client, and the LocalCluster's scheduler) the same, beside the
  output's size: where a sliced label is in the output the client assembles it, so it
  should hold it about once;
- per worker, the resident memory before the timed runs and its peak during them (Linux:
  ``VmHWM`` after resetting it through ``/proc/self/clear_refs``; elsewhere ``ru_maxrss``,
  the peak since the worker started), beside the target. The value's target: the largest
  intermediate of a slice (8 bytes an element) plus the operands and the output, which a
  worker holds whole. The gradient's, an upper bound as the engine counts the reverse
  pass (ADR 0011): every intermediate of a slice and its cotangent, the operands and two
  gradients' worth of them (the slice's and the range's sum), the output and the
  cotangent.

    pip install ./python dask distributed
    python3 python/bench/dask_slices.py [--shrink 16 | --sliced LABELS] [--repeat 3] [FILE.json]

It runs in about four minutes on lm_batch at the defaults on the 2-core development
machine under load (docs/PERFORMANCE.md, "Sliced contractions on Dask", has the figures).
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


def per_slice_sizes(expr):
    """Element counts of each step's result in one slice (the sliced labels at size 1)."""
    _, _, sizes, steps = expr._plan()
    one = dict(sizes, **{c: 1 for c in expr.sliced_inds})
    return [float(np.prod([one[c] for c in step[1][2]])) for step in steps]


def range_tasks(stream, name):
    """Compute seconds of each task of ``stream`` whose key starts with ``name``."""
    return [
        sum(s["stop"] - s["start"] for s in t["startstops"] if s["action"] == "compute")
        for t in stream.data
        if str(t["key"]).startswith(name) or f"'{name}" in str(t["key"])
    ]


def close(got, want):
    """Largest difference over the largest magnitude, over arrays or tuples of them."""
    if isinstance(want, (tuple, list)):
        return max(close(g, w) for g, w in zip(got, want))
    return float(np.max(np.abs(np.asarray(got) - want))) / max(float(np.max(np.abs(want))), 1e-300)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--shrink", type=float, default=16.0)
    parser.add_argument("--sliced", help="slice on these labels (one character each) instead of a memory limit")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--noop", type=int, default=2000, help="no-op tasks timed for the per-task overhead")
    parser.add_argument("file", nargs="?", type=pathlib.Path, default=DATA / "lm_batch_likelihood_brackets_4_4d.json")
    args = parser.parse_args()
    started = time.perf_counter()
    inst = json.loads(args.file.read_text())
    eq, shapes = inst["format_string"], [tuple(s) for s in inst["shapes"]]
    path = [tuple(p) for p in inst["paths"]["opt_flops"]["path"]]
    steps = cgx.contract_expression(eq, *shapes, optimize=path)._plan()[3]
    largest, flops = max(float(s[2]) for s in steps), 2.0 * sum(float(s[3]) for s in steps)
    if args.sliced:
        limit, sliced = None, list(args.sliced)
    else:
        limit, sliced = max(largest / args.shrink, 1.0), None
    plan = dict(optimize=path, memory_limit=limit, sliced_inds=sliced)
    expr = cgx.contract_expression(eq, *shapes, **plan)
    rng = np.random.default_rng(0)
    arrays = [rng.random(s) for s in shapes]
    cotangent = rng.random(tuple(expr.output_shape))
    operands, output = sum(a.nbytes for a in arrays), 8 * int(np.prod(expr.output_shape))
    inter = per_slice_sizes(expr)
    targets = {
        "value": 8 * max(inter) + operands + output,
        "grad": 2 * 8 * sum(inter) + 3 * operands + 2 * output,
    }
    how = f"limit {limit:.0f} elements" if limit else f"sliced on {''.join(sliced)}"
    print(
        f"{args.file.stem}: {expr.n_slices} slices on {expr.sliced_inds}, overhead {expr.slicing_overhead:.3f}, "
        f"{flops:.3e} flops unsliced, {how}; operands {mb(operands)}, output {mb(output)}, "
        f"largest intermediate of a slice {mb(8 * max(inter))}; target per worker: value {mb(targets['value'])}, "
        f"gradient {mb(targets['grad'])}"
    )
    warm = args.repeat > 1
    calls = {
        "value": (lambda: expr(*arrays), "_eval_range", cgx.distributed.contract, {}),
        "grad": (
            lambda: expr.value_and_grad(*arrays, cotangent=cotangent),
            "_grad_range",
            cgx.distributed.value_and_grad,
            {"cotangent": cotangent},
        ),
    }
    want = {}
    for mode, (local, _, _, _) in calls.items():
        took, want[mode] = best_of(args.repeat, local, warm_up=warm)
        print(f"one process, no Dask, {mode}: {took:.3f} s")
    for workers in (1, 2):
        with LocalCluster(
            n_workers=workers, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
        ) as cluster, Client(cluster) as client:
            client.gather(client.map(noop, range(100), pure=False))
            t = time.perf_counter()
            client.gather(client.map(noop, range(args.noop), pure=False))
            overhead = (time.perf_counter() - t) / args.noop
            print(f"{workers} worker(s): per-task overhead {overhead * 1e3:.3f} ms ({args.noop} no-op tasks)")
            for mode, (_, name, remote, extra) in calls.items():

                def run():
                    return remote(eq, *arrays, client=client, **plan, **extra)

                if warm:
                    run()  # each worker compiles the expression once
                exact = all(client.run(reset_peak).values()) and reset_peak()
                before, here = client.run(memory), memory()
                with get_task_stream(client) as stream:
                    took, got = best_of(args.repeat, run, warm_up=False)
                after, here_after = client.run(memory), memory()
                flat = (lambda r: r) if mode == "value" else (lambda r: (r[0], *r[1]))
                err = close(flat(got), flat(want[mode]))
                tasks = range_tasks(stream, name)
                print(f"  {mode}: {took:.3f} s, max |diff| / max |x| {err:.1e}")
                if tasks:
                    median = statistics.median(tasks)
                    print(
                        f"    {len(tasks) // args.repeat} slice-range tasks per run, compute time least "
                        f"{min(tasks) * 1e3:.0f} ms, median {median * 1e3:.0f} ms; overhead / median task "
                        f"{overhead / median * 100:.2f}%"
                    )
                print(
                    f"    client (this process, with the scheduler): resident {mb(here[0])} before, peak "
                    f"{mb(here_after[1])}, {mb(here_after[1] - here[0])} above it; output {mb(output)}"
                )
                for address in sorted(before):
                    rss, _ = before[address]
                    _, peak = after[address]
                    kind = "peak during the runs" if exact else "peak since start (ru_maxrss)"
                    print(
                        f"    worker {address}: resident {mb(rss)} before, {kind} {mb(peak)}, "
                        f"{mb(peak - rss)} above it, target {mb(targets[mode])}"
                    )
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
