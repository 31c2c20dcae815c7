"""Combining two ranges' results, for every engine: sums added, blocks placed side by
side (a block both share added), gradients added; and the output laid out from the root
of the combination (:func:`finish`). Dask combines sums with :func:`add_pair` and places
blocks on the client; Ray and MPI combine blocks too. This module knows no engine.
"""

from __future__ import annotations

import operator

from typing import Any, Optional

import numpy as np

from .blocks import Blocks, Layout

def combine(a: Any, b: Any) -> Any:
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


def add_pair(a: Any, b: Any) -> Any:
    if isinstance(a, tuple):
        return combine(a[0], b[0]), tuple(x + y for x, y in zip(a[1], b[1]))
    return combine(a, b)


def add_grads(a: Any, b: Any) -> tuple[Any, ...]:
    """Two ranges' gradients, added."""
    return tuple(x + y for x, y in zip(a, b))


def finish(layout: Optional[Layout], result: Any) -> Any:
    """The output from the root of the combination: blocks laid out, gradients as they are."""
    if isinstance(result, tuple):
        return finish(layout, result[0]), result[1]
    if layout is None:
        return result
    n_blocks, sizes, perm = layout
    if result.first != 0 or len(result.rows) != n_blocks:  # pragma: no cover - an internal invariant
        raise RuntimeError(f"cgx.distributed: blocks {result.first}..{result.first + len(result.rows)} of {n_blocks}")
    return np.ascontiguousarray(result.rows.reshape(sizes).transpose(perm))
