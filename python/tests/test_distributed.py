"""cgx.distributed on a LocalCluster of two worker processes: value and gradient against
the single-process expression, numpy and JAX, with sliced labels in the output (stacked
blocks), not in it (sums) and both, on fixed and random networks; what each task returns;
a worker killed mid-run; bad input."""

from collections.abc import Callable
import concurrent.futures
import os
import signal
import threading
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings

distributed = pytest.importorskip("distributed", reason="cgx.distributed needs dask.distributed: pip install dask distributed")

from clusters import local_client  # noqa: E402

import cgx  # noqa: E402
from cgx import distributed as cd  # noqa: E402
from cgx.distributed import blocks as dblocks, combine as dcombine, dask as cdask, plan as dplan, ranges as dranges  # noqa: E402
from strategies import arrays, sliced_networks  # noqa: E402


@pytest.fixture(scope="module")
def client():
    with local_client(distributed) as c:
        yield c


def test_no_client_is_a_clear_error() -> None:
    a = np.ones((2, 2))
    # First in the file: the module's client, once started, is the default one.
    try:
        distributed.get_client()
    except ValueError:
        with pytest.raises(ValueError, match="no Dask client"):
            cd.contract("ij,jk->ik", a, a)
    else:
        pytest.skip("a default Dask client exists in this process")


def matrices(seed: int, *shapes: tuple[int, ...], complex_: bool = False) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for s in shapes:
        x = rng.standard_normal(s)
        if complex_:
            x = x + 1j * rng.standard_normal(s)
        out.append(x)
    return out


# A chain whose slices (on the contracted labels b and c) must be summed.
SUMMED = ("ab,bc,cd->ad", [(5, 6), (6, 7), (7, 4)], "bc")
# The same chain sliced on its two output labels (in the other order): stacked blocks.
IN_OUTPUT = ("ab,bc,cd->ad", [(5, 6), (6, 7), (7, 4)], "da")
# A product sliced on a contracted label (b, given first) and an output one (a): blocks,
# each summed over its b slices.
BOTH = ("ab,bc->ac", [(6, 5), (5, 3)], "ba")
NETWORKS = pytest.mark.parametrize("network", [SUMMED, IN_OUTPUT, BOTH], ids=["summed", "in-output", "both"])


@NETWORKS
@pytest.mark.parametrize("n_tasks", [None, 1, 3, 7])
def test_contract_matches_single_process_and_numpy(client, network, n_tasks):
    eq, shapes, sliced = network
    arrays = matrices(1, *shapes)
    expr = cgx.contract_expression(eq, *shapes, sliced_inds=sliced)
    assert expr.n_slices > 1
    got = cd.contract(eq, *arrays, sliced_inds=sliced, client=client, n_tasks=n_tasks)
    assert isinstance(got, np.ndarray) and got.flags.c_contiguous
    np.testing.assert_allclose(got, expr(*arrays), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got, np.einsum(eq, *arrays), rtol=1e-10, atol=1e-12)


