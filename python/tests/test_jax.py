"""Gradients against JAX (``jax.grad`` and ``jax.vjp`` of ``jnp.einsum``), on CPU in float64."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cgx
from strategies import arrays, expressions

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")
jnp = jax.numpy

SETTINGS = settings(max_examples=40, deadline=None)


@SETTINGS
@given(case=expressions(explicit=True, max_operands=3), seed=st.integers(0, 2**32 - 1))
def test_real_gradients_match_jax_grad(case, seed):
    eq, shapes = case
    rng = np.random.default_rng(seed)
    ops = arrays(rng, shapes)
    c = arrays(rng, [np.shape(np.einsum(eq, *ops))])[0]

    def loss(*xs):
        return jnp.sum(jnp.einsum(eq, *xs) * c)

    want = jax.grad(loss, argnums=tuple(range(len(ops))))(*ops)
    _, got = cgx.contract_expression(eq, *shapes).value_and_grad(*ops, cotangent=c)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-10, atol=1e-10)


@SETTINGS
@given(case=expressions(explicit=True, max_operands=3), seed=st.integers(0, 2**32 - 1))
def test_complex_gradients_are_the_conjugate_of_jax_vjp(case, seed):
    eq, shapes = case
    rng = np.random.default_rng(seed)
    ops = arrays(rng, shapes, complex_=True)
    value, vjp = jax.vjp(lambda *xs: jnp.einsum(eq, *xs), *ops)
    c = arrays(rng, [np.shape(value)], complex_=True)[0]
    # JAX's VJP is the transpose (c ↦ Jᵀc); ours is the adjoint (c ↦ Jᴴc) = conj(Jᵀ conj(c)).
    want = vjp(np.conj(c))
    got_value, got = cgx.contract_expression(eq, *shapes).value_and_grad(*ops, cotangent=c)
    np.testing.assert_allclose(got_value, np.asarray(value), rtol=1e-10, atol=1e-10)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.conj(np.asarray(w)), rtol=1e-10, atol=1e-10)


def test_hvp_matches_jax_forward_over_reverse() -> None:
    rng = np.random.default_rng(0)
    eq, shapes = "ij,jk,ki->", [(3, 4), (4, 5), (5, 3)]
    ops = arrays(rng, shapes)
    v = arrays(rng, shapes)

    def loss(*xs):
        return jnp.einsum(eq, *xs)

    grad = jax.grad(loss, argnums=(0, 1, 2))
    _, want = jax.jvp(grad, tuple(ops), tuple(v))
    got = cgx.contract_expression(eq, *shapes).hvp(*ops, directions=v)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-10, atol=1e-10)
