#!/usr/bin/env python3
"""cgx against numpy + opt_einsum, JAX (jit) and PyTorch: one process per thread count, calls interleaved.

For every Einsum Benchmark instance in crates/einsum/tests/data/ (or the files given) and a
few seeded networks of this script's own, every library contracts the same float64
operands along the same path (the instance's ``opt_flops`` path; opt_einsum's greedy one
for the seeded networks):

- cgx: a compiled ``cgx.contract_expression``; value+gradient is
  ``ContractExpression.value_and_grad`` with the scalar cotangent 1 (the gradient of the
  sum of the result with respect to every operand, as the peers take it);
- numpy + opt_einsum: a precompiled ``opt_einsum.contract_expression`` (forward only:
  numpy has no gradients);
- JAX: ``jax.jit`` of ``jnp.einsum(eq, *xs, optimize=path)`` and ``jax.jit`` of
  ``jax.value_and_grad`` of its sum over every operand; the compile time (the first call
  of both) is reported beside and excluded from the timings;
- PyTorch: the same ``opt_einsum`` expression on ``torch`` tensors (``backend="torch"``:
  each pairwise step is a ``torch.einsum`` or ``torch.tensordot``), value+gradient by
  ``torch.autograd.grad`` of the sum.

Each library's results are compared with cgx's (the script fails above a relative
difference of 1e-8, value and gradients). Then ``--repeat`` rounds: in each round every
library runs its forward call once and then its value+gradient once, the libraries in an
order that rotates from round to round, so that a slow stretch of a loaded machine falls
on all of them alike. Cells are the median over the rounds in milliseconds with the
smallest and largest run beside (``median [min–max]``); ``v+g/fwd`` is cgx's
value+gradient median over its forward median.

Threads: one worker process per thread count and instance (``--threads 1,2``), since JAX
reads its thread count when it starts; a worker whose resident memory passes
``--max-rss-gib`` (8 GiB by default: one worker runs at a time, and JAX's compile and
value+gradient of ``str_nw_mera_open_26`` on two threads take about 4 GiB) ends,
and its instance is reported as over the budget. In a worker of N threads, numpy's BLAS has N threads
(``OMP_NUM_THREADS`` and the like), the worker runs on N cores (its affinity: XLA has
threads of its own beside its pool), XLA's CPU client ``intra_op_parallelism_threads=N``
(with Eigen's thread pool on only for N > 1), ``torch.set_num_threads(N)`` (idle OpenMP
threads sleep, ``OMP_WAIT_POLICY=PASSIVE``, rather than spin into the next call; numpy's
OpenBLAS threads likewise, ``OPENBLAS_THREAD_TIMEOUT=4``), and cgx runs on
N threads if its Python package takes a thread count (a ``threads`` argument of
``contract_expression`` or ``cgx.set_num_threads``). A package without one runs on one
thread, and its cells at N > 1 say so (``1 thread``).

    pip install ./python numpy opt_einsum jax torch
    python3 python/bench/peers.py [--threads 1,2] [--repeat 5] [--clock wall|cpu] [--only SUBSTRING]
                                  [--json OUT] [FILE.json ...]

Each row also records the share of the machine's cores that other processes used while
its worker ran (``/proc/stat``'s busy time less the worker's own CPU time), and each
thread count's section ends with the largest such share: a row whose figure is more than
a few percent was not measured on an idle machine.

``--clock cpu`` times each call by the process's CPU time (all its threads) instead of the
wall clock: on a machine loaded by other work, a one-thread call's CPU time is its own work,
while its wall time grows with the load.

The seeded networks (``--no-seeded`` leaves them out): the queens graphical model of
``benches/scripts/gm_queens.py`` conditioned on cells 0, 6, 12, 18 and 24 (with 24 free,
the peers' value+gradient passes 4 GiB); random
3-regular graphs of 24 tensors with bonds of 4 (seed 0) and of 60 tensors with bonds of 3
(seed 1); closed square and cubic lattices (8×8 with bonds of 4, 3×4×5 with bonds of 2); the language-model network
``lm_batch_likelihood_brackets_4_4d`` with hidden size 12 instead of 4 and a batch of 8
(its own path); and the element-wise product of two 2048×2048 matrices.
"""

