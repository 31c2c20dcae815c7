"""Threads: ``cgx.set_num_threads``, ``cgx.threads`` and the ``threads=`` keywords.

Two threads against one: bit for bit where every kernel keeps its order of sums (matrix
products, element-wise products, permutations, programs of independent steps), to
rounding otherwise; forward, value and gradients, sliced and not, HVPs. The settings: per
call, per Python thread (other threads keep theirs), process-wide, bad counts.
"""

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cgx


@pytest.fixture(autouse=True)
def default_threads():
    cgx.set_num_threads(None)
    yield
    cgx.set_num_threads(None)


def arrays(shapes, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in shapes]


# Large enough that kernels split (2^20 multiply-adds or elements) and that independent
# steps run at once.
CASES = [
    ("ij,jk->ik", [(160, 112), (112, 128)]),
    ("bij,bjk->bik", [(64, 32, 24), (64, 24, 32)]),
    ("ij,ij->ij", [(1024, 1024), (1024, 1024)]),
    ("abc,c->cba", [(128, 128, 64), (64,)]),
    ("ab,bc,cd,de,ef->af", [(96, 80), (80, 96), (96, 80), (80, 96), (96, 80)]),
    ("ab,bc,cd,de,ef,fg,gh,hi->ai", [(200, 200)] * 8),
]


@pytest.mark.parametrize("eq,shapes", CASES)
def test_two_threads_equal_one_bit_for_bit(eq, shapes):
    ops = arrays(shapes, 1)
    expr = cgx.contract_expression(eq, *shapes)
    one = expr(*ops, threads=1)
    assert np.array_equal(expr(*ops, threads=2), one)
    assert np.array_equal(cgx.contract(eq, *ops, threads=2), cgx.contract(eq, *ops, threads=1))
    cot = np.random.default_rng(2).standard_normal(one.shape)
    v1, g1 = expr.value_and_grad(*ops, cotangent=cot, threads=1)
    v2, g2 = expr.value_and_grad(*ops, cotangent=cot, threads=2)
    assert np.array_equal(v1, v2) and np.array_equal(v1, one)
    for a, b in zip(g1, g2):
        assert np.array_equal(a, b)
    # Against numpy too: two threads compute the contraction, not something else.
    np.testing.assert_allclose(expr(*ops, threads=2), np.einsum(eq, *ops, optimize=True), rtol=1e-10, atol=1e-10)


def test_a_matrix_vector_gradient_agrees_to_rounding():
    # The gradient of an outer product of two matrix products has large matrix-vector
    # products, whose sum faer splits between the threads.
    shapes = [(60, 70), (70, 50), (40, 80), (80, 30)]
    ops = arrays(shapes, 3)
    expr = cgx.contract_expression("ab,bc,de,ef->acdf", *shapes)
    cot = np.random.default_rng(4).standard_normal(expr.output_shape)
    v1, g1 = expr.value_and_grad(*ops, cotangent=cot, threads=1)
    v2, g2 = expr.value_and_grad(*ops, cotangent=cot, threads=2)
    np.testing.assert_allclose(v2, v1, rtol=1e-12, atol=1e-12)
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-9 * np.abs(a).max())


def test_sliced_value_gradients_and_hvp_on_two_threads():
    shapes = [(2, 160, 160), (160, 160), (160, 160)]
    ops = arrays(shapes, 5)
    expr = cgx.contract_expression("xab,bc,cd->ad", *shapes, sliced_inds=["x"])
    assert expr.n_slices == 2
    cot = np.random.default_rng(6).standard_normal(expr.output_shape)
    one = expr(*ops, threads=1)
    assert np.array_equal(expr(*ops, threads=2), one)
    v1, g1 = expr.value_and_grad(*ops, cotangent=cot, threads=1)
    v2, g2 = expr.value_and_grad(*ops, cotangent=cot, threads=2)
    assert np.array_equal(v1, v2)
    for a, b in zip(g1, g2):
        assert np.array_equal(a, b)
    dirs = arrays(shapes, 7)
    h1 = expr.hvp(*ops, directions=dirs, cotangent=cot, threads=1)
    h2 = expr.hvp(*ops, directions=dirs, cotangent=cot, threads=2)
    for a, b in zip(h1, h2):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12 * np.abs(a).max())


@settings(max_examples=15, deadline=None)
@given(n=st.integers(2, 6), size=st.integers(1, 90), seed=st.integers(0, 2**16))
def test_random_chains_on_two_threads_equal_one(n, size, seed):
    rng = np.random.default_rng(seed)
    dims = [int(d) for d in rng.integers(1, size + 1, n + 1)]
    letters = "abcdefgh"
    eq = ",".join(letters[i] + letters[i + 1] for i in range(n)) + "->" + letters[0] + letters[n]
    ops = [rng.standard_normal((dims[i], dims[i + 1])) for i in range(n)]
    expr = cgx.contract_expression(eq, *[o.shape for o in ops])
    one = expr(*ops, threads=1)
    assert np.array_equal(expr(*ops, threads=2), one)
    cot = rng.standard_normal(one.shape)
    _, g1 = expr.value_and_grad(*ops, cotangent=cot, threads=1)
    _, g2 = expr.value_and_grad(*ops, cotangent=cot, threads=2)
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12 * (1 + np.abs(a).max()))


