"""opt_einsum's surface over the Rust extension ``cgx._core``.

``contract``, ``contract_path`` and ``contract_expression`` take the arguments of their
opt_einsum namesakes, with numpy's einsum semantics (ellipses ``...``, size-1
broadcasting). Paths are opt_einsum's format (a list of tuples of positions in the
current operand list). ``optimize`` is ``'greedy'`` (the einsum crate's finder, the
default), one of the einsum crate's searches (``'optimal'``: the exact subset search up to
16 operands, ``'dp'``: connected subsets with a cost cap, ``'random-greedy'``, ``'auto'``,
and opt_einsum's names for them, ``'auto-hq'`` and ``'random-greedy-128'``: the names the
einsum crate's ``PathChoice`` parser reads),
an explicit path, any object with opt_einsum's ``PathOptimizer`` call signature
``(inputs, output, size_dict, memory_limit=None) -> path`` (opt_einsum's and cotengra's
optimizers), or the name of another opt_einsum path finder (``'branch-2'``, ...) when
opt_einsum is installed.

Each function also takes numpy's and opt_einsum's interleaved form, operands each followed
by its list of labels and, last, the output's (``contract(a, [0, 1], b, [1, 2], [0, 2])``;
:func:`contract_expression` with shapes in place of operands): see ``_subscripts``. An
explicit path is any sequence (lists, tuples, numpy integer arrays, numpy's
``['einsum_path', ...]``) of steps of integer positions.

The engine contracts pairwise: a path step naming more than two operands is split into
pairs, and a one-operand step (opt_einsum's ``(i,)``) only reorders the list. Before the
pairwise steps, a label that one operand alone holds (and the output does not) is summed
out of that operand: ``ij,kl->`` is two sums and a product of scalars.

``memory_limit`` (elements, or ``'max_input'``; ``None`` or ``-1``: no limit) bounds the
largest intermediate: a contraction whose path exceeds it is sliced (cotengra's greedy slice finding, in the
engine) and contracted slice by slice, summed, or placed where a sliced label is in the
output; only an output larger than the limit, which is held whole, raises ``MemoryError``
(so does a limit that would need an expression with an ellipsis sliced: only named labels
can be). ``sliced_inds`` (cotengra's name) slices on given labels.

Without ``memory_limit`` the only bound is the einsum crate's one memory policy, shared
with the library and the ``cgx`` command line: a contraction runs as long as its tensors
(the operands, and the intermediates alive together) fit in half of the machine's
physical memory (or of ``ulimit -v``), at most 8 GiB, and raises ``MemoryError`` before
allocating anything when they do not. Sizes, path positions, ``wrt`` positions and slice indices are non-negative
integers; anything else raises ``ValueError``.
"""

from __future__ import annotations

import decimal
import math
import numbers
import operator
import os
from collections.abc import Sequence

from . import _core, _dispatch, _scaled, _sharing
from ._sharing import shared_intermediates

__all__ = [
    "contract",
    "contract_path",
    "contract_expression",
    "ContractExpression",
    "PathInfo",
    "get_symbol",
    "shared_intermediates",
]




# Sizes, positions and slice indices must fit the engine's 64-bit unsigned integers.
_U64 = 2**64


def _count(x, what: str) -> int:
    """``x`` as a non-negative int below 2^64, else ``ValueError`` (never the
    ``OverflowError`` the extension would raise for a negative number)."""
    try:
        n = int(x)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be an integer, not {x!r}") from None
    if n != x or not 0 <= n < _U64:
        raise ValueError(f"{what} must be a non-negative integer below 2^64, not {x!r}")
    return n


def _index(x):
    """``x`` as an int if it is an integer in ``0..2^64``, else ``None``."""
    try:
        n = operator.index(x)
    except TypeError:
        return None
    return n if 0 <= n < _U64 else None


def _dims(shape, what: str) -> tuple:
    return tuple(_count(d, f"a size of {what} (shape {tuple(shape)!r})") for d in shape)


def _shape_of(x, is_shape: bool) -> tuple:
    if is_shape:
        return _dims(x, "a shape")
    shape = getattr(x, "shape", None)
    if shape is not None:
        return tuple(shape)
    if isinstance(x, tuple):
        return _dims(x, "a shape")
    import numpy as np

    return np.shape(x)


def _memory_limit(memory_limit, shapes) -> float | None:
    """opt_einsum's ``memory_limit``: ``None`` or ``-1`` (no limit), a number of elements or
    ``'max_input'``. A bool, NaN or another negative number is an error."""
    if memory_limit is None:
        return None
    if isinstance(memory_limit, str):
        if memory_limit == "max_input":
            return max((float(_prod(s)) for s in shapes), default=1.0)
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


def _symbols():
    """Label characters in ``get_symbol`` order, without those that no string passed to
    the engine can hold (surrogates). (Every other one is a label to the subscript parser,
    Unicode spaces such as U+1680 included: it skips ASCII whitespace only.)"""
    i = 0
    while True:
        c = get_symbol(i)
        if not 0xD800 <= ord(c) <= 0xDFFF:
            yield c
        i += 1


def _subscripts(first, rest) -> tuple[str, tuple]:
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
        array = hasattr(sub, "shape") and (getattr(sub, "ndim", 1) != 1 or getattr(sub, "dtype", None).kind not in "iu")
        if not _is_sequence(sub) or array:
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

    def term(sub):
        return "".join("..." if x is Ellipsis else symbol[x] for x in sub)

    if output is None:
        counts = {}
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


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _float_prod(values) -> float:
    n = 1.0
    for d in values:
        n *= float(d)
    return n


def _is_sequence(x) -> bool:
    """A list, tuple, numpy array or other sequence, but not a string."""
    if isinstance(x, (str, bytes)):
        return False
    return isinstance(x, Sequence) or (hasattr(x, "__array__") and getattr(x, "ndim", 0) >= 1)


def _position(p, s: int, step):
    """Path entry ``p`` (of step ``s``) as an int: integers only (numpy's too), not bools."""
    if isinstance(p, bool) or not isinstance(p, numbers.Integral):
        raise ValueError(
            f"invalid contraction path: step {s} {_shown(step)} is not a tuple of positions: {_shown(p)} is not an integer"
        )
    return int(p)


def _shown(x) -> str:
    """``repr(x)``, of numpy arrays and numbers as of lists and Python numbers."""
    return repr(x.tolist()) if hasattr(x, "tolist") else repr(x)


