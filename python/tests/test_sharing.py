"""``cgx.shared_intermediates`` (opt_einsum's): contractions inside it equal numpy's and
opt_einsum's, steps over the same arrays are computed once (counted by wrapping the step
function), changing a result in place leaves the cache as it was, and contexts nest and
stay in their thread."""

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cgx
from cgx import _numpy
from strategies import arrays, expressions, numpy_expressions

oe = pytest.importorskip("opt_einsum")


@pytest.fixture
def steps(monkeypatch):
    """The subscripts of every step a shared contraction computes, in order."""
    done = []
    step = _numpy.contract_typed

    def counted(eq, operands, *rest):
        done.append(eq)
        return step(eq, operands, *rest)

    monkeypatch.setattr(_numpy, "contract_typed", counted)
    return done


@settings(max_examples=150, deadline=None)
@given(expressions(max_operands=5), st.integers(0, 2**32 - 1), st.booleans())
def test_shared_contractions_equal_numpy_and_opt_einsum(expr, seed, complex_):
    eq, shapes = expr
    ops = arrays(np.random.default_rng(seed), shapes, complex_)
    expected = np.einsum(eq, *ops)
    with cgx.shared_intermediates() as cache:
        first = cgx.contract(eq, *ops)
        again = cgx.contract(eq, *ops)  # every step from the cache
        called = cgx.contract_expression(eq, *shapes)(*ops)
    with oe.shared_intermediates():
        theirs = oe.contract(eq, *ops)
    for got in (first, again, called):
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(got, theirs, rtol=1e-10, atol=1e-12)
    assert all(k[0] in ("tensor", "einsum") for k in cache)


@settings(max_examples=100, deadline=None)
@given(numpy_expressions(max_operands=4), st.integers(0, 2**32 - 1))
def test_shared_contractions_follow_numpys_semantics(expr, seed):
    # Ellipses, broadcasting, diagonals, explicit paths of 1- to 3-operand steps.
    eq, shapes, path = expr
    ops = arrays(np.random.default_rng(seed), shapes)
    # numpy's plain loop refuses an explicit output that leaves the ellipsis out; its
    # optimized path sums those axes, as cgx does.
    expected = np.einsum(eq, *ops, optimize=True)
    with cgx.shared_intermediates():
        for _ in range(2):
            np.testing.assert_allclose(cgx.contract(eq, *ops, optimize=path), expected, rtol=1e-10, atol=1e-12)


def test_a_step_over_the_same_arrays_is_computed_once(steps):
    rng = np.random.default_rng(0)
    a, b, c, d = (rng.standard_normal((3, 3)) for _ in range(4))
    path = [(0, 1), (0, 1)]
    with cgx.shared_intermediates():
        cgx.contract("ab,bc,cd->ad", a, b, c, optimize=path)
        assert len(steps) == 2
        # a·b again, with its labels renamed.
        y = cgx.contract("xy,yz,zw->xw", a, b, d, optimize=path)
        assert len(steps) == 3
        np.testing.assert_allclose(y, a @ b @ d, rtol=1e-12)
        # Equal contents are not the same array: computed again.
        cgx.contract("ab,bc,cd->ad", a.copy(), b, c, optimize=path)
        assert len(steps) == 5
        # A matrix-vector step, its operands given in the other order (same result axes).
        v, w = rng.standard_normal(3), rng.standard_normal(3)
        cgx.contract("ab,b,a->", a, v, w, optimize=path)
        assert len(steps) == 7
        z = cgx.contract("b,ab,a->", v, a, d[0], optimize=path)
        assert len(steps) == 8
        np.testing.assert_allclose(z, d[0] @ a @ v, rtol=1e-12)
    # Outside the context the contraction is one call, not steps.
    cgx.contract("ab,bc,cd->ad", a, b, c, optimize=path)
    assert steps[8:] == ["ab,bc,cd->ad"]


def test_an_expression_shares_with_contract(steps):
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal((2, 4)), rng.standard_normal((4, 3)), rng.standard_normal((3,)))
    expr = cgx.contract_expression("ij,jk,k->i", a.shape, b.shape, c.shape, optimize=[(0, 1), (0, 1)])
    with cgx.shared_intermediates():
        x = cgx.contract("ij,jk,k->i", a, b, c, optimize=[(0, 1), (0, 1)])
        y = expr(a, b, c)
        out = np.empty(2)
        assert expr(a, b, c, out=out) is out
    assert len(steps) == 2
    for got in (x, y, out):
        np.testing.assert_allclose(got, a @ b @ c, rtol=1e-12)
    with pytest.raises(ValueError, match="shape error"), cgx.shared_intermediates():
        expr(a, b, np.ones(4))


def test_changing_a_result_in_place_leaves_the_cache_as_it_was() -> None:
    a, b = np.arange(6.0).reshape(2, 3), np.arange(3.0)
    with cgx.shared_intermediates():
        r = cgx.contract("ij,j->i", a, b)
        r[:] = -1.0
        np.testing.assert_array_equal(cgx.contract("ij,j->i", a, b), a @ b)


def test_integer_operands_are_exact_when_shared() -> None:
    a = np.array([[2**40, 3], [5, 7]], dtype=np.int64)
    b = np.array([[11, 13], [17, 2**20]], dtype=np.int64)
    with cgx.shared_intermediates():
        got = cgx.contract("ij,jk,kl->il", a, b, a)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, np.einsum("ij,jk,kl->il", a, b, a))


def test_contexts_nest_and_take_a_cache(steps):
    a, b = np.ones((2, 2)), np.ones((2, 2))
    with cgx.shared_intermediates() as outer:
        cgx.contract("ij,jk->ik", a, b)
        with cgx.shared_intermediates() as inner:
            assert inner is not outer
            cgx.contract("ij,jk->ik", a, b)  # the inner cache is empty: computed
        assert len(steps) == 2 and len(inner) == len(outer)
        # A cache from an earlier context, given again.
        with cgx.shared_intermediates(inner) as same:
            assert same is inner
            cgx.contract("ij,jk->ik", a, b)
        assert len(steps) == 2


def test_a_context_stays_in_its_thread(steps):
    a, b = np.ones((2, 2)), np.ones((2, 2))
    entered, done = threading.Event(), threading.Event()

    def other():
        entered.wait()
        cgx.contract("ij,jk->ik", a, b)  # not in a context: the engine, no step counted
        done.set()

    t = threading.Thread(target=other)
    t.start()
    with cgx.shared_intermediates() as cache:
        entered.set()
        done.wait()
        assert steps == [] and cache == {}
    t.join()


def test_sliced_contractions_are_not_shared(steps):
    a, b = np.ones((4, 4)), np.ones((4, 4))
    with cgx.shared_intermediates() as cache:
        got = cgx.contract("ij,jk->ik", a, b, sliced_inds=["j"])
    np.testing.assert_allclose(got, a @ b)
    assert cache == {}
