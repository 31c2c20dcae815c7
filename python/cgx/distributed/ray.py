"""Sliced contractions and their gradients on Ray (imported as :mod:`cgx.ray`):
:mod:`cgx.distributed`'s interface, run as Ray tasks instead of Dask futures.

:func:`contract`, :func:`value_and_grad` and :func:`hvp` take what their
:mod:`cgx.distributed` namesakes take, without ``client``: they run on the Ray instance this process is
connected to (``ray.init()`` first: a local one, or ``ray.init(address="auto")`` on a
cluster). The plan, the slice ranges, the work of a range and the combination of two
ranges are the engine-neutral core's (:mod:`cgx.distributed.plan`, ``ranges``,
``blocks``, ``combine``), as on Dask; only the engine differs:

1. the driver plans once and checks the operands, with the local API's exceptions;
2. the operands (and the cotangent) go into Ray's object store once (``ray.put``); every
   task reads them from there (zero-copy on the machine that holds them);
3. one task per slice range (``plan_ranges``, with the cluster's CPUs as threads), the
   ranges' results combined pairwise by tasks (summed, or stacked by output blocks where
   a sliced label is in the output, then laid out by a last task), and only the root is
   fetched; Ctrl-C while waiting for it cancels every task of the run, then raises
   ``KeyboardInterrupt``.

``strip_exponent`` (:func:`contract`, :func:`value_and_grad`) is the local API's, run as
on Dask: each task's range scaled, the ``(mantissa, exponent)`` pairs added pairwise by
tasks at the larger exponent; ``True`` always gives pairs, the default reruns scaled a
plain result that left the finite range.

Invariants: as in :mod:`cgx.distributed`, every task is pure, so Ray may rerun it (a task
whose worker died is retried, ``max_retries``, 3 by default) without changing the answer;
the operands belong to the driver, so they outlive any worker.

>>> import ray, cgx.ray                                    # doctest: +SKIP
>>> ray.init(num_cpus=2)                                   # doctest: +SKIP
>>> cgx.ray.contract("ij,jk->ik", a, b, sliced_inds="j")  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import numpy as np
from numpy.typing import NDArray

from .._expression import ContractExpression
from .._parser import wrt_positions
from .blocks import block_layout
from .combine import add_grads, add_pair, add_scaled, add_scaled_grads, finish, finish_scaled
from .plan import (
    HVP_WORK,
    check_hvp,
    check_scaled,
    plan_key,
    plan_ranges,
    prepare,
    slice_flops,
    strip_exponent_mode,
)
from .ranges import eval_range, grad_range, hvp_range, scaled_range

try:
    import ray as _ray
except ImportError:  # pragma: no cover - exercised only without ray
    _ray = None

__all__ = ["contract", "value_and_grad", "hvp", "submit_contract", "submit_value_and_grad", "submit_hvp"]

_REMOTE: dict[Callable[..., Any], Any] = {}


def _remote(f: Callable[..., Any]) -> Any:
    """``f`` as a Ray remote function (made once per process)."""
    r = _REMOTE.get(f)
    if r is None:
        r = _REMOTE[f] = _ray.remote(f)
    return r


def _require() -> None:
    if _ray is None:
        raise ImportError("cgx.ray needs Ray: pip install ray")
    if not _ray.is_initialized():
        raise ValueError(
            "cgx.ray: Ray is not initialized; call ray.init() first "
            "(ray.init(num_cpus=2) on one machine, ray.init(address='auto') on a cluster node)"
        )


def _threads() -> int:
    return max(1, int(_ray.cluster_resources().get("CPU", 1)))


class _Run:
    """The tasks of one run: ``root``, the reference of its result, and ``tasks``, every
    task it submitted (the ranges and the sums over them), which Ctrl-C cancels."""

    def __init__(self) -> None:
        self.tasks: list[Any] = []
        self.root: Any = None

    def submit(self, fn: Callable[..., Any], *args: Any) -> Any:
        ref = _remote(fn).remote(*args)
        self.tasks.append(ref)
        return ref

    def tree(self, refs: list[Any], add: Callable[[Any, Any], Any]) -> Any:
        """Combines ``refs`` pairwise by ``add`` tasks; the root's reference."""
        while len(refs) > 1:
            paired = [self.submit(add, refs[i], refs[i + 1]) for i in range(0, len(refs) - 1, 2)]
            if len(refs) % 2:
                paired.append(refs[-1])
            refs = paired
        return refs[0]

    def get(self) -> Any:
        """The result; on Ctrl-C (``KeyboardInterrupt`` while waiting) every task of the
        run is cancelled (those not started never run, running ones are interrupted),
        then the interrupt is raised."""
        try:
            # `ray.get` looks at signals once a second (Ray's
            # `get_check_signal_interval_milliseconds`); waiting in slices of a tenth lets
            # Python run its handlers between them.
            while not _ray.wait([self.root], timeout=0.1)[0]:
                pass
            return _ray.get(self.root)
        except KeyboardInterrupt:
            _cancel(self)
            raise


