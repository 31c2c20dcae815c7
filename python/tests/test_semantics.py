"""numpy's einsum semantics (ellipses, size-1 broadcasting, diagonals, implicit output) and
paths whose steps contract one, two or more operands, against numpy.einsum; the built-in
path searches; gradients of broadcast contractions by exact differences."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cgx
from strategies import arrays, numpy_expressions

SETTINGS = settings(max_examples=150, deadline=None)


def numpy_einsum(eq, *ops):
    # numpy's plain loop refuses an explicit output that leaves the ellipsis out; its
    # optimized path sums those axes, as cgx does.
    return np.einsum(eq, *ops, optimize=True)


@SETTINGS
@given(case=numpy_expressions(), complex_=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_numpy_syntax_matches_numpy(case, complex_, seed):
    eq, shapes, path = case
    ops = arrays(np.random.default_rng(seed), shapes, complex_)
    want = numpy_einsum(eq, *ops)
    for optimize in ["greedy", path, "optimal", "dp", "random-greedy", "auto"]:
        got = cgx.contract(eq, *ops, optimize=optimize)
        assert got.shape == np.shape(want), (eq, optimize)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10, err_msg=f"{eq} {optimize}")
    expr = cgx.contract_expression(eq, *shapes, optimize=path)
    np.testing.assert_allclose(expr(*ops), want, rtol=1e-10, atol=1e-10)
    p, info = cgx.contract_path(eq, *shapes, shapes=True, optimize=path)
    assert len(p) == len(shapes) - 1


@settings(max_examples=60, deadline=None)
@given(case=numpy_expressions(max_operands=3), seed=st.integers(0, 2**32 - 1))
def test_broadcast_gradients_by_exact_differences(case, seed):
    # <c, f(x + t e_i) - f(x)> = <grad_i, t>: f is linear in each operand.
    eq, shapes, path = case
    rng = np.random.default_rng(seed)
    ops = arrays(rng, shapes)
    expr = cgx.contract_expression(eq, *shapes, optimize=path)
    value = expr(*ops)
    c = rng.standard_normal(np.shape(value))
    _, grads = expr.value_and_grad(*ops, cotangent=c)
    for i, (x, g) in enumerate(zip(ops, grads)):
        assert g.shape == x.shape
        t = rng.standard_normal(x.shape)
        moved = list(ops)
        moved[i] = x + t
        lhs = np.sum(c * (expr(*moved) - value))
        np.testing.assert_allclose(lhs, np.sum(g * t), rtol=1e-9, atol=1e-9)


def test_documented_cases() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 1, 3, 4)), rng.standard_normal((5, 4, 2))
    np.testing.assert_allclose(cgx.contract("...ij,...jk->...ik", a, b), np.einsum("...ij,...jk->...ik", a, b))
    m, v = rng.standard_normal((3, 1)), rng.standard_normal(4)
    np.testing.assert_allclose(cgx.contract("ij,j->i", m, v), np.einsum("ij,j->i", m, v))
    x = rng.standard_normal((2, 3, 3))
    np.testing.assert_allclose(cgx.contract("...ii->...i", x), np.einsum("...ii->...i", x))
    # A three-operand step, then the path as given back.
    ops = [rng.standard_normal(s) for s in [(2, 3), (3, 4), (4, 5), (5, 2)]]
    path = [(0, 1, 2), (0, 1)]
    np.testing.assert_allclose(cgx.contract("ij,jk,kl,li->", *ops, optimize=path), np.einsum("ij,jk,kl,li->", *ops))


def test_searches_beat_greedy_on_a_matrix_chain() -> None:
    dims = [10, 100, 5, 80, 3, 60, 2, 90, 4]
    shapes = [(dims[i], dims[i + 1]) for i in range(8)]
    eq = ",".join("abcdefghi"[i : i + 2] for i in range(8)) + "->ai"
    cost = {}
    for optimize in ["greedy", "optimal", "dp", "random-greedy", "auto"]:
        _, info = cgx.contract_path(eq, *shapes, shapes=True, optimize=optimize)
        cost[optimize] = info.opt_cost
    assert cost["optimal"] <= min(cost.values())
    assert cost["dp"] == cost["optimal"]
    assert cost["random-greedy"] <= cost["greedy"]


@pytest.mark.parametrize(
    "eq, shapes, message",
    [
        ("...a...,a", [(2,), (2,)], "two ellipses"),
        ("a..,a", [(2,), (2,)], "not part of an ellipsis"),
        ("...i,...i", [(2, 3), (4, 3)], "sizes must agree or be 1"),
        ("ii", [(1, 3)], "is repeated in operand 0"),
        ("ab...c", [(2, 3)], "named labels besides its ellipsis"),
    ],
)
def test_bad_numpy_syntax_is_a_value_error(eq, shapes, message):
    ops = [np.ones(s) for s in shapes]
    with pytest.raises(ValueError, match=message):
        cgx.contract(eq, *ops)


@pytest.mark.parametrize(
    "path, message",
    [([(0, 1, 3)], "out of range"), ([(0, 0), (0, 1)], "names position 0 twice"), ([(), (0, 1, 2)], "is empty")],
)
def test_bad_multi_operand_paths(path, message):
    ops = [np.ones(2)] * 3
    with pytest.raises(ValueError, match=message):
        cgx.contract("a,a,a->", *ops, optimize=path)
