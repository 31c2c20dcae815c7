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
:func:`contract_expression` with shapes in place of operands): see ``_parser.subscripts``. An
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

This module is the public API (``contract``, ``contract_path``, and
``contract_expression`` and ``ContractExpression`` from ``_expression``); each concern
below it has its module, as opt_einsum splits ``parser``, ``paths``, ``contract``,
``sharing`` and ``backends``: ``_parser`` reads the arguments, ``_paths`` turns
``optimize`` into the engine's path and reports it (``PathInfo``), ``_numpy`` holds
numpy's dtypes and keywords and the fallback engine, ``_dispatch`` other libraries'
arrays, ``_sharing`` ``shared_intermediates`` and ``_scaled`` ``strip_exponent``.
"""

from __future__ import annotations

from typing import Any, Optional

from . import _core, _dispatch, _numpy, _scaled, _sharing, _threads
from ._expression import ContractExpression, contract_expression
from ._numpy import NUMPY_KWARGS, check_keywords, contract_cast, dtype_of, engine_dtypes, finish
from ._parser import get_symbol, is_sequence, memory_limit_of, prod, shape_of, sliced_labels, subscripts
from ._paths import PathInfo, check_finder_name, find_path, optimizer_slices
from ._threads import get_num_threads, set_num_threads, threads
from ._sharing import shared_intermediates

__all__ = [
    "contract",
    "contract_path",
    "contract_expression",
    "ContractExpression",
    "PathInfo",
    "get_symbol",
    "shared_intermediates",
    "threads",
    "set_num_threads",
    "get_num_threads",
]


def contract(
    eq: Any,
    *operands: Any,
    optimize: Any = "greedy",
    memory_limit: Any = None,
    sliced_inds: Any = None,
    strip_exponent: Optional[bool] = None,
    threads: Optional[int] = None,
    **kwargs: Any,
) -> Any:
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

    ``threads`` (at least 1) runs this call on that many threads, ``None`` on the
    process's setting (:func:`cgx.set_num_threads`, every core by default); the engine
    uses a second thread only where the contraction's estimated cost says it pays (see
    ``cgx._threads``).
    """
    with _threads.threads(threads):
        return _contract_call(eq, operands, optimize, memory_limit, sliced_inds, strip_exponent, kwargs)


def _contract_call(
    eq: Any,
    operands: tuple[Any, ...],
    optimize: Any,
    memory_limit: Any,
    sliced_inds: Any,
    strip_exponent: Optional[bool],
    kwargs: dict[str, Any],
) -> Any:
    """:func:`contract` on the threads it chose."""
    _scaled.check_mode(strip_exponent)
    if not isinstance(eq, str):
        eq, operands = subscripts(eq, operands)
    if isinstance(optimize, str) and optimize != "greedy":
        check_finder_name(optimize)  # before any other argument, as opt_einsum does
    sliced = sliced_labels(sliced_inds)
    if strip_exponent:
        if kwargs:
            raise TypeError(f"strip_exponent=True does not combine with numpy's keywords ({', '.join(kwargs)})")
        library = _dispatch.foreign(operands)
        if library not in (None, "object"):
            raise TypeError(f"strip_exponent=True takes numpy operands, not {library}'s arrays")
        return _contract_scaled(eq, operands, optimize, memory_limit, sliced, False)
    out, left = _contract_checked(eq, operands, optimize, memory_limit, sliced, kwargs, strip_exponent is None)
    if strip_exponent is None and not kwargs:
        if left is None:
            left = _scaled.left_range(out)
        if left and _scaled.finite(operands):
            return _contract_scaled(eq, operands, optimize, memory_limit, sliced, True)
    return out


