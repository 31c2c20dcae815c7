"""Sliced contractions, their gradients and Hessian-vector products on a Dask cluster
(``dask.distributed``).

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

Invariants: every task is pure (its result depends only on its arguments, which are the
plan, the scattered operands and a slice range), so Dask may rerun it anywhere, for
instance when a worker dies mid-run: that costs time, not the answer. (A range's
cotangent blocks live on one worker: if that worker dies before the range is done, the
run is cancelled and submitted again, see ``RUNS``.) The expression
travels to the workers as its plan (it pickles as equation, shapes, path, limit, sliced
labels) and each worker process keeps the rebuilt, compiled expression in a small cache.
The range functions and the combination are engine-neutral: :mod:`cgx.ray` runs the same
ones on Ray.

>>> from dask.distributed import Client                     # doctest: +SKIP
>>> client = Client(n_workers=2)                            # doctest: +SKIP
>>> cgx.distributed.contract("ij,jk->ik", a, b, sliced_inds="j", client=client)  # doctest: +SKIP
"""

import collections
import math
import operator
import threading

import numpy as np

from . import _einsum

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
]

MIN_TASK_FLOPS = 2e8
"""The least work per task, in flops (two per multiply-add), so that Dask's per-task
overhead stays under 5% of a task's time. The arithmetic, from figures measured on the
2-core development machine (docs/PERFORMANCE.md and docs/performance-history.md,
"Sliced contractions on Dask"):

- overhead ``o`` per task (wall time of 2000 no-op tasks on 2 workers over their count):
  2.6 to 6.4 ms on the shared machine at load averages of 3 to 10 (0.2 to 1 ms on an
  idle one, Dask's documented figure); take ``o = 5 ms``;
- a task must run ``d >= o / 0.05 = 20 o = 100 ms``;
- one thread evaluates slices at about 2 Gflop/s (``lm_batch_likelihood_brackets_4_4d``
  sliced 16 ways: 8.0e8 flops in 0.40 s), so 100 ms is ``2e8`` flops.

Under heavier load compute slows as much as the overhead grows (20.5 ms of overhead
beside tasks of 1.1 to 1.8 s at a load of 13: 1 to 2%), so the ratio holds. Gradient
ranges count three times a value range's flops (``_submit``)."""

TASKS_PER_THREAD = 3
"""At most this many tasks per worker thread: enough to balance uneven workers, few
enough that per-task overhead and the reduction stay small."""


BLOCK_SHARE = 8
"""Where a sliced label is in the output and ``memory_limit`` is set, a range's output
blocks hold at most ``1 / BLOCK_SHARE`` of the limit (in elements), so ranges are at least
``ceil(BLOCK_SHARE * output / limit)``. Why: a range holds its blocks twice as it ends (the
engine's rows and the numpy copy it returns) beside the slices' intermediates, which the
limit bounds; with three ranges per worker thread alone, one worker contracting MERA open
26 (a 344 MB output, a 380 MB limit) peaked at 515 to 535 MB above its resident memory for
the value, against 268 to 341 MB on two workers, whose ranges were half as long."""


def _min_ranges(expr, blocked):
    """The least number of ranges that keeps a range's output blocks within
    ``1 / BLOCK_SHARE`` of the memory limit (1 without a limit or output blocks)."""
    limit = _plan_key(expr)[3]
    if not blocked or limit is None or limit <= 0:
        return 1
    output = _einsum._float_prod(expr.output_shape)
    return max(1, math.ceil(BLOCK_SHARE * output / limit))


def _require_client(client):
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


