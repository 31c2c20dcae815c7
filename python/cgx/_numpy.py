"""numpy's semantics where the engine has none: dtypes other than its own, and numpy's
keywords.

Dtypes: the engine computes in float64 or complex128, and results come in numpy's result
dtype of the operands. Floats and complex numbers of at most double precision are
contracted by the engine and the result cast (:func:`contract_typed`); integers, bools,
objects and extended precision are contracted by numpy along the engine's plan, step by
step and slice by slice, exactly in that dtype (:func:`along`: the fallback engine).

Keywords: ``order``, ``casting`` and ``backend`` checked as ``numpy.einsum`` checks them
(:func:`check_keywords`), and a result laid out or put into ``out`` (:func:`finish`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional

from . import _core
from ._parser import prod

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray


# numpy's keywords. `contract` takes them as `**kwargs`, so that a call without them, the
# common case, pays one test for all of them.

_CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe")


_ORDERS = ("K", "A", "C", "F")


_BACKENDS = ("auto", "numpy")


NUMPY_KWARGS = ("out", "dtype", "order", "casting", "use_blas", "backend")


def check_keywords(order: Any, casting: Any, backend: Any) -> None:
    """``ValueError`` for an ``order``, ``casting`` or ``backend`` numpy or cgx does not know."""
    if casting not in _CASTINGS:
        raise ValueError(f"casting must be one of {', '.join(map(repr, _CASTINGS))} (got {casting!r})")
    if order not in _ORDERS:
        raise ValueError(f"order must be one of 'C', 'F', 'A', or 'K' (got {order!r})")
    if backend not in _BACKENDS:
        raise ValueError(f"backend={backend!r}: numpy's keywords apply to numpy arrays ('auto' or 'numpy')")


def finish(result: Any, operands: Sequence[Any], out: Any, order: str, casting: Any) -> Any:
    """``result`` in the layout ``order`` asks for, or copied into ``out`` under ``casting``."""
    import numpy as np

    fortran = order == "F" or (
        order == "A" and operands and all(isinstance(x, np.ndarray) and x.flags.f_contiguous and not x.flags.c_contiguous for x in operands)
    )
    if fortran or order == "C":
        result = np.asarray(result, order="F" if fortran else "C")
    if out is None:
        return result
    if not isinstance(out, np.ndarray):
        raise TypeError("keyword parameter out must be an array for einsum")
    if out.shape != result.shape:
        raise ValueError(f"out has shape {list(out.shape)} but the result has shape {list(result.shape)}")
    np.copyto(out, result, casting=casting)
    return out


# Dtypes. The engine computes in float64 or complex128; results come in numpy's result
# dtype of the operands. Floats and complex numbers of at most double precision are
# contracted by the engine and the result cast; integers, bools, objects and extended
# precision are contracted by numpy along the engine's path, exactly in that dtype.


# numpy's type numbers of float64 and complex128 (`NPY_DOUBLE` and `NPY_CDOUBLE`, 12 and
# 15 in numpy's C API), whatever the byte order: the engine's own dtypes, whose result
# needs no cast.
_ENGINE_TYPE_NUMS = (12, 15)


def engine_dtypes(operands: Iterable[Any]) -> bool:
    """Whether every operand has dtype float64 or complex128: then the engine's result
    is already in the operands' result dtype. The common case, told apart from the others
    without ``np.result_type`` (which would double a small contraction's time)."""
    try:
        for x in operands:
            if x.dtype.num not in _ENGINE_TYPE_NUMS:
                return False
    except AttributeError:  # a Python number or list, or a dtype-like without a number
        return False
    return True


def dtype_of(x: Any) -> np.dtype[Any]:
    import numpy as np

    dtype = getattr(x, "dtype", None)
    if isinstance(dtype, np.dtype):
        return dtype
    return np.asarray(x).dtype


def result_dtype(operands: Sequence[Any]) -> Optional[np.dtype[Any]]:
    """numpy's result dtype of ``operands`` (``np.result_type`` of their dtypes), or
    ``None`` if they have none (strings and numbers: the engine says which operand)."""
    import numpy as np

    try:
        return np.result_type(*[dtype_of(x) for x in operands]) if operands else np.dtype(np.float64)
    except TypeError:
        return None


def by_numpy(dtype: Optional[np.dtype[Any]]) -> bool:
    """Whether operands of result dtype ``dtype`` are contracted by numpy, not the engine:
    integers, bools, objects, and floats or complex numbers wider than double precision.
    (Other kinds, such as strings, go to the engine, which rejects them.)"""
    if dtype is None:
        return False
    return dtype.kind in "biuO" or (dtype.kind == "f" and dtype.itemsize > 8) or (dtype.kind == "c" and dtype.itemsize > 16)


def cast_result(out: NDArray[Any], dtype: np.dtype[Any]) -> NDArray[Any]:
    """The engine's float64 or complex128 result ``out`` in the result dtype ``dtype``."""
    return out if out.dtype == dtype else out.astype(dtype)


def contract_typed(
    eq: str, operands: tuple[Any, ...], path: _core.PathArg | None = None, limit: float | None = None, sliced: list[str] | None = None
) -> NDArray[Any]:
    """``contract`` after its arguments are parsed: the engine or numpy, by dtype."""
    if engine_dtypes(operands):
        return _core.contract(eq, operands, path, limit, sliced)
    return contract_cast(eq, operands, path, limit, sliced)


def contract_cast(
    eq: str, operands: tuple[Any, ...], path: _core.PathArg | None = None, limit: float | None = None, sliced: list[str] | None = None
) -> NDArray[Any]:
    """``contract_typed`` for operands that are not all float64 or complex128: the
    engine with a cast of its result, or numpy along the engine's path."""
    dtype = result_dtype(operands)
    if not by_numpy(dtype):
        out = _core.contract(eq, operands, path, limit, sliced)
        return cast_result(out, dtype) if dtype is not None and dtype.kind in "fc" else out
    import numpy as np

    assert dtype is not None  # by_numpy(None) is False
    arrays = [np.asarray(x) for x in operands]
    expr = _core.Expression(eq, [list(a.shape) for a in arrays], path, limit, sliced)
    return along(expr, arrays, dtype, limit)


def along(expr: _core.Expression, arrays: Sequence[Any], dtype: np.dtype[Any], limit: float | None = None) -> NDArray[Any]:
    """``expr`` contracted by numpy in ``dtype``, step by step along its pairwise path (and
    slice by slice if it is sliced), each step a two-operand ``numpy.einsum``: exact for
    integers (wrapping on overflow as numpy does) and bools. All operands are cast to
    ``dtype`` first, as ``numpy.einsum`` does."""
    import numpy as np

    inputs, output, sizes, steps = expr._plan()
    if limit is not None and float(prod(expr.output_shape)) > limit:
        raise MemoryError(f"`{expr.eq}`: the output has {prod(expr.output_shape)} elements, more than memory_limit={limit:.0f}")
    arrays = [np.asarray(a, dtype=dtype) for a in arrays]
    try:
        return _sliced_along(expr, inputs, output, sizes, steps, arrays, dtype)
    except TypeError as e:  # objects without + or *
        raise TypeError(f"`{expr.eq}`: operands of dtype {dtype} could not be contracted: {e}") from e


def _sliced_along(
    expr: _core.Expression,
    inputs: list[str],
    output: str,
    sizes: Mapping[str, int],
    steps: list[_core.Step],
    arrays: list[NDArray[Any]],
    dtype: np.dtype[Any],
) -> NDArray[Any]:
    """The plan run whole, or slice by slice (each slice's result summed into, or placed
    in, the output)."""
    import itertools

    import numpy as np

    sliced = list(expr.sliced_inds or ())
    if not sliced:
        return _steps(inputs, output, steps, arrays)
    out = np.zeros(tuple(expr.output_shape), dtype=dtype)
    for values in itertools.product(*[range(sizes[c]) for c in sliced]):
        at = dict(zip(sliced, values))
        ops = [a[tuple(at.get(c, slice(None)) for c in t)] for a, t in zip(arrays, inputs)]
        part = _steps(
            [_drop(t, at) for t in inputs], _drop(output, at), [(p, tuple(_drop(t, at) for t in ts), *rest) for p, ts, *rest in steps], ops
        )
        out[tuple(at.get(c, slice(None)) for c in output)] += part
    return out


def _drop(labels: str, at: Mapping[str, int]) -> str:
    return "".join(c for c in labels if c not in at)


def _steps(inputs: Sequence[str], output: str, steps: Sequence[tuple[Any, ...]], ops: Iterable[Any]) -> NDArray[Any]:
    """The engine's plan (``steps`` as ``Expression._plan`` gives them) run by numpy."""
    import numpy as np

    ops = list(ops)
    if not steps:  # one operand, already in the output's order
        return np.array(ops[0], copy=True)
    for (i, j), (a, b, r), _, _ in steps:
        names = {c: chr(ord("a") + k) if k < 26 else chr(ord("A") + k - 26) for k, c in enumerate(dict.fromkeys(a + b + r))}
        if len(names) > 52:
            raise ValueError(f"a step with {len(names)} labels: numpy contracts at most 52 at once")

        def term(t: str) -> str:
            return "".join(names[c] for c in t)

        if i == j:
            args, terms = [ops[i]], [term(a)]
        else:
            args, terms = [ops[i], ops[j]], [term(a), term(b)]
        for p in sorted({i, j}, reverse=True):
            del ops[p]
        ops.append(_step(terms, term(r), args))
    result: NDArray[Any] = ops[0]
    return result


CHUNK_WORK = 1 << 26
"""Multiply-adds of one ``numpy.einsum`` call of the fallback engine: about a tenth of a
second in integers. Python sees a Ctrl-C only between two calls into numpy, so a longer
step runs as chunks of this size (see :func:`_step`)."""


def _step(terms: Sequence[str], out: str, args: Sequence[NDArray[Any]]) -> NDArray[Any]:
    """One step, ``terms -> out``, by ``numpy.einsum``; over :data:`CHUNK_WORK`
    multiply-adds it is cut along its largest label into ranges, each range's result placed
    in the output (a kept label) or summed (a summed one)."""
    import numpy as np

    spec = ",".join(terms) + "->" + out
    sizes = {c: d for t, x in zip(terms, args) for c, d in zip(t, x.shape)}
    work = prod(sizes.values())
    if work <= CHUNK_WORK:
        return np.asarray(np.einsum(spec, *args, optimize=len(args) == 2))
    cut = max(sizes, key=lambda c: sizes[c])
    n = sizes[cut]
    k = min(n, -(-work // CHUNK_WORK))

    def part(lo: int, hi: int) -> NDArray[Any]:
        # A label repeated in a term is cut on each of its axes: the block of a diagonal.
        pieces = [x[tuple(slice(lo, hi) if c == cut else slice(None) for c in t)] for t, x in zip(terms, args)]
        return np.asarray(np.einsum(spec, *pieces, optimize=len(args) == 2))

    bounds = [n * q // k for q in range(k + 1)]
    first = part(bounds[0], bounds[1])
    if cut not in out:
        total = first.copy()
        for lo, hi in zip(bounds[1:], bounds[2:]):
            total += part(lo, hi)
        return total
    axis = out.index(cut)
    result = np.empty(tuple(sizes[c] for c in out), dtype=first.dtype)
    for lo, hi in zip(bounds, bounds[1:]):
        block = first if lo == 0 else part(lo, hi)
        result[(slice(None),) * axis + (slice(lo, hi),)] = block
    return result
