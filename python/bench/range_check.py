#!/usr/bin/env python3
"""The range check of ``value_and_grad``'s default ``strip_exponent=None``: the per-array
loop (``left_range`` of the value and of each gradient) against
``_scaled.any_left_range`` (``_core.any_left_range``: one call, without the GIL, over the
call's threads), interleaved in one process after a fresh ``value_and_grad`` each round;
median [min-max] of the rounds, ms. Instances as ``peers.py`` builds them (operands and
``opt_flops`` path).

    PYTHONPATH=<cgx build> chrt -f 50 taskset -c 1 python3 python/bench/range_check.py --threads 1 FILE...
    PYTHONPATH=<cgx build> chrt -f 50 python3 python/bench/range_check.py --threads 2 FILE...
"""

import argparse
import json
import pathlib
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import peers  # noqa: E402  (the same operands and paths)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    import cgx
    from cgx import _scaled

    cgx.set_num_threads(args.threads)
    operands = peers.load_script("compare_einsum", peers.ROOT / "benches" / "scripts" / "compare_einsum.py").operands

    def loop(value, grads):
        return _scaled.left_range(value) or any(_scaled.left_range(g) for g in grads)

    checks = {"per-array loop": loop, "any_left_range": _scaled.any_left_range}
    for f in args.files:
        inst = json.loads(pathlib.Path(f).read_text())
        eq, shapes = inst["format_string"], [tuple(s) for s in inst["shapes"]]
        path = [tuple(p) for p in inst["paths"]["opt_flops"]["path"]]
        ops = [np.asarray(x) for x in operands(eq, shapes, np.random.default_rng(0))]
        expr = cgx.contract_expression(eq, *shapes, optimize=path)
        seed = np.ones(np.shape(expr(*ops)))
        times = {name: [] for name in checks}
        answers = set()
        for r in range(args.rounds):
            order = list(checks.items())
            for name, check in order if r % 2 else order[::-1]:
                value, grads = expr.value_and_grad(*ops, cotangent=seed)
                t = time.perf_counter()
                answers.add(check(value, grads))
                times[name].append((time.perf_counter() - t) * 1e3)
        if len(answers) != 1:
            raise SystemExit(f"{inst['name']}: the two checks disagree")

        def cell(v):
            v = sorted(v)
            return f"{v[len(v) // 2]:.3g} [{v[0]:.3g}-{v[-1]:.3g}]"

        entries = sum(np.size(g) for g in grads)
        cells = ", ".join(f"{name} {cell(t)}" for name, t in times.items())
        print(f"{inst['name']}, {args.threads} thread(s), {entries} gradient entries: {cells} ms")


if __name__ == "__main__":
    main()