def plan_ranges(n_slices, slice_flops, threads, n_tasks=None, min_tasks=1):
    """The slice ranges ``[(start, stop), ...]``, contiguous, covering ``0..n_slices``.

    ``n_tasks`` forces the number of ranges (at most ``n_slices``). Otherwise each range
    gets at least ``k = ceil(MIN_TASK_FLOPS / slice_flops)`` slices (``slice_flops`` per
    slice), so every task does at least ``MIN_TASK_FLOPS`` of work unless the whole run does
    less (then one range); the number of ranges is the largest that allows it,
    ``n_slices // k``, capped at ``TASKS_PER_THREAD * threads`` (a cap only makes the
    ranges longer), and at least 1. ``min_tasks`` (memory: see :data:`BLOCK_SHARE`) raises
    that number, up to ``n_slices``, before the work rule: a memory bound is kept even
    where it makes tasks shorter than ``MIN_TASK_FLOPS``.

    >>> plan_ranges(10, 1e9, 2)
    [(0, 1), (1, 3), (3, 5), (5, 6), (6, 8), (8, 10)]
    >>> plan_ranges(10, 1.0, 2)
    [(0, 10)]
    >>> plan_ranges(3, 0.7 * MIN_TASK_FLOPS, 2)  # two ranges would leave one slice alone
    [(0, 3)]
    """
    n_slices = int(n_slices)
    if n_tasks is None:
        per_task = math.ceil(MIN_TASK_FLOPS / slice_flops) if slice_flops > 0 else max(1, n_slices)
        n_tasks = min(n_slices // per_task, TASKS_PER_THREAD * max(1, int(threads)))
        n_tasks = max(n_tasks, int(min_tasks))
    elif not isinstance(n_tasks, int) or n_tasks < 1:
        raise ValueError(f"n_tasks must be a positive int, got {n_tasks!r}")
    n_tasks = max(1, min(n_slices, n_tasks))
    bounds = [n_slices * i // n_tasks for i in range(n_tasks + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(n_tasks)]


# Per worker process: rebuilt expressions by plan, so each compiles once per dtype.
_CACHE = {}
_CACHE_LOCK = threading.Lock()
_CACHE_SIZE = 16


def _expression(plan):
    with _CACHE_LOCK:
        expr = _CACHE.get(plan)
        if expr is None:
            eq, shapes, path, limit, sliced = plan
            expr = _einsum.ContractExpression(eq, [list(s) for s in shapes], list(path), limit, list(sliced) or None)
            if len(_CACHE) >= _CACHE_SIZE:
                _CACHE.pop(next(iter(_CACHE)))
            _CACHE[plan] = expr
        return expr


def _plan_key(expr):
    """The expression's plan as a hashable tuple (what it pickles as)."""
    eq, shapes, path, limit, sliced = expr._build_args()
    return (eq, tuple(tuple(s) for s in shapes), tuple(tuple(p) for p in path), limit, tuple(sliced or ()))


class Blocks:
    """Output blocks ``first..first + len(rows)`` of a slice range, stacked along axis 0
    (``ContractExpression.eval_blocks``)."""

    __slots__ = ("first", "rows")

    def __init__(self, first, rows):
        self.first, self.rows = int(first), rows

    def __reduce__(self):
        return (Blocks, (self.first, self.rows))


if _dd is not None:
    from dask.sizeof import sizeof as _sizeof

    # Dask sizes results to balance memory and to report them; Blocks count by their rows.
    _sizeof.register(Blocks)(lambda b: _sizeof(b.rows) + 64)


def _owned(value, blocked):
    """A range's value from the engine (a sum, or ``(first, rows)`` with ``blocked``) as a
    copy numpy owns.

    The engine's result buffers go back to the process's pool when dropped (up to
    ``POOL_MAX_BYTES`` per element type), for the next evaluation. A worker should keep
    nothing between ranges: so the range functions copy their results, drop the engine's
    buffers and empty the pool (``release_buffers``), and what Dask holds and sends is
    plain memory, freed wherever it is dropped.
    The copy costs one result's size for a moment."""
    return Blocks(value[0], np.array(value[1])) if blocked else np.array(value)


def _eval_range(plan, start, stop, blocked, *arrays):
    expr = _expression(plan)
    if blocked:
        value = expr.eval_blocks(*arrays, start=start, stop=stop)
    else:
        value = expr.eval_slices(*arrays, start=start, stop=stop)
    owned = _owned(value, blocked)
    del value
    _einsum._core.release_buffers()
    return owned


def _grad_range(plan, start, stop, blocked, wrt, cotangent, *arrays):
    """The range's ``(value, grads)``; ``cotangent`` is the whole one, or :class:`Blocks` of
    it (at least those the range touches, see :func:`_cotangent_blocks`)."""
    first = None
    if isinstance(cotangent, Blocks):
        first, cotangent = cotangent.first, cotangent.rows
    value, grads = _expression(plan).value_and_grad_slices(
        *arrays, start=start, stop=stop, wrt=wrt, cotangent=cotangent, blocks=blocked, cotangent_first=first
    )
    owned = _owned(value, blocked), tuple(np.array(g) for g in grads)
    del value, grads
    _einsum._core.release_buffers()
    return owned


def _hvp_range(plan, start, stop, wrt, cotangent, n_operands, *arrays):
    """The range's Hessian-vector products (one per ``wrt`` operand): ``arrays`` holds the
    ``n_operands`` operands, then one direction per ``wrt`` operand."""
    ops, directions = arrays[:n_operands], arrays[n_operands:]
    products = _expression(plan).hvp_slices(
        *ops, directions=directions, start=start, stop=stop, wrt=wrt, cotangent=cotangent
    )
    owned = tuple(np.array(h) for h in products)
    del products
    _einsum._core.release_buffers()
    return owned


HVP_WORK = 5
"""A Hessian-vector product's flops over the value's, for sizing ranges: the forward
steps, their tangents, the reverse pass and its tangent (a gradient range counts 3)."""


def _check_hvp(expr, arrays, directions, wrt, cotangent):
    """``(wrt, directions)`` checked on the driver with the local API's exceptions (an
    empty range does no work), ``wrt`` as positions and the directions as arrays."""
    wrt = _einsum._wrt(wrt)
    directions = [np.asarray(d) for d in directions]
    expr.hvp_slices(*arrays, directions=directions, start=0, stop=0, wrt=wrt, cotangent=cotangent)
    return wrt, directions


def _combine(a, b):
    """Two ranges' values: added, or as blocks placed side by side (a shared block added);
    :mod:`cgx.ray` and :mod:`cgx.mpi` combine so, Dask places blocks on the client."""
    if not isinstance(a, Blocks):
        return operator.add(a, b)
    if len(a.rows) == 0 or len(b.rows) == 0:  # an empty range touches no block
        return b if len(a.rows) == 0 else a
    first = min(a.first, b.first)
    stop = max(a.first + len(a.rows), b.first + len(b.rows))
    rows = np.zeros((stop - first,) + a.rows.shape[1:], dtype=np.result_type(a.rows, b.rows))
    for x in (a, b):
        rows[x.first - first : x.first - first + len(x.rows)] += x.rows
    return Blocks(first, rows)


def _add_pair(a, b):
    if isinstance(a, tuple):
        return _combine(a[0], b[0]), tuple(x + y for x, y in zip(a[1], b[1]))
    return _combine(a, b)


def _block_layout(expr):
    """How stacked blocks become the output: ``(n_blocks, sizes, perm)``, the stack reshaped
    to ``sizes`` (the sliced output labels in slice order, then the other output labels)
    and transposed by ``perm``; ``None`` when no sliced label is in the output."""
    _, output, sizes, _ = expr._plan()
    blocked = [c for c in expr.sliced_inds if c in output]
    if not blocked:
        return None
    order = blocked + [c for c in output if c not in blocked]
    n_blocks = int(np.prod([sizes[c] for c in blocked]))
    return n_blocks, tuple(sizes[c] for c in order), tuple(order.index(c) for c in output)


def _finish(layout, result):
    """The output from the root of the combination: blocks laid out, gradients as they are."""
    if isinstance(result, tuple):
        return _finish(layout, result[0]), result[1]
    if layout is None:
        return result
    n_blocks, sizes, perm = layout
    if result.first != 0 or len(result.rows) != n_blocks:  # pragma: no cover - an internal invariant
        raise RuntimeError(f"cgx.distributed: blocks {result.first}..{result.first + len(result.rows)} of {n_blocks}")
    return np.ascontiguousarray(result.rows.reshape(sizes).transpose(perm))


def _add_grads(a, b):
    """Two ranges' gradients, added."""
    return tuple(x + y for x, y in zip(a, b))


def _part(i, result):
    """Item ``i`` of a range's ``(value, grads)``: the two go separate ways."""
    return result[i]


def _blocks_in(x, layout, k, first, n):
    """Views of blocks ``first..first + n`` of ``x``, an array of the output's full shape
    whose first ``k`` labels in the layout's order are the sliced ones."""
    _, sizes, perm = layout
    stack = x.transpose(np.argsort(perm))  # a view of shape ``sizes``
    return [stack[np.unravel_index(b, sizes[:k]) + (Ellipsis,)] for b in range(first, first + n)]


def _place(out, layout, blocks):
    """Adds ``blocks`` (a range's output blocks) at their places in ``out``, the output's
    full shape: each block is written through a view, so nothing output-sized is built."""
    k = len(layout[1]) - (blocks.rows.ndim - 1)
    for view, row in zip(_blocks_in(out, layout, k, blocks.first, len(blocks.rows)), blocks.rows):
        view += row


def _range_blocks(layout, n_slices, start, stop):
    """``(first, n)``: the output blocks the slices ``start..stop`` touch (the output's
    sliced labels come first in the slice order, so a block is a run of slices)."""
    if start >= stop:
        return 0, 0
    per_block = n_slices // layout[0]
    return start // per_block, (stop - 1) // per_block - start // per_block + 1


def _cotangent_blocks(cotangent, layout, k, n_slices, start, stop):
    """The blocks of ``cotangent`` (``k`` sliced output labels) that the slices
    ``start..stop`` read, copied and stacked as ``eval_blocks`` stacks the value."""
    first, n = _range_blocks(layout, n_slices, start, stop)
    rows = np.empty((n,) + tuple(layout[1][k:]), dtype=cotangent.dtype)
    for i, view in enumerate(_blocks_in(cotangent, layout, k, first, n)):
        rows[i] = view
    return Blocks(first, rows)


class Assembly:
    """The future of an output with a sliced label, assembled on the client: what
    :func:`submit_contract` and :func:`submit_value_and_grad` return in that case.

    The range tasks' blocks are never combined on a worker: :meth:`result` allocates the
    output once and adds each range's blocks into it as they arrive (releasing each range's
    result on its worker once read), so the client holds the output once plus one range's
    blocks, and no worker holds more than its own ranges' blocks. Gradients, of the
    operands' shapes, are added pairwise on the workers as for sums.
    """

    def __init__(self, layout, shape, blocks, grads=None):
        self._layout, self._shape = layout, tuple(shape)
        self._pending, self._grads = list(blocks), grads
        self._lock = threading.Lock()
        self._out = None

    def futures(self):
        """The Dask futures not yet read: the ranges' blocks, then the gradients' root."""
        return self._pending + ([] if self._grads is None else [self._grads])

    def done(self):
        return all(f.done() for f in self.futures())

    def cancel(self):
        futures = self.futures()
        if futures:
            # One message for all of them: after Ctrl-C, the run should end at once.
            futures[0].client.cancel(futures)

    def result(self, timeout=None):
        """The output (with gradients, ``(value, grads)``) as numpy arrays, once every range
        has returned; a task's exception is raised here."""
        with self._lock:
            for f in _dd.as_completed(list(self._pending), timeout=timeout):
                blocks = f.result()
                if self._out is None:
                    self._out = np.zeros(self._shape, dtype=blocks.rows.dtype)
                _place(self._out, self._layout, blocks)
                del blocks
                self._pending.remove(f)
                f.release()  # the worker may drop the range's blocks now
            if self._grads is None:
                return self._out
            return self._out, self._grads.result(timeout=timeout)


def _tree_sum(client, futures, add=_add_pair):
    """Combines the futures pairwise on the workers (with ``add``); the root future."""
    while len(futures) > 1:
        paired = [client.submit(add, futures[i], futures[i + 1]) for i in range(0, len(futures) - 1, 2)]
        if len(futures) % 2:
            paired.append(futures[-1])
        futures = paired
    return futures[0]


def _prepare(eq, arrays, optimize, memory_limit, sliced_inds):
    """The expression for ``arrays``' shapes, its sliced output labels first in the slice
    order (so that a range of slices touches few output blocks)."""
    shapes = [_einsum._shape_of(x, False) for x in arrays]
    expr = _einsum.contract_expression(eq, *shapes, optimize=optimize, memory_limit=memory_limit, sliced_inds=sliced_inds)
    output = expr._plan()[1]
    order = sorted(expr.sliced_inds, key=lambda c: c not in output)
    if order != list(expr.sliced_inds):
        expr = _einsum.contract_expression(
            eq, *shapes, optimize=expr.path, memory_limit=memory_limit, sliced_inds=order
        )
    return expr


def _slice_flops(expr):
    """Flops of one slice: the path's (two per multiply-add) times the slicing overhead,
    over the slice count."""
    steps = expr._plan()[3]
    return 2.0 * sum(float(s[3]) for s in steps) * expr.slicing_overhead / max(1, expr.n_slices)


def _threads(client):
    return sum(client.nthreads().values()) or 1


_Options = collections.namedtuple("_Options", "optimize memory_limit sliced_inds client n_tasks")
"""The keywords every form takes: how to plan (``optimize``, ``memory_limit``,
``sliced_inds``: those of :func:`cgx.contract`) and where to run (``client``, ``n_tasks``)."""


def _submit(eq, arrays, options, grad=None):
    """The future of the slices' sum: of the value, or with ``grad = (wrt, cotangent)`` of
    ``(value, grads)`` (the body of every form, see the module docs)."""
    client = _require_client(options.client)
    expr = _prepare(eq, arrays, options.optimize, options.memory_limit, options.sliced_inds)
    # Checks operands (count, shapes, element type), the memory limit and, for gradients,
    # wrt and the cotangent here, with the local API's exceptions: an empty range does no work.
    if grad is None:
        expr.eval_slices(*arrays, start=0, stop=0)
    else:
        wrt, cotangent = _einsum._wrt(grad[0]), grad[1]
        expr.grad_slices(*arrays, start=0, stop=0, wrt=wrt, cotangent=cotangent)
    arrays = [np.asarray(x) for x in arrays]
    plan = _plan_key(expr)
    # Fresh keys per run (hash=False): a run never waits on, or races with the release
    # of, an earlier run's copy of the same data.
    scattered = client.scatter(arrays, broadcast=True, hash=False)
    layout = _block_layout(expr)
    blocked = layout is not None
    if grad is None:
        task, args, flops = _eval_range, (blocked,), _slice_flops(expr)
    elif blocked:
        # The cotangent goes by blocks (below), never whole, to each range.
        task, args, flops = _grad_range, (blocked, wrt), 3 * _slice_flops(expr)
    else:
        cot = None if cotangent is None else client.scatter(np.asarray(cotangent), broadcast=True, hash=False)
        task, args, flops = _grad_range, (blocked, wrt, cot), 3 * _slice_flops(expr)
    ranges = plan_ranges(expr.n_slices, flops, _threads(client), options.n_tasks, _min_ranges(expr, blocked))
    if grad is not None and blocked:
        k = sum(c in expr._plan()[1] for c in expr.sliced_inds)
        cotangent = np.asarray(cotangent)
        parts = []
        for start, stop in ranges:
            # One range's blocks at a time, scattered to one worker: never all copies at once.
            cot = client.scatter(_cotangent_blocks(cotangent, layout, k, expr.n_slices, start, stop), hash=False)
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
    grads = _tree_sum(client, [client.submit(_part, 1, p) for p in parts], _add_grads)
    return Assembly(layout, shape, blocks, grads)


def submit_contract(eq, *arrays, optimize="greedy", memory_limit=None, sliced_inds=None, client=None, n_tasks=None):
    """Like :func:`contract`, but returns at once: the Dask future of the result where the
    slices are summed, an :class:`Assembly` (``result()``, ``done()``, ``cancel()``) where
    a sliced label is in the output."""
    return _submit(eq, arrays, _Options(optimize, memory_limit, sliced_inds, client, n_tasks))


def submit_value_and_grad(
    eq,
    *arrays,
    wrt=None,
    cotangent=None,
    optimize="greedy",
    memory_limit=None,
    sliced_inds=None,
    client=None,
    n_tasks=None,
):
    """Like :func:`value_and_grad`, but returns at once the Dask future of ``(value, grads)``,
    or an :class:`Assembly` of them where a sliced label is in the output."""
    return _submit(eq, arrays, _Options(optimize, memory_limit, sliced_inds, client, n_tasks), (wrt, cotangent))


def submit_hvp(
    eq,
    *arrays,
    directions,
    wrt=None,
    cotangent=None,
    optimize="greedy",
    memory_limit=None,
    sliced_inds=None,
    client=None,
    n_tasks=None,
):
    """Like :func:`hvp`, but returns at once the Dask future of the products."""
    client = _require_client(client)
    expr = _prepare(eq, arrays, optimize, memory_limit, sliced_inds)
    wrt, directions = _check_hvp(expr, arrays, directions, wrt, cotangent)
    arrays = [np.asarray(x) for x in arrays]
    scattered = client.scatter(arrays + directions, broadcast=True, hash=False)
    cot = None if cotangent is None else client.scatter(np.asarray(cotangent), broadcast=True, hash=False)
    ranges = plan_ranges(expr.n_slices, HVP_WORK * _slice_flops(expr), _threads(client), n_tasks)
    plan, n = _plan_key(expr), len(arrays)
    parts = [client.submit(_hvp_range, plan, start, stop, wrt, cot, n, *scattered) for start, stop in ranges]
    return _tree_sum(client, parts, _add_grads)


def hvp(
    eq,
    *arrays,
    directions,
    wrt=None,
    cotangent=None,
    optimize="greedy",
    memory_limit=None,
    sliced_inds=None,
    client=None,
    n_tasks=None,
):
    """``ContractExpression.hvp`` over a Dask cluster: the Hessian-vector products of
    ``x ↦ <cotangent, f(x)>`` in the operands ``wrt`` (all if ``None``), one direction per
    ``wrt`` operand, as a tuple of numpy arrays.

    Each task sums the products of its slice range; the sums are added pairwise on the
    workers. The keywords are those of :func:`value_and_grad`.
    """
    options = dict(optimize=optimize, memory_limit=memory_limit, sliced_inds=sliced_inds, client=client)
    return _with_retries(
        lambda: submit_hvp(eq, *arrays, directions=directions, wrt=wrt, cotangent=cotangent, n_tasks=n_tasks, **options)
    )


RUNS = 3
"""Attempts of a whole run: Dask recomputes lost tasks by itself, but scattered operands
lost with every worker holding them cancel the run, which is then submitted again."""


def _cancel(run):
    """Cancels a run: an :class:`Assembly`'s futures, or the root of a tree of sums (the
    ranges below it, which nothing else holds, are then released and never run)."""
    if isinstance(run, Assembly):
        run.cancel()
    else:
        run.client.cancel([run])


def _with_retries(submit):
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


def contract(eq, *arrays, optimize="greedy", memory_limit=None, sliced_inds=None, client=None, n_tasks=None):
    """:func:`cgx.contract` over a Dask cluster: the slices summed (or stacked where a sliced
    label is in the output), as a numpy array.

    ``optimize``, ``memory_limit`` and ``sliced_inds`` are those of :func:`cgx.contract`;
    ``client`` is a ``dask.distributed.Client`` (the current one if ``None``); ``n_tasks``
    overrides the number of slice ranges (see :func:`plan_ranges`). Bad input raises what
    :func:`cgx.contract` raises, before anything is sent to the cluster.
    """
    options = _Options(optimize, memory_limit, sliced_inds, client, n_tasks)
    return _with_retries(lambda: _submit(eq, arrays, options))


def value_and_grad(
    eq,
    *arrays,
    wrt=None,
    cotangent=None,
    optimize="greedy",
    memory_limit=None,
    sliced_inds=None,
    client=None,
    n_tasks=None,
):
    """``(value, grads)`` of ``ContractExpression.value_and_grad`` over a Dask cluster.

    One gradient per operand in ``wrt`` (all if ``None``; an int for one), for
    ``cotangent`` (of the output's shape; ``None`` for a scalar output); each task returns
    its slice range's value and gradients from one pass over its slices; gradients are
    added pairwise on the workers, and so is the value, unless a sliced label is in the
    output: then the client places each range's value blocks into the output.
    """
    options = _Options(optimize, memory_limit, sliced_inds, client, n_tasks)
    return _with_retries(lambda: _submit(eq, arrays, options, (wrt, cotangent)))
