"""PyTorch wrapper: ``cgx.torch.contract`` is a ``torch.autograd.Function`` whose backward
pass is the engine's vector-Jacobian product.

Requires PyTorch (``pip install torch``; the project's CI does not install it, so its tests
skip there); import it as ``import cgx.torch``. The forward pass contracts the tensors'
data on the host (CPU tensors are read without a copy; others are copied to the host and
the result copied back to their device); the backward pass calls the compiled
expression's ``value_and_grad`` for the operands that need a gradient. It is
differentiable once: a gradient of the gradient raises.

Complex numbers follow PyTorch's convention, which is the engine's: the gradient is the
adjoint ``c ↦ Jᴴc`` for the real inner product ``Re(sum(conj(a) * b))``; a real operand of
a complex contraction gets the real part of its gradient.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch

from ._expression import ContractExpression
from ._parser import memory_limit_of
from ._paths import find_path

__all__ = ["contract"]


@functools.lru_cache(maxsize=256)
def _expression(eq: str, shapes: tuple[tuple[int, ...], ...], optimize: Any) -> ContractExpression:
    path = find_path(eq, shapes, optimize, None)
    return ContractExpression(eq, [list(s) for s in shapes], path, memory_limit_of(None, shapes))


def _host(t: torch.Tensor) -> np.ndarray:
    # resolve_conj: a lazily conjugated complex tensor holds unconjugated data.
    host: np.ndarray = t.detach().resolve_conj().resolve_neg().cpu().numpy()
    return host


class _Contract(torch.autograd.Function):  # type: ignore[misc]  # torch is read as untyped
    @staticmethod
    def forward(ctx: Any, expr: ContractExpression, *tensors: torch.Tensor) -> torch.Tensor:
        out = np.asarray(expr(*[_host(t) for t in tensors]))
        ctx.expr = expr
        ctx.save_for_backward(*tensors)
        return torch.from_numpy(out).to(tensors[0].device if tensors else "cpu")

    @staticmethod
    @torch.autograd.function.once_differentiable  # type: ignore[untyped-decorator]  # torch is read as untyped
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        tensors = ctx.saved_tensors
        wrt = [i for i, t in enumerate(tensors) if ctx.needs_input_grad[i + 1]]
        result = [None] * (1 + len(tensors))
        if not wrt:
            return tuple(result)
        c = _host(grad)
        _, grads = ctx.expr.value_and_grad(*[_host(t) for t in tensors], wrt=wrt, cotangent=c)
        for i, g in zip(wrt, grads):
            t = tensors[i]
            if not t.is_complex():
                g = np.real(g)
            result[1 + i] = torch.from_numpy(np.ascontiguousarray(g)).to(device=t.device, dtype=t.dtype)
        return tuple(result)


def contract(eq: str, *operands: torch.Tensor, optimize: Any = "greedy") -> torch.Tensor:
    """``opt_einsum.contract`` for PyTorch tensors, differentiable (backward) by the engine.

    ``optimize`` as in :func:`cgx.contract`, hashable (a path as a tuple of tuples).
    Operands of any real or complex dtype are contracted in float64 or complex128; the
    result has the operands' common dtype, as :func:`cgx.contract` gives it (float32
    operands give a float32 result), and gradients have their operand's dtype.
    """
    if isinstance(optimize, list):
        optimize = tuple(tuple(step) for step in optimize)
    operands = tuple(torch.as_tensor(x) for x in operands)
    shapes = tuple(tuple(int(d) for d in x.shape) for x in operands)
    return _Contract.apply(_expression(eq, shapes, optimize), *operands)
