"""Element-wise products other than ``ij,ij->ij`` of float64: broadcasts (``ij,j->ij``,
``ijk,jk->ijk``), permuted layouts (``ij,ji->ij``) of float64 or complex operands, whose
checked calls (``strip_exponent=None``) run ``einsum::ElementwiseProduct`` and scan each
result as it is written; outer products (``bi,bj->bij``), which the same calls leave to
the compiled program (``ElementwiseProduct::beats_the_program``), held to the same
checks; and the product of three float64 operands of one layout (``ij,ij,ij->ij``),
value and gradients in one pass (``einsum::Hadamard3``).

Against numpy (hypothesis): each value exactly (NaN equal to NaN, either zero to zero),
the gradients against the compiled program's unchecked call and, for float64, numpy's
products and sums; every verdict against numpy's ``abs`` and ``max`` of the results,
with entries that overflow, underflow, are infinite or NaN; one thread and two past the
pool's threshold, element-wise results bit for bit (NaNs' signs and payloads too where
three operands meet)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cgx

SETTINGS = settings(max_examples=40, deadline=None)

SPECIALS = [1e200, -1e200, 1e-160, 5e-310, np.inf, -np.inf, np.nan, 0.0, -0.0]

# (expression, operand shapes from sizes i, j, k)
PRODUCTS = [
    ("ij,j->ij", lambda i, j, k: [(i, j), (j,)]),
    ("ij,i->ij", lambda i, j, k: [(i, j), (i,)]),
    ("ij,ji->ij", lambda i, j, k: [(i, j), (j, i)]),
    ("ijk,jk->ijk", lambda i, j, k: [(i, j, k), (j, k)]),
    ("bi,bj->bij", lambda i, j, k: [(k, i), (k, j)]),
    ("i,j->ji", lambda i, j, k: [(i,), (j,)]),
]


def arrays(shapes, seed, specials, dtype):
    """Arrays of ``shapes`` with ``specials`` placed at fractions of their length."""
    rng = np.random.default_rng(seed)
    out = []
    for n, shape in enumerate(shapes):
        x = rng.standard_normal(shape)
        if dtype == "complex":
            x = x + 1j * rng.standard_normal(shape)
        flat = x.reshape(-1)
        for which, at, v in specials:
            if which == n and flat.size:
                flat[int(at * (flat.size - 1))] = v
        out.append(x)
    return out


def left_by_numpy(*xs):
    """``strip_exponent``'s test of each array by numpy's ``abs`` and ``max``."""
    for x in xs:
        if x.size == 0:
            continue
        with np.errstate(all="ignore"):
            m = np.abs(x).max()
        if not np.isfinite(m) or 0 < m < np.finfo(np.float64).tiny:
            return True
    return False


def same(x, y):
    return x.shape == y.shape and np.array_equal(x, y, equal_nan=True)


def bits(x):
    """The bits of a float64 or complex128 array: NaNs' signs and payloads count."""
    return np.ascontiguousarray(x).view(np.uint64)


def same_bits(x, y):
    return x.shape == y.shape and x.dtype == y.dtype and np.array_equal(bits(x), bits(y))


def close(x, y):
    """Equal to rounding (sums formed in another order), specials in the same places."""
    if x.shape != y.shape:
        return False
    with np.errstate(all="ignore"):
        return bool(np.all(np.isclose(x, y, rtol=1e-12, atol=1e-300, equal_nan=True)))


specials = st.lists(st.tuples(st.integers(0, 2), st.floats(0, 1), st.sampled_from(SPECIALS)), max_size=3)


