#!/usr/bin/env python3
"""Element-wise and broadcast steps: cgx against numpy + opt_einsum, JAX (jit) and PyTorch, and against the machine's bandwidth.

What a user writes beyond ``peers.py``'s one element-wise row (``ij,ij->ij`` of float64,
one layout): complex128, a transposed operand, broadcasts, a batch of outer products, a
product of three operands, and a product with a sum after it. Each case at output (or,
for the sums, operand) sizes of ``2^e`` elements for each ``e`` of ``--sizes``, float64
and complex128, forward and value+gradient, one worker process per thread count as in
``peers.py`` (its thread settings: N cores, N threads for every library).

- cgx: ``cgx.contract_expression(eq, *shapes)``; value+gradient is
  ``value_and_grad(*xs, cotangent=1.0)`` (the gradient of the sum of the result, every
  operand);
- numpy + opt_einsum: ``opt_einsum.contract_expression(eq, *shapes)`` (forward only);
- JAX: ``jax.jit`` of ``jnp.einsum`` and of ``jax.vjp`` with a cotangent of ones (the
  same gradient; for complex operands JAX's convention, which the check leaves out);
- PyTorch: ``torch.einsum`` under ``no_grad``, and ``torch.autograd.grad`` with
  ``grad_outputs`` of ones.

Beside them, ``copy``: ``np.copyto`` of an array as large as half the call's least memory
traffic (its operands read and its results written, each once; a scalar cotangent
counts nothing), so that the copy reads and writes what the call must. ``bw%`` is that
copy's median over cgx's: near 100 the call runs at the bandwidth a copy gets.

Rounds are interleaved as in ``peers.py`` (every library's forward, then its
value+gradient, the order rotating per round); cells are medians in milliseconds, with
the smallest and largest run in the JSON. Forward results and float64 gradients are
checked against cgx's (relative difference 1e-8).

    python3 python/bench/elementwise_peers.py [--threads 1,2] [--repeat 7] [--sizes 16,20,23]
                                              [--dtypes f64,c128] [--only SUBSTRING] [--json OUT]
                                              [--libs cgx,copy]

``--libs`` times only the libraries named (cgx and the copy always): an A/B of two cgx
builds alternated runs in a fraction of the time, the peers timed once beside them.
"""

import argparse
import importlib.util
import json
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
LIBS = ["cgx", "numpy+oe", "jax", "torch"]


