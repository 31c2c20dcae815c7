"""Arrays of other libraries keep their type, as with opt_einsum: JAX arrays are contracted
by ``jax.numpy.einsum`` along the engine's path (so ``jax.jit`` and ``jax.grad`` trace
through ``cgx.contract``), PyTorch tensors by ``torch.einsum``, Dask arrays by
``dask.array.einsum`` (lazily); ``backend=`` converts numpy operands to the named library
and back, and ``'object'`` contracts object arrays with Python arithmetic. Each library's
tests skip, saying so, when it is not installed."""

from typing import Any

from collections.abc import Sequence
import fractions

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cgx
from strategies import arrays, expressions

EQ = "ij,jk,kl->il"
SHAPES = [(2, 3), (3, 4), (4, 5)]


def operands(seed: int = 0, shapes: Sequence[tuple[int, ...]] = SHAPES) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in shapes]


def library(name: str) -> Any:
    # CI installs JAX and Dask; PyTorch is optional (a large download).
    return pytest.importorskip(name, reason=f"{name} is not installed (pip install {name.partition('.')[0]})")


def test_jax_arrays_stay_jax_arrays_and_trace() -> None:
    jax = library("jax")
    jnp = jax.numpy
    ops = operands()
    xs = [jnp.asarray(x) for x in ops]
    out = cgx.contract(EQ, *xs)
    assert isinstance(out, jax.Array)
    np.testing.assert_allclose(np.asarray(out), np.einsum(EQ, *ops), rtol=1e-5)
    # jit and grad through cgx.contract (tracers are JAX's too).
    f = jax.jit(lambda a, b, c: cgx.contract("ij,jk,kl->", a, b, c))
    np.testing.assert_allclose(float(f(*xs)), np.einsum("ij,jk,kl->", *ops), rtol=1e-5)
    ga = jax.grad(lambda a: cgx.contract("ij,jk,kl->", a, xs[1], xs[2]))(xs[0])
    np.testing.assert_allclose(np.asarray(ga), np.einsum("jk,kl->j", ops[1], ops[2])[None, :].repeat(2, 0), rtol=1e-5)
    # Forward mode too (jnp.einsum is JAX's own).
    _, t = jax.jvp(lambda a: cgx.contract(EQ, a, xs[1], xs[2]), (xs[0],), (jnp.ones_like(xs[0]),))
    np.testing.assert_allclose(np.asarray(t), np.einsum(EQ, np.ones((2, 3)), *ops[1:]), rtol=1e-5)
    # An expression called with JAX arrays, and jitted.
    expr = cgx.contract_expression(EQ, *SHAPES)
    assert isinstance(expr(*xs), jax.Array)
    np.testing.assert_allclose(np.asarray(jax.jit(expr)(*xs)), np.einsum(EQ, *ops), rtol=1e-5)


def test_jax_value_and_grad_of_an_expression_with_constants() -> None:
    jax = library("jax")
    ops = operands(1)
    expr = cgx.contract_expression("ij,jk,kl->", ops[0], SHAPES[1], ops[2], constants=[0, 2])
    value, grad = jax.jit(jax.value_and_grad(expr))(jax.numpy.asarray(ops[1]))
    np.testing.assert_allclose(float(value), np.einsum("ij,jk,kl->", *ops), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(grad), np.einsum("ij,kl->jk", ops[0], ops[2]), rtol=1e-5)


@pytest.mark.parametrize("name", ["jax", "torch", "dask"])
def test_backend_names_convert_numpy_operands_and_back(name):
    library(name)
    ops = operands(2)
    out = cgx.contract(EQ, *ops, backend=name)
    assert type(out) is np.ndarray
    np.testing.assert_allclose(out, np.einsum(EQ, *ops), rtol=1e-5)
    expr = cgx.contract_expression(EQ, *SHAPES)
    got = expr(*ops, backend=name)
    assert type(got) is np.ndarray
    np.testing.assert_allclose(got, np.einsum(EQ, *ops), rtol=1e-5)


def test_torch_tensors_stay_torch_tensors_with_gradients() -> None:
    torch = library("torch")
    ops = operands(3)
    ts = [torch.tensor(x, requires_grad=True) for x in ops]
    out = cgx.contract("ij,jk,kl->", *ts)
    assert isinstance(out, torch.Tensor)
    out.backward()
    np.testing.assert_allclose(ts[1].grad.numpy(), np.einsum("ij,kl->jk", ops[0], ops[2]), rtol=1e-10)


def test_dask_arrays_stay_lazy() -> None:
    da = library("dask.array")
    ops = operands(4, [(20, 30), (30, 40), (40, 50)])
    xs = [da.from_array(x, chunks=10) for x in ops]
    out = cgx.contract(EQ, *xs)
    assert isinstance(out, da.Array)  # nothing computed yet
    np.testing.assert_allclose(out.compute(), np.einsum(EQ, *ops), rtol=1e-10)
    expr = cgx.contract_expression(EQ, *[x.shape for x in ops])
    lazy = expr(*xs)
    assert isinstance(lazy, da.Array)
    np.testing.assert_allclose(lazy.compute(), np.einsum(EQ, *ops), rtol=1e-10)


def test_backend_object_uses_python_arithmetic() -> None:
    f = fractions.Fraction
    a = np.array([[f(1, 2), f(1, 3)], [f(1, 5), f(1, 7)]], dtype=object)
    b = np.array([f(2, 3), f(5, 11)], dtype=object)
    for out in (cgx.contract("ij,j->i", a, b, backend="object"), cgx.contract_expression("ij,j->i", (2, 2), (2,))(a, b, backend="object")):
        assert out.dtype == object
        assert list(out) == [f(1, 2) * f(2, 3) + f(1, 3) * f(5, 11), f(1, 5) * f(2, 3) + f(1, 7) * f(5, 11)]


def test_an_unknown_backend_says_so() -> None:
    with pytest.raises(ValueError, match="no_such_library"):
        cgx.contract("ij,jk->ik", np.ones((2, 2)), np.ones((2, 2)), backend="no_such_library")


@settings(max_examples=40, deadline=None)
@given(expressions(max_operands=4), st.integers(0, 2**32 - 1))
def test_jax_along_the_path_matches_the_engine(case, seed):
    jax = library("jax")
    eq, shapes = case
    ops = arrays(np.random.default_rng(seed), shapes)
    with jax.enable_x64(True):
        got = cgx.contract(eq, *[jax.numpy.asarray(x) for x in ops])
        np.testing.assert_allclose(np.asarray(got), cgx.contract(eq, *ops), rtol=1e-9, atol=1e-9)


def test_objects_of_libraries_without_einsum_go_to_the_engine() -> None:
    class Wrapped:
        """An array-like of a module without einsum (this test module's)."""

        def __init__(self, a):
            self.a = a
            self.shape = a.shape
            self.dtype = a.dtype

        def __array__(self, dtype=None, copy=None):
            return self.a

    a, b = operands(5, [(2, 3), (3, 4)])
    out = cgx.contract("ij,jk->ik", Wrapped(a), Wrapped(b))
    assert type(out) is np.ndarray
    np.testing.assert_allclose(out, a @ b)