def _cancel(run: Any) -> None:
    """Cancels the run's unfinished tasks, the sums first and the ranges last.

    Ray 2.x's core worker can abort the driver process ("Tried to complete task that was
    not pending"; ray-project/ray#54798 fixed the same kind of race on the retry path) when
    a cancellation crosses a task completing at that moment. Skipping the tasks already
    finished, and cancelling each sum before the ranges it waits on (so no range finishes
    into a sum that is still live), narrows that window; it cannot close it from outside
    Ray.
    """
    tasks = list(reversed(run.tasks))
    try:
        done, _ = _ray.wait(tasks, num_returns=len(tasks), timeout=0)
    except Exception:  # noqa: BLE001 - the cluster is going away: cancel everything below
        done = []
    finished = {ref.hex() for ref in done}
    for ref in tasks:
        if ref.hex() in finished:
            continue
        try:
            _ray.cancel(ref)
        except Exception:  # noqa: BLE001 - a task already finished or gone: nothing to cancel
            pass


def _run(expr: ContractExpression, task: Callable[..., Any], ranges: list[tuple[int, int]], *args: Any) -> _Run:
    run = _Run()
    layout = block_layout(expr)
    parts = [run.submit(task, plan_key(expr), start, stop, layout is not None, *args) for start, stop in ranges]
    root = run.tree(parts, add_pair)
    run.root = root if layout is None else run.submit(finish, layout, root)
    return run


def _scaled_run(
    eq: str,
    arrays: Any,
    grad: Any,
    optimize: Any,
    memory_limit: Any,
    sliced_inds: Any,
    n_tasks: Optional[int],
) -> _Run:
    """The scaled run: value alone, or with ``grad = (wrt, cotangent)`` value and gradients,
    each range's pairs combined by ``add_scaled`` tasks."""
    _require()
    expr = prepare(eq, arrays, optimize, memory_limit, sliced_inds)
    ops, wrt = check_scaled(expr, arrays, grad)
    refs = [_ray.put(x) for x in ops]
    args: tuple[Any, ...]
    if grad is None:
        args, flops, add = (False, None, None), slice_flops(expr), add_scaled
    else:
        cot = None if grad[1] is None else _ray.put(np.asarray(grad[1]))
        args, flops, add = (True, wrt, cot), 3 * slice_flops(expr), add_scaled_grads
    ranges = plan_ranges(expr.n_slices, flops, _threads(), n_tasks)
    run, plan = _Run(), plan_key(expr)
    parts = [run.submit(scaled_range, plan, start, stop, *args, *refs) for start, stop in ranges]
    run.root = run.tree(parts, add)
    return run


def _check_bool(strip_exponent: Any) -> None:
    if not isinstance(strip_exponent, bool):
        raise TypeError(f"strip_exponent of a submit_* form must be True or False, not {strip_exponent!r}")


def submit_contract(
    eq: str,
    *arrays: Any,
    optimize: Any = 'greedy',
    memory_limit: Any = None,
    sliced_inds: Any = None,
    n_tasks: Optional[int] = None,
    strip_exponent: bool = False,
) -> Any:
    """Like :func:`contract`, but returns the Ray object reference of the result at once;
    with ``strip_exponent=True``, of the ``(mantissa, exponent)`` pair."""
    _check_bool(strip_exponent)
    if strip_exponent:
        return _scaled_run(eq, arrays, None, optimize, memory_limit, sliced_inds, n_tasks).root
    return _contract_run(eq, arrays, optimize, memory_limit, sliced_inds, n_tasks).root


def _contract_run(
    eq: str,
    arrays: Any,
    optimize: Any,
    memory_limit: Any,
    sliced_inds: Any,
    n_tasks: Optional[int],
) -> _Run:
    _require()
    expr = prepare(eq, arrays, optimize, memory_limit, sliced_inds)
    expr.eval_slices(*arrays, start=0, stop=0)  # checks the operands, with the local API's exceptions
    refs = [_ray.put(np.asarray(x)) for x in arrays]
    ranges = plan_ranges(expr.n_slices, slice_flops(expr), _threads(), n_tasks)
    return _run(expr, eval_range, ranges, *refs)


def submit_value_and_grad(
    eq: str,
    *arrays: Any,
    wrt: Any = None,
    cotangent: Any = None,
    optimize: Any = 'greedy',
    memory_limit: Any = None,
    sliced_inds: Any = None,
    n_tasks: Optional[int] = None,
    strip_exponent: bool = False,
) -> Any:
    """Like :func:`value_and_grad`, but returns the Ray object reference of ``(value, grads)``
    (with ``strip_exponent=True``, each a ``(mantissa, exponent)`` pair)."""
    _check_bool(strip_exponent)
    if strip_exponent:
        return _scaled_run(eq, arrays, (wrt, cotangent), optimize, memory_limit, sliced_inds, n_tasks).root
    return _grad_run(eq, arrays, wrt, cotangent, optimize, memory_limit, sliced_inds, n_tasks).root


