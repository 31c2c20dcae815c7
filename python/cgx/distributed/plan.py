"""Planning a distributed run, on the driver and for every engine: the expression with its
output's sliced labels first, its plan as a hashable value, the slice ranges and the
checks that raise the local API's exceptions before anything is sent.

The plan (:func:`plan_key`: equation, shapes, path, limit, sliced labels) is what travels
to the workers; :mod:`cgx.distributed.ranges` rebuilds the expression from it there.
:func:`check_scaled`, :func:`strip_exponent_mode` and :func:`needs_rerun` are ``strip_exponent``'s part on the
driver. This module knows no engine (Dask, Ray, MPI).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Optional

import numpy as np
from numpy.typing import NDArray

from .. import _scaled
from .._expression import ContractExpression, contract_expression
from .._parser import float_prod, shape_of, wrt_positions

Plan = tuple[str, tuple[tuple[int, ...], ...], tuple[tuple[int, int], ...], Optional[float], tuple[str, ...]]
"""An expression's plan as a hashable value (:func:`plan_key`): equation, shapes, path,
memory limit, sliced labels; what travels to the workers."""

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
ranges count three times a value range's flops."""


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


HVP_WORK = 5
"""A Hessian-vector product's flops over the value's, for sizing ranges: the forward
steps, their tangents, the reverse pass and its tangent (a gradient range counts 3)."""


def plan_ranges(
    n_slices: int,
    slice_flops: float,
    threads: int,
    n_tasks: Optional[int] = None,
    min_tasks: int = 1,
) -> list[tuple[int, int]]:
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


def min_ranges(expr: ContractExpression, blocked: bool) -> int:
    """The least number of ranges that keeps a range's output blocks within
    ``1 / BLOCK_SHARE`` of the memory limit (1 without a limit or output blocks)."""
    limit = plan_key(expr)[3]
    if not blocked or limit is None or limit <= 0:
        return 1
    output = float_prod(expr.output_shape)
    return max(1, math.ceil(BLOCK_SHARE * output / limit))


def prepare(eq: str, arrays: Any, optimize: Any, memory_limit: Any, sliced_inds: Any) -> ContractExpression:
    """The expression for ``arrays``' shapes, its sliced output labels first in the slice
    order (so that a range of slices touches few output blocks)."""
    shapes = [shape_of(x, False) for x in arrays]
    expr = contract_expression(eq, *shapes, optimize=optimize, memory_limit=memory_limit, sliced_inds=sliced_inds)
    output = expr._plan()[1]
    order = sorted(expr.sliced_inds, key=lambda c: c not in output)
    if order != list(expr.sliced_inds):
        expr = contract_expression(
            eq, *shapes, optimize=expr.path, memory_limit=memory_limit, sliced_inds=order
        )
    return expr


def plan_key(expr: ContractExpression) -> Plan:
    """The expression's plan as a hashable tuple (what it pickles as)."""
    eq, shapes, path, limit, sliced = expr._build_args()
    return (eq, tuple(tuple(s) for s in shapes), tuple((p[0], p[1]) for p in path), limit, tuple(sliced or ()))


def slice_flops(expr: ContractExpression) -> float:
    """Flops of one slice: the path's (two per multiply-add) times the slicing overhead,
    over the slice count."""
    steps = expr._plan()[3]
    return 2.0 * sum(float(s[3]) for s in steps) * expr.slicing_overhead / max(1, expr.n_slices)


def check_hvp(
    expr: ContractExpression,
    arrays: Any,
    directions: Any,
    wrt: Any,
    cotangent: Any,
) -> tuple[Optional[list[int]], list[NDArray[Any]]]:
    """``(wrt, directions)`` checked on the driver with the local API's exceptions (an
    empty range does no work), ``wrt`` as positions and the directions as arrays."""
    wrt = wrt_positions(wrt)
    directions = [np.asarray(d) for d in directions]
    expr.hvp_slices(*arrays, directions=directions, start=0, stop=0, wrt=wrt, cotangent=cotangent)
    return wrt, directions


def check_scaled(
    expr: ContractExpression, arrays: Any, grad: Optional[tuple[Any, Any]]
) -> tuple[tuple[NDArray[Any], ...], Optional[list[int]]]:
    """The operands as the scaled contraction takes them (float64 or complex128) and
    ``wrt`` as positions (``grad = (wrt, cotangent)``, ``None`` for the value alone),
    checked on the driver with the local API's exceptions (an empty range does no work)."""
    ops = _scaled.engine_arrays(arrays)
    if grad is None:
        expr._scaled(ops, start=0, stop=0)
        return ops, None
    wrt = wrt_positions(grad[0])
    expr._scaled(ops, grads=True, wrt=wrt, cotangent=grad[1], start=0, stop=0)
    return ops, wrt


def strip_exponent_mode(
    strip_exponent: Any,
    arrays: Any,
    grads: bool,
    plain: Callable[[], Any],
    scaled: Callable[[bool], Any],
) -> Any:
    """``strip_exponent`` as :func:`cgx.contract` reads it, for an engine's run: ``True``
    runs ``scaled(False)`` (pairs always); ``None`` runs ``plain()`` and, when its value (or,
    with ``grads``, a gradient) has left the finite range from finite operands, runs
    ``scaled(True)`` (each result a plain array where it fits); ``False`` runs ``plain()``
    only."""
    check_mode(strip_exponent)
    if strip_exponent:
        return scaled(False)
    result = plain()
    if needs_rerun(strip_exponent, result, arrays, grads):
        return scaled(True)
    return result


def check_mode(strip_exponent: Any) -> None:
    """``TypeError`` unless ``strip_exponent`` is ``None``, ``True`` or ``False``."""
    _scaled.check_mode(strip_exponent)


def needs_rerun(strip_exponent: Any, result: Any, arrays: Any, grads: bool) -> bool:
    """Whether the default ``strip_exponent=None`` runs scaled again after the plain
    ``result`` (``(value, grads)`` with ``grads``): it left the finite range although every
    operand is finite."""
    if strip_exponent is not None or result is None:
        return False
    # As arrays: a sum of 0-d arrays added on a worker comes back as a numpy scalar.
    if grads:
        left = _scaled.any_left_range(np.asarray(result[0]), [np.asarray(g) for g in result[1]])
    else:
        left = _scaled.left_range(np.asarray(result))
    return left and _scaled.finite(arrays)
