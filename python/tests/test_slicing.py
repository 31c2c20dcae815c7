"""Slicing from Python: ``memory_limit`` and ``sliced_inds`` give numpy's values and the
unsliced gradients; slice ranges add up, by sum and by output blocks; value and gradients
of a range in one pass equal the separate calls; a sliced expression pickles as its plan."""

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cgx
from cgx import distributed as cd
from cgx.distributed import blocks as dblocks, combine as dcombine
from strategies import arrays, expressions, split

SETTINGS = settings(max_examples=60, deadline=None)

# Σ_ab (A·Bᵀ)_ab (C·Dᵀ)_ab along a path that builds A·Bᵀ (64x64) and C·Dᵀ.
EQ = "ai,bi,aj,bj->"
SHAPES = [(64, 2)] * 4
PATH = [(0, 1), (0, 1), (0, 1)]


def test_a_memory_limit_slices_instead_of_failing() -> None:
    rng = np.random.default_rng(0)
    ops = arrays(rng, SHAPES)
    want = np.einsum(EQ, *ops)
    expr = cgx.contract_expression(EQ, *SHAPES, optimize=PATH, memory_limit=256)
    assert expr.n_slices > 1 and expr.sliced_inds and expr.slicing_overhead >= 1.0
    np.testing.assert_allclose(expr(*ops), want, rtol=1e-12)
    np.testing.assert_allclose(cgx.contract(EQ, *ops, optimize=PATH, memory_limit=256), want, rtol=1e-12)
    _, info = cgx.contract_path(EQ, *SHAPES, optimize=PATH, memory_limit=256)
    assert info.sliced_inds == expr.sliced_inds and info.n_slices == expr.n_slices
    assert "Sliced:" in str(info)
    # Unsliced without a limit.
    assert cgx.contract_expression(EQ, *SHAPES, optimize=PATH).n_slices == 1


def test_slices_of_an_output_label_are_stacked() -> None:
    rng = np.random.default_rng(1)
    a, b = arrays(rng, [(5, 3), (3, 4)], complex_=True)
    expr = cgx.contract_expression("ij,jk->ik", (5, 3), (3, 4), sliced_inds="ij")
    assert (expr.sliced_inds, expr.n_slices) == (["i", "j"], 15)
    np.testing.assert_allclose(expr(a, b), a @ b, rtol=1e-12)
    np.testing.assert_allclose(cgx.contract("ij,jk->ik", a, b, sliced_inds=["k"]), a @ b, rtol=1e-12)


@SETTINGS
@given(
    case=expressions(explicit=True, max_operands=3),
    complex_=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
    pick=st.lists(st.booleans(), min_size=6, max_size=6),
    cut=st.integers(0, 10**6),
)
def test_sliced_values_ranges_and_gradients_match_unsliced(case, complex_, seed, pick, cut):
    eq, shapes = case
    terms, out = split(eq)
    labels = sorted(set("".join(terms)))
    sliced = [c for c, p in zip(labels, pick) if p]
    rng = np.random.default_rng(seed)
    ops = arrays(rng, shapes, complex_)
    plain = cgx.contract_expression(eq, *shapes)
    expr = cgx.contract_expression(eq, *shapes, sliced_inds=sliced)
    assert expr.sliced_inds == sliced
    want = np.einsum(eq, *ops)
    np.testing.assert_allclose(expr(*ops), want, rtol=1e-10, atol=1e-10)
    n = expr.n_slices
    m = cut % (n + 1)
    parts = expr.eval_slices(*ops, stop=m) + expr.eval_slices(*ops, start=m)
    np.testing.assert_allclose(parts, want, rtol=1e-10, atol=1e-10)
    c = arrays(rng, [np.shape(want)], complex_)[0]
    _, g_want = plain.value_and_grad(*ops, cotangent=c)
    value, g = expr.value_and_grad(*ops, cotangent=c)
    np.testing.assert_allclose(value, want, rtol=1e-10, atol=1e-10)
    g_first = expr.grad_slices(*ops, stop=m, cotangent=c)
    g_rest = expr.grad_slices(*ops, start=m, cotangent=c)
    for i in range(len(shapes)):
        np.testing.assert_allclose(g[i], g_want[i], rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(g_first[i] + g_rest[i], g_want[i], rtol=1e-10, atol=1e-10)
    # Value and gradients in one pass equal the two separate calls, by sum and by blocks.
    v_one, g_one = expr.value_and_grad_slices(*ops, stop=m, cotangent=c)
    np.testing.assert_allclose(v_one, expr.eval_slices(*ops, stop=m), rtol=1e-12, atol=1e-12)
    (first, rows), g_rest_one = expr.value_and_grad_slices(*ops, start=m, cotangent=c, blocks=True)
    want_first, want_rows = expr.eval_blocks(*ops, start=m)
    assert first == want_first
    np.testing.assert_allclose(rows, want_rows, rtol=1e-12, atol=1e-12)
    for i in range(len(shapes)):
        np.testing.assert_allclose(g_one[i], g_first[i], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(g_rest_one[i], g_rest[i], rtol=1e-12, atol=1e-12)
    # Blocks of the two ranges, combined and laid out as cgx.distributed does, give the value.
    parts = [cd.Blocks(*expr.eval_blocks(*ops, stop=m)), cd.Blocks(first, rows)]
    total = dcombine.combine(*parts)
    layout = dblocks.block_layout(expr)
    got = total.rows[0] if layout is None else dcombine.finish(layout, total)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_a_sliced_expression_pickles_as_its_plan() -> None:
    rng = np.random.default_rng(2)
    ops = arrays(rng, SHAPES)
    expr = cgx.contract_expression(EQ, *SHAPES, optimize=PATH, memory_limit=256)
    back = pickle.loads(pickle.dumps(expr))
    assert type(back) is type(expr)
    assert (back.sliced_inds, back.n_slices, back.path) == (expr.sliced_inds, expr.n_slices, expr.path)
    np.testing.assert_allclose(back.eval_slices(*ops, start=3, stop=9), expr.eval_slices(*ops, start=3, stop=9))


def test_bad_slicing_input_is_an_error() -> None:
    a = np.ones((4, 4))
    with pytest.raises(ValueError, match="cannot slice label `z`"):
        cgx.contract("ij,jk->ik", a, a, sliced_inds="z")
    with pytest.raises(ValueError, match="one-character labels"):
        cgx.contract_expression("ij,jk->ik", (4, 4), (4, 4), sliced_inds=["ij"])
    with pytest.raises(ValueError, match="listed twice"):
        cgx.contract_expression("ij,jk->ik", (4, 4), (4, 4), sliced_inds="jj")
    expr = cgx.contract_expression("ij,jk->ik", (4, 4), (4, 4), sliced_inds="j")
    with pytest.raises(ValueError, match="not within 0..4"):
        expr.eval_slices(a, a, start=2, stop=5)
    # The output is held whole: a limit below it is still a MemoryError.
    with pytest.raises(MemoryError, match="more than memory_limit=15"):
        cgx.contract("ij,jk->ik", a, a, memory_limit=15)
