"""cgx alone on one thread and two, interleaved in one process: every
bundled instance (`crates/einsum/tests/data/`; MERA only when named) and
`peers.py`'s seeded networks, `contract_expression(eq, *shapes, optimize=<opt_flops path>)`
on `compare_einsum.py`'s operands, `threads=1|2` per call. Per round, one thread and two
(which goes first alternates), each a forward call then a value+gradient call; `R` rounds
after a warm-up. Prints one markdown row per instance: median [min–max] ms and the ratio,
forward then value+gradient.

With `--dump DIR`, times nothing and writes each chosen instance as `DIR/NAME.json` and its
operands, the very ones a timing run of the same names gets, as `DIR/NAME.f64` (every
operand's float64 entries, little-endian, row-major, in operand order), for the engine
alone on the same input: `threads_ab --operands DIR/NAME.json`.

usage: PYTHONPATH=<folder> chrt -f 50 python3 python/bench/two_threads.py R [NAME ...]
       PYTHONPATH=<folder> python3 python/bench/two_threads.py --dump DIR [NAME ...]"""
import json
import pathlib
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import peers  # noqa: E402

import cgx  # noqa: E402


def cell(xs):
    return f"{statistics.median(xs):.3g} [{min(xs):.3g}–{max(xs):.3g}]"


def main():
    args = sys.argv[1:]
    dump = None
    if args[:1] == ["--dump"]:
        dump, args = pathlib.Path(args[1]), args[2:]
        dump.mkdir(parents=True, exist_ok=True)
        rounds, only = 0, args
    else:
        rounds, only = int(args[0]), args[1:]
    operands = peers.load_script("compare_einsum", peers.ROOT / "benches" / "scripts" / "compare_einsum.py").operands
    insts = [json.loads(f.read_text()) | {"name": f.stem} for f in sorted(peers.DATA.glob("*.json"))]
    insts += peers.seeded_networks()
    rng = np.random.default_rng(0)
    for inst in insts:
        name = inst["name"]
        if (only and not any(o in name for o in only)) or (not only and "mera" in name):
            continue
        eq, shapes = inst["format_string"], [tuple(s) for s in inst["shapes"]]
        path = [tuple(p) for p in inst["paths"]["opt_flops"]["path"]]
        ops = [np.asarray(x) for x in operands(eq, shapes, rng)]
        if dump is not None:
            (dump / f"{name}.json").write_text(json.dumps(inst))
            (dump / f"{name}.f64").write_bytes(b"".join(np.ascontiguousarray(x, "<f8").tobytes() for x in ops))
            continue
        expr = cgx.contract_expression(eq, *shapes, optimize=path)
        seed = np.ones(np.shape(expr(*ops)))
        for t in (1, 2):
            expr(*ops, threads=t)
            expr.value_and_grad(*ops, cotangent=seed, threads=t)
        res = {(k, t): [] for k in "fg" for t in (1, 2)}
        for r in range(rounds):
            for t in (1, 2) if r % 2 == 0 else (2, 1):
                s = time.perf_counter()
                expr(*ops, threads=t)
                res[("f", t)].append((time.perf_counter() - s) * 1e3)
                s = time.perf_counter()
                expr.value_and_grad(*ops, cotangent=seed, threads=t)
                res[("g", t)].append((time.perf_counter() - s) * 1e3)
        row = [f"`{name}`"]
        for k in "fg":
            one, two = res[(k, 1)], res[(k, 2)]
            row += [cell(one), cell(two), f"{statistics.median(one) / statistics.median(two):.2f}×"]
        print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
