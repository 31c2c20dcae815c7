"""The arguments of ``contract``, ``contract_path`` and ``contract_expression`` read as
opt_einsum takes them, before anything reaches the engine: numpy's and opt_einsum's
interleaved form written as a subscripts string (:func:`subscripts`, with
:func:`get_symbol`'s labels), shapes and sizes, ``memory_limit``, ``sliced_inds``, ``wrt``
and ``constants``. A bad argument raises the ``ValueError`` or ``TypeError`` the public
functions document.

The subscripts themselves are parsed once, by the einsum crate (``_core.Expression``);
this module only writes them, and reads nothing of the engine.
"""

from __future__ import annotations

import decimal
import math
import numbers
import operator
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, cast


# Sizes, positions and slice indices must fit the engine's 64-bit unsigned integers.
U64 = 2**64


def count(x: Any, what: str) -> int:
    """``x`` as a non-negative int below 2^64, else ``ValueError`` (never the
    ``OverflowError`` the extension would raise for a negative number)."""
    try:
        n = int(x)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be an integer, not {x!r}") from None
    if n != x or not 0 <= n < U64:
        raise ValueError(f"{what} must be a non-negative integer below 2^64, not {x!r}")
    return n


def index(x: Any) -> int | None:
    """``x`` as an int if it is an integer in ``0..2^64``, else ``None``."""
    try:
        n = operator.index(x)
    except TypeError:
        return None
    return n if 0 <= n < U64 else None


def dims(shape: Iterable[Any], what: str) -> tuple[int, ...]:
    return tuple(count(d, f"a size of {what} (shape {tuple(shape)!r})") for d in shape)


def shape_of(x: Any, is_shape: bool) -> tuple[int, ...]:
    if is_shape:
        return dims(x, "a shape")
    shape = getattr(x, "shape", None)
    if shape is not None:
        return tuple(shape)
    if isinstance(x, tuple):
        return dims(x, "a shape")
    import numpy as np

    return np.shape(x)


def memory_limit_of(memory_limit: Any, shapes: Iterable[Sequence[int]]) -> float | None:
    """opt_einsum's ``memory_limit``: ``None`` or ``-1`` (no limit), a number of elements or
    ``'max_input'``. A bool, NaN or another negative number is an error."""
    if memory_limit is None:
        return None
    if isinstance(memory_limit, str):
        if memory_limit == "max_input":
            return max((float(prod(s)) for s in shapes), default=1.0)
        raise ValueError(f"memory_limit must be None, -1, a number of elements or 'max_input', not {memory_limit!r}")
    if isinstance(memory_limit, bool) or not isinstance(memory_limit, (numbers.Real, decimal.Decimal)):
        raise TypeError(
            f"memory_limit must be None, -1, a number of elements or 'max_input', not {type(memory_limit).__name__} {memory_limit!r}"
        )
    limit = float(memory_limit)
    if math.isnan(limit):
        raise ValueError("memory_limit must be a number of elements, not NaN")
    if limit == -1:  # opt_einsum's "no limit"
        return None
    if limit < 0:
        raise ValueError(f"memory_limit must not be negative (but -1, no limit), got {memory_limit!r}")
    return limit


def sliced_labels(sliced_inds: Iterable[Any] | None) -> list[str] | None:
    """cotengra's ``sliced_inds`` (labels, one character each) as a list, or ``None``."""
    if sliced_inds is None:
        return None
    labels = list(sliced_inds)
    for label in labels:
        if not isinstance(label, str) or len(label) != 1:
            raise ValueError(f"sliced_inds must be one-character labels, got {label!r}")
    return labels


def wrt_positions(wrt: Any, n: int | None = None) -> list[int] | None:
    """``wrt`` as a list of operand positions (``None``: all); a negative or huge position
    is a ``ValueError`` with the engine's message for a position out of range."""
    if wrt is None:
        return None
    try:
        wrt = [operator.index(wrt)]
    except TypeError:
        wrt = list(wrt)
    positions = []
    for w in wrt:
        p = index(w)
        if p is None:
            there = "" if n is None else f": there are {n}"
            raise ValueError(f"shape error: cannot differentiate with respect to operand {w!r}{there}")
        positions.append(p)
    return positions


def constant_positions(constants: Iterable[Any] | None, n: int) -> list[int]:
    """``constants`` as sorted distinct operand positions below ``n``, or a ``ValueError``."""
    if constants is None:
        return []
    positions = []
    for c in constants:
        p = index(c)
        if p is None or p >= n:
            raise ValueError(f"constants: {c!r} is not the position of one of the {n} operands")
        positions.append(p)
    return sorted(set(positions))


