""":class:`ContractExpression`, a contraction compiled once for fixed shapes and called
many times, and :func:`contract_expression`, which builds it (opt_einsum's names).

The compiled half is the extension's ``_core.Expression`` (planned once, compiled once
per dtype, pickled as its plan); this subclass adds opt_einsum's conventions: constants,
``wrt`` positions counted among the operands a call takes, numpy's dtypes and ``out``,
other libraries' arrays, ``shared_intermediates`` and ``strip_exponent``.
"""

from __future__ import annotations


from collections.abc import Sequence
from typing import Any, Callable, Optional, Union

from numpy.typing import NDArray

from . import _core, _dispatch, _numpy, _scaled, _sharing, _threads
from ._numpy import along, by_numpy, cast_result, check_keywords, dtype_of, engine_dtypes, finish, result_dtype
from ._parser import constant_positions, index, memory_limit_of, prod, shape_of, sliced_labels, subscripts, wrt_positions
from ._paths import find_path, optimizer_slices

__all__ = ["ContractExpression", "contract_expression"]


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
    _constants: tuple[int, ...] = ()
    _constant_arrays: tuple[Any, ...] = ()

    def _full(self, arrays: tuple[Any, ...]) -> tuple[Any, ...]:
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

    def _full_wrt(self, wrt: Any) -> Optional[list[int]]:
        """``wrt`` (positions among the operands a call takes) as positions in the whole
        contraction; ``None`` means every operand that is not a constant."""
        variables = [p for p in range(len(self.shapes)) if p not in self._constants]
        wrt = wrt_positions(wrt, len(variables))
        if wrt is None:
            return variables if self._constants else None
        for w in wrt:
            if w >= len(variables):
                raise ValueError(f"shape error: cannot differentiate with respect to operand {w}: there are {len(variables)}")
        return [variables[w] for w in wrt]

    def __call__(
        self, *arrays: Any, out: Any = None, backend: Any = "auto", strip_exponent: Optional[bool] = None, threads: Optional[int] = None
    ) -> Any:
        """The contraction of ``arrays`` in numpy's result dtype of their dtypes, as
        :func:`contract` gives it; with ``out`` (an array of the result's shape), computed
        in the result dtype of the arrays and ``out``, written there under numpy's
        ``'safe'`` casting and returned. ``backend`` as in :func:`contract` (arrays of
        another library are contracted by it along this expression's path; ``out`` then
        receives the result by ``out[...] = result``). ``strip_exponent`` as in
        :func:`contract`: ``(mantissa, exponent)`` with ``True``, for numpy operands.
        ``threads`` as in :func:`contract`, and so for every method of an expression."""
        with _threads.threads(threads):
            return self._call_on_threads(arrays, out, backend, strip_exponent)

    def _call_on_threads(self, arrays: tuple[Any, ...], out: Any, backend: Any, strip_exponent: Optional[bool]) -> Any:
        """``__call__`` on the threads it chose."""
        _scaled.check_mode(strip_exponent)
        library = _dispatch.library(arrays, backend)
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
        if strip_exponent is None and out is None and backend in ("auto", "numpy") and not _sharing.ACTIVE and engine_dtypes(arrays):
            # The engine says whether the result left the range: its threads read it
            # right after writing it (an element-wise product's kernel as it writes it).
            result, left = self._call_checked(*arrays)
            if left is None:
                left = _scaled.left_range(result)
        else:
            result = self._plain_call(arrays, out, backend)
            left = strip_exponent is None and out is None and _scaled.left_range(result)
        if left and _scaled.finite(arrays):
            return self._scaled(_scaled.engine_arrays(arrays), fit=True)
        return result

    def _plain_call(self, arrays: tuple[Any, ...], out: Any, backend: Any) -> Any:
        """``__call__`` without ``strip_exponent``, on the whole contraction's operands."""
        if out is not None or backend not in ("auto", "numpy"):
            check_keywords("K", "safe", backend)
            if hasattr(out, "dtype"):
                # As `contract` does: computed in the result dtype of the arrays and `out`.
                import numpy as np

                dtype = np.result_type(*[dtype_of(x) for x in arrays], out.dtype)
                arrays = tuple(np.asarray(x).astype(dtype, copy=False) for x in arrays)
            return finish(self._call(arrays), arrays, out, "K", "safe")
        if _sharing.ACTIVE:
            return self._call(arrays)
        if engine_dtypes(arrays):
            return super().__call__(*arrays)
        return self._typed(arrays)

    def _call(self, arrays: tuple[Any, ...]) -> Any:
        """``__call__`` after its keywords: shared (inside ``shared_intermediates``, unless
        sliced), by the engine, or typed."""
        cache = _sharing.current()
        if cache is not None and not self.sliced_inds:
            self._check_shapes(arrays)
            return _sharing.run(cache, self, arrays, _numpy.contract_typed)
        return super().__call__(*arrays) if engine_dtypes(arrays) else self._typed(arrays)

    def _check_shapes(self, arrays: Sequence[Any]) -> None:
        """``ValueError`` unless ``arrays`` have the shapes the expression was built for."""
        if len(arrays) != len(self.shapes):
            raise ValueError(f"shape error: `{self.eq}` takes {len(self.shapes)} operands but {len(arrays)} were given")
        for n, (a, s) in enumerate(zip(arrays, self.shapes)):
            if list(shape_of(a, False)) != list(s):
                raise ValueError(
                    f"shape error: operand {n} of `{self.eq}` has shape {list(shape_of(a, False))} but the expression was built for {list(s)}"
                )

    def _typed(self, arrays: tuple[Any, ...]) -> NDArray[Any]:
        """``__call__`` for operands that are not all float64 or complex128."""
        dtype = result_dtype(arrays)
        if not by_numpy(dtype):
            out = super().__call__(*arrays)
            return cast_result(out, dtype) if dtype is not None and dtype.kind in "fc" else out
        import numpy as np

        assert dtype is not None  # by_numpy(None) is False
        ndarrays = [np.asarray(x) for x in arrays]
        self._check_shapes(ndarrays)
        return along(self, ndarrays, dtype, self.memory_limit)

    def _range(self, start: Any, stop: Any) -> tuple[int, Optional[int]]:
        """``(start, stop)`` checked to be slice indices (negative ones are errors, as in
        the engine, not counted from the end)."""
        n = self.n_slices
        first, last = index(start), None if stop is None else index(stop)
        if first is None or (stop is not None and last is None):
            shown = "" if stop is None else stop
            raise ValueError(f"slicing error: slice range {start}..{shown} is not within 0..{n} ({n} slices)")
        return first, last

    def eval_slices(self, *arrays: Any, start: int = 0, stop: Optional[int] = None, threads: Optional[int] = None) -> NDArray[Any]:
        """The sum of slices ``start..stop`` (to the last if ``None``), of the output's shape."""
        with _threads.threads(threads):
            value: NDArray[Any] = self._eval_slices(self._full(arrays), *self._range(start, stop))
        return value

    def eval_blocks(
        self, *arrays: Any, start: int = 0, stop: Optional[int] = None, threads: Optional[int] = None
    ) -> tuple[int, NDArray[Any]]:
        """``(first, blocks)``: slices ``start..stop`` by output blocks, never of the output's
        full shape. A block is the output at one value of each sliced label of the output
        (counted over those labels in ``sliced_inds`` order, the last fastest; one block if
        none is in the output), summed over the range's values of the other sliced labels;
        ``blocks[i]`` is block ``first + i``, of the output's shape without its sliced axes.
        With the output's sliced labels first in ``sliced_inds``, a range holds about its
        share of the blocks."""
        with _threads.threads(threads):
            blocks: tuple[int, NDArray[Any]] = self._eval_slices(self._full(arrays), *self._range(start, stop), True)
        return blocks

    def grad_slices(
        self,
        *arrays: Any,
        start: int = 0,
        stop: Optional[int] = None,
        wrt: Any = None,
        cotangent: Any = None,
        threads: Optional[int] = None,
    ) -> tuple[NDArray[Any], ...]:
        """The gradients (one per operand in ``wrt``) summed over slices ``start..stop``;
        ``cotangent`` as in ``value_and_grad`` (a scalar: every slice takes it as it is)."""
        with _threads.threads(threads):
            return self._grad_slices(self._full(arrays), *self._range(start, stop), self._full_wrt(wrt), cotangent)

    def value_and_grad_slices(
        self,
        *arrays: Any,
        start: int = 0,
        stop: Optional[int] = None,
        wrt: Any = None,
        cotangent: Any = None,
        blocks: bool = False,
        cotangent_first: Optional[int] = None,
        threads: Optional[int] = None,
    ) -> tuple[Any, tuple[NDArray[Any], ...]]:
        """``(value, grads)`` of slices ``start..stop`` in one pass (each slice's forward runs
        once): ``value`` as ``eval_slices`` gives it, or as ``eval_blocks`` with ``blocks``;
        ``grads`` as ``grad_slices``. With ``cotangent_first``, ``cotangent`` holds output
        blocks ``cotangent_first..`` stacked as ``eval_blocks`` stacks the value (at least
        those the range touches), never the output's full shape, and the value comes by
        blocks; a scalar ``cotangent`` (with or without ``cotangent_first``) is that value in
        every entry of every block, as in ``value_and_grad``."""
        start, stop = self._range(start, stop)
        positions = self._full_wrt(wrt)
        with _threads.threads(threads):
            return self._value_and_grad_slices(self._full(arrays), start, stop, positions, cotangent, blocks, cotangent_first)

    def _build_args(self) -> tuple[str, list[list[int]], list[tuple[int, int]], Optional[float], Optional[list[str]]]:
        """The plan this expression is built from: the arguments of its constructor."""
        return (self.eq, self.shapes, self.path, self.memory_limit, self.sliced_inds or None)

    def __reduce__(self) -> tuple[Callable[..., ContractExpression], tuple[Any, ...]]:
        constants = (self._constants, self._constant_arrays) if self._constants else None
        return (_rebuild, (type(self), self._build_args(), constants))

    def value_and_grad(
        self,
        *arrays: Any,
        wrt: Any = None,
        cotangent: Any = None,
        strip_exponent: Optional[bool] = None,
        threads: Optional[int] = None,
        checkpoint: Union[int, str, None] = None,
    ) -> Any:
        """``(value, grads)``: the contraction and one gradient per operand in ``wrt`` (all if
        ``None``; an int for one operand), for ``cotangent``: of the output's shape, or a
        scalar ``c`` (a Python or numpy number, or a 0-d array) that stands for ``c``
        everywhere: the gradients of ``c * f(x).sum()`` (of ``Re(conj(c) * f(x).sum())`` for
        complex values), computed without a cotangent of the output's shape when the last
        step is a contraction (its operands are summed over the labels the other lacks, and
        its gradients are those sums broadcast; ``strip_exponent=True``, the automatic scaled rerun and
        ``checkpoint`` fill ``c`` into the output's shape instead); ``None`` means 1 and
        needs a scalar output. ``strip_exponent`` as in :func:`contract`, for
        the value and each gradient: with ``True`` each is ``(mantissa, exponent)``; by
        default, when one has left the finite range, all are computed again scaled and each
        comes as an array if it fits, else as the pair. ``threads`` as in
        :func:`contract`: the forward and reverse steps run on them. ``checkpoint`` (bytes,
        or a string such as ``"64MiB"``) bounds the tensors of value and gradients: the
        reverse pass keeps the forward intermediates that fit and recomputes the others
        (a ``MemoryError`` if even recomputing every one does not fit; unsliced expressions
        only, on the calling thread)."""
        with _threads.threads(threads):
            return self._value_and_grad_on_threads(arrays, wrt, cotangent, strip_exponent, checkpoint)

    def _value_and_grad_on_threads(
        self, arrays: tuple[Any, ...], wrt: Any, cotangent: Any, strip_exponent: Optional[bool], checkpoint: Union[int, str, None] = None
    ) -> Any:
        """``value_and_grad`` on the threads it chose."""
        _scaled.check_mode(strip_exponent)
        arrays, wrt = self._full(arrays), self._full_wrt(wrt)
        if checkpoint is not None and strip_exponent:
            raise ValueError("checkpoint and strip_exponent=True cannot be combined: the scaled gradient keeps every intermediate")
        if strip_exponent:
            return self._scaled(_scaled.engine_arrays(arrays), grads=True, wrt=wrt, cotangent=cotangent)
        left: Optional[bool] = None
        if checkpoint is None and strip_exponent is None:
            # `left`: whether a float64 result left the range, read by the engine's threads
            # as they finish (by moduli for complex results); `None` where it did not.
            value, grads, left = self._value_and_grad_checked(arrays, wrt, cotangent)
        else:
            target = None if checkpoint is None else _checkpoint_target(checkpoint)
            value, grads = self._value_and_grad(arrays, wrt, cotangent, target)
        if strip_exponent is None and left is None:
            left = _scaled.any_left_range(value, grads)
        if strip_exponent is None and left and _scaled.finite(arrays):
            return self._scaled(_scaled.engine_arrays(arrays), grads=True, wrt=wrt, cotangent=cotangent, fit=True)
        return value, grads

    def hvp(
        self, *arrays: Any, directions: Sequence[Any], wrt: Any = None, cotangent: Any = None, threads: Optional[int] = None
    ) -> tuple[NDArray[Any], ...]:
        """Hessian-vector products of ``x ↦ <cotangent, f(x)>`` in the operands ``wrt``: one
        direction per ``wrt`` operand in, one array per ``wrt`` operand out. A sliced
        expression sums its slices' products, one slice at a time, so its memory is that
        of a slice (the operands, directions and products held whole). ``cotangent`` as in
        ``value_and_grad``: a scalar ``c`` is filled into the output's shape."""
        with _threads.threads(threads):
            return self._hvp(self._full(arrays), list(directions), self._full_wrt(wrt), cotangent)

    def hvp_slices(
        self,
        *arrays: Any,
        directions: Sequence[Any],
        start: int = 0,
        stop: Optional[int] = None,
        wrt: Any = None,
        cotangent: Any = None,
        threads: Optional[int] = None,
    ) -> tuple[NDArray[Any], ...]:
        """The Hessian-vector products (as ``hvp``) summed over slices ``start..stop`` (to the
        last if ``None``): over disjoint ranges covering every slice, they add up to ``hvp``."""
        start, stop = self._range(start, stop)
        with _threads.threads(threads):
            return self._hvp_slices(self._full(arrays), list(directions), start, stop, self._full_wrt(wrt), cotangent)

    def __repr__(self) -> str:
        sliced = f", sliced_inds={self.sliced_inds}" if self.sliced_inds else ""
        constants = f", constants={list(self._constants)}" if self._constants else ""
        return f"ContractExpression({self.eq!r}, shapes={self.shapes}, path={self.path}{sliced}{constants})"


