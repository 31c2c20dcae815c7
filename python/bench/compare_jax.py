#!/usr/bin/env python3
"""cgx beside JAX in one process: forward and value+gradient, same instances, same path, one thread.

For each Einsum Benchmark instance in crates/einsum/tests/data/ (or the files given), both
sides contract the same float64 operands along the instance's own path (``opt_flops`` by
default):

- forward: ``jax.jit`` of ``jnp.einsum(eq, *xs, optimize=path)`` against a compiled
  ``cgx.contract_expression``;
- value+gradient: ``jax.jit(jax.value_and_grad(sum of the contraction, all operands))``
  against ``ContractExpression.value_and_grad`` with a cotangent of ones (the same
  function's gradient).

Each column is the best of five calls after a warm-up, in milliseconds (JAX's results are
waited for with ``block_until_ready``). JAX's compile time (the first call's, both
functions) is printed beside it and excluded from its columns; ours (building and
compiling the expression, and its gradient on the first ``value_and_grad``) likewise.
The results of the two sides are compared (``max |diff| / max |x|``, value and gradients);
the script fails above 1e-8.

One thread on both sides: XLA's CPU client gets ``intra_op_parallelism_threads=1`` and no
Eigen thread pool, numpy's BLAS is pinned to one thread, and cgx runs sequentially. Run
it under ``taskset -c 0`` as well to keep both on one core.

    pip install ./python "jax[cpu]" opt_einsum
    taskset -c 0 python3 python/bench/compare_jax.py [--path opt_flops|opt_size] [FILE.json ...]
"""

import argparse
import importlib.util
import json
import os
import pathlib
import sys
import time

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS"):
    os.environ[var] = "1"
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import cgx  # noqa: E402

jax.config.update("jax_enable_x64", True)

ROOT = pathlib.Path(__file__).resolve().parents[2]
DATA = ROOT / "crates" / "einsum" / "tests" / "data"

# The operands and the timing are those of the command-line comparison, so the scripts
# measure the same thing.
_spec = importlib.util.spec_from_file_location("compare_einsum", ROOT / "benches" / "scripts" / "compare_einsum.py")
compare_einsum = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare_einsum)
operands, best_ms = compare_einsum.operands, compare_einsum.best_of_five


def rel_err(got, want):
    got, want = np.asarray(got), np.asarray(want)
    return float(np.max(np.abs(got - want), initial=0.0) / max(np.max(np.abs(want), initial=0.0), 1e-300))


def timed_ms(f):
    t = time.perf_counter()
    f()
    return (time.perf_counter() - t) * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", default="opt_flops", choices=["opt_flops", "opt_size"])
    parser.add_argument("files", nargs="*", type=pathlib.Path)
    args = parser.parse_args()
    files = args.files or sorted(DATA.glob("*.json"))
    print(f"jax {jax.__version__}, numpy {np.__version__}, cgx {cgx.__version__}; one thread, float64, ms, best of 5")
    print(
        f"{'instance':<42}{'fwd jax':>10}{'fwd cgx':>10}{'ratio':>7}"
        f"{'v+g jax':>10}{'v+g cgx':>10}{'ratio':>7}{'jax compile':>13}{'cgx compile':>13}  max rel diff"
    )
    rng = np.random.default_rng(0)
    for f in files:
        inst = json.loads(f.read_text())
        eq, shapes = inst["format_string"], [tuple(s) for s in inst["shapes"]]
        path = [tuple(p) for p in inst["paths"][args.path]["path"]]
        ops = operands(eq, shapes, rng)
        n = len(ops)

        def total(*xs, eq=eq, path=path):
            return jnp.sum(jnp.einsum(eq, *xs, optimize=path))

        fwd_jax = jax.jit(lambda *xs, eq=eq, path=path: jnp.einsum(eq, *xs, optimize=path))
        vg_jax = jax.jit(jax.value_and_grad(total, argnums=tuple(range(n))))
        jops = [jnp.asarray(x) for x in ops]
        jax_compile = timed_ms(lambda: fwd_jax(*jops).block_until_ready())
        jax_compile += timed_ms(lambda: jax.block_until_ready(vg_jax(*jops)))

        expr = None

        def build():
            nonlocal expr
            expr = cgx.contract_expression(eq, *shapes, optimize=path)

        cgx_compile = timed_ms(build)
        out_shape = expr(*ops).shape
        seed = np.ones(out_shape)
        cgx_compile += timed_ms(lambda: expr.value_and_grad(*ops, cotangent=seed))

        value, grads = expr.value_and_grad(*ops, cotangent=seed)
        jvalue, jgrads = vg_jax(*jops)
        err = max(
            rel_err(expr(*ops), fwd_jax(*jops)),
            rel_err(np.sum(value), jvalue),
            *(rel_err(g, jg) for g, jg in zip(grads, jgrads)),
        )
        if err > 1e-8:
            sys.exit(f"{f.name}: cgx and JAX disagree (max relative difference {err:.1e})")
        fj = best_ms(lambda: fwd_jax(*jops).block_until_ready())
        fc = best_ms(lambda: expr(*ops))
        gj = best_ms(lambda: jax.block_until_ready(vg_jax(*jops)))
        gc = best_ms(lambda: expr.value_and_grad(*ops, cotangent=seed))
        print(
            f"{inst.get('name', f.stem):<42}{fj:>10.3f}{fc:>10.3f}{fj / fc:>7.2f}"
            f"{gj:>10.3f}{gc:>10.3f}{gj / gc:>7.2f}{jax_compile:>13.1f}{cgx_compile:>13.1f}  {err:.1e}"
        )


if __name__ == "__main__":
    main()
