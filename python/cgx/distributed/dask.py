"""Sliced contractions, their gradients and Hessian-vector products on a Dask cluster
(``dask.distributed``): the API of :mod:`cgx.distributed`.

:func:`contract`, :func:`value_and_grad` and :func:`hvp` take what :func:`cgx.contract`,
``ContractExpression.value_and_grad`` and ``ContractExpression.hvp`` take, plus a
``client``, and return the same numpy arrays. The work is split along the expression's slices:

1. the driver plans once (:func:`cgx.contract_expression`: path, slices for
   ``memory_limit`` or the given ``sliced_inds``, the output's sliced labels put first)
   and checks the operands there, so a bad input raises the local API's exception before
   anything is sent;
2. the operands (and the cotangent) are scattered to every worker once
   (``client.scatter(..., broadcast=True)``); where a sliced label is in the output, the
   cotangent is not: each range gets only the cotangent blocks its slices read, cut on the
   client and scattered to one worker;
3. the slices ``0..n_slices`` are cut into contiguous ranges, one task per range
   (``eval_slices`` / ``eval_blocks`` / ``value_and_grad_slices`` on the worker, one pass
   per slice for value and gradients); the number of ranges comes from the slice count,
   the cluster's threads and the expression's flops, so each task does at least
   ``MIN_TASK_FLOPS`` of work (Dask's per-task overhead, measured at 2.6 to 6.4 ms on a
   loaded machine, stays under 5% of it) and there are at most ``TASKS_PER_THREAD`` tasks
   per worker thread;
4. sums are combined pairwise on the workers (a tree of ``client.submit`` tasks, depth
   ``log2`` of the task count) and only the root comes back; output blocks come back to
   the client range by range (below).

What a task returns and how two are combined depends on where the sliced labels are:

- no sliced label in the output: the range's sum, of the output's shape; combined by
  adding on the workers (a worker holds at most two partial sums beside its range's work);
- a sliced label in the output: the range's *output blocks* (``eval_blocks``: the output
  at one value of each sliced output label, summed over the range's values of the other
  sliced labels), only those the range touches. They are never combined on a worker: the
  client allocates the output once and adds each range's blocks at their places as they
  arrive (:class:`Assembly`; a block two neighbouring ranges share gets both parts). As
  the output's sliced labels come first in the slice order, a range touches about its
  share of the blocks: no worker holds or sends an output-sized array, and the client
  holds the output once plus one range's blocks.

Gradients have the operands' shapes, whatever is sliced: they are always added on the
workers. So do Hessian-vector products (:func:`hvp`): each task sums its range's
products (``hvp_slices``: per slice, the slice's product on the slices of the operands,
the directions and the cotangent), and the ranges' sums are added pairwise on the
workers; the directions are scattered as the operands are, and the cotangent whole to
every worker (an HVP's cotangent is usually the scalar 1).

``strip_exponent`` (:func:`contract`, :func:`value_and_grad`) is the local API's
(``cgx._scaled``): each task runs its range scaled (``scaled_range``: a
``(mantissa, exponent)`` pair of the output's full shape, and one per gradient), the
pairs are added pairwise on the workers at the larger exponent (``add_scaled``, by exact
powers of two), and the client gets the root; by default a plain run whose value or
gradients left the finite range from finite operands is run again so. A scaled range
holds the output whole, even where a sliced label is in the output (no blocks), and gets
the cotangent whole.

Invariants: every task is pure (its result depends only on its arguments, which are the
plan, the scattered operands and a slice range), so Dask may rerun it anywhere, for
instance when a worker dies mid-run: that costs time, not the answer. (Scattered data
cannot be recomputed: a range's cotangent blocks live on one worker, and Dask's active
memory manager may drop a broadcast operand's copies down to one. If the worker holding
the last copy dies before the run is done, the run is cancelled and submitted again, see
``RUNS``.) The expression
travels to the workers as its plan (it pickles as equation, shapes, path, limit, sliced
labels) and each worker process keeps the rebuilt, compiled expression in a small cache.
The plan, the range functions and the combination are engine-neutral
(:mod:`cgx.distributed.plan`, ``ranges``, ``blocks``, ``combine``): :mod:`cgx.ray` runs the
same ones on Ray, :mod:`cgx.mpi` over MPI. This module is Dask's part alone; the package
``cgx.distributed`` exports its API.

>>> from dask.distributed import Client                     # doctest: +SKIP
>>> client = Client(n_workers=2)                            # doctest: +SKIP
>>> cgx.distributed.contract("ij,jk->ik", a, b, sliced_inds="j", client=client)  # doctest: +SKIP
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Optional, cast

import numpy as np
from numpy.typing import NDArray

from .._parser import wrt_positions
from .blocks import Blocks, Layout, block_layout, cotangent_blocks, place
from .combine import add_grads, add_pair, add_scaled, add_scaled_grads, finish_scaled
from .plan import (
    HVP_WORK,
    check_hvp,
    check_scaled,
    min_ranges,
    plan_key,
    plan_ranges,
    prepare,
    slice_flops,
    strip_exponent_mode,
)
from .ranges import eval_range, grad_range, hvp_range, scaled_range
from . import dag as _dag

try:
    import distributed as _dd
except ImportError:  # pragma: no cover - exercised only without dask
    _dd = None


__all__ = [
    "contract",
    "value_and_grad",
    "hvp",
    "submit_contract",
    "submit_value_and_grad",
    "submit_hvp",
    "plan_ranges",
    "Assembly",
    "DagRun",
    "submit_dag",
    "evaluate_dag",
]


def _require_client(client: Any) -> Any:
    if _dd is None:
        raise ImportError("cgx.distributed needs dask.distributed: pip install dask distributed")
    if client is not None:
        return client
    try:
        return _dd.get_client()
    except ValueError as e:
        raise ValueError(
            "cgx.distributed: no Dask client; pass client=..., or create one first "
            "(dask.distributed.Client(n_workers=2) on one machine, Client('tcp://scheduler:8786') on a cluster)"
        ) from e


if _dd is not None:
    from dask.sizeof import sizeof as _sizeof

    # Dask sizes results to balance memory and to report them; Blocks count by their rows.
    _sizeof.register(Blocks)(lambda b: _sizeof(b.rows) + 64)


def _part(i: int, result: Any) -> Any:
    """Item ``i`` of a range's ``(value, grads)``: the two go separate ways."""
    return result[i]


