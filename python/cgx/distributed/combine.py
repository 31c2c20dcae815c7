"""Combining two ranges' results, for every engine: sums added, blocks placed side by
side (a block both share added), gradients added; and the output laid out from the root
of the combination (:func:`finish`). Dask combines sums with :func:`add_pair` and places
blocks on the client; Ray and MPI combine blocks too. Scaled results (``strip_exponent``:
``(mantissa, exponent)`` pairs, the exponent in base 10 as the local API gives it) are
combined by :func:`add_scaled` and :func:`add_scaled_grads` at the larger of the two
exponents, by powers of two, and :func:`finish_scaled` gives each as a plain array where
it fits. This module knows no engine.
"""

from __future__ import annotations

import math
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


_LOG10_2 = math.log10(2.0)


def _binary(exponent10: float) -> int:
    """The binary exponent ``k`` of an exponent ``k * log10(2)`` as the engine gives it
    (exact: ``k`` is an integer far below ``2**52``)."""
    return int(round(exponent10 / _LOG10_2))


def _largest(m: Any) -> float:
    """The engine's magnitude of a mantissa: the largest ``|x|``, or of the parts'
    ``|re|`` and ``|im|`` for complex numbers (0 for an empty or zero one)."""
    if m.size == 0:
        return 0.0
    if np.iscomplexobj(m):
        return float(max(np.abs(m.real).max(), np.abs(m.imag).max()))
    return float(np.abs(m).max())


def _times_pow2(m: Any, k: int) -> Any:
    """``m * 2**k`` by ``ldexp`` on the parts: exact unless it leaves the normal range
    (``2**k`` itself need not be a float)."""
    k = max(-2200, min(2200, int(k)))  # beyond, every float rounds to 0 or overflows anyway
    if np.iscomplexobj(m):
        return np.ldexp(m.real, k) + 1j * np.ldexp(m.imag, k)
    return np.ldexp(m, k)


def add_scaled(a: tuple[Any, float], b: tuple[Any, float]) -> tuple[Any, float]:
    """Two ranges' scaled sums ``(mantissa, exponent)``, added at the larger exponent (the
    other mantissa scaled down by an exact power of two, as the engine combines slices)
    and normalized: the largest magnitude in ``[0.5, 1)``, or all zero with exponent 0."""
    (ma, ea), (mb, eb) = a, b
    if _largest(mb) == 0:
        return a
    if _largest(ma) == 0:
        return b
    ka, kb = _binary(ea), _binary(eb)
    k = max(ka, kb)
    m = _times_pow2(np.asarray(ma), ka - k) + _times_pow2(np.asarray(mb), kb - k)
    big = _largest(m)
    if big == 0 or not math.isfinite(big):
        return m, (k if big != 0 else 0) * _LOG10_2
    shift = math.frexp(big)[1]
    return _times_pow2(m, -shift), (k + shift) * _LOG10_2


def add_scaled_grads(a: Any, b: Any) -> Any:
    """Two ranges' scaled ``(value, grads)``, each pair added by :func:`add_scaled`."""
    return add_scaled(a[0], b[0]), tuple(add_scaled(x, y) for x, y in zip(a[1], b[1]))


def fit_scaled(pair: tuple[Any, float]) -> Any:
    """A plain array for ``(mantissa, exponent)`` when its value fits in float64 (its
    largest magnitude zero or a normal, finite number), else the pair: the local API's
    automatic form."""
    m, e = pair
    big = _largest(m)
    if not math.isfinite(big):
        return pair
    if big == 0:
        return m
    k = _binary(e)
    top = k + math.frexp(big)[1]  # the largest value is in [2**(top-1), 2**top)
    if not -1021 <= top <= 1024:
        return pair
    return _times_pow2(m, k)


def finish_scaled(result: Any, grads: bool, fit: bool) -> Any:
    """The root of a scaled combination as the local API returns it: each pair, or with
    ``fit`` each value that fits as a plain array (:func:`fit_scaled`)."""
    one = fit_scaled if fit else (lambda p: p)
    if grads:
        return one(result[0]), tuple(one(g) for g in result[1])
    return one(result)
