"""The examples in the package's docstrings run and give what they show."""

import doctest
import importlib

import pytest

MODULES = [
    "cgx",
    "cgx._einsum",
    "cgx._parser",
    "cgx._paths",
    "cgx._expression",
    "cgx._sharing",
    "cgx.graph",
    "cgx.distributed",
    "cgx.distributed.plan",
    "cgx.jax",
    "cgx.ray",
    "cgx.mpi",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    if name in ("cgx.distributed", "cgx.jax", "cgx.ray", "cgx.mpi"):
        pytest.importorskip({"cgx.distributed": "distributed", "cgx.jax": "jax", "cgx.ray": "ray", "cgx.mpi": "mpi4py"}[name])
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed (output above)"


def test_the_package_lists_its_public_names() -> None:
    # `cgx.__all__` is a literal list (a type checker reads no other), so it must be kept
    # in step with `_einsum.__all__` by hand: every public name of the API module, and
    # every name listed, present.
    import cgx
    from cgx import _einsum

    assert set(_einsum.__all__) <= set(cgx.__all__)
    assert all(hasattr(cgx, name) for name in cgx.__all__)