class Assembly:
    """The future of an output with a sliced label, assembled on the client: what
    :func:`submit_contract` and :func:`submit_value_and_grad` return in that case.

    The range tasks' blocks are never combined on a worker: :meth:`result` allocates the
    output once and adds each range's blocks into it as they arrive (releasing each range's
    result on its worker once read), so the client holds the output once plus one range's
    blocks, and no worker holds more than its own ranges' blocks. Gradients, of the
    operands' shapes, are added pairwise on the workers as for sums.
    """

    def __init__(self, layout: Layout, shape: Sequence[int], blocks: Any, grads: Any = None) -> None:
        self._layout, self._shape = layout, tuple(shape)
        self._pending, self._grads = list(blocks), grads
        self._lock = threading.Lock()
        self._out: Optional[NDArray[Any]] = None

    def futures(self) -> list[Any]:
        """The Dask futures not yet read: the ranges' blocks, then the gradients' root."""
        return self._pending + ([] if self._grads is None else [self._grads])

    def done(self) -> bool:
        return all(f.done() for f in self.futures())

    def cancel(self) -> None:
        futures = self.futures()
        if futures:
            # One message for all of them: after Ctrl-C, the run should end at once.
            futures[0].client.cancel(futures)

    def result(self, timeout: Optional[float] = None) -> Any:
        """The output (with gradients, ``(value, grads)``) as numpy arrays, once every range
        has returned; a task's exception is raised here."""
        with self._lock:
            for f in _dd.as_completed(list(self._pending), timeout=timeout):
                blocks = f.result()
                if self._out is None:
                    self._out = np.zeros(self._shape, dtype=blocks.rows.dtype)
                place(self._out, self._layout, blocks)
                del blocks
                self._pending.remove(f)
                f.release()  # the worker may drop the range's blocks now
            if self._grads is None:
                return self._out
            return self._out, self._grads.result(timeout=timeout)


def _tree_sum(client: Any, futures: list[Any], add: Callable[[Any, Any], Any] = add_pair) -> Any:
    """Combines the futures pairwise on the workers (with ``add``); the root future."""
    while len(futures) > 1:
        paired = [client.submit(add, futures[i], futures[i + 1]) for i in range(0, len(futures) - 1, 2)]
        if len(futures) % 2:
            paired.append(futures[-1])
        futures = paired
    return futures[0]


def _threads(client: Any) -> int:
    return sum(client.nthreads().values()) or 1