def _path_steps(path) -> list[tuple[int, ...]]:
    """An explicit path (any sequence of sequences of integers, numpy arrays included, or
    numpy's ``['einsum_path', (0, 1), ...]``) as a list of tuples of ints."""
    if not _is_sequence(path):
        raise TypeError(
            "optimize must be a path finder's name, a bool, a path (a sequence of tuples of positions) "
            f"or a PathOptimizer, not {type(path).__name__} {path!r}"
        )
    path = list(path)
    if path and isinstance(path[0], str) and path[0] == "einsum_path":  # numpy.einsum_path's format
        path = path[1:]
    steps = []
    for s, step in enumerate(path):
        if not _is_sequence(step):
            raise ValueError(f"invalid contraction path: step {s} {_shown(step)} is not a tuple of positions")
        steps.append(tuple(_position(p, s, step) for p in step))
    return steps


def _pairwise(path, n: int) -> list[tuple[int, int]]:
    """An opt_einsum path (tuples of any length) as the engine's pairwise path."""
    steps = _path_steps(path)
    if all(len(s) == 2 for s in steps):
        for s, step in enumerate(steps):
            for p in step:
                if not 0 <= p < _U64:
                    raise ValueError(f"invalid contraction path at step {s}: position {p} is out of range")
        return steps
    # Follow opt_einsum's operand list and the engine's side by side: operands are named
    # by ids; a step removes its operands from opt_einsum's list and appends the result.
    theirs = list(range(n))
    ours = list(range(n))
    fresh = n
    pairs = []
    for s, step in enumerate(steps):
        if len(step) == 0 or len(set(step)) != len(step) or any(not 0 <= p < len(theirs) for p in step):
            raise ValueError(
                f"invalid contraction path at step {s}: {step} is empty, repeats a position "
                f"or is out of range ({len(theirs)} operands remain)"
            )
        ids = [theirs[p] for p in step]
        for p in sorted(step, reverse=True):
            del theirs[p]
        current = ids[0]
        for other in ids[1:]:
            i, j = ours.index(current), ours.index(other)
            pairs.append((i, j))
            for p in sorted((i, j), reverse=True):
                del ours[p]
            ours.append(fresh)
            current = fresh
            fresh += 1
        theirs.append(current)
    return pairs


class UnknownOptimizerError(KeyError, ValueError):
    """An ``optimize`` name that no path finder has. A ``KeyError``, as
    ``opt_einsum.paths.get_path_fn`` raises, and a ``ValueError``, as cgx raised before
    (and raises for every other bad argument), so either ``except`` catches it."""

    def __str__(self):
        # KeyError's `str` is the repr of its argument, quotes included; this is a sentence.
        return str(self.args[0]) if self.args else ""


def _check_finder_name(name: str):
    """``UnknownOptimizerError`` unless ``name`` names one of the engine's finders or, with
    opt_einsum installed, one of its."""
    if not _core.is_path_finder(name):
        _opt_einsum_finder(name)


def _opt_einsum_finder(name: str):
    """opt_einsum's path finder ``name``, or ``UnknownOptimizerError``."""
    try:
        from opt_einsum.paths import get_path_fn
    except ImportError:
        raise UnknownOptimizerError(
            f"optimize={name!r}: the built-in finders are 'greedy', 'optimal', 'dp', 'random-greedy', 'auto' and 'hyper'; other path finders come from opt_einsum, which is not installed"
        ) from None
    try:
        return get_path_fn(name)
    except KeyError as e:
        raise UnknownOptimizerError(f"optimize={name!r}: {e.args[0] if e.args else e}") from None


def _find_path(eq: str, shapes, optimize, memory_limit):
    """``None`` for the engine's greedy finder, the name of another of its finders (the
    einsum crate's one parser of finder names reads it when the expression is planned,
    so that the expression is parsed once), else a pairwise path."""
    if optimize is None or optimize is True or (isinstance(optimize, str) and optimize == "greedy"):
        return None
    if isinstance(optimize, str) and _core.is_path_finder(optimize):
        return optimize
    if optimize is False:
        return [(0, 1)] * max(len(shapes) - 1, 0)
    if isinstance(optimize, str):
        optimize = _opt_einsum_finder(optimize)
    if callable(optimize):
        inputs, output, sizes, _ = _core.Expression(eq, [list(s) for s in shapes])._plan()
        path = optimize([frozenset(t) for t in inputs], frozenset(output), sizes, memory_limit)
        return _pairwise(path, len(shapes))
    return _pairwise(optimize, len(shapes))


def _optimizer_slices(optimize, sliced):
    """``sliced`` as given, else the labels a path optimizer chose to slice
    (``HyperOptimizer(slicing_opts=...)``'s ``sliced_inds``), else ``None``."""
    if sliced is None and getattr(optimize, "sliced_inds", None):
        return list(optimize.sliced_inds)
    return sliced


def _sliced(sliced_inds):
    """cotengra's ``sliced_inds`` (labels, one character each) as a list, or ``None``."""
    if sliced_inds is None:
        return None
    labels = list(sliced_inds)
    for label in labels:
        if not isinstance(label, str) or len(label) != 1:
            raise ValueError(f"sliced_inds must be one-character labels, got {label!r}")
    return labels