@NETWORKS
@pytest.mark.parametrize("n_tasks", [1, 2, 3, 7])
def test_each_task_returns_its_share_of_the_output(network, n_tasks):
    # What the tasks of a run return (the worker function on the driver's plan and
    # ranges): with a sliced label in the output, only the blocks of its own slices.
    eq, shapes, sliced = network
    arrays = matrices(9, *shapes)
    expr = dplan.prepare(eq, arrays, "greedy", None, sliced)
    layout = dblocks.block_layout(expr)
    assert (layout is None) == (network is SUMMED)
    plan = dplan.plan_key(expr)
    ranges = cd.plan_ranges(expr.n_slices, 1.0, 1, n_tasks)
    parts = [dranges.eval_range(plan, start, stop, layout is not None, *arrays) for start, stop in ranges]
    out_size = np.einsum(eq, *arrays).size
    # Arrays numpy owns, not the engine's pooled buffers (see cgx.distributed.ranges).
    assert all(getattr(p, "rows", p).base is None for p in parts)
    if layout is None:
        assert all(p.shape == tuple(expr.output_shape) for p in parts)
        return
    n_blocks = layout[0]
    per_block = expr.n_slices // n_blocks
    for (start, stop), p in zip(ranges, parts):
        assert isinstance(p, cd.Blocks)
        assert len(p.rows) <= -(-(stop - start) // per_block) + 1
        assert p.rows.size * n_blocks == out_size * len(p.rows)
    assert sum(p.rows.size for p in parts) <= out_size + (len(parts) - 1) * out_size // n_blocks
    total = parts[0]
    for p in parts[1:]:
        total = dcombine.combine(total, p)
    np.testing.assert_allclose(dcombine.finish(layout, total), np.einsum(eq, *arrays), rtol=1e-10, atol=1e-12)


def task_results(stream):
    """``[(name, nbytes), ...]`` of the tasks in Dask's task stream ``stream``: the task's
    function name and the size of its result (``dask.sizeof``; Blocks by their rows)."""
    return [(str(t["key"]).rsplit("-", 1)[0], t["nbytes"]) for t in stream.data]


# A sliced output label with 64 blocks, in 4 ranges of 16: a quarter of the output each.
WIDE = ("ab,bc->ac", [(64, 4), (4, 192)])


@pytest.mark.parametrize("form", ["value", "value_and_grad"])
def test_no_worker_holds_an_output_sized_result_where_a_sliced_label_is_in_it(client, form):
    # Each range's blocks go to the client, which places them into the output: no task on
    # a worker (range, gradient sum, or any combination) returns anything output-sized.
    # Sliced on a contracted label instead, the partial sums are output-sized: the check
    # sees arrays.
    eq, shapes = WIDE
    *arrays, g = matrices(13, *shapes, (64, 192))
    want = np.einsum(eq, *arrays)
    sizes = {}
    for sliced in ("a", "b"):
        with distributed.get_task_stream(client) as stream:
            if form == "value":
                value = cd.contract(eq, *arrays, sliced_inds=sliced, client=client, n_tasks=4)
            else:
                value, grads = cd.value_and_grad(eq, *arrays, cotangent=g, sliced_inds=sliced, client=client, n_tasks=4)
                for x, w in zip(grads, product_grads(*arrays, g)):  # type: ignore[call-arg]  # mypy counts a starred list as too many
                    np.testing.assert_allclose(x, w, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(value, want, rtol=1e-10, atol=1e-12)
        sizes[sliced] = task_results(stream)
    range_task = "eval_range" if form == "value" else "grad_range"
    assert sum(name == range_task for name, _ in sizes["a"]) == 4, sizes
    assert max(n for _, n in sizes["a"]) < want.nbytes / 2, sizes["a"]
    assert {name for name, _ in sizes["a"]} <= {range_task, "_part", "add_grads"}
    assert max(n for name, n in sizes["b"] if name == range_task) >= want.nbytes, sizes["b"]


def test_submit_forms_return_a_future(client):
    # Summed slices: the Dask future of the root sum; a sliced output label: an Assembly,
    # whose result is placed on the client once and kept.
    eq, shapes, sliced = IN_OUTPUT
    *arrays, g = matrices(14, *shapes, (5, 4))
    f = cd.submit_contract(eq, *arrays, sliced_inds=sliced, client=client, n_tasks=3)
    assert isinstance(f, cd.Assembly)
    got = f.result(timeout=120)
    assert f.done() and f.futures() == [] and f.result() is got
    np.testing.assert_allclose(got, np.einsum(eq, *arrays), rtol=1e-10, atol=1e-12)
    f = cd.submit_value_and_grad(eq, *arrays, cotangent=g, sliced_inds=sliced, client=client, n_tasks=3)
    value, grads = f.result(timeout=120)
    np.testing.assert_allclose(value, got, rtol=1e-12, atol=1e-12)
    for x, want in zip(grads, chain_grads(*arrays, g)):  # type: ignore[call-arg]  # mypy counts a starred list as too many
        np.testing.assert_allclose(x, want, rtol=1e-10, atol=1e-12)
    eq, shapes, sliced = SUMMED
    f = cd.submit_contract(eq, *arrays, sliced_inds=sliced, client=client, n_tasks=3)
    assert isinstance(f, distributed.Future)
    np.testing.assert_allclose(f.result(timeout=120), np.einsum(eq, *arrays), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("network", [IN_OUTPUT, BOTH], ids=["in-output", "both"])
@pytest.mark.parametrize("n_tasks", [1, 2, 3, 7])
def test_each_gradient_task_reads_only_its_cotangent_blocks(network, n_tasks):
    # The worker function on the driver's plan and ranges: the blocks a range touches are
    # those eval_blocks gives it; the cotangent cut to them gives the value and gradients
    # of the whole cotangent, and holds no more than the range's blocks.
    eq, shapes, sliced = network
    expr = dplan.prepare(eq, [np.empty(s) for s in shapes], "greedy", None, sliced)
    *arrays, g = matrices(15, *shapes, tuple(expr.output_shape))
    layout = dblocks.block_layout(expr)
    assert layout is not None
    n_blocks, sizes, _ = layout
    k = sum(c in eq.split("->")[1] for c in expr.sliced_inds)
    plan = dplan.plan_key(expr)
    for start, stop in cd.plan_ranges(expr.n_slices, 1.0, 1, n_tasks):
        first, n = dblocks.range_blocks(layout, expr.n_slices, start, stop)
        value = dranges.eval_range(plan, start, stop, True, *arrays)
        assert (first, n) == (value.first, len(value.rows))
        cot = dblocks.cotangent_blocks(g, layout, k, expr.n_slices, start, stop)
        assert cot.first == first and cot.rows.shape == (n,) + tuple(sizes[k:])
        by_blocks = dranges.grad_range(plan, start, stop, True, None, cot, *arrays)
        whole = dranges.grad_range(plan, start, stop, True, None, g, *arrays)
        assert by_blocks[0].rows.base is None and all(x.base is None for x in by_blocks[1])
        assert by_blocks[0].first == whole[0].first
        np.testing.assert_allclose(by_blocks[0].rows, whole[0].rows, rtol=1e-12, atol=1e-12)
        for x, y in zip(by_blocks[1], whole[1]):
            np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="cotangent blocks"):
        dranges.grad_range(plan, 0, expr.n_slices, True, None, cd.Blocks(0, cot.rows[:0]), *arrays)


class RangeInputs(distributed.WorkerPlugin):
    """Records on each worker, as a gradient range task starts, the shapes of the data it
    reads (a Blocks by its rows)."""

    def setup(self, worker):
        self.worker, self.seen = worker, []

    def transition(self, key, start, finish, **kwargs):
        if finish == "executing" and str(key).startswith("grad_range-"):
            deps = self.worker.state.tasks[key].dependencies
            data = [self.worker.data[d.key] for d in deps]
            self.seen.append([(type(x).__name__, np.shape(getattr(x, "rows", x))) for x in data])


def test_gradient_tasks_receive_their_cotangent_blocks_not_the_whole(client):
    # With a sliced output label, what each range task receives on its worker: the
    # operands whole, the cotangent only as the blocks of its slices (a quarter here).
    eq, shapes = WIDE
    *arrays, g = matrices(16, *shapes, (64, 192))
    name = "range-inputs"
    client.register_plugin(RangeInputs(), name=name)
    try:
        value, grads = cd.value_and_grad(eq, *arrays, cotangent=g, sliced_inds="a", client=client, n_tasks=4)
        seen: list[Any] = sum(client.run(lambda dask_worker: dask_worker.plugins[name].seen).values(), [])
    finally:
        client.unregister_worker_plugin(name)
    np.testing.assert_allclose(value, np.einsum(eq, *arrays), rtol=1e-10, atol=1e-12)
    for x, want in zip(grads, product_grads(*arrays, g)):  # type: ignore[call-arg]  # mypy counts a starred list as too many
        np.testing.assert_allclose(x, want, rtol=1e-10, atol=1e-12)
    assert len(seen) == 4
    for inputs in seen:
        assert sorted(inputs) == sorted([("ndarray", (64, 4)), ("ndarray", (4, 192)), ("Blocks", (16, 192))]), inputs


def test_contract_by_memory_limit_complex(client):
    eq, shapes = "ab,bc,cd->ad", [(3, 9), (9, 10), (10, 6)]
    arrays = matrices(2, *shapes, complex_=True)
    expr = cgx.contract_expression(eq, *shapes, optimize=[(1, 2), (0, 1)], memory_limit=40)
    assert expr.n_slices > 1
    got = cd.contract(eq, *arrays, optimize=[(1, 2), (0, 1)], memory_limit=40, client=client, n_tasks=4)
    np.testing.assert_allclose(got, expr(*arrays), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got, np.einsum(eq, *arrays), rtol=1e-10, atol=1e-12)


def test_memory_limit_slices_are_planned_again_output_first(client):
    # Here memory_limit slices d (contracted) before a (the output's): _prepare plans again
    # on the same path with a first, so a range of slices touches one block of the output
    # rather than all of them; value and gradients are unchanged. The path is given, and c
    # is held by two operands, so no sum done first changes which labels are sliced.
    eq, shapes, limit, path = "abd,bcd,cd->a", [(4, 3, 5), (3, 2, 5), (2, 5)], 4, [(0, 1), (0, 1)]
    first = cgx.contract_expression(eq, *shapes, optimize=path, memory_limit=limit)
    assert list(first.sliced_inds) == ["d", "a"]  # the case under test
    *arrays, g = matrices(12, *shapes, (4,))
    expr = dplan.prepare(eq, arrays, path, limit, None)
    assert list(expr.sliced_inds) == ["a", "d"]
    assert list(expr.path) == list(first.path) and expr.n_slices == first.n_slices == 20
    layout = dblocks.block_layout(expr)
    assert layout is not None
    n_blocks, _, _ = layout
    assert n_blocks == 4
    one_block = dranges.eval_range(dplan.plan_key(expr), 0, expr.n_slices // n_blocks, True, *arrays)
    assert one_block.first == 0 and len(one_block.rows) == 1
    got = cd.contract(eq, *arrays, optimize=path, memory_limit=limit, client=client, n_tasks=3)
    value, grads = cd.value_and_grad(eq, *arrays, cotangent=g, optimize=path, memory_limit=limit, client=client, n_tasks=3)
    local_value, local_grads = first.value_and_grad(*arrays, cotangent=g)
    for x in (got, value):
        np.testing.assert_allclose(x, local_value, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(x, np.einsum(eq, *arrays), rtol=1e-10, atol=1e-12)
    for x, local in zip(grads, local_grads):
        np.testing.assert_allclose(x, local, rtol=1e-12, atol=1e-12)


def chain_grads(a, b, c, g):
    """Gradients of <g, a@b@c> (real operands)."""
    return g @ (b @ c).T, a.T @ g @ c.T, (a @ b).T @ g


def product_grads(a, b, g):
    return g @ b.T, a.T @ g


@pytest.mark.parametrize("n_tasks", [None, 2, 5])
@pytest.mark.parametrize("wrt", [None, [1], [0, 2], 2])
def test_gradient_summed(client, n_tasks, wrt):
    eq, shapes, sliced = SUMMED
    a, b, c, g = matrices(3, *shapes, (5, 4))
    value, grads = cd.value_and_grad(eq, a, b, c, wrt=wrt, cotangent=g, sliced_inds=sliced, client=client, n_tasks=n_tasks)
    local_value, local_grads = cgx.contract_expression(eq, *shapes, sliced_inds=sliced).value_and_grad(
        a, b, c, wrt=wrt, cotangent=g
    )
    want = chain_grads(a, b, c, g)
    picked = [0, 1, 2] if wrt is None else ([wrt] if isinstance(wrt, int) else wrt)
    assert len(grads) == len(picked) == len(local_grads)
    np.testing.assert_allclose(value, local_value, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(value, a @ b @ c, rtol=1e-10, atol=1e-12)
    for got, local, i in zip(grads, local_grads, picked):
        np.testing.assert_allclose(got, local, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got, want[i], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("n_tasks", [None, 1, 4, 9])
def test_gradient_sliced_in_output(client, n_tasks):
    eq, shapes, sliced = BOTH
    a, b, g = matrices(4, *shapes, (6, 3))
    value, (ga, gb) = cd.value_and_grad(eq, a, b, cotangent=g, sliced_inds=sliced, client=client, n_tasks=n_tasks)
    np.testing.assert_allclose(value, a @ b, rtol=1e-10, atol=1e-12)
    want_a, want_b = product_grads(a, b, g)
    np.testing.assert_allclose(ga, want_a, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gb, want_b, rtol=1e-10, atol=1e-12)
    eq, shapes, sliced = IN_OUTPUT
    a, b, c, g = matrices(10, *shapes, (5, 4))
    value, grads = cd.value_and_grad(eq, a, b, c, cotangent=g, sliced_inds=sliced, client=client, n_tasks=n_tasks)
    local_value, local_grads = cgx.contract_expression(eq, *shapes, sliced_inds=sliced).value_and_grad(
        a, b, c, cotangent=g
    )
    np.testing.assert_allclose(value, local_value, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(value, a @ b @ c, rtol=1e-10, atol=1e-12)
    for got, local, want in zip(grads, local_grads, chain_grads(a, b, c, g)):
        np.testing.assert_allclose(got, local, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@settings(max_examples=12, deadline=None)
@given(case=sliced_networks())
def test_random_networks_against_single_process_and_numpy(client, case):
    eq, shapes, sliced, n_tasks = case.eq, case.shapes, case.sliced, case.n_tasks
    rng, ops = case.operands()
    expr = cgx.contract_expression(eq, *shapes, sliced_inds=sliced)
    want = np.einsum(eq, *ops)
    got = cd.contract(eq, *ops, sliced_inds=sliced, client=client, n_tasks=n_tasks)
    np.testing.assert_allclose(got, expr(*ops), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    c = arrays(rng, [np.shape(want)], case.complex_)[0]
    value, grads = cd.value_and_grad(eq, *ops, cotangent=c, sliced_inds=sliced, client=client, n_tasks=n_tasks)
    local_value, local_grads = expr.value_and_grad(*ops, cotangent=c)
    np.testing.assert_allclose(value, local_value, rtol=1e-12, atol=1e-12)
    for g, w in zip(grads, local_grads):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)


@pytest.fixture
def jax64():
    """JAX with 64-bit types, the setting restored afterwards (it is global)."""
    jax = pytest.importorskip("jax")
    previous = jax.config.read("jax_enable_x64")
    jax.config.update("jax_enable_x64", True)
    try:
        yield jax
    finally:
        jax.config.update("jax_enable_x64", previous)


def test_gradient_scalar_output_against_jax(client, jax64):
    jnp = jax64.numpy
    eq, shapes = "ab,bc,ca->", [(4, 5), (5, 6), (6, 4)]
    arrays = matrices(5, *shapes)
    value, grads = cd.value_and_grad(eq, *arrays, sliced_inds="bc", client=client, n_tasks=3)
    want_value, want_grads = jax64.value_and_grad(lambda *x: jnp.einsum(eq, *x), argnums=(0, 1, 2))(*arrays)
    np.testing.assert_allclose(value, want_value, rtol=1e-10)
    for got, want in zip(grads, want_grads):
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("network", [IN_OUTPUT, BOTH], ids=["in-output", "both"])
@pytest.mark.parametrize("n_tasks", [None, 3])
def test_sliced_output_against_jax(client, jax64, network, n_tasks):
    # A sliced label in the output (blocks stacked): the value against jnp.einsum and
    # the gradients for a cotangent against jax.vjp, beside the single-process expression.
    jnp = jax64.numpy
    eq, shapes, sliced = network
    expr = cgx.contract_expression(eq, *shapes, sliced_inds=sliced)
    *arrays, g = matrices(11, *shapes, tuple(expr.output_shape))
    want_value, pullback = jax64.vjp(lambda *x: jnp.einsum(eq, *x), *arrays)
    want_grads = pullback(jnp.asarray(g))
    assert want_value.dtype == np.float64
    got = cd.contract(eq, *arrays, sliced_inds=sliced, client=client, n_tasks=n_tasks)
    value, grads = cd.value_and_grad(eq, *arrays, cotangent=g, sliced_inds=sliced, client=client, n_tasks=n_tasks)
    local_value, local_grads = expr.value_and_grad(*arrays, cotangent=g)
    for x in (got, value):
        np.testing.assert_allclose(x, local_value, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(x, np.asarray(want_value), rtol=1e-10, atol=1e-12)
    assert len(grads) == len(arrays) == len(want_grads)
    for x, local, want in zip(grads, local_grads, want_grads):
        np.testing.assert_allclose(x, local, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(x, np.asarray(want), rtol=1e-10, atol=1e-12)


def test_unsliced_runs_as_one_task(client):
    a, b = matrices(6, (3, 4), (4, 2))
    np.testing.assert_allclose(cd.contract("ij,jk->ik", a, b, client=client), a @ b, rtol=1e-12)


def test_plan_ranges_cover_every_slice() -> None:
    for n in [1, 2, 7, 64, 1000]:
        for threads in [1, 2, 5]:
            for flops in [1.0, 1e6, 1e9]:
                for forced in [None, 1, 3, 2000]:
                    ranges = cd.plan_ranges(n, flops, threads, forced)
                    assert ranges[0][0] == 0 and ranges[-1][1] == n
                    assert all(r[0] < r[1] for r in ranges)
                    assert all(x[1] == y[0] for x, y in zip(ranges, ranges[1:]))
                    assert len(ranges) <= max(1, cd.TASKS_PER_THREAD * threads) or forced is not None


def test_plan_ranges_give_every_task_the_least_work() -> None:
    # Without a forced count, every range does at least MIN_TASK_FLOPS (one range when the
    # whole run does less), the per-thread cap only lengthens ranges, and there are as many
    # ranges as those two rules allow (one more would break one of them).
    least = cd.MIN_TASK_FLOPS
    per_slice = [0.0, 1.0, least / 1e3, least / 7, least / 3 * 1.0001, 0.7 * least, least, 1.5 * least, 1e3 * least]
    for n in [1, 2, 3, 5, 7, 64, 1000, 10**6]:
        for threads in [1, 2, 5, 64]:
            for flops in per_slice:
                ranges = cd.plan_ranges(n, flops, threads)
                assert ranges[0][0] == 0 and ranges[-1][1] == n
                cap = cd.TASKS_PER_THREAD * threads
                assert len(ranges) <= cap
                if n * flops < least:
                    assert ranges == [(0, n)], (n, flops, threads)
                    continue
                assert min(stop - start for start, stop in ranges) * flops >= least * (1 - 1e-12), (n, flops, threads)
                more = len(ranges) + 1
                assert len(ranges) in (cap, n) or (n // more) * flops < least, (n, flops, threads)


def test_plan_ranges_keep_the_least_count_memory_asks_for() -> None:
    # min_tasks raises the count up to the slice count, even past the per-thread cap and
    # the least work per task (a memory bound comes first); 1 changes nothing.
    for n in [1, 5, 27, 1000]:
        for threads in [1, 2]:
            for flops in [1.0, 1e12]:
                plain = cd.plan_ranges(n, flops, threads)
                assert cd.plan_ranges(n, flops, threads, min_tasks=1) == plain
                for least in [2, 8, 64]:
                    ranges = cd.plan_ranges(n, flops, threads, min_tasks=least)
                    assert len(ranges) == min(n, max(least, len(plain))), (n, flops, threads, least)
                    assert ranges[0][0] == 0 and ranges[-1][1] == n
                    assert all(x[1] == y[0] and x[0] < x[1] for x, y in zip(ranges, ranges[1:]))


def test_ranges_hold_a_share_of_the_memory_limit_in_output_blocks(client):
    # A sliced output label and a memory limit the size of the output: each range's blocks
    # hold at most 1/BLOCK_SHARE of the limit, however small the work (which alone would
    # give one range), and the value is unchanged.
    eq, shapes = WIDE
    a, b = matrices(14, *shapes)
    limit = 64 * 192
    with distributed.get_task_stream(client) as stream:
        got = cd.contract(eq, a, b, sliced_inds="a", memory_limit=limit, client=client)
    np.testing.assert_allclose(got, a @ b, rtol=1e-10, atol=1e-12)
    ranges = [n for name, n in task_results(stream) if name == "eval_range"]
    assert len(ranges) == cd.BLOCK_SHARE, ranges
    # Result sizes are dask.sizeof's: the rows' bytes and the Blocks object's own.
    assert max(ranges) <= limit * 8 / cd.BLOCK_SHARE + 1024, ranges


def same_exception(local: Callable[[], object], remote: Callable[[], object]) -> None:
    with pytest.raises(Exception) as want:
        local()
    with pytest.raises(type(want.value)) as got:
        remote()
    assert str(got.value) == str(want.value)


def test_bad_input_raises_like_the_local_api(client):
    a, b = matrices(7, (3, 4), (5, 2))
    same_exception(lambda: cgx.contract("ij,jk->ik", a, b), lambda: cd.contract("ij,jk->ik", a, b, client=client))
    words = np.full((4, 2), "x")
    same_exception(
        lambda: cgx.contract("ij,jk->ik", a, words), lambda: cd.contract("ij,jk->ik", a, words, client=client)
    )
    same_exception(
        lambda: cgx.contract("ij,jk->ik", a, words, sliced_inds="j"),
        lambda: cd.value_and_grad("ij,jk->ik", a, words, cotangent=np.ones((3, 2)), sliced_inds="j", client=client),
    )
    same_exception(
        lambda: cgx.contract("ij,jk->ik", a, a.T, sliced_inds=["jk"]),
        lambda: cd.contract("ij,jk->ik", a, a.T, sliced_inds=["jk"], client=client),
    )
    same_exception(
        lambda: cgx.contract("ab,cd->abcd", a, a, memory_limit=100),
        lambda: cd.contract("ab,cd->abcd", a, a, memory_limit=100, client=client),
    )
    expr = cgx.contract_expression("ij,jk->ik", (3, 4), (4, 3))
    same_exception(
        lambda: expr.value_and_grad(a, a.T), lambda: cd.value_and_grad("ij,jk->ik", a, a.T, client=client)
    )
    same_exception(
        lambda: expr.value_and_grad(a, a.T, wrt=[5], cotangent=np.ones((3, 3))),
        lambda: cd.value_and_grad("ij,jk->ik", a, a.T, wrt=[5], cotangent=np.ones((3, 3)), client=client),
    )
    same_exception(
        lambda: expr.value_and_grad(a, a.T, cotangent=np.ones((2, 3))),
        lambda: cd.value_and_grad("ij,jk->ik", a, a.T, cotangent=np.ones((2, 3)), client=client),
    )
    with pytest.raises(ValueError, match="n_tasks"):
        cd.contract("ij,jk->ik", a, a.T, client=client, n_tasks=0)


class RangeStarts(distributed.WorkerPlugin):
    """Appends ``pid key`` to a file each time a worker starts a task whose name begins
    with one of ``prefixes`` (slice ranges by default): a file, so that the starts on a
    killed worker are kept."""

    def __init__(self, path, prefixes=("eval_range-", "grad_range-")):
        self.path = str(path)
        self.prefixes = tuple(prefixes)

    def transition(self, key, start, finish, **kwargs):
        name = key if isinstance(key, str) else str(key)
        if finish == "executing" and name.startswith(self.prefixes):
            with open(self.path, "a") as f:
                f.write(f"{os.getpid()} {name}\n")


def starts(path):
    """``[(pid, key), ...]`` of the range tasks started so far, in order."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [(int(pid), key) for pid, key in (line.split() for line in text.splitlines() if line.count(" ") == 1)]


def in_background(call, *args, **kwargs):
    """``call`` in a daemon thread (a run that never ends cannot keep the test process
    alive); its ``concurrent.futures.Future``."""
    future: concurrent.futures.Future[object] = concurrent.futures.Future()

    def run():
        try:
            future.set_result(call(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - handed to the waiting test
            future.set_exception(e)

    threading.Thread(target=run, daemon=True).start()
    return future


# The value on 400 slices (1.3e8 flops each), the gradients on 300 (5.4e7 flops each, three
# times that with the reverse pass), in 6 ranges: tasks of 0.2 to 1 s on the idle machine,
# hundreds of times the delay between a task's start and the kill.
KILLED = {
    "value": (400, lambda a, b, c, g: (a @ b @ c,)),
    "value_and_grad": (300, lambda a, b, c, g: (a @ b @ c, *chain_grads(a, b, c, g))),
}


@pytest.mark.parametrize("form", sorted(KILLED))
def test_a_worker_killed_mid_run_costs_time_not_the_answer(client, tmp_path, form):
    # The public call runs in a thread (it waits); a worker is killed as soon as it starts
    # its first range task. The run must still give the right answer, that task must start
    # again on another worker (or the whole run be submitted again, below), and the nanny
    # must bring the worker back.
    n, reference = KILLED[form]
    eq, sliced, path, n_tasks = "ab,bc,cd->ad", "b", [(0, 1), (0, 1)], 6
    a, b, c, g = matrices(8, (n, n), (n, n), (n, n), (n, n))
    log = tmp_path / "starts"
    name = f"range-starts-{form}"
    client.register_plugin(RangeStarts(log), name=name)
    try:
        victim_address, victim = sorted(client.run(os.getpid).items())[0]
        options = dict(optimize=path, sliced_inds=sliced, client=client, n_tasks=n_tasks)
        if form == "value":
            run = in_background(cd.contract, eq, a, b, c, **options)
        else:
            run = in_background(cd.value_and_grad, eq, a, b, c, cotangent=g, **options)
        deadline = time.monotonic() + 120
        while not any(pid == victim for pid, _ in starts(log)):
            assert not run.done(), "the run ended before the victim started a task"
            assert time.monotonic() < deadline, "the victim started no task in 120 s"
            time.sleep(0.005)
        os.kill(victim, signal.SIGKILL)
        before = starts(log)
        killed = [key for pid, key in before if pid == victim]
        assert not run.done(), "the run ended before the kill"
        got = run.result(timeout=300)
        client.wait_for_workers(2, timeout=120)
        assert victim not in client.run(os.getpid).values()
    finally:
        client.unregister_worker_plugin(name)
    value, grads = (got, ()) if form == "value" else got
    for x, want in zip((value, *grads), reference(a, b, c, g)):
        np.testing.assert_allclose(x, want, rtol=1e-9, atol=1e-9)
    # The killed worker's work started again elsewhere. Either Dask ran the lost task again
    # (same key), or the victim held the last copy of a scattered operand (the active
    # memory manager drops broadcast copies down to one) and the whole run was submitted
    # again: n_tasks keys never started before the kill.
    runs = starts(log)
    after = runs[len(before) :]
    running = killed[-1]  # the task the victim was running when killed
    if len({key for _, key in after} - {key for _, key in before}) < n_tasks:
        assert any(key == running for _, key in after), (running, runs)
        assert len({key for _, key in runs}) == n_tasks, runs


def test_the_hyper_optimizers_slicing_runs_distributed_with_gradients(client):
    # A ring of 14 matrices of bond 4 and one open label: the hyper-optimizer chooses the
    # labels to slice for a target of 4 elements (unsliced, the least is 16), and the Dask executor runs that plan,
    # value and gradients, as the local expression does.
    n, d = 14, 4
    labels = [cgx.get_symbol(i) for i in range(n)]
    terms = [labels[i] + labels[(i + 1) % n] for i in range(n)]
    eq = ",".join(terms) + "->" + labels[0]
    *arrays, g = matrices(21, *[(d, d)] * n, (d,))
    opt = cgx.HyperOptimizer(max_time=None, max_repeats=8, seed=3, slicing_opts={"target_size": 4})
    value, grads = cd.value_and_grad(eq, *arrays, cotangent=g, optimize=opt, client=client, n_tasks=3)
    assert opt.sliced_inds, "the target must need slicing"
    expr = cgx.contract_expression(eq, *[a.shape for a in arrays], optimize=opt)
    assert list(expr.sliced_inds) == list(opt.sliced_inds)
    local_value, local_grads = expr.value_and_grad(*arrays, cotangent=g)
    np.testing.assert_allclose(value, np.einsum(eq, *arrays), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(value, local_value, rtol=1e-12, atol=1e-12)
    for got, local in zip(grads, local_grads):
        np.testing.assert_allclose(got, local, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(cd.contract(eq, *arrays, optimize=opt, client=client), local_value, rtol=1e-12)


def test_ctrl_c_ends_a_distributed_run_within_a_second_and_cancels_its_futures(client, monkeypatch):
    from test_interrupt import BOUND, announcing, seconds_to_interrupt

    cancelled = []
    original = cdask._cancel

    def spy(run):
        cancelled.extend(run.futures() if isinstance(run, cd.Assembly) else [run])
        original(run)

    monkeypatch.setattr(cdask, "_cancel", spy)
    submitted = threading.Event()
    monkeypatch.setattr(cdask, "_submit", announcing(cdask._submit, submitted))
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2000, 2000)), rng.standard_normal((2000, 2000))
    # 2000 slices of a 2000 x 2000 outer product: tens of seconds of work per worker.
    # Summed slices (a tree of sums), then output blocks (an Assembly, `i` sliced in the
    # output). The signal comes a second after the run is submitted (planning and
    # scattering take seconds under load), while it is waited for.
    for sliced in ("j", "ij"):
        cancelled.clear()
        submitted.clear()
        call = lambda: cd.contract("ij,jk->ik", a, b, sliced_inds=sliced, client=client, n_tasks=8)  # noqa: E731
        assert seconds_to_interrupt(call, delay=1.0, after=submitted) < BOUND
        assert cancelled, "the run's futures were not cancelled"
        deadline = time.monotonic() + 30
        while not all(f.status == "cancelled" for f in cancelled) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [f.status for f in cancelled] == ["cancelled"] * len(cancelled)
    # The cluster still works.
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(cd.contract("ij,jk->ik", x, x.T, sliced_inds="j", client=client), x @ x.T)
