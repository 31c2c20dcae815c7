#!/usr/bin/env python3
"""Where cgx's value+gradient ÷ forward ratio goes, one instance at a time, one process.

For an instance file (or a seeded network of ``peers.py`` by name), on the operands and
path ``peers.py`` uses, the median of interleaved rounds (ms) of:

- ``fwd``: calling the expression;
- ``vg``: ``value_and_grad`` with a cotangent of ones, as ``peers.py`` times it;
- ``vg_core``: the engine's value and gradients alone (``_value_and_grad``, without the
  Python layer's check that no result left float64's range);
- ``vg_ck``: ``value_and_grad(checkpoint="none")``, the step-by-step reverse pass of
  ``Einsum::gradient_within`` keeping every intermediate, instead of the compiled program;

and the time of the range check alone (``any_left_range`` over the value and gradients).
With ``--threads 2`` cgx runs on two threads (pin the process to two cores).

    PYTHONPATH=<cgx build> chrt -f 50 taskset -c 1 python3 python/bench/vg_parts.py \\
        crates/einsum/tests/data/str_mps_varying_inner_product_200.json gm_queens lm_batch_hidden12
"""

import argparse
import json
import pathlib
import sys
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import peers  # noqa: E402  (the same operands, paths and seeded networks)


def instances(names):
    seeded = {inst["name"]: inst for inst in peers.seeded_networks()}
    for name in names:
        path = pathlib.Path(name)
        if path.exists():
            yield json.loads(path.read_text())
            continue
        found = [inst for key, inst in seeded.items() if name in key]
        if not found:
            raise SystemExit(f"{name}: neither a file nor a seeded network of peers.py ({', '.join(seeded)})")
        yield from found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1, help="cgx's threads (pin the process to as many cores)")
    parser.add_argument("names", nargs="+")
    args = parser.parse_args()
    import cgx
    from cgx import _scaled

    cgx.set_num_threads(args.threads)
    operands = peers.load_script("compare_einsum", peers.ROOT / "benches" / "scripts" / "compare_einsum.py").operands

    def ms(f):
        t = time.perf_counter()
        f()
        return (time.perf_counter() - t) * 1e3

    for inst in instances(args.names):
        eq, shapes = inst["format_string"], [tuple(s) for s in inst["shapes"]]
        path = [tuple(p) for p in inst["paths"]["opt_flops"]["path"]]
        ops = [np.asarray(x) for x in operands(eq, shapes, np.random.default_rng(0))]
        expr = cgx.contract_expression(eq, *shapes, optimize=path)
        seed = np.ones(np.shape(expr(*ops)))
        full, wrt = expr._full(tuple(ops)), expr._full_wrt(None)
        value, grads = expr._value_and_grad(full, wrt, seed)
        calls = {
            "fwd": lambda: expr(*ops),
            "vg": lambda: expr.value_and_grad(*ops, cotangent=seed),
            "vg_core": lambda: expr._value_and_grad(full, wrt, seed),
            "vg_ck": lambda: expr.value_and_grad(*ops, cotangent=seed, checkpoint="none"),
            "range_check": lambda: _scaled.any_left_range(value, grads),
        }
        for f in calls.values():  # warm-up
            f()
        runs = {k: [] for k in calls}
        for _ in range(args.rounds):
            for k, f in calls.items():
                runs[k].append(ms(f))
        med = {k: float(np.median(v)) for k, v in runs.items()}
        cells = ", ".join(f"{k} {med[k]:.3g} [{min(v):.3g}–{max(v):.3g}]" for k, v in runs.items())
        ratios = ", ".join(f"{k}/fwd {med[k] / med['fwd']:.2f}" for k in ("vg", "vg_core", "vg_ck"))
        print(f"{inst.get('name', '?')}: {cells}; {ratios}; gradient entries {sum(g.size for g in grads)}")


if __name__ == "__main__":
    main()