def contract(eq: str, *operands, optimize="greedy", memory_limit=None, sliced_inds=None, strip_exponent=None, **kwargs):
    """Contracts ``operands`` as the einsum expression ``eq`` says; a new numpy array.

    The result has numpy's result dtype of the operands: floats and complex numbers up to
    double precision are contracted by the engine in float64 or complex128 (float64 and
    complex128 arrays read directly) and the result cast to it; integers, bools, objects
    and long doubles by numpy along the same path, exactly. The GIL is released while a large
    contraction runs. An intermediate over ``memory_limit`` elements makes the contraction
    sliced (see the module docs); ``sliced_inds`` slices on given labels. Bad input raises
    ``ValueError`` (``MemoryError`` when the output exceeds ``memory_limit`` elements, or the
    tensors of the contraction the memory budget).

    numpy's and opt_einsum's keywords are taken too, with ``numpy.einsum``'s meaning:
    ``dtype`` (operands cast to it first, under ``casting``), ``out`` (an array of the
    result's shape that receives the result, under ``casting``, and is returned; without
    ``dtype``, the contraction is computed in the result dtype of the operands and
    ``out``), ``order``
    (``'C'`` or ``'F'`` for the result's layout; ``'K'`` and ``'A'`` keep the engine's C
    order unless every operand is Fortran-ordered, then ``'A'`` gives F), ``casting``
    (``'safe'`` by default), and opt_einsum's ``use_blas`` (accepted; the engine always uses
    its own matrix kernels) and ``backend``: with ``'auto'``, arrays of another library
    (JAX, PyTorch, Dask, ...) are contracted by that library's ``einsum`` along the
    engine's path and the result is of their type (``_dispatch``); a library's name
    converts numpy operands to its arrays and the result back; ``'object'`` contracts
    object arrays with Python arithmetic; ``'numpy'`` is the engine.

    >>> import numpy as np, cgx
    >>> cgx.contract("ij,jk->ik", np.eye(2), np.arange(4.0).reshape(2, 2)).tolist()
    [[0.0, 1.0], [2.0, 3.0]]
    >>> out = np.zeros((2, 2), dtype=np.float32)
    >>> cgx.contract("ij,jk->ik", np.eye(2), np.ones((2, 2)), dtype=np.float32, casting="same_kind", out=out) is out
    True

    ``strip_exponent`` (cotengra's name): with ``True`` the result is ``(mantissa,
    exponent)``, the value being ``mantissa * 10**exponent``, from a contraction whose
    intermediates carry a power of two beside them, so it is finite where the plain one
    overflows; by default (``None``) a plain result that left the finite range from finite
    operands is computed again that way, and comes back as an array if it then fits, else as
    the pair; ``False`` never does (see ``cgx._scaled``).

    >>> m, e = cgx.contract("i,i->", np.full(2, 1e200), np.full(2, 1e200), strip_exponent=True)
    >>> round(float(np.log10(m)) + e, 6)
    400.30103
    """
    _scaled.check_mode(strip_exponent)
    if not isinstance(eq, str):
        eq, operands = _subscripts(eq, operands)
    if isinstance(optimize, str) and optimize != "greedy":
        _check_finder_name(optimize)  # before any other argument, as opt_einsum does
    sliced = _sliced(sliced_inds)
    if strip_exponent:
        if kwargs:
            raise TypeError(f"strip_exponent=True does not combine with numpy's keywords ({', '.join(kwargs)})")
        library = _dispatch.foreign(operands)
        if library not in (None, "object"):
            raise TypeError(f"strip_exponent=True takes numpy operands, not {library}'s arrays")
        return _contract_scaled(eq, operands, optimize, memory_limit, sliced, False)
    out = _contract(eq, operands, optimize, memory_limit, sliced, kwargs)
    if strip_exponent is None and not kwargs and _scaled.left_range(out) and _scaled.finite(operands):
        return _contract_scaled(eq, operands, optimize, memory_limit, sliced, True)
    return out


def _contract_scaled(eq, operands, optimize, memory_limit, sliced, fit):
    """The scaled contraction of ``operands`` (see ``cgx._scaled``): ``(mantissa,
    exponent)``, or with ``fit`` a plain array when the value fits."""
    arrays = _scaled.engine_arrays(operands)
    shapes = [a.shape for a in arrays]
    limit = _memory_limit(memory_limit, shapes)
    path = _find_path(eq, shapes, optimize, limit)
    expr = _core.Expression(eq, [list(s) for s in shapes], path, limit, _optimizer_slices(optimize, sliced))
    return expr._scaled(arrays, fit=fit)


def _contract(eq, operands, optimize, memory_limit, sliced, kwargs):
    """:func:`contract` after its arguments are read, without ``strip_exponent``."""
    if kwargs:
        backend = kwargs.get("backend", "auto")
        library = _library(operands, backend)
    else:  # the common case: one pass over the operands' types
        backend, library = "auto", _dispatch.foreign(operands)
    if library is not None:
        if library == "object":
            import numpy as np

            operands = tuple(np.asarray(x, dtype=object) for x in operands)
            kwargs = {k: v for k, v in kwargs.items() if k != "backend"}
        else:
            return _contract_foreign(eq, operands, optimize, memory_limit, library, backend != "auto", kwargs)
    if kwargs:
        for name in kwargs:
            if name not in _NUMPY_KWARGS:
                raise TypeError(f"contract() got an unexpected keyword argument {name!r}")
        return _contract_numpy_kwargs(eq, operands, optimize, memory_limit, sliced, **kwargs)
    if _sharing.ACTIVE and memory_limit is None and sliced is None:
        cache = _sharing.current()
        if cache is not None:
            return _contract_shared(cache, eq, operands, optimize)
    if memory_limit is None and sliced is None and (optimize == "greedy" if isinstance(optimize, str) else optimize is None):
        if _engine_dtypes(operands):  # the common case, without a further call
            return _core.contract(eq, operands)
        return _contract_cast(eq, operands)
    shapes = [_shape_of(x, False) for x in operands]
    limit = _memory_limit(memory_limit, shapes)
    path = _find_path(eq, shapes, optimize, limit)
    return _contract_typed(eq, operands, path, limit, _optimizer_slices(optimize, sliced))


def _library(operands, backend):
    """The array library that contracts ``operands``: ``None`` for the engine (numpy
    arrays, Python numbers, ``backend='numpy'``), ``'object'`` for numpy's object arrays
    with Python arithmetic, else the library ``backend`` names, or with ``'auto'`` the
    library of the first operand that is not numpy's (``_dispatch``)."""
    if not isinstance(backend, str):
        raise ValueError(f"backend must be a library's name, such as 'numpy', 'jax', 'torch' or 'object', not {backend!r}")
    if backend == "auto":
        return _dispatch.foreign(operands)
    return None if backend == "numpy" else backend


# Plans of contractions done by other libraries, by (eq, shapes, optimize): a jitted JAX
# function traces the same call many times.
_FOREIGN_PLANS: dict = {}


def _foreign_plan(eq, shapes, optimize, memory_limit):
    """The engine's plan (``Expression._plan``) for another library's operands: the path
    only, never sliced (the library holds the intermediates, and a lazy library, Dask,
    chunks them)."""
    try:
        key = (eq, tuple(shapes), optimize, memory_limit)
        hash(key)
    except TypeError:  # a path as lists, or an optimizer object without a hash
        key = None
    plan = _FOREIGN_PLANS.get(key) if key is not None else None
    if plan is None:
        limit = _memory_limit(memory_limit, shapes)
        path = _find_path(eq, shapes, optimize, limit)
        plan = _core.Expression(eq, [list(s) for s in shapes], path)._plan()
        if key is not None:
            if len(_FOREIGN_PLANS) >= 512:
                _FOREIGN_PLANS.clear()
            _FOREIGN_PLANS[key] = plan
    return plan


def _contract_foreign(eq, operands, optimize, memory_limit, library, convert, kwargs):
    """``contract`` by another library (``_dispatch``): its ``einsum`` along the engine's
    path, the result of its type (or, with ``convert``, numpy operands converted to it and
    the result back)."""
    # numpy's keywords at their defaults say nothing; others would be silently dropped.
    defaults = {"out": None, "dtype": None, "order": "K", "casting": "safe"}
    for name, value in kwargs.items():
        if name not in _NUMPY_KWARGS:
            raise TypeError(f"contract() got an unexpected keyword argument {name!r}")
        if name in defaults and (value is not None if defaults[name] is None else value != defaults[name]):
            raise ValueError(f"{name}={value!r} applies to numpy arrays; these operands are contracted by {library!r}")
    shapes = [tuple(int(d) for d in _shape_of(x, False)) for x in operands]
    return _dispatch.run(_foreign_plan(eq, shapes, optimize, memory_limit), operands, library, convert)


