"""Element-wise products of one layout (``ij,ij->ij``): the forward call and the value and
gradients come from one pass that also says whether a result left float64's range
(``_core.Expression._call_checked``, ``_value_and_grad_checked``; ``cgx.contract`` through
``_core._contract_checked``), so ``strip_exponent=None`` does not read the results again.
Every other float64 expression's checked calls read their results on the call's threads,
right after writing them.

Against numpy (hypothesis): the value ``a * b`` and the gradients ``c * b`` and ``c * a``
exactly, for any ``wrt``; the range verdict against numpy's ``abs`` and ``max`` of each
result, with entries that overflow, underflow, are infinite or NaN; the automatic scaled
rerun where a result left the range; one thread and two, past the threshold of the
parallel pass, bit for bit."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cgx
from cgx import _core, _scaled

SETTINGS = settings(max_examples=60, deadline=None)

# Entries that make products overflow (1e200²), underflow to subnormals (1e-160²), or are
# not finite themselves.
SPECIALS = [1e200, -1e200, 1e-160, 5e-310, np.inf, -np.inf, np.nan, 0.0, -0.0]


def operands(shape, seed, specials):
    """Three arrays of ``shape`` (a, b and a cotangent) with ``specials`` placed at
    fractions of their length."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(3):
        x = rng.standard_normal(shape)
        flat = x.reshape(-1)
        for which, at, v in specials:
            if which == k and flat.size:
                flat[int(at * (flat.size - 1))] = v
        out.append(x)
    return out


def left_by_numpy(*xs):
    """``strip_exponent``'s test of each array by numpy's ``abs`` and ``max``."""
    for x in xs:
        if x.size == 0:
            continue
        m = np.abs(x).max()
        if not np.isfinite(m) or 0 < m < np.finfo(np.float64).tiny:
            return True
    return False


def same(x, y):
    """Equal values (NaN equal to NaN, ``-0`` to ``0``) and shapes."""
    return x.shape == y.shape and np.array_equal(x, y, equal_nan=True)


shapes = st.lists(st.integers(0, 9), min_size=0, max_size=3).map(tuple)
specials = st.lists(st.tuples(st.integers(0, 2), st.floats(0, 1), st.sampled_from(SPECIALS)), max_size=3)


@SETTINGS
@given(shape=shapes, seed=st.integers(0, 2**32 - 1), specials=specials)
def test_the_forward_call_and_its_verdict_equal_numpy(shape, seed, specials):
    a, b, _ = operands(shape, seed, specials)
    labels = "ijk"[: len(shape)]
    expr = cgx.contract_expression(f"{labels},{labels}->{labels}", shape, shape)
    with np.errstate(all="ignore"):
        want = a * b
    result, left = expr._call_checked(a, b)
    assert left is not None, "an element-wise product of float64 operands scans its result"
    assert same(result, want)
    assert left == left_by_numpy(want) == _scaled.left_range(result)
    assert same(expr(a, b, strip_exponent=False), want)
    # `cgx.contract`'s common path takes the same pass.
    result, contract_left = _core._contract_checked(f"{labels},{labels}->{labels}", (a, b))
    assert same(result, want) and contract_left == left


@SETTINGS
@given(
    shape=shapes,
    seed=st.integers(0, 2**32 - 1),
    specials=specials,
    wrt=st.sampled_from([None, 0, 1, [0], [1], [1, 0], [0, 0]]),
)
def test_value_gradients_and_verdict_equal_numpy(shape, seed, specials, wrt):
    a, b, c = operands(shape, seed, specials)
    labels = "ijk"[: len(shape)]
    expr = cgx.contract_expression(f"{labels},{labels}->{labels}", shape, shape)
    with np.errstate(all="ignore"):
        value_want, grads_want = a * b, (c * b, c * a)
    positions = [0, 1] if wrt is None else [wrt] if isinstance(wrt, int) else wrt
    value, grads, left = expr._value_and_grad_checked((a, b), positions, c)
    assert left is not None
    assert same(value, value_want)
    assert len(grads) == len(positions)
    for g, p in zip(grads, positions):
        assert same(g, grads_want[p])
    assert left == left_by_numpy(value, *grads) == _scaled.any_left_range(value, grads)
    value, grads = expr.value_and_grad(a, b, wrt=wrt, cotangent=c, strip_exponent=False)
    assert same(value, value_want)
    if isinstance(wrt, int):
        grads = (grads,) if not isinstance(grads, tuple) else grads
    for g, p in zip(grads, positions):
        assert same(g, grads_want[p])