def _contract_scaled(
    eq: str, operands: tuple[Any, ...], optimize: Any, memory_limit: Any, sliced: Optional[list[str]], fit: bool
) -> Any:
    """The scaled contraction of ``operands`` (see ``cgx._scaled``): ``(mantissa,
    exponent)``, or with ``fit`` a plain array when the value fits."""
    arrays = _scaled.engine_arrays(operands)
    shapes = [a.shape for a in arrays]
    limit = memory_limit_of(memory_limit, shapes)
    path = find_path(eq, shapes, optimize, limit)
    expr = _core.Expression(eq, [list(s) for s in shapes], path, limit, optimizer_slices(optimize, sliced))
    return expr._scaled(arrays, fit=fit)


def _contract_checked(
    eq: str,
    operands: tuple[Any, ...],
    optimize: Any,
    memory_limit: Any,
    sliced: Optional[list[str]],
    kwargs: dict[str, Any],
    check: bool = True,
) -> tuple[Any, Optional[bool]]:
    """:func:`contract` after its arguments are read, without ``strip_exponent``:
    ``(result, left)``, with ``left`` whether a float64 result left float64's range where
    the engine found that out on the call's threads (on the common path, with ``check``),
    ``None`` otherwise (the caller reads the result if it asks)."""
    if kwargs:
        backend = kwargs.get("backend", "auto")
        library = _dispatch.library(operands, backend)
    else:  # the common case: one pass over the operands' types
        backend, library = "auto", _dispatch.foreign(operands)
    if library is not None:
        if library == "object":
            import numpy as np

            operands = tuple(np.asarray(x, dtype=object) for x in operands)
            kwargs = {k: v for k, v in kwargs.items() if k != "backend"}
        else:
            return _contract_foreign(eq, operands, optimize, memory_limit, library, backend != "auto", kwargs), None
    if kwargs:
        for name in kwargs:
            if name not in NUMPY_KWARGS:
                raise TypeError(f"contract() got an unexpected keyword argument {name!r}")
        return _contract_numpy_kwargs(eq, operands, optimize, memory_limit, sliced, **kwargs), None
    if _sharing.ACTIVE and memory_limit is None and sliced is None:
        cache = _sharing.current()
        if cache is not None:
            return _contract_shared(cache, eq, operands, optimize), None
    if memory_limit is None and sliced is None and (optimize == "greedy" if isinstance(optimize, str) else optimize is None):
        if engine_dtypes(operands):  # the common case, without a further call
            if not check:  # `strip_exponent=False`: no one reads the verdict
                return _core.contract(eq, operands), None
            return _core._contract_checked(eq, operands)
        return contract_cast(eq, operands), None
    shapes = [shape_of(x, False) for x in operands]
    limit = memory_limit_of(memory_limit, shapes)
    path = find_path(eq, shapes, optimize, limit)
    return _numpy.contract_typed(eq, operands, path, limit, optimizer_slices(optimize, sliced)), None


# Plans of contractions done by other libraries, by (eq, shapes, optimize): a jitted JAX
# function traces the same call many times.
_FOREIGN_PLANS: dict[Any, _core.PlanTuple] = {}


def _foreign_plan(eq: str, shapes: list[tuple[int, ...]], optimize: Any, memory_limit: Any) -> _core.PlanTuple:
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
        limit = memory_limit_of(memory_limit, shapes)
        path = find_path(eq, shapes, optimize, limit)
        plan = _core.Expression(eq, [list(s) for s in shapes], path)._plan()
        if key is not None:
            if len(_FOREIGN_PLANS) >= 512:
                _FOREIGN_PLANS.clear()
            _FOREIGN_PLANS[key] = plan
    return plan


