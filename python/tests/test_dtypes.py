"""Result dtypes: ``cgx.contract`` and ``ContractExpression.__call__`` return numpy's result
dtype of the operands, against ``numpy.einsum`` and ``opt_einsum.contract``; integers and
bools exactly, floats to their precision. And ``cgx.jax.contract`` with x64 off and on."""

from typing import Any

from collections.abc import Sequence
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import expressions

import cgx

oe = pytest.importorskip("opt_einsum")

DTYPES = [np.float32, np.float64, np.complex64, np.complex128, np.int32, np.int64, np.uint8, np.bool_]


def operand(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        # Large enough that uint8 and int32 sums wrap on some draws: numpy's wrapping
        # arithmetic is a ring, so the result is the same along any path.
        lo = 0 if dtype.kind == "u" else -(2**31) // 3
        return rng.integers(lo, np.iinfo(dtype).max // 3, shape, dtype=dtype, endpoint=True)
    a = rng.standard_normal(shape)
    if dtype.kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dtype)


def check(eq: str, ops: Sequence[np.ndarray], got: np.ndarray) -> None:
    """``got`` against ``numpy.einsum``: the same dtype, the same integers, or floats within
    their precision of a float64 (complex128) reference."""
    want = np.einsum(eq, *ops)
    assert isinstance(got, np.ndarray)
    assert got.dtype == want.dtype == np.result_type(*ops)
    assert got.shape == want.shape
    if want.dtype.kind in "biu":
        assert np.array_equal(got, want)
        return
    wide = [o.astype(np.complex128 if o.dtype.kind == "c" else np.float64) for o in ops]
    exact = np.einsum(eq, *wide)
    scale = np.einsum(eq, *[np.abs(o) for o in wide])  # the sum of the terms' magnitudes
    eps = np.finfo(got.dtype).eps
    assert np.all(np.abs(got - exact) <= 4 * eps * (scale + 1))


@settings(max_examples=150, deadline=None)
@given(expressions(max_operands=3), st.sampled_from(DTYPES), st.integers(0, 2**32 - 1))
def test_one_dtype_as_numpy_and_opt_einsum(case, dtype, seed):
    eq, shapes = case
    rng = np.random.default_rng(seed)
    ops = [operand(rng, s, dtype) for s in shapes]
    got = cgx.contract(eq, *ops)
    check(eq, ops, got)
    theirs = np.asarray(oe.contract(eq, *ops))
    assert theirs.dtype == got.dtype
    if got.dtype.kind in "biu":
        assert np.array_equal(got, theirs)


@settings(max_examples=150, deadline=None)
@given(expressions(max_operands=3), st.data(), st.integers(0, 2**32 - 1))
def test_mixed_dtypes_as_numpy(case, data, seed):
    eq, shapes = case
    rng = np.random.default_rng(seed)
    dtypes = [data.draw(st.sampled_from(DTYPES)) for _ in shapes]
    ops = [operand(rng, s, d) for s, d in zip(shapes, dtypes)]
    check(eq, ops, cgx.contract(eq, *ops))
    # The same through a compiled expression, along a path of another finder.
    expr = cgx.contract_expression(eq, *shapes, optimize="optimal")
    check(eq, ops, expr(*ops))


@settings(max_examples=60, deadline=None)
@given(expressions(max_operands=3, min_size=2), st.sampled_from([np.int64, np.uint8, np.bool_]), st.integers(0, 2**32 - 1))
def test_integers_sliced_exactly(case, dtype, seed):
    eq, shapes = case
    rng = np.random.default_rng(seed)
    ops = [operand(rng, s, dtype) for s in shapes]
    labels = sorted(set(eq.split("->")[0]) - {","})
    for sliced in (labels[:1], labels[-2:]):
        expr = cgx.contract_expression(eq, *shapes, sliced_inds=sliced)
        assert expr.n_slices > 1 or not sliced
        check(eq, ops, expr(*ops))
        check(eq, ops, cgx.contract(eq, *ops, sliced_inds=sliced))


@settings(max_examples=80, deadline=None)
@given(expressions(max_operands=3, min_size=2), st.sampled_from([np.int64, np.uint8, np.bool_, object]), st.integers(0, 2**32 - 1))
def test_the_fallbacks_steps_cut_in_chunks_are_exact(case, dtype, seed):
    # The fallback engine cuts a step over CHUNK_WORK multiply-adds along its largest
    # label (so that Ctrl-C is seen between the chunks); with a tiny CHUNK_WORK every step
    # is cut, along kept, summed and repeated labels alike.
    from cgx import _numpy

    eq, shapes = case
    rng = np.random.default_rng(seed)
    ops = [operand(rng, s, np.int64 if dtype is object else dtype) for s in shapes]
    if dtype is object:
        ops = [o.astype(object) * (2**40) for o in ops]  # beyond int64 once multiplied
    saved = _numpy.CHUNK_WORK
    _numpy.CHUNK_WORK = 1
    try:
        got = cgx.contract(eq, *ops)
    finally:
        _numpy.CHUNK_WORK = saved
    want = np.asarray(np.einsum(eq, *ops))
    assert np.asarray(got).dtype == want.dtype
    assert np.array_equal(got, want)


def test_integers_beyond_double_precision() -> None:
    got = cgx.contract("i,i->", np.array([2**53 + 1]), np.array([1]))
    assert got.dtype == np.int64 and int(got) == 9007199254740993
    # Python integers of any size, as numpy's object arrays hold them.
    big = np.array([2**70 + 1, 3], dtype=object)
    assert cgx.contract("i,i->", big, big) == (2**70 + 1) ** 2 + 9


def test_bool_matmul_is_boolean() -> None:
    a = np.array([[True, False], [False, False]])
    got = cgx.contract("ij,jk->ik", a, a)
    want = oe.contract("ij,jk->ik", a, a)
    assert got.dtype == want.dtype == np.bool_ and np.array_equal(got, want)


def test_float16_and_longdouble() -> None:
    h = np.array([1.0, 2.0], dtype=np.float16)
    got = cgx.contract("i,i->", h, h)
    assert got.dtype == np.float16 and got == 5.0
    x = np.array([1.0, np.finfo(np.longdouble).eps], dtype=np.longdouble)
    got = cgx.contract("i,i->", x, np.ones(2, dtype=np.longdouble))
    assert got.dtype == np.longdouble and got == x[0] + x[1]
    if np.finfo(np.longdouble).eps < np.finfo(np.float64).eps:
        assert got != 1.0  # the engine's double would have lost it


def test_scalar_outputs_are_0d_arrays_as_in_opt_einsum() -> None:
    for a in (np.array([1.0, 2.0], dtype=np.float32), np.array([1, 2])):
        got, theirs = cgx.contract("i,i->", a, a), oe.contract("i,i->", a, a)
        assert type(got) is type(theirs) is np.ndarray
        assert got.shape == theirs.shape == () and got.dtype == theirs.dtype


def test_errors_and_gradients_keep_their_types() -> None:
    a = np.arange(6).reshape(2, 3)
    with pytest.raises(MemoryError):
        cgx.contract("ij,jk->ik", a, a.T, memory_limit=3)
    expr = cgx.contract_expression("ij,jk->ik", (2, 3), (3, 2))
    with pytest.raises(ValueError, match="shape error"):
        expr(a, a)
    with pytest.raises(TypeError):
        cgx.contract("i,i->", np.array(["a"]), np.array(["b"]))
    # Gradients are float64 (complex128) whatever the operands' dtypes.
    f = np.ones((2, 3), dtype=np.float32)
    value, grads = expr.value_and_grad(f, f.T, cotangent=np.ones((2, 2), dtype=np.float32))
    assert value.dtype == np.float64 and all(g.dtype == np.float64 for g in grads)


jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
import cgx.jax  # noqa: E402


@pytest.fixture(params=[False, True], ids=["x64-off", "x64-on"])
def x64(request):
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", request.param)
    yield request.param
    jax.config.update("jax_enable_x64", before)


@pytest.mark.parametrize("complex_", [False, True])
def test_jax_grad_and_vjp_with_x64_off_and_on(x64, complex_):
    rng = np.random.default_rng(1)
    dtype = jnp.result_type(complex if complex_ else float)
    x = jnp.asarray(operand(rng, (3, 4), np.complex128 if complex_ else np.float64), dtype=dtype)
    m = jnp.asarray(operand(rng, (4, 2), np.float64), dtype=jnp.result_type(float))
    eq = "ij,jk->ik"
    out = cgx.jax.contract(eq, x, m)
    assert out.dtype == jnp.einsum(eq, x, m).dtype
    assert out.dtype.itemsize == (8 if x64 else 4) * (2 if complex_ else 1)
    tol = 1e-12 if x64 else 1e-5
    assert np.allclose(out, jnp.einsum(eq, x, m), rtol=tol, atol=tol)

    def loss(f):
        return lambda x, m: jnp.sum(jnp.abs(jnp.sin(f(eq, x, m))) ** 2)

    got = jax.jit(jax.grad(loss(cgx.jax.contract), (0, 1)))(x, m)
    want = jax.grad(loss(jnp.einsum), (0, 1))(x, m)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and np.allclose(g, w, rtol=10 * tol, atol=10 * tol)

    c = jnp.asarray(operand(rng, (3, 2), np.complex128 if complex_ else np.float64), dtype=out.dtype)
    got = jax.vjp(lambda x, m: cgx.jax.contract(eq, x, m), x, m)[1](c)
    want = jax.vjp(lambda x, m: jnp.einsum(eq, x, m), x, m)[1](c)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and np.allclose(g, w, rtol=tol, atol=tol)


def test_jax_float32_stays_float32_with_x64_on(x64):
    x = jnp.ones((2, 3), dtype=jnp.float32)
    out = cgx.jax.contract("ij,kj->ik", x, x)
    assert out.dtype == jnp.float32 and np.array_equal(out, np.full((2, 2), 3.0))


def test_jax_takes_numpy_operands_with_x64_off_and_on(x64):
    """numpy float64 operands: JAX makes them float32 with x64 off, and so does the result
    and the gradient, as with ``jnp.einsum``."""
    rng = np.random.default_rng(2)
    a, b = operand(rng, (3, 4), np.float64), operand(rng, (4, 2), np.float64)
    out = cgx.jax.contract("ij,jk->ik", a, b)
    want = jnp.einsum("ij,jk->ik", a, b)
    tol = 1e-12 if x64 else 1e-5
    assert out.dtype == want.dtype and np.allclose(out, want, rtol=tol, atol=tol)
    got = jax.grad(lambda x: jnp.sum(cgx.jax.contract("ij,jk->ik", x, b) ** 2))(a)
    want = jax.grad(lambda x: jnp.sum(jnp.einsum("ij,jk->ik", x, b) ** 2))(a)
    assert got.dtype == want.dtype and np.allclose(got, want, rtol=10 * tol, atol=10 * tol)


def test_jax_integers_exact_and_without_gradient(x64):
    i = jnp.arange(6).reshape(3, 2)
    assert np.array_equal(cgx.jax.contract("ij,jk->ik", i.T, i), np.asarray(i).T @ np.asarray(i))
    assert cgx.jax.contract("ij,jk->ik", i.T, i).dtype == i.dtype
    m = jnp.ones((2, 2), dtype=jnp.result_type(float))
    got = jax.grad(lambda m: jnp.sum(cgx.jax.contract("ij,jk->ik", i, m)))(m)
    assert np.allclose(got, jax.grad(lambda m: jnp.sum(jnp.einsum("ij,jk->ik", i, m)))(m))
