"""Output blocks: where a sliced label is in the output, a range of slices yields the output
at the values of the sliced output labels it touches (:class:`Blocks`), never an
output-sized array. How blocks are numbered and laid out as the output
(:func:`block_layout`), placed into it (:func:`place`), and how a cotangent is cut into
the blocks a range reads (:func:`cotangent_blocks`). This module knows no engine.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
from numpy.typing import NDArray

from .._expression import ContractExpression

Layout = tuple[int, tuple[int, ...], tuple[int, ...]]
"""How stacked blocks become the output (:func:`block_layout`): the number of blocks,
the sizes the stack is reshaped to, the permutation to the output's order."""

class Blocks:
    """Output blocks ``first..first + len(rows)`` of a slice range, stacked along axis 0
    (``ContractExpression.eval_blocks``)."""

    __slots__ = ("first", "rows")

    def __init__(self, first: int, rows: NDArray[Any]) -> None:
        self.first, self.rows = int(first), rows

    def __reduce__(self) -> tuple[type[Blocks], tuple[int, NDArray[Any]]]:
        return (Blocks, (self.first, self.rows))


def block_layout(expr: ContractExpression) -> Optional[Layout]:
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


def _blocks_in(x: Any, layout: Layout, k: int, first: int, n: int) -> list[NDArray[Any]]:
    """Views of blocks ``first..first + n`` of ``x``, an array of the output's full shape
    whose first ``k`` labels in the layout's order are the sliced ones."""
    _, sizes, perm = layout
    stack = x.transpose(np.argsort(perm))  # a view of shape ``sizes``
    return [stack[np.unravel_index(b, sizes[:k]) + (Ellipsis,)] for b in range(first, first + n)]


def range_blocks(layout: Layout, n_slices: int, start: int, stop: int) -> tuple[int, int]:
    """``(first, n)``: the output blocks the slices ``start..stop`` touch (the output's
    sliced labels come first in the slice order, so a block is a run of slices)."""
    if start >= stop:
        return 0, 0
    per_block = n_slices // layout[0]
    return start // per_block, (stop - 1) // per_block - start // per_block + 1


def place(out: NDArray[Any], layout: Layout, blocks: Any) -> None:
    """Adds ``blocks`` (a range's output blocks) at their places in ``out``, the output's
    full shape: each block is written through a view, so nothing output-sized is built."""
    k = len(layout[1]) - (blocks.rows.ndim - 1)
    for view, row in zip(_blocks_in(out, layout, k, blocks.first, len(blocks.rows)), blocks.rows):
        view += row


def cotangent_blocks(cotangent: Any, layout: Layout, k: int, n_slices: int, start: int, stop: int) -> Blocks:
    """The blocks of ``cotangent`` (``k`` sliced output labels) that the slices
    ``start..stop`` read, copied and stacked as ``eval_blocks`` stacks the value."""
    first, n = range_blocks(layout, n_slices, start, stop)
    rows = np.empty((n,) + tuple(layout[1][k:]), dtype=cotangent.dtype)
    for i, view in enumerate(_blocks_in(cotangent, layout, k, first, n)):
        rows[i] = view
    return Blocks(first, rows)