def _contract_foreign(
    eq: str, operands: tuple[Any, ...], optimize: Any, memory_limit: Any, library: str, convert: bool, kwargs: dict[str, Any]
) -> Any:
    """``contract`` by another library (``_dispatch``): its ``einsum`` along the engine's
    path, the result of its type (or, with ``convert``, numpy operands converted to it and
    the result back)."""
    # numpy's keywords at their defaults say nothing; others would be silently dropped.
    defaults = {"out": None, "dtype": None, "order": "K", "casting": "safe"}
    for name, value in kwargs.items():
        if name not in NUMPY_KWARGS:
            raise TypeError(f"contract() got an unexpected keyword argument {name!r}")
        if name in defaults and (value is not None if defaults[name] is None else value != defaults[name]):
            raise ValueError(f"{name}={value!r} applies to numpy arrays; these operands are contracted by {library!r}")
    shapes = [tuple(int(d) for d in shape_of(x, False)) for x in operands]
    return _dispatch.run(_foreign_plan(eq, shapes, optimize, memory_limit), operands, library, convert)


def _contract_shared(cache: dict[Any, Any], eq: str, operands: tuple[Any, ...], optimize: Any) -> Any:
    """``contract`` inside ``shared_intermediates``: step by step, each step's result
    taken from ``cache`` or computed and kept (``_sharing.run``)."""
    shapes = [shape_of(x, False) for x in operands]
    expr = _core.Expression(eq, [list(s) for s in shapes], find_path(eq, shapes, optimize, None))
    return _sharing.run(cache, expr, operands, _numpy.contract_typed)


def _contract_numpy_kwargs(
    eq: str,
    operands: tuple[Any, ...],
    optimize: Any,
    memory_limit: Any,
    sliced: Optional[list[str]],
    out: Any = None,
    dtype: Any = None,
    order: Any = "K",
    casting: Any = "safe",
    use_blas: Any = True,
    backend: Any = "auto",
) -> Any:
    """``contract`` with numpy's ``out``, ``dtype``, ``order`` and ``casting`` and
    opt_einsum's ``use_blas`` and ``backend``, checked as ``numpy.einsum`` checks them."""
    check_keywords(order, casting, backend)
    if dtype is None and out is not None and hasattr(out, "dtype"):
        # numpy computes in the result dtype of the operands and `out` (int8 operands
        # into an int64 `out` do not wrap).
        import numpy as np

        dtype = np.result_type(*[dtype_of(x) for x in operands], out.dtype)
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
    return finish(result, operands, out, order, casting)


def contract_path(
    eq: Any, *operands: Any, optimize: Any = "greedy", memory_limit: Any = None, shapes: bool = False, sliced_inds: Any = None
) -> tuple[list[tuple[int, int]], PathInfo]:
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
    eq, operands = subscripts(eq, operands)
    shape_list = [shape_of(x, shapes) for x in operands]
    limit = memory_limit_of(memory_limit, shape_list)
    path = find_path(eq, shape_list, optimize, limit)
    sliced = optimizer_slices(optimize, sliced_labels(sliced_inds))
    expr = _core.Expression(eq, [list(s) for s in shape_list], path, limit, sliced)
    plan = expr._plan()
    # The path as the engine runs it, opt_einsum's format: the first sums (one-operand
    # steps, each moving its result to the end) before the pairs.
    # Pairs in increasing order, as opt_einsum writes a step (a set of positions; the
    # engine's order of the two only says which operand its kernel reads first), unless the
    # path was given: then as given, as opt_einsum returns it.
    given = is_sequence(optimize)

    def pair(i: int, j: int) -> tuple[int, int]:
        return (i, j) if given else (min(i, j), max(i, j))

    run: list[tuple[int, ...]] = list(expr.path) if len(shape_list) < 2 else [(i,) if i == j else pair(i, j) for (i, j), *_ in plan[3]]
    info = PathInfo(eq, shape_list, plan, run, expr.sliced_inds, expr.n_slices, expr.slicing_overhead)
    output = float(prod(expr.output_shape))
    if limit is not None and (output > limit or (not expr.sliced_inds and info.largest_intermediate > limit)):
        raise MemoryError(
            f"`{eq}`: the largest intermediate has {max(output, info.largest_intermediate):.0f} elements, "
            f"more than memory_limit={limit:.0f}"
        )
    return [pair(i, j) for i, j in expr.path], info