_Options = collections.namedtuple("_Options", "optimize memory_limit sliced_inds client n_tasks")
"""The keywords every form takes: how to plan (``optimize``, ``memory_limit``,
``sliced_inds``: those of :func:`cgx.contract`) and where to run (``client``, ``n_tasks``)."""


def _submit(eq: str, arrays: Any, options: _Options, grad: Any = None) -> Any:
    """The future of the slices' sum: of the value, or with ``grad = (wrt, cotangent)`` of
    ``(value, grads)`` (the body of every form, see the module docs)."""
    client = _require_client(options.client)
    expr = prepare(eq, arrays, options.optimize, options.memory_limit, options.sliced_inds)
    # Checks operands (count, shapes, element type), the memory limit and, for gradients,
    # wrt and the cotangent here, with the local API's exceptions: an empty range does no work.
    if grad is None:
        expr.eval_slices(*arrays, start=0, stop=0)
    else:
        wrt, cotangent = wrt_positions(grad[0]), grad[1]
        expr.grad_slices(*arrays, start=0, stop=0, wrt=wrt, cotangent=cotangent)
    arrays = [np.asarray(x) for x in arrays]
    plan = plan_key(expr)
    # Fresh keys per run (hash=False): a run never waits on, or races with the release
    # of, an earlier run's copy of the same data.
    scattered = client.scatter(arrays, broadcast=True, hash=False)
    layout = block_layout(expr)
    blocked = layout is not None
    args: tuple[Any, ...]
    if grad is None:
        task, args, flops = eval_range, (blocked,), slice_flops(expr)
    elif blocked:
        # The cotangent goes by blocks (below), never whole, to each range.
        task, args, flops = grad_range, (blocked, wrt), 3 * slice_flops(expr)
    else:
        cot = None if cotangent is None else client.scatter(np.asarray(cotangent), broadcast=True, hash=False)
        task, args, flops = grad_range, (blocked, wrt, cot), 3 * slice_flops(expr)
    ranges = plan_ranges(expr.n_slices, flops, _threads(client), options.n_tasks, min_ranges(expr, blocked))
    if grad is not None and layout is not None:  # blocked
        k = sum(c in expr._plan()[1] for c in expr.sliced_inds)
        cotangent = np.asarray(cotangent)
        parts = []
        for start, stop in ranges:
            # One range's blocks at a time, scattered to one worker: never all copies at once.
            cot = client.scatter(cotangent_blocks(cotangent, layout, k, expr.n_slices, start, stop), hash=False)
            parts.append(client.submit(task, plan, start, stop, *args, cot, *scattered))
    else:
        parts = [client.submit(task, plan, start, stop, *args, *scattered) for start, stop in ranges]
    if layout is None:
        return _tree_sum(client, parts)
    # Blocks go to the client, which places them; gradients are added on the workers.
    shape = tuple(expr.output_shape)
    if grad is None:
        return Assembly(layout, shape, parts)
    blocks = [client.submit(_part, 0, p) for p in parts]
    grads = _tree_sum(client, [client.submit(_part, 1, p) for p in parts], add_grads)
    return Assembly(layout, shape, blocks, grads)


def _submit_scaled(eq: str, arrays: Any, options: _Options, grad: Any = None) -> Any:
    """The future of the scaled sum's root: ``(mantissa, exponent)``, or with ``grad =
    (wrt, cotangent)`` the scaled ``(value, grads)`` (see the module docs)."""
    client = _require_client(options.client)
    expr = prepare(eq, arrays, options.optimize, options.memory_limit, options.sliced_inds)
    ops, wrt = check_scaled(expr, arrays, grad)
    scattered = client.scatter(list(ops), broadcast=True, hash=False)
    args: tuple[Any, ...]
    if grad is None:
        args, flops, add = (False, None, None), slice_flops(expr), add_scaled
    else:
        cot = None if grad[1] is None else client.scatter(np.asarray(grad[1]), broadcast=True, hash=False)
        args, flops, add = (True, wrt, cot), 3 * slice_flops(expr), add_scaled_grads
    ranges = plan_ranges(expr.n_slices, flops, _threads(client), options.n_tasks)
    plan = plan_key(expr)
    parts = [client.submit(scaled_range, plan, start, stop, *args, *scattered) for start, stop in ranges]
    return _tree_sum(client, parts, add)


def _check_bool(strip_exponent: Any) -> None:
    if not isinstance(strip_exponent, bool):
        raise TypeError(f"strip_exponent of a submit_* form must be True or False, not {strip_exponent!r}")


