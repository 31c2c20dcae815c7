"""cgx.jax.contract: a JAX function with the engine's VJP, against jnp.einsum."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import arrays, expressions

jax = pytest.importorskip("jax")
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")
jnp = jax.numpy
import cgx.jax as cj  # noqa: E402

SETTINGS = settings(max_examples=25, deadline=None)


@SETTINGS
@given(case=expressions(explicit=True, max_operands=3), complex_=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_values_and_vjps_match_jnp_einsum(case, complex_, seed):
    eq, shapes = case
    rng = np.random.default_rng(seed)
    ops = [jnp.asarray(x) for x in arrays(rng, shapes, complex_)]
    want, want_vjp = jax.vjp(lambda *xs: jnp.einsum(eq, *xs), *ops)
    got, got_vjp = jax.vjp(lambda *xs: cj.contract(eq, *xs), *ops)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    c = jnp.asarray(arrays(rng, [np.shape(want)], complex_)[0])
    for g, w in zip(got_vjp(c), want_vjp(c)):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)


def test_grad_under_jit_and_a_real_operand_of_a_complex_contraction() -> None:
    rng = np.random.default_rng(0)
    a = jnp.asarray(rng.standard_normal((3, 4)))
    b = jnp.asarray(rng.standard_normal((4, 3)) + 1j * rng.standard_normal((4, 3)))

    def loss(contract, a, b):
        return jnp.abs(contract("ij,jk->ik", a, b)).sum()

    want = jax.grad(lambda a, b: loss(jnp.einsum, a, b), argnums=(0, 1))(a, b)
    got = jax.jit(jax.grad(lambda a, b: loss(cj.contract, a, b), argnums=(0, 1)))(a, b)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def test_vmap_and_explicit_paths() -> None:
    rng = np.random.default_rng(1)
    xs = jnp.asarray(rng.standard_normal((5, 3, 4)))
    m = jnp.asarray(rng.standard_normal((4, 2)))
    got = jax.vmap(lambda x: cj.contract("ij,jk->ik", x, m, optimize=[(0, 1)]))(xs)
    np.testing.assert_allclose(got, jnp.einsum("bij,jk->bik", xs, m), rtol=1e-12)
