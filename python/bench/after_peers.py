"""What the other libraries' calls leave behind for cgx's next call: one instance of
`peers.py` (its worker's environment: thread counts, wait policies, affinity; its operands
and path), cgx's forward (or value+gradient, `--what vg`) timed right after each of a set
of preceding actions: nothing (back to back), a sleep of 0, 1, 10 or 100 ms, 100 ms of a
Python busy loop (the core kept, no memory touched), writing a 64 MB or a 512 MB array,
numpy + opt_einsum's forward, JAX's forward or value+gradient, PyTorch's forward or
value+gradient, cgx's other call. The actions run in an order that rotates from round to
round. Prints per action the median [min–max] of cgx's call in ms, the median of its minor
page faults, and the CPU time (from `/proc/self/task/*/schedstat`, ms per call) that
threads other than the caller and cgx's pool ran during cgx's call, by thread name: a
foreign thread still running there takes a core from cgx.

usage: PYTHONPATH=<folder> chrt -f 50 python3 python/bench/after_peers.py [--threads 2] [--rounds 15]
       [--what fwd|vg] NAME_SUBSTRING"""
import argparse
import collections
import json
import os
import pathlib
import resource
import statistics
import sys
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import peers  # noqa: E402


def task_times():
    """Every thread of this process: tid -> (name, ns on a CPU so far)."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue
        out[tid] = (name, ns)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--what", choices=["fwd", "vg"], default="fwd")
    parser.add_argument("only")
    args = parser.parse_args()
    peers.set_thread_env(args.threads)
    import jax
    import jax.numpy as jnp
    import numpy as np
    import opt_einsum as oe
    import torch

    import cgx

    jax.config.update("jax_enable_x64", True)
    torch.set_num_threads(args.threads)
    operands = peers.load_script("compare_einsum", peers.ROOT / "benches" / "scripts" / "compare_einsum.py").operands
    insts = [json.loads(f.read_text()) | {"name": f.stem} for f in sorted(peers.DATA.glob("*.json"))]
    insts += peers.seeded_networks()
    inst = next(i for i in insts if args.only in i["name"])
    eq, shapes = inst["format_string"], [tuple(s) for s in inst["shapes"]]
    path = [tuple(p) for p in inst["paths"]["opt_flops"]["path"]]
    ops = [np.asarray(x) for x in operands(eq, shapes, np.random.default_rng(0))]
    n = len(ops)
    cgx.set_num_threads(args.threads)
    expr = cgx.contract_expression(eq, *shapes, optimize=path)
    seed = np.ones(expr(*ops).shape)
    oe_expr = oe.contract_expression(eq, *shapes, optimize=path)

    def jax_total(*xs):
        return jnp.sum(jnp.einsum(eq, *xs, optimize=path))

    jax_fwd = jax.jit(lambda *xs: jnp.einsum(eq, *xs, optimize=path))
    jax_vg = jax.jit(jax.value_and_grad(jax_total, argnums=tuple(range(n))))
    jops = [jnp.asarray(x) for x in ops]
    tops = [torch.from_numpy(x) for x in ops]
    tops_grad = [x.clone().requires_grad_(True) for x in tops]

    def torch_fwd():
        with torch.no_grad():
            return oe_expr(*tops, backend="torch")

    def torch_vg():
        total = oe_expr(*tops_grad, backend="torch").sum()
        return total, torch.autograd.grad(total, tops_grad)

    cgx_fwd = lambda: expr(*ops)  # noqa: E731
    cgx_vg = lambda: expr.value_and_grad(*ops, cotangent=seed)  # noqa: E731
    actions = {
        "back to back": lambda: None,
        "sleep 0": lambda: time.sleep(0),
        "sleep 1 ms": lambda: time.sleep(0.001),
        "sleep 10 ms": lambda: time.sleep(0.01),
        "sleep 100 ms": lambda: time.sleep(0.1),
        "spin 100 ms": lambda: spin(0.1),
        "write 64 MB": lambda: trash.fill(1.0),
        "write 512 MB": lambda: big.fill(1.0),
        "numpy+oe fwd": lambda: oe_expr(*ops),
        "jax fwd": lambda: jax_fwd(*jops).block_until_ready(),
        "jax vg": lambda: jax.block_until_ready(jax_vg(*jops)),
        "torch fwd": torch_fwd,
        "torch vg": torch_vg,
        "cgx vg" if args.what == "fwd" else "cgx fwd": cgx_vg if args.what == "fwd" else cgx_fwd,
    }
    trash, big = np.zeros(8 << 20), np.zeros(64 << 20)

    def spin(seconds):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    call = cgx_fwd if args.what == "fwd" else cgx_vg
    for f in list(actions.values()) + [call, call]:
        f()
    # cgx's pool threads: those that ran during a call back to back, beside the caller.
    before = task_times()
    call()
    after = task_times()
    me = str(threading.get_native_id())
    ours = {t for t in after if t != me and t in before and after[t][1] - before[t][1] > 0 and "cgx" in after[t][0]}
    times = collections.defaultdict(list)
    faults = collections.defaultdict(list)
    foreign = collections.defaultdict(lambda: collections.defaultdict(list))
    names = list(actions)
    for r in range(args.rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            actions[name]()
            a = task_times()
            f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t = time.perf_counter()
            call()
            dt = (time.perf_counter() - t) * 1e3
            faults[name].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
            b = task_times()
            times[name].append(dt)
            for tid, (tname, ns) in b.items():
                if tid == me or tid in ours:
                    continue
                used = (ns - a.get(tid, (tname, 0))[1]) / 1e6
                if used > 0.01:
                    foreign[name][tname].append(used)
    print(f"{inst['name']}, cgx {args.what} on {args.threads} thread(s), ms, median [min–max] of {args.rounds};"
          f" pool threads {sorted(after[t][0] for t in ours)}")
    for name in names:
        xs = times[name]
        other = ", ".join(f"{k} {sum(v) / args.rounds:.2f}" for k, v in sorted(foreign[name].items()))
        print(f"| {name} | {statistics.median(xs):.3g} [{min(xs):.3g}–{max(xs):.3g}] | {statistics.median(faults[name]):.0f} |"
              f" {other or '-'} |")


if __name__ == "__main__":
    main()
