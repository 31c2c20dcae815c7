"""cgx.HyperOptimizer and optimize="hyper": valid paths whose contractions equal
opt_einsum's, reported costs equal to a reference count of the same path, seeded reproducibility, the
argument checks, and opt_einsum's PathOptimizer protocol."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cgx

opt_einsum = pytest.importorskip("opt_einsum")


def ring_and_chords(n: int, seed: int) -> tuple[str, list[tuple[int, ...]]]:
    """A ring of n tensors with random chords, bonds of size 2 or 3: an equation and shapes."""
    rng = np.random.default_rng(seed)
    edges = [(i, (i + 1) % n) for i in range(n)] + [tuple(sorted(rng.choice(n, 2, replace=False))) for _ in range(n // 3)]
    edges = sorted(set(edges))
    sizes = {e: int(rng.integers(2, 4)) for e in edges}
    terms: list[list[int]] = [[] for _ in range(n)]
    for k, (a, b) in enumerate(edges):
        terms[a].append(k)
        terms[b].append(k)
    eq = ",".join("".join(cgx.get_symbol(k) for k in t) for t in terms) + "->"
    shapes = [tuple(sizes[edges[k]] for k in t) for t in terms]
    return eq, shapes


def multiply_adds(eq, shapes, path):
    """The sum over pairwise steps of the product of the sizes of every label the step
    touches, an intermediate keeping the labels still needed by another operand or the
    output: the count the search minimizes."""
    terms, output = eq.split("->")
    ops = [set(t) for t in terms.split(",")]
    size = {c: d for t, s in zip(terms.split(","), shapes) for c, d in zip(t, s)}
    total = 0
    for i, j in path:
        a, b = ops[i], ops[j]
        rest = [o for k, o in enumerate(ops) if k not in (i, j)]
        total += int(np.prod([size[c] for c in a | b]))
        kept = {c for c in a | b if c in output or any(c in o for o in rest)}
        ops = rest + [kept]
    return total


@settings(max_examples=12, deadline=None)
@given(n=st.integers(13, 30), seed=st.integers(0, 2**16))
def test_hyper_paths_contract_to_numpy_and_count_as_opt_einsum_does(n, seed):
    eq, shapes = ring_and_chords(n, seed)
    opt = cgx.HyperOptimizer(max_time=None, max_repeats=6, seed=seed)
    rng = np.random.default_rng(seed)
    ops = [rng.uniform(0.5, 1.0, s) for s in shapes]
    got = cgx.contract(eq, *ops, optimize=opt)
    want = opt_einsum.contract(eq, *ops, optimize="greedy")
    np.testing.assert_allclose(got, want, rtol=1e-9)
    # The search's reported multiply-adds are the reference count of the same path.
    assert opt.report["multiply_adds"] == pytest.approx(multiply_adds(eq, shapes, opt.path), rel=1e-12)
    assert opt.report["trials"] == 6 and not opt.report["interrupted"]


def test_hyper_is_never_worse_than_greedy_and_hyper_by_name_works() -> None:
    eq, shapes = ring_and_chords(40, 3)
    _, greedy = cgx.contract_path(eq, *shapes, shapes=True, optimize="greedy")
    _, hyper = cgx.contract_path(eq, *shapes, shapes=True, optimize=cgx.HyperOptimizer(max_time=None, max_repeats=16))
    _, named = cgx.contract_path(eq, *shapes, shapes=True, optimize="hyper")
    assert hyper.opt_cost <= greedy.opt_cost
    assert named.opt_cost <= greedy.opt_cost


def test_a_seeded_search_is_reproducible() -> None:
    eq, shapes = ring_and_chords(50, 7)
    paths = [cgx.contract_path(eq, *shapes, shapes=True, optimize=cgx.HyperOptimizer(max_time=None, max_repeats=12, seed=5))[0] for _ in range(2)]
    assert paths[0] == paths[1]


def test_the_protocol_takes_sets_as_opt_einsum_passes_them() -> None:
    opt = cgx.HyperOptimizer(max_time=None, max_repeats=4)
    inputs = [set("ab"), set("bc"), set("cd")]
    path = opt(inputs, set("ad"), {"a": 2, "b": 30, "c": 40, "d": 2})
    # Three operands: solved exactly, the cheap order (b·c first costs 30·40·2 + 2·30·2).
    assert sorted(path[0]) == [1, 2] and sorted(path[1]) == [0, 1]
    assert opt.report["method"] == "optimal" and opt.report["multiply_adds"] == 2520


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_time": None, "max_repeats": None}, "needs a bound"),
        ({"max_time": -1}, "max_time"),
        ({"max_time": float("nan")}, "max_time"),
        ({"max_repeats": 0}, "at least one trial"),
        ({"max_repeats": -2}, "max_repeats"),
        ({"minimize": "speed"}, "unknown objective"),
        ({"minimize": "flopsy"}, "unknown objective"),
        ({"minimize": "combo-x"}, "unknown objective"),
        ({"reconf_size": 20}, "reconfiguration frontier"),
        ({"slicing_opts": {"target_size": 0}}, "slicing target"),
        ({"slicing_opts": {"target_slices": 4}}, "slicing_opts"),
    ],
)
def test_bad_arguments_raise_value_error(kwargs, message):
    with pytest.raises(ValueError, match=message):
        cgx.HyperOptimizer(**kwargs)


def test_progress_is_shown_on_request(capsys):
    eq, shapes = ring_and_chords(30, 1)
    cgx.contract_path(eq, *shapes, shapes=True, optimize=cgx.HyperOptimizer(max_time=None, max_repeats=8, progbar=True))
    assert "trials" in capsys.readouterr().err


def test_slicing_chosen_with_the_path_meets_its_target_and_gives_numpy_s_value_and_gradients() -> None:
    eq, shapes = ring_and_chords(16, 11)
    opt = cgx.HyperOptimizer(max_time=None, max_repeats=8, slicing_opts={"target_size": 8})
    rng = np.random.default_rng(2)
    ops = [rng.uniform(0.5, 1.0, s) for s in shapes]
    path, info = cgx.contract_path(eq, *ops, optimize=opt)
    assert opt.sliced_inds and set(info.sliced_inds) == set(opt.sliced_inds)
    assert opt.report["largest_intermediate"] <= 8 and opt.report["slices"] == info.n_slices
    np.testing.assert_allclose(cgx.contract(eq, *ops, optimize=opt), opt_einsum.contract(eq, *ops), rtol=1e-9)
    expr = cgx.contract_expression(eq, *shapes, optimize=opt)
    assert set(expr.sliced_inds) == set(opt.sliced_inds)
    value, grads = expr.value_and_grad(*ops)
    plain = cgx.contract_expression(eq, *shapes, optimize=opt.path)
    want_value, want_grads = plain.value_and_grad(*ops)
    np.testing.assert_allclose(value, want_value, rtol=1e-9)
    for g, w in zip(grads, want_grads):
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)


def test_path_info_plot_draws_one_circle_per_step_and_marks_sliced_labels(tmp_path):
    eq, shapes = ring_and_chords(16, 4)
    opt = cgx.HyperOptimizer(max_time=None, max_repeats=4, slicing_opts={"target_size": 16})
    _, info = cgx.contract_path(eq, *shapes, shapes=True, optimize=opt)
    file = tmp_path / "tree.svg"
    svg = info.plot(file)
    assert file.read_text(encoding="utf-8") == svg
    assert svg.count("<circle") == len(info.path) == 15
    assert "sliced on" in svg and 'stroke-dasharray="4 3"' in svg
    _, plain = cgx.contract_path(eq, *shapes, shapes=True, optimize=opt.path)
    assert "sliced on" not in plain.plot()


def test_a_cache_directory_makes_the_second_search_plan_nothing(tmp_path):
    eq, shapes = ring_and_chords(24, 9)
    first = cgx.HyperOptimizer(max_time=None, max_repeats=6, slicing_opts={"target_size": 16}, cache_dir=tmp_path)
    path1, info1 = cgx.contract_path(eq, *shapes, shapes=True, optimize=first)
    assert first.report["trials"] == 6 and not first.report["cached"]
    # The same network with its labels renamed: a hit, the same path and slices.
    renamed = eq.translate({ord(c): ord(cgx.get_symbol(200 + ord(c) % 150)) for c in set(eq) - set(",->")})
    second = cgx.HyperOptimizer(max_time=None, max_repeats=6, slicing_opts={"target_size": 16}, cache_dir=tmp_path)
    path2, info2 = cgx.contract_path(renamed, *shapes, shapes=True, optimize=second)
    assert second.report["cached"] and second.report["trials"] == 0
    assert path2 == path1 and len(info2.sliced_inds) == len(info1.sliced_inds)
    assert info2.opt_cost == info1.opt_cost
    # Another objective is another entry.
    other = cgx.HyperOptimizer(max_time=None, max_repeats=2, minimize="size", cache_dir=tmp_path)
    cgx.contract_path(eq, *shapes, shapes=True, optimize=other)
    assert not other.report["cached"]
