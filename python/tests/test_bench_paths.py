"""The path-search benchmark's scoring (`python/bench/paths_hyper.py`) and networks
(`python/bench/networks.py`): the reference count against opt_einsum's and cotengra's, and
every generated network a valid einsum."""

import os
import sys

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from strategies import expressions, split

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import networks as nw  # noqa: E402
import paths_hyper as ph  # noqa: E402

SETTINGS = settings(max_examples=200, deadline=None)


@st.composite
def paths(draw, n, singles=True):
    """A random complete path over `n` operands in opt_einsum's linear form: pairs until one
    operand is left, with single-operand steps between them when `singles`."""
    path: list[tuple[int, ...]] = []
    m = n
    while True:
        if singles and draw(st.integers(0, 3)) == 0:
            path.append((draw(st.integers(0, m - 1)),))
        if m == 1:
            return path
        i = draw(st.integers(0, m - 1))
        j = draw(st.integers(0, m - 2))
        path.append((i, j if j < i else j + 1))
        m -= 1


@st.composite
def cases(draw, singles=True):
    eq, shapes = draw(expressions(max_operands=7, max_rank=4, max_size=4, explicit=True))
    terms, out = split(eq)
    sizes = {c: d for t, s in zip(terms, shapes) for c, d in zip(t, s)}
    return eq, shapes, terms, out, sizes, draw(paths(len(terms), singles))


@SETTINGS
@given(case=cases())
def test_count_is_opt_einsums_cost_without_its_factor_of_two(case):
    oe = pytest.importorskip("opt_einsum")
    eq, shapes, terms, out, sizes, path = case
    s = ph.score(terms, out, sizes, path)
    _, info = oe.contract_path(eq, *shapes, shapes=True, optimize=path)
    # opt_einsum counts a step that sums a label twice, one that sums none once.
    assert s.opt_einsum_cost == int(info.opt_cost)
    assert s.flops <= int(info.opt_cost) <= 2 * s.flops
    if path:
        assert s.largest == int(info.largest_intermediate)


@SETTINGS
@given(case=cases(singles=False))
def test_count_is_cotengras_contraction_cost(case):
    ctg = pytest.importorskip("cotengra")
    _, _, terms, out, sizes, path = case
    # cotengra sums a label that one operand alone holds before it counts anything; the
    # benchmark's networks have no such label, so the comparison leaves them out.
    assume(len(terms) >= 2)
    assume(all(c in out or sum(c in t for t in terms) > 1 for t in terms for c in t))
    tree = ctg.ContractionTree.from_path([tuple(t) for t in terms], tuple(out), sizes, path=path)
    s = ph.score(terms, out, sizes, path)
    assert s.flops == int(tree.contraction_cost())
    assert s.largest == int(tree.max_size())


def test_count_by_hand() -> None:
    # ab,bc,cd->ad: (ab,bc) touches a,b,c: 2*3*4; then (ad... ) touches a,c,d: 2*4*5.
    s = ph.score(["ab", "bc", "cd"], "ad", {"a": 2, "b": 3, "c": 4, "d": 5}, [(0, 1), (0, 1)])
    assert s.flops == 2 * 3 * 4 + 2 * 4 * 5
    assert s.largest == 2 * 5
    assert s.steps == [(24, True), (40, True)]


@pytest.mark.parametrize("path", [[(0, 3), (0, 1)], [(0, 0), (0, 1)], [(0, 1)], [(), (0, 1), (0, 1)]])
def test_count_rejects_what_is_not_a_path(path):
    with pytest.raises(ValueError):
        ph.score(["ab", "bc", "cd"], "ad", {"a": 2, "b": 3, "c": 4, "d": 5}, path)


def test_every_generated_network_is_valid() -> None:
    nets = nw.networks()
    assert nets, "no network at all: the shared instances are missing"
    names = [n.name for n in nets]
    assert len(set(names)) == len(names)
    for net in nets:
        assert nw.check(net) == [], net.name
        # Every label of an operand has the size its axis has, so the equation and shapes
        # given to each finder describe one network.
        for term, shape in zip(net.inputs, net.shapes):
            assert len(term) == len(shape) and all(net.sizes[c] == d for c, d in zip(term, shape)), net.name


@SETTINGS
@given(case=cases(), data=st.data())
def test_a_label_with_two_sizes_is_found(case, data):
    eq, shapes, terms, out, sizes, _ = case
    assert nw.check(nw._from_eq("t", "t", "t", eq, shapes)) == []
    # Only a label at two axes or more can disagree with itself.
    where = [(k, a) for k, t in enumerate(terms) for a in range(len(t)) if "".join(terms).count(t[a]) > 1]
    assume(where)
    k, a = data.draw(st.sampled_from(where))
    bad = [list(s) for s in shapes]
    bad[k][a] += 1
    with pytest.raises(ValueError, match="sizes"):
        nw._from_eq("t", "t", "t", eq, bad)


def test_check_finds_bad_output() -> None:
    net = nw.Network("t", "t", "t", ["ab", "bc"], "aa", {"a": 2, "b": 2, "c": 2})
    assert nw.check(net)
    net = nw.Network("t", "t", "t", ["ab", "bc"], "d", {"a": 2, "b": 2, "c": 2, "d": 2})
    assert nw.check(net)
    net = nw.Network("t", "t", "t", ["ab", "bc"], "a", {"a": 2, "b": 0, "c": 2})
    assert nw.check(net)
    net = nw.Network("t", "t", "t", ["a-", "bc"], "a", {"a": 2, "-": 2, "b": 2, "c": 2})
    assert nw.check(net)


@SETTINGS
@given(pairs=st.lists(st.tuples(st.integers(1, 10**6), st.integers(1, 10**6), st.integers(1, 10**6)), min_size=1, max_size=12))
def test_summary_counts_the_targets(pairs):
    # Rows as the benchmark makes them, for a cgx hyper-optimizer at T and T/10 and cotengra.
    rows = []
    for k, (ours, tenth, theirs) in enumerate(pairs):
        for finder, flops in [("cgx hyper T", ours), ("cgx hyper T/10", tenth), ("cotengra hyper T", theirs)]:
            rows.append(ph.Row(f"n{k}", "f", 3, finder, budget=10.0, flops=flops, seconds=1.0))
    lines = "\n".join(ph.summary(rows, 10.0, True))
    n = len(pairs)
    at_most = sum(1 for a, _, c in pairs if a <= c)
    within = sum(1 for _, b, c in pairs if b <= 2 * c)
    assert f"on {at_most}/{n} (" in lines
    assert f"worst ratio {max(a / c for a, _, c in pairs):.3g}×" in lines
    assert f"at 1 s within 2× of cotengra at 10 s on {within}/{n} (" in lines
    assert f"worst ratio {max(b / c for _, b, c in pairs):.3g}×" in lines


@SETTINGS
@given(flops=st.lists(st.one_of(st.none(), st.integers(1, 10**9)), min_size=1, max_size=7))
def test_collapse_takes_the_median_run(flops):
    rows = [ph.Row("n", "f", 3, "cotengra hyper T", budget=1.0, flops=f, log10_flops=None if f is None else float(f),
                   run=k, error=None if f is not None else "failed") for k, f in enumerate(flops)]
    (row,) = ph.collapse(rows)
    ok = sorted(f for f in flops if f is not None)
    # Failed runs rank last, so they move the median up but are never it while at least half succeed.
    ranked = ok + [None] * (len(flops) - len(ok))
    assert row.flops == ranked[(len(flops) - 1) // 2]
    if len(flops) > 1:
        assert row.runs == [float(f) for f in ok]
