"""Sliced contractions and their gradients over MPI (``mpi4py``; imported as
:mod:`cgx.mpi`): the engine-neutral core's plan, range and combination functions
(:mod:`cgx.distributed.plan`, ``ranges``, ``blocks``, ``combine``), run by the ranks of a
communicator.

MPI programs are SPMD: every rank runs the same script (``mpiexec -n 4 python run.py``)
and calls :func:`contract`, :func:`value_and_grad` or :func:`hvp` together (collective
calls). The
arguments are read on ``root`` only (the others may pass the same or placeholders); the
result comes back on ``root``, the other ranks get ``None``:

1. ``root`` plans once and checks the operands, with the local API's exceptions; a bad
   input raises that exception on every rank (it is broadcast), so no rank waits forever;
2. ``root`` broadcasts the plan and the operands (pickled, ``comm.bcast``);
3. the slices ``0..n_slices`` are cut into one contiguous range per rank (the output's
   sliced labels first in the slice order, so a rank's output blocks are its share);
4. the ranks' results are combined along a binomial tree towards ``root`` (``log2`` of
   the rank count steps, point to point): sums added, output blocks placed side by side,
   gradients added; ``root`` lays the blocks out as the output.

``strip_exponent`` (:func:`contract`, :func:`value_and_grad`) is the local API's: each
rank runs its range scaled and the ``(mantissa, exponent)`` pairs are added along the
tree at the larger exponent; by default, ``root`` decides after the plain run whether
its result left the finite range and broadcasts the decision, so every rank reruns
scaled together.

Unlike Dask and Ray, MPI has no fault tolerance: a rank that dies ends the job.

>>> from mpi4py import MPI                                         # doctest: +SKIP
>>> out = cgx.mpi.contract("ij,jk->ik", a, b, sliced_inds="j")    # doctest: +SKIP
>>> if MPI.COMM_WORLD.rank == 0: print(out)                        # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import numpy as np
from numpy.typing import NDArray

from .._expression import ContractExpression
from .._parser import wrt_positions
from .blocks import Layout, block_layout
from .combine import add_grads, add_pair, add_scaled, add_scaled_grads, finish, finish_scaled
from .plan import Plan, check_hvp, check_mode, check_scaled, needs_rerun, plan_key, prepare
from .ranges import eval_range, grad_range, hvp_range, scaled_range

try:
    from mpi4py import MPI as _MPI
except ImportError:  # pragma: no cover - exercised only without mpi4py
    _MPI = None  # type: ignore[assignment]  # `_comm` says what to install

__all__ = ["contract", "value_and_grad", "hvp"]

_TAG = 0x6367  # "cg": the tag of the combination's messages


def _comm(comm: Any) -> Any:
    if comm is not None:
        return comm
    if _MPI is None:
        raise ImportError("cgx.mpi needs mpi4py and an MPI library: pip install mpi4py mpich")
    return _MPI.COMM_WORLD


def _broadcast(comm: Any, root: int, make: Callable[[], Any]) -> Any:
    """``make()`` on ``root``, broadcast; its exception raised on every rank instead."""
    payload = error = None
    if comm.rank == root:
        try:
            payload = make()
        except Exception as e:  # noqa: BLE001 - re-raised on every rank just below
            error = e
    error, payload = comm.bcast((error, payload), root=root)
    if error is not None:
        raise error
    return payload


def _my_range(comm: Any, n_slices: int) -> tuple[int, int]:
    """This rank's contiguous share of ``0..n_slices`` (empty when there are more ranks)."""
    return n_slices * comm.rank // comm.size, n_slices * (comm.rank + 1) // comm.size


def _combine_to_root(comm: Any, root: int, part: Any, add: Callable[[Any, Any], Any] = add_pair) -> Any:
    """Combines every rank's part along a binomial tree (two parts by ``add``); the total
    on ``root``, else ``None``."""
    rel = (comm.rank - root) % comm.size
    step = 1
    while step < comm.size:
        if rel % (2 * step) == step:
            comm.send(part, dest=(rel - step + root) % comm.size, tag=_TAG)
            return None
        if rel + step < comm.size:
            part = add(part, comm.recv(source=(rel + step + root) % comm.size, tag=_TAG))
        step *= 2
    return part


def _plan(
    eq: str,
    arrays: Any,
    optimize: Any,
    memory_limit: Any,
    sliced_inds: Any,
) -> tuple[ContractExpression, Plan, Optional[Layout]]:
    expr = prepare(eq, arrays, optimize, memory_limit, sliced_inds)
    return expr, plan_key(expr), block_layout(expr)


def _scaled_total(
    comm: Any,
    root: int,
    eq: str,
    arrays: Any,
    grad: Any,
    options: tuple[Any, Any, Any],
    fit: bool,
) -> Any:
    """The scaled run (``grad = (wrt, cotangent)`` for gradients too): the result on
    ``root`` as the local API gives it, ``None`` on the other ranks."""

    def make() -> Any:
        expr, plan, _ = _plan(eq, arrays, *options)
        ops, w = check_scaled(expr, arrays, grad)
        cot = None if grad is None or grad[1] is None else np.asarray(grad[1])
        return plan, expr.n_slices, w, cot, list(ops)

    plan, n_slices, w, cot, ops = _broadcast(comm, root, make)
    start, stop = _my_range(comm, n_slices)
    part = scaled_range(plan, start, stop, grad is not None, w, cot, *ops)
    total = _combine_to_root(comm, root, part, add_scaled if grad is None else add_scaled_grads)
    return None if total is None else finish_scaled(total, grad is not None, fit)


