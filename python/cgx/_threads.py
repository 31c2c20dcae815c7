"""Threads of the engine's contractions: :func:`set_num_threads` and
:func:`get_num_threads` (process-wide), :func:`threads` (a context for the calls of one
Python thread) and the ``threads=`` keyword of :func:`cgx.contract` and of
:class:`cgx.ContractExpression`'s methods, which is that context around one call.

The default is every core the process may use: the engine weighs each contraction's
estimated cost before using a second thread (independent steps at once, large matrix
products and copies split), and runs one that would not gain on the calling thread, so a
small contraction costs what it costs on one thread. ``threads=1`` (or
``set_num_threads(1)``) runs everything on the calling thread.

On more than one thread, a forward call whose path is a chain of steps too small to split
(an MPS inner product, one operand at a time) contracts it from both ends and joins the two
halves in the middle, when the estimate says that pays: the same multiply-adds within
1/32, no intermediate larger than the path's largest. Gradients and sliced contractions
keep the path as it is.

Results: two threads give the one-thread result bit for bit wherever the kernels keep the
order of their sums, which every kernel does but one (a large matrix-vector product, whose
sum the matrix library splits between the threads), and the path is kept; a chain
contracted from both ends, or such a product, agrees to rounding.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Optional

from . import _core

__all__ = ["threads", "set_num_threads", "get_num_threads"]


def set_num_threads(n: Optional[int]) -> None:
    """Sets the threads of every later contraction that names none: ``n`` at least 1, or
    ``None`` for the default (every core the process may use).

    >>> import cgx
    >>> cgx.set_num_threads(1)
    >>> cgx.get_num_threads()
    1
    >>> cgx.set_num_threads(None)
    """
    _core.set_num_threads(_count(n))


def get_num_threads() -> int:
    """The threads a contraction started now from this Python thread runs on (inside a
    :func:`threads` context, its count)."""
    return _core.get_num_threads()


@contextmanager
def threads(n: Optional[int]) -> Iterator[None]:
    """A context in which the contractions this Python thread starts (values, gradients,
    Hessian-vector products, slices) run on ``n`` threads (``None``: as outside). Other
    Python threads keep their own setting; contexts nest.

    >>> import numpy as np, cgx
    >>> a = np.ones((300, 300))
    >>> with cgx.threads(2):
    ...     float(cgx.contract("ij,jk->", a, a))
    27000000.0
    """
    if n is None:
        yield
        return
    previous = _core._swap_call_threads(_count(n))
    try:
        yield
    finally:
        _core._swap_call_threads(previous)


def _count(n: Optional[int]) -> Optional[int]:
    """``n`` checked to be ``None`` or an int of at least 1 (``bool`` is not a count)."""
    if n is None:
        return None
    if isinstance(n, bool) or not hasattr(n, "__index__"):
        raise TypeError(f"the number of threads must be an int, not {type(n).__name__}")
    value = int(n.__index__())
    if value < 1:
        raise ValueError(f"the number of threads must be at least 1, not {value}")
    return value