def test_results_that_left_the_range_are_rerun_scaled():
    """Finite operands whose product overflows: the default ``strip_exponent=None`` gives
    ``(mantissa, exponent)`` for the value and the gradients that do not fit, arrays for
    the others, as the scaled contraction does on request."""
    a = np.full((4, 3), 1e200)
    b = np.full((4, 3), 1e150)
    c = np.ones((4, 3))
    expr = cgx.contract_expression("ij,ij->ij", (4, 3), (4, 3))
    m, e = expr(a, b)
    np.testing.assert_allclose(m * 10.0 ** (e - 350), np.full((4, 3), 1.0), rtol=1e-12)
    m2, e2 = cgx.contract("ij,ij->ij", a, b)
    assert np.array_equal(m2, m) and e2 == e
    value, (da, db) = expr.value_and_grad(a, b, cotangent=c)
    assert isinstance(value, tuple)
    np.testing.assert_array_equal(da, b)  # c * b fits
    np.testing.assert_array_equal(db, a)
    # A cotangent that makes both gradients overflow too.
    value, grads = expr.value_and_grad(a, b, cotangent=np.full((4, 3), 1e200))
    assert isinstance(value, tuple) and all(isinstance(g, tuple) for g in grads)
    # Operands not finite: the plain non-finite result, no rerun.
    a[0, 0] = np.inf
    assert np.isinf(expr(a, b)[0, 0])


@pytest.mark.parametrize("threads", [1, 2])
def test_past_the_parallel_threshold_threads_equal_one_bit_for_bit(threads):
    """``2^20 + 40`` elements (the pass cuts pieces over the call's threads), a special
    value in the last piece: value, gradients and verdicts equal numpy's and one thread's."""
    shape = (1025, 1024 + 40 // 1025 + 1)
    a, b, c = operands(shape, 7, [])
    expr = cgx.contract_expression("ij,ij->ij", shape, shape)
    for special in [None, np.inf, 5e-310]:
        if special is not None:
            c.reshape(-1)[-3] = special
        one_value, one_grads, one_left = expr._value_and_grad_checked((a, b), None, c)
        with cgx.threads(threads):
            value, grads, left = expr._value_and_grad_checked((a, b), None, c)
            result, fwd_left = expr._call_checked(a, b)
        assert np.array_equal(value, one_value) and np.array_equal(value, a * b)
        assert np.array_equal(result, a * b) and fwd_left is False
        for g, g1, want in zip(grads, one_grads, (c * b, c * a)):
            assert np.array_equal(g, g1, equal_nan=True) and np.array_equal(g, want, equal_nan=True)
        assert left == one_left == left_by_numpy(value, *grads) == (special == np.inf)


def test_other_expressions_give_the_verdict_from_the_call():
    """Products of another layout and sliced expressions take the compiled program: the
    call's threads read the results for the verdict, complex ones by their moduli (a
    modulus that overflows where no part does)."""
    x = np.ones((3, 4))
    assert cgx.contract_expression("ij,ji->ij", (3, 4), (4, 3))._call_checked(x, x.T)[1] is False
    expr = cgx.contract_expression("ij,ij->ij", (3, 4), (3, 4))
    assert expr._call_checked(x + 0j, x)[1] is False
    big = np.full((3, 4), 1.5e154 * (1 + 1j))
    assert expr._call_checked(big, x * 1e154)[1] is True
    sliced = cgx.contract_expression("ij,ij->ij", (3, 4), (3, 4), sliced_inds=["i"])
    value, _, left = sliced._value_and_grad_checked((x, x), None, x)
    assert left is False and np.array_equal(value, x)
    value, _, left = sliced._value_and_grad_checked((x + 0j, x), None, x)
    assert left is False
    _, _, left = sliced._value_and_grad_checked((big, x * 1e154), None, x)
    assert left is True


@SETTINGS
@given(
    dims=st.tuples(st.integers(1, 9), st.integers(1, 9), st.integers(1, 9)),
    large=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
    specials=specials,
    threads=st.sampled_from([1, 2]),
)
def test_a_matrix_product_s_verdict_equals_numpy(dims, large, seed, specials, threads):
    """``ik,kj->ij`` through the compiled program, small and past the pool's thresholds
    (``large``: over ``2^20`` multiply-adds and ``2^17`` result entries, so that two
    threads read the result in parts): the verdicts of the forward call and of value and
    gradients equal numpy's of the results, which equal numpy's products."""
    m, n, k = dims
    if large:
        m, n, k = 370 + 20 * m, 370 + 20 * n, k + 8
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s) for s in ((m, k), (k, n), (m, n))]
    for which, at, v in specials:
        flat = arrays[which].reshape(-1)
        flat[int(at * (flat.size - 1))] = v
    a, b, c = arrays
    expr = cgx.contract_expression("ik,kj->ij", a.shape, b.shape)
    with np.errstate(all="ignore"), cgx.threads(threads):
        result, left = expr._call_checked(a, b)
        value, grads, vg_left = expr._value_and_grad_checked((a, b), None, c)
        want = a @ b
    assert left is not None and vg_left is not None
    assert left == left_by_numpy(result) == _scaled.left_range(result)
    assert vg_left == left_by_numpy(value, *grads) == _scaled.any_left_range(value, grads)
    finite = np.isfinite(want)
    np.testing.assert_allclose(result[finite], want[finite], rtol=1e-10, atol=1e-300)
