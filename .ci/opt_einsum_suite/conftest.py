"""opt_einsum 3.4.0's own test suite with cgx standing in (see ../opt_einsum_suite.sh).

Imported by pytest before the test modules: it replaces opt_einsum's four entry points
(``contract``, ``contract_path``, ``contract_expression``, ``shared_intermediates``) by
cgx's, so that ``from opt_einsum import contract`` and ``oe.contract`` in the tests reach
cgx; everything else (``get_symbol``, the path finders, ``opt_einsum.testing``) stays
opt_einsum's. The tests that do not apply to cgx are deselected here, each with its
reason; docs/TESTING.md lists the same ones (python/tests/test_opt_einsum_compat.py
checks that the two lists agree).
"""

import fnmatch

import opt_einsum

import cgx

assert opt_einsum.__version__ == "3.4.0", f"the suite is opt_einsum 3.4.0's, but {opt_einsum.__version__} is installed"

_their_contract_path = opt_einsum.contract_path


def _contract_path(*args, **kwargs):
    """cgx's ``contract_path``; but ``jax.numpy.einsum`` calls
    ``opt_einsum.contract_path(..., einsum_call=True)`` for opt_einsum's internal
    contraction list, which is opt_einsum's business, not a user's call."""
    if kwargs.get("einsum_call"):
        return _their_contract_path(*args, **kwargs)
    return cgx.contract_path(*args, **kwargs)


opt_einsum.contract = cgx.contract
opt_einsum.contract_path = _contract_path
opt_einsum.contract_expression = cgx.contract_expression
opt_einsum.shared_intermediates = cgx.shared_intermediates

# Node ids of the tests that do not apply, and why (`*` matches any characters; brackets
# are literal).
DESELECTED = {
    # opt_einsum's internals.
    "test_edge_cases.py::test_can_blas_on_healed_broadcast_dimensions": "reads an expression's contraction_list and its BLAS choices, opt_einsum's internal step list",
    "test_sharing.py::test_multithreaded_sharing": "reads opt_einsum.sharing's cache (get_sharing_cache), not the shared results",
    "test_backends.py::test_jax_with_constants[*]": "reads the expression's cache of constants converted for JAX (_evaluated_constants); the values are checked too, by test_dispatch.py",
    "test_contract.py::test_printing": "compares the length of the printed PathInfo report with opt_einsum's layout",
    "test_edge_cases.py::test_contract_expression_checks": "matches opt_einsum's error message texts (the exception types agree)",
    # Results compared bit for bit.
    "test_sharing.py::test_sharing_value[numpy-ijk,ikj]": "compares shared and unshared results bit for bit: cgx's shared mode runs each step on its own, whose sum may run in another order than the compiled program's (they differ in the last bit here)",
    # Fails with opt_einsum itself.
    "test_backends.py::test_jax_jit_gradient": "fails with opt_einsum alone too: pytest.approx reads .flat, which JAX 0.10's arrays lack",
    # Paths that cost the same as opt_einsum's, compared by notation.
    "test_paths.py::test_can_optimize_outer_products[dp]": "dp finds a path of equal cost (the two outer products are symmetric)",
    "test_paths.py::test_path_edge_cases[optimal-dd,fb,be,cdb->cef-*]": "optimal finds another path of the same cost and largest intermediate",
    "test_paths.py::test_dp_edge_cases_dimension_1": "every size is 1, so every path costs the same; the test reads the one dp happens to find",
    # memory_limit: cgx slices a contraction to fit it; opt_einsum restricts the path.
    "test_paths.py::test_memory_paths": "memory_limit below the output: opt_einsum returns a one-step path, cgx raises MemoryError",
    "test_paths.py::test_optimal_edge_cases": "memory_limit='max_input': opt_einsum returns a path with one large final step, cgx slices",
    "test_paths.py::test_greedy_edge_cases": "memory_limit='max_input': opt_einsum returns a path with one large final step, cgx slices",
    "test_paths.py::test_dp_errors_when_no_contractions_found": "memory_limit below every path's largest intermediate: opt_einsum's dp raises, cgx slices",
}


def _matches(nodeid, pattern):
    literal = pattern.replace("[", "\0").replace("]", "[]]").replace("\0", "[[]")
    return fnmatch.fnmatchcase(nodeid, literal)


def pytest_collection_modifyitems(config, items):
    kept, dropped = [], []
    for item in items:
        (dropped if any(_matches(item.nodeid, p) for p in DESELECTED) else kept).append(item)
    unused = [p for p in DESELECTED if not any(_matches(i.nodeid, p) for i in dropped)]
    if unused and config.args == ["."]:  # the whole suite was collected
        raise RuntimeError(f"deselection patterns that match no test (stale?): {unused}")
    items[:] = kept
    config.hook.pytest_deselected(items=dropped)
