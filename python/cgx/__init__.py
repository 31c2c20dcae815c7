"""cgx: tensor contractions with opt_einsum's interface, compiled once and differentiable.

The work happens in Rust (the project's ``einsum`` crate on the ``computegraph`` engine and
the ``tidu`` AD library), reached through the extension module ``cgx._core``:

- :func:`contract` (``opt_einsum.contract``): contract numpy arrays along a path;
- :func:`contract_path` (``opt_einsum.contract_path``): the path and a cost report;
- :func:`contract_expression` (``opt_einsum.contract_expression``): compile once for fixed
  shapes, call many times, with ``value_and_grad`` and ``hvp``;
- :func:`shared_intermediates` (``opt_einsum.shared_intermediates``): a context in which
  contractions reuse each other's intermediate results;
- :func:`set_num_threads`, :func:`get_num_threads` and the context :func:`threads` (and
  the ``threads=`` keyword of ``contract`` and of an expression's calls): the threads
  contractions and their gradients run on, every core by default, a second thread used
  only where a contraction's estimated cost says it pays;
- :class:`HyperOptimizer`: the hyper-optimizing path search, as ``optimize=`` (or
  ``optimize="hyper"``);
- :func:`get_symbol` (``opt_einsum.get_symbol``): the label characters that the interleaved
  form ``contract(a, [0, 1], b, [1, 2])`` maps its labels to;
- :mod:`cgx.graph` (``cgx.graph.Graph``): the scalar graph engine, built in batches,
  compiled, evaluated and differentiated;
- ``cgx.distributed`` (``import cgx.distributed``, needs dask.distributed): sliced
  contractions and their gradients spread over a Dask cluster; ``cgx.ray`` (needs Ray)
  and ``cgx.mpi`` (needs mpi4py) the same on Ray and over MPI;
- ``cgx.jax.contract`` (``import cgx.jax``, needs JAX): differentiable in JAX by the
  engine's VJP.

See ``docs/guide-python.md`` in the repository.
"""

from . import _core, _einsum, graph
from ._hyper import HyperOptimizer as HyperOptimizer

# `name as name`: an explicit re-export, which a type checker reads (it cannot evaluate the
# `__all__` below, built from `_einsum.__all__`); without it `mypy --strict` refuses
# `cgx.contract` in user code.
from ._einsum import ContractExpression as ContractExpression
from ._einsum import PathInfo as PathInfo
from ._einsum import contract as contract
from ._einsum import contract_expression as contract_expression
from ._einsum import contract_path as contract_path
from ._einsum import get_num_threads as get_num_threads
from ._einsum import get_symbol as get_symbol
from ._einsum import set_num_threads as set_num_threads
from ._einsum import shared_intermediates as shared_intermediates
from ._einsum import threads as threads

__all__ = ["graph", "HyperOptimizer", *_einsum.__all__, "_core"]
__version__ = "0.1.0"
