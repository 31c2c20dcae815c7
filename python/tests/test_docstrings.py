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


def test_the_package_exports_every_name_it_lists() -> None:
    # Each public name is imported as `name as name` (an explicit re-export, for type
    # checkers) beside `__all__`: what `__all__` lists must be there.
    import cgx

    assert set(cgx.__all__) >= {"contract", "contract_path", "contract_expression", "get_symbol"}
    assert all(hasattr(cgx, name) for name in cgx.__all__)