def _contract_shared(cache, eq, operands, optimize):
    """``contract`` inside ``shared_intermediates``: step by step, each step's result
    taken from ``cache`` or computed and kept (``_sharing.run``)."""
    shapes = [_shape_of(x, False) for x in operands]
    expr = _core.Expression(eq, [list(s) for s in shapes], _find_path(eq, shapes, optimize, None))
    return _sharing.run(cache, expr, operands, _contract_typed)


# numpy's keywords. `contract` takes them as `**kwargs`, so that a call without them, the
# common case, pays one test for all of them.

_CASTINGS = ("no", "equiv", "safe", "same_kind", "unsafe")
_ORDERS = ("K", "A", "C", "F")
_BACKENDS = ("auto", "numpy")
_NUMPY_KWARGS = ("out", "dtype", "order", "casting", "use_blas", "backend")


def _contract_numpy_kwargs(
    eq, operands, optimize, memory_limit, sliced, out=None, dtype=None, order="K", casting="safe", use_blas=True, backend="auto"
):
    """``contract`` with numpy's ``out``, ``dtype``, ``order`` and ``casting`` and
    opt_einsum's ``use_blas`` and ``backend``, checked as ``numpy.einsum`` checks them."""
    _check_numpy_kwargs(order, casting, backend)
    if dtype is None and out is not None and hasattr(out, "dtype"):
        # numpy computes in the result dtype of the operands and `out` (int8 operands
        # into an int64 `out` do not wrap).
        import numpy as np

        dtype = np.result_type(*[_dtype_of(x) for x in operands], out.dtype)
    if dtype is not None or casting in ("no", "equiv"):
        # numpy computes in `dtype`, or else in the operands' result dtype, and casts every
        # operand to it under `casting` (which always allows the latter but for these two).
        import numpy as np

        arrays = [np.asarray(x) for x in operands]
        target = np.dtype(dtype) if dtype is not None else np.result_type(*arrays)
        for n, a in enumerate(arrays):
            if not np.can_cast(a.dtype, target, casting):
                raise TypeError(f"operand {n} of dtype {a.dtype} cannot be cast to {target} under casting={casting!r}")
        if dtype is not None:
            # numpy's iterator reads `out` in `dtype` too, so it checks that cast as well.
            if isinstance(out, np.ndarray) and not np.can_cast(out.dtype, target, casting):
                raise TypeError(f"out of dtype {out.dtype} cannot be cast to {target} under casting={casting!r}")
            operands = tuple(a.astype(target, copy=False) for a in arrays)
    result = contract(eq, *operands, optimize=optimize, memory_limit=memory_limit, sliced_inds=sliced)
    return _finish(result, operands, out, order, casting)


def _check_numpy_kwargs(order, casting, backend):
    """``ValueError`` for an ``order``, ``casting`` or ``backend`` numpy or cgx does not know."""
    if casting not in _CASTINGS:
        raise ValueError(f"casting must be one of {', '.join(map(repr, _CASTINGS))} (got {casting!r})")
    if order not in _ORDERS:
        raise ValueError(f"order must be one of 'C', 'F', 'A', or 'K' (got {order!r})")
    if backend not in _BACKENDS:
        raise ValueError(f"backend={backend!r}: numpy's keywords apply to numpy arrays ('auto' or 'numpy')")


def _finish(result, operands, out, order, casting):
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


def _engine_dtypes(operands) -> bool:
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


def _dtype_of(x):
    import numpy as np

    dtype = getattr(x, "dtype", None)
    if isinstance(dtype, np.dtype):
        return dtype
    return np.asarray(x).dtype


def _result_dtype(operands):
    """numpy's result dtype of ``operands`` (``np.result_type`` of their dtypes), or
    ``None`` if they have none (strings and numbers: the engine says which operand)."""
    import numpy as np

    try:
        return np.result_type(*[_dtype_of(x) for x in operands]) if operands else np.dtype(np.float64)
    except TypeError:
        return None


def _by_numpy(dtype) -> bool:
    """Whether operands of result dtype ``dtype`` are contracted by numpy, not the engine:
    integers, bools, objects, and floats or complex numbers wider than double precision.
    (Other kinds, such as strings, go to the engine, which rejects them.)"""
    if dtype is None:
        return False
    return dtype.kind in "biuO" or (dtype.kind == "f" and dtype.itemsize > 8) or (dtype.kind == "c" and dtype.itemsize > 16)


def _cast_result(out, dtype):
    """The engine's float64 or complex128 result ``out`` in the result dtype ``dtype``."""
    return out if out.dtype == dtype else out.astype(dtype)


def _contract_typed(eq, operands, path=None, limit=None, sliced=None):
    """``contract`` after its arguments are parsed: the engine or numpy, by dtype."""
    if _engine_dtypes(operands):
        return _core.contract(eq, operands, path, limit, sliced)
    return _contract_cast(eq, operands, path, limit, sliced)


def _contract_cast(eq, operands, path=None, limit=None, sliced=None):
    """``_contract_typed`` for operands that are not all float64 or complex128: the
    engine with a cast of its result, or numpy along the engine's path."""
    dtype = _result_dtype(operands)
    if not _by_numpy(dtype):
        out = _core.contract(eq, operands, path, limit, sliced)
        return _cast_result(out, dtype) if dtype is not None and dtype.kind in "fc" else out
    import numpy as np

    arrays = [np.asarray(x) for x in operands]
    expr = _core.Expression(eq, [list(a.shape) for a in arrays], path, limit, sliced)
    return _numpy_along(expr, arrays, dtype, limit)


def _numpy_along(expr, arrays, dtype, limit=None):
    """``expr`` contracted by numpy in ``dtype``, step by step along its pairwise path (and
    slice by slice if it is sliced), each step a two-operand ``numpy.einsum``: exact for
    integers (wrapping on overflow as numpy does) and bools. All operands are cast to
    ``dtype`` first, as ``numpy.einsum`` does."""
    import numpy as np

    inputs, output, sizes, steps = expr._plan()
    if limit is not None and float(_prod(expr.output_shape)) > limit:
        raise MemoryError(f"`{expr.eq}`: the output has {_prod(expr.output_shape)} elements, more than memory_limit={limit:.0f}")
    arrays = [np.asarray(a, dtype=dtype) for a in arrays]
    try:
        return _numpy_sliced(expr, inputs, output, sizes, steps, arrays, dtype)
    except TypeError as e:  # objects without + or *
        raise TypeError(f"`{expr.eq}`: operands of dtype {dtype} could not be contracted: {e}") from e