def get_symbol(i: int) -> str:
    """The ``i``-th label character, as ``opt_einsum.get_symbol`` gives it: ``a``-``z``,
    ``A``-``Z``, then ``chr(i + 140)`` below 55296 and ``chr(i + 2048)`` from there (which
    skips most surrogates; like opt_einsum's, ``i`` in 55156..55295 gives one).

    >>> import cgx
    >>> cgx.get_symbol(0), cgx.get_symbol(51), cgx.get_symbol(52)
    ('a', 'Z', 'À')
    """
    i = operator.index(i)
    if i < 0:
        raise ValueError(f"get_symbol takes a non-negative integer, not {i}")
    if i < 52:
        return _LETTERS[i]
    return chr(i + 140) if i < 55296 else chr(i + 2048)


_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _symbols() -> Iterator[str]:
    """Label characters in ``get_symbol`` order, without those that no string passed to
    the engine can hold (surrogates). (Every other one is a label to the subscript parser,
    Unicode spaces such as U+1680 included: it skips ASCII whitespace only.)"""
    i = 0
    while True:
        c = get_symbol(i)
        if not 0xD800 <= ord(c) <= 0xDFFF:
            yield c
        i += 1


def subscripts(first: Any, rest: tuple[Any, ...]) -> tuple[str, tuple[Any, ...]]:
    """``(eq, operands)`` from the arguments: ``(eq, *operands)`` as given, or numpy's and
    opt_einsum's interleaved form ``(op0, sublist0, op1, sublist1, ..., [output])``.

    Sublists hold ``...`` (numpy's ellipsis) and labels of any hashable, sortable type
    (ints, as numpy allows, or strings); the labels, in sorted order, become the
    characters of :func:`get_symbol`. Without an output sublist the output is numpy's
    implicit one: the ellipsis' axes, then the labels used once, in sorted order."""
    if isinstance(first, str):
        return first, rest
    args = (first, *rest)
    if len(args) == 1:
        raise TypeError(
            "contract takes the subscripts string first, or operands interleaved with their labels "
            f"(op0, [labels], op1, [labels], ..., [output]); got a single {type(first).__name__} and no labels"
        )
    output = args[-1] if len(args) % 2 else None
    pairs = args[: len(args) - len(args) % 2]
    operands, sublists = pairs[0::2], list(pairs[1::2])
    where = [f"operand {k}'s labels" for k in range(len(sublists))] + ["the output labels"]
    lists = sublists + ([] if output is None else [output])
    for k, sub in enumerate(lists):
        array = hasattr(sub, "shape") and (getattr(sub, "ndim", 1) != 1 or cast(Any, getattr(sub, "dtype", None)).kind not in "iu")
        if not is_sequence(sub) or array:
            raise TypeError(
                f"interleaved form: {where[k]} must be a list of labels (ints or ...), not {type(sub).__name__}; "
                "the first argument is the subscripts string, or an operand followed by its labels"
            )
    labels = set()
    for k, sub in enumerate(sublists):
        for x in sub:
            if x is Ellipsis:
                continue
            try:
                labels.add(x)
            except TypeError:
                raise TypeError(f"interleaved form: {where[k]} hold {x!r}, which is not a label (an int or ...)") from None
    try:
        order = sorted(labels)
    except TypeError:
        raise TypeError(f"interleaved form: the labels must be ints or ... (or all sortable), got {labels!r}") from None
    symbol = dict(zip(order, _symbols()))

    def term(sub: Iterable[Any]) -> str:
        return "".join("..." if x is Ellipsis else symbol[x] for x in sub)

    if output is None:
        counts: dict[Any, int] = {}
        for sub in sublists:
            for x in sub:
                if x is not Ellipsis:
                    counts[x] = counts.get(x, 0) + 1
        dots = "..." if any(x is Ellipsis for sub in sublists for x in sub) else ""
        out = dots + "".join(symbol[x] for x in order if counts[x] == 1)
    else:
        for x in output:
            if x is not Ellipsis and x not in symbol:
                raise ValueError(f"interleaved form: output label {x!r} appears in no operand's labels")
        out = term(output)
    return ",".join(term(sub) for sub in sublists) + "->" + out, operands


def prod(shape: Iterable[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def float_prod(values: Iterable[Any]) -> float:
    n = 1.0
    for d in values:
        n *= float(d)
    return n


def is_sequence(x: Any) -> bool:
    """A list, tuple, numpy array or other sequence, but not a string."""
    if isinstance(x, (str, bytes)):
        return False
    return isinstance(x, Sequence) or (hasattr(x, "__array__") and getattr(x, "ndim", 0) >= 1)
