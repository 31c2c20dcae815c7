#!/usr/bin/env python3
"""Each pairwise step of an instance alone: cgx.contract beside torch.einsum, one thread, CPU time.

Where ``peers.py`` times whole contractions, this finds the steps behind a difference: it
follows the instance's ``opt_flops`` path, and for every step calls ``cgx.contract`` and
``torch.einsum`` on the step's operands (the previous step's results, C-contiguous) in
turn, ``--repeat`` times. Times are the process's CPU time (``time.process_time``: cgx's
work runs on a thread of its own, counted too), which a machine loaded by other work
inflates far less than wall time; both libraries run on one thread. It prints the sum over
the steps of each side's median and the steps where cgx's median exceeds torch's the most:
``cgx ms, torch ms, ratio, step, operand shapes``.

``--sizes 4=12,1996=8`` replaces every label of size 4 by 12 and of 1996 by 8 first (the
language-model network with hidden size 12 of ``peers.py``).

    pip install ./python numpy opt_einsum torch
    python3 python/bench/peer_steps.py FILE.json [--repeat 5] [--sizes OLD=NEW,...] [--top 12]
"""

import argparse
import json
import os
import statistics
import time

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[var] = "1"
os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

import numpy as np  # noqa: E402
import opt_einsum as oe  # noqa: E402
import torch  # noqa: E402

import cgx  # noqa: E402


def cpu_ms(f):
    t = time.process_time()
    f()
    return (time.process_time() - t) * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--sizes", default="", help="label sizes to replace, OLD=NEW,...")
    parser.add_argument("--top", type=int, default=12, help="how many steps to list")
    args = parser.parse_args()
    torch.set_num_threads(1)
    cgx.set_num_threads(1)
    inst = json.loads(open(args.file).read())
    eq, shapes = inst["format_string"], inst["shapes"]
    path = [tuple(p) for p in inst["paths"]["opt_flops"]["path"]]
    swap = dict(tuple(map(int, x.split("="))) for x in args.sizes.split(",") if x)
    shapes = [[swap.get(d, d) for d in s] for s in shapes]
    rng = np.random.default_rng(0)
    ops = [np.asarray(0.5 + rng.random(s)) / max(1, max(s, default=1)) for s in shapes]
    _, info = oe.contract_path(eq, *ops, optimize=path)
    rows = []
    for inds, _, step, _, _ in info.contraction_list:
        # opt_einsum pops the step's operands in the order of `inds`, as its subscripts list them.
        xs = [ops.pop(i) for i in inds]
        inputs, out = step.split("->")
        letters = {}
        for c in inputs.replace(",", "") + out:
            letters.setdefault(c, oe.get_symbol(len(letters)))
        sub = ",".join("".join(letters[c] for c in t) for t in inputs.split(",")) + "->"
        sub += "".join(letters[c] for c in out)
        ts = [torch.from_numpy(x) for x in xs]
        ours, theirs = [], []
        for _ in range(args.repeat):
            ours.append(cpu_ms(lambda: cgx.contract(sub, *xs)))
            theirs.append(cpu_ms(lambda: torch.einsum(sub, *ts)))
        result = cgx.contract(sub, *xs)
        want = torch.einsum(sub, *ts).numpy()
        assert np.allclose(result, want, rtol=1e-9, atol=1e-12 * np.abs(want).max(initial=1.0)), sub
        ops.append(np.ascontiguousarray(result))
        rows.append((statistics.median(ours), statistics.median(theirs), sub, [x.shape for x in xs]))
    print(f"{inst.get('name', args.file)}: {len(rows)} steps, CPU ms, medians of {args.repeat} interleaved calls")
    print(f"sum over the steps: cgx {sum(r[0] for r in rows):.2f}, torch {sum(r[1] for r in rows):.2f}")
    for a, b, sub, sh in sorted(rows, key=lambda r: r[0] - r[1], reverse=True)[: args.top]:
        print(f"{a:9.3f} {b:9.3f} {a / b:6.2f}  {sub}  {sh}")


if __name__ == "__main__":
    main()
