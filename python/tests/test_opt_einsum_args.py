"""opt_einsum's and numpy's argument forms, against numpy and opt_einsum: the interleaved
form, ``get_symbol``, ``memory_limit`` values, explicit paths in every accepted shape, and
the GIL released while a path is searched."""

import pickle
import signal
import sys
import threading
import time

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import cgx
from strategies import arrays, expressions

oe = pytest.importorskip("opt_einsum")

SIZES = {label: 1 + label % 3 for label in range(-5, 2000)}


@st.composite
def interleaved(draw, labels):
    """``(operands, sublists, output)``: up to three operands with labels from ``labels``
    (sizes from ``SIZES``), and an output sublist or ``None``."""
    pool = draw(st.lists(labels, min_size=1, max_size=5, unique=True))
    sublists = draw(st.lists(st.lists(st.sampled_from(pool), max_size=3), min_size=1, max_size=3))
    used = sorted({x for sub in sublists for x in sub})
    output = draw(st.none() | st.permutations(used).flatmap(lambda p: st.integers(0, len(p)).map(lambda k: list(p[:k]))))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    operands = [rng.standard_normal([SIZES[x] for x in sub]) for sub in sublists]
    return operands, sublists, output


def args_of(operands, sublists, output):
    args = [x for pair in zip(operands, sublists) for x in pair]
    return args if output is None else [*args, output]


def string_form(sublists, output):
    """The equation with labels renamed in sorted order to letters (the implicit output,
    sorted letters, is then numpy's implicit output in the labels' order)."""
    order = sorted({x for sub in sublists for x in sub})
    letter = {x: "abcdefghijklmnopqrstuvwxyz"[k] for k, x in enumerate(order)}
    eq = ",".join("".join(letter[x] for x in sub) for sub in sublists)
    return eq if output is None else eq + "->" + "".join(letter[x] for x in output)


