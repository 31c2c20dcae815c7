"""Where opt_einsum 3.4.0 and cgx take the same call, they answer alike: keywords that
opt_einsum accepts, the exceptions it raises, its report of a contraction without steps,
and the label characters of ``get_symbol``. (The differences that remain are listed in
docs/guide-python.md, "Coming from opt_einsum".)"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cgx

oe = pytest.importorskip("opt_einsum")


def test_contract_expression_takes_use_blas() -> None:
    a, b = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
    for use_blas in (True, False):
        expr = cgx.contract_expression("ij,jk->ik", a.shape, b.shape, use_blas=use_blas)
        np.testing.assert_allclose(expr(a, b), oe.contract("ij,jk->ik", a, b, use_blas=use_blas))


def test_an_unknown_optimizer_is_a_key_error_and_a_value_error() -> None:
    for call in (
        lambda o: cgx.contract("ij,jk->ik", np.ones((2, 3)), np.ones((3, 4)), optimize=o),
        lambda o: cgx.contract_path("ij,jk,kl->il", (2, 3), (3, 4), (4, 5), optimize=o),
        lambda o: cgx.contract_expression("ij,jk->ik", (2, 3), (3, 4), optimize=o),
    ):
        with pytest.raises(KeyError) as e:
            call("no-such-optimizer")
        assert isinstance(e.value, ValueError)
        assert "no-such-optimizer" in str(e.value)
    # opt_einsum's own exception for the same name, for comparison.
    with pytest.raises(KeyError):
        oe.contract_path("ij,jk,kl->il", np.ones((2, 3)), np.ones((3, 4)), np.ones((4, 5)), optimize="no-such-optimizer")


def test_contract_expression_refuses_what_opt_einsum_refuses() -> None:
    with pytest.raises(ValueError):
        oe.contract_expression("ij,jk->ik", (2, 3), (3, 4), optimize=False)
    with pytest.raises(ValueError, match="optimize=False"):
        cgx.contract_expression("ij,jk->ik", (2, 3), (3, 4), optimize=False)
    for name in ("out", "backend"):
        value = np.empty((2, 4)) if name == "out" else "numpy"
        with pytest.raises(ValueError):
            oe.contract_expression("ij,jk->ik", (2, 3), (3, 4), **{name: value})
        with pytest.raises(ValueError, match=f"'{name}' is given when calling"):
            cgx.contract_expression("ij,jk->ik", (2, 3), (3, 4), **{name: value})
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        cgx.contract_expression("ij,jk->ik", (2, 3), (3, 4), colour="red")


def test_an_output_over_memory_limit_raises_when_the_expression_is_built() -> None:
    with pytest.raises(MemoryError, match="more than memory_limit=10"):
        cgx.contract_expression("ab,cd->abcd", (2, 3), (2, 3), memory_limit=10)
    # At the limit it builds and runs.
    expr = cgx.contract_expression("ab,cd->abcd", (2, 3), (2, 3), memory_limit=36)
    assert expr(np.ones((2, 3)), np.ones((2, 3))).shape == (2, 3, 2, 3)


@pytest.mark.parametrize("optimize", ["optimal", "greedy", "branch-2", "dp", "auto"])
def test_memory_limit_differs_from_opt_einsum_only_as_the_guide_says(optimize):
    # "Coming from opt_einsum", memory_limit: where the intermediates exceed the limit but
    # the output meets it, opt_einsum ends its path in one step over every label (its
    # `dp` raises); cgx slices, keeps every intermediate of a slice within the limit and
    # gives numpy's value.
    eq, shapes, limit = "ab,bc,cd,de->ae", [(4, 8), (8, 8), (8, 8), (8, 4)], 20
    rng = np.random.default_rng(4)
    ops = [rng.standard_normal(s) for s in shapes]
    if optimize == "dp":
        with pytest.raises(RuntimeError):
            oe.contract_path(eq, *shapes, shapes=True, optimize=optimize, memory_limit=limit)
    else:
        path, _ = oe.contract_path(eq, *shapes, shapes=True, optimize=optimize, memory_limit=limit)
        assert path == [(0, 1, 2, 3)]
    _, info = cgx.contract_path(eq, *shapes, shapes=True, optimize=optimize, memory_limit=limit)
    assert info.sliced_inds and info.largest_intermediate > limit >= info.largest_per_slice
    got = cgx.contract(eq, *ops, optimize=optimize, memory_limit=limit)
    np.testing.assert_allclose(got, np.einsum(eq, *ops), rtol=1e-12, atol=1e-12)
    # An output over the limit: opt_einsum returns its one-step path, cgx raises at once.
    assert oe.contract_path("ab,cd->abcd", (4, 4), (4, 4), shapes=True, optimize=optimize, memory_limit=5)[0] == [(0, 1)]
    with pytest.raises(MemoryError, match="more than memory_limit=5"):
        cgx.contract_path("ab,cd->abcd", (4, 4), (4, 4), shapes=True, optimize=optimize, memory_limit=5)


def test_max_input_slices_where_opt_einsum_takes_one_large_step():
    eq, shapes = "ab,ac,ad->bcd", [(10, 2), (10, 2), (10, 2)]
    path, _ = oe.contract_path(eq, *shapes, shapes=True, memory_limit="max_input")
    assert path == [(0, 1, 2)]
    _, info = cgx.contract_path(eq, *shapes, shapes=True, memory_limit="max_input")
    assert info.sliced_inds and info.largest_per_slice <= max(a * b for a, b in shapes)
    ops = [np.random.default_rng(5).standard_normal(s) for s in shapes]
    got = cgx.contract(eq, *ops, memory_limit="max_input")
    np.testing.assert_allclose(got, np.einsum(eq, *ops), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "eq, shapes",
    [("->", [()]), ("ab->ab", [(2, 3)]), ("a,b->ab", [(2,), (3,)]), ("abc->", [(2, 3, 4)])],
)
def test_the_report_of_an_empty_or_short_path_matches_opt_einsum(eq, shapes):
    arrays = [np.ones(s) for s in shapes]
    path = [] if len(shapes) == 1 and eq.split("->")[0] == eq.split("->")[1] else [tuple(range(len(shapes)))]
    _, theirs = oe.contract_path(eq, *arrays, optimize=path)
    _, ours = cgx.contract_path(eq, *arrays, optimize=path)
    assert float(ours.largest_intermediate) == float(theirs.largest_intermediate)


def test_the_report_of_a_scalar_without_steps_is_opt_einsums() -> None:
    _, theirs = oe.contract_path("->", 1.0, optimize=[])
    _, ours = cgx.contract_path("->", 1.0, optimize=[])
    assert float(theirs.largest_intermediate) == 1
    assert ours.largest_intermediate == 1


def test_get_symbol_is_opt_einsums() -> None:
    for i in [0, 25, 26, 51, 52, 5620, 55155, 55296, 100000, 199999]:
        assert cgx.get_symbol(i) == oe.get_symbol(i)


# Symbols that no Python string passed to the engine can hold (opt_einsum's formula gives
# surrogates for these indices too): Rust strings are UTF-8.
SURROGATES = range(0xD800 - 140, 0xD800 + 0x800 - 140)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 200_000), st.integers(0, 200_000))
def test_every_symbol_of_get_symbol_parses_as_a_label(i, j):
    x, y = cgx.get_symbol(i), cgx.get_symbol(j)
    if i == j or i in SURROGATES or j in SURROGATES:
        return
    a, b = np.arange(6.0).reshape(2, 3), np.arange(3.0)
    # A label in each position: first, last, shared, in the output.
    np.testing.assert_allclose(cgx.contract(f"{x}{y},{y}->{x}", a, b), a @ b)
    np.testing.assert_allclose(cgx.contract(f"{y}{x},{y}", a.T.copy(), b), a @ b)
    assert cgx.contract_path(f"{x}{y},{y}->{x}", a.shape, b.shape, shapes=True)[1].size_dict == {x: 2, y: 3}


def test_a_unicode_space_from_get_symbol_contracts_as_in_opt_einsum() -> None:
    # get_symbol(5620) is U+1680, which Unicode calls whitespace.
    s = cgx.get_symbol(5620)
    assert s == "\u1680" and s.isspace()
    a, b = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
    eq = f"a{s},{s}b->ab"
    np.testing.assert_allclose(cgx.contract(eq, a, b), oe.contract(eq, a, b))


def test_a_lattice_of_more_than_5600_labels_written_with_get_symbol() -> None:
    # A 60 x 60 square lattice of scalars-by-bond (7080 bonds): every bond a label.
    n = 60
    bond: dict[tuple[int, int], str] = {}

    def label(u, v):
        key = (min(u, v), max(u, v))
        if key not in bond:
            bond[key] = cgx.get_symbol(len(bond))
        return bond[key]

    terms = []
    for r in range(n):
        for c in range(n):
            site = r * n + c
            nbrs = [(r + dr) * n + (c + dc) for dr, dc in ((0, 1), (1, 0), (0, -1), (-1, 0)) if 0 <= r + dr < n and 0 <= c + dc < n]
            terms.append("".join(label(site, m) for m in nbrs))
    assert len(bond) > 5620
    eq = ",".join(terms) + "->"
    shapes = [(1,) * len(t) for t in terms]
    path, info = cgx.contract_path(eq, *shapes, shapes=True)
    assert len(info.size_dict) == len(bond)


def test_every_deselected_test_of_opt_einsums_suite_is_listed_with_its_reason() -> None:
    import ast
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2]
    conftest, testing = root / ".ci" / "opt_einsum_suite" / "conftest.py", root / "docs" / "TESTING.md"
    if not conftest.exists() or not testing.exists():
        pytest.skip("run from the repository: .ci/ and docs/ are not packaged")
    tree = ast.parse(conftest.read_text(encoding="utf-8"))
    deselected = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "DESELECTED" for t in node.targets)
    )
    assert deselected
    text = testing.read_text(encoding="utf-8")
    for nodeid, reason in deselected.items():
        assert f"| `{nodeid}` |" in text, f"{nodeid} is deselected but not listed in docs/TESTING.md"
        assert reason
