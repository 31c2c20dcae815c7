"""Operands are read in place when C-contiguous, aligned and of the contraction's dtype,
copied otherwise: every layout gives numpy's answer, results never alias operands, and
operands are never written; a C-contiguous operand is not copied and a result is not
copied out (peak memory of a fresh process)."""

import numpy as np
import pytest

import cgx


def layouts(a):
    """``a`` in many layouts, all equal to it."""
    n = a.size * a.itemsize
    raw = np.frombuffer(bytearray(n + 1), dtype=np.uint8)[1:]  # unaligned by one byte
    unaligned = raw.view(a.dtype).reshape(a.shape)
    unaligned[...] = a
    assert not unaligned.flags.aligned
    big = np.zeros((a.shape[0] * 2, a.shape[1] * 3), dtype=a.dtype)
    big[::2, ::3] = a
    return {
        "c": np.ascontiguousarray(a),
        "fortran": np.asfortranarray(a),
        "strided": big[::2, ::3],
        "transposed": np.ascontiguousarray(a.T).T,
        "unaligned": unaligned,
        "readonly": np.frombuffer(a.tobytes(), dtype=a.dtype).reshape(a.shape),
        "float32": a.astype(np.float32) if a.dtype == np.float64 else a,
    }


@pytest.mark.parametrize("complex_", [False, True])
def test_every_layout_gives_numpys_answer(complex_):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 4))
    b = rng.standard_normal((4, 3))
    if complex_:
        b = b + 1j * rng.standard_normal((4, 3))
    for name_a, x in layouts(a).items():
        for name_b, y in layouts(b).items():
            before = (x.copy(), y.copy())
            got = cgx.contract("ij,jk->ik", x, y)
            np.testing.assert_allclose(got, np.asarray(x, dtype=np.float64) @ y, rtol=1e-6 if "float32" in (name_a, name_b) else 1e-13, err_msg=f"{name_a} {name_b}")
            assert got.flags.c_contiguous and got.flags.writeable
            np.testing.assert_array_equal(x, before[0])
            np.testing.assert_array_equal(y, before[1])


def test_results_never_alias_operands() -> None:
    a = np.arange(6.0).reshape(2, 3)
    for eq in ["ij->ij", "ij", "ij->ji"]:
        out = cgx.contract(eq, a)
        assert not np.shares_memory(out, a)
        out[...] = -1
        np.testing.assert_array_equal(a, np.arange(6.0).reshape(2, 3))
    expr = cgx.contract_expression("ij,jk->ik", (2, 3), (3, 3))
    eye = np.eye(3)
    value, (ga, gb) = expr.value_and_grad(a, eye, cotangent=a)
    for g in (value, ga, gb):
        assert not np.shares_memory(g, a) and not np.shares_memory(g, eye)


def test_an_operand_outlives_nothing() -> None:
    # The engine's tensors over an operand's memory die with the call: the operand can be
    # resized afterwards (numpy refuses while another reference holds it).
    a = np.ones((4, 4))
    cgx.contract("ij,jk->ik", a, a)
    a.resize((2, 2), refcheck=True)
    assert a.shape == (2, 2)


def test_large_results_hand_their_memory_back_to_the_pool() -> None:
    # A result of at least the pool's minimum size is held by the einsum crate's pooled
    # allocation: writable, correct, and reused by the next call once it is dropped.
    a = np.random.default_rng(0).random((128, 128))
    r = cgx.contract("ij,jk->ik", a, a)
    assert type(r.base).__name__ == "PooledData"
    assert r.flags.writeable and r.flags.c_contiguous
    np.testing.assert_allclose(r, a @ a, rtol=1e-12)
    address = r.__array_interface__["data"][0]
    r[0, 0] = -1.0  # the elements are the array's own
    assert r[0, 0] == -1.0
    del r
    again = cgx.contract("ij,jk->ik", a, a)
    assert again.__array_interface__["data"][0] == address
    np.testing.assert_allclose(again, a @ a, rtol=1e-12)
    # Small results are plain numpy-owned vectors.
    assert type(cgx.contract("ij,jk->ik", a[:2, :2], a[:2, :2]).base).__name__ != "PooledData"


# Run in a fresh process: contracts a 32 MiB operand after a small warm-up and prints
# how much the process's peak resident memory grew meanwhile (MiB), and where the
# result's memory comes from.
_PEAK_PROBE = r"""
import sys
import numpy as np
import cgx


# The process's peak resident memory in KiB (Linux; unlike ru_maxrss, which a child
# inherits from its parent across exec, it starts afresh).
def peak():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))


order, eq = sys.argv[1], sys.argv[2]
a = np.ones((2048, 2048), order=order)
ops = (a,) if "," not in eq else (a, np.ones(2048))
cgx.contract(eq, *[np.ones((8,) * x.ndim, order=order) for x in ops])
before = peak()
out = cgx.contract(eq, *ops)
after = peak()
base = out
while isinstance(base, np.ndarray):
    base = base.base
print((after - before) / 1024, type(base).__name__, np.shares_memory(out, a))
"""


def _peak_growth(order, eq):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _PEAK_PROBE, order, eq], capture_output=True, text=True, check=True)
    grew, base, shares = out.stdout.split()
    return float(grew), base, shares == "True"


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="reads VmHWM of /proc/self/status")
def test_c_contiguous_operands_are_read_in_place_and_results_are_not_copied_out() -> None:
    mib = 32  # the operand: 2048 x 2048 float64
    # A reduction of a C-contiguous operand: nothing as large as the operand is allocated.
    grew, base, shares = _peak_growth("C", "ij->i")
    assert grew < mib / 4, grew
    # The same operand in Fortran order is copied once in row-major order.
    grew, _, _ = _peak_growth("F", "ij->i")
    assert grew > 0.9 * mib, grew
    # An output as large as the operand costs its own size only: the engine's buffer
    # becomes the array's (its memory belongs to a Rust object, not to an ndarray), no
    # copy on the way out, and it does not alias the operand.
    grew, base, shares = _peak_growth("C", "ij,j->ij")
    assert 0.9 * mib < grew < 1.25 * mib, grew
    assert base == "PooledData" and not shares  # the einsum crate's pooled allocation