def submit_contract(
    eq: str,
    *arrays: Any,
    optimize: Any = 'greedy',
    memory_limit: Any = None,
    sliced_inds: Any = None,
    client: Any = None,
    n_tasks: Optional[int] = None,
    strip_exponent: bool = False,
) -> Any:
    """Like :func:`contract`, but returns at once: the Dask future of the result where the
    slices are summed, an :class:`Assembly` (``result()``, ``done()``, ``cancel()``) where
    a sliced label is in the output. With ``strip_exponent=True``, the future of the
    ``(mantissa, exponent)`` pair (the automatic form needs the plain result first: it is
    :func:`contract`'s)."""
    _check_bool(strip_exponent)
    options = _Options(optimize, memory_limit, sliced_inds, client, n_tasks)
    if strip_exponent:
        return _submit_scaled(eq, arrays, options)
    return _submit(eq, arrays, options)


def submit_value_and_grad(
    eq: str,
    *arrays: Any,
    wrt: Any = None,
    cotangent: Any = None,
    optimize: Any = 'greedy',
    memory_limit: Any = None,
    sliced_inds: Any = None,
    client: Any = None,
    n_tasks: Optional[int] = None,
    strip_exponent: bool = False,
) -> Any:
    """Like :func:`value_and_grad`, but returns at once the Dask future of ``(value, grads)``,
    or an :class:`Assembly` of them where a sliced label is in the output; with
    ``strip_exponent=True``, the future of the scaled ``(value, grads)``, each a pair."""
    _check_bool(strip_exponent)
    options = _Options(optimize, memory_limit, sliced_inds, client, n_tasks)
    if strip_exponent:
        return _submit_scaled(eq, arrays, options, (wrt, cotangent))
    return _submit(eq, arrays, options, (wrt, cotangent))


def submit_hvp(
    eq: str,
    *arrays: Any,
    directions: Any,
    wrt: Any = None,
    cotangent: Any = None,
    optimize: Any = 'greedy',
    memory_limit: Any = None,
    sliced_inds: Any = None,
    client: Any = None,
    n_tasks: Optional[int] = None,
) -> Any:
    """Like :func:`hvp`, but returns at once the Dask future of the products."""
    client = _require_client(client)
    expr = prepare(eq, arrays, optimize, memory_limit, sliced_inds)
    wrt, directions = check_hvp(expr, arrays, directions, wrt, cotangent)
    ops = [np.asarray(x) for x in arrays]
    scattered = client.scatter(ops + directions, broadcast=True, hash=False)
    cot = None if cotangent is None else client.scatter(np.asarray(cotangent), broadcast=True, hash=False)
    ranges = plan_ranges(expr.n_slices, HVP_WORK * slice_flops(expr), _threads(client), n_tasks)
    plan, n = plan_key(expr), len(ops)
    parts = [client.submit(hvp_range, plan, start, stop, wrt, cot, n, *scattered) for start, stop in ranges]
    return _tree_sum(client, parts, add_grads)


def hvp(
    eq: str,
    *arrays: Any,
    directions: Any,
    wrt: Any = None,
    cotangent: Any = None,
    optimize: Any = 'greedy',
    memory_limit: Any = None,
    sliced_inds: Any = None,
    client: Any = None,
    n_tasks: Optional[int] = None,
) -> tuple[NDArray[Any], ...]:
    """``ContractExpression.hvp`` over a Dask cluster: the Hessian-vector products of
    ``x ↦ <cotangent, f(x)>`` in the operands ``wrt`` (all if ``None``), one direction per
    ``wrt`` operand, as a tuple of numpy arrays.

    Each task sums the products of its slice range; the sums are added pairwise on the
    workers. The keywords are those of :func:`value_and_grad`.
    """
    options = dict(optimize=optimize, memory_limit=memory_limit, sliced_inds=sliced_inds, client=client)
    return cast(
        "tuple[NDArray[Any], ...]",
        _with_retries(
            lambda: submit_hvp(eq, *arrays, directions=directions, wrt=wrt, cotangent=cotangent, n_tasks=n_tasks, **options)
        ),
    )


RUNS = 3
"""Attempts of a whole run: Dask recomputes lost tasks by itself, but scattered operands
lost with every worker holding them cancel the run, which is then submitted again."""