def _numpy_sliced(expr, inputs, output, sizes, steps, arrays, dtype):
    """The plan run whole, or slice by slice (each slice's result summed into, or placed
    in, the output)."""
    import itertools

    import numpy as np

    sliced = list(expr.sliced_inds or ())
    if not sliced:
        return _numpy_steps(inputs, output, steps, arrays)
    out = np.zeros(tuple(expr.output_shape), dtype=dtype)
    for values in itertools.product(*[range(sizes[c]) for c in sliced]):
        at = dict(zip(sliced, values))
        ops = [a[tuple(at.get(c, slice(None)) for c in t)] for a, t in zip(arrays, inputs)]
        part = _numpy_steps(
            [_drop(t, at) for t in inputs], _drop(output, at), [(p, tuple(_drop(t, at) for t in ts), *rest) for p, ts, *rest in steps], ops
        )
        out[tuple(at.get(c, slice(None)) for c in output)] += part
    return out


def _drop(labels: str, at) -> str:
    return "".join(c for c in labels if c not in at)


def _numpy_steps(inputs, output, steps, ops):
    """The engine's plan (``steps`` as ``Expression._plan`` gives them) run by numpy."""
    import numpy as np

    ops = list(ops)
    if not steps:  # one operand, already in the output's order
        return np.array(ops[0], copy=True)
    for (i, j), (a, b, r), _, _ in steps:
        names = {c: chr(ord("a") + k) if k < 26 else chr(ord("A") + k - 26) for k, c in enumerate(dict.fromkeys(a + b + r))}
        if len(names) > 52:
            raise ValueError(f"a step with {len(names)} labels: numpy contracts at most 52 at once")
        term = lambda t: "".join(names[c] for c in t)  # noqa: E731
        if i == j:
            args, spec = [ops[i]], f"{term(a)}->{term(r)}"
        else:
            args, spec = [ops[i], ops[j]], f"{term(a)},{term(b)}->{term(r)}"
        for p in sorted({i, j}, reverse=True):
            del ops[p]
        ops.append(np.asarray(np.einsum(spec, *args, optimize=len(args) == 2)))
    return ops[0]


class PathInfo:
    """What a contraction along a path costs: opt_einsum's ``PathInfo``, printed as a report.

    Attributes: ``eq``, ``path`` (as the engine runs it: its first sums, one-operand
    steps, then the pairs), ``shapes``, ``size_dict``, ``input_subscripts``,
    ``output_subscript``, ``indices`` (every label), ``steps`` (per step: positions, the
    labels of both operands and of the result, its size in elements, its multiply-adds),
    ``contraction_list`` (opt_einsum's per-step tuples: positions in decreasing order,
    labels summed away, the step's equation, the labels of the operands left after it,
    and ``'GEMM'`` where the step is a plain matrix product, summing away labels both
    operands have and keeping none they share, else ``False``), ``size_list`` (the
    size of each step's result), ``opt_cost`` and ``naive_cost`` (flops along the path and
    of one loop over all labels, counted as opt_einsum counts them: per loop iteration,
    one per operand beyond the first, at least one, plus one for an inner product),
    ``speedup``, ``largest_intermediate`` (elements) and ``scale_list`` (labels per step);
    and the slicing: ``sliced_inds``, ``n_slices``, ``slicing_overhead`` (flops of all
    slices over the unsliced flops).
    """

    def __init__(self, eq, shapes, plan, path, sliced_inds=(), n_slices=1, slicing_overhead=1.0):
        inputs, output, sizes, steps = plan
        self.eq = eq
        self.path = path
        self.shapes = [tuple(s) for s in shapes]
        self.size_dict = dict(sizes)
        self.input_subscripts = ",".join(inputs)
        self.output_subscript = output
        self.steps = steps
        self.indices = frozenset(self.size_dict)
        # In floats: a large network's loop over all labels overflows what a float holds
        # from an integer (it becomes inf, as in opt_einsum).
        # opt_einsum's naive loop adds once more when a label is shared by operands.
        shared = sum(len(set(t)) for t in inputs) > len(self.indices)
        self.naive_cost = _flops(self.size_dict, self.size_dict, shared, len(inputs))
        # Without steps, 1 as in opt_einsum (the default of its maximum over no sizes).
        self.largest_intermediate = max((s[2] for s in steps), default=1.0)
        self.size_list = [s[2] for s in steps]
        self.scale_list, self.contraction_list, costs = [], [], []
        remaining = list(inputs)
        for (i, j), (a, b, r), _, _ in steps:
            both, common = set(a) | set(b), set(a) & set(b)
            removed = frozenset(both - set(r))
            costs.append(_flops(both, self.size_dict, removed, 1 if i == j else 2))
            self.scale_list.append(len(both))
            for p in sorted({i, j}, reverse=True):
                del remaining[p]
            remaining.append(r)
            spec = f"{a}->{r}" if i == j else f"{a},{b}->{r}"
            # A matrix product: labels summed away, each in both operands, none repeated,
            # and no batch label (kept, in both).
            product = i != j and len(set(a)) == len(a) and len(set(b)) == len(b) and not common & set(r)
            blas = "GEMM" if removed and product and removed <= common else False
            self.contraction_list.append((tuple(sorted({i, j}, reverse=True)), removed, spec, tuple(remaining), blas))
        # Without steps (one operand, relabelled) the whole loop is the one step.
        self.opt_cost = sum(costs) if steps else self.naive_cost
        self.speedup = self.naive_cost / self.opt_cost if self.opt_cost else 1.0
        self.sliced_inds = list(sliced_inds)
        self.n_slices = n_slices
        self.slicing_overhead = slicing_overhead

    def plot(self, file=None):
        """Draws the contraction tree as SVG: each step a circle sized by its multiply-adds
        and colored by the size of its result, sliced labels as dashed edges. Writes it to
        ``file`` (a path) when given; returns the SVG text.

        >>> import cgx
        >>> _, info = cgx.contract_path("ij,jk,kl->il", (2, 3), (3, 4), (4, 5), shapes=True)
        >>> info.plot().count("<circle")
        2
        """
        svg = _core.tree_svg(self.eq, [list(s) for s in self.shapes], [list(p) for p in self.path], list(self.sliced_inds))
        if file is not None:
            with open(file, "w", encoding="utf-8") as f:
                f.write(svg)
        return svg

    def __str__(self):
        lines = [
            f"  Complete contraction:  {self.input_subscripts}->{self.output_subscript}",
            f"         Naive scaling:  {len(self.size_dict)}",
            f"     Optimized scaling:  {max(self.scale_list, default=0)}",
            f"      Naive FLOP count:  {self.naive_cost:.3e}",
            f"  Optimized FLOP count:  {self.opt_cost:.3e}",
            f"   Theoretical speedup:  {self.speedup:.3e}",
            f"  Largest intermediate:  {self.largest_intermediate:.3e} elements",
        ]
        if self.sliced_inds:
            lines.append(
                f"                Sliced:  {','.join(self.sliced_inds)} ({self.n_slices} slices, "
                f"overhead {self.slicing_overhead:.3f})"
            )
        lines += [
            "-" * 80,
            f"{'step':>4}  {'pair':<10}{'scaling':>8}{'flops':>12}{'size':>12}  contraction",
            "-" * 80,
        ]
        for n, ((i, j), (a, b, r), size, madds) in enumerate(self.steps):
            # A final one-operand step (reorder or reduce) has positions (0, 0).
            pair, term = (f"({i},)", f"{a}->{r}") if i == j else (f"({i}, {j})", f"{a},{b}->{r}")
            lines.append(f"{n:>4}  {pair:<10}{len(set(a) | set(b)):>8}{2 * madds:>12.3e}{size:>12.3e}  {term}")
        return "\n".join(lines)

    __repr__ = __str__