def load_peers():
    spec = importlib.util.spec_from_file_location("peers", ROOT / "python" / "bench" / "peers.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def split(e, parts):
    """`parts` powers of two whose exponents add to `e`, as equal as they come (larger first)."""
    base, extra = divmod(e, parts)
    return [2 ** (base + (1 if i < extra else 0)) for i in range(parts)]


def cases(e):
    """(name, equation, shapes) with an output (or, for the sums, operands) of 2^e elements."""
    i, j = split(e, 2)
    a, b, c = split(e, 3)
    outer = min(6, e // 3)
    batch = 2 ** (e - 2 * outer)
    return [
        ("same", "ij,ij->ij", [(i, j), (i, j)]),
        ("transposed", "ij,ji->ij", [(i, j), (j, i)]),
        ("row broadcast", "ij,j->ij", [(i, j), (j,)]),
        ("column broadcast", "ij,i->ij", [(i, j), (i,)]),
        ("3d broadcast", "ijk,jk->ijk", [(a, b, c), (b, c)]),
        ("outer batch", "bi,bj->bij", [(batch, 2**outer), (batch, 2**outer)]),
        ("three operands", "ij,ij,ij->ij", [(i, j), (i, j), (i, j)]),
        ("row sums", "ij,ij->i", [(i, j), (i, j)]),
        ("total", "ij,ij->", [(i, j), (i, j)]),
    ]


def least_bytes(shapes, out_elems, itemsize, grads):
    """The call's least memory traffic: operands read once, the result (and each operand's
    gradient) written once."""
    reads = sum(int(_prod(s)) for s in shapes)
    writes = out_elems + (sum(int(_prod(s)) for s in shapes) if grads else 0)
    return (reads + writes) * itemsize


def _prod(s):
    p = 1
    for d in s:
        p *= d
    return p


def worker(args):
    threads = args.worker
    peers = load_peers()
    peers.set_thread_env(threads)
    import numpy as np
    import opt_einsum as oe

    import cgx

    libs = set(args.libs.split(",")) | {"cgx", "copy"}
    jax, jnp, torch = peers.import_peers(threads) if libs & {"jax", "torch"} else (None, None, None)
    jax, jnp = (jax, jnp) if "jax" in libs else (None, None)
    torch = torch if "torch" in libs else None

    cgx.set_num_threads(threads)

    def ms(f):
        t = time.perf_counter()
        f()
        return (time.perf_counter() - t) * 1e3

    rng = np.random.default_rng(0)
    for e in [int(x) for x in args.sizes.split(",")]:
        for name, eq, shapes in cases(e):
            for dtype in args.dtypes.split(","):
                label = f"{name} {dtype} 2^{e}"
                if args.only not in label:
                    continue
                cplx = dtype == "c128"

                def draw(s, cplx=cplx):
                    x = rng.uniform(0.5, 1.5, s)
                    return x + 1j * rng.uniform(-0.5, 0.5, s) if cplx else x

                ops = [draw(s) for s in shapes]
                expr = cgx.contract_expression(eq, *shapes)
                value = expr(*ops)
                _, grads = expr.value_and_grad(*ops, cotangent=1.0)
                out_elems = int(np.asarray(value).size)
                oe_expr = oe.contract_expression(eq, *shapes)
                calls = {"cgx": (lambda x=ops: expr(*x), lambda x=ops: expr.value_and_grad(*x, cotangent=1.0))}
                if "numpy+oe" in libs:
                    calls["numpy+oe"] = (lambda x=ops: oe_expr(*x), None)
                errs = [peers.rel_err(oe_expr(*ops), value)]
                if jax:
                    jops = [jnp.asarray(x) for x in ops]
                    jfwd = jax.jit(lambda *xs, eq=eq: jnp.einsum(eq, *xs))

                    def vjp(*xs, eq=eq):
                        out, back = jax.vjp(lambda *ys: jnp.einsum(eq, *ys), *xs)
                        return out, back(jnp.ones_like(out))

                    jvg = jax.jit(vjp)
                    jv, jg = jax.block_until_ready(jvg(*jops))
                    errs.append(peers.rel_err(jv, value))
                    if not cplx:
                        errs += [peers.rel_err(g, w) for g, w in zip(jg, grads)]
                    del jv, jg
                    calls["jax"] = (lambda f=jfwd, x=jops: f(*x).block_until_ready(),
                                    lambda f=jvg, x=jops: jax.block_until_ready(f(*x)))
                if torch:
                    tops = [torch.from_numpy(x) for x in ops]
                    tgrad = [x.clone().requires_grad_(True) for x in tops]

                    def tfwd(x=tops, eq=eq):
                        with torch.no_grad():
                            return torch.einsum(eq, *x)

                    def tvg(x=tgrad, eq=eq):
                        out = torch.einsum(eq, *x)
                        return out, torch.autograd.grad(out, x, grad_outputs=torch.ones_like(out))

                    tv, tg = tvg()
                    errs.append(peers.rel_err(tv.detach().numpy(), value))
                    if not cplx:
                        errs += [peers.rel_err(g.numpy(), w) for g, w in zip(tg, grads)]
                    del tv, tg
                    calls["torch"] = (tfwd, tvg)
                err = max(errs)
                if err > 1e-8:
                    sys.exit(f"{label}: the libraries disagree (max relative difference {err:.1e})")
                del value, grads
                itemsize = 16 if cplx else 8
                fwd_bytes = least_bytes(shapes, out_elems, itemsize, False)
                vg_bytes = least_bytes(shapes, out_elems, itemsize, True)
                src = {k: np.ones(b // 16) for k, b in (("fwd", fwd_bytes), ("vg", vg_bytes))}
                dst = {k: np.empty_like(v) for k, v in src.items()}
                calls["copy"] = (lambda: np.copyto(dst["fwd"], src["fwd"]), lambda: np.copyto(dst["vg"], src["vg"]))
                for f, g in calls.values():
                    f()
                    if g:
                        g()
                libs = list(calls)
                times = {lib: ([], []) for lib in libs}
                for r in range(args.repeat):
                    for lib in libs[r % len(libs):] + libs[: r % len(libs)]:
                        f, g = calls[lib]
                        times[lib][0].append(ms(f))
                        if g is not None:
                            times[lib][1].append(ms(g))
                print(json.dumps({"case": name, "eq": eq, "dtype": dtype, "e": e, "threads": threads,
                                  "shapes": shapes, "max_rel_diff": err, "fwd_bytes": fwd_bytes,
                                  "vg_bytes": vg_bytes, "times": times}), flush=True)
                del calls, expr, oe_expr, ops, src, dst


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def table(rows):
    head = ("| case | eq | dtype | 2^e | thr | cgx fwd | oe fwd | JAX fwd | torch fwd | copy fwd | bw% fwd "
            "| cgx v+g | JAX v+g | torch v+g | copy v+g | bw% v+g | v+g/fwd | behind |")
    lines = [head, "|" + "---|" * 18]
    for r in rows:
        t = {lib: (med(f), med(g)) for lib, (f, g) in r["times"].items()}
        get = lambda lib, k: t.get(lib, (float("nan"),) * 2)[k]  # noqa: E731
        behind = [f"{lib} fwd" for lib in LIBS[1:] if get(lib, 0) < get("cgx", 0)]
        behind += [f"{lib} v+g" for lib in ("jax", "torch") if get(lib, 1) < get("cgx", 1)]
        lines.append(
            f"| {r['case']} | `{r['eq']}` | {r['dtype']} | {r['e']} | {r['threads']} "
            + " ".join(f"| {get(lib, 0):.3g}" for lib in ("cgx", "numpy+oe", "jax", "torch", "copy"))
            + f" | {100 * get('copy', 0) / get('cgx', 0):.0f} "
            + " ".join(f"| {get(lib, 1):.3g}" for lib in ("cgx", "jax", "torch", "copy"))
            + f" | {100 * get('copy', 1) / get('cgx', 1):.0f} | {get('cgx', 1) / get('cgx', 0):.2f} "
            + f"| {', '.join(behind) or '—'} |"
        )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--sizes", default="16,20,23", help="exponents e of 2^e elements")
    parser.add_argument("--dtypes", default="f64,c128")
    parser.add_argument("--only", default="", help="run the cases whose label ('name dtype 2^e') contains this")
    parser.add_argument("--libs", default=",".join(LIBS), help="the libraries timed (cgx and the copy always)")
    parser.add_argument("--json", type=pathlib.Path)
    parser.add_argument("--table", type=pathlib.Path, help="print the table of a JSON written before")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return
    rows = []
    for threads in [int(x) for x in args.threads.split(",")]:
        cmd = [sys.executable, __file__, "--worker", str(threads), "--repeat", str(args.repeat), "--sizes", args.sizes,
               "--dtypes", args.dtypes, "--only", args.only, "--libs", args.libs]
        out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True).stdout
        rows += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        print(table([r for r in rows if r["threads"] == threads]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
