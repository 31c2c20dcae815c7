"""Plans that never take the long way round, from Python: a label that one operand alone
holds is summed out of it before any pairwise step, so ``ij,kl->`` at n=300 and three
disconnected operands of 20 labels reduced to one label finish at once and equal numpy,
``a,bcd,efg->`` costs no more than opt_einsum's ``dp``, and gradients go through those
sums; path names are read by the einsum crate's one parser."""

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cgx


def test_an_outer_product_summed_away_takes_milliseconds() -> None:
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((300, 300)), rng.standard_normal((300, 300))
    start = time.perf_counter()
    got = cgx.contract("ij,kl->", a, b)
    elapsed = time.perf_counter() - start
    np.testing.assert_allclose(got, np.einsum("ij,kl->", a, b, optimize=True), rtol=1e-10)
    # The n^4 loop took seconds; two sums of n^2 take well under a tenth of one, even on a
    # loaded machine.
    assert elapsed < 1.0, elapsed
    _, info = cgx.contract_path("ij,kl->", a, b)
    assert info.largest_intermediate == 1.0


def test_three_disconnected_operands_reduced_to_one_label_finish_in_a_second() -> None:
    labs = [cgx.get_symbol(k) for k in range(60)]
    eq = "".join(labs[:20]) + "," + "".join(labs[20:40]) + "," + "".join(labs[40:60]) + "->" + labs[0]
    rng = np.random.default_rng(1)
    ops = [rng.standard_normal((2,) * 20) for _ in range(3)]
    start = time.perf_counter()
    got = cgx.contract(eq, *ops)
    elapsed = time.perf_counter() - start
    # numpy, one operand at a time (its einsum takes 52 letters at most).
    want = ops[0].reshape(2, -1).sum(axis=1) * ops[1].sum() * ops[2].sum()
    np.testing.assert_allclose(got, want, rtol=1e-9)
    assert elapsed < 1.0, elapsed


@pytest.mark.parametrize("sizes", [(2, 2, 2, 2, 2, 2, 2), (3, 2, 5, 4, 2, 3, 7), (9, 1, 2, 3, 4, 5, 6)])
def test_sums_first_cost_no_more_than_opt_einsums_dp(sizes):
    oe = pytest.importorskip("opt_einsum")
    shapes = [sizes[:1], sizes[1:4], sizes[4:]]
    ours = cgx.contract_path("a,bcd,efg->", *shapes, shapes=True, optimize="dp")[1]
    theirs = oe.contract_path("a,bcd,efg->", *shapes, shapes=True, optimize="dp")[1]
    assert ours.opt_cost <= theirs.opt_cost, (ours.opt_cost, theirs.opt_cost)
    ops = [np.random.default_rng(2).standard_normal(s) for s in shapes]
    np.testing.assert_allclose(cgx.contract("a,bcd,efg->", *ops, optimize="dp"), np.einsum("a,bcd,efg->", *ops), rtol=1e-10)


@settings(max_examples=40, deadline=None)
@given(
    st.sampled_from(["ij,kl->", "abc,cd,ef->ad", "ab,bc,cd->a", "abc,bd->d", "ab,cd,ef->"]),
    st.integers(0, 2**32 - 1),
)
def test_gradients_through_the_sums_first_equal_numpys(eq, seed):
    rng = np.random.default_rng(seed)
    terms, out = eq.split("->")[0].split(","), eq.split("->")[1]
    size = {c: int(rng.integers(1, 4)) for c in set("".join(terms))}
    ops = [rng.standard_normal(tuple(size[c] for c in t)) for t in terms]
    cot = rng.standard_normal(tuple(size[c] for c in out))
    expr = cgx.contract_expression(eq, *[o.shape for o in ops])
    value, grads = expr.value_and_grad(*ops, cotangent=cot)
    np.testing.assert_allclose(value, np.einsum(eq, *ops), rtol=1e-10, atol=1e-12)
    for i, t in enumerate(terms):
        # The gradient of operand i: the cotangent contracted with the other operands and
        # with ones of operand i's shape (which carry the labels only it holds: broadcast).
        others = [u for k, u in enumerate(terms) if k != i]
        spec = ",".join([out, *others, t]) + "->" + t
        want = np.einsum(spec, cot, *[o for k, o in enumerate(ops) if k != i], np.ones(ops[i].shape))
        np.testing.assert_allclose(grads[i], want, rtol=1e-10, atol=1e-12)


def test_path_names_are_read_by_one_parser() -> None:
    a = np.ones((2, 3))
    b = np.ones((3, 4))
    want = a @ b
    # opt_einsum's aliases and the command line's spelling, all the engine's finders.
    for name in ["greedy", "optimal", "dp", "random-greedy", "random_greedy", "random-greedy-128", "auto", "auto-hq"]:
        np.testing.assert_allclose(cgx.contract("ij,jk->ik", a, b, optimize=name), want)
        path, _ = cgx.contract_path("ij,jk->ik", a, b, optimize=name)
        assert path == [(0, 1)]
    assert cgx._core.is_path_finder("dp") and not cgx._core.is_path_finder("fastest")
    with pytest.raises(ValueError, match="not a path finder"):
        cgx._core.Expression("ij,jk->ik", [[2, 3], [3, 4]], "fastest")
