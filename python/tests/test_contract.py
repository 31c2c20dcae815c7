"""contract, contract_path and contract_expression against numpy.einsum."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cgx
from strategies import arrays, expressions

SETTINGS = settings(max_examples=150, deadline=None)


@SETTINGS
@given(case=expressions(), complex_=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_random_expressions_match_numpy(case, complex_, seed):
    eq, shapes = case
    ops = arrays(np.random.default_rng(seed), shapes, complex_)
    want = np.einsum(eq, *ops)
    got = cgx.contract(eq, *ops)
    assert got.dtype == (np.complex128 if complex_ else np.float64)
    assert got.shape == np.shape(want)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


@SETTINGS
@given(case=expressions(min_size=0, max_size=2), seed=st.integers(0, 2**32 - 1))
def test_empty_dimensions_match_numpy(case, seed):
    eq, shapes = case
    ops = arrays(np.random.default_rng(seed), shapes)
    np.testing.assert_allclose(cgx.contract(eq, *ops), np.einsum(eq, *ops), atol=1e-10)


@SETTINGS
@given(case=expressions(explicit=True), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_every_explicit_path_gives_the_same_result(case, seed, data):
    eq, shapes = case
    ops = arrays(np.random.default_rng(seed), shapes)
    path = []
    for remaining in range(len(ops), 1, -1):
        i = data.draw(st.integers(0, remaining - 1))
        j = data.draw(st.integers(0, remaining - 2))
        path.append((i, j if j < i else j + 1))
    np.testing.assert_allclose(cgx.contract(eq, *ops, optimize=path), np.einsum(eq, *ops), rtol=1e-10, atol=1e-10)
    expr = cgx.contract_expression(eq, *shapes, optimize=path)
    assert expr.path == path
    np.testing.assert_allclose(expr(*ops), np.einsum(eq, *ops), rtol=1e-10, atol=1e-10)


def test_expression_is_compiled_once_and_called_many_times() -> None:
    rng = np.random.default_rng(0)
    expr = cgx.contract_expression("ij,jk,kl->il", (3, 4), (4, 5), (5, 2))
    assert expr.output_shape == [3, 2]
    for complex_ in (False, True, False):
        ops = arrays(rng, expr.shapes, complex_)
        np.testing.assert_allclose(expr(*ops), ops[0] @ ops[1] @ ops[2], rtol=1e-12)
    assert "ContractExpression('ij,jk,kl->il'" in repr(expr)


def test_path_formats_and_optimizers() -> None:
    oe = pytest.importorskip("opt_einsum")
    rng = np.random.default_rng(1)
    eq = "ab,bc,cd,de->ae"
    ops = arrays(rng, [(2, 3), (3, 4), (4, 5), (5, 2)])
    want = np.einsum(eq, *ops)
    np_path = np.einsum_path(eq, *ops, optimize="greedy")[0]  # ['einsum_path', (..), ...]
    oe_path, _ = oe.contract_path(eq, *ops, optimize="optimal")
    for optimize in [
        "greedy",
        "auto",
        True,
        False,
        "optimal",
        "dp",
        "branch-2",
        oe.paths.greedy,
        oe.paths.DynamicProgramming(),
        np_path,
        oe_path,
        [(0, 1, 2, 3)],  # one step of four operands, split into pairs
        [(3,), (0, 1), (0, 1, 2)],  # a one-operand step only moves an operand
    ]:
        np.testing.assert_allclose(cgx.contract(eq, *ops, optimize=optimize), want, rtol=1e-12, err_msg=str(optimize))


def test_an_optimizer_object_gets_opt_einsums_arguments() -> None:
    seen: dict[str, object] = {}

    def optimizer(inputs, output, size_dict, memory_limit=None):
        seen.update(inputs=inputs, output=output, size_dict=size_dict, memory_limit=memory_limit)
        return [(1, 2), (0, 1)]

    ops = [np.ones((2, 3)), np.ones((3, 4)), np.ones((4, 5))]
    np.testing.assert_allclose(cgx.contract("ij,jk,kl->il", *ops, optimize=optimizer, memory_limit=1000), np.full((2, 5), 12.0))
    assert seen == {
        "inputs": [frozenset("ij"), frozenset("jk"), frozenset("kl")],
        "output": frozenset("il"),
        "size_dict": {"i": 2, "j": 3, "k": 4, "l": 5},
        "memory_limit": 1000.0,
    }


def test_contract_path_reports_the_path() -> None:
    path, info = cgx.contract_path("ij,jk,kl->il", (2, 30), (30, 40), (40, 2))
    assert path == [(1, 2), (0, 1)] or path == [(0, 1), (0, 1)]
    assert info.path == path
    assert info.largest_intermediate == max(s[2] for s in info.steps)
    # opt_einsum's count: two flops per multiply-add in a step that sums labels away; the
    # naive loop, over 3 operands with shared labels, three per iteration.
    assert info.opt_cost == 2 * sum(s[3] for s in info.steps)
    assert info.naive_cost == 3 * 2 * 30 * 40 * 2
    assert info.size_dict == {"i": 2, "j": 30, "k": 40, "l": 2}
    text = str(info)
    for needle in ["Complete contraction:  ij,jk,kl->il", "Optimized FLOP count", "Largest intermediate", "->il"]:
        assert needle in text, text
    # Arrays and shapes are interchangeable, and shapes=True takes any sequence.
    ops = [np.ones(s) for s in [(2, 30), (30, 40), (40, 2)]]
    assert cgx.contract_path("ij,jk,kl->il", *ops)[0] == path
    assert cgx.contract_path("ij,jk,kl->il", [2, 30], [30, 40], [40, 2], shapes=True)[0] == path


def test_the_report_shows_scalar_operands_and_final_reductions() -> None:
    _, info = cgx.contract_path("ij,->ji", (2, 3), ())
    assert [s[0] for s in info.steps] == [(0, 1)]
    assert "(0, 1)" in str(info) and "ij,->ji" in str(info)
    _, info = cgx.contract_path("ij->ji", (2, 3))
    assert [(s[0], s[1]) for s in info.steps] == [((0, 0), ("ij", "", "ji"))]
    assert "(0,)" in str(info) and "ij->ji" in str(info)
    assert cgx.contract_path("ij->ij", (2, 3))[1].steps == []


def test_contract_path_matches_opt_einsum_costs_on_its_path() -> None:
    oe = pytest.importorskip("opt_einsum")
    eq, shapes = "ab,bc,cd->ad", [(3, 4), (4, 5), (5, 6)]
    path, theirs = oe.contract_path(eq, *shapes, shapes=True, optimize="optimal")
    ours_path, ours = cgx.contract_path(eq, *shapes, shapes=True, optimize=path)
    assert ours_path == [tuple(p) for p in path]
    assert ours.largest_intermediate == theirs.largest_intermediate


def test_layouts_and_dtypes() -> None:
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 6))
    b = rng.standard_normal((6, 5))
    want = a @ b
    np.testing.assert_allclose(cgx.contract("ij,jk->ik", np.asfortranarray(a), b), want, rtol=1e-12)
    np.testing.assert_allclose(cgx.contract("ji,jk->ik", a.T, b), want, rtol=1e-12)
    np.testing.assert_allclose(cgx.contract("ij,jk->ik", a[:, ::1], b[::1]), want, rtol=1e-12)
    np.testing.assert_allclose(cgx.contract("ij,jk->ik", a[::2], b), a[::2] @ b, rtol=1e-12)
    np.testing.assert_allclose(cgx.contract("ij,jk->ik", a.astype(np.float32), b), a.astype(np.float32) @ b, rtol=1e-6)
    assert cgx.contract("ij,jk->ik", a.astype(np.int32), b).dtype == np.float64
    assert cgx.contract("ii->", [[1, 2], [3, 4]]) == 5.0
    z = cgx.contract("i,i->", np.array([1.0, 2.0]), np.array([1j, 2]))
    assert z.dtype == np.complex128 and z == 4 + 1j
    assert cgx.contract("ij,jk->ik", a.astype(np.complex64), b).dtype == np.complex128
    # The inputs are not modified, and the output owns its data.
    a0 = a.copy()
    out = cgx.contract("ij->ij", a)
    out[0, 0] = 99.0
    np.testing.assert_array_equal(a, a0)


def test_implicit_output_and_unicode_labels() -> None:
    a, b = np.ones((2, 3)), np.ones((3, 4))
    assert cgx.contract("ba,ac", a, b).shape == (2, 4)
    assert cgx.contract("éa,aÇ->éÇ", a, b).shape == (2, 4)
    assert cgx.contract(" i j , j k -> i k ", a, b).shape == (2, 4)


def test_the_gil_is_released_during_large_contractions() -> None:
    import threading
    import time

    a = np.random.default_rng(3).standard_normal((600, 600))
    span = {}

    def work():
        span["start"] = time.perf_counter()
        cgx.contract("ij,jk,kl->il", a, a, a)
        span["end"] = time.perf_counter()

    worker = threading.Thread(target=work)
    seen = []
    worker.start()
    while worker.is_alive():
        seen.append(time.perf_counter())  # runs only while this thread has the GIL
    worker.join()
    inside = [t for t in seen if span["start"] < t < span["end"]]
    # Holding the GIL, Rust would leave this thread a few 5 ms switch slices at most.
    assert inside and inside[-1] - inside[0] > 0.5 * (span["end"] - span["start"]), (len(inside), span)


def test_contract_path_reports_a_network_whose_naive_cost_overflows_an_integer_to_float() -> None:
    # 200 labels of size 64: the loop over all labels has 64**200 iterations, more than a
    # float holds; the report says inf instead of raising.
    n = 200
    letters = [chr(0x100 + i) for i in range(n + 1)]
    eq = ",".join(letters[i] + letters[i + 1] for i in range(n)) + "->"
    shapes = [(64, 64)] * n
    path, info = cgx.contract_path(eq, *shapes, shapes=True)
    assert len(path) == n - 1
    assert info.naive_cost == float("inf")