def _flops(labels, sizes, inner, terms: int) -> float:
    """opt_einsum's flop count of a loop over ``labels``: per iteration, one per operand
    beyond the first (at least one), plus one for an inner product (``inner``: labels
    summed away in a step; labels shared by operands in the naive loop)."""
    return _float_prod(sizes[c] for c in labels) * (max(terms - 1, 1) + (1 if inner else 0))


def contract_path(eq: str, *operands, optimize="greedy", memory_limit=None, shapes=False, sliced_inds=None):
    """``(path, info)``: the pairwise path and a :class:`PathInfo` report, without
    contracting. ``info.path`` is the path as the engine runs it: one-operand steps
    ``(i,)`` first, one per operand summed over the labels it alone holds (done before any
    pair), then the pairs; ``info``'s costs and sizes are those of that path.

    Operands are arrays or shapes (a tuple of ints, or any sequence with ``shapes=True``).
    With a ``memory_limit`` below the largest intermediate, or ``sliced_inds``, the report
    gives the slicing (``info.sliced_inds``, ``info.n_slices``, ``info.slicing_overhead``).

    >>> import cgx
    >>> path, info = cgx.contract_path("ij,jk,kl->il", (2, 3), (3, 4), (4, 5))
    >>> path  # opt_einsum's greedy finds the same
    [(1, 2), (0, 1)]
    >>> info.opt_cost > cgx.contract_path("ij,jk,kl->il", (2, 3), (3, 4), (4, 5), optimize="optimal")[1].opt_cost
    True
    >>> cgx.contract_path("ij,kl->", (3, 3), (3, 3))[1].path  # two sums, then their product
    [(0,), (0,), (0, 1)]
    """
    eq, operands = _subscripts(eq, operands)
    shape_list = [_shape_of(x, shapes) for x in operands]
    limit = _memory_limit(memory_limit, shape_list)
    path = _find_path(eq, shape_list, optimize, limit)
    sliced = _optimizer_slices(optimize, _sliced(sliced_inds))
    expr = _core.Expression(eq, [list(s) for s in shape_list], path, limit, sliced)
    plan = expr._plan()
    # The path as the engine runs it, opt_einsum's format: the first sums (one-operand
    # steps, each moving its result to the end) before the pairs.
    # Pairs in increasing order, as opt_einsum writes a step (a set of positions; the
    # engine's order of the two only says which operand its kernel reads first), unless the
    # path was given: then as given, as opt_einsum returns it.
    given = _is_sequence(optimize)
    pair = (lambda i, j: (i, j)) if given else (lambda i, j: (min(i, j), max(i, j)))
    path = expr.path if len(shape_list) < 2 else [(i,) if i == j else pair(i, j) for (i, j), *_ in plan[3]]
    info = PathInfo(eq, shape_list, plan, path, expr.sliced_inds, expr.n_slices, expr.slicing_overhead)
    output = float(_prod(expr.output_shape))
    if limit is not None and (output > limit or (not expr.sliced_inds and info.largest_intermediate > limit)):
        raise MemoryError(
            f"`{eq}`: the largest intermediate has {max(output, info.largest_intermediate):.0f} elements, "
            f"more than memory_limit={limit:.0f}"
        )
    return [pair(i, j) for i, j in expr.path], info


