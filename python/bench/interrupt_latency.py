#!/usr/bin/env python3
"""Seconds from Ctrl-C (SIGINT) to the KeyboardInterrupt, for each long call of cgx.

For each call (a 3000³ matrix product, the same sliced on ``j``, its ``value_and_grad``,
the HVP of a three-matrix chain, all on 3000 x 3000 operands; a permutation copy and an
element-wise product of 110^4-element tensors, single kernels of seconds; compiling a
chain of 10^7 sines with ``cgx.graph`` and taking its gradient; a 10^7-node DAG prepared
and run in this process in two partitions), a timer thread sends SIGINT
to the process ``--delay`` seconds in, and the time from the signal to the exception is
printed for ``--runs`` runs. Then, interleaved, the multiply-add rate of a 1200³ and a
3000³ product (the latter runs in row blocks so that Ctrl-C is seen between them; the
former in about two), so that the cost of the blocks shows against the same load.

    pip install ./python
    python3 python/bench/interrupt_latency.py [--runs 5] [--delay 0.7]
"""

import argparse
import os
import signal
import threading
import time

import numpy as np

import cgx
import cgx.graph
from cgx.distributed import dag


def seconds_to_interrupt(call, delay):
    sent = []

    def fire():
        sent.append(time.perf_counter())
        os.kill(os.getpid(), signal.SIGINT)

    timer = threading.Timer(delay, fire)
    timer.start()
    try:
        call()
    except KeyboardInterrupt:
        return time.perf_counter() - sent[0]
    finally:
        timer.cancel()
        timer.join()
    raise SystemExit("the call ended before the signal: make it longer")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--delay", type=float, default=0.7)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    n = 3000
    a, b = rng.standard_normal((n, n)), rng.standard_normal((n, n))
    pair = cgx.contract_expression("ij,jk->ik", a.shape, b.shape)
    chain = cgx.contract_expression("ij,jk,kl->il", a.shape, b.shape, a.shape)
    t4 = rng.standard_normal((110,) * 4)
    u4 = rng.standard_normal((110,) * 4)
    g = cgx.graph.Graph()
    x0 = g.inputs(1)
    sines = g.add("sin", np.concatenate([x0, np.arange(1, 10**7)]))
    g.compile(sines[:1])  # builds the fragment: the calls below time the passes
    dag_inputs = dag.inputs("window", 10**7)
    calls = {
        "contract": lambda: cgx.contract("ij,jk->ik", a, b),
        "sliced contract": lambda: cgx.contract("ij,jk->ik", a, b, sliced_inds=["j"]),
        "value_and_grad": lambda: pair.value_and_grad(a, b, cotangent=a),
        "hvp": lambda: chain.hvp(a, b, a, directions=[a, b, a], cotangent=b),
        "permutation": lambda: cgx.contract("abcd->dbca", t4),
        "element-wise": lambda: cgx.contract("abcd,dbca->abcd", t4, u4),
        "graph compile": lambda: g.compile(sines[-1:]),
        "graph gradient": lambda: g.gradient(sines[-1]),
        "DAG, local": lambda: dag.evaluate_local("window", 10**7, dag_inputs, parts=2),
    }
    for name, call in calls.items():
        times = [seconds_to_interrupt(call, args.delay) for _ in range(args.runs)]
        print(f"{name:>16}: " + ", ".join(f"{t:.3f}" for t in times) + f" s (max {max(times):.3f})")
    rates = {1200: [], 3000: []}
    for _ in range(4):
        for m in rates:
            x, y = a[:m, :m].copy(), b[:m, :m].copy()
            expr = cgx.contract_expression("ij,jk->ik", x.shape, y.shape)
            start = time.perf_counter()
            expr(x, y)
            rates[m].append(m**3 / (time.perf_counter() - start) / 1e9)
    for m, r in rates.items():
        print(f"{m}³ product: " + ", ".join(f"{x:.2f}" for x in r) + " 10^9 multiply-adds/s")


if __name__ == "__main__":
    main()
