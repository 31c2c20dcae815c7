"""value_and_grad with a scalar cotangent ``c`` for a non-scalar output: the gradients of
``c * f(x).sum()`` (``Re(conj(c) * f(x).sum())`` for complex values), computed without a
cotangent of the output's shape. Against the same call with ``c`` filled into the output's
shape, exact differences (the contraction is linear in each operand), JAX's gradient of
the sum, sliced expressions (by sum and, with ``cotangent_first``, by output blocks), the range check and ``strip_exponent``, and the errors."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cgx
from strategies import arrays, expressions, sliced_networks

SETTINGS = settings(max_examples=100, deadline=None)


def inner(a, b):
    return float(np.real(np.vdot(a, b)))


def scalar(draw_complex, rng, kind):
    """A cotangent scalar as a Python number, a numpy scalar or a 0-d array."""
    c = complex(rng.normal(), rng.normal()) if draw_complex else float(rng.normal())
    return {"python": c, "numpy": np.asarray(c)[()], "0-d": np.asarray(c)}[kind]


@SETTINGS
@given(
    case=expressions(explicit=True),
    complex_=st.booleans(),
    kind=st.sampled_from(["python", "numpy", "0-d"]),
    wrt_mask=st.integers(0, 15),
    threads=st.sampled_from([1, 2]),
    seed=st.integers(0, 2**32 - 1),
)
def test_scalar_cotangent_equals_the_filled_one(case, complex_, kind, wrt_mask, threads, seed):
    eq, shapes = case
    rng = np.random.default_rng(seed)
    ops = arrays(rng, shapes, complex_)
    expr = cgx.contract_expression(eq, *shapes)
    value = np.einsum(eq, *ops)
    c = scalar(complex_, rng, kind)
    wrt = [i for i in range(len(ops)) if wrt_mask >> i & 1] or [0]
    filled = np.full(np.shape(value), c, dtype=value.dtype)
    got, grads = expr.value_and_grad(*ops, wrt=wrt, cotangent=c, threads=threads)
    want_value, want = expr.value_and_grad(*ops, wrt=wrt, cotangent=filled, threads=threads)
    np.testing.assert_allclose(got, value, rtol=1e-10, atol=1e-10)
    # The same forward steps; on two threads the pool may split a step differently between
    # the two programs, so to rounding rather than bit for bit.
    np.testing.assert_allclose(got, want_value, rtol=1e-13, atol=1e-300)
    for i, g, w in zip(wrt, grads, want):
        assert g.shape == shapes[i] and g.dtype == ops[i].dtype
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)
        # f is linear in each operand: a step of 1 is exact up to rounding.
        d = arrays(rng, [shapes[i]], complex_)[0]
        plus = [x + d if k == i else x for k, x in enumerate(ops)]
        fd = inner(filled, np.einsum(eq, *plus) - value)
        assert abs(inner(g, d) - fd) <= 1e-9 * (1 + abs(fd)), (i, inner(g, d), fd)


def test_scalar_cotangent_against_jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    eq, shapes = "abcd,dbe,ef->cafe", [(3, 4, 2, 5), (5, 4, 3), (3, 2)]
    rng = np.random.default_rng(7)
    ops = arrays(rng, shapes)
    _, grads = cgx.contract_expression(eq, *shapes).value_and_grad(*ops, cotangent=1.0)
    want = jax.grad(lambda *xs: jnp.einsum(eq, *xs).sum(), argnums=(0, 1, 2))(*ops)
    for g, w in zip(grads, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-12, atol=1e-12)


@settings(max_examples=30, deadline=None)
@given(net=sliced_networks())
def test_sliced_scalar_cotangent_equals_the_filled_one(net):
    _, ops = net.operands()
    expr = cgx.contract_expression(net.eq, *net.shapes, sliced_inds=net.sliced)
    value = expr(*ops)
    filled = np.full(np.shape(value), 0.5, dtype=value.dtype)
    _, want = expr.value_and_grad(*ops, cotangent=filled)
    got_value, got = expr.value_and_grad(*ops, cotangent=0.5)
    np.testing.assert_allclose(got_value, value, rtol=1e-10, atol=1e-10)
    sums = expr.grad_slices(*ops, cotangent=0.5)
    for g, s, w in zip(got, sums, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(s, w, rtol=1e-10, atol=1e-10)


@settings(max_examples=30, deadline=None)
@given(net=sliced_networks(), cut=st.integers(0, 1000), first=st.integers(0, 3))
def test_a_scalar_cotangent_by_blocks_equals_the_filled_one(net, cut, first):
    """``value_and_grad_slices`` with ``cotangent_first`` and a scalar cotangent (every
    block that value): the value by blocks and the gradients of a range equal the call with
    the cotangent filled into the output's shape; ``first`` does not matter."""
    _, ops = net.operands()
    expr = cgx.contract_expression(net.eq, *net.shapes, sliced_inds=net.sliced)
    m = cut % (expr.n_slices + 1)
    value = expr(*ops)
    c = 0.5 - 0.25j if np.iscomplexobj(value) else 0.75
    filled = np.full(np.shape(value), c, dtype=value.dtype)
    (want_first, want_rows), want = expr.value_and_grad_slices(*ops, start=m, cotangent=filled, blocks=True)
    (got_first, got_rows), got = expr.value_and_grad_slices(*ops, start=m, cotangent=c, cotangent_first=first)
    assert got_first == want_first
    np.testing.assert_allclose(got_rows, want_rows, rtol=1e-12, atol=1e-12)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)