import argparse
import importlib.util
import inspect
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "crates" / "einsum" / "tests" / "data"
LIBS = ["cgx", "numpy+oe", "jax", "torch"]


def load_script(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- the seeded networks -------------------------------------------------------------


def instance(name, eq, shapes):
    """An instance dict in the Einsum Benchmark's format, with opt_einsum's greedy path."""
    import numpy as np
    import opt_einsum as oe

    if len(shapes) == 2:
        path = [(0, 1)]
    else:
        path, _ = oe.contract_path(eq, *[np.empty(s) for s in shapes], optimize="greedy", shapes=False)
    steps = {"path": [list(p) for p in path]}
    return {"name": name, "format_string": eq, "shapes": [list(s) for s in shapes],
            "paths": {"opt_flops": steps, "opt_size": steps}}


def random_regular(n, degree, bond, seed):
    """A closed network on a random `degree`-regular graph of `n` vertices (pairing model,
    redrawn until it has no loop and no repeated edge), one label of size `bond` per edge."""
    import numpy as np
    import opt_einsum as oe

    rng = np.random.default_rng(seed)
    while True:
        stubs = rng.permutation(np.repeat(np.arange(n), degree))
        edges = {tuple(sorted(p)) for p in stubs.reshape(-1, 2).tolist()}
        if len(edges) == n * degree // 2 and all(a != b for a, b in edges):
            break
    terms = [""] * n
    for e, (a, b) in enumerate(sorted(edges)):
        terms[a] += oe.get_symbol(e)
        terms[b] += oe.get_symbol(e)
    return instance(f"rrg_{n}_d{degree}_bond{bond}_seed{seed}", ",".join(terms) + "->", [[bond] * degree] * n)


def lattice(dims, bond):
    """A closed network on a periodic-free grid of `dims` (2-D or 3-D), one tensor per site
    and one label of size `bond` per nearest-neighbour edge: the norm-like networks of
    PEPS and of lattice models, no seed needed (the operands are the worker's)."""
    import itertools

    import opt_einsum as oe

    sites = list(itertools.product(*[range(d) for d in dims]))
    index = {s: i for i, s in enumerate(sites)}
    terms, shapes, e = [""] * len(sites), [[] for _ in sites], 0
    for s in sites:
        for axis in range(len(dims)):
            t = list(s)
            t[axis] += 1
            if t[axis] < dims[axis]:
                for v in (index[s], index[tuple(t)]):
                    terms[v] += oe.get_symbol(e)
                    shapes[v].append(bond)
                e += 1
    name = "lattice_" + "x".join(map(str, dims)) + f"_bond{bond}"
    return instance(name, ",".join(terms) + "->", shapes)


def lm_hidden(hidden, batch):
    """`lm_batch_likelihood_brackets_4_4d` with its hidden labels (size 4) `hidden` wide and
    its batch label (1996) `batch` long, on the instance's own `opt_flops` path."""
    inst = json.loads((DATA / "lm_batch_likelihood_brackets_4_4d.json").read_text())
    shapes = [[hidden if d == 4 else batch if d == 1996 else d for d in s] for s in inst["shapes"]]
    return {"name": f"lm_batch_hidden{hidden}_batch{batch}", "format_string": inst["format_string"],
            "shapes": shapes, "paths": {"opt_flops": inst["paths"]["opt_flops"]}}


def seeded_networks():
    gm = load_script("gm_queens", ROOT / "benches" / "scripts" / "gm_queens.py")
    eq, shapes = gm.network(5, {0, 6, 12, 18, 24})
    return [
        instance("gm_queens_5x5_3_fix0_6_12_18_24", eq, shapes),
        random_regular(24, 3, 4, 0),
        random_regular(60, 3, 3, 1),
        lattice((8, 8), 4),
        lattice((3, 4, 5), 2),
        lm_hidden(12, 8),
        instance("elementwise_2048x2048", "ij,ij->ij", [[2048, 2048], [2048, 2048]]),
    ]


# --- the worker: one thread count, every library in this process ---------------------


def set_thread_env(threads):
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
                "VECLIB_MAXIMUM_THREADS"):
        os.environ[var] = str(threads)
    # Threads that have finished their part sleep instead of spinning: with the libraries'
    # calls interleaved, a spinning OpenMP or BLAS thread would take the core from the next
    # library's call.
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    os.environ["KMP_BLOCKTIME"] = "0"
    # numpy's OpenBLAS (pthreads, which ignore the two above) busy-waits after each call
    # for 2^28 cycles (about 0.1 s) by default: under `chrt -f 50` its spinning thread
    # held a core from the calls after it (cgx's `bin_matmul_256` on two threads ran at its
    # one-thread speed, 0.66 ms, after a numpy call, and 0.48 with this; numpy's own call
    # 0.77 and 0.80). 2^4 cycles, the least it takes: sleep at once.
    os.environ["OPENBLAS_THREAD_TIMEOUT"] = "4"
    eigen = "true" if threads > 1 else "false"
    os.environ["XLA_FLAGS"] = f"--xla_cpu_multi_thread_eigen={eigen} intra_op_parallelism_threads={threads}"
    os.environ["JAX_PLATFORMS"] = "cpu"
    # XLA runs threads of its own beside intra_op_parallelism_threads, which the flags do
    # not bound: on this machine JAX's one-thread MERA took 742 ms with the second core
    # free and 1460 ms pinned to one. So a worker of N threads runs on N cores (the last
    # ones), set before any library starts a thread (threads inherit it).
    if hasattr(os, "sched_setaffinity"):
        cores = sorted(os.sched_getaffinity(0))
        if len(cores) > threads:
            os.sched_setaffinity(0, cores[-threads:])