def _cancel(run: Any) -> None:
    """Cancels a run: an :class:`Assembly`'s futures, or the root of a tree of sums (the
    ranges below it, which nothing else holds, are then released and never run)."""
    if isinstance(run, Assembly):
        run.cancel()
    else:
        run.client.cancel([run])


def _with_retries(submit: Callable[[], Any]) -> Any:
    for attempt in range(RUNS):
        run = submit()
        try:
            return run.result()
        except KeyboardInterrupt:
            # Ctrl-C while waiting: the run's tasks are cancelled (those not started never
            # run; a running one ends with its range, its result dropped), then it is raised.
            _cancel(run)
            raise
        except _dd.client.FutureCancelledError:
            if attempt + 1 == RUNS:
                raise


def contract(
    eq: str,
    *arrays: Any,
    optimize: Any = 'greedy',
    memory_limit: Any = None,
    sliced_inds: Any = None,
    client: Any = None,
    n_tasks: Optional[int] = None,
    strip_exponent: Optional[bool] = None,
) -> Any:
    """:func:`cgx.contract` over a Dask cluster: the slices summed (or stacked where a sliced
    label is in the output), as a numpy array.

    ``optimize``, ``memory_limit`` and ``sliced_inds`` are those of :func:`cgx.contract`;
    ``client`` is a ``dask.distributed.Client`` (the current one if ``None``); ``n_tasks``
    overrides the number of slice ranges (see :func:`plan_ranges`). Bad input raises what
    :func:`cgx.contract` raises, before anything is sent to the cluster.
    ``strip_exponent`` is :func:`cgx.contract`'s: ``True`` gives ``(mantissa, exponent)``,
    the default reruns scaled a result that left the finite range (see the module docs).
    """
    options = _Options(optimize, memory_limit, sliced_inds, client, n_tasks)
    return strip_exponent_mode(
        strip_exponent,
        arrays,
        False,
        lambda: _with_retries(lambda: _submit(eq, arrays, options)),
        lambda fit: finish_scaled(_with_retries(lambda: _submit_scaled(eq, arrays, options)), False, fit),
    )


def value_and_grad(
    eq: str,
    *arrays: Any,
    wrt: Any = None,
    cotangent: Any = None,
    optimize: Any = 'greedy',
    memory_limit: Any = None,
    sliced_inds: Any = None,
    client: Any = None,
    n_tasks: Optional[int] = None,
    strip_exponent: Optional[bool] = None,
) -> Any:
    """``(value, grads)`` of ``ContractExpression.value_and_grad`` over a Dask cluster.

    One gradient per operand in ``wrt`` (all if ``None``; an int for one), for
    ``cotangent`` (of the output's shape; ``None`` for a scalar output); each task returns
    its slice range's value and gradients from one pass over its slices; gradients are
    added pairwise on the workers, and so is the value, unless a sliced label is in the
    output: then the client places each range's value blocks into the output.
    ``strip_exponent`` as in :func:`contract`, for the value and each gradient.
    """
    options = _Options(optimize, memory_limit, sliced_inds, client, n_tasks)
    grad = (wrt, cotangent)
    return strip_exponent_mode(
        strip_exponent,
        arrays,
        True,
        lambda: _with_retries(lambda: _submit(eq, arrays, options, grad)),
        lambda fit: finish_scaled(_with_retries(lambda: _submit_scaled(eq, arrays, options, grad)), True, fit),
    )


# --- Partitioned scalar DAGs (the core is cgx.distributed.dag) ---------------------------


def _brief(info: _dag.PartitionInfo) -> _dag.PartitionInfo:
    """``info`` without its exports: what the client needs, not the values' list."""
    return dataclasses.replace(info, exports=np.zeros(0, dtype=np.uint64))


def _batch(x: NDArray[np.float64]) -> NDArray[np.float64]:
    """A batch of inputs, as a task's result."""
    return x


def _held(*results: tuple[NDArray[np.float64], NDArray[np.float64]]) -> NDArray[np.float64]:
    """A batch's DAG outputs: the held outputs of every partition, in partition order."""
    return np.concatenate([held for _, held in results], axis=1)