@settings(max_examples=12, deadline=None)
@given(m=st.integers(48, 320), k=st.integers(48, 320), n=st.integers(48, 320), seed=st.integers(0, 2**16))
def test_products_around_the_wake_up_cost_equal_one_thread(m, k, n, seed):
    # One GEMM from about 10^5 to 3·10^7 multiply-adds: on either side of the cost below
    # which a call stays on the calling thread (the pool's wake-up, `threads.rs`), and of
    # `POOL_MIN_WORK`; a split GEMM keeps each element's sum, so every side agrees bit for bit.
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    expr = cgx.contract_expression("ij,jk->ik", a.shape, b.shape)
    one = expr(a, b, threads=1)
    assert np.array_equal(expr(a, b, threads=2), one)
    np.testing.assert_allclose(one, a @ b, rtol=1e-10, atol=1e-10 * k)
    cot = rng.standard_normal(one.shape)
    v1, g1 = expr.value_and_grad(a, b, cotangent=cot, threads=1)
    v2, g2 = expr.value_and_grad(a, b, cotangent=cot, threads=2)
    assert np.array_equal(v1, v2)
    for x, y in zip(g1, g2):
        np.testing.assert_allclose(y, x, rtol=1e-12, atol=1e-12 * (1 + np.abs(x).max()))


def test_settings_per_call_per_thread_and_process():
    assert cgx.get_num_threads() >= 1
    cgx.set_num_threads(3)
    assert cgx.get_num_threads() == 3
    with cgx.threads(1):
        assert cgx.get_num_threads() == 1
        with cgx.threads(2):
            assert cgx.get_num_threads() == 2
        with cgx.threads(None):  # None leaves the setting as it is
            assert cgx.get_num_threads() == 1
        seen = []
        other = threading.Thread(target=lambda: seen.append(cgx.get_num_threads()))
        other.start()
        other.join()
        assert seen == [3]  # another Python thread keeps the process's setting
    assert cgx.get_num_threads() == 3
    cgx.set_num_threads(None)
    assert cgx.get_num_threads() >= 1


def test_the_context_is_restored_when_the_call_raises():
    cgx.set_num_threads(2)
    with pytest.raises(ValueError):
        cgx.contract("ij,jk->ik", np.ones((2, 3)), np.ones((4, 2)), threads=1)
    assert cgx.get_num_threads() == 2


@pytest.mark.parametrize("bad", [0, -1])
def test_counts_below_one_are_errors(bad):
    with pytest.raises(ValueError, match="at least 1"):
        cgx.set_num_threads(bad)
    with pytest.raises(ValueError, match="at least 1"):
        with cgx.threads(bad):
            pass
    with pytest.raises(ValueError, match="at least 1"):
        cgx.contract("ij->", np.ones((2, 2)), threads=bad)


@pytest.mark.parametrize("bad", [1.5, "2", True])
def test_counts_that_are_not_ints_are_type_errors(bad):
    with pytest.raises(TypeError):
        cgx.set_num_threads(bad)
    with pytest.raises(TypeError):
        cgx.contract("ij->", np.ones((2, 2)), threads=bad)


def left_to_right_chain(n: int, size: int, seed: int) -> "tuple[cgx.ContractExpression, list[np.ndarray]]":
    """A chain of ``n`` random ``size``-square matrices and its expression contracted left
    to right (opt_einsum's positions: each result joins the end of the list)."""
    rng = np.random.default_rng(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    eq = ",".join(letters[i] + letters[i + 1] for i in range(n)) + "->" + letters[0] + letters[n]
    ops = [rng.standard_normal((size, size)) / np.sqrt(size) for _ in range(n)]
    left_to_right = [(0, 1)] + [(live - 1, 0) for live in range(n - 1, 1, -1)]
    return cgx.contract_expression(eq, *[o.shape for o in ops], optimize=left_to_right), ops


@settings(max_examples=10, deadline=None)
@given(n=st.integers(8, 24), size=st.integers(40, 72), seed=st.integers(0, 2**16))
def test_chains_of_small_steps_on_two_threads_agree_to_rounding(n, size, seed):
    # Steps too small to split, more than 2^20 multiply-adds in all: on two threads the
    # forward call contracts the chain from both ends (a different order of sums) where its
    # program would use the pool, and keeps the path otherwise; the gradients keep it.
    expr, ops = left_to_right_chain(n, size, seed)
    one = expr(*ops, threads=1)
    two = expr(*ops, threads=2)
    expected = np.linalg.multi_dot(ops)
    scale = np.abs(expected).max()
    np.testing.assert_allclose(one, expected, rtol=1e-10, atol=1e-12 * scale)
    np.testing.assert_allclose(two, one, rtol=1e-10, atol=1e-12 * scale)
    assert np.array_equal(expr(*ops, threads=2), two)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(12, 20), size=st.integers(48, 72), seed=st.integers(0, 2**16))
def test_chains_too_small_for_the_pool_keep_their_path_on_two_threads(n, size, seed):
    # A chain contracted left to right, over 2^20 multiply-adds (so the call asks for its
    # threads) in steps too small to split, that a second thread would re-associate, but
    # whose program is too small to use the pool (`threads.rs`): the call stays on the
    # calling thread along the path it was given, so two threads give the one-thread
    # result bit for bit.
    expr, ops = left_to_right_chain(n, size, seed)
    one = expr(*ops, threads=1)
    assert np.array_equal(expr(*ops, threads=2), one)
    expected = np.linalg.multi_dot(ops)
    np.testing.assert_allclose(one, expected, rtol=1e-10, atol=1e-12 * np.abs(expected).max())