def rel_err(got, want):
    """max |got - want| / max |want|, over blocks of at most 4 Mi elements: the differences of
    a whole 328 MiB result (`str_nw_mera_open_26`) made two temporaries of its size, which
    counted against the memory budget of whichever library was being checked."""
    import numpy as np

    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return float("inf")
    lead, block = 0, want.size
    while lead < want.ndim and block > 1 << 22:
        block //= want.shape[lead]
        lead += 1
    diff = scale = 0.0
    for at in np.ndindex(*want.shape[:lead]):
        diff = max(diff, float(np.max(np.abs(np.subtract(got[at], want[at])), initial=0.0)))
        scale = max(scale, float(np.max(np.abs(want[at]), initial=0.0)))
    return diff / max(scale, 1e-300)


# What the worker is running, for the memory watchdog's message.
_NOW = {"name": "", "what": "setup"}


def watch_memory(limit_bytes):
    """Ends the worker when its resident memory passes `limit_bytes` (the shared machine's
    budget per process), saying which call did it; the driver reports the instance as over
    the budget and goes on with the next."""
    import threading

    page = os.sysconf("SC_PAGE_SIZE")

    def loop():
        while True:
            with open("/proc/self/statm") as f:
                rss = int(f.read().split()[1]) * page
            if rss > limit_bytes:
                print(json.dumps({"over_memory": _NOW["name"], "what": _NOW["what"], "rss": rss}), flush=True)
                os._exit(3)
            time.sleep(0.05)

    threading.Thread(target=loop, daemon=True).start()


def import_peers(threads):
    """JAX (float64 on), ``jax.numpy`` and PyTorch (on ``threads`` threads), each ``None``
    where it is not installed."""
    try:
        import jax
        import jax.numpy as jnp

        jax.config.update("jax_enable_x64", True)
    except ImportError:
        jax = jnp = None
    try:
        import torch

        torch.set_num_threads(threads)
    except ImportError:
        torch = None
    return jax, jnp, torch


