"""opt_einsum's ``shared_intermediates``: contractions that reuse each other's steps.

Inside ``with shared_intermediates() as cache:``, :func:`cgx.contract` and calls of a
:class:`cgx.ContractExpression` run their pairwise path one step at a time, and each step's
result is kept in ``cache`` under a key made of the step (its subscripts, renamed in order
of first appearance) and the identities (``id``) of its operands. A later step of the same
form over the same arrays (in either order) takes the kept result instead of contracting
again, so contractions that share subexpressions over the same arrays compute them once.
As in opt_einsum, arrays are told apart by identity, not contents, and a step is the same
when its result has the same axes in the same order.

Invariants:
- the cache holds every array a key names (the operands under ``("tensor", id)``, the
  results as values), so no key's ``id`` can be reused by another array while the cache
  lives;
- a step's key does not depend on the order of its two operands (they are ordered by
  ``id`` before the subscripts are renamed), but does on the order of its result's axes;
- what a contraction returns is a copy of the kept result, so changing it in place leaves
  the cache as it was;
- contexts nest (the innermost cache is used) and are per thread.

A sliced contraction (``memory_limit`` or ``sliced_inds``) runs as without sharing.
Complexity: one dictionary lookup per step, besides the steps computed.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Optional

# How many contexts are open, over all threads: when none is, `contract` pays one test.
ACTIVE = 0
_LOCK = threading.Lock()
# The open caches of each thread, innermost last.
_STACKS: dict[int, list[dict[Any, Any]]] = {}


@contextlib.contextmanager
def shared_intermediates(cache: Optional[dict[Any, Any]] = None) -> Iterator[dict[Any, Any]]:
    """Within this context, contractions reuse the intermediates of earlier ones
    (opt_einsum's ``shared_intermediates``); yields the cache, a ``dict`` (``cache`` if given,
    which may come from an earlier context, else a new one).

    >>> import numpy as np, cgx
    >>> a, b, c, d = (np.random.rand(3, 3) for _ in range(4))
    >>> with cgx.shared_intermediates() as cache:
    ...     x = cgx.contract("ab,bc,cd->ad", a, b, c, optimize=[(0, 1), (0, 1)])
    ...     steps = sum(1 for k in cache if k[0] == "einsum")
    ...     y = cgx.contract("ab,bc,cd->ad", a, b, d, optimize=[(0, 1), (0, 1)])
    >>> steps, sum(1 for k in cache if k[0] == "einsum")  # a·b was computed once
    (2, 3)
    >>> bool(np.allclose(y, a @ b @ d))
    True
    """
    global ACTIVE
    if cache is None:
        cache = {}
    me = threading.get_ident()
    with _LOCK:
        _STACKS.setdefault(me, []).append(cache)
        ACTIVE += 1
    try:
        yield cache
    finally:
        with _LOCK:
            stack = _STACKS[me]
            stack.pop()
            if not stack:
                del _STACKS[me]
            ACTIVE -= 1


def current() -> Optional[dict[Any, Any]]:
    """The innermost open cache of this thread, or ``None``."""
    stack = _STACKS.get(threading.get_ident())
    return stack[-1] if stack else None


def _symbol(k: int) -> str:
    """The ``k``-th label of a renamed step: opt_einsum's ``get_symbol`` order."""
    letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return letters[k] if k < 52 else chr(k + 140)


def step_key(terms: Sequence[str], result: str, args: Sequence[Any]) -> tuple[tuple[Any, ...], str, list[Any]]:
    """The cache key of one step (``terms`` the operands' labels, ``result`` the result's),
    the step's subscripts as renamed, and its operands in the order the key lists them."""
    order = sorted(range(len(args)), key=lambda k: id(args[k]))
    terms = [terms[k] for k in order]
    args = [args[k] for k in order]
    names: dict[str, str] = {}
    for c in "".join(terms) + result:
        if c not in names:
            names[c] = _symbol(len(names))
    spec = ",".join("".join(names[c] for c in t) for t in terms) + "->" + "".join(names[c] for c in result)
    return ("einsum", spec, *(id(a) for a in args)), spec, args


def run(cache: dict[Any, Any], expr: Any, operands: Sequence[Any], contract_step: Callable[[str, tuple[Any, ...]], Any]) -> Any:
    """``expr`` (an unsliced ``_core.Expression``) contracted over ``operands`` step by step
    along its plan, each step's result taken from ``cache`` or computed by
    ``contract_step(spec, args)`` and kept; returns a copy of the result."""
    import numpy as np

    _, _, _, steps = expr._plan()
    ops = list(operands)
    for x in ops:
        cache.setdefault(("tensor", id(x)), x)
    for (i, j), (a, b, r), _, _ in steps:
        terms, args = ([a], [ops[i]]) if i == j else ([a, b], [ops[i], ops[j]])
        key, spec, args = step_key(terms, r, args)
        result = cache.get(key)
        if result is None:
            result = cache[key] = contract_step(spec, tuple(args))
        for p in sorted({i, j}, reverse=True):
            del ops[p]
        ops.append(result)
    if not steps:  # one operand already in the output's order: nothing to share
        return contract_step(expr.eq, tuple(ops))
    return np.array(ops[0], copy=True)
