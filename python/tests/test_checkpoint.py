"""value_and_grad(..., checkpoint=target): the reverse pass within a byte target, forward
intermediates recomputed where keeping them would not fit (the einsum crate's
``Einsum::gradient_within``).

Checked: on random expressions, a target either gives the plain value and gradients or
raises ``MemoryError``; on a chain whose intermediates dwarf its operands, a target below
the plain gradient's memory gives the same gradients, and the process's peak resident
memory grows by less than the target (measured in a fresh interpreter), where the plain
gradient's grows by more.
"""

import json
import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cgx
from strategies import arrays, expressions

SETTINGS = settings(max_examples=60, deadline=None)


@SETTINGS
@given(
    case=expressions(explicit=True),
    complex_=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
    target=st.sampled_from([0, 64, 1024, 4096, "16KiB", "1GiB", "none"]),
)
def test_a_target_gives_the_plain_gradients_or_a_memory_error(case, complex_, seed, target):
    eq, shapes = case
    rng = np.random.default_rng(seed)
    ops = arrays(rng, shapes, complex_)
    expr = cgx.contract_expression(eq, *shapes)
    c = arrays(rng, [np.shape(np.einsum(eq, *ops))], complex_)[0]
    want_value, want = expr.value_and_grad(*ops, cotangent=c)
    try:
        value, grads = expr.value_and_grad(*ops, cotangent=c, checkpoint=target)
    except MemoryError as e:
        # Only a finite target is refused, and it says so.
        assert target not in ("1GiB", "none"), e
        assert "recomputed" in str(e)
        return
    np.testing.assert_allclose(value, np.einsum(eq, *ops), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(value, want_value, rtol=1e-12, atol=1e-12)
    assert len(grads) == len(want)
    for g, w in zip(grads, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def chain(m: int, n: int) -> tuple[str, list[tuple[int, ...]], list[tuple[int, int]]]:
    """``U0·V0·U1·V1·…`` closed by two vectors, contracted left to right: ``m``
    intermediates of ``n x n``, each the outer product of two vectors (the peak test's
    chain). (With ``n x 4`` operands sharing a summed label, the reverse pass contracts the
    gradients around each ``n x n`` expansion without keeping it.)"""
    terms: list[str] = []
    shapes: list[tuple[int, ...]] = []
    for k in range(m):
        x, y = chr(97 + k), chr(98 + k)
        terms += [x, y]
        shapes += [(n,), (n,)]
    terms += [chr(97 + m), "a"]
    shapes += [(n,), (n,)]
    path = [(0, 1)] + [(0, length - 1) for length in range(len(terms) - 1, 1, -1)]
    return ",".join(terms) + "->", shapes, path


def test_a_checkpointed_chain_equals_the_plain_gradients() -> None:
    eq, shapes, path = chain(4, 64)
    rng = np.random.default_rng(7)
    ops = arrays(rng, shapes)
    expr = cgx.contract_expression(eq, *shapes, optimize=path)
    want_value, want = expr.value_and_grad(*ops)
    # Four 32 KiB intermediates: every target from keeping all to the least that fits.
    results = []
    targets: list[int | str] = ["1MiB", 200_000, 160_000, 140_000, 120_000, 100_000]
    for target in targets:
        try:
            results.append(expr.value_and_grad(*ops, checkpoint=target))
        except MemoryError:
            continue
    assert len(results) >= 3
    for value, grads in results:
        np.testing.assert_allclose(value, want_value, rtol=1e-12)
        for g, w in zip(grads, want):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12 * np.abs(w).max())


def test_bad_targets_and_sliced_expressions_are_errors() -> None:
    eq, shapes, path = chain(2, 8)
    ops = arrays(np.random.default_rng(1), shapes)
    expr = cgx.contract_expression(eq, *shapes, optimize=path)
    with pytest.raises(ValueError, match="checkpoint"):
        expr.value_and_grad(*ops, checkpoint="2 parsecs")
    with pytest.raises(TypeError, match="checkpoint"):
        expr.value_and_grad(*ops, checkpoint=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="checkpoint"):
        expr.value_and_grad(*ops, checkpoint=-1)
    with pytest.raises(ValueError, match="strip_exponent"):
        expr.value_and_grad(*ops, checkpoint="1GiB", strip_exponent=True)
    sliced = cgx.contract_expression(eq, *shapes, optimize=path, sliced_inds=["b"])
    with pytest.raises(ValueError, match="sliced"):
        sliced.value_and_grad(*ops, checkpoint="1GiB")


MEASURE = """
import json, sys
import numpy as np

def peak():
    # The peak resident memory of this process image, in bytes: /proc's VmHWM belongs to
    # the address space made at exec. (getrusage's ru_maxrss does not: Linux carries the
    # forking parent's peak across exec, so under a large pytest process it stayed flat.)
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))

import cgx
sys.path.insert(0, {tests!r})
from test_checkpoint import chain
eq, shapes, path = chain({m}, {n})
rng = np.random.default_rng(3)
ops = [rng.random(s) for s in shapes]
expr = cgx.contract_expression(eq, *shapes, optimize=path)
small = rng.random((256, 256))
cgx.contract("ij,jk->ik", small, small)  # the GEMM's per-thread workspace, once
target = {target!r}
before = peak()
value, grads = expr.value_and_grad(*ops, checkpoint=target, threads=1) if target else expr.value_and_grad(*ops, threads=1)
after = peak()
print(json.dumps({{"grown": after - before, "value": float(value)}}))
"""


def peak_growth(m: int, n: int, target: int | None) -> dict[str, Any]:
    """The growth of peak resident memory (bytes) of one value_and_grad of ``chain(m, n)``
    in a fresh interpreter, with ``checkpoint=target`` (plain if ``None``)."""
    code = MEASURE.format(tests=os.path.dirname(__file__), m=m, n=n, target=target)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the peak from Linux's /proc")
def test_the_measured_peak_stays_under_the_target() -> None:
    # Six 8 MiB intermediates (1024 x 1024): the plain reverse pass holds them all.
    m, n, target = 6, 1024, 40 << 20
    plain = peak_growth(m, n, None)
    assert plain["grown"] > target, plain
    got = peak_growth(m, n, target)
    assert got["grown"] <= target, (got, plain)
    assert got["value"] == pytest.approx(plain["value"], rel=1e-12)