def worker(args):
    threads = args.worker
    set_thread_env(threads)
    if os.path.exists("/proc/self/statm"):
        watch_memory(int(args.max_rss_gib * 2**30))
    import numpy as np
    import opt_einsum as oe

    import cgx

    jax, jnp, torch = import_peers(threads)
    operands = load_script("compare_einsum", ROOT / "benches" / "scripts" / "compare_einsum.py").operands

    # cgx's thread count, if its package takes one.
    cgx_threads = 1
    expr_kw = {}
    if "threads" in inspect.signature(cgx.contract_expression).parameters:
        expr_kw, cgx_threads = {"threads": threads}, threads
    elif hasattr(cgx, "set_num_threads"):
        cgx.set_num_threads(threads)
        cgx_threads = threads

    # `cpu`: the process's CPU time (every thread's), which a loaded machine does not
    # inflate the way it does wall time; meaningful for one thread only.
    clock = time.process_time if args.clock == "cpu" else time.perf_counter

    def ms(f):
        t = clock()
        f()
        return (clock() - t) * 1e3

    versions = {"cgx": cgx.__version__, "numpy": np.__version__, "opt_einsum": oe.__version__,
                "jax": jax.__version__ if jax else "not installed",
                "torch": torch.__version__ if torch else "not installed", "cgx_threads": cgx_threads}
    print(json.dumps({"versions": versions}), flush=True)
    rng = np.random.default_rng(0)
    for f in args.files:
        inst = json.loads(pathlib.Path(f).read_text())
        name = inst.get("name") or pathlib.Path(f).stem
        _NOW["name"] = name
        eq, shapes = inst["format_string"], [tuple(s) for s in inst["shapes"]]
        path = [tuple(p) for p in inst["paths"]["opt_flops"]["path"]]
        # (`np.asarray`: a scalar operand comes back as a numpy scalar, which torch refuses.)
        ops = [np.asarray(x) for x in operands(eq, shapes, rng)]
        n = len(ops)

        _NOW["what"] = "checking the results"
        # cgx
        t = time.perf_counter()
        expr = cgx.contract_expression(eq, *shapes, optimize=path, **expr_kw)
        value = expr(*ops)
        seed = 1.0
        _, grads = expr.value_and_grad(*ops, cotangent=seed)
        cgx_setup = (time.perf_counter() - t) * 1e3
        # The check holds the reference results while the other libraries compile and run
        # theirs; cgx's pool of buffers kept for reuse (up to 768 MiB,
        # `cgx._core.release_buffers`) would count against them too: `str_nw_mera_open_26`'s
        # worker passed the budget in JAX's compile. So it is emptied here (and warmed
        # again after the check).
        release = getattr(getattr(cgx, "_core", None), "release_buffers", None)
        if release is not None:
            release()

        # numpy + opt_einsum
        oe_expr = oe.contract_expression(eq, *shapes, optimize=path)

        calls = {
            "cgx": (lambda: expr(*ops), lambda: expr.value_and_grad(*ops, cotangent=seed)),
            "numpy+oe": (lambda: oe_expr(*ops), None),
        }
        # The same function everywhere: every result against cgx's.
        errs = [rel_err(oe_expr(*ops), value)]
        jax_compile = float("nan")
        if jax:

            def jax_total(*xs, eq=eq, path=path):
                return jnp.sum(jnp.einsum(eq, *xs, optimize=path))

            jax_fwd = jax.jit(lambda *xs, eq=eq, path=path: jnp.einsum(eq, *xs, optimize=path))
            jax_vg = jax.jit(jax.value_and_grad(jax_total, argnums=tuple(range(n))))
            jops = [jnp.asarray(x) for x in ops]
            jax_compile = ms(lambda: jax_fwd(*jops).block_until_ready())
            jax_compile += ms(lambda: jax.block_until_ready(jax_vg(*jops)))
            jv, jg = jax_vg(*jops)
            errs += [rel_err(jax_fwd(*jops), value), rel_err(jv, np.sum(value))]
            errs += [rel_err(g, want) for g, want in zip(jg, grads)]
            calls["jax"] = (
                lambda f=jax_fwd, x=jops: f(*x).block_until_ready(),
                lambda f=jax_vg, x=jops: jax.block_until_ready(f(*x)),
            )
            del jv, jg
        if torch:
            # opt_einsum's expression on torch tensors: the same path, each step a torch call.
            tops = [torch.from_numpy(x) for x in ops]
            tops_grad = [x.clone().requires_grad_(True) for x in tops]

            def torch_fwd(e=oe_expr, x=tops):
                with torch.no_grad():
                    return e(*x, backend="torch")

            def torch_vg(e=oe_expr, x=tops_grad):
                total = e(*x, backend="torch").sum()
                return total, torch.autograd.grad(total, x)

            tv, tg = torch_vg()
            errs += [rel_err(torch_fwd().numpy(), value), rel_err(tv.detach().numpy(), np.sum(value))]
            errs += [rel_err(g.numpy(), want) for g, want in zip(tg, grads)]
            calls["torch"] = (torch_fwd, torch_vg)
            del tv, tg
        err = max(errs)
        if err > 1e-8:
            sys.exit(f"{name}: the libraries disagree (max relative difference {err:.1e})")
        del value, grads
        # cgx's pool was emptied after its reference calls: one untimed forward and
        # value+gradient give its buffers back, as every other library's check call
        # warmed it before its timed ones.
        calls["cgx"][0]()
        calls["cgx"][1]()

        times = {lib: ([], []) for lib in LIBS}
        libs = [lib for lib in LIBS if lib in calls]
        for r in range(args.repeat):
            for lib in libs[r % len(libs):] + libs[: r % len(libs)]:
                fwd, vg = calls[lib]
                _NOW["what"] = f"{lib} forward"
                times[lib][0].append(ms(fwd))
                if vg is not None:
                    _NOW["what"] = f"{lib} value+gradient"
                    times[lib][1].append(ms(vg))
        row = {"name": name, "steps": len(path), "threads": threads, "cgx_threads": cgx_threads,
               "jax_compile_ms": jax_compile, "cgx_setup_ms": cgx_setup, "max_rel_diff": err,
               "times": times}
        print(json.dumps(row), flush=True)
        del expr, oe_expr, calls
    if args.overhead:
        overhead(cgx, oe, np, torch)


