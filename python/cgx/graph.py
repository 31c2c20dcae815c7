"""The scalar graph engine from Python: build a DAG of scalar operations in batches,
compile it, evaluate it, take its gradient.

The work happens in Rust (``computegraph`` builds, merges equal operations and compiles;
``tidu`` derives the gradient program). Building costs one call per batch of operations,
not one per operation::

    g = cgx.graph.Graph()
    x = g.inputs(2)                                  # ids of the inputs: [0, 1]
    p = g.add("mul", x[:1], x[1:])                   # one operation: x0 * x1
    s = g.add(["sin", "cos"], [p[0], x[0]])          # two, unary: no rhs needed
    prog = g.compile([s[0], s[1]])
    prog.eval([2.0, 0.25])                           # array([sin(0.5), cos(2.0)])
    value, grad = g.gradient(s[0]).eval([2.0, 0.25]) # sin(x0 x1) and its gradient

Values are numbered from 0 in the order they are added (inputs, constants, operation
results), and an operation may only read smaller ids, so a cycle cannot be built.
Operations (:data:`OPS`): ``add``, ``sub``, ``mul`` (binary), ``neg``, ``exp``, ``sin``,
``cos``, ``sincos`` (unary). ``sincos`` gives two values, ``sin`` at the returned id and
``cos`` at the next; ``sub`` is added as ``neg`` then ``add`` (two values, the returned
id is the difference). Mistakes (an unknown operation, an id that is not an earlier value,
inputs of the wrong length, a negative count) raise ``ValueError`` with the engine's
message, and a batch that fails adds nothing. Sizes beyond the machine (a graph of more
values than its memory holds, a batch of points whose outputs or gradients do not fit)
raise ``MemoryError`` before anything is allocated.
"""

from __future__ import annotations

from typing import Any, Union

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _core

__all__ = ["Graph", "Program", "Gradient", "OPS"]

#: The operation names, in the order of their integer codes.
OPS: tuple[str, ...] = tuple(_core.GRAPH_OPS)


def _ids(a: ArrayLike, what: str) -> NDArray[np.int64]:
    a = np.asarray(a)
    if a.ndim == 0:
        a = a.reshape(1)
    if a.ndim != 1 or (a.size and a.dtype.kind not in "iu"):
        raise ValueError(f"{what} must be a 1-d array of integer ids, not {a.dtype} of shape {a.shape}")
    return np.ascontiguousarray(a, dtype=np.int64)


def _codes(ops: Union[str, ArrayLike], n: int) -> NDArray[np.int64]:
    if isinstance(ops, str):
        return np.full(n, _core.graph_op_codes([ops])[0], dtype=np.int64)
    a = np.asarray(ops)
    if a.ndim == 0:
        a = a.reshape(1)
    if a.dtype.kind in "iu" or a.size == 0:
        return np.ascontiguousarray(a, dtype=np.int64)
    if a.dtype.kind in "USO":
        names, inverse = np.unique(a.astype(str), return_inverse=True)
        codes = np.asarray(_core.graph_op_codes([str(x) for x in names]), dtype=np.int64)
        return codes[inverse.reshape(-1)]
    raise ValueError(f"ops must be operation names or integer codes, not {a.dtype}")


def _points(inputs: ArrayLike) -> NDArray[np.float64]:
    return np.ascontiguousarray(inputs, dtype=np.float64)


class _Compiled:
    """What :class:`Program` and :class:`Gradient` share: a compiled program of the
    extension, evaluated at one point or a 2-d batch of points."""

    __slots__ = ("_p",)

    def __init__(self, p: Any) -> None:
        self._p = p

    def eval(self, inputs: ArrayLike) -> Any:
        return self._p.eval(_points(inputs))

    __call__ = eval

    @property
    def num_inputs(self) -> int:
        """Values ``eval`` takes per point."""
        n: int = self._p.num_inputs
        return n

    @property
    def instruction_count(self) -> int:
        """Instructions of the compiled program, after the engine merged equal operations."""
        n: int = self._p.instruction_count
        return n


class Program(_Compiled):
    """A compiled program (:meth:`Graph.compile`): ``eval(inputs)`` returns the outputs.

    ``inputs`` holds one value per input of the graph at compile time (by input index);
    a 2-d array evaluates one row per point and returns one row of outputs per point.
    """

    __slots__ = ()


class Gradient(_Compiled):
    """A compiled value and gradient (:meth:`Graph.gradient`): ``eval(inputs)`` returns
    ``(value, gradient)``, the gradient with one entry per ``wrt`` input (zero where the
    output does not depend on it); for a 2-d batch, a value and a gradient row per point.
    """

    __slots__ = ()


class Graph:
    """A scalar DAG, built in batches (see the module docs)."""

    __slots__ = ("_g",)

    def __init__(self) -> None:
        self._g = _core.Graph()

    @property
    def num_values(self) -> int:
        """Values added so far (the next id)."""
        return self._g.num_values

    @property
    def num_inputs(self) -> int:
        """Inputs added so far."""
        return self._g.num_inputs

    def inputs(self, n: int) -> NDArray[np.int64]:
        """Adds ``n`` inputs (numbered after the existing ones); returns their ids."""
        n = int(n)
        if n < 0:
            raise ValueError(f"the number of inputs must not be negative, got {n}")
        # The engine reports counts past its limit (2^31 values); larger ints than a
        # u64 holds would be an OverflowError on the way there.
        return self._g.inputs(min(n, 2**64 - 1))

    def constants(self, values: ArrayLike) -> NDArray[np.int64]:
        """Adds one constant per entry of ``values``; returns their ids."""
        v = np.ascontiguousarray(values, dtype=np.float64)
        return self._g.constants(v.reshape(-1))

    def add(self, ops: Union[str, ArrayLike], lhs: ArrayLike, rhs: ArrayLike | None = None) -> NDArray[np.int64]:
        """Adds one operation per entry: ``ops`` (names, integer codes, or one name for
        all), operands ``lhs`` and, for binary operations, ``rhs`` (ids of earlier values,
        earlier operations of the same batch included). Returns each operation's id."""
        lhs = _ids(lhs, "lhs")
        rhs = None if rhs is None else _ids(rhs, "rhs")
        return self._g.add(_codes(ops, len(lhs)), lhs, rhs)

    def compile(self, outputs: ArrayLike) -> Program:
        """Compiles the program computing ``outputs`` (ids) from the inputs."""
        return Program(self._g.compile(_ids(outputs, "outputs").tolist()))

    def gradient(self, output: ArrayLike, wrt: ArrayLike | None = None) -> Gradient:
        """Compiles the value of ``output`` (one id) and its gradient with respect to the
        inputs ``wrt`` (ids; all inputs by default)."""
        w = None if wrt is None else _ids(wrt, "wrt").tolist()
        return Gradient(self._g.gradient(int(_ids(output, "output")[0]), w))
