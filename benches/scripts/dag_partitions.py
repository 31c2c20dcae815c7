#!/usr/bin/env python3
"""The per-partition overhead of a partitioned DAG (`cgx.distributed.dag`), against its
evaluation and its preparation: the figures of docs/SCALING.md, *What is built*.

For one shape and size, in one process: the whole graph (one partition) prepared and
evaluated, then each of P partitions prepared and evaluated alone (its boundary values
gathered from the exports before it). Then on a Dask LocalCluster of two worker
processes (127.0.0.1, one thread each): the preparation phase's wall time, one batch of
one row through the P partitions (a chain of P evaluation tasks: the wall time minus the
partitions' own evaluation times is Dask's overhead per partition), and a stream of
batches pipelined through them. Evaluation times are the best of three after a warm-up.

    pip install ./python dask distributed
    chrt -f 50 python benches/scripts/dag_partitions.py --shape window --nodes 1e7 --parts 8
"""

import argparse
import time

import numpy as np

from cgx import _core
from cgx.distributed import dag


def best(f, runs=3):
    f()
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)


def local(shape, nodes, parts, x):
    whole = _core.DagPartition(shape, nodes, dag.SPEC_SEED, 1, 0)
    empty = np.zeros((1, 0))
    w_eval = best(lambda: whole.evaluate(x, empty))
    _, want = whole.evaluate(x, empty)
    w_prep = whole.times
    del whole
    rows, results, done, got = [], [], [], []
    for k in range(parts):
        p = _core.DagPartition(shape, nodes, dag.SPEC_SEED, parts, k)
        pairs = [(done[s].exports, results[s][0]) for s in p.sources]
        t = time.perf_counter()
        boundary = _core.dag_gather(p.boundary, pairs, 1)
        g = time.perf_counter() - t
        e = best(lambda: p.evaluate(x, boundary))
        results.append(p.evaluate(x, boundary))
        got.append(results[-1][1])
        rows.append((k, p.range[1] - p.range[0], len(p.boundary), len(p.exports), p.times, g, e))
        done.append(p)
    same = np.array_equal(np.concatenate(got, axis=1).view(np.uint64), want.view(np.uint64))
    return w_prep, w_eval, rows, same, want


def ms(s):
    return f"{s * 1e3:9.2f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="window", choices=dag.SHAPES)
    ap.add_argument("--nodes", default="1e7")
    ap.add_argument("--parts", type=int, default=8)
    ap.add_argument("--batches", type=int, default=16)
    ap.add_argument("--no-dask", action="store_true")
    a = ap.parse_args()
    nodes = int(float(a.nodes))
    x = dag.inputs(a.shape, nodes, rows=1)
    w_prep, w_eval, rows, same, want = local(a.shape, nodes, a.parts, x)
    n = _core.dag_size(a.shape, nodes)[1]
    print(f"{a.shape}, {n} nodes, {a.parts} partitions, one process")
    print(" part     nodes boundary  exports  generate     build  material   compile    gather      eval  (ms)")
    print(f"whole {n:9d} {0:8d} {0:8d} " + " ".join(ms(t) for t in w_prep) + f" {ms(0)} {ms(w_eval)}")
    tot = [0.0] * 6
    for k, size, b, e, t, g, ev in rows:
        print(f"{k:5d} {size:9d} {b:8d} {e:8d} " + " ".join(ms(v) for v in t) + f" {ms(g)} {ms(ev)}")
        for i, v in enumerate((*t, g, ev)):
            tot[i] += v
    print(f"  sum {n:9d} {sum(r[2] for r in rows):8d} {sum(r[3] for r in rows):8d} " + " ".join(ms(v) for v in tot))
    print(f"preparation: whole {sum(w_prep):.3f} s, parts {sum(tot[:4]):.3f} s; evaluation: whole {w_eval * 1e3:.2f} ms, parts {(tot[4] + tot[5]) * 1e3:.2f} ms")
    print(f"partitioned equals whole bit for bit: {same}")
    if a.no_dask:
        return
    import distributed

    from cgx import distributed as cd

    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster, distributed.Client(cluster) as client:
        # Warm the workers' imports.
        cd.evaluate_dag(a.shape, 1000, dag.inputs(a.shape, 1000), parts=2, client=client)
        t = time.perf_counter()
        run = cd.submit_dag(a.shape, nodes, [x], parts=a.parts, client=client)
        prepared = time.perf_counter() - t
        out = run.result()[0]
        first = time.perf_counter() - t - prepared
        # The partitions are prepared now: one more batch of one row through the chain.
        # (The time includes the round trip of the cached preparations' infos.)
        t = time.perf_counter()
        run2 = cd.submit_dag(a.shape, nodes, [x], parts=a.parts, client=client)
        run2.result()
        t2 = time.perf_counter() - t
        xs = [dag.inputs(a.shape, nodes, rows=1, seed=s) for s in range(a.batches)]
        t = time.perf_counter()
        run3 = cd.submit_dag(a.shape, nodes, xs, parts=a.parts, client=client)
        run3.result()
        stream = time.perf_counter() - t
        run3.release()
        run2.release()
        run.release()
        prep_max = max(sum(i.times) for i in run.infos)
        eval_sum = tot[4] + tot[5]
        print(f"dask, 2 workers: preparation phase {prepared:.3f} s (longest partition {prep_max:.3f} s)")
        print(f"  one row through {a.parts} partitions: {t2 * 1e3:.1f} ms (first run {first * 1e3:.1f} ms); "
              f"partitions' own evaluation {eval_sum * 1e3:.2f} ms; overhead {(t2 - eval_sum) / a.parts * 1e3:.2f} ms per partition")
        print(f"  distributed equals one process bit for bit: {np.array_equal(out.view(np.uint64), want.view(np.uint64))}")
        print(f"  {a.batches} batches of one row pipelined: {stream:.3f} s, {stream / a.batches * 1e3:.1f} ms per batch")


if __name__ == "__main__":
    main()
