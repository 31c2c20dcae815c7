"""cgx.distributed.hvp on a LocalCluster on 127.0.0.1 (two workers in this process):
Hessian-vector products of sliced contractions, each task summing its slice range's
products, against the single-process expression (sliced and unsliced) and JAX's ``jvp``
of ``grad``; bad input raises like the local API."""

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings

distributed = pytest.importorskip("distributed")

from clusters import local_client  # noqa: E402

import cgx  # noqa: E402
from cgx import distributed as cd  # noqa: E402
from strategies import arrays, sliced_networks  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with local_client(distributed, processes=False) as c:
        yield c


# As in test_distributed: slices summed, placed in the output, and both.
NETWORKS = [
    ("ab,bc,cd->ad", [(5, 6), (6, 7), (7, 4)], "bc"),
    ("ab,bc,cd->ad", [(5, 6), (6, 7), (7, 4)], "da"),
    ("ab,bc->ac", [(6, 5), (5, 3)], "ba"),
]


@pytest.mark.parametrize("network", NETWORKS, ids=["summed", "in-output", "both"])
@pytest.mark.parametrize("n_tasks", [None, 1, 3])
@pytest.mark.parametrize("wrt", [None, [0, 1]])
def test_hvp_matches_single_process(client, network, n_tasks, wrt):
    eq, shapes, sliced = network
    rng = np.random.default_rng(7)
    ops, v = arrays(rng, shapes), arrays(rng, shapes)
    expr = cgx.contract_expression(eq, *shapes, sliced_inds=sliced)
    assert expr.n_slices > 1
    c = arrays(rng, [tuple(expr.output_shape)])[0]
    dirs = v if wrt is None else [v[i] for i in wrt]
    got = cd.hvp(eq, *ops, directions=dirs, wrt=wrt, cotangent=c, sliced_inds=sliced, client=client, n_tasks=n_tasks)
    local = expr.hvp(*ops, directions=dirs, wrt=wrt, cotangent=c)
    plain = cgx.contract_expression(eq, *shapes).hvp(*ops, directions=dirs, wrt=wrt, cotangent=c)
    assert isinstance(got, tuple) and len(got) == len(dirs)
    for g, w, p in zip(got, local, plain):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(g, p, rtol=1e-10, atol=1e-12)


@settings(max_examples=10, deadline=None)
@given(case=sliced_networks())
def test_random_networks_against_single_process(client, case):
    eq, shapes, sliced, n_tasks = case.eq, case.shapes, case.sliced, case.n_tasks
    rng, ops = case.operands()
    v = arrays(rng, shapes, case.complex_)
    expr = cgx.contract_expression(eq, *shapes, sliced_inds=sliced)
    c = arrays(rng, [tuple(expr.output_shape)], case.complex_)[0]
    got = cd.hvp(eq, *ops, directions=v, cotangent=c, sliced_inds=sliced, client=client, n_tasks=n_tasks)
    for g, w in zip(got, expr.hvp(*ops, directions=v, cotangent=c)):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)


def test_hvp_against_jax_jvp_of_grad(client):
    jax = pytest.importorskip("jax", reason="JAX is not installed: the JAX reference is skipped")
    previous = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    try:
        jnp = jax.numpy
        eq, shapes = "ab,bc,ca->", [(4, 5), (5, 6), (6, 4)]
        rng = np.random.default_rng(9)
        ops, v = arrays(rng, shapes), arrays(rng, shapes)
        got = cd.hvp(eq, *ops, directions=v, sliced_inds="bc", client=client, n_tasks=3)
        grad = jax.grad(lambda *x: jnp.einsum(eq, *x), argnums=(0, 1, 2))
        _, want = jax.jvp(grad, tuple(ops), tuple(v))
    finally:
        jax.config.update("jax_enable_x64", previous)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-10, atol=1e-12)


def test_a_memory_limit_slices_the_hvp(client):
    # The memory limit (elements) slices as in cgx.contract; the products are those of the
    # unsliced expression.
    eq, shapes, path = "ai,bi,aj,bj->", [(64, 2)] * 4, [(0, 1), (0, 1), (0, 1)]
    rng = np.random.default_rng(3)
    ops, v = arrays(rng, shapes), arrays(rng, shapes)
    got = cd.hvp(eq, *ops, directions=v, optimize=path, memory_limit=256, client=client, n_tasks=4)
    want = cgx.contract_expression(eq, *shapes, optimize=path).hvp(*ops, directions=v)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def test_bad_input_raises_like_the_local_api(client):
    a, b = np.ones((3, 4)), np.ones((4, 5))
    expr = cgx.contract_expression("ij,jk->ik", (3, 4), (4, 5), sliced_inds="j")
    c = np.ones((3, 5))
    cases: list[dict[str, Any]] = [
        dict(directions=[a]),  # one direction for two operands
        dict(directions=[a, a]),  # direction 1 of the wrong shape
        dict(directions=[a, b], wrt=[0, 7]),
    ]
    for kwargs in cases:
        with pytest.raises(ValueError) as want:
            expr.hvp(a, b, cotangent=c, **kwargs)
        with pytest.raises(ValueError) as got:
            cd.hvp("ij,jk->ik", a, b, cotangent=c, sliced_inds="j", client=client, **kwargs)
        assert str(got.value) == str(want.value)
    with pytest.raises(ValueError, match="non-scalar output"):
        cd.hvp("ij,jk->ik", a, b, directions=[a, b], sliced_inds="j", client=client)