def overhead(cgx, oe, np, torch):
    """Microseconds per call on a 2×2 @ 2×2 product (`timeit`, best of five repeats)."""
    import timeit

    a, b = np.random.default_rng(1).random((2, 2)), np.random.default_rng(2).random((2, 2))
    calls = {
        "cgx.contract": lambda: cgx.contract("ij,jk->ik", a, b),
        "opt_einsum.contract": lambda: oe.contract("ij,jk->ik", a, b),
        "numpy.einsum": lambda: np.einsum("ij,jk->ik", a, b),
    }
    if torch:
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        calls["torch.einsum"] = lambda: torch.einsum("ij,jk->ik", ta, tb)
    n = 20000
    per = {k: min(timeit.repeat(f, number=n, repeat=5)) / n * 1e6 for k, f in calls.items()}
    print(json.dumps({"overhead_us": per}), flush=True)


# --- the driver ------------------------------------------------------------------------


def busy_seconds():
    """The machine's busy CPU seconds since boot (every core), from ``/proc/stat``; ``None``
    where there is none."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    # user nice system idle iowait irq softirq steal ...: all but idle and iowait.
    busy = sum(fields[:8]) - fields[3] - fields[4]
    return busy / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds():
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def cell(samples):
    if samples is None or not samples:
        return "—"
    return f"{statistics.median(samples):.3g} [{min(samples):.3g}–{max(samples):.3g}]"


def table(rows):
    head = ("| instance | steps | cgx fwd | numpy+oe fwd | JAX fwd | torch fwd | cgx v+g | JAX v+g | torch v+g "
            "| cgx v+g/fwd | JAX v+g/fwd | torch v+g/fwd | JAX compile | max rel diff |")
    lines = [head, "|" + "---|" * 14]
    med = statistics.median
    for r in rows:
        t = {lib: r["times"].get(lib, (None, None)) for lib in LIBS}
        ratio = lambda lib: f"{med(t[lib][1]) / med(t[lib][0]):.2f}" if t[lib][1] else "—"  # noqa: E731
        note = "" if r["cgx_threads"] == r["threads"] else " (1 thread)"
        lines.append(
            f"| `{r['name']}` | {r['steps']} | {cell(t['cgx'][0])}{note} | {cell(t['numpy+oe'][0])} "
            f"| {cell(t['jax'][0])} | {cell(t['torch'][0])} | {cell(t['cgx'][1])}{note} | {cell(t['jax'][1])} "
            f"| {cell(t['torch'][1])} | {ratio('cgx')} | {ratio('jax')} | {ratio('torch')} "
            f"| {r['jax_compile_ms']:.0f} | {r['max_rel_diff']:.0e} |"
        )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2", help="thread counts, one worker process each")
    parser.add_argument("--repeat", type=int, default=5, help="interleaved rounds per instance")
    parser.add_argument("--only", default="", help="run the instances whose name contains this")
    parser.add_argument("--no-seeded", action="store_true", help="leave out the seeded networks")
    parser.add_argument("--json", type=pathlib.Path, help="also write every row, with its runs, here")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="wall time, or the process's CPU time (for one thread on a loaded machine)")
    parser.add_argument("--max-rss-gib", type=float, default=8.0,
                        help="end an instance whose worker's resident memory passes this (default 8)")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--overhead", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("files", nargs="*")
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    files = [str(f) for f in (args.files or sorted(DATA.glob("*.json")))]
    with tempfile.TemporaryDirectory() as tmp:
        if not args.no_seeded:
            for inst in seeded_networks():
                f = pathlib.Path(tmp) / f"{inst['name']}.json"
                f.write_text(json.dumps(inst))
                files.append(str(f))
        files = [f for f in files if args.only in pathlib.Path(f).stem]
        all_rows = []
        for threads in [int(x) for x in args.threads.split(",")]:
            rows = []
            # One worker per instance: an instance over the memory budget ends its own worker only.
            for i, f in enumerate(files):
                cmd = [sys.executable, __file__, "--worker", str(threads), "--repeat", str(args.repeat),
                       "--clock", args.clock, "--max-rss-gib", str(args.max_rss_gib), f]
                if threads == 1 and i == len(files) - 1:
                    cmd.append("--overhead")
                over = None
                busy0, own0, wall0, n0 = busy_seconds(), children_cpu_seconds(), time.perf_counter(), len(rows)
                with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as proc:
                    for line in proc.stdout:
                        msg = json.loads(line)
                        if "overhead_us" in msg:
                            print("per call on a 2×2 @ 2×2 product, µs: "
                                  + ", ".join(f"{k} {v:.2f}" for k, v in msg["overhead_us"].items()))
                        elif "versions" in msg:
                            if i == 0:
                                print(f"\n{threads} thread(s): " + ", ".join(f"{k} {x}" for k, x in msg["versions"].items())
                                      + f"; float64, ms ({args.clock} clock), median [min–max] of {args.repeat}"
                                      " interleaved rounds", flush=True)
                        elif "over_memory" in msg:
                            over = msg
                        else:
                            rows.append(msg)
                            print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
                busy1 = busy_seconds()
                if busy0 is not None and busy1 is not None and len(rows) > n0:
                    # What the rest of the machine took: its busy time less this worker's (and
                    # this driver's share is a few milliseconds), over the cores' wall time.
                    others = (busy1 - busy0) - (children_cpu_seconds() - own0)
                    # Every core's: /proc/stat's first line counts them all, whatever this
                    # driver's affinity.
                    cores = os.cpu_count()
                    rows[-1]["others_cpu_share"] = max(0.0, others) / ((time.perf_counter() - wall0) * cores)
                if over:
                    print(f"`{over['over_memory'] or pathlib.Path(f).stem}`: over the {args.max_rss_gib} GiB budget per process"
                          f" ({over['rss'] / 2**30:.1f} GiB during {over['what']}), left out", flush=True)
                elif proc.returncode:
                    sys.exit(f"the worker of {threads} thread(s) failed on {f} (exit {proc.returncode})")
            print(table(rows), flush=True)
            shares = [r["others_cpu_share"] for r in rows if "others_cpu_share" in r]
            if shares:
                print(f"other processes used at most {100 * max(shares):.1f}% of the cores while a row ran"
                      f" (median {100 * statistics.median(shares):.1f}%)", flush=True)
            all_rows += rows
    if args.json:
        args.json.write_text(json.dumps(all_rows, indent=1))


if __name__ == "__main__":
    main()