@settings(max_examples=150, deadline=None)
@given(interleaved(st.integers(0, 51)))
def test_interleaved_matches_numpy_interleaved(case):
    operands, sublists, output = case
    args = args_of(operands, sublists, output)
    want = np.einsum(*args)
    np.testing.assert_allclose(cgx.contract(*args), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(cgx.contract(*args, optimize="optimal"), want, rtol=1e-12, atol=1e-12)


@settings(max_examples=150, deadline=None)
@given(interleaved(st.integers(-5, 1999)))
def test_interleaved_matches_the_string_form(case):
    """Any ints (numpy takes 0..52 only), negative and large ones too."""
    operands, sublists, output = case
    eq = string_form(sublists, output)
    args = args_of(operands, sublists, output)
    want = np.einsum(eq, *operands)
    np.testing.assert_allclose(cgx.contract(*args), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(cgx.contract(eq, *operands), want, rtol=1e-12, atol=1e-12)
    path, info = cgx.contract_path(*args, optimize="dp")
    assert path == cgx.contract_path(eq, *operands, optimize="dp")[0]
    shapes = [o.shape for o in operands]
    expr = cgx.contract_expression(*args_of(shapes, sublists, output))
    np.testing.assert_allclose(expr(*operands), want, rtol=1e-12, atol=1e-12)


def test_interleaved_with_ellipses_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    a, b, m = rng.standard_normal((4, 2, 3)), rng.standard_normal((2, 3)), rng.standard_normal((5, 1, 3, 2))
    sq = rng.standard_normal((4, 3, 3))
    for args in [
        (a, [..., 0, 1], b, [0, 1]),
        (a, [..., 26, 1]),  # implicit output: the ellipsis, then 1, 26 (numpy's order, not "Aa"'s)
        (a, [..., 1, 0], [0, ...]),
        (m, [..., 3, 2], b, [2, 3], [..., 2]),
        (sq, (Ellipsis, np.int64(7), 7)),  # numpy integers, tuples, a repeated label
    ]:
        # numpy's stubs type `einsum` by the form of its first argument, not by this list.
        np.testing.assert_allclose(cgx.contract(*args), np.einsum(*args), rtol=1e-12, err_msg=repr(args[1::2]))  # type: ignore[arg-type]


def test_interleaved_beyond_52_labels_and_string_labels() -> None:
    """60 matrices in a chain: 61 labels, more than letters; opt_einsum's string labels."""
    rng = np.random.default_rng(1)
    ops = [rng.standard_normal((2, 2)) / 2 for _ in range(60)]
    args = [x for k, op in enumerate(ops) for x in (op, [1000 * k, 1000 * (k + 1)])]
    want = np.linalg.multi_dot(ops)
    np.testing.assert_allclose(cgx.contract(*args, [0, 60000]), want, rtol=1e-10)
    a, b = ops[:2]
    np.testing.assert_allclose(cgx.contract(a, ["x", "y"], b, ["y", "z"]), a @ b, rtol=1e-12)
    np.testing.assert_allclose(cgx.contract(a, ["x", "y"], b, ["y", "z"]), oe.contract(a, ["x", "y"], b, ["y", "z"]))


def test_interleaved_errors_say_what_is_wrong() -> None:
    a = np.ones((2, 2))
    with pytest.raises(TypeError, match="subscripts string first"):
        cgx.contract(a)
    with pytest.raises(TypeError, match="operand 0's labels must be a list of labels"):
        cgx.contract(a, a)
    with pytest.raises(TypeError, match="operand 0's labels must be a list of labels"):
        cgx.contract(a[0], a[1])  # two vectors, no subscripts
    np.testing.assert_allclose(cgx.contract(a, np.array([0, 1]), a, np.array([1, 2])), a @ a)
    with pytest.raises(ValueError, match="output label 7 appears in no operand's labels"):
        cgx.contract(a, [0, 1], [7])
    with pytest.raises(TypeError, match="is not a label"):
        cgx.contract(a, [[0], 1])
    with pytest.raises(TypeError, match="sortable"):
        cgx.contract(a, [0, "x"])
    with pytest.raises(ValueError, match="shape error|rank"):
        cgx.contract(a, [0, 1, 2])


def test_get_symbol_is_opt_einsums() -> None:
    for i in [*range(0, 300000, 7), 55155, 55156, 55295, 55296, 299999]:
        assert cgx.get_symbol(i) == oe.get_symbol(i), i
    assert cgx.get_symbol(np.int64(3)) == "d"  # type: ignore[arg-type]  # numpy integers are accepted too
    with pytest.raises(ValueError):
        cgx.get_symbol(-1)
    with pytest.raises(TypeError):
        cgx.get_symbol(1.0)  # type: ignore[arg-type]  # the wrong type, on purpose


def test_memory_limit_minus_one_and_none_mean_no_limit() -> None:
    a = np.random.default_rng(2).standard_normal((10, 10))
    want = np.einsum("ab,cd->abcd", a, a)
    with pytest.raises(MemoryError):
        cgx.contract("ab,cd->abcd", a, a, memory_limit=99)
    for limit in [-1, -1.0, np.int64(-1), None]:
        np.testing.assert_allclose(cgx.contract("ab,cd->abcd", a, a, memory_limit=limit), want)
        path, info = cgx.contract_path("ab,cd->abcd", a, a, memory_limit=limit)
        assert info.n_slices == 1
        expr = cgx.contract_expression("ab,cd->abcd", a.shape, a.shape, memory_limit=limit)
        assert expr.memory_limit is None
        np.testing.assert_allclose(expr(a, a), want)


@pytest.mark.parametrize(
    "limit, error, message",
    [
        (True, TypeError, "not bool True"),
        (False, TypeError, "not bool False"),
        (np.bool_(True), TypeError, "not bool"),
        (object(), TypeError, "not object"),
        ([10], TypeError, "not list"),
        (float("nan"), ValueError, "not NaN"),
        (-2, ValueError, "must not be negative"),
        (-0.5, ValueError, "must not be negative"),
        ("1e3", ValueError, "memory_limit must be"),
    ],
)
def test_bad_memory_limits_are_rejected_everywhere(limit, error, message):
    a = np.ones((2, 2))
    with pytest.raises(error, match=message):
        cgx.contract("ab,bc->ac", a, a, memory_limit=limit)
    with pytest.raises(error, match=message):
        cgx.contract_path("ab,bc->ac", a, a, memory_limit=limit)
    with pytest.raises(error, match=message):
        cgx.contract_expression("ab,bc->ac", (2, 2), (2, 2), memory_limit=limit)


EQ = "ab,bc,cd,de->ae"
SHAPES = [(2, 3), (3, 4), (4, 5), (5, 2)]


@pytest.mark.parametrize(
    "path",
    [
        [(0, 1), (0, 1), (0, 1)],
        ((0, 1), (0, 1), (0, 1)),
        [[2, 3], [0, 1], [0, 1]],
        np.array([[0, 1], [0, 1], [0, 1]]),
        np.array([[1, 0], [1, 0], [0, 1]], dtype=np.uint8),
        [np.array([0, 1, 2]), (np.int32(0), np.int64(1))],
        [(0, 1, 2, 3)],
        ["einsum_path", (0, 1), (0, 1), (0, 1)],
        "einsum_path",  # numpy's own, computed below
    ],
    ids=repr,
)
def test_explicit_paths_in_every_accepted_form(path):
    rng = np.random.default_rng(3)
    ops = [rng.standard_normal(s) for s in SHAPES]
    if isinstance(path, str):
        path = np.einsum_path(EQ, *ops, optimize="optimal")[0]
    want = np.einsum(EQ, *ops)
    np.testing.assert_allclose(cgx.contract(EQ, *ops, optimize=path), want, rtol=1e-12)
    np.testing.assert_allclose(cgx.contract_expression(EQ, *SHAPES, optimize=path)(*ops), want, rtol=1e-12)
    theirs = [tuple(int(p) for p in step) for step in path if not isinstance(step, str)]
    _, info = cgx.contract_path(EQ, *SHAPES, shapes=True, optimize=path)
    if all(len(step) == 2 for step in theirs):
        assert cgx.contract_path(EQ, *SHAPES, shapes=True, optimize=path)[0] == theirs
        # the same cost as opt_einsum along the same path
        assert info.opt_cost == oe.contract_path(EQ, *SHAPES, shapes=True, optimize=theirs)[1].opt_cost


@pytest.mark.parametrize(
    "path, error, message",
    [
        ([(0.5, 1), (0, 1), (0, 1)], ValueError, r"step 0 \(0.5, 1\) is not a tuple of positions: 0.5 is not an integer"),
        ([(0, 1), (1.0, 0), (0, 1)], ValueError, "1.0 is not an integer"),
        ([(0, 1), (True, 0), (0, 1)], ValueError, "True is not an integer"),
        (np.array([[0.5, 1], [0, 1], [0, 1]]), ValueError, r"step 0 \[0.5, 1.0\] .*0.5 is not an integer"),
        ([(0, 1), "ab", (0, 1)], ValueError, "step 1 'ab' is not a tuple of positions"),
        ([0, 1, 2], ValueError, "step 0 0 is not a tuple of positions"),
        (np.array([0, 1, 2]), ValueError, "step 0 0 is not a tuple of positions"),
        ([(0, 1), (0, None), (0, 1)], ValueError, "None is not an integer"),
        (3, TypeError, "optimize must be .* not int 3"),
        (2.5, TypeError, "not float 2.5"),
        ({(0, 1): 1}, TypeError, "not dict"),
        ([(0, -1), (0, 1), (0, 1)], ValueError, "position -1 is out of range"),
    ],
    ids=repr,
)
def test_bad_paths_name_the_bad_entry(path, error, message):
    ops = [np.ones(s) for s in SHAPES]
    with pytest.raises(error, match=message):
        cgx.contract(EQ, *ops, optimize=path)
    with pytest.raises(error, match=message):
        cgx.contract_path(EQ, *SHAPES, shapes=True, optimize=path)
    with pytest.raises(error, match=message):
        cgx.contract_expression(EQ, *SHAPES, optimize=path)


# A ring of 16 operands with 4 shared labels: the exact search ('optimal', up to 16
# operands) takes about half a second today, and the search's time does not depend on
# the greedy finder.
RING = ",".join(cgx.get_symbol(i) + cgx.get_symbol((i + 1) % 16) + cgx.get_symbol(16 + i % 4) for i in range(16)) + "->"
RING_SHAPES = [(3, 3, 2)] * 16


@pytest.mark.parametrize(
    "plan",
    [
        lambda: cgx.contract_path(RING, *RING_SHAPES, shapes=True, optimize="optimal"),
        lambda: cgx.contract_expression(RING, *RING_SHAPES, optimize="optimal"),
    ],
    ids=["contract_path", "contract_expression"],
)
def test_other_threads_run_while_a_path_is_searched(plan):
    """A second thread notes the time every millisecond while this one plans. Holding the
    GIL, the search would keep it from running from the moment the search starts until
    it returns, so none of its notes would fall in the middle half of the search. Without
    the GIL it notes the time throughout. Nothing here depends on how fast the machine is,
    only on the search taking some tens of milliseconds (a 16-operand ring searched
    exactly: about a second)."""
    stop = threading.Event()
    notes = []

    def note_the_time():
        while not stop.is_set():
            notes.append(time.monotonic())
            time.sleep(1e-3)

    worker = threading.Thread(target=note_the_time)
    worker.start()
    try:
        start = time.monotonic()
        plan()
        end = time.monotonic()
    finally:
        stop.set()
        worker.join()
    quarter = (end - start) / 4
    assert quarter > 5e-3, f"the search took {end - start:.4f} s: too short to tell"
    inside = [t for t in notes if start + quarter < t < end - quarter]
    assert inside, f"no note in the middle half of a {end - start:.3f} s search: the GIL was held"


# An 8x8 grid of operands, one label per edge: `dp` examines pairs of subsets for about a
# minute on it before it gives up and falls back to random-greedy.
GRID = ",".join(
    "".join(cgx.get_symbol(min(v, w) * 64 + max(v, w)) for w in (v - 8, v + 8, v - 1, v + 1) if 0 <= w < 64 and (w // 8 == v // 8 or w % 8 == v % 8))
    for v in range(64)
) + "->"
GRID_SHAPES = [(2,) * len(term) for term in GRID[:-2].split(",")]


def grid(side):
    """A side × side grid of operands, one label of size 2 per edge, scalar output."""
    n = side * side
    edges: dict[tuple[int, int], int] = {}
    terms = []
    for v in range(n):
        near = [w for w in (v - side, v + side, v - 1, v + 1) if 0 <= w < n and (w // side == v // side or w % side == v % side)]
        terms.append("".join(cgx.get_symbol(edges.setdefault((min(v, w), max(v, w)), len(edges))) for w in near))
    return ",".join(terms) + "->", [(2,) * len(t) for t in terms]


# `auto` plans the 8x8 grid in a few tenths of a second (a short hyper-optimizer search,
# then a DP that gives up once it cannot beat it); on a 40x40 grid its hyper-optimizer
# alone takes 0.8 s (0.5 ms per operand).
SEARCHES = {"dp": (GRID, GRID_SHAPES), "auto": grid(40)}


@pytest.mark.parametrize("optimize", ["dp", "auto"])
def test_ctrl_c_ends_a_path_search(optimize):
    """SIGINT while a search runs raises ``KeyboardInterrupt`` from inside the search (the
    note it carries says so: without the search asking for signals, the interrupt would be
    raised only after it returned, without the note), and the package works afterwards."""
    eq, shapes = SEARCHES[optimize]
    timer = threading.Timer(0.2, signal.raise_signal, (signal.SIGINT,))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt) as raised:
            cgx.contract_path(eq, *shapes, shapes=True, optimize=optimize)
    finally:
        timer.join()
    if sys.version_info >= (3, 11):
        notes = getattr(raised.value, "__notes__", [])
        assert any(f"`{optimize}` path search" in n for n in notes), notes
    assert cgx.contract_path("ij,jk->ik", (2, 2), (2, 2), shapes=True)[0] == [(0, 1)]


@settings(max_examples=100, deadline=None)
@given(expressions(max_operands=4), st.data())
def test_constants_match_opt_einsum_and_the_whole_expression(case, data):
    """``constants=``: called with the other operands, the expression gives opt_einsum's
    value, and its gradients are the whole expression's at those operands; it pickles with
    its constants."""
    eq, shapes = case
    n = len(shapes)
    constant = sorted(data.draw(st.sets(st.integers(0, n - 1), max_size=n - 1)))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    operands = arrays(rng, shapes)
    given_ = [operands[p] if p in constant else shapes[p] for p in range(n)]
    variables = [operands[p] for p in range(n) if p not in constant]
    expr = cgx.contract_expression(eq, *given_, constants=constant)
    want = oe.contract_expression(eq, *given_, constants=constant)(*variables)
    np.testing.assert_allclose(expr(*variables), want, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(pickle.loads(pickle.dumps(expr))(*variables), want, rtol=1e-10, atol=1e-10)
    whole = cgx.contract_expression(eq, *shapes)
    cotangent = rng.standard_normal(np.shape(want))
    _, grads = expr.value_and_grad(*variables, cotangent=cotangent)
    _, all_grads = whole.value_and_grad(*operands, cotangent=cotangent)
    assert len(grads) == len(variables)
    for g, p in zip(grads, [p for p in range(n) if p not in constant]):
        np.testing.assert_allclose(g, all_grads[p], rtol=1e-10, atol=1e-10)
    with pytest.raises(ValueError, match="besides its constants" if constant else "operands"):
        expr(*operands, operands[0])


def test_constants_that_are_not_positions_are_rejected() -> None:
    a = np.ones((2, 2))
    for bad in ([2], [-1], ["0"], [0.5]):
        with pytest.raises(ValueError, match="constants"):
            cgx.contract_expression("ij,jk->ik", a, (2, 2), constants=bad)


@settings(max_examples=200, deadline=None)
@given(expressions(max_operands=5))
def test_path_info_reads_as_opt_einsums_along_the_same_path(case):
    """``PathInfo``'s fields that opt_einsum has, equal to opt_einsum's for the same path
    (costs, sizes, labels, and the contraction list up to the order of a result's labels):
    the path the engine runs, ``info.path``, with its first sums as one-operand steps."""
    eq, shapes = case
    assume(len(shapes) >= 2)
    _, info = cgx.contract_path(eq, *shapes, shapes=True)
    _, theirs = oe.contract_path(eq, *shapes, shapes=True, optimize=info.path)
    assert float(info.naive_cost) == float(theirs.naive_cost)
    assert float(info.opt_cost) == float(theirs.opt_cost)
    assert float(info.speedup) == pytest.approx(float(theirs.speedup))
    assert [float(x) for x in info.size_list] == [float(x) for x in theirs.size_list]
    assert info.scale_list == list(theirs.scale_list)
    assert info.indices == theirs.indices
    assert len(info.contraction_list) == len(theirs.contraction_list)
    for ours, opt in zip(info.contraction_list, theirs.contraction_list):
        assert set(ours[0]) == set(opt[0]) and ours[1] == opt[1]
        assert [frozenset(t) for t in ours[3]] == [frozenset(t) for t in opt[3]]
        # Ours says "GEMM" or False; opt_einsum names more kinds ("DOT", "OUTER/EINSUM").
        assert ours[4] in ("GEMM", False) and (not ours[4] or opt[4])