def _with_mode(
    comm: Any,
    root: int,
    strip_exponent: Any,
    arrays: Any,
    grads: bool,
    plain: Callable[[], Any],
    scaled: Callable[[bool], Any],
) -> Any:
    """``strip_exponent`` read on ``root`` and run collectively (``plan.strip_exponent_mode``
    on every rank, the decision to rerun taken on ``root`` and broadcast)."""

    def mode() -> Any:
        check_mode(strip_exponent)
        return strip_exponent

    strip = _broadcast(comm, root, mode)
    if strip:
        return scaled(False)
    result = plain()
    rerun = needs_rerun(strip, result, arrays, grads) if comm.rank == root else None
    if comm.bcast(rerun, root=root):
        return scaled(True)
    return result


def contract(
    eq: str,
    *arrays: Any,
    optimize: Any = 'greedy',
    memory_limit: Any = None,
    sliced_inds: Any = None,
    comm: Any = None,
    root: int = 0,
    strip_exponent: Optional[bool] = None,
) -> Any:
    """:func:`cgx.contract` over the ranks of ``comm`` (``MPI.COMM_WORLD`` if ``None``), a
    collective call: the numpy array on ``root``, ``None`` on the other ranks
    (``strip_exponent`` as in :func:`cgx.contract`)."""
    comm = _comm(comm)
    options = (optimize, memory_limit, sliced_inds)
    return _with_mode(
        comm,
        root,
        strip_exponent,
        arrays,
        False,
        lambda: _contract(comm, root, eq, arrays, options),
        lambda fit: _scaled_total(comm, root, eq, arrays, None, options, fit),
    )


def _contract(comm: Any, root: int, eq: str, arrays: Any, options: tuple[Any, Any, Any]) -> Any:
    optimize, memory_limit, sliced_inds = options

    def make() -> Any:
        expr, plan, layout = _plan(eq, arrays, optimize, memory_limit, sliced_inds)
        expr.eval_slices(*arrays, start=0, stop=0)  # checks the operands
        return plan, layout, expr.n_slices, [np.asarray(x) for x in arrays]

    plan, layout, n_slices, ops = _broadcast(comm, root, make)
    start, stop = _my_range(comm, n_slices)
    total = _combine_to_root(comm, root, eval_range(plan, start, stop, layout is not None, *ops))
    return None if total is None else finish(layout, total)


def value_and_grad(
    eq: str,
    *arrays: Any,
    wrt: Any = None,
    cotangent: Any = None,
    optimize: Any = 'greedy',
    memory_limit: Any = None,
    sliced_inds: Any = None,
    comm: Any = None,
    root: int = 0,
    strip_exponent: Optional[bool] = None,
) -> Any:
    """``(value, grads)`` of ``ContractExpression.value_and_grad`` over the ranks of
    ``comm``, a collective call: the pair on ``root``, ``None`` on the other ranks
    (``strip_exponent`` as in :func:`contract`)."""
    comm = _comm(comm)
    options = (optimize, memory_limit, sliced_inds)
    return _with_mode(
        comm,
        root,
        strip_exponent,
        arrays,
        True,
        lambda: _value_and_grad(comm, root, eq, arrays, wrt, cotangent, options),
        lambda fit: _scaled_total(comm, root, eq, arrays, (wrt, cotangent), options, fit),
    )


def _value_and_grad(
    comm: Any, root: int, eq: str, arrays: Any, wrt: Any, cotangent: Any, options: tuple[Any, Any, Any]
) -> Any:
    optimize, memory_limit, sliced_inds = options

    def make() -> Any:
        expr, plan, layout = _plan(eq, arrays, optimize, memory_limit, sliced_inds)
        w = wrt_positions(wrt)
        expr.grad_slices(*arrays, start=0, stop=0, wrt=w, cotangent=cotangent)  # checks
        cot = None if cotangent is None else np.asarray(cotangent)
        return plan, layout, expr.n_slices, w, cot, [np.asarray(x) for x in arrays]

    plan, layout, n_slices, w, cot, ops = _broadcast(comm, root, make)
    start, stop = _my_range(comm, n_slices)
    part = grad_range(plan, start, stop, layout is not None, w, cot, *ops)
    total = _combine_to_root(comm, root, part)
    return None if total is None else finish(layout, total)


def hvp(
    eq: str,
    *arrays: Any,
    directions: Any,
    wrt: Any = None,
    cotangent: Any = None,
    optimize: Any = 'greedy',
    memory_limit: Any = None,
    sliced_inds: Any = None,
    comm: Any = None,
    root: int = 0,
) -> Optional[tuple[NDArray[Any], ...]]:
    """Hessian-vector products of ``ContractExpression.hvp`` over the ranks of ``comm``, a
    collective call: each rank sums the products of its slice range, and the sums are
    added along the binomial tree; the tuple of products on ``root``, ``None`` on the
    other ranks."""
    comm = _comm(comm)

    def make() -> Any:
        expr, plan, _ = _plan(eq, arrays, optimize, memory_limit, sliced_inds)
        w, dirs = check_hvp(expr, arrays, directions, wrt, cotangent)
        cot = None if cotangent is None else np.asarray(cotangent)
        return plan, expr.n_slices, w, cot, [np.asarray(x) for x in arrays], dirs

    plan, n_slices, w, cot, ops, dirs = _broadcast(comm, root, make)
    start, stop = _my_range(comm, n_slices)
    part = hvp_range(plan, start, stop, w, cot, len(ops), *ops, *dirs)
    products: Optional[tuple[NDArray[Any], ...]] = _combine_to_root(comm, root, part, add_grads)
    return products