def test_range_check_and_strip_exponent_with_a_scalar_cotangent():
    eq, shapes = "ab,bc->ac", [(3, 4), (4, 2)]
    a = np.full(shapes[0], 1e200)
    b = np.full(shapes[1], 1e200)
    expr = cgx.contract_expression(eq, *shapes)
    # The value leaves float64's range: the automatic rerun is scaled, with the scalar
    # filled into the output's shape, and gives pairs where a result does not fit.
    value, grads = expr.value_and_grad(a, b, cotangent=2.0)
    assert isinstance(value, tuple)
    mantissa, exponent = value
    np.testing.assert_allclose(mantissa * 10.0 ** (exponent - 400), np.full((3, 2), 4.0), rtol=1e-12)
    # dA = 2 * sum_c b: 2 * 2e200 fits.
    np.testing.assert_allclose(grads[0], np.full(shapes[0], 4e200), rtol=1e-12)
    (m, e), _ = expr.value_and_grad(a / 1e200, b / 1e200, cotangent=3.0, strip_exponent=True)
    np.testing.assert_allclose(m * 10.0**e, np.full((3, 2), 4.0), rtol=1e-12)
    _, g = expr.value_and_grad(a / 1e200, b / 1e200, cotangent=3.0, strip_exponent=True)
    np.testing.assert_allclose(g[1][0] * 10.0 ** g[1][1], np.full(shapes[1], 9.0), rtol=1e-12)


def test_scalar_cotangent_errors():
    expr = cgx.contract_expression("ab,bc->ac", (2, 3), (3, 4))
    a, b = np.ones((2, 3)), np.ones((3, 4))
    with pytest.raises(ValueError, match=r"shape \[4\], expected"):
        expr.value_and_grad(a, b, cotangent=np.ones(4))
    with pytest.raises(TypeError, match="complex"):
        expr.value_and_grad(a, b, cotangent=1j)
    with pytest.raises(ValueError, match="pass a cotangent of that shape, or a scalar"):
        expr.value_and_grad(a, b)
    # A checkpointed call fills the scalar in.
    _, g = expr.value_and_grad(a, b, cotangent=2.0, checkpoint="1MiB")
    np.testing.assert_array_equal(g[0], np.full((2, 3), 8.0))