class ContractExpression(_core.Expression):
    """A contraction compiled once for fixed shapes and called many times (``expr(*arrays)``).

    Built by :func:`contract_expression`. Besides calling it: ``value_and_grad`` and
    ``hvp``. Gradients are vector-Jacobian products; for complex operands they are the
    adjoint for the real inner product ``Re(conj(a)·b)`` (PyTorch's convention: the
    conjugate of what ``jax.vjp`` returns for a holomorphic function).

    A sliced expression (``sliced_inds``, ``n_slices``, ``slicing_overhead``) evaluates
    any range of its slices alone: ``eval_slices`` and ``grad_slices`` return sums over
    ``range(start, stop)`` that add up, over disjoint ranges covering every slice, to the
    value and the gradients; ``value_and_grad_slices`` gives both in one pass,
    ``hvp_slices`` the Hessian-vector products, and ``eval_blocks`` gives the value by
    output blocks (see there). ``hvp`` of a sliced expression is the sum of its slices'
    Hessian-vector products, computed slice by slice. It pickles as its plan (equation, shapes, path, limit and
    sliced labels) and is rebuilt, with the same slices, where it is unpickled.

    Built with ``constants`` (opt_einsum's argument), it holds those operands' arrays and
    every method takes the other operands only, in their order; ``wrt`` positions count
    among those operands too, and constants get no gradient.
    """

    # Positions of constant operands, and their arrays (see `contract_expression`).
    _constants: tuple = ()
    _constant_arrays: tuple = ()

    def _full(self, arrays):
        """The operands of the whole contraction: ``arrays`` with the constants put back."""
        if not self._constants:
            return arrays
        n = len(self.shapes) - len(self._constants)
        if len(arrays) != n:
            raise ValueError(f"shape error: `{self.eq}` takes {n} operands besides its constants but {len(arrays)} were given")
        full, given = [], iter(arrays)
        constants = dict(zip(self._constants, self._constant_arrays))
        for p in range(len(self.shapes)):
            full.append(constants[p] if p in constants else next(given))
        return tuple(full)

    def _full_wrt(self, wrt):
        """``wrt`` (positions among the operands a call takes) as positions in the whole
        contraction; ``None`` means every operand that is not a constant."""
        variables = [p for p in range(len(self.shapes)) if p not in self._constants]
        wrt = _wrt(wrt, len(variables))
        if wrt is None:
            return variables if self._constants else None
        for w in wrt:
            if w >= len(variables):
                raise ValueError(f"shape error: cannot differentiate with respect to operand {w}: there are {len(variables)}")
        return [variables[w] for w in wrt]

    def __call__(self, *arrays, out=None, backend="auto", strip_exponent=None):
        """The contraction of ``arrays`` in numpy's result dtype of their dtypes, as
        :func:`contract` gives it; with ``out`` (an array of the result's shape), computed
        in the result dtype of the arrays and ``out``, written there under numpy's
        ``'safe'`` casting and returned. ``backend`` as in :func:`contract` (arrays of
        another library are contracted by it along this expression's path; ``out`` then
        receives the result by ``out[...] = result``). ``strip_exponent`` as in
        :func:`contract`: ``(mantissa, exponent)`` with ``True``, for numpy operands."""
        _scaled.check_mode(strip_exponent)
        library = _library(arrays, backend)
        if library == "object":
            import numpy as np

            arrays, backend = tuple(np.asarray(x, dtype=object) for x in arrays), "auto"
        elif library is not None:
            if strip_exponent:
                raise TypeError(f"strip_exponent=True takes numpy operands, not {library}'s arrays")
            self._check_shapes(self._full(arrays))
            result = _dispatch.run(self._plan(), self._full(arrays), library, backend != "auto")
            if out is not None:
                out[...] = result
                return out
            return result
        arrays = self._full(arrays)
        if strip_exponent:
            if out is not None:
                raise TypeError("strip_exponent=True does not combine with out=")
            return self._scaled(_scaled.engine_arrays(arrays))
        result = self._plain_call(arrays, out, backend)
        if strip_exponent is None and out is None and _scaled.left_range(result) and _scaled.finite(arrays):
            return self._scaled(_scaled.engine_arrays(arrays), fit=True)
        return result

    def _plain_call(self, arrays, out, backend):
        """``__call__`` without ``strip_exponent``, on the whole contraction's operands."""
        if out is not None or backend not in ("auto", "numpy"):
            _check_numpy_kwargs("K", "safe", backend)
            if hasattr(out, "dtype"):
                # As `contract` does: computed in the result dtype of the arrays and `out`.
                import numpy as np

                dtype = np.result_type(*[_dtype_of(x) for x in arrays], out.dtype)
                arrays = tuple(np.asarray(x).astype(dtype, copy=False) for x in arrays)
            return _finish(self._call(arrays), arrays, out, "K", "safe")
        if _sharing.ACTIVE:
            return self._call(arrays)
        if _engine_dtypes(arrays):
            return super().__call__(*arrays)
        return self._typed(arrays)

    def _call(self, arrays):
        """``__call__`` after its keywords: shared (inside ``shared_intermediates``, unless
        sliced), by the engine, or typed."""
        cache = _sharing.current()
        if cache is not None and not self.sliced_inds:
            self._check_shapes(arrays)
            return _sharing.run(cache, self, arrays, _contract_typed)
        return super().__call__(*arrays) if _engine_dtypes(arrays) else self._typed(arrays)

    def _check_shapes(self, arrays):
        """``ValueError`` unless ``arrays`` have the shapes the expression was built for."""
        if len(arrays) != len(self.shapes):
            raise ValueError(f"shape error: `{self.eq}` takes {len(self.shapes)} operands but {len(arrays)} were given")
        for n, (a, s) in enumerate(zip(arrays, self.shapes)):
            if list(_shape_of(a, False)) != list(s):
                raise ValueError(
                    f"shape error: operand {n} of `{self.eq}` has shape {list(_shape_of(a, False))} but the expression was built for {list(s)}"
                )

    def _typed(self, arrays):
        """``__call__`` for operands that are not all float64 or complex128."""
        dtype = _result_dtype(arrays)
        if not _by_numpy(dtype):
            out = super().__call__(*arrays)
            return _cast_result(out, dtype) if dtype is not None and dtype.kind in "fc" else out
        import numpy as np

        arrays = [np.asarray(x) for x in arrays]
        self._check_shapes(arrays)
        return _numpy_along(self, arrays, dtype, self.memory_limit)

    def _range(self, start, stop):
        """``(start, stop)`` checked to be slice indices (negative ones are errors, as in
        the engine, not counted from the end)."""
        n = self.n_slices
        if _index(start) is None or (stop is not None and _index(stop) is None):
            shown = "" if stop is None else stop
            raise ValueError(f"slicing error: slice range {start}..{shown} is not within 0..{n} ({n} slices)")
        return _index(start), None if stop is None else _index(stop)

    def eval_slices(self, *arrays, start=0, stop=None):
        """The sum of slices ``start..stop`` (to the last if ``None``), of the output's shape."""
        return self._eval_slices(self._full(arrays), *self._range(start, stop))

    def eval_blocks(self, *arrays, start=0, stop=None):
        """``(first, blocks)``: slices ``start..stop`` by output blocks, never of the output's
        full shape. A block is the output at one value of each sliced label of the output
        (counted over those labels in ``sliced_inds`` order, the last fastest; one block if
        none is in the output), summed over the range's values of the other sliced labels;
        ``blocks[i]`` is block ``first + i``, of the output's shape without its sliced axes.
        With the output's sliced labels first in ``sliced_inds``, a range holds about its
        share of the blocks."""
        return self._eval_slices(self._full(arrays), *self._range(start, stop), True)

    def grad_slices(self, *arrays, start=0, stop=None, wrt=None, cotangent=None):
        """The gradients (one per operand in ``wrt``) summed over slices ``start..stop``."""
        return self._grad_slices(self._full(arrays), *self._range(start, stop), self._full_wrt(wrt), cotangent)

    def value_and_grad_slices(
        self, *arrays, start=0, stop=None, wrt=None, cotangent=None, blocks=False, cotangent_first=None
    ):
        """``(value, grads)`` of slices ``start..stop`` in one pass (each slice's forward runs
        once): ``value`` as ``eval_slices`` gives it, or as ``eval_blocks`` with ``blocks``;
        ``grads`` as ``grad_slices``. With ``cotangent_first``, ``cotangent`` holds output
        blocks ``cotangent_first..`` stacked as ``eval_blocks`` stacks the value (at least
        those the range touches), never the output's full shape, and the value comes by
        blocks."""
        start, stop = self._range(start, stop)
        wrt = self._full_wrt(wrt)
        return self._value_and_grad_slices(self._full(arrays), start, stop, wrt, cotangent, blocks, cotangent_first)

    def _build_args(self):
        """The plan this expression is built from: the arguments of its constructor."""
        return (self.eq, self.shapes, self.path, self.memory_limit, self.sliced_inds or None)

    def __reduce__(self):
        constants = (self._constants, self._constant_arrays) if self._constants else None
        return (_rebuild, (type(self), self._build_args(), constants))

    def value_and_grad(self, *arrays, wrt=None, cotangent=None, strip_exponent=None):
        """``(value, grads)``: the contraction and one gradient per operand in ``wrt`` (all if
        ``None``; an int for one operand), for ``cotangent`` (of the output's shape; ``None``
        means 1 and needs a scalar output). ``strip_exponent`` as in :func:`contract`, for
        the value and each gradient: with ``True`` each is ``(mantissa, exponent)``; by
        default, when one has left the finite range, all are computed again scaled and each
        comes as an array if it fits, else as the pair."""
        _scaled.check_mode(strip_exponent)
        arrays, wrt = self._full(arrays), self._full_wrt(wrt)
        if strip_exponent:
            return self._scaled(_scaled.engine_arrays(arrays), grads=True, wrt=wrt, cotangent=cotangent)
        value, grads = self._value_and_grad(arrays, wrt, cotangent)
        if strip_exponent is None and _scaled.any_left_range(value, grads) and _scaled.finite(arrays):
            return self._scaled(_scaled.engine_arrays(arrays), grads=True, wrt=wrt, cotangent=cotangent, fit=True)
        return value, grads

    def hvp(self, *arrays, directions, wrt=None, cotangent=None):
        """Hessian-vector products of ``x ↦ <cotangent, f(x)>`` in the operands ``wrt``: one
        direction per ``wrt`` operand in, one array per ``wrt`` operand out. A sliced
        expression sums its slices' products, one slice at a time, so its memory is that
        of a slice (the operands, directions and products held whole)."""
        return self._hvp(self._full(arrays), list(directions), self._full_wrt(wrt), cotangent)

    def hvp_slices(self, *arrays, directions, start=0, stop=None, wrt=None, cotangent=None):
        """The Hessian-vector products (as ``hvp``) summed over slices ``start..stop`` (to the
        last if ``None``): over disjoint ranges covering every slice, they add up to ``hvp``."""
        start, stop = self._range(start, stop)
        return self._hvp_slices(self._full(arrays), list(directions), start, stop, self._full_wrt(wrt), cotangent)

    def __repr__(self):
        sliced = f", sliced_inds={self.sliced_inds}" if self.sliced_inds else ""
        constants = f", constants={list(self._constants)}" if self._constants else ""
        return f"ContractExpression({self.eq!r}, shapes={self.shapes}, path={self.path}{sliced}{constants})"


