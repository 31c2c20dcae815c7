"""Scaled contraction (cotengra's ``strip_exponent``): a result as ``(mantissa, exponent)``,
the value being ``mantissa * 10**exponent``.

The engine runs the contraction's steps with every intermediate rescaled by a power of two
when its largest magnitude (``abs``; for complex numbers the larger of the parts'
``abs``) leaves ``[2**-64, 2**64]`` (exact: a power of two changes no
digit), the powers summed in an exponent beside it; gradients come the same way, each with
its own exponent. The mantissa's largest magnitude is in ``[0.5, 1)`` (or it is all zero,
exponent 0); the exponent is a multiple of ``log10(2)``.

``strip_exponent`` in :func:`cgx.contract`, ``ContractExpression.__call__`` and
``ContractExpression.value_and_grad``:

- ``True``: always ``(mantissa, exponent)`` (per gradient too);
- ``None`` (the default): the plain contraction; when its result (or a gradient) has left
  the finite range (an entry ``inf`` or ``NaN``, or a largest modulus below the normal
  range) although every operand is finite, it is run again scaled, and each result comes
  as a plain array when it fits, else as ``(mantissa, exponent)``;
- ``False``: the plain contraction only.

An intermediate that underflows to exactly zero leaves no trace in a plain result, so only
``strip_exponent=True`` guards against it.

This module holds the checks; ``_einsum.py`` and ``_expression.py`` call the engine.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from . import _core


def left_range(x: Any) -> bool:
    """Whether ``x``, a numpy float or complex array, has an entry that is not finite or a
    largest modulus that is not zero but below the normal range (what a contraction whose
    intermediate overflowed or underflowed returns). float64 and complex128 arrays, what
    the engine returns, are read by ``_core.left_range`` in one pass (numpy's ``abs`` and
    ``max`` would cost more than a small contraction)."""
    import numpy as np

    if not isinstance(x, (np.ndarray, np.generic)):  # another library's array (dispatched)
        return False
    char = x.dtype.char
    if char in "dD":  # float64, complex128
        return _core.left_range(x)
    if char not in "efgFG" or x.size == 0:  # other floats and complex numbers
        return False
    m = np.abs(x).max()
    return not np.isfinite(m) or 0 < m < np.finfo(x.dtype).tiny


def any_left_range(value: Any, grads: Iterable[Any]) -> bool:
    """``left_range`` of the value or of any gradient. The engine's arrays (float64 and
    complex128 numpy arrays) are read by ``_core.any_left_range`` in one call, without the
    GIL and over the call's threads (on MPS 200 the gradients are 5.3 million entries, read
    at memory bandwidth); other arrays by ``left_range``."""
    import numpy as np

    engine: list[object] = []
    others: list[Any] = []
    for x in [value, *grads]:
        if isinstance(x, np.ndarray) and x.dtype.char in "dD":
            engine.append(x)
        else:
            others.append(x)
    return _core.any_left_range(engine) or any(left_range(x) for x in others)


def finite(arrays: Iterable[Any]) -> bool:
    """Whether every entry of every operand is finite (otherwise a non-finite result is the
    operands', and scaling would not change it)."""
    import numpy as np

    for a in arrays:
        a = np.asarray(a)
        if a.dtype.kind in "fc" and not np.isfinite(a).all():
            return False
    return True


def engine_arrays(arrays: Iterable[Any]) -> tuple[Any, ...]:
    """The operands as the engine's types: complex128 for complex ones, float64 for the
    others (so integers and float32 are contracted scaled in double precision)."""
    import numpy as np

    out = []
    for a in arrays:
        a = np.asarray(a)
        out.append(a.astype(np.complex128 if a.dtype.kind == "c" else np.float64, copy=False))
    return tuple(out)


def check_mode(strip_exponent: Any) -> None:
    """``TypeError`` unless ``strip_exponent`` is ``None``, ``True`` or ``False``."""
    if strip_exponent is not None and not isinstance(strip_exponent, bool):
        raise TypeError(f"strip_exponent must be None, True or False, not {strip_exponent!r}")