def _rebuild(
    cls: type[ContractExpression], args: tuple[Any, ...], constants: Optional[tuple[tuple[int, ...], tuple[Any, ...]]]
) -> ContractExpression:
    """An unpickled :class:`ContractExpression`: rebuilt from its plan, with its constants."""
    expr = cls(*args)
    if constants is not None:
        expr._constants, expr._constant_arrays = constants
    return expr


def contract_expression(
    eq: Any,
    *shapes: Any,
    optimize: Any = "greedy",
    memory_limit: Any = None,
    sliced_inds: Any = None,
    constants: Any = None,
    use_blas: Any = True,
    **kwargs: Any,
) -> ContractExpression:
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
    eq, args = subscripts(eq, shapes)
    constant = constant_positions(constants, len(args))
    if constant:
        import numpy as np

        arrays = {p: np.asarray(args[p]) for p in constant}
        args = tuple(arrays[p].shape if p in arrays else s for p, s in enumerate(args))
    shape_list = [shape_of(s, True) for s in args]
    limit = memory_limit_of(memory_limit, shape_list)
    path = find_path(eq, shape_list, optimize, limit)
    sliced = optimizer_slices(optimize, sliced_labels(sliced_inds))
    expr = ContractExpression(eq, [list(s) for s in shape_list], path, limit, sliced)
    _check_output_limit(expr, limit)
    if constant:
        expr._constants = tuple(constant)
        expr._constant_arrays = tuple(arrays[p] for p in constant)
    return expr


def _check_output_limit(expr: ContractExpression, limit: Optional[float]) -> None:
    """``MemoryError`` if ``expr``'s output has more than ``limit`` elements: the output is
    held whole, so no slicing brings it under the limit."""
    output = float(prod(expr.output_shape))
    if limit is not None and output > limit:
        # The words of `contract`'s error (the engine's check on a call), for the same case.
        raise MemoryError(f"`{expr.eq}`: the largest intermediate has {output:.0f} elements, more than memory_limit={limit:.0f}")


def _checkpoint_target(checkpoint: Union[int, str]) -> str:
    """``value_and_grad``'s ``checkpoint`` as the engine reads it: a string of bytes (the
    engine parses units, as the command line's ``--memory-limit``)."""
    if isinstance(checkpoint, bool) or not isinstance(checkpoint, (int, str)):
        raise TypeError(f"checkpoint must be a number of bytes or a string such as '64MiB', not {checkpoint!r}")
    if isinstance(checkpoint, int) and checkpoint < 0:
        raise ValueError(f"checkpoint: {checkpoint} is not a number of bytes")
    return str(checkpoint)