class DagRun:
    """A partitioned DAG evaluated on a Dask cluster (:func:`submit_dag`): one future of
    outputs per batch, the partitions' infos, and the partitions to release."""

    def __init__(self, client: Any, parts: list[_dag.Partition], infos: list[_dag.PartitionInfo], outputs: list[Any]) -> None:
        self.client, self.parts, self.infos, self.outputs = client, parts, infos, outputs

    def result(self, timeout: Optional[float] = None) -> list[NDArray[np.float64]]:
        """The outputs of every batch (one row per row of inputs), in batch order."""
        try:
            return cast("list[NDArray[np.float64]]", self.client.gather(self.outputs, asynchronous=False))
        except BaseException:
            self.client.cancel(self.outputs)
            raise

    def release(self) -> None:
        """Drops the run's futures and its prepared partitions from every worker's cache."""
        self.client.cancel(self.outputs)
        # A worker that fails to answer (say, one starting after another died) holds
        # nothing of the run: its errors are ignored.
        self.client.run(_dag.forget, [p.recipe() for p in self.parts], on_error="ignore")


def submit_dag(
    shape: str,
    nodes: int,
    batches: Sequence[Any],
    *,
    parts: Optional[int] = None,
    seed: int = _dag.SPEC_SEED,
    client: Any = None,
) -> DagRun:
    """Submits the DAG of ``shape`` with about ``nodes`` nodes, cut into ``parts`` node
    blocks (default: two per worker), on each batch of ``batches`` (arrays of one row per
    evaluation and one column per DAG input).

    Each partition is prepared by a task on its own worker (partitions ``k·W/P`` spread
    contiguously over the ``W`` workers), then evaluated per batch by a task that reads
    the results of the partitions it reads, in partition order; every batch is submitted
    at once, so batch ``b + 1`` enters partition ``k`` while batch ``b`` is in partition
    ``k + 1``: a pipeline. Tasks prefer their partition's worker but may run on any other
    (then the partition is prepared again there from its recipe): a worker lost mid-run
    costs time, not the answer. The client waits for the preparations (to learn which
    partitions each one reads) and returns a :class:`DagRun`.
    """
    client = _require_client(client)
    xs = [_dag.check_batch(shape, nodes, b) for b in batches]
    workers = sorted(client.scheduler_info()["workers"])
    if not workers:
        raise ValueError("cgx.distributed: the Dask cluster has no worker")
    if parts is None:
        parts = max(1, min(2 * len(workers), _dag.most_parts(shape, nodes)))
    recipes = _dag.partitions(shape, nodes, parts, seed)
    token = uuid.uuid4().hex[:12]
    home = [[workers[k * len(workers) // parts]] for k in range(parts)]
    place = dict(allow_other_workers=True, pure=False)
    infos = [
        client.submit(_dag.prepare, r, key=f"dag-prepare-{token}-{k}", workers=home[k], **place)
        for k, r in enumerate(recipes)
    ]
    try:
        briefs = client.gather([client.submit(_brief, f, key=f"dag-brief-{token}-{k}", pure=False) for k, f in enumerate(infos)])
        outputs = []
        for b, x in enumerate(xs):
            # A task that returns the batch, not a scattered copy: a result has lineage, so
            # one lost with its worker is made again (scattered data would be lost for
            # good, and a broadcast waits for a worker that is starting).
            xf = client.submit(_batch, x, key=f"dag-batch-{token}-{b}", pure=False)
            results: list[Any] = []
            for k, r in enumerate(recipes):
                args: list[Any] = []
                for s in briefs[k].sources:
                    args += [infos[s], results[s]]
                results.append(
                    client.submit(_dag.evaluate, r, xf, *args, key=f"dag-eval-{token}-{b}-{k}", workers=home[k], **place)
                )
            outputs.append(client.submit(_held, *results, key=f"dag-outputs-{token}-{b}", pure=False))
    except BaseException:
        client.cancel(infos)
        raise
    return DagRun(client, recipes, briefs, outputs)


def evaluate_dag(
    shape: str,
    nodes: int,
    batches: Any,
    *,
    parts: Optional[int] = None,
    seed: int = _dag.SPEC_SEED,
    client: Any = None,
) -> Any:
    """The outputs of the partitioned DAG on a Dask cluster (:func:`submit_dag`): for one
    array of inputs (one row per evaluation, or a 1-d row), one array of outputs; for a
    list of batches, a list, one array per batch. Equal, bit for bit, to
    :func:`cgx.distributed.dag.evaluate_local` in one process. The workers' prepared
    partitions are released at the end."""
    single = isinstance(batches, np.ndarray)
    run = submit_dag(shape, nodes, [batches] if single else list(batches), parts=parts, seed=seed, client=client)
    try:
        out = run.result()
    finally:
        run.release()
    return out[0] if single else out
