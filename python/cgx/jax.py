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

import jax
import numpy as np

from ._einsum import ContractExpression, _find_path, _memory_limit

__all__ = ["contract"]


@functools.lru_cache(maxsize=256)
def _expression(eq: str, shapes: tuple, optimize) -> ContractExpression:
    path = _find_path(eq, shapes, optimize, None)
    return ContractExpression(eq, [list(s) for s in shapes], path, _memory_limit(None, shapes))


@functools.lru_cache(maxsize=256)
def _function(eq: str, shapes: tuple, dtypes: tuple, optimize):
    expr = _expression(eq, shapes, optimize)
    out_dtype = np.result_type(np.float64, *dtypes)
    out = jax.ShapeDtypeStruct(tuple(expr.output_shape), out_dtype)
    grads = tuple(jax.ShapeDtypeStruct(s, d) for s, d in zip(shapes, dtypes))

    def value(*xs):
        return np.asarray(expr(*[np.asarray(x) for x in xs]), dtype=out_dtype)

    def grad(c, *xs):
        c = np.conj(np.asarray(c))
        _, gs = expr.value_and_grad(*[np.asarray(x) for x in xs], cotangent=c)
        out = []
        for g, d in zip(gs, dtypes):
            g = np.conj(g)
            out.append(np.asarray(g if np.issubdtype(d, np.complexfloating) else np.real(g), dtype=d))
        return tuple(out)

    @jax.custom_vjp
    def f(*xs):
        return jax.pure_callback(value, out, *xs, vmap_method="sequential")

    def fwd(*xs):
        return f(*xs), xs

    def bwd(xs, c):
        return jax.pure_callback(grad, grads, c, *xs, vmap_method="sequential")

    f.defvjp(fwd, bwd)
    return f


def contract(eq: str, *operands, optimize="greedy"):
    """``opt_einsum.contract`` for JAX arrays, differentiable (reverse mode) by the engine.

    ``optimize`` as in :func:`cgx.contract`, but hashable (a path as a tuple of tuples).
    Operands are float64 or complex128 (enable ``jax_enable_x64``); other float types are
    contracted in float64 and the result has that type.
    """
    if isinstance(optimize, list):
        optimize = tuple(tuple(step) for step in optimize)
    shapes = tuple(tuple(int(d) for d in np.shape(x)) for x in operands)
    dtypes = tuple(np.dtype(getattr(x, "dtype", np.float64)) for x in operands)
    return _function(eq, shapes, dtypes, optimize)(*operands)