@SETTINGS
@given(
    product=st.sampled_from(PRODUCTS),
    sizes=st.tuples(st.integers(0, 7), st.integers(0, 7), st.integers(0, 4)),
    seed=st.integers(0, 2**32 - 1),
    specials=specials,
    dtype=st.sampled_from(["float", "complex"]),
    cotangent=st.sampled_from(["tensor", "one", "scalar"]),
    wrt=st.sampled_from([None, [0], [1], [1, 0]]),
)
def test_products_that_sum_nothing_equal_numpy_and_the_program(product, sizes, seed, specials, dtype, cotangent, wrt):
    eq, shapes_of = product
    shapes = shapes_of(*sizes)
    a, b = arrays(shapes, seed, specials, dtype)
    expr = cgx.contract_expression(eq, *shapes)
    with np.errstate(all="ignore"):
        want = np.einsum(eq, a, b)
    result, left = expr._call_checked(a, b)
    assert same(result, want)
    assert left == left_by_numpy(want)
    out_shape = want.shape
    c = {"tensor": arrays([out_shape], seed + 1, [], dtype)[0], "one": 1.0, "scalar": -0.75}[cotangent]
    c = np.asarray(c, dtype=want.dtype)
    positions = [0, 1] if wrt is None else wrt
    with np.errstate(all="ignore"):
        value, grads, vg_left = expr._value_and_grad_checked((a, b), positions, c)
        program_value, program_grads = expr._value_and_grad((a, b), positions, c)
    assert same(value, want) and same(program_value, want)
    assert len(grads) == len(positions)
    for g, p in zip(grads, positions):
        assert close(g, program_grads[positions.index(p)])
    assert vg_left == left_by_numpy(value, *grads)
    if dtype == "float":
        # The gradients of ⟨c, a·b⟩: the cotangent times the other operand, summed over
        # the labels the operand lacks.
        ins, out = eq.split("->")
        la, lb = ins.split(",")
        full = np.broadcast_to(c, out_shape)
        with np.errstate(all="ignore"):
            want_grads = [np.einsum(f"{out},{lb}->{la}", full, b), np.einsum(f"{out},{la}->{lb}", full, a)]
        for g, p in zip(grads, positions):
            assert close(g, want_grads[p])


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("eq", ["ij,j->ij", "ij,i->ij", "ij,ji->ij"])
def test_past_the_parallel_threshold_threads_equal_one(eq, threads):
    """``2^20`` elements and more (the kernel cuts rows over the call's threads, each
    scanned in units as written), a special in the last rows: values and the gradients of
    the operand with every label bit for bit as one thread's, the broadcast operand's to
    rounding, verdicts equal."""
    n = 1024
    shapes = dict(PRODUCTS)[eq](n + 3, n, 1)
    a, b = arrays(shapes, 11, [], "float")
    for special in [None, np.inf, 5e-310]:
        if special is not None:
            a.reshape(-1)[-5] = special
        expr = cgx.contract_expression(eq, *shapes)
        with cgx.threads(1):
            one = expr._call_checked(a, b)
            one_vg = expr._value_and_grad_checked((a, b), None, np.asarray(1.0))
        with cgx.threads(threads):
            result, left = expr._call_checked(a, b)
            value, grads, vg_left = expr._value_and_grad_checked((a, b), None, np.asarray(1.0))
        with np.errstate(all="ignore"):
            want = np.einsum(eq, a, b)
        assert same(result, want) and same_bits(result, one[0]) and left == one[1] == left_by_numpy(want)
        assert same_bits(value, one_vg[0]) and same_bits(grads[0], one_vg[1][0])
        assert close(grads[1], one_vg[1][1])
        assert vg_left == one_vg[2] == left_by_numpy(value, *grads)


shapes3 = st.lists(st.integers(0, 9), min_size=0, max_size=3).map(tuple)


@SETTINGS
@given(
    shape=shapes3,
    seed=st.integers(0, 2**32 - 1),
    specials=specials,
    wrt=st.sampled_from([None, [0], [2], [2, 0], [1, 1]]),
    cotangent=st.sampled_from(["tensor", "one", "scalar"]),
)
def test_three_operands_of_one_layout_equal_numpy(shape, seed, specials, wrt, cotangent):
    """``ij,ij,ij->ij``: the value ``(a·b)·d`` exactly as numpy forms it left to right, and
    the gradients ``c·(b·d)``, ``c·(a·d)``, ``c·(a·b)`` exactly as numpy forms them in that
    order (NaN equal to NaN), specials included; every verdict against numpy's."""
    labels = "ijk"[: len(shape)]
    eq = f"{labels},{labels},{labels}->{labels}"
    a, b, d, ct = arrays([shape] * 4, seed, specials, "float")
    expr = cgx.contract_expression(eq, shape, shape, shape)
    with np.errstate(all="ignore"):
        want = a * b * d
    result, left = expr._call_checked(a, b, d)
    assert left is not None and same(result, want)
    assert left == left_by_numpy(want)
    assert same(expr(a, b, d, strip_exponent=False), want)
    c = np.asarray({"tensor": ct, "one": 1.0, "scalar": -0.75}[cotangent])
    positions = [0, 1, 2] if wrt is None else wrt
    with np.errstate(all="ignore"):
        value, grads, vg_left = expr._value_and_grad_checked((a, b, d), positions, c)
        full = np.broadcast_to(c, shape)
        want_grads = [full * (b * d), full * (a * d), full * (a * b)]
    assert same(value, want)
    for g, p in zip(grads, positions):
        assert same(g, want_grads[p])
    assert vg_left == left_by_numpy(value, *grads)


@pytest.mark.parametrize("threads", [1, 2])
def test_three_operands_past_the_parallel_threshold(threads):
    """Past the pool's threshold, the value and gradients on ``threads`` threads have one
    thread's bits, where NaNs of two signs meet in the products too (a product of two
    NaNs keeps one of them); values as numpy's, verdicts as expected."""
    shape = (1025, 1030)
    a, b, d, c = arrays([shape] * 4, 5, [(3, 0.999, np.inf)], "float")
    expr = cgx.contract_expression("ij,ij,ij->ij", shape, shape, shape)
    for nans in [False, True]:
        if nans:
            # A row of NaNs of both signs in each operand, meeting in every product.
            for k, x in enumerate([a, b, d, c]):
                x[700, k :: 2] = np.nan
                x[700, k + 1 :: 2] = -np.nan
        with cgx.threads(1):
            one = expr._value_and_grad_checked((a, b, d), None, c)
            one_value, _ = expr._call_checked(a, b, d)
        with cgx.threads(threads):
            result, left = expr._call_checked(a, b, d)
            value, grads, vg_left = expr._value_and_grad_checked((a, b, d), None, c)
        with np.errstate(all="ignore"):
            assert same(result, a * b * d) and left is nans
            assert same_bits(result, one_value)
            assert same_bits(value, one[0]) and all(same_bits(g, g1) for g, g1 in zip(grads, one[1]))
            for g, want in zip(grads, [c * (b * d), c * (a * d), c * (a * b)]):
                assert same(g, want)
        assert vg_left is True and one[2] is True