def _grad_run(
    eq: str,
    arrays: Any,
    wrt: Any,
    cotangent: Any,
    optimize: Any,
    memory_limit: Any,
    sliced_inds: Any,
    n_tasks: Optional[int],
) -> _Run:
    _require()
    expr = prepare(eq, arrays, optimize, memory_limit, sliced_inds)
    wrt = wrt_positions(wrt)
    expr.grad_slices(*arrays, start=0, stop=0, wrt=wrt, cotangent=cotangent)  # checks, as above
    refs = [_ray.put(np.asarray(x)) for x in arrays]
    cot = None if cotangent is None else _ray.put(np.asarray(cotangent))
    ranges = plan_ranges(expr.n_slices, 3 * slice_flops(expr), _threads(), n_tasks)
    return _run(expr, grad_range, ranges, wrt, cot, *refs)


def submit_hvp(
    eq: str,
    *arrays: Any,
    directions: Any,
    wrt: Any = None,
    cotangent: Any = None,
    optimize: Any = 'greedy',
    memory_limit: Any = None,
    sliced_inds: Any = None,
    n_tasks: Optional[int] = None,
) -> Any:
    """Like :func:`hvp`, but returns the Ray object reference of the products at once."""
    return _hvp_run(eq, arrays, directions, wrt, cotangent, optimize, memory_limit, sliced_inds, n_tasks).root


def _hvp_run(
    eq: str,
    arrays: Any,
    directions: Any,
    wrt: Any,
    cotangent: Any,
    optimize: Any,
    memory_limit: Any,
    sliced_inds: Any,
    n_tasks: Optional[int],
) -> _Run:
    _require()
    expr = prepare(eq, arrays, optimize, memory_limit, sliced_inds)
    wrt, directions = check_hvp(expr, arrays, directions, wrt, cotangent)
    refs = [_ray.put(np.asarray(x)) for x in list(arrays) + directions]
    cot = None if cotangent is None else _ray.put(np.asarray(cotangent))
    ranges = plan_ranges(expr.n_slices, HVP_WORK * slice_flops(expr), _threads(), n_tasks)
    plan, n = plan_key(expr), len(arrays)
    run = _Run()
    parts = [run.submit(hvp_range, plan, start, stop, wrt, cot, n, *refs) for start, stop in ranges]
    run.root = run.tree(parts, add_grads)
    return run


def _writable(x: Any) -> NDArray[Any]:
    """Arrays fetched from the object store are read-only views of it: a private copy."""
    return x if x.flags.writeable else np.array(x)


def contract(
    eq: str,
    *arrays: Any,
    optimize: Any = 'greedy',
    memory_limit: Any = None,
    sliced_inds: Any = None,
    n_tasks: Optional[int] = None,
    strip_exponent: Optional[bool] = None,
) -> Any:
    """:func:`cgx.contract` on Ray, as :func:`cgx.distributed.contract` on Dask; a numpy array
    (``strip_exponent`` as there)."""

    def plain() -> Any:
        return _writable(_contract_run(eq, arrays, optimize, memory_limit, sliced_inds, n_tasks).get())

    def scaled(fit: bool) -> Any:
        m, e = _scaled_run(eq, arrays, None, optimize, memory_limit, sliced_inds, n_tasks).get()
        return finish_scaled((_writable(m), e), False, fit)

    return strip_exponent_mode(strip_exponent, arrays, False, plain, scaled)


def value_and_grad(
    eq: str,
    *arrays: Any,
    wrt: Any = None,
    cotangent: Any = None,
    optimize: Any = 'greedy',
    memory_limit: Any = None,
    sliced_inds: Any = None,
    n_tasks: Optional[int] = None,
    strip_exponent: Optional[bool] = None,
) -> Any:
    """``(value, grads)`` on Ray, as :func:`cgx.distributed.value_and_grad` on Dask
    (``strip_exponent`` as there)."""

    def plain() -> Any:
        value, grads = _grad_run(eq, arrays, wrt, cotangent, optimize, memory_limit, sliced_inds, n_tasks).get()
        return _writable(value), tuple(_writable(g) for g in grads)

    def scaled(fit: bool) -> Any:
        run = _scaled_run(eq, arrays, (wrt, cotangent), optimize, memory_limit, sliced_inds, n_tasks)
        (m, e), grads = run.get()
        return finish_scaled(((_writable(m), e), tuple((_writable(g), x) for g, x in grads)), True, fit)

    return strip_exponent_mode(strip_exponent, arrays, True, plain, scaled)


def hvp(
    eq: str,
    *arrays: Any,
    directions: Any,
    wrt: Any = None,
    cotangent: Any = None,
    optimize: Any = 'greedy',
    memory_limit: Any = None,
    sliced_inds: Any = None,
    n_tasks: Optional[int] = None,
) -> tuple[NDArray[Any], ...]:
    """Hessian-vector products on Ray, as :func:`cgx.distributed.hvp` on Dask; a tuple of
    numpy arrays."""
    run = _hvp_run(eq, arrays, directions, wrt, cotangent, optimize, memory_limit, sliced_inds, n_tasks)
    return tuple(_writable(h) for h in run.get())
