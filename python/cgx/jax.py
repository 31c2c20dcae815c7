"""JAX wrapper: ``cgx.jax.contract`` is a JAX function whose VJP is the engine's.

``jax.custom_vjp`` over ``jax.pure_callback``: the forward pass and the backward pass each
call the compiled expression on the host (inside ``jax.jit`` too; under ``jax.vmap`` the
callback runs once per batch element). Requires JAX (``pip install jax``); import it as
``import cgx.jax``.

JAX's VJP is the transpose ``c ↦ Jᵀc``; the engine's gradient is the adjoint
``c ↦ Jᴴc = conj(Jᵀ conj(c))``, so the backward pass conjugates around it, and a real
operand of a complex contraction gets the real part of its cotangent, as in JAX.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from ._expression import ContractExpression
from ._parser import memory_limit_of
from ._paths import find_path

__all__ = ["contract"]


@functools.lru_cache(maxsize=256)
def _expression(eq: str, shapes: tuple[tuple[int, ...], ...], optimize: Any) -> ContractExpression:
    path = find_path(eq, shapes, optimize, None)
    return ContractExpression(eq, [list(s) for s in shapes], path, memory_limit_of(None, shapes))


@functools.lru_cache(maxsize=256)
def _function(
    eq: str, shapes: tuple[tuple[int, ...], ...], dtypes: tuple[np.dtype[Any], ...], optimize: Any, x64: bool
) -> Callable[..., Any]:
    expr = _expression(eq, shapes, optimize)
    # JAX's result dtype of the operands: float32 for float32 operands, and for any float
    # operands with x64 off (the engine computes in double; the callbacks cast back).
    out_dtype = np.dtype(jnp.result_type(*dtypes) if dtypes else jax.dtypes.canonicalize_dtype(np.float64))
    out = jax.ShapeDtypeStruct(tuple(expr.output_shape), out_dtype)
    # Integer and bool operands have no gradient (JAX's float0 cotangents, given outside
    # the callback).
    inexact = tuple(np.issubdtype(d, np.inexact) for d in dtypes)
    wrt = [i for i, yes in enumerate(inexact) if yes]
    grads = tuple(jax.ShapeDtypeStruct(shapes[i], dtypes[i]) for i in wrt)

    def value(*xs: Any) -> Any:
        return np.asarray(expr(*[np.asarray(x) for x in xs]), dtype=out_dtype)

    def grad(c: Any, *xs: Any) -> tuple[Any, ...]:
        c = np.conj(np.asarray(c))
        _, gs = expr.value_and_grad(*[np.asarray(x) for x in xs], wrt=wrt, cotangent=c)
        out = []
        for i, g in zip(wrt, gs):
            d = dtypes[i]
            g = np.conj(g)
            out.append(np.asarray(g if np.issubdtype(d, np.complexfloating) else np.real(g), dtype=d))
        return tuple(out)

    @jax.custom_vjp  # type: ignore[untyped-decorator]  # JAX is read as untyped
    def f(*xs: Any) -> Any:
        return jax.pure_callback(value, out, *xs, vmap_method="sequential")

    def fwd(*xs: Any) -> tuple[Any, tuple[Any, ...]]:
        return f(*xs), xs

    def bwd(xs: tuple[Any, ...], c: Any) -> tuple[Any, ...]:
        gs = iter(jax.pure_callback(grad, grads, c, *xs, vmap_method="sequential") if wrt else ())
        return tuple(next(gs) if yes else np.zeros(s, jax.dtypes.float0) for yes, s in zip(inexact, shapes))

    f.defvjp(fwd, bwd)
    function: Callable[..., Any] = f
    return function


def contract(eq: str, *operands: Any, optimize: Any = "greedy") -> Any:
    """``opt_einsum.contract`` for JAX arrays, differentiable (reverse mode) by the engine.

    ``optimize`` as in :func:`cgx.contract`, but hashable (a path as a tuple of tuples).
    The result has JAX's result dtype of the operands (``jnp.result_type``: float32 for
    float32 operands, and with ``jax_enable_x64`` off); floats and complex numbers are
    contracted in double precision and cast to it, integers and bools exactly (as
    :func:`cgx.contract` does; they get no gradient).
    """
    if isinstance(optimize, list):
        optimize = tuple(tuple(step) for step in optimize)
    shapes = tuple(tuple(int(d) for d in np.shape(x)) for x in operands)
    # The dtypes JAX gives the operands (numpy float64 becomes float32 with x64 off): the
    # callbacks receive and must return those.
    dtypes = tuple(np.dtype(jax.dtypes.canonicalize_dtype(getattr(x, "dtype", np.float64))) for x in operands)
    return _function(eq, shapes, dtypes, optimize, bool(jax.config.jax_enable_x64))(*operands)
