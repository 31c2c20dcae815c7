"""numpy's keywords of ``contract`` (``out``, ``dtype``, ``order``, ``casting``) and
opt_einsum's ``use_blas`` and ``backend``, against ``numpy.einsum``: the same values, the
same result dtype and layout, and an error where numpy raises one."""

from typing import Any

from collections.abc import Callable
import numpy as np
import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

import cgx

from strategies import expressions

DTYPES = [np.float32, np.float64, np.complex64, np.complex128, np.int32, np.int64, np.bool_]
CASTINGS = ["no", "equiv", "safe", "same_kind", "unsafe"]


def operand(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    a = rng.integers(-3, 4, size=shape)  # small integers: every dtype holds them exactly
    return a.astype(dtype) if dtype is not np.bool_ else a > 0


def outcome(f: Callable[[], Any]) -> tuple[str, Any]:
    """``("ok", result)`` or ``("error", exception type)``."""
    try:
        return "ok", f()
    except (TypeError, ValueError) as e:
        return "error", type(e)


@settings(max_examples=200, deadline=None)
@given(
    expressions(max_operands=3),
    st.lists(st.sampled_from(DTYPES), min_size=3, max_size=3),
    st.none() | st.sampled_from(DTYPES),
    st.sampled_from(CASTINGS),
    st.sampled_from(["K", "A", "C", "F"]),
    st.none() | st.sampled_from(DTYPES),
    st.integers(0, 2**32 - 1),
)
def test_keywords_match_numpy_einsum(case, operand_dtypes, dtype, casting, order, out_dtype, seed):
    eq, shapes = case
    rng = np.random.default_rng(seed)
    operands = [operand(rng, s, d) for s, d in zip(shapes, operand_dtypes)]
    if rng.integers(2):
        operands = [np.asarray(a, order="F") for a in operands]  # (asfortranarray makes 0-d arrays 1-d)
    # numpy returns a lone operand that the expression only relabels (no sum, no
    # product) as a view, or as itself if it is 0-d, and then ignores `dtype` and
    # `casting`: a quirk not followed.
    lone = len(operands) == 1 and (operands[0].ndim == 0 or np.shares_memory(np.einsum(eq, operands[0]), operands[0]))
    assume(not lone)
    kwargs = dict(dtype=dtype, casting=casting, order=order)
    want = outcome(lambda: np.einsum(eq, *operands, **kwargs))
    if want[0] == "ok" and out_dtype is not None:
        out_want, out_got = np.zeros(want[1].shape, out_dtype), np.zeros(want[1].shape, out_dtype)
        want = outcome(lambda: np.einsum(eq, *operands, out=out_want, **kwargs))
        got = outcome(lambda: cgx.contract(eq, *operands, out=out_got, use_blas=False, backend="numpy", **kwargs))
        if got[0] == "ok":
            assert got[1] is out_got
    else:
        got = outcome(lambda: cgx.contract(eq, *operands, **kwargs))
    event(f"{want[0]}, out={out_dtype is not None}")
    assert got[0] == want[0], (got, want)
    if want[0] == "error":
        assert got[1] == want[1]
        return
    got, want = got[1], want[1]
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    if order in "CF" and got.ndim > 1 and out_dtype is None:
        assert got.flags[f"{order}_CONTIGUOUS"]


def test_bad_keywords_are_errors_that_name_them() -> None:
    a = np.ones((2, 2))
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        cgx.contract("ij,jk->ik", a, a, bogus=1)
    with pytest.raises(ValueError, match="order must be one of"):
        cgx.contract("ij,jk->ik", a, a, order="X")
    with pytest.raises(ValueError, match="casting must be one of"):
        cgx.contract("ij,jk->ik", a, a, casting="bad")
    with pytest.raises(ValueError, match="no_such_library"):
        cgx.contract("ij,jk->ik", a, a, backend="no_such_library")
    with pytest.raises(ValueError, match="out has shape"):
        cgx.contract("ij,jk->ik", a, a, out=np.zeros((3, 2)))
    with pytest.raises(TypeError, match="out must be an array"):
        cgx.contract("ij,jk->ik", a, a, out=[[0.0, 0.0], [0.0, 0.0]])


def test_an_expression_writes_into_out() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    expr = cgx.contract_expression("ij,jk->ik", a.shape, b.shape)
    out = np.zeros((3, 2))
    assert expr(a, b, out=out) is out
    np.testing.assert_allclose(out, a @ b, rtol=1e-12)
    with pytest.raises(TypeError):  # float64 into float32 is not a 'safe' cast
        expr(a, b, out=np.zeros((3, 2), np.float32))
    with pytest.raises(ValueError, match="no_such_library"):
        expr(a, b, backend="no_such_library")
    # int8 operands into an int64 `out`: computed in int64, as numpy.einsum does (no wrap).
    i8 = np.full((3, 4), 100, np.int8), np.full((4, 2), 100, np.int8)
    out, want = np.zeros((3, 2), np.int64), np.zeros((3, 2), np.int64)
    np.einsum("ij,jk->ik", *i8, out=want)
    np.testing.assert_array_equal(expr(*i8, out=out), want)
    assert want[0, 0] == 40000