def _rebuild(cls, args, constants):
    """An unpickled :class:`ContractExpression`: rebuilt from its plan, with its constants."""
    expr = cls(*args)
    if constants is not None:
        expr._constants, expr._constant_arrays = constants
    return expr


def _wrt(wrt, n=None):
    """``wrt`` as a list of operand positions (``None``: all); a negative or huge position
    is a ``ValueError`` with the engine's message for a position out of range."""
    if wrt is None:
        return None
    try:
        wrt = [operator.index(wrt)]
    except TypeError:
        wrt = list(wrt)
    for w in wrt:
        if _index(w) is None:
            there = "" if n is None else f": there are {n}"
            raise ValueError(f"shape error: cannot differentiate with respect to operand {w!r}{there}")
    return [_index(w) for w in wrt]


def contract_expression(
    eq: str, *shapes, optimize="greedy", memory_limit=None, sliced_inds=None, constants=None, use_blas=True, **kwargs
):
    """A :class:`ContractExpression` for operands of ``shapes`` (tuples of ints).

    ``constants`` (opt_einsum's argument) lists positions whose entry is an array instead of
    a shape: the expression keeps those arrays and is called with the other operands only.
    (They are contracted on each call, not folded ahead as opt_einsum does.)

    As in opt_einsum: ``use_blas`` is accepted (and, as in :func:`contract`, has no effect);
    ``optimize=False`` (no path: one loop over every label) is a ``ValueError``, since an
    expression is compiled along a path; ``out`` and ``backend`` belong to the call, so
    giving them here is a ``ValueError``. An output larger than ``memory_limit`` is a
    ``MemoryError`` here, as in :func:`contract_path`, not on the first call.

    >>> import numpy as np, cgx
    >>> expr = cgx.contract_expression("ij,j->", (2, 2), (2,))
    >>> value, (da, dx) = expr.value_and_grad(np.eye(2), np.array([1.0, 2.0]))
    >>> float(value), dx.tolist()
    (3.0, [1.0, 1.0])
    """
    if optimize is False:
        raise ValueError("contract_expression: optimize=False asks for no path, but an expression is compiled along one")
    for name, value in kwargs.items():
        if name in ("out", "backend"):
            if value is not None:
                raise ValueError(f"contract_expression: {name!r} is given when calling the expression, not when building it")
        else:
            raise TypeError(f"contract_expression() got an unexpected keyword argument {name!r}")
    eq, shapes = _subscripts(eq, shapes)
    constant = _constant_positions(constants, len(shapes))
    if constant:
        import numpy as np

        arrays = {p: np.asarray(shapes[p]) for p in constant}
        shapes = [arrays[p].shape if p in arrays else s for p, s in enumerate(shapes)]
    shape_list = [_shape_of(s, True) for s in shapes]
    limit = _memory_limit(memory_limit, shape_list)
    path = _find_path(eq, shape_list, optimize, limit)
    sliced = _optimizer_slices(optimize, _sliced(sliced_inds))
    expr = ContractExpression(eq, [list(s) for s in shape_list], path, limit, sliced)
    _check_output_limit(expr, limit)
    if constant:
        expr._constants = tuple(constant)
        expr._constant_arrays = tuple(arrays[p] for p in constant)
    return expr


def _check_output_limit(expr, limit):
    """``MemoryError`` if ``expr``'s output has more than ``limit`` elements: the output is
    held whole, so no slicing brings it under the limit."""
    output = float(_prod(expr.output_shape))
    if limit is not None and output > limit:
        # The words of `contract`'s error (the engine's check on a call), for the same case.
        raise MemoryError(f"`{expr.eq}`: the largest intermediate has {output:.0f} elements, more than memory_limit={limit:.0f}")


def _constant_positions(constants, n: int) -> list[int]:
    """``constants`` as sorted distinct operand positions below ``n``, or a ``ValueError``."""
    if constants is None:
        return []
    positions = []
    for c in constants:
        p = _index(c)
        if p is None or p >= n:
            raise ValueError(f"constants: {c!r} is not the position of one of the {n} operands")
        positions.append(p)
    return sorted(set(positions))
