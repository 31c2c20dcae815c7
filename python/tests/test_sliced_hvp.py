"""Hessian-vector products of sliced expressions: equal to the unsliced ones (random
expressions, labels and ranges, real and complex), and to JAX's ``jvp`` of ``grad`` when
JAX is installed; slice ranges add up; under a memory budget the unsliced product cannot
meet, the sliced one runs and gives the same products."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cgx
from cgx import _core
from strategies import arrays, expressions, split

SETTINGS = settings(max_examples=60, deadline=None)


@SETTINGS
@given(
    case=expressions(explicit=True, max_operands=3),
    complex_=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
    pick=st.lists(st.booleans(), min_size=6, max_size=6),
    cut=st.integers(0, 10**6),
)
def test_sliced_hvps_and_their_ranges_match_unsliced(case, complex_, seed, pick, cut):
    eq, shapes = case
    terms, _ = split(eq)
    labels = sorted(set("".join(terms)))
    sliced = [c for c, p in zip(labels, pick) if p]
    rng = np.random.default_rng(seed)
    ops = arrays(rng, shapes, complex_)
    v = arrays(rng, shapes, complex_)
    plain = cgx.contract_expression(eq, *shapes)
    expr = cgx.contract_expression(eq, *shapes, sliced_inds=sliced)
    c = arrays(rng, [tuple(plain.output_shape)], complex_)[0]
    want = plain.hvp(*ops, directions=v, cotangent=c)
    got = expr.hvp(*ops, directions=v, cotangent=c)
    m = cut % (expr.n_slices + 1)
    first = expr.hvp_slices(*ops, directions=v, stop=m, cotangent=c)
    rest = expr.hvp_slices(*ops, directions=v, start=m, cotangent=c)
    assert len(got) == len(shapes)
    for i in range(len(shapes)):
        np.testing.assert_allclose(got[i], want[i], rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(first[i] + rest[i], want[i], rtol=1e-10, atol=1e-10)
    # A subset of the operands.
    wrt = [len(shapes) - 1]
    (one,) = expr.hvp(*ops, directions=[v[-1]], wrt=wrt, cotangent=c)
    (plain_one,) = plain.hvp(*ops, directions=[v[-1]], wrt=wrt, cotangent=c)
    np.testing.assert_allclose(one, plain_one, rtol=1e-10, atol=1e-10)


@SETTINGS
@given(
    case=expressions(explicit=True, max_operands=3),
    seed=st.integers(0, 2**32 - 1),
    pick=st.lists(st.booleans(), min_size=6, max_size=6),
)
def test_sliced_hvps_match_jax_forward_over_reverse(case, seed, pick):
    jax = pytest.importorskip("jax", reason="JAX is not installed: the JAX reference is skipped")
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_platforms", "cpu")
    jnp = jax.numpy
    eq, shapes = case
    labels = sorted(set("".join(split(eq)[0])))
    sliced = [c for c, p in zip(labels, pick) if p]
    rng = np.random.default_rng(seed)
    ops, v = arrays(rng, shapes), arrays(rng, shapes)
    expr = cgx.contract_expression(eq, *shapes, sliced_inds=sliced)
    c = arrays(rng, [tuple(expr.output_shape)])[0]

    def loss(*xs):
        return jnp.sum(jnp.einsum(eq, *xs) * c)

    _, want = jax.jvp(jax.grad(loss, argnums=tuple(range(len(ops)))), tuple(ops), tuple(v))
    got = expr.hvp(*ops, directions=v, cotangent=c)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-10, atol=1e-10)


def test_a_budget_the_unsliced_hvp_exceeds_is_met_by_slicing() -> None:
    # Σ_ab (A·Bᵀ)_ab (C·Dᵀ)_ab: unsliced, the HVP holds A·Bᵀ (512x512 doubles, 2 MiB), its
    # tangent and their cotangents; sliced on `a`, a slice holds rows of 512.
    eq, shapes, path = "ai,bi,aj,bj->", [(512, 4)] * 4, [(0, 1), (0, 1), (0, 1)]
    rng = np.random.default_rng(5)
    ops, v = arrays(rng, shapes), arrays(rng, shapes)
    want = cgx.contract_expression(eq, *shapes, optimize=path).hvp(*ops, directions=v)
    _core.set_memory_budget(1 << 20)  # 1 MiB: the operands, directions and products fit
    try:
        with pytest.raises(MemoryError):
            cgx.contract_expression(eq, *shapes, optimize=path).hvp(*ops, directions=v)
        expr = cgx.contract_expression(eq, *shapes, optimize=path, sliced_inds="a")
        got = expr.hvp(*ops, directions=v)
    finally:
        _core.set_memory_budget(None)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)


def test_bad_hvp_input_is_an_error() -> None:
    a = np.ones((4, 4))
    expr = cgx.contract_expression("ij,jk->ik", (4, 4), (4, 4), sliced_inds="j")
    with pytest.raises(ValueError, match="not within 0..4"):
        expr.hvp_slices(a, a, directions=[a, a], cotangent=a, start=2, stop=5)
    with pytest.raises(ValueError, match="direction"):
        expr.hvp(a, a, directions=[a], cotangent=a)
    with pytest.raises(ValueError, match="direction 1"):
        expr.hvp(a, a, directions=[a, np.ones((4, 3))], cotangent=a)
