"""The work of one slice range, on a worker of any engine: a pure function of the plan,
the range and the operands (so an engine may run it again anywhere).

Each worker process rebuilds the expression from its plan once (a small cache) and
returns arrays numpy owns, with the engine's buffer pools emptied after each range.
This module knows no engine (Dask, Ray, MPI).
"""

from __future__ import annotations

import threading

from typing import Any

import numpy as np
from numpy.typing import NDArray

from .. import _core
from .._expression import ContractExpression
from .blocks import Blocks
from .plan import Plan

# Per worker process: rebuilt expressions by plan, so each compiles once per dtype.
_CACHE: dict[Plan, ContractExpression] = {}


_CACHE_LOCK = threading.Lock()


_CACHE_SIZE = 16


def _expression(plan: Plan) -> ContractExpression:
    with _CACHE_LOCK:
        expr = _CACHE.get(plan)
        if expr is None:
            eq, shapes, path, limit, sliced = plan
            expr = ContractExpression(eq, [list(s) for s in shapes], list(path), limit, list(sliced) or None)
            if len(_CACHE) >= _CACHE_SIZE:
                _CACHE.pop(next(iter(_CACHE)))
            _CACHE[plan] = expr
        return expr


def _owned(value: Any, blocked: bool) -> Any:
    """A range's value from the engine (a sum, or ``(first, rows)`` with ``blocked``) as a
    copy numpy owns.

    The engine's result buffers go back to the process's pool when dropped (up to
    ``POOL_MAX_BYTES`` per element type), for the next evaluation. A worker should keep
    nothing between ranges: so the range functions copy their results, drop the engine's
    buffers and empty the pool (``release_buffers``), and what Dask holds and sends is
    plain memory, freed wherever it is dropped.
    The copy costs one result's size for a moment."""
    return Blocks(value[0], np.array(value[1])) if blocked else np.array(value)


def eval_range(plan: Plan, start: int, stop: int, blocked: bool, *arrays: Any) -> Any:
    expr = _expression(plan)
    value: Any
    if blocked:
        value = expr.eval_blocks(*arrays, start=start, stop=stop)
    else:
        value = expr.eval_slices(*arrays, start=start, stop=stop)
    owned = _owned(value, blocked)
    del value
    _core.release_buffers()
    return owned


def grad_range(
    plan: Plan,
    start: int,
    stop: int,
    blocked: bool,
    wrt: Any,
    cotangent: Any,
    *arrays: Any,
) -> tuple[Any, tuple[NDArray[Any], ...]]:
    """The range's ``(value, grads)``; ``cotangent`` is the whole one, or :class:`Blocks` of
    it (at least those the range touches, see :func:`cotangent_blocks`)."""
    first = None
    if isinstance(cotangent, Blocks):
        first, cotangent = cotangent.first, cotangent.rows
    value, grads = _expression(plan).value_and_grad_slices(
        *arrays, start=start, stop=stop, wrt=wrt, cotangent=cotangent, blocks=blocked, cotangent_first=first
    )
    owned = _owned(value, blocked), tuple(np.array(g) for g in grads)
    del value, grads
    _core.release_buffers()
    return owned


def hvp_range(
    plan: Plan,
    start: int,
    stop: int,
    wrt: Any,
    cotangent: Any,
    n_operands: int,
    *arrays: Any,
) -> tuple[NDArray[Any], ...]:
    """The range's Hessian-vector products (one per ``wrt`` operand): ``arrays`` holds the
    ``n_operands`` operands, then one direction per ``wrt`` operand."""
    ops, directions = arrays[:n_operands], arrays[n_operands:]
    products = _expression(plan).hvp_slices(
        *ops, directions=directions, start=start, stop=stop, wrt=wrt, cotangent=cotangent
    )
    owned = tuple(np.array(h) for h in products)
    del products
    _core.release_buffers()
    return owned


def scaled_range(
    plan: Plan,
    start: int,
    stop: int,
    grads: bool,
    wrt: Any,
    cotangent: Any,
    *arrays: Any,
) -> Any:
    """The range's scaled sum ``(mantissa, exponent)`` of the output's full shape (the
    engine's ``eval_slices_scaled``), or with ``grads`` its scaled ``(value, grads)``:
    ``strip_exponent``'s work; :func:`cgx.distributed.combine.add_scaled` adds two
    ranges'. ``arrays`` are float64 or complex128 (the driver converts them)."""
    result = _expression(plan)._scaled(tuple(arrays), grads=grads, wrt=wrt, cotangent=cotangent, start=start, stop=stop)
    owned: Any
    if grads:
        (m, e), gs = result
        owned = (np.array(m), e), tuple((np.array(gm), ge) for gm, ge in gs)
    else:
        owned = (np.array(result[0]), result[1])
    del result
    _core.release_buffers()
    return owned
